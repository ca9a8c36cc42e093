// Chrome trace-event JSON (tpuw/runtime/trace.h, docs/tracing.md).
#include "tpuw/runtime/trace.h"

#include <fmt/format.h>

#include <algorithm>

#include "tpuw/error.h"
#include "tpuw/file_io.h"

namespace tpuw::runtime {
namespace {

constexpr int kHostPid = 1;
constexpr int kDevicePid0 = 100;
// The device lanes in display order (tid = index + 1); other lanes follow.
const char* const kLanes[] = {"program", "load", "compute", "store"};

}  // namespace

Trace::Trace() : t0_(std::chrono::steady_clock::now()) {}

Trace::Track Trace::track_locked(int pid, const std::string& process, const std::string& thread) {
  processes_.try_emplace(pid, process);
  const auto key = std::make_pair(pid, thread);
  const auto it = threads_.find(key);
  if (it != threads_.end()) return Track{pid, it->second};
  int tid = 0;
  const auto lane = std::find(std::begin(kLanes), std::end(kLanes), thread);
  if (pid >= kDevicePid0 && lane != std::end(kLanes)) {
    tid = static_cast<int>(lane - std::begin(kLanes)) + 1;  // fixed: every device shows its lanes in one order
  } else {
    tid = pid >= kDevicePid0 ? static_cast<int>(std::size(kLanes)) : 0;
    for (const auto& [k, v] : threads_) {
      if (k.first == pid) tid = std::max(tid, v);
    }
    ++tid;
  }
  threads_.emplace(key, tid);
  thread_names_.emplace(std::make_pair(pid, tid), thread);
  return Track{pid, tid};
}

Trace::Track Trace::host_thread(const std::string& name) {
  const std::lock_guard<std::mutex> lock(mu_);
  return track_locked(kHostPid, "host", name);
}

Trace::Track Trace::device_lane(unsigned device, const std::string& device_name, const std::string& lane) {
  const std::lock_guard<std::mutex> lock(mu_);
  return track_locked(kDevicePid0 + static_cast<int>(device),
                      fmt::format("device {}: {} (time axis = device cycles, 1 us = 1 cycle)", device, device_name),
                      lane);
}

int64_t Trace::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_).count();
}

int64_t Trace::ns_at(std::chrono::steady_clock::time_point t) const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t - t0_).count();
}

void Trace::host_span(Track t, const std::string& name, const std::string& cat, int64_t begin_ns, int64_t end_ns,
                      nlohmann::ordered_json args) {
  end_ns = std::max(end_ns, begin_ns);
  const std::lock_guard<std::mutex> lock(mu_);
  // Whole nanoseconds in microseconds: nested scopes stay nested after the division.
  events_.push_back(Event{t, name, cat, static_cast<double>(begin_ns) / 1e3,
                          static_cast<double>(end_ns - begin_ns) / 1e3, std::move(args)});
}

void Trace::device_span(Track t, const std::string& name, const std::string& cat, uint64_t begin_cycle,
                        uint64_t end_cycle, nlohmann::ordered_json args) {
  end_cycle = std::max(end_cycle, begin_cycle);
  const std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(Event{t, name, cat, static_cast<double>(begin_cycle), static_cast<double>(end_cycle - begin_cycle),
                          std::move(args)});
}

Trace::Scope::Scope(Trace* trace, Track t, std::string name, std::string cat)
    : trace_(trace), track_(t), name_(std::move(name)), cat_(std::move(cat)),
      begin_ns_(trace != nullptr ? trace->now_ns() : 0) {}

Trace::Scope::Scope(Scope&& o) noexcept
    : trace_(o.trace_), track_(o.track_), name_(std::move(o.name_)), cat_(std::move(o.cat_)),
      begin_ns_(o.begin_ns_), args_(std::move(o.args_)) {
  o.trace_ = nullptr;
}

Trace::Scope::~Scope() {
  try {
    end();
  } catch (...) {  // a trace must never turn an error into std::terminate
  }
}

