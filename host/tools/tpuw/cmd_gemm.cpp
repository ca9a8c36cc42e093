// tpuw gemm (cmd_gemm.h).
#include "cmd_gemm.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "cli_common.h"
#include "tpuw/backend.h"
#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/file_io.h"
#include "tpuw/runtime/gemm.h"
#include "tpuw/runtime/gemm_bf16.h"
#include "tpuw/runtime/npy.h"
#include "tpuw/runtime/trace.h"
#include "tpuw/worker/strategies.h"
#include "tpuw/worker/worker.h"

namespace tpuw::cli {

struct GemmOpts {
  std::string a, b, out, trace;
  uint64_t m = 64, k = 64, n = 64;
  uint64_t seed = 1;
  std::string dtype = "int8";
  bool check = false;
  bool quiet = false;
  std::string energy_table;      // --energy-table
  runtime::EnergyTable table;    // loaded from it before any work
};

struct GemmArgs {
  DeviceOpts device;
  GemmOpts gemm;
};

namespace {

using json = nlohmann::ordered_json;

struct Operands {
  runtime::GemmShape shape;
  std::vector<int8_t> a, b;
};

uint64_t memory_for(const runtime::GemmPlan& p);

// --trace: a Trace when asked for (written at the end of the command).
std::unique_ptr<runtime::Trace> make_trace(const GemmOpts& g) {
  return g.trace.empty() ? nullptr : std::make_unique<runtime::Trace>();
}

// --trace: one GEMM call on `dev` that ran from begin_ns to now on the host: split at its measured
// submit + wait time (`wall_s`: compile and upload before it), and the device's program.
void trace_gemm(runtime::Trace* t, int64_t begin_ns, double wall_s, unsigned device, const Device& dev,
                const std::string& name, const PerfCounters& perf) {
  if (t == nullptr) return;
  const int64_t end_ns = t->now_ns();
  const int64_t run_ns = std::min<int64_t>(end_ns - begin_ns, static_cast<int64_t>(wall_s * 1e9));
  const runtime::Trace::Track main = t->host_thread("main");
  t->host_span(main, fmt::format("{} on device {}", name, device), "host", begin_ns, end_ns);
  t->host_span(main, "compile + upload", "host", begin_ns, end_ns - run_ns);
  t->host_span(main, "submit + wait", "host", end_ns - run_ns, end_ns);
  t->device_program(device, runtime::trace_device_name(dev), name, perf);
}

// The operand files --a and --b: loaded, of `dtype` and rank 2, inner dimensions equal, no zero
// dimension (shared by the int8 and bf16 paths).
std::pair<npy::Array, npy::Array> load_operand_files(const GemmOpts& g, npy::DType dtype) {
  npy::Array a = npy::load(g.a);
  npy::require(a, g.a, dtype, 2);
  npy::Array b = npy::load(g.b);
  npy::require(b, g.b, dtype, 2);
  if (a.shape[1] != b.shape[0]) {
    throw Error(ErrorKind::kBadFile,
                fmt::format("inner dimensions differ: {} is [M={}, K={}] but {} is [K={}, N={}]", g.a, a.shape[0],
                            a.shape[1], g.b, b.shape[0], b.shape[1]));
  }
  for (const auto& [arr, name] : {std::pair{&a, &g.a}, std::pair{&b, &g.b}}) {
    if (arr->elements() == 0) {
      throw Error(ErrorKind::kBadFile,
                  fmt::format("{}: shape {} has a zero dimension", *name, npy::shape_string(arr->shape)));
    }
  }
  return {std::move(a), std::move(b)};
}

Operands load_operands(const GemmOpts& g, const DeviceParams& params) {
  Operands op;
  if (g.a.empty() != g.b.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "--a and --b go together (or use --m/--k/--n for random operands)");
  }
  if (!g.a.empty()) {
    const auto [a, b] = load_operand_files(g, npy::DType::kInt8);
    op.shape = {a.shape[0], a.shape[1], b.shape[1]};
    const auto av = a.view<int8_t>(), bv = b.view<int8_t>();
    op.a.assign(av.begin(), av.end());
    op.b.assign(bv.begin(), bv.end());
    return op;
  }
  if (g.m == 0 || g.k == 0 || g.n == 0) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--m {} --k {} --n {}: every dimension must be >= 1", g.m, g.k, g.n));
  }
  op.shape = {g.m, g.k, g.n};
  (void)memory_for(runtime::plan_gemm(params, op.shape));  // sizes checked before anything is allocated
  std::mt19937_64 rng(g.seed);
  std::uniform_int_distribution<int> d(-128, 127);
  op.a.resize(g.m * g.k);
  op.b.resize(g.k * g.n);
  for (auto& x : op.a) x = static_cast<int8_t>(d(rng));
  for (auto& x : op.b) x = static_cast<int8_t>(d(rng));
  return op;
}

