// tpuw_bench_worker: many devices behind one runtime (tpuw/worker/strategies.h), rtl backend.
//
//   (a) data-parallel digits inference (examples/digits, the test split repeated --copies times):
//       2 devices vs 1 device, throughput ratio measured in one run (goal >= 1.8x on 2 cores);
//       also the column-split GEMM 2 vs 1 (reported only)
//   (b) pipeline, 4-layer MLP on 2 devices: each stage's busy fraction in the steady state
//       (goal >= 0.8)
// Every result is checked bit for bit against one device / the CPU integer model. Wall-clock goals
// are reported; --enforce makes a missed goal exit 1 (tests run --quick without it).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "tpuw/error.h"
#include "tpuw/nn/onnx_import.h"
#include "tpuw/nn/quantize.h"
#include "tpuw/runtime/gemm.h"
#include "tpuw/runtime/npy.h"
#include "tpuw/worker/strategies.h"

namespace {

using json = nlohmann::ordered_json;
using namespace tpuw;

std::vector<int8_t> random_i8(uint64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> d(-128, 127);
  std::vector<int8_t> v(n);
  for (auto& x : v) x = static_cast<int8_t>(d(rng));
  return v;
}

nn::QNetwork mlp(const std::vector<uint32_t>& dims, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> w(-127, 127), b(-2000, 2000);
  nn::QNetwork q;
  q.input_features = dims[0];
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    nn::QLayer l;
    l.name = fmt::format("fc{}", i);
    l.k = dims[i];
    l.n = dims[i + 1];
    for (uint64_t j = 0; j < uint64_t{l.k} * l.n; ++j) l.w_q.push_back(static_cast<int8_t>(w(rng)));
    for (uint32_t j = 0; j < l.n; ++j) l.bias_q.push_back(b(rng));
    l.int32_output = i + 2 == dims.size();
    l.relu = !l.int32_output;
    if (!l.int32_output) {
      l.mult.assign(l.n, 1 << 30);
      l.shift.assign(l.n, 17);
    }
    l.out_scale = {1.0f};
    q.layers.push_back(std::move(l));
  }
  return q;
}

worker::WorkerOptions options(const std::string& backend, unsigned devices) {
  worker::WorkerOptions o;
  o.backend = backend;
  o.devices = devices;
  return o;
}

