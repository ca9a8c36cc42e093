// The CNN trainer's program cache (host/src/runtime/train_programs.h) on the ref backend:
// - dX of a Conv / AveragePool reads the weights the forward program uploaded, flipped and
//   transposed by its addressing (tile (ob, tap, cb) of the transposed layer is the forward's tile
//   (cb, taps - 1 - tap, ob) with LOADW transpose): dX equals conv_input_grad_bf16_host bit for bit,
//   the host lays out only dy (no weights), the forward's all-zero tiles stay skipped, and new
//   weights in the next forward are what the next dX uses, without recompiling;
// - dW/db with the im2col on the device run as one program per layer (the blocks' one-hot
//   convolutions and GEMMs behind in-program FENCEs) and equal conv_param_grads_bf16_host.
#include <gtest/gtest.h>

#include <bit>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/runtime/conv_bf16.h"
#include "tpuw/runtime/conv_train_bf16.h"
#include "conv_train_fixtures.h"
#include "train_programs.h"

namespace tpuw::runtime {
namespace {

using Kind = Bf16ConvLayer::Kind;
using conv_fixtures::expect_bits;
using conv_fixtures::GeomCase;
using conv_fixtures::geom;
using conv_fixtures::normal;

// A Conv (conv_layer) or an AveragePool (pool_layer); a pool draws nothing from `rng`.
Bf16ConvLayer layer(const ConvGeometry& g, Kind kind, std::mt19937& rng) {
  return kind == Kind::kAvgPool ? conv_fixtures::pool_layer(g, kind) : conv_fixtures::conv_layer(g, rng);
}
struct Case {
  const char* what;
  unsigned array_n;
  Kind kind;
  ConvGeometry g;
  uint64_t batch;
};

const Case kCases[] = {
    {"3x3 s1 p1, two channel blocks each way", 16, Kind::kConv, geom(20, 7, 6, 18, 3, 1, 1, 1), 3},
    {"3x3 d2 p2, N=4 (2 x 2 blocks)", 4, Kind::kConv, geom(5, 9, 8, 6, 3, 1, 2, 2), 2},
    {"4x4 s1 p1, asymmetric channels", 4, Kind::kConv, geom(3, 8, 7, 9, 4, 1, 1, 1), 2},
    {"1x1", 16, Kind::kConv, geom(17, 5, 5, 9, 1, 1, 1, 0), 4},
    {"3x3 s2 p2 (zeros inserted)", 4, Kind::kConv, geom(4, 9, 9, 6, 3, 2, 1, 2), 2},
    {"avg 3x3 s1, N=4: off-diagonal tiles zero", 4, Kind::kAvgPool, geom(10, 7, 7, 10, 3, 1, 1, 1), 2},
    // Stride phases: each phase's taps are forward taps (every (s/gcd(s, d))-th, flipped).
    {"3x3 s2 p1 (phases), two channel blocks", 16, Kind::kConv, geom(20, 9, 8, 18, 3, 2, 1, 1), 2},
    {"4x4 s2 d3 p1 (phases)", 16, Kind::kConv, geom(7, 15, 14, 9, 4, 2, 3, 1), 2},
    {"5x5 s2 p2 N=4 (phases)", 4, Kind::kConv, geom(6, 12, 11, 5, 5, 2, 1, 2), 2},
    {"2x2 s3 (a phase no tap reaches)", 4, Kind::kConv, geom(3, 10, 10, 5, 2, 3, 1, 0), 2},
    {"avg 3x3 s2 (phases, zero tiles)", 4, Kind::kAvgPool, geom(6, 9, 9, 6, 3, 2, 1, 1), 2},
};

TEST(TrainPrograms, InputGradReadsTheForwardWeights) {
  uint32_t seed = 7;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.what);
    std::mt19937 rng(seed++);
    Bf16ConvLayer l = layer(c.g, c.kind, rng);
    const std::vector<float> x = normal(c.batch * c.g.in_c * c.g.in_h * c.g.in_w, rng, 1.0f);
    BackendConfig cfg;
    cfg.array_n = c.array_n;
    Device dev = Device::open("ref", cfg);
    detail::TrainProgramCache cache(dev);
    for (int step = 0; step < 2; ++step) {
      SCOPED_TRACE(step);
      if (step == 1 && c.kind == Kind::kConv) {
        for (float& w : l.w) w *= -0.75f;  // the next step's weights: same zero tiles
      }
      cache.conv(0, l, x, c.batch);  // the forward uploads the weights
      const uint64_t compiled = cache.compiled();
      const std::vector<float> dy = normal(c.batch * c.g.out_c * c.g.out_h() * c.g.out_w(), rng, 1.0f);
      uint64_t macs = 0;
      const ConvInputGradResult r = detail::conv_input_grad_cached(cache, 1, l, dy, c.batch, &macs, 0);
      expect_bits(r.dx, conv_input_grad_bf16_host(l, dy, c.batch, c.array_n), "dx");
      const std::vector<detail::InputGradPhase> phases = detail::conv_input_grad_phases(l);
      uint64_t programs = 1;
      if (phases.empty()) {
        EXPECT_EQ(r.host_bytes, 2 * insert_grad_zeros(l, dy, c.batch).size()) << "dy only: no weight layout";
      } else {
        // Per phase dy, and dX interleaved: no weights (the host path adds 2 bytes per phase weight).
        programs = 0;
        for (const detail::InputGradPhase& ph : phases) programs += ph.empty ? 0 : 1;
        EXPECT_EQ(r.host_bytes, 2 * (programs * dy.size() + r.dx.size()));
      }
      EXPECT_GT(r.run.cycles, 0u);
      EXPECT_GT(macs, 0u);
      // Compiled in the first step (the forward and dX), reused in the second.
      EXPECT_EQ(cache.compiled(), step == 0 ? compiled + programs : compiled);
      if (c.kind == Kind::kAvgPool) {
        // The forward's all-zero tiles are the transposed layer's: skipped there too, so the MACs
        // are those of the host-laid-out transposed layer's plan.
        Device dev2 = Device::open("ref", cfg);
        detail::TrainProgramCache host_laid_out(dev2);
        uint64_t macs_h = 0;
        const ConvInputGradResult h = detail::conv_input_grad_cached(host_laid_out, 1, l, dy, c.batch, &macs_h);
        EXPECT_EQ(macs, macs_h);
        EXPECT_EQ(r.run.cycles, h.run.cycles);
      }
    }
  }
}

