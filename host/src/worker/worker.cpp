// tpuw::worker::Worker (tpuw/worker/worker.h): one thread per device over a shared queue and
// per-device pinned queues, with failure recovery (reset, self-test, re-creation) and retries.
//
// Locking: one mutex (State::mu) guards the queues, the statistics, the events and the flags. A
// device thread holds it only to take a job or to book what happened, never while the device runs,
// so tasks of different devices run in parallel. The Device objects themselves are touched by their
// own thread only (opened, run, reset, re-created and destroyed there).
#include "tpuw/worker/worker.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <new>
#include <span>
#include <system_error>
#include <thread>

#include "tpuw/asm.h"

namespace tpuw::worker {
namespace {

using Clock = std::chrono::steady_clock;
using JobPtr = std::unique_ptr<detail::Job>;

bool is_device_failure(ErrorKind kind) { return kind == ErrorKind::kDeviceFault || kind == ErrorKind::kTimeout; }

const char* kind_text(ErrorKind kind) { return kind == ErrorKind::kTimeout ? "timeout" : "device fault"; }

}  // namespace

struct Worker::State {
  explicit State(const WorkerOptions& o)
      : options(o),
        start(Clock::now()),
        pinned(o.devices),
        stats(o.devices),
        exited(o.devices, false),
        out_of_memory(std::make_exception_ptr(Error(
            ErrorKind::kResource, fmt::format("Worker: out of memory while opening {} devices (use fewer devices or "
                                              "raise the process limits)",
                                              o.devices)))) {
    for (unsigned i = 0; i < o.devices; ++i) stats[i].index = i;
  }

  const WorkerOptions options;
  const Clock::time_point start;

  mutable std::mutex mu;
  std::condition_variable work_cv;  // queues changed, a device changed state, or stopping
  std::condition_variable open_cv;  // a device finished opening
  std::condition_variable idle_cv;  // a device finished a job (and its recovery)
  std::deque<JobPtr> shared;
  std::vector<std::deque<JobPtr>> pinned;
  std::vector<DeviceStats> stats;
  std::vector<bool> exited;  // the device thread has left its loop
  unsigned busy = 0;         // devices running a job or recovering
  std::vector<std::string> events;
  unsigned opened = 0;
  std::exception_ptr open_error;
  // Made up front: when opening fails because memory is exhausted, building the error's own message
  // may fail too, and a bad_alloc escaping a device thread (or the constructor with threads
  // running) is std::terminate.
  const std::exception_ptr out_of_memory;
  bool stopping = false;
  bool cancel = false;
  uint64_t next_id = 1;

  std::mutex shutdown_mu;  // one shutdown() at a time (it joins)
  std::vector<std::thread> threads;
  std::vector<std::thread::id> thread_ids;

  // ---- with mu held -------------------------------------------------------------------------
  void event(std::optional<unsigned> device, const std::string& text) {
    const double t = std::chrono::duration<double>(Clock::now() - start).count();
    if (device) {
      events.push_back(fmt::format("+{:.3f}s device {}: {}", t, *device, text));
    } else {
      events.push_back(fmt::format("+{:.3f}s worker: {}", t, text));
    }
  }

  bool available(unsigned i) const { return stats[i].healthy && !exited[i]; }

  unsigned healthy_count() const {
    unsigned n = 0;
    for (const auto& s : stats) n += s.healthy ? 1u : 0u;
    return n;
  }

  unsigned available_count() const {
    unsigned n = 0;
    for (unsigned j = 0; j < stats.size(); ++j) n += available(j) ? 1u : 0u;
    return n;
  }

  bool other_available(unsigned i) const {
    for (unsigned j = 0; j < stats.size(); ++j) {
      if (j != i && available(j)) return true;
    }
    return false;
  }

