// tpuw_bench_mirrored: mirrored training (issue 12, docs/scaling.md) of an MLP (default
// 784-512-512-10, PyTorch layout) at batch 256 on K = 1, 2, 4 devices of one worker (ref by default,
// --backend rtl): wall time per step and steps/s, the slowest device's cycles per step, gradient
// bytes gathered and broadcast, communication time (gather + tree reduction + broadcast) and the
// part of it hidden behind the backward pass; the trained weights of every K are checked bit for
// bit against K = 1 (exit 1 if they differ). The one-device fused step is printed as the baseline.
// Wall-clock figures are printed, never enforced.
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
#include "tpuw/worker/mirrored_trainer.h"
#include "tpuw/worker/worker.h"

#include "bench_models.h"

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("tpuw_bench_mirrored: mirrored training steps on K devices");
  std::string backend = "ref";
  std::vector<int64_t> dims = {784, 512, 512, 10};
  std::vector<unsigned> devices = {1, 2, 4};
  int64_t batch = 256, chunks = 4, steps = 3;
  bool json_out = false, no_baseline = false;
  app.add_option("--backend", backend, "ref or rtl")->capture_default_str();
  app.add_option("--dims", dims, "layer widths, input first")->delimiter(',')->expected(2, 64);
  app.add_option("--batch", batch, "rows per step")->capture_default_str();
  app.add_option("--chunks", chunks, "gradient chunks per step (a multiple of every K)")->capture_default_str();
  app.add_option("--devices", devices, "device counts K")->delimiter(',')->expected(1, 8);
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
    j["chunks"] = chunks;
    j["steps"] = steps;
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
      j["fused_one_device"] = {{"seconds_per_step", sec}, {"cycles_per_step", cycles / static_cast<uint64_t>(steps)}};
      if (!json_out) {
        fmt::print("one device, fused step: {:.3f} s/step ({:.2f} steps/s), {} cycles/step\n", sec, 1.0 / sec,
                   cycles / static_cast<uint64_t>(steps));
      }
    }
    tpuw::runtime::TrainState ref;
    double base_sec = 0;
    bool same = true;
    nlohmann::ordered_json runs = nlohmann::ordered_json::array();
    for (unsigned k : devices) {
      tpuw::worker::WorkerOptions wo;
      wo.backend = backend;
      wo.devices = k;
      wo.max_attempts = 1;
      wo.config.memory.size = tpuw::bench::memory_size(tpuw::worker::MirroredTrainer::memory_bytes(model, batch, chunks, wo.config.array_n));
      tpuw::worker::Worker w(wo);
      tpuw::worker::MirroredOptions mo;
      mo.chunks = chunks;
      tpuw::worker::MirroredTrainer t(w, model, batch, sgd, mo);
      (void)t.step(xs[0], ys[0], batch);  // compiles the split programs
      tpuw::worker::MirroredStats before = t.totals();
      uint64_t cycles = 0, fwd = 0, bwd = 0, upd = 0;
      const auto t0 = Clock::now();
      for (int64_t s = 1; s <= steps; ++s) {
        const tpuw::runtime::TrainStepReport r = t.step(xs[static_cast<size_t>(s)], ys[static_cast<size_t>(s)], batch);
        cycles += r.cycles;
        fwd += r.forward_cycles;
        bwd += r.backward_cycles;
        upd += r.update_cycles;
      }
      const double sec = std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(steps);
      const tpuw::worker::MirroredStats& after = t.totals();
      const double n = static_cast<double>(steps);
      const double comm = (after.comm_seconds() - before.comm_seconds()) / n;
      const double hidden = (after.hidden_seconds - before.hidden_seconds) / n;
      const double gather = static_cast<double>(after.gather_bytes - before.gather_bytes) / n;
      const double bcast = static_cast<double>(after.broadcast_bytes - before.broadcast_bytes) / n;
      const double reduce = (after.reduce_seconds - before.reduce_seconds) / n;
      const double gather_s = (after.gather_seconds - before.gather_seconds) / n;
      const double bcast_s = (after.broadcast_seconds - before.broadcast_seconds) / n;
      const double compute_s = (after.compute_seconds - before.compute_seconds) / n;
      const double update_s = (after.update_seconds - before.update_seconds) / n;
      const auto per = [&](uint64_t v) { return v / static_cast<uint64_t>(steps); };
      const tpuw::runtime::TrainState st = t.state();
      if (k == devices.front()) {
        ref = st;
        base_sec = sec;
      } else {
        for (const auto& [name, v] : ref.params) {
          const std::vector<float>& o = st.params.at(name);
          for (size_t i = 0; i < v.size(); ++i) same = same && std::bit_cast<uint32_t>(v[i]) == std::bit_cast<uint32_t>(o[i]);
        }
      }
      runs.push_back({{"devices", k}, {"seconds_per_step", sec}, {"steps_per_s", 1.0 / sec},
                      {"speedup", base_sec / sec}, {"cycles_per_step", cycles / static_cast<uint64_t>(steps)},
                      {"forward_cycles_per_step", per(fwd)}, {"backward_cycles_per_step", per(bwd)},
                      {"update_cycles_per_step", per(upd)}, {"compute_seconds_per_step", compute_s},
                      {"update_seconds_per_step", update_s}, {"gather_seconds_per_step", gather_s},
                      {"broadcast_seconds_per_step", bcast_s},
                      {"gather_bytes_per_step", gather}, {"broadcast_bytes_per_step", bcast},
                      {"comm_seconds_per_step", comm}, {"reduce_seconds_per_step", reduce},
                      {"hidden_seconds_per_step", hidden}, {"hidden_fraction", comm > 0 ? hidden / comm : 0.0}});
      if (!json_out) {
        fmt::print("K={}: {:.3f} s/step ({:.2f} steps/s, x{:.2f}), slowest device {} cycles/step; gradients {:.0f} B "
                   "gathered, {:.0f} B broadcast; communication {:.1f} ms/step (reduction {:.1f} ms), {:.1f} ms hidden "
                   "({:.0f}%)\n",
                   k, sec, 1.0 / sec, base_sec / sec, cycles / static_cast<uint64_t>(steps), gather, bcast, 1e3 * comm,
                   1e3 * reduce, 1e3 * hidden, comm > 0 ? 100.0 * hidden / comm : 0.0);
        fmt::print("     slowest device: forward {} + backward {} + update {} cycles; wall: compute phase {:.1f} ms "
                   "(gather {:.1f} ms over the devices), update phase {:.1f} ms (broadcast {:.1f} ms over the devices)\n",
                   per(fwd), per(bwd), per(upd), 1e3 * compute_s, 1e3 * gather_s, 1e3 * update_s, 1e3 * bcast_s);
      }
    }
    j["mirrored"] = runs;
    j["bit_identical"] = same;
    if (json_out) {
      std::cout << j.dump(2) << "\n";
    } else {
      fmt::print("weights bit-identical across K: {}\n", same ? "yes" : "NO");
    }
    return same ? 0 : 1;
  } catch (const tpuw::Error& e) {
    fmt::print(stderr, "tpuw_bench_mirrored: {}\n", e.what());
    return 1;
  }
}