// Host memory big enough for the packed operands (plus slack for the ring), at least 64 MiB.
uint64_t memory_for(const runtime::GemmPlan& p) {
  const uint64_t need = p.a_bytes() + p.b_bytes() + p.c_bytes() + (8ull << 20);
  const uint64_t size = std::max<uint64_t>(64ull << 20, (need + (1 << 20) - 1) & ~uint64_t{(1 << 20) - 1});
  if (size > (4ull << 30)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("GEMM needs {} MiB of host memory; the device addresses at most 4 GiB", need >> 20));
  }
  return size;
}

void compare(const std::vector<int32_t>& got, const std::vector<int32_t>& want, const runtime::GemmShape& s,
             const std::string& got_name, const std::string& want_name) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) {
      throw Error(ErrorKind::kMismatch,
                  fmt::format("mismatch: first differing element C[{}, {}]: {} = {}, {} = {}", i / s.n, i % s.n,
                              got_name, got[i], want_name, want[i]));
    }
  }
}

// The keys both JSON reports start with: backend, array_n, m, k, n.
json gemm_json_head(const DeviceOpts& o, const runtime::GemmShape& s) {
  json j;
  j["tpuw_version"] = version_string();
  j["backend"] = o.backend;
  j["array_n"] = o.array_n;
  j["m"] = s.m;
  j["k"] = s.k;
  j["n"] = s.n;
  return j;
}