  // The next job for device i: its pinned queue first, then the oldest shared job it may run (a
  // job avoids the device it last failed on while another device can take it).
  JobPtr take(unsigned i) {
    if (!stats[i].healthy) return nullptr;
    JobPtr job;
    if (!pinned[i].empty()) {
      job = std::move(pinned[i].front());
      pinned[i].pop_front();
    } else {
      const bool others = other_available(i);
      for (auto it = shared.begin(); it != shared.end(); ++it) {
        if ((*it)->avoid == i && others) continue;
        job = std::move(*it);
        shared.erase(it);
        break;
      }
    }
    if (job) ++busy;
    if (job && job->attempts > 0) {
      const unsigned failed_on = job->avoid.value_or(i);
      if (failed_on != i) {
        ++stats[failed_on].retried_elsewhere;
        event(i, fmt::format("retrying '{}' (attempt {}/{}), failed on device {}", job->options.name,
                             job->attempts + 1, options.max_attempts, failed_on));
      } else {
        event(i, fmt::format("retrying '{}' on the same device (attempt {}/{})", job->options.name,
                             job->attempts + 1, options.max_attempts));
      }
    }
    return job;
  }

  bool should_exit(unsigned i) const {
    return !stats[i].healthy || (stopping && pinned[i].empty() && shared.empty());
  }

  static void fail(JobPtr job, std::exception_ptr e) { job->fail(std::move(e)); }

  std::string history_text(const detail::Job& job) const {
    return job.history.empty() ? std::string() : fmt::format(" ({})", fmt::join(job.history, "; "));
  }

  void fail_no_device(JobPtr job) {
    const std::string what =
        fmt::format("{}: no healthy device left: all {} devices failed and could not be reset or re-created "
                    "(see Worker::events()){}",
                    job->options.name, stats.size(), history_text(*job));
    fail(std::move(job), std::make_exception_ptr(Error(ErrorKind::kDeviceFault, what)));
  }

  // After device i left the rotation: its pinned jobs fail; with no device left, every job does.
  void drop_jobs_of_lost_device(unsigned i) {
    while (!pinned[i].empty()) {
      JobPtr job = std::move(pinned[i].front());
      pinned[i].pop_front();
      const std::string what = fmt::format("{}: pinned to device {}, which failed and left the rotation{}",
                                           job->options.name, i, history_text(*job));
      fail(std::move(job), std::make_exception_ptr(Error(ErrorKind::kDeviceFault, what)));
    }
    if (available_count() == 0) {
      event(std::nullopt, fmt::format("no healthy device left: {} queued task(s) fail", shared.size()));
      while (!shared.empty()) {
        JobPtr job = std::move(shared.front());
        shared.pop_front();
        fail_no_device(std::move(job));
      }
    }
  }

  void cancel_queued() {
    auto cancel_one = [&](JobPtr job) {
      const std::string what =
          fmt::format("{}: cancelled, the worker shut down before it ran{}", job->options.name, history_text(*job));
      fail(std::move(job), std::make_exception_ptr(Cancelled(what)));
    };
    size_t n = shared.size();
    while (!shared.empty()) {
      cancel_one(std::move(shared.front()));
      shared.pop_front();
    }
    for (auto& q : pinned) {
      n += q.size();
      while (!q.empty()) {
        cancel_one(std::move(q.front()));
        q.pop_front();
      }
    }
    if (n != 0) event(std::nullopt, fmt::format("shutdown cancelled {} queued task(s)", n));
    idle_cv.notify_all();
  }

  // ---- device thread ------------------------------------------------------------------------
  Device open_device(unsigned i) const {
    if (options.make_backend) return Device(options.make_backend(i), options.device_options);
    return Device::open(options.backend, options.config, options.device_options);
  }

  // An empty program: fetch, FENCE write to host memory, interrupt. Throws like Device::run.
  static void self_test(Device& dev) {
    dev.run(std::span<const isa::Word>{});
    if (auto f = dev.fault()) throw Error(ErrorKind::kDeviceFault, fmt::format("self-test: {}", f->message()));
  }

  void book(unsigned i, const std::string& text) {
    std::lock_guard lk(mu);
    event(i, text);
  }

