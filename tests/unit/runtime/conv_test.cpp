// Convolution as an implicit GEMM on the ref backend: every attribute combination equals the
// integer CPU convolution bit for bit; the plan's layout and traffic; malformed geometries.
#include <gtest/gtest.h>

#include <random>
#include <span>
#include <vector>

#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/nn/quantize.h"
#include "tpuw/runtime/conv.h"
#include "conv_cases.h"

namespace tpuw::runtime {
namespace {

QConv2d random_layer(const ConvGeometry& g, std::mt19937& rng, bool relu, bool bias) {
  QConv2d l;
  l.name = "conv";
  l.geom = g;
  l.relu = relu;
  std::uniform_int_distribution<int> w8(-127, 127);
  l.w_q.resize(uint64_t{g.out_c} * g.in_c * g.kernel_h * g.kernel_w);
  for (auto& v : l.w_q) v = static_cast<int8_t>(w8(rng));
  std::uniform_int_distribution<int32_t> bd(-20000, 20000);
  // A requantization that keeps the outputs spread over int8: ~1 / (64 * sqrt(fan-in)).
  const double fan = static_cast<double>(g.in_c) * g.kernel_h * g.kernel_w;
  for (uint32_t o = 0; o < g.out_c; ++o) {
    l.bias_q.push_back(bias ? bd(rng) : 0);
    const nn::Requant rq = nn::quantize_multiplier((0.5 + 0.01 * o) / (64.0 * std::sqrt(fan)));
    l.mult.push_back(rq.mult);
    l.shift.push_back(rq.shift);
  }
  return l;
}

std::vector<int8_t> random_input(uint64_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> d(-128, 127);
  std::vector<int8_t> v(n);
  for (auto& x : v) x = static_cast<int8_t>(d(rng));
  return v;
}

using Case = conv_cases::ConvCase;
using conv_cases::geom;

std::vector<Case> cases() {
  std::vector<Case> v;
  conv_cases::add_attribute_cases(v, 5);
  return v;
}

void run_case(unsigned array_n, const Case& c, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << c.what << " N=" << array_n);
  std::mt19937 rng(seed);
  const QConv2d l = random_layer(c.g, rng, c.relu, c.bias);
  const std::vector<int8_t> x = random_input(c.batch * c.g.in_c * c.g.in_h * c.g.in_w, rng);
  BackendConfig cfg;
  cfg.array_n = array_n;
  Device dev = Device::open("ref", cfg);
  const ConvRunResult r = run_conv2d(dev, l, x, c.batch);
  const std::vector<int8_t> want = nn::conv2d_int(l, x, c.batch);
  ASSERT_EQ(r.y.size(), want.size());
  size_t nonzero = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(r.y[i], want[i]) << "element " << i;
    nonzero += want[i] != 0;
  }
  EXPECT_GT(nonzero, want.size() / 4);  // the test data exercises the requantization
  // Exact traffic: every byte the program moves is the plan's, plus 16 bytes of fetch per instruction.
  EXPECT_EQ(r.perf.rd_bytes, r.plan.in_bytes() + r.plan.param_bytes() +
                                 r.plan.w_bytes_moved() +
                                 16 * r.instructions);
  EXPECT_EQ(r.perf.wr_bytes, r.plan.out_bytes() + 4);
  EXPECT_EQ(r.perf.instret, r.instructions);
}

TEST(ConvRef, EveryAttributeCombinationMatchesCpuN16) {
  uint32_t seed = 1;
  for (const Case& c : cases()) run_case(16, c, seed++);
}

TEST(ConvRef, EveryAttributeCombinationMatchesCpuN4) {
  uint32_t seed = 100;
  for (const Case& c : cases()) run_case(4, c, seed++);
}

TEST(ConvRef, ManyTilesAndStreamedWeights) {
  // N=4: 64 -> 32 channels 3x3 is 16*8*9 = 1152 weight tiles, more than the WB's 128 slots, and a
  // batch of 9 images takes several tiles.
  ConvGeometry g;
  g.in_c = 64, g.in_h = 6, g.in_w = 6, g.out_c = 32, g.kernel_h = 3, g.kernel_w = 3;
  g.pad_top = g.pad_left = g.pad_bottom = g.pad_right = 1;
  const DeviceParams& p4 = *find_device_config(4);
  const ConvPlan plan = plan_conv(p4, g, 9);
  EXPECT_FALSE(plan.weights_resident);
  EXPECT_EQ(plan.pinned_tiles, 128u - 32u);  // the rest stream through a 32-slot ring
  EXPECT_GT(plan.tiles, 1u);
  run_case(4, Case{"streamed weights", g, 9, true, true}, 7);
}