// gemm --devices K --strategy data: B's columns split over K devices (tpuw/worker/strategies.h).
int cmd_gemm_devices(const DeviceOpts& o, const GemmOpts& g, const Operands& op, uint64_t mem, OutputSet& outs) {
  worker::WorkerOptions wo;
  wo.backend = o.backend;
  wo.config = backend_config(o, mem);
  wo.devices = o.multi.devices;
  const std::unique_ptr<runtime::Trace> trace = make_trace(g);
  auto open_span = runtime::Trace::scope(trace.get(), trace ? trace->host_thread("main") : runtime::Trace::Track{},
                                         fmt::format("open {} devices", wo.devices));
  worker::Worker w(wo);
  open_span.end();
  auto run_span = runtime::Trace::scope(trace.get(), trace ? trace->host_thread("main") : runtime::Trace::Track{},
                                        fmt::format("int8 gemm on {} devices", w.size()));
  const worker::GemmStrategyResult r = worker::gemm_parallel(w, op.a, op.b, op.shape, trace.get());
  run_span.end();
  json check_json = nullptr;
  if (g.check) {
    // The same GEMM on one device of the same backend, and on the CPU.
    compare(r.c, runtime::gemm_cpu(op.a, op.b, op.shape), op.shape, fmt::format("{} x{}", o.backend, w.size()), "cpu");
    check_json = json{{"cpu", "equal"}};
    DeviceOpts oo = o;
    oo.wave.clear();
    Device dev1 = Device::open(o.backend, backend_config(oo, mem));
    const int64_t t_check = trace ? trace->now_ns() : 0;
    const runtime::GemmResult r1 = runtime::gemm(dev1, op.a, op.b, op.shape);
    trace_gemm(trace.get(), t_check, r1.wall_s, w.size(), dev1, "int8 gemm (--check, one device)", r1.perf);
    compare(r.c, r1.c, op.shape, fmt::format("{} x{}", o.backend, w.size()), fmt::format("{} x1", o.backend));
    check_json["one_device"] = "equal";
  }
  if (!g.out.empty()) stage_npy(outs, g.out, npy::Array::from<int32_t>({op.shape.m, op.shape.n}, r.c));
  if (trace) stage_trace(outs, g.trace, trace->to_json());
  outs.commit();
  const worker::StrategyReport& rep = r.report;
  uint64_t cycles = 0;
  for (const worker::DeviceUse& d : rep.per_device) cycles += d.perf.cycles;
  const uint64_t macs = op.shape.m * op.shape.k * op.shape.n;
  const double macs_per_s = rep.wall_s > 0 ? static_cast<double>(macs) / rep.wall_s : 0.0;
  runtime::Energy energy;
  for (const worker::DeviceUse& d : rep.per_device) energy += runtime::estimate_energy(d.perf, o.array_n, false, g.table);
  if (o.json) {
    json j = gemm_json_head(o, op.shape);
    j["cycles"] = cycles;
    j["macs"] = macs;
    j["macs_per_s"] = macs_per_s;
    const json report = strategy_report_json(rep, o.array_n);
    for (auto it = report.begin(); it != report.end(); ++it) j[it.key()] = it.value();
    j["strategy"] = "data";
    j["split"] = "columns";
    add_energy_json(j, energy, macs, g.table);
    j["check"] = check_json;
    if (!g.out.empty()) j["out"] = g.out;
    std::cout << j.dump(2) << "\n";
  } else {
    fmt::print("gemm {}x{}x{} on {} (N={}) x {} device{}, strategy data (B's columns split): wall {:.3f} s, {:.3g} "
               "MAC/s, overlap {:.2f} (sum of busy time / (devices x wall))\n",
               op.shape.m, op.shape.k, op.shape.n, o.backend, o.array_n, rep.devices, rep.devices == 1 ? "" : "s",
               rep.wall_s, macs_per_s, rep.overlap);
    print_strategy_report(rep, o.array_n);
    fmt::print("  energy: {}, {:.3g} TOPS/W\n", runtime::energy_line(energy), runtime::tops_per_watt(macs, energy));
    if (g.check) fmt::print("  check: {}\n", check_json.dump());
  }
  return kOk;
}

