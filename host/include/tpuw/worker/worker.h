// tpuw::worker::Worker: many devices behind one runtime.
//
//   tpuw::worker::WorkerOptions o;
//   o.backend = "rtl";  o.devices = 4;
//   tpuw::worker::Worker w(o);                        // opens 4 devices, one thread each
//   std::future<std::vector<int32_t>> f = w.submit([&](tpuw::worker::DeviceSlot& s) {
//     return tpuw::runtime::gemm(s.device, a, b, ...); // uploads its own inputs: re-runnable
//   });
//   auto c = f.get();                                  // value, or the task's Error
//
// Threads: every device is opened, driven and destroyed by its own thread and by no other. A
// task runs on exactly one device thread at a time; it must touch only the slot it is given
// (and its own captures). Tasks wait in a shared queue (any device) or a per-device queue
// (TaskOptions::device, e.g. pipeline stages); an idle device thread takes its pinned tasks
// first, then the oldest shared one. Threads sleep on condition variables; a busy thread spends
// its time in Device::wait, i.e. in the backend (the simulation's work). Results come back through
// the futures; tasks of one submitter complete in any order, so keep the futures in order.
//
// Failures:
//   - a task that throws Error(kDeviceFault) or Error(kTimeout) marks its device as failed: the
//     thread resets it (Device::reset) and checks it with a one-fence self-test; when either fails
//     it re-creates the device from backend name + config and self-tests again; when that fails
//     too the device leaves the rotation for good (DeviceStats::healthy = false). The slot's
//     resident cache is cleared on every reset / re-creation.
//   - the task is then retried, on another healthy device when there is one (the failed one
//     otherwise, or when the task is pinned), up to WorkerOptions::max_attempts runs in total.
//     Tasks must therefore be re-runnable: each run uploads its inputs itself and returns its
//     result only through the return value, so a retried task gives exactly the fault-free result.
//   - any other exception (kInvalidArgument, kBadFile, a std::exception, ...) is the task's own
//     error: it goes to the future unchanged and is not retried.
//   - when the attempts are used up, the future gets Error(kind of the last failure) whose message
//     lists every attempt (device, error). When no healthy device is left, every queued task and
//     every later submit() fails with Error(kDeviceFault, "no healthy device left ...").
//   - shutdown(true) / the destructor: queued tasks fail with Cancelled; tasks already running
//     finish (a failure during shutdown is not retried). shutdown(false) lets the queues drain.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tpuw/backend.h"
#include "tpuw/device.h"
#include "tpuw/error.h"