TEST(TrainPrograms, InputGradWithoutAForwardProgramLaysOutTheWeights) {
  std::mt19937 rng(3);
  const Bf16ConvLayer l = layer(geom(5, 6, 6, 7, 3, 1, 1, 1), Kind::kConv, rng);
  BackendConfig cfg;
  cfg.array_n = 4;
  Device dev = Device::open("ref", cfg);
  detail::TrainProgramCache cache(dev);
  const std::vector<float> dy = normal(2 * 7 * 36, rng, 1.0f);
  const ConvInputGradResult r = detail::conv_input_grad_cached(cache, 1, l, dy, 2, nullptr, 0);
  expect_bits(r.dx, conv_input_grad_bf16_host(l, dy, 2, 4), "dx");
  EXPECT_EQ(r.host_bytes, 2 * (dy.size() + l.w.size()));
}

TEST(TrainPrograms, DirectParamGradsMatchTheContract) {
  // The direct dW program (no im2col: weight tiles gathered from the forward's packed input) ==
  // conv_param_grads_bf16_host bit for bit, for one and several channel blocks, strides (phase-split
  // input), dilation, asymmetric pads, a partial last pixel block, and ACC passes.
  std::vector<GeomCase> cases = {
      {"3x3 s1 p1, C=20 (two channel blocks), O=18", 16, geom(20, 7, 6, 18, 3, 1, 1, 1), 3},
      {"4x4 C=8 O=16 (the Fashion conv2)", 16, geom(8, 14, 14, 16, 4, 1, 1, 0), 2},
      {"3x3 s2, asymmetric pads", 16, geom(8, 10, 11, 16, 3, 2, 1, 1), 2},
      {"3x3 d2 p2", 16, geom(5, 9, 8, 6, 3, 1, 2, 2), 2},
      {"5x5 s2 p2", 16, geom(12, 12, 12, 10, 5, 2, 1, 2), 1},
      {"1x1 C=1", 16, geom(1, 5, 5, 3, 1, 1, 1, 0), 3},
      {"3x3 N=4", 4, geom(5, 7, 6, 6, 3, 1, 1, 1), 2},
      // 19 groups of O = 256 ACC rows: more than the 4096 ACC rows, two passes over the pixels.
      {"3x3 C=32 O=256: two ACC passes", 16, geom(32, 5, 4, 256, 3, 1, 1, 1), 2},
  };
  cases[2].g.pad_bottom = 0;
  cases[2].g.pad_right = 2;
  uint32_t seed = 21;
  for (const GeomCase& c : cases) {
    SCOPED_TRACE(c.what);
    std::mt19937 rng(seed++);
    const Bf16ConvLayer l = layer(c.g, Kind::kConv, rng);
    BackendConfig cfg;
    cfg.array_n = c.array_n;
    Device dev = Device::open("ref", cfg);
    detail::TrainProgramCache cache(dev);
    cache.set_dw_mode(detail::TrainProgramCache::DwMode::kDirect);
    for (int step = 0; step < 2; ++step) {
      SCOPED_TRACE(step);
      const std::vector<float> x = normal(c.batch * c.g.in_c * c.g.in_h * c.g.in_w, rng, 1.0f);
      const std::vector<float> dy = normal(c.batch * c.g.out_c * c.g.out_h() * c.g.out_w(), rng, 1.0f);
      if (step == 0) cache.conv(0, l, x, c.batch);  // step 1: no forward upload of x, its own
      ConvParamGradResult r;
      uint64_t macs = 0;
      ASSERT_TRUE(cache.conv_param_grads(2, step == 0 ? 0 : 5, l, x, conv_grad_rows(l, dy, c.batch), c.batch, r, macs));
      EXPECT_TRUE(cache.last_dw_direct());
      const ConvParamGradResult want = conv_param_grads_bf16_host(l, x, dy, c.batch, c.array_n);
      expect_bits(r.dw, want.dw, "dw");
      expect_bits(r.db, want.db, "db");
      EXPECT_GT(r.gemm.cycles, 0u);
      EXPECT_GT(macs, 0u);
    }
  }
}

