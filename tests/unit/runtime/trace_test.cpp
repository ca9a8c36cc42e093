// The trace writer (tpuw/runtime/trace.h): Chrome trace-event JSON whose every track is named by
// metadata events and whose spans nest and never overlap within a track; the network runs record
// compile/upload/submit/wait on the host and their programs on the device.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <unistd.h>

#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/runtime/network.h"
#include "tpuw/runtime/network_bf16.h"
#include "tpuw/runtime/trace.h"

namespace tpuw::runtime {
namespace {

using json = nlohmann::ordered_json;

struct Span {
  double ts, dur;
  std::string name, cat;
};

// Checks the structure and returns the spans per (pid, tid), sorted.
std::map<std::pair<int, int>, std::vector<Span>> check_trace(const json& j) {
  std::map<std::pair<int, int>, std::vector<Span>> tracks;
  EXPECT_TRUE(j.is_object());
  EXPECT_TRUE(j.contains("traceEvents") && j["traceEvents"].is_array());
  std::set<int> named_pids;
  std::set<std::pair<int, int>> named_threads;
  for (const json& e : j["traceEvents"]) {
    EXPECT_TRUE(e.contains("name") && e["name"].is_string()) << e.dump();
    EXPECT_TRUE(e.contains("ph") && e["ph"].is_string()) << e.dump();
    EXPECT_TRUE(e.contains("pid") && e["pid"].is_number_integer()) << e.dump();
    EXPECT_TRUE(e.contains("tid") && e["tid"].is_number_integer()) << e.dump();
    const std::string ph = e["ph"];
    const int pid = e["pid"], tid = e["tid"];
    if (ph == "M") {
      const std::string name = e["name"];
      EXPECT_TRUE(e["args"].is_object()) << e.dump();
      if (name == "process_name") named_pids.insert(pid);
      else if (name == "thread_name") named_threads.insert({pid, tid});
      else EXPECT_TRUE(name == "process_sort_index" || name == "thread_sort_index") << e.dump();
    } else {
      EXPECT_EQ(ph, "X") << e.dump();
      EXPECT_TRUE(e["ts"].is_number() && e["dur"].is_number()) << e.dump();
      EXPECT_GE(e["ts"].get<double>(), 0.0);
      EXPECT_GE(e["dur"].get<double>(), 0.0);
      tracks[{pid, tid}].push_back({e["ts"].get<double>(), e["dur"].get<double>(), e["name"], e.value("cat", "")});
    }
  }
  for (auto& [key, spans] : tracks) {
    EXPECT_TRUE(named_pids.contains(key.first)) << "pid " << key.first << " has no process_name";
    EXPECT_TRUE(named_threads.contains(key)) << "track " << key.first << "/" << key.second << " has no thread_name";
    std::stable_sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
      return a.ts != b.ts ? a.ts < b.ts : a.dur > b.dur;
    });
    // Nesting: a span that starts inside an open one ends inside it too.
    std::vector<const Span*> open;
    for (const Span& s : spans) {
      while (!open.empty() && open.back()->ts + open.back()->dur <= s.ts + 1e-6) open.pop_back();
      if (!open.empty()) {
        EXPECT_LE(s.ts + s.dur, open.back()->ts + open.back()->dur + 1e-6)
            << "'" << s.name << "' overlaps '" << open.back()->name << "' on track " << key.first << "/" << key.second;
      }
      open.push_back(&s);
    }
  }
  return tracks;
}

std::vector<std::string> names_on(const std::map<std::pair<int, int>, std::vector<Span>>& tracks, std::pair<int, int> key) {
  std::vector<std::string> out;
  const auto it = tracks.find(key);
  if (it == tracks.end()) return out;
  for (const Span& s : it->second) out.push_back(s.name);
  return out;
}

