// Quantization arithmetic: rounding, saturation, per-column scales, mult/shift derivation, the
// ACTIVATE arithmetic and the integer forward pass.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "tpuw/error.h"
#include "tpuw/nn/quantize.h"

namespace tpuw::nn {
namespace {

constexpr int64_t k2_30 = int64_t{1} << 30;

TEST(QuantizeMultiplier, ExactPowersAndFractions) {
  EXPECT_EQ(quantize_multiplier(0.5).mult, k2_30);
  EXPECT_EQ(quantize_multiplier(0.5).shift, 31);
  EXPECT_EQ(quantize_multiplier(1.0).mult, k2_30);
  EXPECT_EQ(quantize_multiplier(1.0).shift, 30);
  EXPECT_EQ(quantize_multiplier(0.75).mult, 1610612736);  // 0.75 * 2^31
  EXPECT_EQ(quantize_multiplier(0.75).shift, 31);
  EXPECT_EQ(quantize_multiplier(3.0).mult, 1610612736);
  EXPECT_EQ(quantize_multiplier(3.0).shift, 29);
  EXPECT_EQ(quantize_multiplier(0.001).shift, 31 + 9);  // 0.001 = 0.512 * 2^-9
  EXPECT_EQ(quantize_multiplier(0.001).mult, std::llround(0.512 * 2147483648.0));
}

TEST(QuantizeMultiplier, RoundingUpToTwoRenormalizes) {
  const Requant r = quantize_multiplier(1.0 - std::ldexp(1.0, -40));  // f * 2^31 rounds to 2^31
  EXPECT_EQ(r.mult, k2_30);
  EXPECT_EQ(r.shift, 30);
}

TEST(QuantizeMultiplier, RangeAndRelativeErrorOverManyValues) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> e(-30, 20);
  for (int i = 0; i < 10000; ++i) {
    const double real = std::exp2(e(rng));
    const Requant r = quantize_multiplier(real);
    ASSERT_GE(r.mult, k2_30) << real;
    ASSERT_LT(int64_t{r.mult}, 2 * k2_30) << real;
    ASSERT_LE(r.shift, 63);
    const double approx = std::ldexp(static_cast<double>(r.mult), -r.shift);
    ASSERT_LE(std::fabs(approx - real) / real, std::ldexp(1.0, -31)) << real;
  }
}

TEST(QuantizeMultiplier, TinyCapsShiftHugeAndInvalidThrow) {
  const Requant tiny = quantize_multiplier(std::ldexp(1.0, -40));
  EXPECT_EQ(tiny.shift, 63);
  EXPECT_EQ(tiny.mult, 1 << 23);
  EXPECT_EQ(quantize_multiplier(1e-30).mult, 0);
  try {
    (void)quantize_multiplier(std::ldexp(1.0, 31));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  }
  for (const double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    try {
      (void)quantize_multiplier(bad);
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    }
  }
}

TEST(QuantizeValue, RoundsHalfAwayFromZeroAndSaturates) {
  EXPECT_EQ(quantize_value(0.5f, 1.0f), 1);
  EXPECT_EQ(quantize_value(-0.5f, 1.0f), -1);
  EXPECT_EQ(quantize_value(1.49f, 1.0f), 1);
  EXPECT_EQ(quantize_value(2.5f, 1.0f), 3);
  EXPECT_EQ(quantize_value(3.0f, 0.5f), 6);
  EXPECT_EQ(quantize_value(200.0f, 1.0f), 127);
  EXPECT_EQ(quantize_value(-200.0f, 1.0f), -128);
  EXPECT_EQ(quantize_value(std::nanf(""), 1.0f), 0);
  EXPECT_EQ(quantize_value(std::numeric_limits<float>::infinity(), 1.0f), 127);
}

TEST(SymmetricScale, MaxAbsOver127AndOneForZeros) {
  const std::vector<float> v{0.5f, -2.54f, 1.0f};
  EXPECT_FLOAT_EQ(symmetric_scale(v), 2.54f / 127.0f);
  EXPECT_EQ(symmetric_scale(std::vector<float>(5, 0.0f)), 1.0f);
  EXPECT_EQ(symmetric_scale(std::vector<float>{}), 1.0f);
}

TEST(Requantize, MatchesActivateArithmetic) {
  const auto half = static_cast<int32_t>(k2_30);  // with shift 31: x * 0.5
  EXPECT_EQ(requantize(3, 0, half, 31, false), 2);    // 1.5 rounds half up -> 2
  EXPECT_EQ(requantize(-3, 0, half, 31, false), -1);  // -1.5 rounds half up -> -1
  EXPECT_EQ(requantize(5, 0, half, 31, false), 3);    // 2.5 -> 3
  EXPECT_EQ(requantize(-5, 0, half, 31, false), -2);  // -2.5 -> -2
  EXPECT_EQ(requantize(-5, 0, half, 31, true), 0);    // ReLU
  EXPECT_EQ(requantize(10, 4, half, 31, false), 7);   // bias before scaling
  EXPECT_EQ(requantize(1000, 0, half, 31, false), 127);
  EXPECT_EQ(requantize(-1000, 0, half, 31, false), -128);
  EXPECT_EQ(requantize(7, 0, 3, 0, false), 21);       // shift 0: plain product
  EXPECT_EQ(requantize(7, 0, 100, 0, false), 127);
  // 32-bit wrap of acc + bias, then a wide product with no overflow.
  EXPECT_EQ(requantize(std::numeric_limits<int32_t>::max(), 1, half, 31, false), -128);
  EXPECT_EQ(requantize(std::numeric_limits<int32_t>::max(), 0, std::numeric_limits<int32_t>::max(), 63, false),
            0);  // (2^31-1)^2 / 2^63 = 0.4999... -> 0
  EXPECT_EQ(requantize(std::numeric_limits<int32_t>::min(), 0, std::numeric_limits<int32_t>::max(), 62, false),
            -1);  // -2^31 * (2^31 - 1) / 2^62 = -0.99999... -> -1
}

// One layer 3 -> 2 with hand-picked float weights: per-column scales, bias folding, requant.
FloatNetwork small_net(bool two_layers) {
  FloatNetwork f;
  f.source = "small";
  f.input_features = 3;
  DenseLayer l1;
  l1.name = "l1";
  l1.k = 3;
  l1.n = 2;
  l1.w = {1.0f, 0.004f,  // [k][n]: column 0 max |1.27|, column 1 max |0.02|
          -1.27f, 0.02f,
          0.5f, -0.011f};
  l1.b = {0.1f, -0.05f};
  l1.relu = true;
  f.layers.push_back(l1);
  if (two_layers) {
    DenseLayer l2;
    l2.name = "l2";
    l2.k = 2;
    l2.n = 2;
    l2.w = {1.0f, -1.0f, 0.5f, 2.0f};
    l2.b = {0.0f, 0.25f};
    f.layers.push_back(l2);
  }
  return f;
}

TEST(Quantize, PerColumnWeightScalesBiasAndLastLayerScales) {
  const FloatNetwork f = small_net(false);
  const std::vector<float> calib{2.54f, -1.0f, 0.0f, 0.5f, 0.5f, -0.25f};
  const QNetwork q = quantize(f, calib, 2);
  EXPECT_FLOAT_EQ(q.input_scale, 2.54f / 127.0f);
  ASSERT_EQ(q.layers.size(), 1u);
  const QLayer& l = q.layers[0];
  EXPECT_TRUE(l.int32_output);
  EXPECT_TRUE(l.relu);
  // column 0: scale 1.27/127 = 0.01 -> 1.0 -> 100, -1.27 -> -127, 0.5 -> 50
  // column 1: scale 0.02/127 -> 0.004 -> 25.4 -> 25, 0.02 -> 127, -0.011 -> -69.85 -> -70
  EXPECT_EQ(l.w_q, (std::vector<int8_t>{100, 25, -127, 127, 50, -70}));
  const double s0 = 2.54 / 127 * 0.01, s1 = 2.54 / 127 * (0.02 / 127);
  EXPECT_EQ(l.bias_q[0], std::lround(0.1 / s0));
  EXPECT_EQ(l.bias_q[1], std::lround(-0.05 / s1));
  ASSERT_EQ(l.out_scale.size(), 2u);
  EXPECT_NEAR(l.out_scale[0], s0, 1e-9);
  EXPECT_NEAR(l.out_scale[1], s1, 1e-12);
}

TEST(Quantize, IntermediateLayerRequantFromCalibration) {
  const FloatNetwork f = small_net(true);
  const std::vector<float> calib{2.54f, -1.0f, 0.0f, 0.5f, 0.5f, -0.25f, -1.0f, 1.0f, 1.0f};
  const QNetwork q = quantize(f, calib, 3);
  ASSERT_EQ(q.layers.size(), 2u);
  const QLayer& l = q.layers[0];
  EXPECT_FALSE(l.int32_output);
  EXPECT_TRUE(q.layers[1].int32_output);
  // out_scale = max of layer 1's float output (after ReLU) / 127
  const auto acts = forward_float_layers(f, calib, 3);
  float m = 0;
  for (float v : acts[0]) m = std::max(m, std::fabs(v));
  ASSERT_EQ(l.out_scale.size(), 1u);
  EXPECT_FLOAT_EQ(l.out_scale[0], m / 127.0f);
  const double w_scale[2] = {1.27 / 127, 0.02 / 127};
  for (int j = 0; j < 2; ++j) {
    const double real = double{q.input_scale} * w_scale[j] / double{l.out_scale[0]};
    const double got = std::ldexp(static_cast<double>(l.mult[j]), -l.shift[j]);
    EXPECT_NEAR(got / real, 1.0, 1e-6) << j;
    EXPECT_GE(int64_t{l.mult[j]}, k2_30);
  }
  // The next layer's input scale is this layer's output scale.
  EXPECT_NEAR(q.layers[1].out_scale[0], double{l.out_scale[0]} * (1.0 / 127), 1e-9);  // column 0 max |1.0|
}

TEST(Quantize, AllZeroColumnAndZeroCalibrationUseScaleOne) {
  FloatNetwork f = small_net(false);
  f.layers[0].w = {1, 0, 2, 0, 3, 0};
  const QNetwork q = quantize(f, std::vector<float>(3, 0.0f), 1);
  EXPECT_EQ(q.input_scale, 1.0f);
  EXPECT_EQ(q.layers[0].out_scale[1], 1.0f);
  EXPECT_EQ(q.layers[0].w_q[1], 0);
}

TEST(Quantize, BadArgumentsThrow) {
  const FloatNetwork f = small_net(false);
  EXPECT_THROW((void)quantize(f, std::vector<float>(5), 2), Error);
  EXPECT_THROW((void)quantize(f, std::vector<float>{}, 0), Error);
  FloatNetwork empty;
  empty.input_features = 3;
  try {
    (void)quantize(empty, std::vector<float>(3), 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  }
}

// Issue 14, class 6: NaN weights were accepted (std::max drops NaN, the int8 cast of NaN is
// undefined), an infinite bias saturated silently, subnormal inputs gave a zero scale and a
// misleading requantization message. Each is now an error naming the tensor and the index.
std::string quantize_error(const FloatNetwork& f, const std::vector<float>& calib, uint64_t rows, ErrorKind want) {
  try {
    (void)quantize(f, calib, rows);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), want) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "quantize accepted the input";
  return {};
}

TEST(Quantize, NonFiniteWeightsAndBiasesAreRefusedByNameAndIndex) {
  const std::vector<float> calib{2.54f, -1.0f, 0.0f};
  const float inf = std::numeric_limits<float>::infinity();
  struct Bad {
    bool bias;
    size_t index;
    float value;
    const char* needle;
  };
  for (const Bad b : {Bad{false, 3, std::nanf(""), "weight 'layer0.w' (as [inputs, outputs]) element [1, 1] is NaN"},
                      Bad{false, 0, -inf, "element [0, 0] is -inf"},
                      Bad{true, 1, inf, "bias 'layer0.b' element [0, 1] is +inf"},
                      Bad{true, 0, std::nanf(""), "bias 'layer0.b' element [0, 0] is NaN"}}) {
    FloatNetwork f = small_net(false);
    f.layers[0].name = "l1";
    (b.bias ? f.layers[0].b : f.layers[0].w)[b.index] = b.value;
    const std::string msg = quantize_error(f, calib, 1, ErrorKind::kBadFile);
    EXPECT_NE(msg.find(b.needle), std::string::npos) << msg;
  }
}

TEST(Quantize, SubnormalOrOverflowingCalibrationIsRefusedWithTheValue) {
  const FloatNetwork f = small_net(true);
  // Every input subnormal: the input scale would be subnormal.
  const float sub = std::numeric_limits<float>::denorm_min() * 8;
  std::string msg = quantize_error(f, {sub, -sub, 0.0f}, 1, ErrorKind::kUnsupported);
  EXPECT_NE(msg.find("input"), std::string::npos) << msg;
  EXPECT_NE(msg.find("too small for an int8 scale"), std::string::npos) << msg;
  // Normal but below 127 x the smallest normal: the same.
  msg = quantize_error(f, {std::numeric_limits<float>::min(), 0.0f, 0.0f}, 1, ErrorKind::kUnsupported);
  EXPECT_NE(msg.find("too small for an int8 scale"), std::string::npos) << msg;
  // A hidden activation that overflows to infinity during calibration is named too.
  FloatNetwork big = small_net(true);
  for (float& w : big.layers[0].w) w = 3e38f;
  msg = quantize_error(big, {3e38f, 3e38f, 3e38f}, 1, ErrorKind::kUnsupported);
  EXPECT_NE(msg.find("output (calibration) element [0, "), std::string::npos) << msg;
  EXPECT_NE(msg.find("is +inf"), std::string::npos) << msg;
}

TEST(ForwardInt, HandComputedTwoLayerNetwork) {
  QNetwork q;
  q.input_features = 2;
  q.input_scale = 0.5f;
  QLayer a;
  a.k = 2;
  a.n = 2;
  a.w_q = {1, -2, 3, 4};  // [k][n]
  a.bias_q = {1, -100};
  a.relu = true;
  a.mult = {static_cast<int32_t>(k2_30), static_cast<int32_t>(k2_30)};  // x 0.5
  a.shift = {31, 31};
  a.out_scale = {1.0f};
  QLayer b;
  b.k = 2;
  b.n = 1;
  b.w_q = {2, -1};
  b.bias_q = {10};
  b.int32_output = true;
  b.out_scale = {0.25f};
  q.layers = {a, b};
  // x = (1.0, -1.6) -> x_q = (2, -3): layer a acc = (2*1 + -3*3, 2*-2 + -3*4) = (-7, -16)
  // + bias = (-6, -116) -> *0.5 = (-3, -58) -> ReLU (0, 0); layer b: 0 + 10 = 10 -> 2.5
  const std::vector<float> x{1.0f, -1.6f, 10.0f, 0.5f};
  const auto xq = quantize_input(q, x);
  EXPECT_EQ(xq, (std::vector<int8_t>{2, -3, 20, 1}));
  // row 2: acc = (20 + 3, -40 + 4) = (23, -36) + bias (24, -136) * 0.5 = (12, -68) -> (12, 0)
  // layer b: 12*2 + 0 + 10 = 34
  const auto raw = forward_int_raw(q, xq, 2);
  EXPECT_EQ(raw, (std::vector<int32_t>{10, 34}));
  EXPECT_EQ(forward_int(q, x, 2), (std::vector<float>{2.5f, 8.5f}));
  q.host_op = HostOp::kSoftmax;
  const auto p = dequantize_output(q, raw, 2);
  EXPECT_EQ(p, (std::vector<float>{1.0f, 1.0f}));  // softmax over one column
  EXPECT_THROW((void)forward_int_raw(q, xq, 3), Error);
}

TEST(ForwardInt, CloseToFloatOnRandomMlp) {
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 1.0f);
  FloatNetwork f;
  f.source = "random";
  f.input_features = 32;
  uint32_t k = 32;
  for (uint32_t n : {24u, 16u, 8u}) {
    DenseLayer l;
    l.k = k;
    l.n = n;
    l.w.resize(size_t{k} * n);
    for (auto& w : l.w) w = d(rng) / std::sqrt(static_cast<float>(k));
    l.b.resize(n);
    for (auto& b : l.b) b = 0.1f * d(rng);
    l.relu = n != 8;
    f.layers.push_back(l);
    k = n;
  }
  const uint64_t rows = 200;
  std::vector<float> x(rows * 32);
  for (auto& v : x) v = d(rng);
  const QNetwork q = quantize(f, x, rows);
  const auto yf = forward_float(f, x, rows);
  const auto yq = forward_int(q, x, rows);
  float m = 0, err = 0;
  for (size_t i = 0; i < yf.size(); ++i) {
    m = std::max(m, std::fabs(yf[i]));
    err = std::max(err, std::fabs(yf[i] - yq[i]));
  }
  EXPECT_LT(err, 0.05f * m);
  // Same classification on almost every row.
  const auto cf = argmax_rows(yf, 8), cq = argmax_rows(yq, 8);
  int same = 0;
  for (size_t i = 0; i < cf.size(); ++i) same += cf[i] == cq[i];
  EXPECT_GE(same, 190);
}

}  // namespace
}  // namespace tpuw::nn