// gemm --dtype bf16: C fp32 = A . B with A, B float32 .npy rounded to bf16 (round to nearest even,
// docs/numerics.md rule 7); --check compares bit for bit with the host model of the contract and
// with the other backend when it is built with bf16.
int cmd_gemm_bf16(DeviceOpts o, const GemmOpts& g, const DeviceParams& params, OutputSet& outs,
                  const StagedOutput* wave) {
  if (multi_selected(o.multi)) {
    throw Error(ErrorKind::kInvalidArgument, "tpuw gemm --dtype bf16 runs on one device (no --devices/--strategy)");
  }
  if (g.a.empty() != g.b.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "--a and --b go together (or use --m/--k/--n for random operands)");
  }
  runtime::Bf16GemmSpec spec;
  std::vector<float> a, b;
  if (!g.a.empty()) {
    const auto [aa, ba] = load_operand_files(g, npy::DType::kFloat32);
    spec.shape = {aa.shape[0], aa.shape[1], ba.shape[1]};
    const auto av = aa.view<float>(), bv = ba.view<float>();
    a.assign(av.begin(), av.end());
    b.assign(bv.begin(), bv.end());
  } else {
    if (g.m == 0 || g.k == 0 || g.n == 0) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("--m {} --k {} --n {}: every dimension must be >= 1", g.m, g.k, g.n));
    }
    spec.shape = {g.m, g.k, g.n};
    (void)runtime::plan_gemm_bf16(params, spec);  // sizes checked before anything is allocated
    std::mt19937_64 rng(g.seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    a.resize(g.m * g.k);
    b.resize(g.k * g.n);
    for (auto& x : a) x = d(rng);
    for (auto& x : b) x = d(rng);
  }
  // NaN and inf are legal bf16 data (docs/numerics.md, "Non-finite values at the tool's boundary"):
  // computed, and counted in the report so nobody mistakes a NaN result for a device error.
  const auto nonfinite = [](const std::vector<float>& v) {
    return static_cast<uint64_t>(std::count_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); }));
  };
  const uint64_t nonfinite_a = nonfinite(a), nonfinite_b = nonfinite(b);
  const runtime::Bf16GemmPlan plan = runtime::plan_gemm_bf16(params, spec);
  const uint64_t need = plan.a_bytes() + plan.b_bytes() + plan.c_bytes() + (8ull << 20);
  const uint64_t mem = std::max<uint64_t>(64ull << 20, (need + (1 << 20) - 1) & ~uint64_t{(1 << 20) - 1});
  const std::unique_ptr<runtime::Trace> trace = make_trace(g);
  Device dev = Device::open(o.backend, backend_config(o, mem));
  o.array_n = device_array_n(dev, o.array_n, o.array_n_opt != nullptr && o.array_n_opt->count() > 0);
  const int64_t t_run = trace ? trace->now_ns() : 0;
  const runtime::Bf16GemmResult r = runtime::gemm_bf16(dev, spec, a, b);
  trace_gemm(trace.get(), t_run, r.wall_s, 0, dev, "bf16 gemm", r.perf);

  const auto same_bits = [&](const std::vector<float>& want, const std::string& want_name) {
    for (size_t i = 0; i < want.size(); ++i) {
      if (std::bit_cast<uint32_t>(r.c[i]) != std::bit_cast<uint32_t>(want[i])) {
        throw Error(ErrorKind::kMismatch,
                    fmt::format("mismatch: first differing element C[{}, {}]: {} = {} (0x{:08x}), {} = {} (0x{:08x})",
                                i / spec.shape.n, i % spec.shape.n, o.backend, r.c[i],
                                std::bit_cast<uint32_t>(r.c[i]), want_name, want[i],
                                std::bit_cast<uint32_t>(want[i])));
      }
    }
  };
  json check_json = nullptr;
  if (g.check) {
    same_bits(runtime::gemm_bf16_host(spec, o.array_n, a, b), "host contract model");
    check_json = json{{"host_model", "equal"}};
    const std::string other = o.backend == "rtl" ? "ref" : "rtl";
    if (!backend_array_sizes(other).empty()) {
      DeviceOpts oo = o;
      oo.backend = other;
      oo.wave.clear();
      Device dev2 = Device::open(other, backend_config(oo, mem));
      if ((dev2.info().features & spec::reg::kFeaturesBf16) != 0) {
        const int64_t t_check = trace ? trace->now_ns() : 0;
        const runtime::Bf16GemmResult r2 = runtime::gemm_bf16(dev2, spec, a, b);
        trace_gemm(trace.get(), t_check, r2.wall_s, 1, dev2, "bf16 gemm (--check)", r2.perf);
        same_bits(r2.c, other);
        check_json[other] = "equal";
        check_json[other + "_cycles"] = r2.cycles;
      } else {
        check_json[other] = "no bf16";
      }
    } else {
      check_json[other] = "not built";
    }
  }
  finish_wave(dev, wave);
  if (!g.out.empty()) stage_npy(outs, g.out, npy::Array::from<float>({spec.shape.m, spec.shape.n}, r.c));
  if (trace) stage_trace(outs, g.trace, trace->to_json());
  outs.commit();
  const uint64_t macs = spec.shape.m * spec.shape.k * spec.shape.n;
  const runtime::Energy energy = runtime::estimate_energy(r.perf, o.array_n, true, g.table);
  // The device's busy cycles per second of wall time (the int8 path's sim_hz is the same ratio).
  const double sim_hz = r.wall_s > 0 ? static_cast<double>(r.perf.cycles) / r.wall_s : 0.0;
  if (o.json) {
    json j = gemm_json_head(o, spec.shape);
    j["dtype"] = "bf16";
    j["cycles"] = r.cycles;
    j["utilization"] = r.utilization;
    j["wall_s"] = r.wall_s;
    j["sim_hz"] = sim_hz;
    j["rd_bytes"] = r.perf.rd_bytes;
    j["wr_bytes"] = r.perf.wr_bytes;
    j["instructions"] = r.instructions;
    j["perf"] = perf_json(r.perf);
    add_energy_json(j, energy, macs, g.table);
    j["plan"] = {{"m_tile", plan.m_tile}, {"m_tiles", plan.m_tiles}, {"k_blocks", plan.k_blocks},
                 {"n_blocks", plan.n_blocks}, {"folds", plan.folds}, {"a_resident", plan.a_resident},
                 {"a_slots", plan.a_slots}, {"w_slots", plan.w_slots}};
    j["check"] = check_json;
    j["nonfinite_inputs"] = {{"a", nonfinite_a}, {"b", nonfinite_b}};
    if (!g.out.empty()) j["out"] = g.out;
    std::cout << j.dump(2) << "\n";
  } else {
    if (nonfinite_a + nonfinite_b > 0) {
      fmt::print("note: the operands hold NaN or inf (A: {}, B: {} elements); computed as bf16 data "
                 "(docs/numerics.md), so C holds NaN/inf where they reach\n",
                 nonfinite_a, nonfinite_b);
    }
    fmt::print("gemm bf16 {}x{}x{} on {} (N={}): {} cycles, utilization {:.3f}, wall {:.3f} s, {:.2f} M simulated "
               "cycles/s\n",
               spec.shape.m, spec.shape.k, spec.shape.n, o.backend, o.array_n, r.cycles, r.utilization, r.wall_s,
               sim_hz / 1e6);
    fmt::print("  perf: mxu_active {} weight_stall {} weight_shift {} dma_wait {} instret {}; bytes read {} written {}\n",
               r.perf.mxu_active, r.perf.weight_stall, r.perf.weight_shift, r.perf.dma_wait, r.perf.instret,
               r.perf.rd_bytes, r.perf.wr_bytes);
    fmt::print("  energy: {}, {:.3g} TOPS/W\n", runtime::energy_line(energy), runtime::tops_per_watt(macs, energy));
    if (g.check) fmt::print("  check: {}\n", check_json.dump());
  }
  return kOk;
}