namespace tpuw::worker {

struct WorkerOptions {
  std::string backend = "rtl";    // make_backend name ("rtl", "ref", ...)
  BackendConfig config;           // the same for every device
  unsigned devices = 1;           // K >= 1
  DeviceOptions device_options;
  unsigned max_attempts = 3;      // runs of one task in total (first run included), >= 1
  bool self_test = true;          // run a one-fence program after each reset / re-creation
  /// Creates the backend of device `index` (at opening and at every re-creation), from the device's
  /// own thread; must be safe to call from several threads at once. Default (empty):
  /// tpuw::make_backend(backend, config). Tests use it to build devices that fail.
  std::function<std::unique_ptr<Backend>(unsigned index)> make_backend;
};

/// What a task gets: the device it runs on (driven only from this thread) and a per-device cache
/// for data kept on the device between tasks (e.g. uploaded weights). The cache is cleared when the
/// device is reset or re-created; `generation` counts those, so a task can tell.
struct DeviceSlot {
  unsigned index;
  Device& device;
  std::map<std::string, std::shared_ptr<void>>& resident;
  uint64_t generation = 0;
};

struct TaskOptions {
  std::optional<unsigned> device = std::nullopt;  // pin to this device (retries stay on it); unset = any
  std::string name = {};  // for events and error messages; default "task <n>" (n counts submissions from 1)
};

struct DeviceStats {
  unsigned index = 0;
  uint64_t tasks = 0;              // task runs that completed (value or the task's own error)
  uint64_t failures = 0;           // runs that ended in kDeviceFault / kTimeout on this device
  uint64_t resets = 0;             // soft resets (Device::reset) after a failure
  uint64_t recreations = 0;        // devices re-created after a failed reset or self-test
  uint64_t retried_elsewhere = 0;  // tasks that failed here and were retried on another device
  double busy_s = 0;               // wall time spent running tasks
  uint64_t device_cycles = 0;      // device clock cycles spent running tasks
  bool healthy = true;             // false: out of rotation for good
};

/// The error queued tasks get when the worker shuts down (kind kUnsupported: the request was
/// valid, the worker can no longer run it).
class Cancelled : public Error {
 public:
  explicit Cancelled(const std::string& message) : Error(ErrorKind::kCancelled, message) {}
};

namespace detail {
struct Job {
  std::function<void(DeviceSlot&)> run;          // runs the task once, keeps its value
  std::function<void()> deliver;                 // hands the kept value to the future
  std::function<void(std::exception_ptr)> fail;  // sets the promise's exception
  TaskOptions options;
  uint64_t id = 0;
  unsigned attempts = 0;
  std::optional<unsigned> avoid;                 // the device it last failed on
  std::vector<std::string> history;              // "device i: message" per failed attempt
};
}  // namespace detail

class Worker {
 public:
  /// Opens options.devices devices (each on its own thread, in parallel). Throws the first
  /// opening error (e.g. Error(kInvalidArgument) for an unknown backend) after stopping the rest.
  explicit Worker(const WorkerOptions& options);
  /// shutdown(true).
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  /// Number of devices (healthy or not).
  unsigned size() const;
  /// Number of devices in rotation.
  unsigned healthy() const;
  const WorkerOptions& options() const;

  /// Queues `task` (callable as R(DeviceSlot&)). The future gets its return value or its error.
  /// A pinned device index >= size() gives Error(kInvalidArgument) in the future.
  template <class F>
  auto submit(F&& task, TaskOptions options = {}) -> std::future<std::invoke_result_t<F&, DeviceSlot&>> {
    using R = std::invoke_result_t<F&, DeviceSlot&>;
    struct Shared {
      std::promise<R> promise;
      std::optional<std::conditional_t<std::is_void_v<R>, bool, R>> value;
    };
    auto shared = std::make_shared<Shared>();
    std::future<R> future = shared->promise.get_future();
    auto job = std::make_unique<detail::Job>();
    job->run = [shared, fn = std::forward<F>(task)](DeviceSlot& slot) mutable {
      if constexpr (std::is_void_v<R>) {
        fn(slot);
        shared->value.emplace(true);
      } else {
        shared->value.emplace(fn(slot));
      }
    };
    job->deliver = [shared] {
      if constexpr (std::is_void_v<R>) {
        shared->promise.set_value();
      } else {
        shared->promise.set_value(std::move(*shared->value));
      }
    };
    job->fail = [shared](std::exception_ptr e) { shared->promise.set_exception(std::move(e)); };
    job->options = std::move(options);
    enqueue(std::move(job));
    return future;
  }

  /// Blocks until every queue is empty and every device is idle (failed devices recovered or out
  /// of rotation), so stats() and events() are final for the work submitted so far.
  void wait_idle() const;

  /// Stops accepting tasks; cancel_pending: queued tasks fail with Cancelled, otherwise they run
  /// first. Returns when every device thread has finished (running tasks complete). Idempotent.
  void shutdown(bool cancel_pending = true);

  /// Snapshot of the per-device statistics, by index.
  std::vector<DeviceStats> stats() const;
  /// What happened, in order: opening, failures, resets, re-creations, retries, devices leaving
  /// the rotation ("+1.234s device 1: ..." lines).
  std::vector<std::string> events() const;

 private:
  struct State;
  void enqueue(std::unique_ptr<detail::Job> job);
  std::shared_ptr<State> state_;
};

}  // namespace tpuw::worker