TEST(TrainPrograms, DwModeIsChosenByEstimatedCycles) {
  // The Fashion CNN's layers at batch 32: conv1 (C = 1, 3x3) keeps the one-hot im2col (each
  // gathered weight tile would carry 1 of 16 columns), conv2 (C = 8, 4x4) takes the direct program;
  // the choice is the cheaper one as measured.
  Device dev = Device::open("ref", BackendConfig{});
  std::mt19937 rng(5);
  for (int which = 0; which < 2; ++which) {
    const ConvGeometry g = which == 0 ? geom(1, 28, 28, 8, 3, 1, 1, 1) : geom(8, 14, 14, 16, 4, 1, 1, 1);
    const uint64_t batch = 32;
    const Bf16ConvLayer l = layer(g, Kind::kConv, rng);
    const std::vector<float> x = normal(batch * g.in_c * g.in_h * g.in_w, rng, 1.0f);
    const std::vector<float> dy = normal(batch * g.out_c * g.out_h() * g.out_w(), rng, 1.0f);
    const std::vector<float> d = conv_grad_rows(l, dy, batch);
    uint64_t cycles[3] = {};
    bool direct[3] = {};
    for (int mode = 0; mode < 3; ++mode) {
      detail::TrainProgramCache cache(dev);
      cache.set_dw_mode(static_cast<detail::TrainProgramCache::DwMode>(mode));
      cache.conv(0, l, x, batch);
      ConvParamGradResult r;
      uint64_t macs = 0;
      ASSERT_TRUE(cache.conv_param_grads(2, 0, l, x, d, batch, r, macs));
      cycles[mode] = r.gemm.cycles;
      direct[mode] = cache.last_dw_direct();
      const ConvParamGradResult want = conv_param_grads_bf16_host(l, x, dy, batch, 16);
      expect_bits(r.dw, want.dw, "dw");
      expect_bits(r.db, want.db, "db");
    }
    EXPECT_EQ(direct[0], which == 1);
    EXPECT_FALSE(direct[1]);
    EXPECT_TRUE(direct[2]);
    // (A program's cycles vary by a few with the DMA's state: within 0.1%.)
    EXPECT_LE(static_cast<double>(cycles[0]), 1.001 * static_cast<double>(std::min(cycles[1], cycles[2])));
    std::printf("%s: one-hot %llu cycles, direct %llu\n", which == 0 ? "conv1" : "conv2",
                static_cast<unsigned long long>(cycles[1]), static_cast<unsigned long long>(cycles[2]));
  }
}