bool has(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

TEST(Trace, HostScopesNestAndThreadsGetTracks) {
  Trace t;
  const Trace::Track main = t.host_thread("main");
  EXPECT_EQ(t.host_thread("main").tid, main.tid);  // same name, same track
  {
    auto outer = Trace::scope(&t, main, "outer");
    { auto inner = Trace::scope(&t, main, "inner"); }
    auto second = Trace::scope(&t, main, "second");
    second.args() = {{"k", 1}};
  }
  std::thread worker([&t] {
    auto s = Trace::scope(&t, t.host_thread("worker"), "work");
    auto s2 = Trace::scope(&t, t.host_thread("worker"), "part");
  });
  worker.join();
  { auto none = Trace::scope(nullptr, main, "not recorded"); }
  const auto tracks = check_trace(t.to_json());
  const auto m = names_on(tracks, {main.pid, main.tid});
  EXPECT_EQ(m.size(), 3u);
  EXPECT_TRUE(has(m, "outer") && has(m, "inner") && has(m, "second"));
  const Trace::Track w = t.host_thread("worker");
  EXPECT_NE(w.tid, main.tid);
  EXPECT_EQ(names_on(tracks, {w.pid, w.tid}).size(), 2u);
}

TEST(Trace, DeviceProgramsAreBackToBackInCycles) {
  Trace t;
  PerfCounters p;
  p.cycles = 1000;
  p.mxu_active = 600;
  p.rd_bytes = 4096;
  p.wr_bytes = 260;
  EXPECT_EQ(t.device_program(0, "ref N=16", "first", p), 0u);
  t.device_parts(0, "ref N=16", 0, {{"layer a", 700}, {"layer b", 300}});
  EXPECT_EQ(t.device_program(0, "ref N=16", "second", p), 1000u);
  EXPECT_EQ(t.device_clock(0), 2000u);
  EXPECT_EQ(t.device_program(1, "rtl N=16", "other", p), 0u);  // each device has its own clock
  EXPECT_EQ(t.device_phases(0, "ref N=16", "program", "step 1", 500, {{"forward", 200}, {"backward", 250}, {"update", 90}}),
            2000u);
  const json j = t.to_json();
  const auto tracks = check_trace(j);
  const Trace::Track prog = t.device_lane(0, "ref N=16", "program");
  const auto names = names_on(tracks, {prog.pid, prog.tid});
  EXPECT_EQ(names, (std::vector<std::string>{"first", "second", "step 1", "forward", "backward", "update"}));
  const auto& spans = tracks.at({prog.pid, prog.tid});
  EXPECT_EQ(spans[1].ts, 1000.0);
  EXPECT_EQ(spans[1].dur, 1000.0);
  EXPECT_EQ(spans[5].dur, 50.0);  // update clamped to the step's 500 cycles
  const Trace::Track compute = t.device_lane(0, "ref N=16", "compute");
  const auto cn = names_on(tracks, {compute.pid, compute.tid});
  EXPECT_TRUE(has(cn, "layer a") && has(cn, "layer b") && has(cn, "first: MXU 60%")) << j.dump(1);
  EXPECT_EQ(compute.tid, 3);  // program, load, compute, store
  // Device 1 is its own process.
  EXPECT_NE(t.device_lane(1, "rtl N=16", "program").pid, prog.pid);
}

TEST(Trace, MergesRanksWithPidPerRank) {
  std::vector<json> ranks;
  for (int r = 0; r < 2; ++r) {
    Trace t;
    { auto s = Trace::scope(&t, t.host_thread("main"), "run"); }
    PerfCounters p;
    p.cycles = 100 + static_cast<uint64_t>(r);
    t.device_program(0, "ref N=16", "prog", p);
    ranks.push_back(t.to_json());
  }
  const json m = merge_rank_traces(ranks);
  std::map<int, std::string> procs;
  std::map<int, int> sort;
  std::map<int, double> prog_dur;
  for (const json& e : m["traceEvents"]) {
    const int pid = e["pid"].get<int>();
    if (e["name"] == "process_name") procs[pid] = e["args"]["name"].get<std::string>();
    if (e["name"] == "process_sort_index") sort[pid] = e["args"]["sort_index"].get<int>();
    if (e["ph"] == "X" && e["name"] == "prog") prog_dur[pid] = e["dur"].get<double>();
  }
  EXPECT_EQ(procs.at(1), "rank 0: host");
  EXPECT_EQ(procs.at(1001), "rank 1: host");
  EXPECT_TRUE(procs.at(1100).starts_with("rank 1: device 0"));
  EXPECT_EQ(sort.at(1100), 1100);
  EXPECT_EQ(prog_dur.at(100), 100.0);
  EXPECT_EQ(prog_dur.at(1100), 101.0);
  EXPECT_EQ(m["otherData"]["ranks"], 2);
  EXPECT_THROW(merge_rank_traces({json::object()}), Error);
}

TEST(Trace, WritesAtomicallyAndReadsBack) {
  Trace t;
  { auto s = Trace::scope(&t, t.host_thread("main"), "x"); }
  const auto dir = std::filesystem::temp_directory_path() / ("tpuw_trace_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "trace.json";
  t.write(path);
  std::ifstream in(path);
  const json j = json::parse(in);
  check_trace(j);
  EXPECT_EQ(j["traceEvents"].back()["name"], "x");
  EXPECT_THROW(t.write(dir / "missing" / "trace.json"), Error);
  std::filesystem::remove_all(dir);
}

TEST(Trace, NetworkRunsRecordHostAndDevice) {
  BackendConfig bc;
  bc.array_n = 4;
  Device dev = Device::open("ref", bc);
  Trace t;
  TraceHook hook;
  hook.trace = &t;
  hook.device_name = trace_device_name(dev);
  EXPECT_EQ(hook.device_name, "ref N=4");
  // bf16
  std::mt19937 rng(1);
  std::normal_distribution<float> g;
  nn::FloatNetwork fn;
  fn.input_features = 6;
  for (auto [k, n] : {std::pair<uint32_t, uint32_t>{6, 9}, {9, 3}}) {
    nn::DenseLayer l;
    l.name = "fc" + std::to_string(k);
    l.k = k;
    l.n = n;
    for (uint32_t i = 0; i < k * n; ++i) l.w.push_back(g(rng));
    l.b.assign(n, 0.5f);
    l.relu = k == 6;
    fn.layers.push_back(l);
  }
  std::vector<float> x(5 * 6);
  for (float& v : x) v = g(rng);
  Bf16NetworkOptions bo;
  bo.trace = hook;
  const Bf16NetworkRunResult r = run_network_bf16(dev, fn, x, 5, bo);
  const auto tracks = check_trace(t.to_json());
  const Trace::Track main = t.host_thread("main");
  const auto hn = names_on(tracks, {main.pid, main.tid});
  for (const char* n : {"compile", "upload", "submit", "wait", "read output"}) EXPECT_TRUE(has(hn, n)) << n;
  const Trace::Track prog = t.device_lane(0, hook.device_name, "program");
  const auto& ps = tracks.at({prog.pid, prog.tid});
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0].dur, static_cast<double>(r.cycles));
  const Trace::Track compute = t.device_lane(0, hook.device_name, "compute");
  const auto cn = names_on(tracks, {compute.pid, compute.tid});
  EXPECT_TRUE(has(cn, "layer fc6") && has(cn, "layer fc9"));
  for (const char* lane : {"load", "store"}) {
    const Trace::Track l = t.device_lane(0, hook.device_name, lane);
    EXPECT_EQ(tracks.count({l.pid, l.tid}), 1u) << lane;
  }
}

}  // namespace
}  // namespace tpuw::runtime