void require(bool ok, const std::string& what) {
  if (!ok) throw Error(ErrorKind::kMismatch, what);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tpuw_bench_worker: 2 devices vs 1 (data-parallel digits, column-split GEMM) and pipeline busy "
               "fractions"};
  bool quick = false, as_json = false, enforce = false;
  std::string backend = "rtl";
  std::string digits = TPUW_EXAMPLES_DIR "/digits";
  unsigned copies = 0;
  app.add_flag("--quick", quick, "smaller problems (seconds)");
  app.add_flag("--json", as_json, "one JSON object");
  app.add_flag("--enforce", enforce, "exit 1 when a goal is missed");
  app.add_option("--backend", backend, "device backend")->capture_default_str();
  app.add_option("--copies", copies, "copies of the digits test split (default 48, quick 4)");
  app.add_option("--digits", digits, "examples/digits folder")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (copies == 0) copies = quick ? 4 : 48;

  try {
    json j;
    j["backend"] = backend;
    j["quick"] = quick;
    std::vector<std::string> missed;

    // ---- (a) data-parallel digits ------------------------------------------------------------
    const nn::FloatNetwork fnet = nn::import_onnx(digits + "/digits_mlp.onnx");
    const npy::Array tx = npy::load(digits + "/test_x.npy"), cx = npy::load(digits + "/calib_x.npy");
    auto as_float = [](const npy::Array& a) {
      const auto v = a.view<uint8_t>();
      return std::vector<float>(v.begin(), v.end());
    };
    const nn::QNetwork dq = nn::quantize(fnet, as_float(cx), cx.shape[0]);
    const std::vector<int8_t> one = nn::quantize_input(dq, as_float(tx));
    std::vector<int8_t> x;
    for (unsigned c = 0; c < copies; ++c) x.insert(x.end(), one.begin(), one.end());
    const uint64_t rows = tx.shape[0] * copies;
    const std::vector<int32_t> golden = nn::forward_int_raw(dq, x, rows);
    double wall[3] = {0, 0, 0};
    json data = json::object();
    worker::NetworkStrategyOptions dopt;
    dopt.micro_batch = 256;
    for (const unsigned k : {1u, 2u}) {
      worker::Worker w(options(backend, k));
      (void)worker::run_network_parallel(w, dq, std::span<const int8_t>(x).first(512 * k * 64), 512 * k, dopt);  // warm-up: weights resident
      const worker::NetworkStrategyResult r = worker::run_network_parallel(w, dq, x, rows, dopt);
      require(r.output_i32 == golden, fmt::format("digits on {} device(s) differs from the CPU integer model", k));
      wall[k] = r.report.wall_s;
      data[fmt::format("k{}", k)] = {{"wall_s", r.report.wall_s},
                                     {"rows_per_s", static_cast<double>(rows) / r.report.wall_s},
                                     {"overlap", r.report.overlap},
                                     {"micro_batches", r.report.micro_batches}};
      if (!as_json) {
        fmt::print("digits data-parallel, {} rows ({} copies of the test split), micro-batch {}: {} device{}: wall "
                   "{:.3f} s, {:.0f} rows/s, overlap {:.2f}\n",
                   rows, copies, r.report.micro_batch, k, k == 1 ? "" : "s", r.report.wall_s,
                   static_cast<double>(rows) / r.report.wall_s, r.report.overlap);
      }
    }
    const double speedup = wall[2] > 0 ? wall[1] / wall[2] : 0.0;
    data["speedup"] = speedup;
    data["goal"] = 1.8;
    j["digits_data_parallel"] = data;
    if (speedup < 1.8) missed.push_back(fmt::format("digits 2-device speed-up {:.2f} < 1.8", speedup));
    if (!as_json) fmt::print("  2 devices vs 1: {:.2f}x throughput (goal >= 1.8x), bit-identical\n", speedup);

    // ---- column-split GEMM (reported) ---------------------------------------------------------
    const runtime::GemmShape gs = quick ? runtime::GemmShape{128, 256, 256} : runtime::GemmShape{256, 512, 512};
    const auto a = random_i8(gs.m * gs.k, 1), b = random_i8(gs.k * gs.n, 2);
    const std::vector<int32_t> cref = runtime::gemm_cpu(a, b, gs);
    double gwall[3] = {0, 0, 0};
    for (const unsigned k : {1u, 2u}) {
      worker::Worker w(options(backend, k));
      const worker::GemmStrategyResult r = worker::gemm_parallel(w, a, b, gs);
      require(r.c == cref, fmt::format("GEMM on {} device(s) differs from the CPU", k));
      gwall[k] = r.report.wall_s;
    }
    const double gspeed = gwall[2] > 0 ? gwall[1] / gwall[2] : 0.0;
    j["gemm_columns"] = {{"m", gs.m}, {"k", gs.k}, {"n", gs.n}, {"wall_s_k1", gwall[1]}, {"wall_s_k2", gwall[2]},
                         {"speedup", gspeed}};
    if (!as_json) {
      fmt::print("gemm {}x{}x{} column split: 1 device {:.3f} s, 2 devices {:.3f} s: {:.2f}x, bit-identical\n", gs.m,
                 gs.k, gs.n, gwall[1], gwall[2], gspeed);
    }

    // ---- (b) pipeline ------------------------------------------------------------------------
    const std::vector<uint32_t> dims = {256, 256, 256, 256, 256};
    const uint64_t prow = quick ? 256 : 1024;
    const nn::QNetwork pq = mlp(dims, 5);
    const auto px = random_i8(prow * dims[0], 9);
    worker::Worker w2(options(backend, 2));
    worker::NetworkStrategyOptions popt;
    popt.strategy = worker::Strategy::kPipeline;
    popt.micro_batch = 32;
    (void)worker::run_network_parallel(w2, pq, std::span<const int8_t>(px).first(64 * dims[0]), 64, popt);  // warm-up
    const worker::NetworkStrategyResult pr = worker::run_network_parallel(w2, pq, px, prow, popt);
    require(pr.output_i32 == nn::forward_int_raw(pq, px, prow), "pipeline output differs from the CPU integer model");
    json pj;
    pj["dims"] = dims;
    pj["rows"] = prow;
    pj["micro_batch"] = pr.report.micro_batch;
    pj["micro_batches"] = pr.report.micro_batches;
    pj["wall_s"] = pr.report.wall_s;
    pj["overlap"] = pr.report.overlap;
    pj["steady_s"] = pr.report.steady_s;
    double min_busy = 1.0;
    json stages = json::array();
    for (size_t s = 0; s < pr.report.per_device.size(); ++s) {
      const worker::DeviceUse& d = pr.report.per_device[s];
      min_busy = std::min(min_busy, d.steady_busy_fraction);
      stages.push_back({{"device", d.index}, {"role", d.role}, {"steady_busy_fraction", d.steady_busy_fraction},
                        {"busy_fraction", d.busy_fraction}, {"cycles", d.perf.cycles}});
    }
    pj["stages"] = stages;
    pj["min_steady_busy_fraction"] = min_busy;
    pj["goal"] = 0.8;
    j["pipeline"] = pj;
    if (min_busy < 0.8) missed.push_back(fmt::format("pipeline steady-state busy fraction {:.2f} < 0.8", min_busy));
    if (!as_json) {
      fmt::print("pipeline MLP {} on 2 devices, {} rows in {} micro-batches of {}: wall {:.3f} s, overlap {:.2f}\n",
                 fmt::join(dims, "-"), prow, pr.report.micro_batches, pr.report.micro_batch, pr.report.wall_s,
                 pr.report.overlap);
      for (const worker::DeviceUse& d : pr.report.per_device) {
        fmt::print("  device {} ({}): busy {:.0f}% in the steady state ({:.3f} s), {:.0f}% overall\n", d.index, d.role,
                   100.0 * d.steady_busy_fraction, pr.report.steady_s, 100.0 * d.busy_fraction);
      }
      fmt::print("  minimum steady-state busy fraction {:.2f} (goal >= 0.8), bit-identical\n", min_busy);
    }
    j["missed"] = missed;
    if (as_json) {
      std::cout << j.dump(2) << "\n";
    } else {
      for (const std::string& m : missed) fmt::print("goal missed: {}\n", m);
    }
    return enforce && !missed.empty() ? 1 : 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "tpuw_bench_worker: error: {}\n", e.what());
    return 2;
  }
}