TEST(TrainPrograms, TapLanesAreTheLayerBitForBit) {
  // A Conv with one input channel as a 1x1 convolution over its im2col (tap t in lane t): the
  // forward output and dW/db (direct and one-hot) equal the layer's contract bit for bit, for pads,
  // stride 2, dilation and 16 taps at N = 16 (every lane), and 4 taps at N = 4.
  std::vector<GeomCase> cases = {
      {"3x3 p1 (the Fashion conv1)", 16, geom(1, 12, 12, 8, 3, 1, 1, 1), 3},
      {"4x4 s2 p1: 16 taps", 16, geom(1, 11, 10, 5, 4, 2, 1, 1), 2},
      {"3x3 d2 p2, asymmetric pads", 16, geom(1, 9, 8, 20, 3, 1, 2, 2), 2},
      {"2x2 N=4", 4, geom(1, 6, 7, 6, 2, 1, 1, 0), 2},
  };
  cases[2].g.pad_bottom = 1;
  uint32_t seed = 31;
  for (const GeomCase& c : cases) {
    SCOPED_TRACE(c.what);
    std::mt19937 rng(seed++);
    Bf16ConvLayer l = layer(c.g, Kind::kConv, rng);
    l.relu = true;
    const std::vector<float> x = normal(c.batch * c.g.in_h * c.g.in_w, rng, 1.0f);
    const std::vector<float> dy = normal(c.batch * c.g.out_c * c.g.out_h() * c.g.out_w(), rng, 1.0f);
    const Bf16ConvLayer t = detail::tap_lane_layer(l);
    const std::vector<float> xl = detail::tap_lane_input(l, x, c.batch);
    EXPECT_EQ(t.geom.in_c, uint64_t{c.g.kernel_h} * c.g.kernel_w);
    BackendConfig cfg;
    cfg.array_n = c.array_n;
    Device dev = Device::open("ref", cfg);
    const ConvParamGradResult want = conv_param_grads_bf16_host(l, x, dy, c.batch, c.array_n);
    for (const auto mode : {detail::TrainProgramCache::DwMode::kDirect, detail::TrainProgramCache::DwMode::kOneHot}) {
      detail::TrainProgramCache cache(dev);
      cache.set_dw_mode(mode);
      const ConvBf16RunResult y = cache.conv(0, t, xl, c.batch);
      expect_bits(y.y, conv2d_bf16_host(l, x, c.batch, c.array_n), "y");
      ConvParamGradResult r;
      uint64_t macs = 0;
      ASSERT_TRUE(cache.conv_param_grads(2, 0, t, xl, conv_grad_rows(l, dy, c.batch), c.batch, r, macs));
      expect_bits(r.dw, want.dw, "dw");
      expect_bits(r.db, want.db, "db");
    }
  }
  std::mt19937 rng(1);
  const Bf16ConvLayer two = layer(geom(2, 5, 5, 3, 3, 1, 1, 1), Kind::kConv, rng);
  EXPECT_THROW(detail::tap_lane_layer(two), Error);
}

TEST(TrainPrograms, ParamGradsAreOneProgramPerLayer) {
  // N = 4: up to 14 column blocks of [im2col | 1] (a constant all-ones block included).
  const Case cases[] = {
      {"3x3 C=5 N=4: 12 blocks", 4, Kind::kConv, geom(5, 7, 6, 6, 3, 1, 1, 1), 2},
      {"1x1 C=3 N=4: ones column alone in block 1", 4, Kind::kConv, geom(4, 5, 5, 5, 1, 1, 1, 0), 3},
      {"3x3 s2 N=16", 16, Kind::kConv, geom(8, 10, 11, 16, 3, 2, 1, 1), 2},
  };
  uint32_t seed = 11;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::mt19937 rng(seed++);
    const Bf16ConvLayer l = layer(c.g, c.kind, rng);
    BackendConfig cfg;
    cfg.array_n = c.array_n;
    Device dev = Device::open("ref", cfg);
    detail::TrainProgramCache cache(dev);
    cache.set_dw_mode(detail::TrainProgramCache::DwMode::kOneHot);
    for (int step = 0; step < 2; ++step) {
      SCOPED_TRACE(step);
      const std::vector<float> x = normal(c.batch * c.g.in_c * c.g.in_h * c.g.in_w, rng, 1.0f);
      const std::vector<float> dy = normal(c.batch * c.g.out_c * c.g.out_h() * c.g.out_w(), rng, 1.0f);
      cache.conv(0, l, x, c.batch);  // the forward: its uploaded input is the im2col's
      ConvParamGradResult r;
      uint64_t macs = 0;
      ASSERT_TRUE(cache.conv_param_grads(2, 0, l, x, conv_grad_rows(l, dy, c.batch), c.batch, r, macs));
      const ConvParamGradResult want = conv_param_grads_bf16_host(l, x, dy, c.batch, c.array_n);
      expect_bits(r.dw, want.dw, "dw");
      expect_bits(r.db, want.db, "db");
      EXPECT_EQ(r.host_bytes, 2 * dy.size()) << "the gradient rows only: x is the forward's upload";
      EXPECT_GT(r.gemm.cycles, 0u);
      EXPECT_EQ(r.gemm.cycles, r.gemm.perf.cycles) << "one program: its PERF_CYCLES are the layer's";
      EXPECT_GT(macs, 0u);
    }
    EXPECT_EQ(cache.compiled(), 2u);  // the forward and the dW program, once
  }
}

}  // namespace
}  // namespace tpuw::runtime