  // Soft reset + self-test; else re-create + self-test; else the device leaves the rotation.
  // Returns whether the device is usable. Called without mu.
  bool recover(unsigned i, std::optional<Device>& dev, std::map<std::string, std::shared_ptr<void>>& resident,
               uint64_t& generation) {
    resident.clear();  // HostBuffers must not outlive their Device, and device state is gone
    ++generation;
    try {
      {
        std::lock_guard lk(mu);
        ++stats[i].resets;
      }
      dev->reset();
      if (options.self_test) self_test(*dev);
      book(i, options.self_test ? "reset; self-test passed" : "reset");
      return true;
    } catch (const std::exception& e) {
      book(i, fmt::format("reset failed: {}", e.what()));
    }
    dev.reset();
    try {
      {
        std::lock_guard lk(mu);
        ++stats[i].recreations;
      }
      dev.emplace(open_device(i));
      if (options.self_test) self_test(*dev);
      book(i, options.self_test ? "re-created; self-test passed" : "re-created");
      return true;
    } catch (const std::exception& e) {
      dev.reset();
      book(i, fmt::format("re-creation failed: {}; the device leaves the rotation", e.what()));
    }
    return false;
  }

  void run_job(unsigned i, JobPtr job, std::optional<Device>& dev,
               std::map<std::string, std::shared_ptr<void>>& resident, uint64_t& generation) {
    ++job->attempts;
    DeviceSlot slot{i, *dev, resident, generation};
    const auto t0 = Clock::now();
    const uint64_t c0 = dev->busy_cycles();
    bool failed = false;
    ErrorKind kind = ErrorKind::kInternal;
    std::string message;
    std::exception_ptr own_error;
    try {
      job->run(slot);
    } catch (const Error& e) {
      if (is_device_failure(e.kind())) {
        failed = true;
        kind = e.kind();
        message = e.what();
      } else {
        own_error = std::current_exception();
      }
    } catch (...) {
      own_error = std::current_exception();
    }
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    uint64_t dc = 0;
    try {
      dc = dev->busy_cycles() - c0;  // the device's own PERF_CYCLES, not a simulator's clock
    } catch (const Error&) {  // a device that stopped answering; the failure is handled below
    }

    std::unique_lock lk(mu);
    stats[i].busy_s += dt;
    stats[i].device_cycles += dc;
    if (!failed) {
      ++stats[i].tasks;
      lk.unlock();
      // Booked first, delivered after: a ready future sees its run in stats().
      if (own_error) {
        fail(std::move(job), std::move(own_error));  // no reference stays behind on this thread
      } else {
        job->deliver();
      }
      return;
    }
    ++stats[i].failures;
    job->history.push_back(fmt::format("device {}: {}", i, message));
    event(i, fmt::format("'{}' failed ({}, attempt {}/{}): {}", job->options.name, kind_text(kind), job->attempts,
                         options.max_attempts, message));
    if (stopping && cancel) {
      const std::string what = fmt::format("{}: {} on device {}, not retried because the worker is shutting down: {}",
                                           job->options.name, kind_text(kind), i, message);
      fail(std::move(job), std::make_exception_ptr(Error(kind, what)));
    } else if (job->attempts >= options.max_attempts) {
      const std::string what = fmt::format("{}: failed on all {} attempt(s): {}", job->options.name, job->attempts,
                                           fmt::join(job->history, "; "));
      fail(std::move(job), std::make_exception_ptr(Error(kind, what)));
    } else if (!job->options.device && other_available(i)) {
      job->avoid = i;  // another device takes it while this one recovers
      shared.push_front(std::move(job));
      work_cv.notify_all();
    }
    lk.unlock();

    const bool ok = recover(i, dev, resident, generation);

    lk.lock();
    if (!ok) stats[i].healthy = false;
    if (job) {  // not requeued yet: retry here, or elsewhere if this device is lost
      job->avoid = i;
      if (job->options.device) {
        if (ok) {
          pinned[i].push_front(std::move(job));
        } else {
          const std::string what = fmt::format("{}: pinned to device {}, which failed and left the rotation{}",
                                               job->options.name, i, history_text(*job));
          fail(std::move(job), std::make_exception_ptr(Error(ErrorKind::kDeviceFault, what)));
        }
      } else if (available_count() > 0) {
        shared.push_front(std::move(job));
      } else {
        fail_no_device(std::move(job));
      }
    }
    if (!ok) drop_jobs_of_lost_device(i);
    work_cv.notify_all();
    idle_cv.notify_all();
  }