TEST(ConvPlan, LayoutOfTheBenchmarkLayer) {
  ConvGeometry g;
  g.in_c = 64, g.in_h = 28, g.in_w = 28, g.out_c = 64, g.kernel_h = 3, g.kernel_w = 3;
  g.pad_top = g.pad_left = g.pad_bottom = g.pad_right = 1;
  const ConvPlan p = plan_conv(*find_device_config(16), g, 32);
  EXPECT_EQ(p.hp, 30u);
  EXPECT_EQ(p.wq, 30u);
  EXPECT_EQ(p.ho, 28u);
  EXPECT_EQ(p.acc_rows, 27u * 30 + 28);  // 838 rows per image and MATMUL, 784 of them pixels
  EXPECT_EQ(p.tap_offset[8], 2u * 30 + 2);
  EXPECT_EQ(p.c_blocks, 4u);
  EXPECT_TRUE(p.weights_resident);  // 144 tiles of 16 rows in a 4096-row WB
  EXPECT_EQ(p.macs(), 32ull * 28 * 28 * 64 * 64 * 9);
  // The host images are at most 1.2x the minimum (the pads): bytes moved <= 1.5x.
  const double moved = static_cast<double>(p.in_bytes() + p.w_bytes() + p.param_bytes() + p.out_bytes());
  EXPECT_LT(moved / static_cast<double>(p.min_bytes()), 1.2);
}

TEST(ConvWeightMacs, CountsTheChannelPairsTheWeightsMultiply) {
  // 4 -> 4 channels, 3x3, 5x5 output per image, 2 images: 50 pixels x 9 taps per channel pair.
  ConvGeometry g = geom(4, 5, 5, 4, 3, 3);
  g.pad_top = g.pad_left = g.pad_bottom = g.pad_right = 1;
  const uint64_t per_pair = 2ull * 5 * 5 * 9;
  std::vector<int8_t> dense(4 * 4 * 9, 3);
  EXPECT_EQ(conv_weight_macs(g, 2, std::span<const int8_t>(dense)), 16 * per_pair);
  // A dense kernel with some zero taps still multiplies its pair.
  dense[5] = 0;
  EXPECT_EQ(conv_weight_macs(g, 2, std::span<const int8_t>(dense)), 16 * per_pair);
  // Depthwise (group = 4) and an average pool: the channel diagonal only.
  std::vector<float> diag(4 * 4 * 9, 0.0f);
  for (uint64_t c = 0; c < 4; ++c) diag[(c * 4 + c) * 9 + 4] = 0.25f;
  EXPECT_EQ(conv_weight_macs(g, 2, std::span<const float>(diag)), 4 * per_pair);
  // A residual Add as a 1x1 conv over [a; b] (weights [I; I]): two pairs per output channel.
  const ConvGeometry add = geom(8, 5, 5, 4, 1, 1);
  std::vector<int8_t> eye(4 * 8, 0);
  for (uint64_t o = 0; o < 4; ++o) eye[o * 8 + o] = eye[o * 8 + 4 + o] = 1;
  EXPECT_EQ(conv_weight_macs(add, 1, std::span<const int8_t>(eye)), 25u * 8);
  // Weights that do not match the geometry count nothing rather than something wrong.
  EXPECT_EQ(conv_weight_macs(add, 1, std::span<const int8_t>(dense)), 0u);
}

TEST(ConvPlan, MalformedGeometriesAreClearErrors) {
  auto expect_error = [](const ConvGeometry& g, uint64_t batch, const std::string& needle) {
    try {
      (void)plan_conv(*find_device_config(16), g, batch);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  ConvGeometry g;
  g.in_c = 3, g.in_h = 8, g.in_w = 8, g.out_c = 4, g.kernel_h = 3, g.kernel_w = 3;
  ConvGeometry bad = g;
  bad.kernel_w = 0;
  expect_error(bad, 1, "kernel_shape 3x0");
  bad = g;
  bad.stride_h = 0;
  expect_error(bad, 1, "strides 0x1");
  bad = g;
  bad.dilation_w = 0;
  expect_error(bad, 1, "dilations 1x0");
  bad = g;
  bad.kernel_h = 9;
  expect_error(bad, 1, "dilated kernel height 9 is larger than the padded input height 8");
  bad = g;
  bad.dilation_w = 4;  // 4*2+1 = 9 > 8
  expect_error(bad, 1, "dilated kernel width 9");
  bad = g;
  bad.in_c = 0;
  expect_error(bad, 1, "input channels");
  expect_error(g, 0, "batch 0");
}

TEST(ConvPlan, AnImageTooLargeForTheChipIsUnsupported) {
  ConvGeometry g;
  g.in_c = 64, g.in_h = 224, g.in_w = 224, g.out_c = 64, g.kernel_h = 3, g.kernel_w = 3;
  try {
    (void)plan_conv(*find_device_config(16), g, 1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("spatial tiling is not implemented"), std::string::npos) << e.what();
  }
}

TEST(ConvRef, LayerArraysMustMatchTheGeometry) {
  std::mt19937 rng(3);
  ConvGeometry g;
  g.in_c = 2, g.in_h = 4, g.in_w = 4, g.out_c = 3, g.kernel_h = 3, g.kernel_w = 3;
  QConv2d l = random_layer(g, rng, false, true);
  l.w_q.pop_back();
  Device dev = Device::open("ref", BackendConfig{});
  const std::vector<int8_t> x(2 * 4 * 4, 1);
  EXPECT_THROW((void)run_conv2d(dev, l, x, 1), Error);
  l = random_layer(g, rng, false, true);
  EXPECT_THROW((void)run_conv2d(dev, l, std::vector<int8_t>(5, 0), 1), Error);
}

}  // namespace
}  // namespace tpuw::runtime
