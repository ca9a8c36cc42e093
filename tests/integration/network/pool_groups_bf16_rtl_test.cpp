// A bf16 convolution program with pixel groups (an average pool whose divisor varies by pixel: a
// VECTOR SCALE per run of ACC rows; with a bias that differs by group: one ACTIVATE per run) on the
// verilated device: rtl == ref == conv2d_bf16_host bit for bit, the same bytes and instructions.
#include <gtest/gtest.h>

#include <bit>
#include <iostream>
#include <random>

#include "tpuw/device.h"
#include "tpuw/runtime/conv_bf16.h"

namespace tpuw::runtime {
namespace {

TEST(PoolGroupsBf16Rtl, ScaledRunsMatchRefAndCpu) {
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  // 3x3 average pool, pads 1, 20 channels (2 blocks) on 6x7, divisors 9, 6, 4 (count_include_pad=0).
  Bf16ConvLayer l;
  l.name = "pool";
  l.kind = Bf16ConvLayer::Kind::kAvgPool;
  l.geom.in_c = l.geom.out_c = 20;
  l.geom.in_h = 6;
  l.geom.in_w = 7;
  l.geom.kernel_h = l.geom.kernel_w = 3;
  l.geom.pad_top = l.geom.pad_left = l.geom.pad_bottom = l.geom.pad_right = 1;
  const uint64_t O = 20, taps = 9, ho = 6, wo = 7;
  l.w.assign(O * O * taps, 0.0f);
  for (uint64_t o = 0; o < O; ++o) {
    for (uint64_t t = 0; t < taps; ++t) l.w[(o * O + o) * taps + t] = 1.0f;
  }
  l.bias.assign(O, 0.0f);
  for (const double d : {9.0, 6.0, 4.0}) {
    l.group_scale.push_back(static_cast<float>(1.0 / d));
    l.group_bias.insert(l.group_bias.end(), O, 0.0f);
  }
  l.pixel_group.resize(ho * wo);
  for (uint64_t oy = 0; oy < ho; ++oy) {
    for (uint64_t ox = 0; ox < wo; ++ox) {
      const int edges = (oy == 0 || oy == ho - 1 ? 1 : 0) + (ox == 0 || ox == wo - 1 ? 1 : 0);
      l.pixel_group[oy * wo + ox] = static_cast<uint16_t>(edges);  // 0: 9, 1: 6, 2: 4
    }
  }
  const uint64_t batch = 3;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(batch * O * ho * wo);
  for (auto& v : x) v = nd(rng);
  Device rtl = Device::open("rtl", BackendConfig{});
  Device ref = Device::open("ref", BackendConfig{});
  for (const bool bias_groups : {false, true}) {
    SCOPED_TRACE(bias_groups ? "a bias per group (ACTIVATE per run)" : "one ACTIVATE per strip");
    if (bias_groups) {
      for (size_t i = 0; i < l.group_bias.size(); ++i) l.group_bias[i] = 0.25f * static_cast<float>(i / O) - 0.125f;
    }
    const ConvBf16RunResult a = run_conv2d_bf16(rtl, l, x, batch);
    const ConvBf16RunResult b = run_conv2d_bf16(ref, l, x, batch);
    const std::vector<float> want = conv2d_bf16_host(l, x, batch, 16);
    ASSERT_EQ(a.y.size(), want.size());
    ASSERT_EQ(b.y.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(a.y[i]), std::bit_cast<uint32_t>(want[i])) << "rtl " << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(b.y[i]), std::bit_cast<uint32_t>(want[i])) << "ref " << i;
    }
    EXPECT_EQ(a.perf.rd_bytes, b.perf.rd_bytes);
    EXPECT_EQ(a.perf.wr_bytes, b.perf.wr_bytes);
    EXPECT_EQ(a.instructions, b.instructions);
    std::cout << "bf16 pool 3x3 pad 1 count_include_pad=0, 20ch 6x7, batch 3" << (bias_groups ? ", bias per group" : "")
              << ": " << a.instructions << " instructions; rtl cycles " << a.cycles << ", ref " << b.cycles << "\n";
  }
}

}  // namespace
}  // namespace tpuw::runtime