int cmd_gemm(const DeviceOpts& opts, const GemmOpts& g) {
  // Every output path first: nothing runs when one of them cannot be written (exit 2).
  check_output("--out", g.out);
  check_output("--trace", g.trace);
  check_distinct_outputs({{"--out", g.out}, {"--trace", g.trace}, {"--wave", opts.wave}});
  OutputSet outs;  // committed only when the command succeeds
  DeviceOpts o = opts;
  if (o.multi.strategy == "pipeline") {
    throw Error(ErrorKind::kInvalidArgument,
                "tpuw gemm --strategy pipeline: a single GEMM has no layers to pipeline; use --strategy data (B's "
                "columns split over the devices)");
  }
  const DeviceParams* params = find_device_config(o.array_n);
  if (params == nullptr) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("--array-n {}: no such configuration (built: {})", o.array_n,
                            fmt::join(backend_array_sizes("ref"), ", ")));
  }
  if (!o.wave.empty() && multi_selected(o.multi)) {
    throw Error(ErrorKind::kInvalidArgument, "--wave traces one device: it cannot be combined with --devices/--strategy");
  }
  (void)backend_config(o);  // --wave with a backend other than rtl, --wave-to before --wave-from: refused first
  const StagedOutput* wave = stage_wave(outs, o);
  if (g.dtype == "bf16") return cmd_gemm_bf16(o, g, *params, outs, wave);
  const Operands op = load_operands(g, *params);
  const uint64_t mem = memory_for(runtime::plan_gemm(*params, op.shape));
  if (multi_selected(o.multi)) return cmd_gemm_devices(o, g, op, mem, outs);
  const std::unique_ptr<runtime::Trace> trace = make_trace(g);
  Device dev = Device::open(o.backend, backend_config(o, mem));
  o.array_n = device_array_n(dev, o.array_n, o.array_n_opt != nullptr && o.array_n_opt->count() > 0);

  const bool show_progress = !g.quiet && isatty(fileno(stderr)) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  bool progress_shown = false;
  runtime::GemmOptions gopt;
  if (show_progress) {
    gopt.progress = [&](double f) {
      const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (el < 2.0) return;
      progress_shown = true;
      fmt::print(stderr, "\rtpuw gemm: {:3.0f}% of folds dispatched ({:.0f} s)", 100.0 * f, el);
    };
  }
  const int64_t t_run = trace ? trace->now_ns() : 0;
  const runtime::GemmResult r = runtime::gemm(dev, op.a, op.b, op.shape, gopt);
  trace_gemm(trace.get(), t_run, r.wall_s, 0, dev, "int8 gemm", r.perf);
  if (progress_shown) fmt::print(stderr, "\n");

  json check_json = nullptr;
  if (g.check) {
    const auto cpu = runtime::gemm_cpu(op.a, op.b, op.shape);
    compare(r.c, cpu, op.shape, o.backend, "cpu");
    check_json = json{{"cpu", "equal"}};
    const std::string other = o.backend == "rtl" ? "ref" : "rtl";
    if (!backend_array_sizes(other).empty()) {
      DeviceOpts oo = o;
      oo.backend = other;
      oo.wave.clear();
      Device dev2 = Device::open(other, backend_config(oo, mem));
      const int64_t t_check = trace ? trace->now_ns() : 0;
      const runtime::GemmResult r2 = runtime::gemm(dev2, op.a, op.b, op.shape);
      trace_gemm(trace.get(), t_check, r2.wall_s, 1, dev2, "int8 gemm (--check)", r2.perf);
      compare(r.c, r2.c, op.shape, o.backend, other);
      check_json[other] = "equal";
      check_json[other + "_cycles"] = r2.cycles;
    } else {
      check_json[other] = "not built";
    }
  }
  finish_wave(dev, wave);
  if (!g.out.empty()) stage_npy(outs, g.out, npy::Array::from<int32_t>({op.shape.m, op.shape.n}, r.c));
  if (trace) stage_trace(outs, g.trace, trace->to_json());
  outs.commit();
  const double sim_hz = r.wall_s > 0 ? static_cast<double>(r.sim_cycles) / r.wall_s : 0.0;
  const uint64_t macs = op.shape.m * op.shape.k * op.shape.n;
  const runtime::Energy energy = runtime::estimate_energy(r.perf, o.array_n, false, g.table);
  if (o.json) {
    json j = gemm_json_head(o, op.shape);
    j["cycles"] = r.cycles;
    j["utilization"] = r.utilization;
    j["wall_s"] = r.wall_s;
    j["sim_hz"] = sim_hz;
    j["rd_bytes"] = r.perf.rd_bytes;
    j["wr_bytes"] = r.perf.wr_bytes;
    j["min_bytes"] = r.min_bytes;
    j["instructions"] = r.instructions;
    j["perf"] = perf_json(r.perf);
    add_energy_json(j, energy, macs, g.table);
    j["plan"] = {{"m_tile", r.plan.m_tile}, {"m_tiles", r.plan.m_tiles}, {"k_blocks", r.plan.k_blocks},
                 {"n_blocks", r.plan.n_blocks}, {"folds", r.plan.folds}, {"a_resident", r.plan.a_resident},
                 {"a_slots", r.plan.a_slots}, {"w_slots", r.plan.w_slots}};
    j["check"] = check_json;
    if (!g.out.empty()) j["out"] = g.out;
    std::cout << j.dump(2) << "\n";
  } else {
    fmt::print("gemm {}x{}x{} on {} (N={}): {} cycles, utilization {:.3f}, wall {:.3f} s, {:.2f} M simulated cycles/s\n",
               op.shape.m, op.shape.k, op.shape.n, o.backend, o.array_n, r.cycles, r.utilization, r.wall_s,
               sim_hz / 1e6);
    fmt::print("  perf: mxu_active {} weight_stall {} weight_shift {} dma_wait {} instret {}; "
               "bytes read {} written {} (minimum {})\n",
               r.perf.mxu_active, r.perf.weight_stall, r.perf.weight_shift, r.perf.dma_wait, r.perf.instret,
               r.perf.rd_bytes, r.perf.wr_bytes, r.min_bytes);
    fmt::print("  energy: {}, {:.3g} TOPS/W\n", runtime::energy_line(energy), runtime::tops_per_watt(macs, energy));
    if (g.check) fmt::print("  check: {}\n", check_json.dump());
  }
  return kOk;
}

}  // namespace