void Trace::Scope::end() {
  if (trace_ == nullptr) return;
  Trace* t = trace_;
  trace_ = nullptr;
  t->host_span(track_, name_, cat_, begin_ns_, t->now_ns(), std::move(args_));
}

Trace::Scope Trace::scope(Trace* trace, Track t, std::string name, std::string cat) {
  return Scope(trace, t, std::move(name), std::move(cat));
}

uint64_t Trace::device_clock(unsigned device) const {
  const std::lock_guard<std::mutex> lock(mu_);
  const auto it = device_clock_.find(device);
  return it == device_clock_.end() ? 0 : it->second;
}

uint64_t Trace::device_program(unsigned device, const std::string& device_name, const std::string& name,
                               const PerfCounters& perf, nlohmann::ordered_json args) {
  uint64_t start = 0;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    start = device_clock_[device];
    device_clock_[device] = start + perf.cycles;
  }
  const uint64_t end = start + perf.cycles;
  nlohmann::ordered_json a = nlohmann::ordered_json::object();
  for (const auto& [k, v] : perf.items()) a[std::string(k)] = v;
  if (args.is_object()) {
    for (auto it = args.begin(); it != args.end(); ++it) a[it.key()] = it.value();
  }
  device_span(device_lane(device, device_name, "program"), name, "program", start, end, std::move(a));
  const auto share = [&](uint64_t part) {
    return perf.cycles == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(perf.cycles);
  };
  if (perf.rd_bytes > 0) {
    device_span(device_lane(device, device_name, "load"), fmt::format("{}: {} B read", name, perf.rd_bytes), "load",
                start, end,
                {{"rd_bytes", perf.rd_bytes}, {"note", "instruction fetch + LOAD bytes of the program (PERF_RD_BYTES)"}});
  }
  if (perf.mxu_active + perf.act_busy > 0) {
    device_span(device_lane(device, device_name, "compute"),
                fmt::format("{}: MXU {:.0f}%", name, 100.0 * share(perf.mxu_active)), "compute", start, end,
                {{"mxu_active", perf.mxu_active},
                 {"act_busy", perf.act_busy},
                 {"weight_stall", perf.weight_stall},
                 {"weight_shift", perf.weight_shift},
                 {"dma_wait", perf.dma_wait},
                 {"mxu_share", share(perf.mxu_active)}});
  }
  if (perf.wr_bytes > 0) {
    device_span(device_lane(device, device_name, "store"), fmt::format("{}: {} B written", name, perf.wr_bytes),
                "store", start, end,
                {{"wr_bytes", perf.wr_bytes}, {"note", "STORE bytes + the FENCE's write (PERF_WR_BYTES)"}});
  }
  return start;
}

uint64_t Trace::device_phases(unsigned device, const std::string& device_name, const std::string& lane,
                              const std::string& name, uint64_t cycles,
                              const std::vector<std::pair<std::string, uint64_t>>& phases, nlohmann::ordered_json args) {
  uint64_t start = 0;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    start = device_clock_[device];
    device_clock_[device] = start + cycles;
  }
  const Track t = device_lane(device, device_name, lane);
  device_span(t, name, lane, start, start + cycles, std::move(args));
  uint64_t c = start;
  for (const auto& [pname, pcycles] : phases) {
    const uint64_t d = std::min(pcycles, start + cycles - c);
    if (d == 0) continue;
    device_span(t, pname, lane, c, c + d, {{"cycles", pcycles}});
    c += d;
  }
  return start;
}

void Trace::device_parts(unsigned device, const std::string& device_name, uint64_t start,
                         const std::vector<std::pair<std::string, uint64_t>>& parts) {
  const Track t = device_lane(device, device_name, "compute");
  uint64_t c = start;
  for (const auto& [name, cycles] : parts) {
    device_span(t, name, "attributed", c, c + cycles,
                {{"cycles", cycles}, {"note", "attributed share of the program's PERF_CYCLES, not a measured interval"}});
    c += cycles;
  }
}

