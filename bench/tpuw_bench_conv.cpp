// tpuw_bench_conv: one 2-D convolution as an implicit GEMM on the device (patches formed by UB
// address generation), int8 (tpuw/runtime/conv.h) or with --dtype bf16 (bf16 x bf16 -> fp32,
// tpuw/runtime/conv_bf16.h). Default: 3x3, 64 -> 64 channels, 28x28, batch 32, stride 1, pad 1,
// rtl backend, N=16 (issue 13's figure).
//
// Figures: MXU utilization = MACs / (N^2 * PERF_CYCLES); row efficiency (the share of streamed MXU
// rows that are output pixels: the rest are the padded border columns); bytes moved (PERF_RD_BYTES
// + PERF_WR_BYTES, instruction fetch included) against the minimum (input, weights, bias, output
// once; 2-byte elements in bf16); stall counters. The output is checked bit for bit against the
// CPU model (int8: the integer convolution; bf16: conv2d_bf16_host, the numerics contract).
//
// --enforce exits 1 when a deterministic goal is missed: output != CPU, utilization < 0.80, bytes
// moved > 1.5x the minimum.
//
// --maxpool: a max pool of the input instead (kernel, stride, pad, dilation as given; ISA 1.3 VECTOR
// IMAX in int8, MAX in bf16; tpuw/runtime/maxpool.h), checked against the host max pool; its goals
// are the output and the bytes (it has no MACs of its own). --maxpool --indices: with ONNX's
// Indices output too (tpuw/runtime/maxpool_indices.h), values and indices checked against the CPU;
// its goal is the output only (the per-tap index constants are extra bytes, reported).
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/nn/quantize.h"
#include "tpuw/runtime/conv.h"
#include "tpuw/runtime/conv_bf16.h"
#include "tpuw/runtime/maxpool.h"
#include "tpuw/runtime/maxpool_indices.h"

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](float x, float y) {
           return std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y);
         });
}

