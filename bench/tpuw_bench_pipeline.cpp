// tpuw_bench_pipeline: pipeline training (issue 12, docs/scaling.md "Pipeline training") of an MLP
// (default 784-512-512-512-10, PyTorch layout) at batch 256 in M = 8 micro-batches on K = 1, 2
// devices of one worker (ref by default, --backend rtl): the stages and their training MACs, each
// device's busy fraction in steady state (its programs' cycles over the step's cycles, full batches
// only), the bubble, the step's cycles (the makespan of the GPipe schedule over the measured
// programs) against K = 1 and against the one-device fused step, bytes across stage boundaries and
// stashed per step, and wall time per step. The trained weights of every K are checked bit for bit
// against the first K (exit 1 if they differ). Figures are printed, never enforced.
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "tpuw/compiler/training.h"
#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/runtime/device_trainer.h"
#include "tpuw/worker/pipeline_trainer.h"
#include "tpuw/worker/worker.h"

#include "bench_models.h"

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("tpuw_bench_pipeline: pipeline training steps on K devices");
  std::string backend = "ref";
  std::vector<int64_t> dims = {784, 512, 512, 512, 10};
  std::vector<unsigned> devices = {1, 2};
  int64_t batch = 256, micro = 8, steps = 2;
  bool json_out = false, no_baseline = false;
  app.add_option("--backend", backend, "ref or rtl")->capture_default_str();
  app.add_option("--dims", dims, "layer widths, input first")->delimiter(',')->expected(2, 64);
  app.add_option("--batch", batch, "rows per step")->capture_default_str();
  app.add_option("--micro-batches", micro, "micro-batches per step (tpuw train --chunks)")->capture_default_str();
  app.add_option("--devices", devices, "device (stage) counts K")->delimiter(',')->expected(1, 8);
  app.add_option("--steps", steps, "timed steps per K (after one warm-up step)")->capture_default_str();
  app.add_flag("--no-baseline", no_baseline, "skip the one-device fused step");
  app.add_flag("--json", json_out, "one JSON object");
  CLI11_PARSE(app, argc, argv);
  try {
    const tpuw::compiler::TrainModel model = tpuw::bench::make_mlp(dims, 1);
    const tpuw::runtime::SgdConfig sgd{0.01f, 0.9f, 1e-4f};
    const auto [xs, ys] = tpuw::bench::random_batches(static_cast<size_t>(steps + 1), batch, dims[0], dims.back());
    nlohmann::ordered_json j;
    j["backend"] = backend;
    j["dims"] = dims;
    j["batch"] = batch;
    j["micro_batches"] = micro;
    j["steps"] = steps;
    uint64_t fused_cycles = 0;
    if (!no_baseline) {
      tpuw::BackendConfig cfg;
      cfg.memory.size = tpuw::bench::memory_size(tpuw::runtime::DeviceTrainer::memory_bytes(model, batch, cfg.array_n));
      tpuw::Device dev = tpuw::Device::open(backend, cfg);
      tpuw::runtime::DeviceTrainer t(dev, model, batch, sgd);
      (void)t.step(xs[0], ys[0], batch);
      const auto t0 = Clock::now();
      uint64_t cycles = 0;
      for (int64_t s = 1; s <= steps; ++s) cycles += t.step(xs[static_cast<size_t>(s)], ys[static_cast<size_t>(s)], batch).cycles;
      const double sec = std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(steps);
      fused_cycles = cycles / static_cast<uint64_t>(steps);
      j["fused_one_device"] = {{"seconds_per_step", sec}, {"cycles_per_step", fused_cycles}};
      if (!json_out) {
        fmt::print("one device, fused step at batch {}: {:.3f} s/step, {} cycles/step\n", batch, sec, fused_cycles);
      }
    }
    tpuw::runtime::TrainState ref;
    uint64_t base_cycles = 0;
    bool same = true;
    nlohmann::ordered_json runs = nlohmann::ordered_json::array();
    for (unsigned k : devices) {
      tpuw::worker::WorkerOptions wo;
      wo.backend = backend;
      wo.devices = k;
      wo.max_attempts = 1;
      wo.config.memory.size =
          tpuw::bench::memory_size(tpuw::worker::PipelineTrainer::memory_bytes(model, batch, micro, wo.config.array_n));
      tpuw::worker::Worker w(wo);
      tpuw::worker::PipelineTrainer t(w, model, batch, sgd, tpuw::worker::PipelineOptions{.micro_batches = micro});
      (void)t.step(xs[0], ys[0], batch);  // compiles the per-layer programs
      const tpuw::worker::PipelineStats before = t.totals();
      const auto t0 = Clock::now();
      for (int64_t s = 1; s <= steps; ++s) (void)t.step(xs[static_cast<size_t>(s)], ys[static_cast<size_t>(s)], batch);
      const double sec = std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(steps);
      const tpuw::worker::PipelineStats& after = t.totals();
      tpuw::worker::PipelineStats st;  // the timed steps only (all full batches: the steady state)
      st.steps = after.steps - before.steps;
      st.step_cycles = after.step_cycles - before.step_cycles;
      st.busy_cycles.resize(k);
      for (unsigned d = 0; d < k; ++d) st.busy_cycles[d] = after.busy_cycles[d] - before.busy_cycles[d];
      const double n = static_cast<double>(st.steps);
      const uint64_t cycles = st.step_cycles / static_cast<uint64_t>(st.steps);
      if (k == devices.front()) base_cycles = cycles;
      const tpuw::runtime::TrainState state = t.state();
      if (k == devices.front()) {
        ref = state;
      } else {
        for (const auto& [name, v] : ref.params) {
          const std::vector<float>& o = state.params.at(name);
          for (size_t i = 0; i < v.size(); ++i) same = same && std::bit_cast<uint32_t>(v[i]) == std::bit_cast<uint32_t>(o[i]);
        }
      }
      nlohmann::ordered_json stages = nlohmann::ordered_json::array();
      std::string line;
      for (const tpuw::worker::PipelineStage& sg : t.stages()) {
        stages.push_back({{"device", sg.device},
                          {"layers", {sg.first_layer, sg.first_layer + sg.layers - 1}},
                          {"macs_per_row", sg.macs_per_row},
                          {"busy_cycles_per_step", static_cast<double>(st.busy_cycles[sg.device]) / n},
                          {"busy_fraction", st.busy_fraction(sg.device)}});
        line += fmt::format("{}device {} layers {}-{} ({} MACs/row) busy {:.3f}", line.empty() ? "" : "; ", sg.device,
                            sg.first_layer, sg.first_layer + sg.layers - 1, sg.macs_per_row,
                            st.busy_fraction(sg.device));
      }
      const double boundary = static_cast<double>(after.boundary_bytes - before.boundary_bytes) / n;
      const double stash = static_cast<double>(after.stash_bytes - before.stash_bytes) / n;
      runs.push_back({{"devices", k}, {"stages", stages}, {"cycles_per_step", cycles},
                      {"cycles_vs_first", static_cast<double>(base_cycles) / static_cast<double>(cycles)},
                      {"cycles_vs_fused", fused_cycles > 0 ? static_cast<double>(fused_cycles) / static_cast<double>(cycles) : 0.0},
                      {"bubble_fraction", st.bubble_fraction()}, {"boundary_bytes_per_step", boundary},
                      {"stash_bytes_per_step", stash}, {"seconds_per_step", sec}});
      if (!json_out) {
        fmt::print("K={}: {} cycles/step (x{:.2f} vs K={}{}), bubble {:.3f}; {}; {:.0f} B across boundaries, {:.0f} B "
                   "stashed per step; {:.3f} s/step wall\n",
                   k, cycles, static_cast<double>(base_cycles) / static_cast<double>(cycles), devices.front(),
                   fused_cycles > 0 ? fmt::format(", x{:.2f} vs the fused step",
                                                  static_cast<double>(fused_cycles) / static_cast<double>(cycles))
                                    : "",
                   st.bubble_fraction(), line, boundary, stash, sec);
      }
    }
    j["pipeline"] = runs;
    j["bit_identical"] = same;
    if (json_out) {
      std::cout << j.dump(2) << "\n";
    } else {
      fmt::print("weights bit-identical across K: {}\n", same ? "yes" : "NO");
    }
    return same ? 0 : 1;
  } catch (const tpuw::Error& e) {
    fmt::print(stderr, "tpuw_bench_pipeline: {}\n", e.what());
    return 1;
  }
}
