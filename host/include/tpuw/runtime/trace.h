// A timeline you can open: Chrome trace-event JSON (the "JSON Object Format" of the Trace Event
// Format) that Perfetto UI (ui.perfetto.dev) and chrome://tracing load. `tpuw run`, `tpuw train` and
// `tpuw gemm` write one with --trace FILE (docs/tracing.md).
//
//   runtime::Trace trace;
//   const auto main = trace.host_thread("main");
//   { auto s = trace.scope(main, "compile"); ... }            // a host span, wall clock
//   trace.device_program(0, "ref N=16", "network", perf);     // a device span, device cycles
//   trace.write("trace.json");                                 // atomically (AtomicFile)
//
// Tracks: every (pid, tid) pair is one track, named by metadata events (process_name,
// thread_name, *_sort_index).
//   - pid 1 "host": one thread track per host thread (compile, upload, submit, wait, ...). Time is
//     wall-clock microseconds since the Trace was made.
//   - pid 100 + K "device K": the device's own clock, 1 device cycle shown as 1 us (a device has no
//     wall clock of its own; the metadata says so). Tracks "program" (one span per program the
//     device ran: PERF_CYCLES from its doorbell to its FENCE, programs back to back in the order
//     they ran), and "load", "compute", "store": the program's activity on each queue, from the
//     PERF counters read after the program (bytes read, MXU-active and activation-unit cycles,
//     bytes written) -- the device counts per program, not per instruction, so each of these spans
//     covers its program and carries the measured amounts as args. Finer parts that are
//     attributed rather than measured (per-layer cycles of a network program) go on the compute
//     track as children with category "attributed".
// Spans on one track nest and never overlap (host scopes by construction; device spans are laid
// end to end). Thread-safe: several host threads (and the multi-device work) may add spans.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tpuw/device.h"

namespace tpuw::runtime {

class Trace {
 public:
  struct Track {
    int pid = 0;
    int tid = 0;
  };

  Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  /// The track of a host thread named `name` (made on first use; same name, same track).
  Track host_thread(const std::string& name);
  /// A device's track: lane "program", "load", "compute" or "store" (any other name makes a track
  /// too, e.g. "all-reduce"). `device_name` names the device's process on first use.
  Track device_lane(unsigned device, const std::string& device_name, const std::string& lane);

  /// Host wall-clock nanoseconds since the trace began.
  int64_t now_ns() const;
  /// `t` in host nanoseconds since the trace began (for intervals measured elsewhere).
  int64_t ns_at(std::chrono::steady_clock::time_point t) const;
  /// A complete span on a host track, in nanoseconds since the trace began.
  void host_span(Track t, const std::string& name, const std::string& cat, int64_t begin_ns, int64_t end_ns,
                 nlohmann::ordered_json args = nullptr);
  /// A complete span on a device track, in device cycles.
  void device_span(Track t, const std::string& name, const std::string& cat, uint64_t begin_cycle,
                   uint64_t end_cycle, nlohmann::ordered_json args = nullptr);

  /// A host span from construction to destruction (or end()).
  class Scope {
   public:
    Scope(Trace* trace, Track t, std::string name, std::string cat);
    ~Scope();
    Scope(Scope&& o) noexcept;
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    Scope& operator=(Scope&&) = delete;
    /// Extra args of the span (written when it ends).
    nlohmann::ordered_json& args() { return args_; }
    void end();

   private:
    Trace* trace_;
    Track track_;
    std::string name_, cat_;
    int64_t begin_ns_ = 0;
    nlohmann::ordered_json args_;
  };
  /// A host scope; a null `trace` gives a scope that records nothing (callers need not branch).
  static Scope scope(Trace* trace, Track t, std::string name, std::string cat = "host");

  /// Cycles already laid on device `device`'s tracks (where its next program starts).
  uint64_t device_clock(unsigned device) const;
  /// Lays one program of `perf.cycles` device cycles at the device's clock and advances it: a span
  /// `name` on the program lane (all counters as args, plus `args`), and on the load / compute /
  /// store lanes the program's measured activity there (when non-zero). Returns the start cycle.
  uint64_t device_program(unsigned device, const std::string& device_name, const std::string& name,
                          const PerfCounters& perf, nlohmann::ordered_json args = nullptr);
  /// A span of `cycles` device cycles on `lane` at the device's clock, which it advances, with
  /// `phases` (name, cycles) as children laid back to back from its start on the same lane (their
  /// sum clamped to `cycles`): e.g. one training step and its forward / backward / update
  /// programs, when only their cycle counts are known. Returns the start cycle.
  uint64_t device_phases(unsigned device, const std::string& device_name, const std::string& lane,
                         const std::string& name, uint64_t cycles,
                         const std::vector<std::pair<std::string, uint64_t>>& phases,
                         nlohmann::ordered_json args = nullptr);
  /// Attributed parts of the program that started at `start` (e.g. per-layer cycles): children of
  /// its compute span, back to back from `start`, category "attributed". Their cycles must not add
  /// up to more than the program's.
  void device_parts(unsigned device, const std::string& device_name, uint64_t start,
                    const std::vector<std::pair<std::string, uint64_t>>& parts);

  /// The trace as a JSON object {"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}.
  nlohmann::ordered_json to_json() const;
  /// Writes to_json() to `path` atomically (the file appears complete or not at all).
  void write(const std::filesystem::path& path) const;

 private:
  struct Event {
    Track track;
    std::string name, cat;
    double ts = 0, dur = 0;  // microseconds on the track's clock
    nlohmann::ordered_json args;
  };
  Track track_locked(int pid, const std::string& process, const std::string& thread);

  mutable std::mutex mu_;
  std::chrono::steady_clock::time_point t0_;
  std::vector<Event> events_;
  std::map<int, std::string> processes_;                    // pid -> name
  std::map<std::pair<int, std::string>, int> threads_;      // (pid, thread name) -> tid
  std::map<std::pair<int, int>, std::string> thread_names_; // (pid, tid) -> name
  std::map<unsigned, uint64_t> device_clock_;
};

/// Where a runtime function records its spans: nothing when `trace` is null.
struct TraceHook {
  Trace* trace = nullptr;
  std::string thread = "main";  ///< host track of the calling thread
  unsigned device = 0;          ///< device index (its process in the trace)
  std::string device_name;      ///< e.g. "ref N=16"

  explicit operator bool() const { return trace != nullptr; }
  Trace::Scope scope(const std::string& name, const std::string& cat = "host") const {
    return Trace::scope(trace, trace != nullptr ? trace->host_thread(thread) : Trace::Track{}, name, cat);
  }
};

/// "BACKEND N=ARRAY_N", the device name the CLI gives a device's trace process.
std::string trace_device_name(const Device& device);

/// Pid offset of an MPI rank's processes in a merged trace: rank r's pid p becomes
/// r * kRankPidStride + p (rank 0 keeps its pids).
inline constexpr int kRankPidStride = 1000;

/// One trace of several MPI ranks from their to_json() objects (indexed by rank): rank r's
/// processes get pid r * kRankPidStride + pid and the name "rank r: NAME" (sort index = pid, so
/// Perfetto shows rank 0's host and devices, then rank 1's, ...). Every rank's host clock starts at
/// its own Trace's creation (the ranks' clocks are not aligned); device clocks are per device.
nlohmann::ordered_json merge_rank_traces(const std::vector<nlohmann::ordered_json>& ranks);

/// Writes a trace JSON object (to_json() or merge_rank_traces()) to `path` atomically.
void write_trace_json(const std::filesystem::path& path, const nlohmann::ordered_json& trace);

}  // namespace tpuw::runtime
