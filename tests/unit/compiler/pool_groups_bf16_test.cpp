// bf16 average pools whose divisor varies by output pixel (count_include_pad=0 with pads, ceil_mode's
// partial last windows, auto_pad SAME) and Pads with a constant: compile_bf16_cnn gives the layer
// pixel groups (weight 1, scale fp32(1/d), a border bias), run_cnn_bf16 on the ref device equals
// forward_cnn_bf16_host bit for bit (N=16 and N=4) and each value is within bf16's rounding of a
// PyTorch-semantics average in double; what stays refused names the node.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include "compiler_testlib.h"
#include "pool_testlib.h"
#include "tpuw/compiler/cnn_training.h"
#include "tpuw/compiler/conv_bf16.h"
#include "tpuw/compiler/quantize.h"
#include "tpuw/device.h"
#include "tpuw/runtime/conv_bf16.h"
#include "tpuw/runtime/gemm_bf16.h"

namespace tpuw::compiler {
namespace {

using testing::expect_error;
using testing::graph_of;
using testing::ModelBuilder;
using testing::random_floats;

using testing::pool_model;
using testing::PoolSpec;
using testing::torch_avg;

/// 20 channels: two channel blocks at N=16, five at N=4.
PoolSpec spec20() {
  PoolSpec p;
  p.c = 20;
  return p;
}

/// The device sees each input rounded to bf16 (round to nearest even).
double bf16_value(float v) { return static_cast<double>(runtime::bf16::round(v)); }

/// Runs the model's bf16 CNN on ref (array `n`): device == contract bit for bit; returns the output.
std::vector<float> run_bf16(const Bf16Cnn& net, const std::vector<float>& x, uint64_t batch, uint32_t n,
                            uint64_t* cycles = nullptr) {
  BackendConfig cfg;
  cfg.array_n = n;
  Device dev = Device::open("ref", cfg);
  const runtime::CnnBf16RunResult r = runtime::run_cnn_bf16(dev, net, x, batch);
  const std::vector<float> want = runtime::forward_cnn_bf16_host(net, x, batch, n);
  EXPECT_EQ(r.output.size(), want.size());
  for (size_t i = 0; i < want.size() && i < r.output.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(r.output[i]), std::bit_cast<uint32_t>(want[i])) << "N=" << n << " output " << i;
  }
  // Exact traffic: the groups' bias rows are read once (conv_bf16_param_bytes), 16 bytes per instruction.
  for (const runtime::ConvBf16RunResult& c : r.convs) {
    if (c.host) continue;
    EXPECT_EQ(c.perf.rd_bytes, runtime::conv_bf16_in_bytes(c.plan) + runtime::conv_bf16_param_bytes(c.plan) +
                                   2 * c.plan.w_bytes_moved() + 16 * c.instructions);
  }
  if (cycles != nullptr) *cycles = r.cycles;
  return r.output;
}

/// Compiles `mb` for bf16, runs it on N=16 and N=4 and compares every value with `want` (double):
/// sum in fp32 of bf16 inputs, one fp32 multiply by fp32(1/d), one RNE to bf16: within 2^-8 relative.
Bf16Cnn expect_pool(const ModelBuilder& mb, const std::vector<float>& x, uint64_t batch, const std::vector<double>& want) {
  const Bf16Cnn net = compile_bf16_cnn(graph_of(mb));
  for (const uint32_t n : {16u, 4u}) {
    const std::vector<float> y = run_bf16(net, x, batch, n);
    EXPECT_EQ(y.size(), want.size());
    for (size_t i = 0; i < y.size() && i < want.size(); ++i) {
      EXPECT_NEAR(y[i], want[i], std::ldexp(std::fabs(want[i]), -8) + 1e-30) << "N=" << n << " output " << i;
    }
  }
  return net;
}

TEST(PoolGroupsBf16, CountIncludePadZeroDividesByTheInsidePositions) {
  PoolSpec p = spec20();
  p.pads = {1, 1, 1, 2};  // asymmetric: the right column divides by 3 and 1.. per row
  const uint64_t batch = 3;
  const std::vector<float> x = random_floats(batch * 20 * 42, -1.0f, 1.0f, 31);
  const Bf16Cnn net = expect_pool(pool_model(p), x, batch, torch_avg(x, batch * 20, 7, 6, 3, 1, p.pads, 7, 7, false, bf16_value));
  const Bf16ConvLayer& l = net.convs[0];
  // Divisors 9 (interior) and 6, 4, 3, 2: one group each, weight 1 on the diagonal.
  EXPECT_EQ(l.groups(), 5u);
  ASSERT_EQ(l.pixel_group.size(), 49u);
  EXPECT_EQ(l.group_scale[l.pixel_group[3 * 7 + 3]], 1.0f / 9.0f);
  EXPECT_EQ(l.group_scale[l.pixel_group[0]], 0.25f);
  EXPECT_EQ(l.w[0], 1.0f);
  EXPECT_EQ(l.group_bias, std::vector<float>(5 * 20, 0.0f));
}

TEST(PoolGroupsBf16, CeilModeAndCountIncludePadOne) {
  // ONNX's test_averagepool_2d_ceil shape: 4x4, 3x3 stride 2 -> 2x2, the last window partial.
  PoolSpec p = spec20();
  p.h = p.w = 4;
  p.s = 2;
  p.ceil = 1;
  const uint64_t batch = 2;
  const std::vector<float> x = random_floats(batch * 20 * 16, -1.0f, 1.0f, 32);
  EXPECT_EQ(expect_pool(pool_model(p), x, batch, torch_avg(x, batch * 20, 4, 4, 3, 2, {}, 2, 2, false, bf16_value)).convs[0].groups(),
            3u);  // 9, 6, 4
  // count_include_pad=1 with pads 1 and ceil_mode: the declared pads count, the extension does not.
  p.h = p.w = 6;
  p.pads = {1, 1, 1, 1};
  p.cip = 1;
  const std::vector<float> x2 = random_floats(batch * 20 * 36, -1.0f, 1.0f, 33);
  EXPECT_GT(expect_pool(pool_model(p), x2, batch, torch_avg(x2, batch * 20, 6, 6, 3, 2, p.pads, 4, 4, true, bf16_value)).convs[0].groups(),
            1u);
}

TEST(PoolGroupsBf16, AutoPadSameCountsOnlyTheImage) {
  for (const char* mode : {"SAME_UPPER", "SAME_LOWER"}) {
    SCOPED_TRACE(mode);
    PoolSpec p = spec20();
    p.h = p.w = 5;
    p.k = 2;
    p.auto_pad = mode;
    const uint64_t batch = 2;
    const std::vector<float> x = random_floats(batch * 20 * 25, -1.0f, 1.0f, 34);
    const bool upper = std::string(mode) == "SAME_UPPER";
    const std::vector<int64_t> pads = upper ? std::vector<int64_t>{0, 0, 1, 1} : std::vector<int64_t>{1, 1, 0, 0};
    EXPECT_EQ(expect_pool(pool_model(p), x, batch, torch_avg(x, batch * 20, 5, 5, 2, 1, pads, 5, 5, false, bf16_value)).convs[0].groups(),
              3u);  // 4, 2, 1
  }
}

TEST(PoolGroupsBf16, UniformDivisorKeepsTheOneWeightProgram) {
  // count_include_pad=1: every pixel divides by 9, the weight bf16(1/9) path, no groups, no VECTOR.
  PoolSpec p = spec20();
  p.pads = {1, 1, 1, 1};
  p.cip = 1;
  const Bf16Cnn net = compile_bf16_cnn(graph_of(pool_model(p)));
  EXPECT_EQ(net.convs[0].groups(), 0u);
  EXPECT_TRUE(net.convs[0].pixel_group.empty());
  EXPECT_EQ(net.convs[0].w[0], 1.0f / 9.0f);
  const std::vector<float> x = random_floats(2 * 20 * 42, -1.0f, 1.0f, 35);
  (void)run_bf16(net, x, 2, 16);
}

TEST(PoolGroupsBf16, ConstantPadWritesTheBf16Constant) {
  // x -> Conv -> Pad(value 1.2) -> y: the Pad is a 1x1 pool whose border group's bias is the constant.
  ModelBuilder mb;
  mb.input("x", {-1, 2, 5, 5});
  mb.init("w", {4, 2, 3, 3}, random_floats(72, -0.4f, 0.4f, 21));
  auto& c = mb.node("Conv", {"x", "w"}, {"a"}, "conv");
  ModelBuilder::attr_ints(c, "pads", {1, 1, 1, 1});
  testing::add_constant_i64(mb, "pads", {0, 0, 1, 2, 0, 0, 2, 0});
  mb.init("cv", {}, {1.2f});
  mb.node("Pad", {"a", "pads", "cv"}, {"y"}, "pad");
  mb.output("y");
  const uint64_t batch = 2;
  const std::vector<float> x = random_floats(batch * 50, -1.0f, 1.0f, 22);
  const Bf16Cnn net = compile_bf16_cnn(graph_of(mb));
  ASSERT_EQ(net.convs.size(), 2u);
  const Bf16ConvLayer& pad = net.convs[1];
  EXPECT_EQ(pad.groups(), 2u);  // the inside (bias 0) and the border (bias 1.2)
  for (const uint32_t n : {16u, 4u}) {
    const std::vector<float> y = run_bf16(net, x, batch, n);
    ASSERT_EQ(y.size(), batch * 4 * 8 * 7);
    EXPECT_EQ(y[0], runtime::bf16::round(1.2f));                   // top border: bf16(1.2) = 1.203125
    EXPECT_EQ(y[(0 * 8 + 3) * 7 + 0], runtime::bf16::round(1.2f));  // left border
    EXPECT_EQ(y[((1 * 4 + 3) * 8 + 7) * 7 + 6], runtime::bf16::round(1.2f));  // bottom-right corner of the last map
    // The inside is the Conv's bf16 output unchanged (x * 1, + 0).
    const Graph og = optimize(graph_of(mb));
    const auto t = interpret_float(og, x, batch);
    const std::vector<float>& yf = t[static_cast<size_t>(og.outputs[0].value)];
    double ymax = 0, worst = 0;
    for (size_t i = 0; i < yf.size(); ++i) {
      ymax = std::max(ymax, std::fabs(static_cast<double>(yf[i])));
      worst = std::max(worst, std::fabs(static_cast<double>(y[i]) - yf[i]));
    }
    EXPECT_LE(worst, 0.02 * ymax);
  }
}

TEST(PoolGroupsBf16, BadGroupArraysAreRefused) {
  PoolSpec p = spec20();
  p.pads = {1, 1, 1, 1};
  Bf16Cnn net = compile_bf16_cnn(graph_of(pool_model(p)));
  Bf16ConvLayer l = net.convs[0];
  l.pixel_group.pop_back();
  expect_error([&] { l.check(); }, ErrorKind::kInvalidArgument, {"bf16 layer 'pool", "pixel groups for 42 output pixels"});
  l = net.convs[0];
  l.pixel_group[5] = static_cast<uint16_t>(l.groups());
  expect_error([&] { l.check(); }, ErrorKind::kInvalidArgument, {"pixel 5 is in group"});
  l = net.convs[0];
  l.group_bias.pop_back();
  expect_error([&] { l.check(); }, ErrorKind::kInvalidArgument, {"group biases"});
  // Still refused: a window entirely in the padding (nothing to average), naming the node.
  p.pads = {3, 3, 3, 3};
  p.h = p.w = 4;
  expect_error([&] { (void)compile_bf16_cnn(graph_of(pool_model(p))); }, ErrorKind::kUnsupported,
               {"node 'pool' (AveragePool)", "entirely in the padding"});
}

}  // namespace
}  // namespace tpuw::compiler

