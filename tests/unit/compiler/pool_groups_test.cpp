// Average pools whose divisor varies by output pixel (count_include_pad=0 with pads, ceil_mode's
// partial last windows, auto_pad SAME) and Pads with a constant other than 0: the float reference
// against a direct PyTorch-semantics average, int8 on the device (ref) bit-exact with the integer
// model and within int8 tolerance of float, the split ACTIVATE (activate_runs). bf16: pool_groups_bf16_test.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "compiler_testlib.h"
#include "pool_testlib.h"
#include "tpuw/compiler/conv.h"
#include "tpuw/compiler/conv_bf16.h"
#include "tpuw/compiler/quantize.h"
#include "tpuw/device.h"
#include "tpuw/nn/quantize.h"
#include "tpuw/runtime/conv.h"

namespace tpuw::compiler {
namespace {

using testing::expect_error;
using testing::graph_of;
using testing::ModelBuilder;
using testing::random_floats;

using testing::pool_model;
using testing::PoolSpec;
using testing::torch_avg;

/// Compiles `mb`, checks the float interpreter against `want`, runs int8 on ref (bit-exact with
/// the integer model, within 1.5 output LSB of float) and returns the layer.
nn::QConv2d expect_pool(const ModelBuilder& mb, const std::vector<float>& x, uint64_t batch,
                        const std::vector<double>& want) {
  const Graph og = optimize(graph_of(mb));
  const auto t = interpret_float(og, x, batch);
  const std::vector<float>& yf = t[static_cast<size_t>(og.outputs[0].value)];
  EXPECT_EQ(yf.size(), want.size());
  for (size_t i = 0; i < yf.size() && i < want.size(); ++i) EXPECT_NEAR(yf[i], want[i], 1e-5) << i;
  const nn::QCnn q = compile_quantized_cnn(graph_of(mb), x, batch);
  std::vector<int8_t> xq(x.size());
  for (size_t i = 0; i < x.size(); ++i) xq[i] = nn::quantize_value(x[i], q.input_scale);
  Device dev = Device::open("ref", BackendConfig{});
  const runtime::CnnRunResult r = runtime::run_cnn(dev, q, xq, batch);
  EXPECT_EQ(r.output_i32, nn::forward_cnn_int_raw(q, xq, batch));
  // Input rounding (1/2 LSB of the input scale, averaged) plus the output rounding and multiplier.
  const double tol = 0.5 * q.input_scale + 0.51 * q.map_scale() + 1e-6;
  for (size_t i = 0; i < r.output_i32.size() && i < want.size(); ++i) {
    EXPECT_NEAR(r.output_i32[i] * static_cast<double>(q.map_scale()), want[i], tol) << i;
  }
  return q.convs.back();
}

TEST(PoolGroups, CountIncludePadZeroDividesByTheInsidePositions) {
  PoolSpec p;  // 3x3, pads 1 (asymmetric on the right), 7x6
  p.pads = {1, 1, 1, 2};
  const uint64_t batch = 2;
  const std::vector<float> x = random_floats(batch * 3 * 42, -1.0f, 1.0f, 11);
  const std::vector<double> want = torch_avg(x, batch * 3, 7, 6, 3, 1, {1, 1, 1, 2}, 7, 7, false);
  const nn::QConv2d l = expect_pool(pool_model(p), x, batch, want);
  // Divisors: rows {2, 3 x5, 2}, cols {2, 3, 3, 3, 3, 2, 1}: 9 (group 0) and 6, 4, 3, 2.
  EXPECT_EQ(l.extra_groups(), 4u);
  ASSERT_EQ(l.pixel_group.size(), 49u);
  EXPECT_EQ(l.pixel_group[3 * 7 + 3], 0u);   // interior
  EXPECT_NE(l.pixel_group[0], 0u);           // corner: 4
  EXPECT_NE(l.pixel_group[3 * 7 + 6], l.pixel_group[3 * 7 + 5]);  // 3 vs 6
}

TEST(PoolGroups, CountIncludePadOneKeepsOneGroup) {
  PoolSpec p;
  p.pads = {1, 1, 1, 1};
  p.cip = 1;
  const uint64_t batch = 2;
  const std::vector<float> x = random_floats(batch * 3 * 42, -1.0f, 1.0f, 12);
  const nn::QConv2d l = expect_pool(pool_model(p), x, batch, torch_avg(x, batch * 3, 7, 6, 3, 1, {1, 1, 1, 1}, 7, 6, true));
  EXPECT_EQ(l.extra_groups(), 0u);
  EXPECT_TRUE(l.pixel_group.empty());
}

TEST(PoolGroups, CeilModePartialWindows) {
  // ONNX's test_averagepool_2d_ceil shape: 4x4, 3x3 stride 2 -> 2x2, the last window partial.
  PoolSpec p;
  p.h = p.w = 4;
  p.s = 2;
  p.ceil = 1;
  const uint64_t batch = 3;
  const std::vector<float> x = random_floats(batch * 3 * 16, -1.0f, 1.0f, 13);
  nn::QConv2d l = expect_pool(pool_model(p), x, batch, torch_avg(x, batch * 3, 4, 4, 3, 2, {0, 0, 0, 0}, 2, 2, false));
  EXPECT_EQ(l.geom.pad_bottom, 1u);  // the partial window's extension, counted by no divisor
  EXPECT_EQ(l.extra_groups(), 2u);   // 6 and 4
  // count_include_pad=1 with pads 1 and ceil_mode: the declared pads count, the extension does not.
  p.h = p.w = 6;
  p.pads = {1, 1, 1, 1};
  p.cip = 1;
  const std::vector<float> x2 = random_floats(batch * 3 * 36, -1.0f, 1.0f, 14);
  l = expect_pool(pool_model(p), x2, batch, torch_avg(x2, batch * 3, 6, 6, 3, 2, {1, 1, 1, 1}, 4, 4, true));
  EXPECT_EQ(l.geom.out_h(), 4u);
  EXPECT_GT(l.extra_groups(), 0u);
}

TEST(PoolGroups, AutoPadSameCountsOnlyTheImage) {
  for (const char* mode : {"SAME_UPPER", "SAME_LOWER"}) {
    PoolSpec p;
    p.h = p.w = 5;
    p.k = 2;
    p.auto_pad = mode;
    const uint64_t batch = 2;
    const std::vector<float> x = random_floats(batch * 3 * 25, -1.0f, 1.0f, 15);
    const bool upper = std::string(mode) == "SAME_UPPER";
    const nn::QConv2d l = expect_pool(
        pool_model(p), x, batch, torch_avg(x, batch * 3, 5, 5, 2, 1, {upper ? 0 : 1, upper ? 0 : 1, upper ? 1 : 0, upper ? 1 : 0}, 5, 5, false));
    EXPECT_EQ(l.extra_groups(), 2u) << mode;  // 2 and 1
  }
}

TEST(PoolGroups, ActivateRunsCoverEveryRowWithItsGroup) {
  PoolSpec p;
  p.pads = {1, 1, 1, 1};
  const uint64_t batch = 3;
  const std::vector<float> x = random_floats(batch * 3 * 42, -1.0f, 1.0f, 16);
  const nn::QCnn q = compile_quantized_cnn(graph_of(pool_model(p)), x, batch);
  const nn::QConv2d& l = q.convs[0];
  Device dev = Device::open("ref", BackendConfig{});
  runtime::ConvPlan plan = runtime::plan_conv(dev.info().params, l.geom, batch, l.extra_groups());
  runtime::set_pixel_groups(plan, l);
  const std::vector<runtime::ActivateRun> runs = runtime::activate_runs(plan, batch);
  uint64_t next = 0;
  for (const runtime::ActivateRun& run : runs) {
    EXPECT_EQ(run.row, next);
    EXPECT_GT(run.rows, 0u);
    for (uint64_t r = run.row; r < run.row + run.rows; ++r) {
      const uint64_t lr = r % plan.acc_rows, oy = lr / plan.wq, ox = lr % plan.wq;
      if (ox < plan.wo && oy < plan.ho) {
        EXPECT_EQ(run.group, l.pixel_group[oy * plan.wo + ox]) << r;
      }
    }
    next = run.row + run.rows;
  }
  EXPECT_EQ(next, batch * plan.acc_rows);
  // 7x6 output, divisors per row 4|6 6 6 6|4, then 6|9 9 9 9|6 (x5), then 4|6 6 6 6|4. Per image:
  // row 0 has 3 runs, row 1 3 (its left 6 follows row 0's 4), rows 2..5 2 each (the right border's
  // run continues, over the wasted columns, into the next row's left border), row 6 3: 17; the
  // last run of an image (4) and the first of the next (4) are one.
  EXPECT_EQ(runs.size(), batch * 17 - (batch - 1));
  // Without groups: one run per strip.
  runtime::ConvPlan flat = runtime::plan_conv(dev.info().params, l.geom, batch);
  EXPECT_EQ(runtime::activate_runs(flat, batch).size(), 1u);
}

TEST(PoolGroups, ConstantPadWritesTheQuantizedConstant) {
  // x -> Conv -> Pad(value 1.5) -> y: the Pad is a 1x1 pool whose border group's bias is the constant.
  ModelBuilder mb;
  mb.input("x", {-1, 2, 5, 5});
  mb.init("w", {4, 2, 3, 3}, random_floats(72, -0.4f, 0.4f, 21));
  auto& c = mb.node("Conv", {"x", "w"}, {"a"}, "conv");
  ModelBuilder::attr_ints(c, "pads", {1, 1, 1, 1});
  testing::add_constant_i64(mb, "pads", {0, 0, 1, 2, 0, 0, 2, 0});
  mb.init("cv", {}, {1.5f});
  mb.node("Pad", {"a", "pads", "cv"}, {"y"}, "pad");
  mb.output("y");
  const uint64_t batch = 2;
  const std::vector<float> x = random_floats(batch * 50, -1.0f, 1.0f, 22);
  const Graph og = optimize(graph_of(mb));
  const auto t = interpret_float(og, x, batch);
  const std::vector<float>& yf = t[static_cast<size_t>(og.outputs[0].value)];
  ASSERT_EQ(yf.size(), batch * 4 * 8 * 7);
  EXPECT_EQ(yf[0], 1.5f);                   // top border
  EXPECT_EQ(yf[(0 * 8 + 3) * 7 + 0], 1.5f);  // left border
  const nn::QCnn q = compile_quantized_cnn(graph_of(mb), x, batch);
  ASSERT_EQ(q.convs.size(), 2u);
  EXPECT_EQ(q.convs[1].extra_groups(), 1u);
  std::vector<int8_t> xq(x.size());
  for (size_t i = 0; i < x.size(); ++i) xq[i] = nn::quantize_value(x[i], q.input_scale);
  Device dev = Device::open("ref", BackendConfig{});
  const runtime::CnnRunResult r = runtime::run_cnn(dev, q, xq, batch);
  EXPECT_EQ(r.output_i32, nn::forward_cnn_int_raw(q, xq, batch));
  const int32_t c15 = static_cast<int32_t>(std::lround(1.5 / q.map_scale()));
  EXPECT_NEAR(r.output_i32[0], c15, 1);
  double ymax = 0, worst = 0;
  for (size_t i = 0; i < yf.size(); ++i) {
    ymax = std::max(ymax, std::fabs(static_cast<double>(yf[i])));
    worst = std::max(worst, std::fabs(r.output_i32[i] * static_cast<double>(q.map_scale()) - yf[i]));
  }
  EXPECT_LE(worst, 0.03 * ymax);
}

}  // namespace
}  // namespace tpuw::compiler
