// tpuw_bench_train: the training figures of issue 11 on one device (ref by default, --backend rtl):
//   - one training step of an MLP (default 784-512-512-10, PyTorch layout: Gemm transB=1, ReLU
//     between layers) at batch 256: cycles per step split into forward / backward / update
//     (PERF_CYCLES of the device programs; with the fused update, update = the fused program
//     minus the backward program alone, i.e. the exposed part, and update_busy_cycles = its
//     VECTOR/ACTIVATE cycles on the compute queue), host-side loss seconds and bytes, MXU
//     utilization = step MACs / (N^2 * cycles);
//   - bf16 GEMM 512x512x512 (fp32 out): cycles and utilization, checked bit for bit against the
//     host contract model.
// Cycle counts are deterministic; wall-clock figures are printed, never enforced.
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
#include "tpuw/runtime/gemm_bf16.h"

#include "bench_models.h"

namespace {

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("tpuw_bench_train: one training step and a bf16 GEMM on the device");
  std::string backend = "ref";
  std::vector<int64_t> dims = {784, 512, 512, 10};
  int64_t batch = 256;
  uint64_t gemm_n = 512;
  bool json_out = false, skip_gemm = false, unfused = false;
  app.add_option("--backend", backend, "ref or rtl")->capture_default_str();
  app.add_option("--dims", dims, "layer widths, input first")->delimiter(',')->expected(2, 64);
  app.add_option("--batch", batch, "rows per step")->capture_default_str();
  app.add_option("--gemm", gemm_n, "size of the square bf16 GEMM")->capture_default_str();
  app.add_flag("--no-gemm", skip_gemm, "skip the bf16 GEMM figure");
  app.add_flag("--json", json_out, "one JSON object");
  app.add_flag("--unfused", unfused, "separate update program (measured) instead of the fused update (attributed)");
  CLI11_PARSE(app, argc, argv);
  try {
    const tpuw::compiler::TrainModel model = tpuw::bench::make_mlp(dims, 1);
    tpuw::BackendConfig cfg;
    const uint64_t need = tpuw::runtime::DeviceTrainer::memory_bytes(model, batch, 16) + 3ull * gemm_n * gemm_n * 4 +
                          (16ull << 20);
    cfg.memory.size = std::max<uint64_t>(cfg.memory.size, (need + (1 << 20) - 1) & ~uint64_t{(1 << 20) - 1});
    tpuw::Device dev = tpuw::Device::open(backend, cfg);
    nlohmann::ordered_json j;
    j["backend"] = backend;
    j["array_n"] = dev.info().params.array_n;

    const bool fused = !unfused;
    tpuw::runtime::DeviceTrainerSchedule topt;
    topt.fuse_update = fused;
    tpuw::runtime::DeviceTrainer trainer(dev, model, batch, tpuw::runtime::SgdConfig{0.01f, 0.9f, 0.0f}, topt);
    std::mt19937_64 rng(2);
    std::uniform_real_distribution<float> ux(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(batch * dims.front()));
    for (auto& v : x) v = ux(rng);
    std::vector<int64_t> y(static_cast<size_t>(batch));
    for (auto& v : y) v = static_cast<int64_t>(rng() % static_cast<uint64_t>(dims.back()));
    const auto t0 = std::chrono::steady_clock::now();
    const tpuw::runtime::TrainStepReport r = trainer.step(x, y, batch);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto sizes = trainer.program_sizes();
    nlohmann::ordered_json perf;
    const char* names[4] = {"forward", "backward", "update", "backward_update_fused"};
    for (size_t i = 0; i < 4; ++i) {
      nlohmann::ordered_json p;
      for (const auto& [k, v] : trainer.last_perf()[i].items()) p[std::string(k)] = v;
      perf[names[i]] = p;
    }
    j["train_step"] = {{"dims", dims},
                       {"batch", batch},
                       {"loss", r.loss},
                       {"cycles", r.cycles},
                       {"forward_cycles", r.forward_cycles},
                       {"backward_cycles", r.backward_cycles},
                       {"update_cycles", r.update_cycles},
                       {"update_busy_cycles", r.update_busy_cycles},
                       {"host_loss_seconds", r.host_loss_seconds},
                       {"host_loss_bytes", r.host_loss_bytes},
                       {"macs", r.macs},
                       {"utilization", r.utilization},
                       {"instructions", {sizes[0], sizes[1], sizes[2], sizes[3]}},
                       {"fused_update", fused},
                       {"perf", perf},
                       {"wall_s", wall}};
    if (!skip_gemm) {
      tpuw::runtime::Bf16GemmSpec s;
      s.shape = {gemm_n, gemm_n, gemm_n};
      std::normal_distribution<float> d(0.0f, 1.0f);
      std::vector<float> a(gemm_n * gemm_n), b(gemm_n * gemm_n);
      for (auto& v : a) v = d(rng);
      for (auto& v : b) v = d(rng);
      const tpuw::runtime::Bf16GemmResult g = tpuw::runtime::gemm_bf16(dev, s, a, b);
      const std::vector<float> want = tpuw::runtime::gemm_bf16_host(s, dev.info().params.array_n, a, b);
      bool equal = true;
      for (size_t i = 0; i < want.size() && equal; ++i) equal = std::bit_cast<uint32_t>(want[i]) == std::bit_cast<uint32_t>(g.c[i]);
      j["gemm_bf16"] = {{"n", gemm_n}, {"cycles", g.cycles}, {"utilization", g.utilization},
                        {"bit_exact", equal}, {"wall_s", g.wall_s}};
    }
    if (json_out) {
      std::cout << j.dump(2) << "\n";
    } else {
      const auto& t = j["train_step"];
      fmt::print("train step MLP {} batch {} on {} (N={}): {} cycles (forward {}, backward {}, update {}{}), "
                 "MXU utilization {:.3f}; host loss {:.3f} ms, {} bytes; loss {:.4f}; wall {:.2f} s\n",
                 fmt::join(dims, "-"), batch, backend, dev.info().params.array_n, r.cycles, r.forward_cycles,
                 r.backward_cycles, r.update_cycles,
                 fused ? fmt::format(" exposed; its VECTOR/ACTIVATE {}", r.update_busy_cycles) : std::string(),
                 r.utilization, r.host_loss_seconds * 1e3, r.host_loss_bytes, r.loss, wall);
      for (const char* n : names) fmt::print("  {:8}: {}\n", n, t["perf"][n].dump());
      if (!skip_gemm) {
        const auto& g = j["gemm_bf16"];
        fmt::print("bf16 GEMM {0}x{0}x{0}: {1} cycles, utilization {2:.3f}, bit-exact {3}\n", gemm_n,
                   g["cycles"].get<uint64_t>(), g["utilization"].get<double>(), g["bit_exact"].get<bool>());
      }
    }
    return 0;
  } catch (const tpuw::Error& e) {
    fmt::print(stderr, "tpuw_bench_train: {}\n", e.what());
    return 2;
  }
}