namespace tpuw::compiler {
namespace {

TEST(PoolGroupsBf16, TrainingRefusesPixelGroupsNamingTheLayer) {
  // bf16 inference runs the pool; the CNN trainer's backward has no pixel groups.
  testing::ModelBuilder mb;
  mb.input("x", {-1, 2, 6, 6});
  mb.init("c.w", {4, 2, 3, 3}, std::vector<float>(72, 0.1f));
  mb.init("c.b", {4}, std::vector<float>(4, 0.0f));
  auto& c = mb.node("Conv", {"x", "c.w", "c.b"}, {"c"}, "conv");
  ModelBuilder::attr_ints(c, "pads", {1, 1, 1, 1});
  auto& p = mb.node("AveragePool", {"c"}, {"p"}, "pool");
  ModelBuilder::attr_ints(p, "kernel_shape", {3, 3});
  ModelBuilder::attr_ints(p, "strides", {2, 2});
  ModelBuilder::attr_ints(p, "pads", {1, 1, 1, 1});
  mb.node("Flatten", {"p"}, {"f"}, "flatten");
  mb.init("fc.w", {36, 3}, std::vector<float>(108, 0.01f));
  mb.init("fc.b", {3}, std::vector<float>(3, 0.0f));
  mb.node("MatMul", {"f", "fc.w"}, {"mm"}, "fc");
  mb.node("Add", {"mm", "fc.b"}, {"y"}, "fc_bias");
  mb.output("y");
  EXPECT_EQ(compile_bf16_cnn(testing::graph_of(mb)).convs[1].groups(), 3u);  // 9, 6, 4
  testing::expect_error([&] { (void)build_cnn_training_model(testing::graph_of(mb)); }, ErrorKind::kUnsupported,
                        {"layer 'pool", "cannot be trained", "divisor varies by pixel"});
}

}  // namespace
}  // namespace tpuw::compiler