GemmCommand::GemmCommand(CLI::App& app) : opts_(std::make_shared<GemmArgs>()) {
  DeviceOpts& gemm_o = opts_->device;
  GemmOpts& g = opts_->gemm;

  auto* ge = app.add_subcommand("gemm", "C[M,N] = A[M,K] . B[K,N] on the device: int8 -> int32, or bf16 -> fp32 with --dtype bf16");
  ge->add_option("--a", g.a, "A as .npy, int8 [M, K] (float32 with --dtype bf16)");
  ge->add_option("--b", g.b, "B as .npy, int8 [K, N] (float32 with --dtype bf16)");
  ge->add_option("--out", g.out, "write C as .npy, int32 [M, N] (float32 with --dtype bf16)");
  ge->add_option("--m", g.m, "rows of A (random operands)")->check(unsigned_check())->capture_default_str();
  ge->add_option("--k", g.k, "columns of A / rows of B (random operands)")->check(unsigned_check())->capture_default_str();
  ge->add_option("--n", g.n, "columns of B (random operands)")->check(unsigned_check())->capture_default_str();
  ge->add_option("--dtype", g.dtype,
                 "int8 (int8 operands, int32 C) or bf16 (float32 .npy operands rounded to bf16 by round-to-nearest-"
                 "even, fp32 C with fp32 accumulation; docs/numerics.md). bf16 operands may hold NaN and +-inf: they "
                 "are legal bf16 data and computed as the device does (NaN canonical, IEEE products and sums); the "
                 "report counts them")
      ->check(CLI::IsMember({"int8", "bf16"}))
      ->capture_default_str();
  ge->add_option("--seed", g.seed, "seed of the random operands")->check(unsigned_check())->capture_default_str();
  ge->add_option("--trace", g.trace,
                 "write a timeline as Chrome trace-event JSON (ui.perfetto.dev, chrome://tracing): host and device "
                 "spans of the GEMM (and of --check's second backend); with --devices K one host track and one device "
                 "process per device; docs/tracing.md");
  ge->add_flag("--check", g.check, "also compute with the other backend and on the CPU; exit 3 on any difference");
  ge->add_flag("-q,--quiet", g.quiet, "no progress on stderr");
  add_energy_option(ge, g.energy_table);
  add_device_options(ge, gemm_o, true);
  add_multi_options(ge, gemm_o.multi, {"data", "pipeline"},
                    "how the GEMM uses several devices: data (B's columns split, A to every device; the default); "
                    "pipeline is for tpuw run");
  sub_ = ge;
}

bool GemmCommand::selected() const { return sub_ != nullptr && sub_->parsed(); }

int GemmCommand::execute() const {
  GemmOpts g = opts_->gemm;
  g.table = energy_table(g.energy_table);
  return cmd_gemm(opts_->device, g);
}

}  // namespace tpuw::cli
