// A convolution program whose ACTIVATE is split by requantization group (an average pool with
// count_include_pad=0 and pads, with a bias per group), then with a lookup table (ACTIVATE `lut`), on
// the verilated device: rtl == ref == nn::conv2d_int bit for bit, the same bytes and instructions.
#include <gtest/gtest.h>

#include <iostream>
#include <random>

#include "tpuw/device.h"
#include "tpuw/nn/quantize.h"
#include "tpuw/runtime/conv.h"

namespace tpuw::runtime {
namespace {

TEST(PoolGroupsRtl, SplitActivateMatchesRefAndCpu) {
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  // 3x3 average pool, pads 1, 20 channels (2 blocks) on 6x7, divisors 4, 6, 9 (group 0: 9).
  QConv2d l;
  l.name = "pool";
  l.geom.in_c = l.geom.out_c = 20;
  l.geom.in_h = 6;
  l.geom.in_w = 7;
  l.geom.kernel_h = l.geom.kernel_w = 3;
  l.geom.pad_top = l.geom.pad_left = l.geom.pad_bottom = l.geom.pad_right = 1;
  const uint64_t O = 20, taps = 9, ho = 6, wo = 7;
  l.w_q.assign(O * O * taps, 0);
  for (uint64_t o = 0; o < O; ++o) {
    for (uint64_t t = 0; t < taps; ++t) l.w_q[(o * O + o) * taps + t] = 1;
  }
  auto rq = [](double real) { return nn::quantize_multiplier(real); };
  for (uint64_t o = 0; o < O; ++o) {
    l.bias_q.push_back(0);
    l.mult.push_back(rq(1.0 / 9).mult);
    l.shift.push_back(rq(1.0 / 9).shift);
  }
  for (const double d : {6.0, 4.0}) {
    for (uint64_t o = 0; o < O; ++o) {
      l.group_bias.push_back(o % 2 == 0 ? 0 : 3);  // a bias that differs by group too
      l.group_mult.push_back(rq(1.0 / d).mult);
      l.group_shift.push_back(rq(1.0 / d).shift);
    }
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
  std::uniform_int_distribution<int> d8(-128, 127);
  std::vector<int8_t> x(batch * O * 6 * 7);
  for (auto& v : x) v = static_cast<int8_t>(d8(rng));
  Device rtl = Device::open("rtl", BackendConfig{});
  Device ref = Device::open("ref", BackendConfig{});
  const ConvRunResult a = run_conv2d(rtl, l, x, batch);
  const ConvRunResult b = run_conv2d(ref, l, x, batch);
  const std::vector<int8_t> want = nn::conv2d_int(l, x, batch);
  EXPECT_EQ(a.y, want);
  EXPECT_EQ(b.y, want);
  EXPECT_EQ(a.perf.rd_bytes, b.perf.rd_bytes);
  EXPECT_EQ(a.perf.wr_bytes, b.perf.wr_bytes);
  EXPECT_EQ(a.instructions, b.instructions);
  // The same layer with a lookup table (an activation function after it): ACTIVATE `lut` on
  // every run, the table after each group's (bias, mult, shift) rows.
  QConv2d t = l;
  for (int e = 0; e < 256; ++e) t.lut.push_back(static_cast<int8_t>((e * 37 + 11) % 256 - 128));
  const ConvRunResult at = run_conv2d(rtl, t, x, batch);
  const ConvRunResult bt = run_conv2d(ref, t, x, batch);
  const std::vector<int8_t> want_t = nn::conv2d_int(t, x, batch);
  EXPECT_EQ(at.y, want_t);
  EXPECT_EQ(bt.y, want_t);
  EXPECT_NE(want_t, want);
  const std::vector<ActivateRun> runs = activate_runs(a.plan, a.plan.images_per_tile);
  EXPECT_GT(runs.size(), 1u);
  std::cout << "pool 3x3 pad 1 count_include_pad=0, 20ch 6x7, batch 3: " << runs.size()
            << " ACTIVATEs per strip; rtl cycles " << a.cycles << ", ref " << b.cycles << "\n";
}

}  // namespace
}  // namespace tpuw::runtime