nlohmann::ordered_json Trace::to_json() const {
  using json = nlohmann::ordered_json;
  const std::lock_guard<std::mutex> lock(mu_);
  json ev = json::array();
  for (const auto& [pid, name] : processes_) {
    ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", name}}}});
    ev.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"sort_index", pid}}}});
  }
  for (const auto& [key, name] : thread_names_) {
    ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", key.first}, {"tid", key.second},
                  {"args", {{"name", name}}}});
    ev.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", key.first}, {"tid", key.second},
                  {"args", {{"sort_index", key.second}}}});
  }
  // Per track in time order, a parent before its children (longer first on equal starts).
  std::vector<const Event*> order;
  for (const Event& e : events_) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(), [](const Event* a, const Event* b) {
    if (a->track.pid != b->track.pid) return a->track.pid < b->track.pid;
    if (a->track.tid != b->track.tid) return a->track.tid < b->track.tid;
    if (a->ts != b->ts) return a->ts < b->ts;
    return a->dur > b->dur;
  });
  for (const Event* e : order) {
    json j = {{"name", e->name}, {"cat", e->cat}, {"ph", "X"}, {"pid", e->track.pid}, {"tid", e->track.tid},
              {"ts", e->ts}, {"dur", e->dur}};
    if (!e->args.is_null()) j["args"] = e->args;
    ev.push_back(std::move(j));
  }
  json out;
  out["traceEvents"] = std::move(ev);
  out["displayTimeUnit"] = "ns";
  out["otherData"] = {{"producer", "tpuw"},
                      {"host_clock", "wall-clock microseconds since the trace began (pid 1)"},
                      {"device_clock", "device cycles, shown as microseconds (pid 100 + device index)"}};
  return out;
}

std::string trace_device_name(const Device& device) {
  return fmt::format("{} N={}", device.info().backend, device.info().params.array_n);
}

void Trace::write(const std::filesystem::path& path) const { write_trace_json(path, to_json()); }

void write_trace_json(const std::filesystem::path& path, const nlohmann::ordered_json& trace) {
  const std::string text = trace.dump(1) + "\n";
  AtomicFile f(path, "the trace file");
  f.write(std::string_view(text));
  f.commit();
}

nlohmann::ordered_json merge_rank_traces(const std::vector<nlohmann::ordered_json>& ranks) {
  using json = nlohmann::ordered_json;
  json ev = json::array();
  for (size_t r = 0; r < ranks.size(); ++r) {
    const int base = static_cast<int>(r) * kRankPidStride;
    if (!ranks[r].contains("traceEvents") || !ranks[r]["traceEvents"].is_array()) {
      throw Error(ErrorKind::kInternal, fmt::format("trace of rank {}: no traceEvents list", r));
    }
    for (json e : ranks[r]["traceEvents"]) {
      const int pid = e.at("pid").get<int>();
      if (pid < 0 || pid >= kRankPidStride) {
        throw Error(ErrorKind::kInternal, fmt::format("trace of rank {}: pid {} outside [0, {})", r, pid, kRankPidStride));
      }
      e["pid"] = base + pid;
      const std::string name = e.at("name").get<std::string>();
      if (name == "process_name") {
        e["args"]["name"] = fmt::format("rank {}: {}", r, e["args"]["name"].get<std::string>());
      } else if (name == "process_sort_index") {
        e["args"]["sort_index"] = base + pid;
      }
      ev.push_back(std::move(e));
    }
  }
  json out;
  out["traceEvents"] = std::move(ev);
  out["displayTimeUnit"] = "ns";
  out["otherData"] = {{"producer", "tpuw"},
                      {"ranks", ranks.size()},
                      {"host_clock", "wall-clock microseconds since the rank's trace began (pid 1000 * rank + 1)"},
                      {"device_clock", "device cycles, shown as microseconds (pid 1000 * rank + 100 + device index)"}};
  return out;
}

}  // namespace tpuw::runtime
