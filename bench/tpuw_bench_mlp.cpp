// tpuw_bench_mlp: a whole quantized MLP (784-1024-1024-10, random int8 weights, batch 256) compiled
// into one device program by the network compiler and run on the verilated device (N=16).
//
// Figures: whole-network MXU utilization = sum(M*K*N) / (N^2 * PERF_CYCLES); bytes moved
// (PERF_RD_BYTES + PERF_WR_BYTES, instruction fetch included) against the minimum (every weight,
// the input and the output moved once); per-layer lines (cycles attributed, see
// tpuw/runtime/network.h); wall time and simulated cycles/s. The output is checked bit for bit
// against an integer CPU forward pass.
//
// --enforce exits 1 when a deterministic goal is missed: output != CPU, utilization < 0.80, bytes
// moved > 1.5x the minimum, the planner's traffic estimate != the PERF byte counters. Wall-clock
// rates are reported, never enforced.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/nn/qnetwork.h"
#include "tpuw/runtime/network.h"

namespace {

tpuw::nn::QNetwork make_mlp(const std::vector<uint32_t>& dims, uint64_t seed) {
  std::mt19937_64 rng(seed);
  tpuw::nn::QNetwork net;
  net.input_features = dims[0];
  for (size_t i = 1; i < dims.size(); ++i) {
    tpuw::nn::QLayer l;
    l.name = fmt::format("fc{}", i);
    l.k = dims[i - 1];
    l.n = dims[i];
    l.w_q.resize(uint64_t{l.k} * l.n);
    for (auto& w : l.w_q) w = static_cast<int8_t>(rng());
    l.bias_q.resize(l.n);
    for (auto& b : l.bias_q) b = static_cast<int32_t>(rng() % 40001) - 20000;
    const bool last = i + 1 == dims.size();
    l.int32_output = last;
    l.relu = !last;
    if (!last) {
      // Keep the int8 activations spread (not saturated): acc ~ sqrt(k) * 127 * 73.
      const int shift = 31 + static_cast<int>(std::ceil(std::log2(std::sqrt(double(l.k)) * 127.0 * 73.0 / 40.0)));
      l.mult.resize(l.n);
      l.shift.assign(l.n, static_cast<uint8_t>(shift));
      for (auto& m : l.mult) m = static_cast<int32_t>((1u << 30) + (rng() % (1u << 30)));
      l.out_scale = {0.05f};
    } else {
      l.out_scale.assign(l.n, 0.001f);
    }
    net.layers.push_back(std::move(l));
  }
  return net;
}

// Integer forward pass, exactly the arithmetic of tpuw/nn/qnetwork.h.
std::vector<int32_t> cpu_forward(const tpuw::nn::QNetwork& net, std::vector<int8_t> x, uint64_t batch) {
  for (const auto& l : net.layers) {
    std::vector<uint32_t> acc(batch * l.n);
    for (uint64_t b = 0; b < batch; ++b) {
      uint32_t* row = acc.data() + b * l.n;
      for (uint32_t j = 0; j < l.n; ++j) row[j] = static_cast<uint32_t>(l.bias_q[j]);
      for (uint32_t k = 0; k < l.k; ++k) {
        const auto xv = static_cast<uint32_t>(static_cast<int32_t>(x[b * l.k + k]));
        if (xv == 0) continue;
        const int8_t* w = l.w_q.data() + uint64_t{k} * l.n;
        for (uint32_t j = 0; j < l.n; ++j) row[j] += xv * static_cast<uint32_t>(static_cast<int32_t>(w[j]));
      }
    }
    if (l.int32_output) return {acc.begin(), acc.end()};
    std::vector<int8_t> y(acc.size());
    for (size_t i = 0; i < acc.size(); ++i) {
      const size_t j = i % l.n;
      __int128 p = static_cast<__int128>(static_cast<int32_t>(acc[i])) * l.mult[j];
      if (l.shift[j] > 0) p = (p + (static_cast<__int128>(1) << (l.shift[j] - 1))) >> l.shift[j];
      if (l.relu && p < 0) p = 0;
      y[i] = static_cast<int8_t>(std::clamp<__int128>(p, -128, 127));
    }
    x = std::move(y);
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Runs a quantized MLP (784-1024-1024-10, random int8 weights) as one device program and reports "
               "MXU utilization, bytes moved against the minimum, per-layer figures and simulation speed."};
  bool json = false;
  bool enforce = false;
  uint64_t batch = 256;
  std::string backend = "rtl";
  unsigned array_n = 16;
  std::vector<uint32_t> dims = {784, 1024, 1024, 10};
  app.add_flag("--json", json, "print one JSON object instead of the human lines");
  app.add_flag("--enforce", enforce, "exit 1 if the output is wrong, utilization < 0.80, bytes > 1.5x minimum or the plan's estimate is off");
  app.add_option("--batch", batch, "batch size")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--backend", backend, "rtl or ref")->capture_default_str()->check(CLI::IsMember({"rtl", "ref"}));
  app.add_option("--array-n", array_n, "MXU size (a built configuration)")->capture_default_str();
  app.add_option("--dims", dims, "layer widths, input first")->capture_default_str()->expected(2, 64);
  CLI11_PARSE(app, argc, argv);

  constexpr double kUtilGoal = 0.80;
  constexpr double kBytesGoal = 1.5;
  nlohmann::json out;
  bool ok = true;
  try {
    const tpuw::nn::QNetwork net = make_mlp(dims, 42);
    std::mt19937_64 rng(7);
    std::vector<int8_t> x(batch * dims[0]);
    for (auto& v : x) v = static_cast<int8_t>(rng());

    tpuw::BackendConfig cfg;
    cfg.array_n = array_n;
    cfg.memory.size = 256ull << 20;
    tpuw::Device dev = tpuw::Device::open(backend, cfg);
    const tpuw::runtime::NetworkRunResult r = tpuw::runtime::run_network(dev, net, x, batch);
    const bool correct = r.output_i32 == cpu_forward(net, x, batch);
    const uint64_t moved = r.rd_bytes + r.wr_bytes;
    const double bytes_ratio = static_cast<double>(moved) / static_cast<double>(r.min_bytes);
    // The planner's traffic estimate is exact: it must equal the PERF counters.
    const tpuw::runtime::NetworkTraffic& est = r.plan.traffic;
    const bool estimate_exact = est.rd_bytes == r.rd_bytes && est.wr_bytes == r.wr_bytes;
    ok = correct && estimate_exact && r.utilization >= kUtilGoal && bytes_ratio <= kBytesGoal;

    std::string shape;
    for (size_t i = 0; i < dims.size(); ++i) shape += (i ? "-" : "") + std::to_string(dims[i]);
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& l : r.layers) {
      layers.push_back({{"name", l.name},
                        {"m", l.m},
                        {"k", l.k},
                        {"n", l.n},
                        {"cycles", l.cycles},
                        {"utilization", l.utilization},
                        {"rd_bytes", l.rd_bytes},
                        {"wr_bytes", l.wr_bytes},
                        {"min_bytes", l.min_bytes},
                        {"mxu_active", l.mxu_active},
                        {"weight_stall", l.weight_stall},
                        {"weight_shift", l.weight_shift},
                        {"dma_wait", l.dma_wait},
                        {"act_busy", l.act_busy},
                        {"instructions", l.program.instructions}});
    }
    const auto& p = r.perf;
    out["mlp"] = {{"backend", backend},
                  {"array_n", array_n},
                  {"dims", dims},
                  {"batch", batch},
                  {"correct", correct},
                  {"cycles", r.cycles},
                  {"utilization", r.utilization},
                  {"macs", r.macs},
                  {"rd_bytes", r.rd_bytes},
                  {"wr_bytes", r.wr_bytes},
                  {"min_bytes", r.min_bytes},
                  {"bytes_over_min", bytes_ratio},
                  {"mxu_active", p.mxu_active},
                  {"weight_stall", p.weight_stall},
                  {"weight_shift", p.weight_shift},
                  {"dma_wait", p.dma_wait},
                  {"act_busy", p.act_busy},
                  {"instructions", r.instructions},
                  {"m_tiles", r.plan.m_tiles},
                  {"m_tile", r.plan.m_tile},
                  {"plan_rd_bytes", est.rd_bytes},
                  {"plan_wr_bytes", est.wr_bytes},
                  {"plan_candidates", r.plan.candidates},
                  {"plan_note", r.plan.traffic_note},
                  {"wall_s", r.wall_s},
                  {"sim_cycles_per_s", r.sim_cycles_per_s},
                  {"layers", layers}};
    if (!json) {
      fmt::print("mlp {} batch {} on {} N={}: {} cycles, utilization {:.3f} (goal >= {:.2f}); {:.2f} MB moved, "
                 "{:.3f}x the minimum {:.2f} MB (goal <= {:.1f}x); MXU active {}, weight stall {}, DMA wait {}, "
                 "act busy {}; output {}; {:.2f} s wall, {:.0f} simulated cycles/s\n",
                 shape, batch, backend, array_n, r.cycles, r.utilization, kUtilGoal, double(moved) / 1e6, bytes_ratio,
                 double(r.min_bytes) / 1e6, kBytesGoal, p.mxu_active, p.weight_stall, p.dma_wait, p.act_busy,
                 correct ? "bit-exact with the CPU" : "WRONG", r.wall_s, r.sim_cycles_per_s);
      fmt::print("  plan: {} M tile{} of {} rows, {} candidate schedules; estimate {} bytes read, {} written ({}){}{}\n",
                 r.plan.m_tiles, r.plan.m_tiles == 1 ? "" : "s", r.plan.m_tile, r.plan.candidates, est.rd_bytes,
                 est.wr_bytes, estimate_exact ? "= PERF counters" : "DIFFERS from the PERF counters",
                 r.plan.traffic_note.empty() ? "" : "; ", r.plan.traffic_note);
      for (const auto& l : r.layers) {
        fmt::print("  {:<6} {}x{}x{}: {} cycles (attributed), utilization {:.3f}, {:.3f} MB read, {:.3f} MB "
                   "written, minimum {:.3f} MB\n",
                   l.name, l.m, l.k, l.n, l.cycles, l.utilization, double(l.rd_bytes) / 1e6,
                   double(l.wr_bytes) / 1e6, double(l.min_bytes) / 1e6);
      }
    }
  } catch (const tpuw::Error& e) {
    std::cerr << "tpuw_bench_mlp: " << e.what() << "\n";
    return 1;
  }
  out["goals_met"] = ok;
  if (json) std::cout << out.dump(2) << "\n";
  if (enforce && !ok) {
    std::cerr << "tpuw_bench_mlp: a deterministic goal was missed (see above)\n";
    return 1;
  }
  return 0;
}