// The bf16 run's figures in the int8 result the report prints.
void take_figures(const tpuw::runtime::ConvBf16RunResult& rb, tpuw::runtime::ConvRunResult& r) {
  r.plan = rb.plan;
  r.perf = rb.perf;
  r.cycles = rb.cycles;
  r.utilization = rb.utilization;
  r.row_efficiency = rb.row_efficiency;
  r.min_bytes = rb.min_bytes;
  r.moved_bytes = rb.moved_bytes;
  r.instructions = rb.instructions;
  r.wall_s = rb.wall_s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Runs one int8 or bf16 convolution (implicit GEMM, on-chip patches) and reports cycles, MXU utilization and "
               "bytes moved against the minimum."};
  bool json = false, enforce = false, depthwise = false, maxpool = false, indices = false;
  uint64_t batch = 32;
  std::string backend = "rtl", dtype = "int8";
  unsigned array_n = 16;
  uint32_t in_c = 64, out_c = 64, size = 28, kernel = 3, stride = 1, pad = 1, dilation = 1;
  app.add_flag("--json", json, "print one JSON object instead of the human line");
  app.add_flag("--depthwise", depthwise, "depthwise (group = channels): weights zero off the channel diagonal");
  app.add_flag("--maxpool", maxpool, "a max pool of the input (kernel, stride, pad, dilation) instead of a convolution");
  app.add_flag("--indices", indices, "with --maxpool: ONNX's Indices output too (the argmax on the device)");
  app.add_flag("--enforce", enforce, "exit 1 if the output is wrong, utilization < 0.80 or bytes > 1.5x minimum");
  app.add_option("--batch", batch, "batch size")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--backend", backend, "rtl or ref")->capture_default_str()->check(CLI::IsMember({"rtl", "ref"}));
  app.add_option("--dtype", dtype, "int8 or bf16")->capture_default_str()->check(CLI::IsMember({"int8", "bf16"}));
  app.add_option("--array-n", array_n, "MXU size (a built configuration)")->capture_default_str();
  app.add_option("--in-channels", in_c, "input channels")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--out-channels", out_c, "output channels")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--size", size, "input height = width")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--kernel", kernel, "kernel height = width")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--stride", stride, "stride")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--pad", pad, "padding on every side")->capture_default_str();
  app.add_option("--dilation", dilation, "dilation")->capture_default_str()->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  constexpr double kUtilGoal = 0.80;
  constexpr double kBytesGoal = 1.5;
  nlohmann::json out;
  bool ok = true;
  try {
    tpuw::runtime::QConv2d l;
    l.name = "conv";
    auto& g = l.geom;
    g.in_c = in_c, g.in_h = size, g.in_w = size, g.out_c = out_c, g.kernel_h = kernel, g.kernel_w = kernel;
    g.stride_h = g.stride_w = stride;
    g.dilation_h = g.dilation_w = dilation;
    g.pad_top = g.pad_left = g.pad_bottom = g.pad_right = pad;
    std::mt19937_64 rng(42);
    l.w_q.resize(uint64_t{out_c} * in_c * kernel * kernel);
    for (auto& w : l.w_q) w = static_cast<int8_t>(rng());
    if (depthwise) {  // what the compiler makes of a group = channels Conv: zeros off the diagonal
      out_c = in_c;
      g.out_c = out_c;
      l.w_q.assign(uint64_t{out_c} * in_c * kernel * kernel, 0);
      for (uint64_t o = 0; o < out_c; ++o) {
        for (uint64_t t = 0; t < uint64_t{kernel} * kernel; ++t) l.w_q[(o * in_c + o) * kernel * kernel + t] = static_cast<int8_t>(rng() | 1);
      }
    }
    const double fan = (depthwise ? 1.0 : double(in_c)) * kernel * kernel;
    for (uint32_t o = 0; o < out_c; ++o) {
      l.bias_q.push_back(static_cast<int32_t>(rng() % 40001) - 20000);
      const tpuw::nn::Requant rq = tpuw::nn::quantize_multiplier((0.5 + 0.01 * o) / (64.0 * std::sqrt(fan)));
      l.mult.push_back(rq.mult);
      l.shift.push_back(rq.shift);
    }
    l.relu = true;
    std::vector<int8_t> x(batch * in_c * size * size);
    for (auto& v : x) v = static_cast<int8_t>(rng());

    tpuw::BackendConfig cfg;
    cfg.array_n = array_n;
    cfg.memory.size = 256ull << 20;
    tpuw::Device dev = tpuw::Device::open(backend, cfg);
    // bf16: the same weights and input as floats (the int8 values / 64: exact in bf16), the bias
    // as fp32, the same ReLU.
    tpuw::runtime::ConvRunResult r;
    bool correct = false;
    if (maxpool) {
      out_c = in_c;
      g.out_c = in_c;
      l.max_pool = true;
      l.w_q.clear(), l.bias_q.clear(), l.mult.clear(), l.shift.clear();
    }
    if (maxpool && dtype == "bf16") {
      tpuw::runtime::Bf16ConvLayer lb;
      lb.name = "maxpool";
      lb.kind = tpuw::runtime::Bf16ConvLayer::Kind::kMaxPool;
      lb.geom = l.geom;
      std::vector<float> xf;
      for (const int8_t v : x) xf.push_back(static_cast<float>(v) / 64.0f);
      const std::vector<float> want = tpuw::runtime::max_pool_bf16_host(lb, xf, batch, array_n);
      if (indices) {
        const tpuw::runtime::MaxPoolIndicesBf16Run ri =
            tpuw::runtime::run_max_pool_bf16_indices(dev, lb, xf, batch, false);
        correct = same_bits(ri.values.y, want) &&
                  ri.indices == tpuw::runtime::max_pool_indices_host<float>(l.geom, xf, batch, false);
        take_figures(ri.values, r);
      } else {
        const tpuw::runtime::ConvBf16RunResult rb = tpuw::runtime::run_max_pool_bf16(dev, lb, xf, batch);
        correct = same_bits(rb.y, want);
        take_figures(rb, r);
      }
    } else if (maxpool && indices) {
      tpuw::runtime::MaxPoolIndicesRun ri = tpuw::runtime::run_max_pool_indices(dev, l, x, batch, false);
      correct = ri.values.y == tpuw::nn::conv2d_int(l, x, batch) &&
                ri.indices == tpuw::runtime::max_pool_indices_host<int8_t>(l.geom, x, batch, false);
      r = std::move(ri.values);
    } else if (maxpool) {
      r = tpuw::runtime::run_max_pool(dev, l, x, batch);
      correct = r.y == tpuw::nn::conv2d_int(l, x, batch);
    } else if (dtype == "bf16") {
      tpuw::runtime::Bf16ConvLayer lb;
      lb.name = l.name;
      lb.geom = l.geom;
      lb.relu = l.relu;
      for (const int8_t w : l.w_q) lb.w.push_back(static_cast<float>(w) / 64.0f);
      for (const int32_t b : l.bias_q) lb.bias.push_back(static_cast<float>(b) / 8192.0f);
      std::vector<float> xf;
      for (const int8_t v : x) xf.push_back(static_cast<float>(v) / 64.0f);
      const tpuw::runtime::ConvBf16RunResult rb = tpuw::runtime::run_conv2d_bf16(dev, lb, xf, batch);
      correct = same_bits(rb.y, tpuw::runtime::conv2d_bf16_host(lb, xf, batch, array_n));
      take_figures(rb, r);
    } else {
      r = tpuw::runtime::run_conv2d(dev, l, x, batch);
      correct = r.y == tpuw::nn::conv2d_int(l, x, batch);
    }
    const double bytes_ratio = double(r.moved_bytes) / double(r.min_bytes);
    // Depthwise: the useful MACs are 1/in_c of a dense layer's (one input channel per output).
    const double util = depthwise ? r.utilization / in_c : r.utilization;
    ok = correct && (maxpool || util >= kUtilGoal) && (indices || bytes_ratio <= kBytesGoal);
    const auto& p = r.perf;
    const auto& pl = r.plan;
    out["conv"] = {{"backend", backend},
                   {"dtype", dtype},
                   {"array_n", array_n},
                   {"batch", batch},
                   {"in_channels", in_c},
                   {"out_channels", out_c},
                   {"size", size},
                   {"kernel", kernel},
                   {"stride", stride},
                   {"pad", pad},
                   {"dilation", dilation},
                   {"correct", correct},
                   {"cycles", r.cycles},
                   {"macs", maxpool ? 0 : pl.macs()},
                   {"maxpool", maxpool},
                   {"indices", indices},
                   {"utilization", util},
                   {"depthwise", depthwise},
                   {"executed_weight_tiles", pl.executed_tiles()},
                   {"row_efficiency", r.row_efficiency},
                   {"rd_bytes", p.rd_bytes},
                   {"wr_bytes", p.wr_bytes},
                   {"min_bytes", r.min_bytes},
                   {"bytes_over_min", bytes_ratio},
                   {"mxu_active", p.mxu_active},
                   {"weight_stall", p.weight_stall},
                   {"weight_shift", p.weight_shift},
                   {"dma_wait", p.dma_wait},
                   {"act_busy", p.act_busy},
                   {"instructions", r.instructions},
                   {"images_per_tile", pl.images_per_tile},
                   {"tiles", pl.tiles},
                   {"rows_per_matmul", pl.acc_rows},
                   {"weights_resident", pl.weights_resident},
                   {"pinned_weight_tiles", pl.pinned_tiles},
                   {"wall_s", r.wall_s}};
    if (!json) {
      fmt::print("{}{} {} {}x{} {}->{} on {}x{}, stride {}, pad {}, dilation {}, batch {}, {} N={}: {} cycles, utilization "
                 "{:.3f} (goal >= {:.2f}; row efficiency {:.3f}); {:.2f} MB moved, {:.3f}x the minimum {:.2f} MB (goal "
                 "<= {:.1f}x); MXU active {}, weight stall {}, DMA wait {}, act busy {}; output {}; {:.2f} s wall\n",
                 depthwise ? "depthwise " : "", dtype, maxpool ? (indices ? "maxpool+indices" : "maxpool") : "conv", kernel, kernel, in_c, out_c, size, size, stride, pad, dilation, batch,
                 backend, array_n, r.cycles, util, kUtilGoal, r.row_efficiency, double(r.moved_bytes) / 1e6, bytes_ratio,
                 double(r.min_bytes) / 1e6, kBytesGoal, p.mxu_active, p.weight_stall, p.dma_wait, p.act_busy,
                 correct ? "bit-exact with the CPU model" : "WRONG", r.wall_s);
      fmt::print("  plan: {} tiles of {} images, {} rows per MATMUL ({} output pixels per image), {} instructions, "
                 "weights {}\n",
                 pl.tiles, pl.images_per_tile, pl.acc_rows, pl.ho * pl.wo, r.instructions,
                 pl.weights_resident ? "loaded once (resident in the WB)"
                                     : fmt::format("{} of {} tiles pinned in the WB, the rest streamed per tile",
                                                   pl.pinned_tiles, pl.weight_tiles));
    }
  } catch (const tpuw::Error& e) {
    std::cerr << "tpuw_bench_conv: " << e.what() << "\n";
    return 1;
  }
  out["goals_met"] = ok;
  if (json) std::cout << out.dump(2) << "\n";
  if (enforce && !ok) {
    std::cerr << "tpuw_bench_conv: a deterministic goal was missed (see above)\n";
    return 1;
  }
  return 0;
}