  // The kResource error of a failed open with the message `make` builds, or `out_of_memory` when
  // building it fails: allocates nothing that can escape.
  template <class MakeMessage>
  std::exception_ptr describe_open_failure(MakeMessage make) const noexcept {
    try {
      return std::make_exception_ptr(Error(ErrorKind::kResource, make()));
    } catch (...) {
      return out_of_memory;
    }
  }

  void device_loop(unsigned i) {
    std::optional<Device> dev;
    std::exception_ptr failed;
    try {
      dev.emplace(open_device(i));
    } catch (const std::bad_alloc&) {
      failed = describe_open_failure(
          [&] { return fmt::format("device {}: out of memory while opening the backend", i); });
    } catch (const std::system_error& e) {
      failed = describe_open_failure([&] {
        return fmt::format("device {}: cannot open the backend: {} (out of threads or memory)", i, e.what());
      });
    } catch (...) {
      failed = std::current_exception();
    }
    {
      std::unique_lock lk(mu);
      if (dev) {
        const DeviceInfo& info = dev->info();
        try {
          event(i, fmt::format("opened ({}, array {}x{})", info.backend, info.params.array_n, info.params.array_n));
        } catch (const std::bad_alloc&) {
          failed = out_of_memory;
        }
      }
      if (failed) {
        if (!open_error) open_error = failed;
        stats[i].healthy = false;
      }
      ++opened;
      open_cv.notify_all();
      open_cv.wait(lk, [&] { return opened == stats.size(); });
      if (open_error) {
        exited[i] = true;
        return;  // the constructor throws; dev is destroyed here, on its own thread
      }
    }

    std::map<std::string, std::shared_ptr<void>> resident;
    uint64_t generation = 0;
    for (;;) {
      JobPtr job;
      {
        std::unique_lock lk(mu);
        work_cv.wait(lk, [&] {
          job = take(i);
          return job != nullptr || should_exit(i);
        });
        if (!job) {
          exited[i] = true;
          work_cv.notify_all();  // jobs that avoided this device may now run elsewhere
          idle_cv.notify_all();
          break;
        }
      }
      run_job(i, std::move(job), dev, resident, generation);
      std::lock_guard lk(mu);
      --busy;
      idle_cv.notify_all();
    }
    resident.clear();
    dev.reset();
  }
};

Worker::Worker(const WorkerOptions& options) {
  if (options.devices == 0) throw Error(ErrorKind::kInvalidArgument, "Worker: devices must be >= 1");
  if (options.max_attempts == 0) throw Error(ErrorKind::kInvalidArgument, "Worker: max_attempts must be >= 1");
  state_ = std::make_shared<State>(options);
  State& s = *state_;
  s.threads.reserve(options.devices);
  s.thread_ids.reserve(options.devices);  // before any thread runs: no allocation below may throw
  for (unsigned i = 0; i < options.devices; ++i) {
    // Out of threads, or of memory for a stack or for std::thread's own state: the devices already
    // started see `opened` complete with an error and exit, and the constructor reports the
    // resource instead of std::terminate on a joinable thread.
    std::exception_ptr failed;
    try {
      s.threads.emplace_back([&s, i] { s.device_loop(i); });
    } catch (const std::bad_alloc&) {
      failed = s.out_of_memory;
    } catch (const std::system_error& e) {
      failed = s.describe_open_failure([&] {
        return fmt::format(
            "Worker: cannot start the thread of device {} of {}: {} (out of threads or memory: use fewer devices or "
            "raise the process limits)",
            i, options.devices, e.what());
      });
    }
    if (failed) {
      std::lock_guard lk(s.mu);
      if (!s.open_error) s.open_error = failed;
      s.opened += options.devices - i;  // these devices will never report
      s.open_cv.notify_all();
      break;
    }
    s.thread_ids.push_back(s.threads.back().get_id());
  }
  std::exception_ptr error;
  {
    std::unique_lock lk(s.mu);
    s.open_cv.wait(lk, [&] { return s.opened == s.stats.size(); });
    error = s.open_error;
  }
  if (error) {
    for (auto& t : s.threads) t.join();
    std::rethrow_exception(error);
  }
}

Worker::~Worker() { shutdown(true); }

unsigned Worker::size() const { return state_->options.devices; }

unsigned Worker::healthy() const {
  std::lock_guard lk(state_->mu);
  return state_->healthy_count();
}

const WorkerOptions& Worker::options() const { return state_->options; }

void Worker::enqueue(std::unique_ptr<detail::Job> job) {
  State& s = *state_;
  std::lock_guard lk(s.mu);
  job->id = s.next_id++;
  if (job->options.name.empty()) job->options.name = fmt::format("task {}", job->id);
  if (s.stopping) {
    State::fail(std::move(job), std::make_exception_ptr(Cancelled(
                                    fmt::format("{}: the worker is shut down", job->options.name))));
    return;
  }
  if (const auto d = job->options.device) {
    if (*d >= s.stats.size()) {
      const std::string what = fmt::format("{}: pinned to device {}, but the worker has {} device(s)",
                                           job->options.name, *d, s.stats.size());
      State::fail(std::move(job), std::make_exception_ptr(Error(ErrorKind::kInvalidArgument, what)));
      return;
    }
    if (!s.stats[*d].healthy) {
      const std::string what =
          fmt::format("{}: pinned to device {}, which failed and left the rotation", job->options.name, *d);
      State::fail(std::move(job), std::make_exception_ptr(Error(ErrorKind::kDeviceFault, what)));
      return;
    }
    s.pinned[*d].push_back(std::move(job));
  } else {
    if (s.healthy_count() == 0) {
      s.fail_no_device(std::move(job));
      return;
    }
    s.shared.push_back(std::move(job));
  }
  s.work_cv.notify_all();
}

void Worker::shutdown(bool cancel_pending) {
  State& s = *state_;
  for (const auto& id : s.thread_ids) {
    if (id == std::this_thread::get_id()) {
      throw Error(ErrorKind::kInvalidArgument, "Worker::shutdown called from a task (it would wait for itself)");
    }
  }
  std::lock_guard guard(s.shutdown_mu);
  {
    std::lock_guard lk(s.mu);
    if (!s.stopping) s.event(std::nullopt, cancel_pending ? "shutdown (cancel queued tasks)" : "shutdown (drain)");
    s.stopping = true;
    if (cancel_pending) {
      s.cancel = true;
      s.cancel_queued();
    }
    s.work_cv.notify_all();
  }
  for (auto& t : s.threads) {
    if (t.joinable()) t.join();
  }
}

void Worker::wait_idle() const {
  State& s = *state_;
  std::unique_lock lk(s.mu);
  s.idle_cv.wait(lk, [&] {
    if (s.busy != 0 || !s.shared.empty()) return false;
    for (unsigned i = 0; i < s.pinned.size(); ++i) {
      if (!s.pinned[i].empty() && s.available(i)) return false;
    }
    return true;
  });
}

std::vector<DeviceStats> Worker::stats() const {
  std::lock_guard lk(state_->mu);
  return state_->stats;
}

std::vector<std::string> Worker::events() const {
  std::lock_guard lk(state_->mu);
  return state_->events;
}

}  // namespace tpuw::worker
