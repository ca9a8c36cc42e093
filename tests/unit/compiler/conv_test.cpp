// ONNX Conv through the compiler: legalize's attribute rules, shape inference (explicit and auto
// pads, strides, dilations), Relu fusion, the float interpreter, and int8 quantization run on the
// device (ref backend) against the float reference within int8 tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>

#include "compiler_testlib.h"
#include "tpuw/compiler/conv.h"
#include "tpuw/compiler/conv_bf16.h"
#include "tpuw/compiler/quantize.h"
#include "tpuw/device.h"
#include "tpuw/nn/quantize.h"
#include "tpuw/runtime/conv.h"
#include "tpuw/runtime/conv_bf16.h"
#include "tpuw/runtime/npy.h"

namespace tpuw::compiler {
namespace {

using testing::expect_error;
using testing::graph_of;
using testing::ModelBuilder;
using testing::random_floats;

struct ConvSpec {
  int64_t c = 3, h = 10, w = 10, o = 8, kh = 3, kw = 3;
  std::vector<int64_t> strides, dilations, pads;  // empty: attribute absent
  std::string auto_pad;                           // empty: absent
  bool bias = true, relu = true;
  int64_t group = 0;                              // 0: absent
  bool kernel_shape = true;
};

/// input x [batch, c, h, w] -> Conv (name "conv") [-> Relu] -> output y.
ModelBuilder conv_model(const ConvSpec& s, uint32_t seed = 1) {
  ModelBuilder mb;
  mb.input("x", {-1, s.c, s.h, s.w});
  const int64_t cg = s.group > 0 ? s.c / s.group : s.c;  // input channels per group
  const double fan = static_cast<double>(cg * s.kh * s.kw);
  const auto r = static_cast<float>(1.0 / std::sqrt(fan));
  mb.init("w", {s.o, cg, s.kh, s.kw}, random_floats(static_cast<size_t>(s.o * cg * s.kh * s.kw), -r, r, seed));
  std::vector<std::string> ins = {"x", "w"};
  if (s.bias) {
    mb.init("b", {s.o}, random_floats(static_cast<size_t>(s.o), -0.2f, 0.2f, seed + 1));
    ins.push_back("b");
  }
  auto& n = mb.node("Conv", ins, {s.relu ? "c" : "y"}, "conv");
  if (s.kernel_shape) ModelBuilder::attr_ints(n, "kernel_shape", {s.kh, s.kw});
  if (!s.strides.empty()) ModelBuilder::attr_ints(n, "strides", s.strides);
  if (!s.dilations.empty()) ModelBuilder::attr_ints(n, "dilations", s.dilations);
  if (!s.pads.empty()) ModelBuilder::attr_ints(n, "pads", s.pads);
  if (!s.auto_pad.empty()) ModelBuilder::attr_s(n, "auto_pad", s.auto_pad);
  if (s.group != 0) ModelBuilder::attr_i(n, "group", s.group);
  if (s.relu) mb.node("Relu", {"c"}, {"y"}, "relu");
  mb.output("y");
  return mb;
}

int64_t attr_int_of(const Node& n, const std::string& key) {
  const Attribute* a = n.attr(key);
  return a == nullptr ? 0 : a->i;
}

const Node& only_conv(const Graph& g) {
  for (const Node& n : g.nodes) {
    if (n.op == Op::kConv) return n;
  }
  ADD_FAILURE() << "no Conv";
  static const Node none;
  return none;
}

TEST(ConvCompiler, ShapesAndReluFusion) {
  ConvSpec s;
  s.pads = {1, 1, 1, 1};
  s.strides = {2, 2};
  const Graph g = optimize(graph_of(conv_model(s)));
  ASSERT_EQ(g.nodes.size(), 1u);  // the Relu is fused
  const Node& c = only_conv(g);
  ASSERT_NE(c.attr("relu"), nullptr);
  EXPECT_EQ(c.attr("relu")->i, 1);
  EXPECT_EQ(c.origin.size(), 2u);
  EXPECT_EQ(*g.value(c.outputs[0]).shape, (Dims{kBatch, 8, 5, 5}));
  EXPECT_EQ(g.outputs[0].name, "y");
}

TEST(ConvCompiler, AutoPadAndDilation) {
  struct Want {
    ConvSpec s;
    Dims out;
    std::array<uint32_t, 4> pads;  // top, left, bottom, right
  };
  std::vector<Want> cases;
  {
    ConvSpec s;
    s.auto_pad = "SAME_UPPER";
    s.strides = {2, 2};
    s.kh = s.kw = 4;
    s.h = s.w = 9;
    cases.push_back({s, {kBatch, 8, 5, 5}, {1, 1, 2, 2}});  // total pad 3: the extra one at the end
  }
  {
    ConvSpec s;
    s.auto_pad = "SAME_LOWER";
    s.strides = {2, 2};
    s.kh = s.kw = 4;
    s.h = s.w = 9;
    cases.push_back({s, {kBatch, 8, 5, 5}, {2, 2, 1, 1}});
  }
  {
    ConvSpec s;
    s.auto_pad = "VALID";
    cases.push_back({s, {kBatch, 8, 8, 8}, {0, 0, 0, 0}});
  }
  {
    ConvSpec s;
    s.dilations = {2, 3};
    s.pads = {0, 1, 2, 3};
    s.kernel_shape = false;  // from the weight
    cases.push_back({s, {kBatch, 8, 10 + 2 - 4, 10 + 4 - 6}, {0, 1, 2, 3}});
  }
  for (const Want& c : cases) {
    const Graph g = optimize(graph_of(conv_model(c.s)));
    const Node& n = only_conv(g);
    EXPECT_EQ(*g.value(n.outputs[0]).shape, c.out) << c.s.auto_pad;
    const nn::ConvGeometry geo = conv_geometry(g, n);
    EXPECT_EQ((std::array<uint32_t, 4>{geo.pad_top, geo.pad_left, geo.pad_bottom, geo.pad_right}), c.pads)
        << c.s.auto_pad;
  }
}

TEST(ConvCompiler, FloatInterpreterComputesTheConvolution) {
  // 1 channel 3x3 input 1..9, 2x2 kernel [[1, 2], [3, 4]], bias 0.5, stride 1, pad (0, 0, 1, 1).
  ModelBuilder mb;
  mb.input("x", {-1, 1, 3, 3});
  mb.init("w", {1, 1, 2, 2}, {1, 2, 3, 4});
  mb.init("b", {1}, {0.5f});
  auto& n = mb.node("Conv", {"x", "w", "b"}, {"y"}, "conv");
  ModelBuilder::attr_ints(n, "pads", {0, 0, 1, 1});
  mb.output("y");
  const Graph g = optimize(graph_of(mb));
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const auto t = interpret_float(g, x, 1);
  const std::vector<float>& y = t[static_cast<size_t>(g.outputs[0].value)];
  // y[i][j] = x[i][j] + 2 x[i][j+1] + 3 x[i+1][j] + 4 x[i+1][j+1] + 0.5 (zero beyond the image).
  const std::vector<float> want = {37.5f, 47.5f, 21.5f, 67.5f, 77.5f, 33.5f, 23.5f, 26.5f, 9.5f};
  EXPECT_EQ(y, want);
}

TEST(ConvCompiler, MalformedAndUnsupportedConvsAreNamedErrors) {
  auto opt = [](const ConvSpec& s) { return [s] { (void)optimize(graph_of(conv_model(s))); }; };
  ConvSpec s;
  s.group = 3;
  s.c = 4;  // not a multiple of the groups
  expect_error(opt(s), ErrorKind::kBadFile,
               {"node 'conv' (Conv)", "weight 'w' has shape [8, 1, 3, 3] (1 input channels per group x 3 groups) but "
                                      "the input 'x' has 4 channels"});
  s = {};
  s.pads = {1, 1};
  expect_error(opt(s), ErrorKind::kBadFile, {"node 'conv' (Conv)", "attribute 'pads' has 2 values", "needs 4"});
  s = {};
  s.pads = {1, -1, 1, 1};
  expect_error(opt(s), ErrorKind::kBadFile, {"attribute 'pads' holds -1"});
  s = {};
  s.strides = {0, 1};
  expect_error(opt(s), ErrorKind::kBadFile, {"attribute 'strides' holds 0"});
  s = {};
  s.dilations = {1, 2, 3};
  expect_error(opt(s), ErrorKind::kBadFile, {"attribute 'dilations' has 3 values"});
  s = {};
  s.auto_pad = "SAME";
  expect_error(opt(s), ErrorKind::kBadFile, {"attribute 'auto_pad' is 'SAME'"});
  s = {};
  s.auto_pad = "VALID";
  s.pads = {1, 1, 1, 1};
  expect_error(opt(s), ErrorKind::kBadFile, {"both auto_pad 'VALID' and explicit pads"});
  s = {};
  s.kh = s.kw = 13;  // 13 > 10 and no pads
  expect_error(opt(s), ErrorKind::kBadFile, {"the dilated kernel height 13 is larger than the padded input height 10"});
  s = {};
  s.dilations = {1, 5};  // 5 * 2 + 1 = 11 > 10
  expect_error(opt(s), ErrorKind::kBadFile, {"dilated kernel width 11"});
  {
    ModelBuilder mb = conv_model(ConvSpec{});
    mb.graph().mutable_node(0)->mutable_attribute(0)->set_ints(0, 5);  // kernel_shape [5, 3], weight 3x3
    expect_error([&] { (void)optimize(graph_of(mb)); }, ErrorKind::kBadFile,
                 {"attribute 'kernel_shape' is [5, 3] but weight 'w' has shape [8, 3, 3, 3]"});
  }
  {
    ModelBuilder mb = conv_model(ConvSpec{});
    auto* ks = mb.graph().mutable_node(0)->mutable_attribute(0);
    ks->add_ints(3);  // kernel_shape [3, 3, 3]
    expect_error([&] { (void)optimize(graph_of(mb)); }, ErrorKind::kUnsupported,
                 {"'kernel_shape' has 3 values: a 3-D convolution; only 2-D Conv is supported"});
  }
  {
    ModelBuilder mb;
    mb.input("x", {-1, 2, 5, 5});
    mb.init("w", {4, 3, 3, 3}, std::vector<float>(4 * 27, 0.1f));
    mb.node("Conv", {"x", "w"}, {"y"}, "conv");
    mb.output("y");
    expect_error([&] { (void)optimize(graph_of(mb)); }, ErrorKind::kBadFile,
                 {"(3 input channels) but the input 'x' has 2 channels"});
  }
  {
    ModelBuilder mb;
    mb.input("x", {-1, 3, 5, 5});
    mb.init("w", {4, 3, 3, 3}, std::vector<float>(4 * 27, 0.1f));
    mb.init("b", {3}, {1, 2, 3});
    mb.node("Conv", {"x", "w", "b"}, {"y"}, "conv");
    mb.output("y");
    expect_error([&] { (void)optimize(graph_of(mb)); }, ErrorKind::kBadFile, {"bias 'b' has shape [3]; it must be [4]"});
  }
  {
    ModelBuilder mb;
    mb.input("x", {-1, 12});
    mb.init("w", {4, 3, 2, 2}, std::vector<float>(48, 0.1f));
    mb.node("Conv", {"x", "w"}, {"y"}, "conv");
    mb.output("y");
    expect_error([&] { (void)optimize(graph_of(mb)); }, ErrorKind::kUnsupported,
                 {"input 'x' has shape [batch, 12]; a 2-D Conv needs [batch, channels, height, width]"});
  }
  // The float-network lowering (tpuw run's path today) names the Conv it cannot chain.
  expect_error([] { (void)compile_float(graph_of(conv_model(ConvSpec{}))); }, ErrorKind::kUnsupported,
               {"node 'conv' (Conv)"});
}

// Float model -> calibration (interpret_float) -> quantize_conv -> the device (ref backend) ->
// dequantized output within int8 tolerance of the float reference, and bit-exact with conv2d_int.
TEST(ConvCompiler, QuantizedConvOnTheDeviceMatchesFloat) {
  std::vector<ConvSpec> specs;
  {
    ConvSpec s;
    s.pads = {1, 1, 1, 1};
    specs.push_back(s);
  }
  {
    ConvSpec s;
    s.c = 20, s.o = 24, s.strides = {2, 2}, s.pads = {1, 0, 1, 2}, s.relu = false;
    specs.push_back(s);
  }
  {
    ConvSpec s;
    s.kh = 5, s.kw = 3, s.dilations = {2, 1}, s.bias = false, s.auto_pad = "SAME_UPPER";
    specs.push_back(s);
  }
  {
    ConvSpec s;  // LeNet's first layer
    s.c = 1, s.h = s.w = 28, s.o = 6, s.kh = s.kw = 5;
    specs.push_back(s);
  }
  {
    ConvSpec s;  // depthwise 3x3 over 20 channels (two channel blocks)
    s.c = s.o = 20, s.group = 20, s.pads = {1, 1, 1, 1};
    specs.push_back(s);
  }
  {
    ConvSpec s;  // grouped: 2 groups of 6 -> 4
    s.c = 12, s.o = 8, s.group = 2, s.strides = {2, 1}, s.pads = {0, 1, 1, 1};
    specs.push_back(s);
  }
  const uint64_t batch = 4;
  Device dev = Device::open("ref", BackendConfig{});
  uint32_t seed = 10;
  for (const ConvSpec& s : specs) {
    SCOPED_TRACE(::testing::Message() << "spec " << seed);
    const Graph g = optimize(graph_of(conv_model(s, seed)));
    const Node& n = only_conv(g);
    const std::vector<float> x = random_floats(static_cast<size_t>(batch * s.c * s.h * s.w), -1.0f, 1.0f, seed++);
    const auto t = interpret_float(g, x, batch);
    const std::vector<float>& yf = t[static_cast<size_t>(n.outputs[0])];
    float xmax = 0, ymax = 0;
    for (float v : x) xmax = std::max(xmax, std::fabs(v));
    for (float v : yf) ymax = std::max(ymax, std::fabs(v));
    const float in_scale = xmax / 127.0f, out_scale = ymax / 127.0f;
    const nn::QConv2d q = quantize_conv(g, n, in_scale, out_scale);
    EXPECT_EQ(q.relu, s.relu);
    std::vector<int8_t> xq(x.size());
    for (size_t i = 0; i < x.size(); ++i) xq[i] = nn::quantize_value(x[i], in_scale);
    const runtime::ConvRunResult r = runtime::run_conv2d(dev, q, xq, batch);
    EXPECT_EQ(r.y, nn::conv2d_int(q, xq, batch));
    ASSERT_EQ(r.y.size(), yf.size());
    double worst = 0;
    for (size_t i = 0; i < yf.size(); ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(r.y[i]) * out_scale - yf[i]));
    }
    EXPECT_LT(worst, 0.04 * ymax) << "largest error " << worst << " of max " << ymax;
  }
}

// A small CNN (strided convs, no pooling) end to end: compile_quantized_cnn -> run_cnn on the ref
// device == the integer CPU pass bit for bit, and the dequantized softmax close to the float model.
ModelBuilder cnn_model(uint32_t seed) {
  ModelBuilder mb;
  mb.input("x", {-1, 1, 12, 12});
  auto conv = [&](const std::string& name, const std::string& in, const std::string& out, int64_t o, int64_t c) {
    const auto r = static_cast<float>(1.5 / std::sqrt(static_cast<double>(c * 9)));
    mb.init(name + ".w", {o, c, 3, 3}, random_floats(static_cast<size_t>(o * c * 9), -r, r, seed++));
    mb.init(name + ".b", {o}, random_floats(static_cast<size_t>(o), -0.1f, 0.1f, seed++));
    auto& n = mb.node("Conv", {in, name + ".w", name + ".b"}, {name + ".y"}, name);
    ModelBuilder::attr_ints(n, "strides", {2, 2});
    ModelBuilder::attr_ints(n, "pads", {1, 1, 1, 1});
    mb.node("Relu", {name + ".y"}, {out}, name + "_relu");
  };
  conv("conv1", "x", "a1", 8, 1);    // [8, 6, 6]
  conv("conv2", "a1", "a2", 20, 8);  // [20, 3, 3]
  auto& f = mb.node("Flatten", {"a2"}, {"f"}, "flatten");
  ModelBuilder::attr_i(f, "axis", 1);
  mb.init("fc.w", {180, 10}, random_floats(1800, -0.2f, 0.2f, seed++));
  mb.init("fc.b", {10}, random_floats(10, -0.1f, 0.1f, seed++));
  mb.node("MatMul", {"f", "fc.w"}, {"m"}, "fc");
  mb.node("Add", {"m", "fc.b"}, {"logits"}, "fc_bias");
  mb.node("Softmax", {"logits"}, {"y"}, "softmax");
  mb.output("y");
  return mb;
}

TEST(ConvCompiler, SmallCnnOnTheDeviceMatchesIntegerAndFloat) {
  const uint64_t batch = 16;
  const std::vector<float> x = random_floats(batch * 144, 0.0f, 1.0f, 99);
  const Graph g = graph_of(cnn_model(5));
  const nn::QCnn q = compile_quantized_cnn(g, x, batch);
  ASSERT_EQ(q.convs.size(), 2u);
  EXPECT_TRUE(q.convs[0].relu);
  EXPECT_EQ(q.convs[1].geom.out_h(), 3u);
  EXPECT_EQ(q.head.input_features, 180u);
  EXPECT_EQ(q.head.input_scale, q.convs[1].out_scale);
  std::vector<int8_t> xq(x.size());
  for (size_t i = 0; i < x.size(); ++i) xq[i] = nn::quantize_value(x[i], q.input_scale);
  Device dev = Device::open("ref", BackendConfig{});
  const runtime::CnnRunResult r = runtime::run_cnn(dev, q, xq, batch);
  EXPECT_EQ(r.output_i32, nn::forward_cnn_int_raw(q, xq, batch));
  EXPECT_EQ(r.convs.size(), 2u);
  EXPECT_GT(r.cycles, 0u);
  const std::vector<float> y = nn::dequantize_output(q.head, r.output_i32, batch);
  const Graph og = optimize(graph_of(cnn_model(5)));
  const auto t = interpret_float(og, x, batch);
  const std::vector<float>& yf = t[static_cast<size_t>(og.outputs[0].value)];
  ASSERT_EQ(y.size(), yf.size());
  double worst = 0;
  for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(y[i]) - yf[i]));
  EXPECT_LT(worst, 0.03) << "largest probability error";
}

// Runs `mb` (one input [batch, C, H, W]) through compile_quantized_cnn and run_cnn on ref: the
// output equals the integer CPU pass bit for bit and, dequantized, is within `tol` of the float
// model's largest magnitude. Returns the compiled network.
nn::QCnn expect_cnn_matches_float(const ModelBuilder& mb, uint64_t batch, uint64_t features, double tol, uint32_t seed) {
  const std::vector<float> x = random_floats(batch * features, -1.0f, 1.0f, seed);
  const nn::QCnn q = compile_quantized_cnn(graph_of(mb), x, batch);
  std::vector<int8_t> xq(x.size());
  for (size_t i = 0; i < x.size(); ++i) xq[i] = nn::quantize_value(x[i], q.input_scale);
  Device dev = Device::open("ref", BackendConfig{});
  const runtime::CnnRunResult r = runtime::run_cnn(dev, q, xq, batch);
  EXPECT_EQ(r.output_i32, nn::forward_cnn_int_raw(q, xq, batch));
  const Graph og = optimize(graph_of(mb));
  const auto t = interpret_float(og, x, batch);
  const std::vector<float>& yf = t[static_cast<size_t>(og.outputs[0].value)];
  EXPECT_EQ(r.output_i32.size(), yf.size());
  EXPECT_EQ(q.output_features() * batch, yf.size());
  std::vector<float> y(r.output_i32.size());
  if (q.has_head()) {
    y = nn::dequantize_output(q.head, r.output_i32, batch);
  } else {
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(r.output_i32[i]) * q.map_scale();
  }
  double ymax = 0, worst = 0;
  for (size_t i = 0; i < y.size() && i < yf.size(); ++i) {
    ymax = std::max(ymax, std::fabs(static_cast<double>(yf[i])));
    worst = std::max(worst, std::fabs(static_cast<double>(y[i]) - yf[i]));
  }
  EXPECT_GT(ymax, 0.0);
  EXPECT_LE(worst, tol * ymax) << "largest error " << worst << " of max " << ymax;
  return q;
}

// The same model in bf16 (compile_bf16_cnn, run_cnn_bf16 on ref): within `tol` of the float
// model's largest magnitude.
void expect_bf16_cnn_matches_float(const ModelBuilder& mb, uint64_t batch, uint64_t features, double tol, uint32_t seed) {
  const std::vector<float> x = random_floats(batch * features, -1.0f, 1.0f, seed);
  const Bf16Cnn net = compile_bf16_cnn(graph_of(mb));
  Device dev = Device::open("ref", BackendConfig{});
  const runtime::CnnBf16RunResult r = runtime::run_cnn_bf16(dev, net, x, batch);
  const Graph og = optimize(graph_of(mb));
  const auto t = interpret_float(og, x, batch);
  const std::vector<float>& yf = t[static_cast<size_t>(og.outputs[0].value)];
  ASSERT_EQ(r.output.size(), yf.size());
  double ymax = 0, worst = 0;
  for (size_t i = 0; i < yf.size(); ++i) {
    ymax = std::max(ymax, std::fabs(static_cast<double>(yf[i])));
    worst = std::max(worst, std::fabs(static_cast<double>(r.output[i]) - yf[i]));
  }
  EXPECT_GT(ymax, 0.0);
  EXPECT_LE(worst, tol * ymax) << "bf16: largest error " << worst << " of max " << ymax;
}

// Models that end in a feature map (no Flatten + dense head): the output is the last layer's int8
// map, NCHW, in the model's output shape.
TEST(ConvCompiler, FeatureMapOutputs) {
  {  // Conv + Relu
    const nn::QCnn q = expect_cnn_matches_float(conv_model(ConvSpec{}), 4, 300, 0.03, 1);
    EXPECT_FALSE(q.has_head());
    ASSERT_EQ(q.convs.size(), 1u);
    EXPECT_TRUE(q.convs[0].relu);
    EXPECT_EQ(q.output_features(), 8u * 8 * 8);
  }
  {  // Conv without Relu (negative outputs), stride 2, asymmetric pads
    ConvSpec s;
    s.relu = false;
    s.strides = {2, 2};
    s.pads = {1, 0, 0, 1};
    expect_cnn_matches_float(conv_model(s), 3, 300, 0.03, 2);
  }
  auto tail_model = [](const std::string& op) {
    ModelBuilder mb = conv_model(ConvSpec{});  // x -> conv -> relu -> y [batch, 8, 8, 8]
    mb.graph().mutable_output()->Clear();
    auto& n = mb.node(op, {"y"}, {"z"}, "tail");
    if (op == "MaxPool" || op == "AveragePool") {
      ModelBuilder::attr_ints(n, "kernel_shape", {2, 2});
      ModelBuilder::attr_ints(n, "strides", {2, 2});
    }
    if (op == "Pad") ModelBuilder::attr_ints(n, "pads", {0, 0, 1, 2, 0, 0, 2, 1});
    mb.output("z");
    return mb;
  };
  {
    const nn::QCnn q = expect_cnn_matches_float(tail_model("MaxPool"), 4, 300, 0.03, 3);
    ASSERT_EQ(q.convs.size(), 2u);
    EXPECT_TRUE(q.convs[1].max_pool);
    EXPECT_EQ(q.output_features(), 8u * 4 * 4);
  }
  {
    const nn::QCnn q = expect_cnn_matches_float(tail_model("AveragePool"), 4, 300, 0.03, 4);
    EXPECT_EQ(q.output_features(), 8u * 4 * 4);
  }
  {  // [batch, 8, 1, 1]
    const nn::QCnn q = expect_cnn_matches_float(tail_model("GlobalAveragePool"), 4, 300, 0.03, 5);
    EXPECT_EQ(q.output_features(), 8u);
  }
  {  // a Pad that ends the model: a 1x1 average pool with those pads (zero border)
    const nn::QCnn q = expect_cnn_matches_float(tail_model("Pad"), 4, 300, 0.03, 6);
    ASSERT_EQ(q.convs.size(), 2u);
    EXPECT_EQ(q.convs[1].geom.kernel_h, 1u);
    EXPECT_EQ(q.output_features(), 8u * 11 * 11);
  }
  {  // AveragePool -> Relu: the Relu is fused into the pool
    ModelBuilder mb;
    mb.input("x", {-1, 3, 6, 6});
    auto& p = mb.node("AveragePool", {"x"}, {"p"}, "pool");
    ModelBuilder::attr_ints(p, "kernel_shape", {3, 3});
    mb.node("Relu", {"p"}, {"y"}, "relu");
    mb.output("y");
    const nn::QCnn q = expect_cnn_matches_float(mb, 5, 108, 0.03, 7);
    ASSERT_EQ(q.convs.size(), 1u);
    EXPECT_TRUE(q.convs[0].relu);
  }
  {  // Conv -> MaxPool -> Relu (LeNet's F.relu(F.max_pool2d(conv(x), 2))): the Relu moves to the conv
    ConvSpec cs;
    cs.relu = false;
    ModelBuilder mb = conv_model(cs);
    mb.graph().mutable_output()->Clear();
    auto& p = mb.node("MaxPool", {"y"}, {"p"}, "pool");
    ModelBuilder::attr_ints(p, "kernel_shape", {2, 2});
    ModelBuilder::attr_ints(p, "strides", {2, 2});
    mb.node("Relu", {"p"}, {"z"}, "relu_after_pool");
    mb.output("z");
    const nn::QCnn q = expect_cnn_matches_float(mb, 4, 300, 0.03, 9);
    ASSERT_EQ(q.convs.size(), 2u);
    EXPECT_TRUE(q.convs[0].relu);
    EXPECT_EQ(q.convs[0].name, "conv (Conv) + relu_after_pool (Relu)");
  }
  {  // Conv -> Flatten: the map, flattened in NCHW order
    ModelBuilder mb = conv_model(ConvSpec{});
    mb.graph().mutable_output()->Clear();
    auto& f = mb.node("Flatten", {"y"}, {"f"}, "flatten");
    ModelBuilder::attr_i(f, "axis", 1);
    mb.output("f");
    expect_cnn_matches_float(mb, 2, 300, 0.03, 8);
  }
}

// An inference BatchNormalization "name" over `c` channels reading `in`, writing `out`.
void batch_norm(ModelBuilder& mb, const std::string& name, const std::string& in, const std::string& out, int64_t c,
                uint32_t seed) {
  mb.init(name + ".scale", {c}, random_floats(static_cast<size_t>(c), 0.5f, 2.0f, seed));
  mb.init(name + ".B", {c}, random_floats(static_cast<size_t>(c), -0.5f, 0.5f, seed + 1));
  mb.init(name + ".mean", {c}, random_floats(static_cast<size_t>(c), -0.3f, 0.3f, seed + 2));
  mb.init(name + ".var", {c}, random_floats(static_cast<size_t>(c), 0.2f, 1.5f, seed + 3));
  auto& n = mb.node("BatchNormalization", {in, name + ".scale", name + ".B", name + ".mean", name + ".var"}, {out}, name);
  auto* a = n.add_attribute();
  a->set_name("epsilon");
  a->set_type(onnx::AttributeProto_AttributeType_FLOAT);
  a->set_f(1e-3f);
}

TEST(ConvCompiler, BatchNormFoldsIntoTheConv) {
  // x -> Conv -> BN -> Relu -> Conv (no bias) -> BN -> y: both BNs fold, the Relu fuses after the fold.
  ModelBuilder mb;
  mb.input("x", {-1, 3, 8, 8});
  mb.init("w1", {6, 3, 3, 3}, random_floats(162, -0.4f, 0.4f, 11));
  mb.init("b1", {6}, random_floats(6, -0.2f, 0.2f, 12));
  auto& c1 = mb.node("Conv", {"x", "w1", "b1"}, {"c1"}, "conv1");
  ModelBuilder::attr_ints(c1, "pads", {1, 1, 1, 1});
  batch_norm(mb, "bn1", "c1", "n1", 6, 20);
  mb.node("Relu", {"n1"}, {"r1"}, "relu1");
  mb.init("w2", {5, 6, 3, 3}, random_floats(270, -0.3f, 0.3f, 13));
  mb.node("Conv", {"r1", "w2"}, {"c2"}, "conv2");
  batch_norm(mb, "bn2", "c2", "y", 5, 30);
  mb.output("y");
  const Graph og = optimize(graph_of(mb));
  for (const Node& n : og.nodes) EXPECT_EQ(n.op, Op::kConv) << n.label();
  ASSERT_EQ(og.nodes.size(), 2u);
  EXPECT_EQ(attr_int_of(og.nodes[0], "relu"), 1);
  const nn::QCnn q = expect_cnn_matches_float(mb, 6, 192, 0.04, 14);
  ASSERT_EQ(q.convs.size(), 2u);
  EXPECT_TRUE(q.convs[0].relu);
  EXPECT_EQ(q.convs[0].name, "conv1 (Conv) + bn1 (BatchNormalization) + relu1 (Relu)");
  expect_bf16_cnn_matches_float(mb, 6, 192, 0.02, 14);
  // The folded float graph computes the unfolded model: a naive conv + BatchNorm in double.
  const uint64_t batch = 2;
  const std::vector<float> x = random_floats(batch * 192, -1.0f, 1.0f, 15);
  auto tensor = [&](const std::string& name) {
    for (const auto& t : mb.graph().initializer()) {
      if (t.name() != name) continue;
      std::vector<float> f(t.raw_data().size() / sizeof(float));
      std::memcpy(f.data(), t.raw_data().data(), f.size() * sizeof(float));
      return std::vector<double>(f.begin(), f.end());
    }
    ADD_FAILURE() << name;
    return std::vector<double>{};
  };
  // conv (3x3, pad `pad`) then BN with epsilon 1e-3, NCHW, square maps.
  auto conv_bn = [&](const std::vector<double>& in, int64_t C, int64_t H, int64_t O, int64_t pad, const std::string& w,
                     const std::string& b, const std::string& bn) {
    const std::vector<double> wt = tensor(w), bt = b.empty() ? std::vector<double>(O, 0.0) : tensor(b);
    const std::vector<double> sc = tensor(bn + ".scale"), sh = tensor(bn + ".B"), mu = tensor(bn + ".mean"),
                              va = tensor(bn + ".var");
    const int64_t Ho = H + 2 * pad - 2;
    std::vector<double> out(batch * O * Ho * Ho);
    for (int64_t bi = 0; bi < static_cast<int64_t>(batch); ++bi)
      for (int64_t o = 0; o < O; ++o)
        for (int64_t yy = 0; yy < Ho; ++yy)
          for (int64_t xx = 0; xx < Ho; ++xx) {
            double acc = bt[o];
            for (int64_t c = 0; c < C; ++c)
              for (int64_t dy = 0; dy < 3; ++dy)
                for (int64_t dx = 0; dx < 3; ++dx) {
                  const int64_t iy = yy + dy - pad, ix = xx + dx - pad;
                  if (iy < 0 || ix < 0 || iy >= H || ix >= H) continue;
                  acc += in[((bi * C + c) * H + iy) * H + ix] * wt[((o * C + c) * 3 + dy) * 3 + dx];
                }
            out[((bi * O + o) * Ho + yy) * Ho + xx] = (acc - mu[o]) / std::sqrt(va[o] + 1e-3) * sc[o] + sh[o];
          }
    return out;
  };
  std::vector<double> a(x.begin(), x.end());
  a = conv_bn(a, 3, 8, 6, 1, "w1", "b1", "bn1");
  for (double& v : a) v = std::max(v, 0.0);
  a = conv_bn(a, 6, 8, 5, 0, "w2", "", "bn2");
  const auto t = interpret_float(og, x, batch);
  const std::vector<float>& yf = t[static_cast<size_t>(og.outputs[0].value)];
  ASSERT_EQ(yf.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(yf[i], a[i], 1e-4 * (1 + std::fabs(a[i]))) << "element " << i;
}

TEST(ConvCompiler, StandaloneBatchNormRunsAsADepthwiseConv) {
  // x -> Conv -> Relu -> MaxPool -> BN -> y: the BN cannot fold (a pool before it) and runs as a
  // 1x1 depthwise conv (per-channel scale and shift) on the device.
  ModelBuilder mb;
  mb.input("x", {-1, 2, 8, 8});
  mb.init("w1", {20, 2, 3, 3}, random_floats(360, -0.5f, 0.5f, 41));
  auto& c1 = mb.node("Conv", {"x", "w1"}, {"c1"}, "conv1");
  ModelBuilder::attr_ints(c1, "pads", {1, 1, 1, 1});
  mb.node("Relu", {"c1"}, {"r1"}, "relu1");
  auto& p = mb.node("MaxPool", {"r1"}, {"p1"}, "pool1");
  ModelBuilder::attr_ints(p, "kernel_shape", {2, 2});
  ModelBuilder::attr_ints(p, "strides", {2, 2});
  batch_norm(mb, "bn", "p1", "y", 20, 50);
  mb.output("y");
  const nn::QCnn q = expect_cnn_matches_float(mb, 4, 128, 0.04, 42);
  ASSERT_EQ(q.convs.size(), 3u);
  EXPECT_EQ(q.convs[2].geom.kernel_h, 1u);
  EXPECT_EQ(q.convs[2].name, "bn (BatchNormalization)");
  expect_bf16_cnn_matches_float(mb, 4, 128, 0.02, 42);
  // Diagonal weights: of the 2 x 2 channel-block tiles only the 2 diagonal ones are non-zero.
  const std::vector<float> x = random_floats(4 * 128, -1.0f, 1.0f, 42);
  std::vector<int8_t> xq(x.size());
  for (size_t i = 0; i < x.size(); ++i) xq[i] = nn::quantize_value(x[i], q.input_scale);
  Device dev = Device::open("ref", BackendConfig{});
  const runtime::CnnRunResult r = runtime::run_cnn(dev, q, xq, 4);
  EXPECT_EQ(r.convs[2].plan.weight_tiles, 4u);
  EXPECT_EQ(r.convs[2].plan.executed_tiles(), 2u);
}

// conv (3x3, pad 1, c -> c channels) "name" reading `in`, writing `out`.
void conv3x3(ModelBuilder& mb, const std::string& name, const std::string& in, const std::string& out, int64_t c,
             int64_t o, float range, uint32_t seed) {
  mb.init(name + ".w", {o, c, 3, 3}, random_floats(static_cast<size_t>(o * c * 9), -range, range, seed));
  mb.init(name + ".b", {o}, random_floats(static_cast<size_t>(o), -0.1f, 0.1f, seed + 1));
  auto& n = mb.node("Conv", {in, name + ".w", name + ".b"}, {out}, name);
  ModelBuilder::attr_ints(n, "pads", {1, 1, 1, 1});
}

// A ResNet basic block without BN: x -> conv -> relu -> conv -> Add(., x) -> relu.
ModelBuilder residual_block(int64_t c, int64_t hw, uint32_t seed) {
  ModelBuilder mb;
  mb.input("x", {-1, c, hw, hw});
  conv3x3(mb, "conv1", "x", "c1", c, c, 0.3f, seed);
  mb.node("Relu", {"c1"}, {"r1"}, "relu1");
  conv3x3(mb, "conv2", "r1", "c2", c, c, 0.3f, seed + 2);
  mb.node("Add", {"c2", "x"}, {"s"}, "add");
  mb.node("Relu", {"s"}, {"y"}, "relu2");
  mb.output("y");
  return mb;
}

TEST(ConvCompiler, ResidualAddIsAOneByOneConvOverTheConcatenation) {
  const ModelBuilder mb = residual_block(8, 6, 61);
  const nn::QCnn q = expect_cnn_matches_float(mb, 5, 8 * 36, 0.04, 62);
  ASSERT_EQ(q.convs.size(), 3u);
  const nn::QConv2d& add = q.convs[2];
  EXPECT_EQ(add.sources, (std::vector<int32_t>{1, -1}));
  EXPECT_EQ(add.name, "add (Add) + relu2 (Relu)");
  EXPECT_TRUE(add.relu);
  EXPECT_EQ(add.geom.in_c, 16u);
  EXPECT_EQ(add.geom.out_c, 8u);
  EXPECT_EQ(add.geom.kernel_h, 1u);
  // Diagonal blocks: w = round(127 s_k / max s), the larger input's weight 127.
  const float sa = q.convs[1].out_scale, sb = q.input_scale;
  EXPECT_NE(sa, sb);
  EXPECT_EQ(add.w_q[0 * 16 + 0], static_cast<int8_t>(std::lround(127.0 * sa / std::max(sa, sb))));
  EXPECT_EQ(add.w_q[3 * 16 + 8 + 3], static_cast<int8_t>(std::lround(127.0 * sb / std::max(sa, sb))));
  EXPECT_EQ(add.w_q[3 * 16 + 4], 0);
  // A block with a skip over a max pool and a non-ReLU Add that ends the model, and an Add of a
  // conv with a 1x1 projection (different channel counts go through the projection).
  ModelBuilder m2;
  m2.input("x", {-1, 3, 8, 8});
  conv3x3(m2, "conv1", "x", "c1", 3, 6, 0.4f, 70);
  auto& p = m2.node("MaxPool", {"c1"}, {"p"}, "pool");
  ModelBuilder::attr_ints(p, "kernel_shape", {2, 2});
  ModelBuilder::attr_ints(p, "strides", {2, 2});
  conv3x3(m2, "conv2", "p", "c2", 6, 6, 0.3f, 72);
  m2.init("proj.w", {6, 6, 1, 1}, random_floats(36, -0.5f, 0.5f, 74));
  m2.node("Conv", {"p", "proj.w"}, {"pr"}, "proj");
  m2.node("Add", {"c2", "pr"}, {"y"}, "add");
  m2.output("y");
  const nn::QCnn q2 = expect_cnn_matches_float(m2, 4, 192, 0.04, 75);
  ASSERT_EQ(q2.convs.size(), 5u);
  EXPECT_EQ(q2.convs[3].sources, (std::vector<int32_t>{1}));
  EXPECT_EQ(q2.convs[4].sources, (std::vector<int32_t>{2, 3}));
  EXPECT_FALSE(q2.convs[4].relu);
  // rtl == ref bit for bit (the residual block, 2 images).
  if (!backend_array_sizes("rtl").empty()) {
    const std::vector<float> x = random_floats(2 * 8 * 36, -1.0f, 1.0f, 63);
    std::vector<int8_t> xq(x.size());
    for (size_t i = 0; i < x.size(); ++i) xq[i] = nn::quantize_value(x[i], q.input_scale);
    Device ref = Device::open("ref", BackendConfig{});
    Device rtl = Device::open("rtl", BackendConfig{});
    const runtime::CnnRunResult a = runtime::run_cnn(ref, q, xq, 2);
    const runtime::CnnRunResult b = runtime::run_cnn(rtl, q, xq, 2);
    EXPECT_EQ(a.output_i32, b.output_i32);
    EXPECT_EQ(a.moved_bytes, b.moved_bytes);
  }
}

TEST(ConvCompiler, ConcatAlongChannelsRequantizesEachInput) {
  // x -> conv a (4 -> 6, relu), conv b (4 -> 3); Concat(a, b, x) -> conv c (13 -> 5) -> y; and
  // Concat(a, b) as the model's output.
  auto model = [](bool head_conv) {
    ModelBuilder mb;
    mb.input("x", {-1, 4, 6, 6});
    conv3x3(mb, "conva", "x", "ca", 4, 6, 0.4f, 90);
    mb.node("Relu", {"ca"}, {"a"}, "relua");
    conv3x3(mb, "convb", "x", "b", 4, 3, 0.2f, 92);
    auto& c = mb.node("Concat", head_conv ? std::vector<std::string>{"a", "b", "x"} : std::vector<std::string>{"a", "b"},
                      {head_conv ? "cat" : "y"}, "cat");
    ModelBuilder::attr_i(c, "axis", 1);
    if (head_conv) conv3x3(mb, "convc", "cat", "y", 13, 5, 0.3f, 94);
    mb.output("y");
    return mb;
  };
  {
    const nn::QCnn q = expect_cnn_matches_float(model(true), 4, 144, 0.04, 95);
    ASSERT_EQ(q.convs.size(), 4u);
    const nn::QConv2d& cat = q.convs[2];
    EXPECT_EQ(cat.sources, (std::vector<int32_t>{0, 1, -1}));
    EXPECT_EQ(cat.geom.in_c, 13u);
    EXPECT_EQ(cat.geom.out_c, 13u);
    for (uint32_t o = 0; o < 13; ++o) EXPECT_EQ(cat.w_q[o * 13 + o], 127) << o;
    EXPECT_EQ(q.convs[3].sources, std::vector<int32_t>{});
  }
  {
    const nn::QCnn q = expect_cnn_matches_float(model(false), 3, 144, 0.03, 96);
    EXPECT_EQ(q.output_features(), 9u * 36);
  }
}

TEST(ConvCompiler, MergeErrorsNameTheNode) {
  {
    ModelBuilder mb;
    mb.input("x", {-1, 1, 6, 6});
    conv3x3(mb, "conv1", "x", "c1", 1, 3, 0.3f, 80);
    mb.node("Add", {"c1", "x"}, {"y"}, "add");  // 3 channels + 1 channel broadcast
    mb.output("y");
    expect_error([&] { (void)compile_quantized_cnn(graph_of(mb), random_floats(36, -1.0f, 1.0f, 81), 1); },
                 ErrorKind::kUnsupported, {"node 'add' (Add)", "an Add adds two maps", "with the same shape"});
  }
  {
    ModelBuilder mb;
    mb.input("x", {-1, 1, 6, 6});
    conv3x3(mb, "conv1", "x", "c1", 1, 3, 0.3f, 80);
    auto& c = mb.node("Concat", {"c1", "c1"}, {"y"}, "cat");
    ModelBuilder::attr_i(c, "axis", 2);
    mb.output("y");
    expect_error([&] { (void)compile_quantized_cnn(graph_of(mb), random_floats(36, -1.0f, 1.0f, 81), 1); },
                 ErrorKind::kUnsupported, {"node 'cat' (Concat)", "axis 2", "joins the channels"});
  }
}

TEST(ConvCompiler, CnnChainErrorsNameTheNode) {
  {
    ModelBuilder mb;
    mb.input("x", {-1, 1, 4, 4});
    mb.init("w", {2, 1, 3, 3}, std::vector<float>(18, 0.1f));
    mb.node("Conv", {"x", "w"}, {"c"}, "conv");
    auto& p = mb.node("LpPool", {"c"}, {"p"}, "pool");
    ModelBuilder::attr_ints(p, "kernel_shape", {2, 2});
    mb.output("p");
    expect_error([&] { (void)compile_quantized_cnn(graph_of(mb), std::vector<float>(16, 0.5f), 1); },
                 ErrorKind::kUnsupported, {"node 'pool' (LpPool)", "operator is not supported"});
  }
}

// Conv -> AveragePool -> Conv -> GlobalAveragePool -> Flatten -> Gemm: the pools run on the device
// as identity-weight convolutions (only the diagonal channel tiles execute).
ModelBuilder pooled_cnn(uint32_t seed, int64_t cip, std::vector<int64_t> pool_pads) {
  ModelBuilder mb;
  mb.input("x", {-1, 3, 12, 12});
  auto conv = [&](const std::string& name, const std::string& in, const std::string& out, int64_t o, int64_t c) {
    const auto r = static_cast<float>(1.5 / std::sqrt(static_cast<double>(c * 9)));
    mb.init(name + ".w", {o, c, 3, 3}, random_floats(static_cast<size_t>(o * c * 9), -r, r, seed++));
    mb.init(name + ".b", {o}, random_floats(static_cast<size_t>(o), -0.1f, 0.1f, seed++));
    auto& n = mb.node("Conv", {in, name + ".w", name + ".b"}, {name + ".y"}, name);
    ModelBuilder::attr_ints(n, "pads", {1, 1, 1, 1});
    mb.node("Relu", {name + ".y"}, {out}, name + "_relu");
  };
  conv("conv1", "x", "a1", 20, 3);  // [20, 12, 12]
  auto& p = mb.node("AveragePool", {"a1"}, {"p1"}, "pool1");
  ModelBuilder::attr_ints(p, "kernel_shape", {2, 2});
  ModelBuilder::attr_ints(p, "strides", {2, 2});
  if (!pool_pads.empty()) ModelBuilder::attr_ints(p, "pads", pool_pads);
  ModelBuilder::attr_i(p, "count_include_pad", cip);
  conv("conv2", "p1", "a2", 24, 20);  // [24, 6, 6]
  mb.node("GlobalAveragePool", {"a2"}, {"g"}, "gap");
  auto& f = mb.node("Flatten", {"g"}, {"f"}, "flatten");
  ModelBuilder::attr_i(f, "axis", 1);
  mb.init("fc.w", {10, 24}, random_floats(240, -0.5f, 0.5f, seed++));
  mb.init("fc.b", {10}, random_floats(10, -0.1f, 0.1f, seed++));
  auto& gm = mb.node("Gemm", {"f", "fc.w", "fc.b"}, {"y"}, "fc");
  ModelBuilder::attr_i(gm, "transB", 1);
  mb.output("y");
  return mb;
}

TEST(ConvCompiler, AveragePoolsRunAsConvolutions) {
  const uint64_t batch = 8;
  const std::vector<float> x = random_floats(batch * 432, 0.0f, 1.0f, 7);
  const nn::QCnn q = compile_quantized_cnn(graph_of(pooled_cnn(3, 1, {})), x, batch);
  ASSERT_EQ(q.convs.size(), 4u);
  EXPECT_EQ(q.convs[1].geom.out_h(), 6u);   // 2x2 pool, stride 2
  EXPECT_EQ(q.convs[3].geom.kernel_h, 6u);  // global pool: the whole 6x6 map
  EXPECT_EQ(q.convs[3].geom.out_h(), 1u);
  std::vector<int8_t> xq(x.size());
  for (size_t i = 0; i < x.size(); ++i) xq[i] = nn::quantize_value(x[i], q.input_scale);
  Device dev = Device::open("ref", BackendConfig{});
  const runtime::CnnRunResult r = runtime::run_cnn(dev, q, xq, batch);
  EXPECT_EQ(r.output_i32, nn::forward_cnn_int_raw(q, xq, batch));
  // 20 channels = 2 blocks of 16: the pool runs 2 of its 2 x 4 taps x 2 blocks... only diagonal tiles.
  const runtime::ConvPlan& pool = r.convs[1].plan;
  EXPECT_EQ(pool.weight_tiles, 2u * 4 * 2);
  EXPECT_EQ(pool.executed_tiles(), 2u * 4);
  const std::vector<float> y = nn::dequantize_output(q.head, r.output_i32, batch);
  const Graph og = optimize(graph_of(pooled_cnn(3, 1, {})));
  const auto t = interpret_float(og, x, batch);
  const std::vector<float>& yf = t[static_cast<size_t>(og.outputs[0].value)];
  float ymax = 0;
  double worst = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    ymax = std::max(ymax, std::fabs(yf[i]));
    worst = std::max(worst, std::fabs(static_cast<double>(y[i]) - yf[i]));
  }
  EXPECT_LT(worst, 0.06 * ymax) << "largest error " << worst << " of " << ymax;
}

TEST(ConvCompiler, UnsupportedPoolingCasesAreNamed) {
  // count_include_pad=0 with pads and ceil_mode's partial windows run in int8 (pool_groups_test.cpp)
  // and in bf16 as pixel groups (pool_groups_bf16_test.cpp).
  EXPECT_GT(compile_bf16_cnn(graph_of(pooled_cnn(3, 0, {1, 1, 1, 1}))).convs[1].groups(), 1u);
  const std::vector<float> x(432, 0.5f);
  ModelBuilder mb = pooled_cnn(3, 1, {});
  ModelBuilder::attr_i(*mb.graph().mutable_node(2), "ceil_mode", 1);
  (void)compile_quantized_cnn(graph_of(mb), x, 1);  // 12x12, 2x2 stride 2: no partial window, same as floor
  ModelBuilder odd;
  odd.input("x", {-1, 2, 5, 5});
  auto& p = odd.node("AveragePool", {"x"}, {"y"}, "pool");
  ModelBuilder::attr_ints(p, "kernel_shape", {2, 2});
  ModelBuilder::attr_ints(p, "strides", {2, 2});
  ModelBuilder::attr_i(p, "ceil_mode", 1);
  odd.output("y");
  EXPECT_EQ(compile_bf16_cnn(graph_of(odd)).convs[0].groups(), 3u);  // 4, 2, 1
}

// The PyTorch-exported digits CNN (examples/digits/train_cnn.py: Conv-ReLU-AvgPool x 2, the
// x.view(x.size(0), -1) pattern, Linear, Softmax): the float interpreter reproduces PyTorch, and
// int8 on the device (ref) is bit-exact with the integer pass and within 1 point of float accuracy.
// The blocks of examples/cnn_blocks (make_models.py, PyTorch, committed with their inputs and
// PyTorch's outputs): the optimized graph in float equals PyTorch's output; int8 on ref equals
// the CPU integer model bit for bit and is within `tol` of PyTorch's output's largest magnitude.
struct TorchBlock {
  std::string name;
  size_t layers;
  double tol;
};

TEST(ConvCompiler, PyTorchBlocks) {
  const std::string dir = std::string(TPUW_EXAMPLES_DIR) + "/cnn_blocks/";
  for (const TorchBlock& b : {TorchBlock{"residual_block", 4, 0.02}, TorchBlock{"dwsep_block", 2, 0.03},
                              TorchBlock{"concat_block", 4, 0.03}}) {
    SCOPED_TRACE(b.name);
    std::ifstream f(dir + b.name + ".onnx", std::ios::binary);
    ASSERT_TRUE(f.good());
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const Graph g = import_onnx_graph(bytes, b.name + ".onnx");
    const npy::Array xa = npy::load(dir + b.name + "_x.npy");
    const npy::Array ea = npy::load(dir + b.name + "_expected.npy");
    const std::vector<float> x(xa.view<float>().begin(), xa.view<float>().end());
    const std::span<const float> want = ea.view<float>();
    const uint64_t n = xa.shape[0];
    const Graph og = optimize(g);
    for (const Node& node : og.nodes) EXPECT_NE(node.op, Op::kBatchNormalization) << "not folded: " << node.label();
    const auto t = interpret_float(og, x, n);
    const std::vector<float>& yf = t[static_cast<size_t>(og.outputs[0].value)];
    ASSERT_EQ(yf.size(), want.size());
    double ymax = 0;
    for (size_t i = 0; i < yf.size(); ++i) {
      ASSERT_NEAR(yf[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << "element " << i;
      ymax = std::max(ymax, std::fabs(static_cast<double>(want[i])));
    }
    const nn::QCnn q = compile_quantized_cnn(g, x, n);
    EXPECT_EQ(q.convs.size(), b.layers);
    std::vector<int8_t> xq(x.size());
    for (size_t i = 0; i < x.size(); ++i) xq[i] = nn::quantize_value(x[i], q.input_scale);
    Device dev = Device::open("ref", BackendConfig{});
    const runtime::CnnRunResult r = runtime::run_cnn(dev, q, xq, n);
    EXPECT_EQ(r.output_i32, nn::forward_cnn_int_raw(q, xq, n));
    std::vector<float> y(r.output_i32.size());
    if (q.has_head()) {
      y = nn::dequantize_output(q.head, r.output_i32, n);
    } else {
      for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(r.output_i32[i]) * q.map_scale();
    }
    ASSERT_EQ(y.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(y[i]) - want[i]));
    EXPECT_LE(worst, b.tol * ymax) << "int8: largest error " << worst << " of max " << ymax;
    std::cout << b.name << ": int8 max error " << worst / ymax << " of max |y|, " << r.cycles << " ref cycles for " << n
              << " images, " << r.moved_bytes << " bytes moved vs " << r.min_bytes << " minimum\n";
    if (b.name == "dwsep_block") {  // bf16 too (the residual Add and the Concat are int8 only)
      const runtime::CnnBf16RunResult rb = runtime::run_cnn_bf16(dev, compile_bf16_cnn(g), x, n);
      ASSERT_EQ(rb.output.size(), want.size());
      double wb = 0;
      for (size_t i = 0; i < want.size(); ++i) wb = std::max(wb, std::fabs(static_cast<double>(rb.output[i]) - want[i]));
      EXPECT_LE(wb, 0.02 * ymax) << "bf16: largest error " << wb << " of max " << ymax;
    }
  }
}

TEST(ConvCompiler, DigitsCnnFromPyTorch) {
  const std::string dir = std::string(TPUW_EXAMPLES_DIR) + "/digits/";
  std::ifstream f(dir + "digits_cnn.onnx", std::ios::binary);
  ASSERT_TRUE(f.good());
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const Graph g = import_onnx_graph(bytes, "digits_cnn.onnx");
  auto floats = [](const npy::Array& a) {
    std::vector<float> v;
    for (uint8_t b : a.view<uint8_t>()) v.push_back(static_cast<float>(b));
    return v;
  };
  const npy::Array test_x = npy::load(dir + "test_x.npy");
  const npy::Array test_y = npy::load(dir + "test_y.npy");
  const npy::Array calib_x = npy::load(dir + "calib_x.npy");
  const npy::Array expected = npy::load(dir + "digits_cnn_expected.npy");
  const std::vector<float> x = floats(test_x), calib = floats(calib_x);
  const uint64_t n = test_x.shape[0];
  const std::span<const uint8_t> labels = test_y.view<uint8_t>();

  const Graph og = optimize(g);
  const auto t = interpret_float(og, x, n);
  const std::vector<float>& yf = t[static_cast<size_t>(og.outputs[0].value)];
  const std::span<const float> want = expected.view<float>();
  ASSERT_EQ(yf.size(), want.size());
  for (size_t i = 0; i < yf.size(); ++i) ASSERT_NEAR(yf[i], want[i], 1e-4) << "element " << i;

  const nn::QCnn q = compile_quantized_cnn(g, calib, calib_x.shape[0]);
  ASSERT_EQ(q.convs.size(), 4u);  // conv1, pool, conv2, pool
  std::vector<int8_t> xq(x.size());
  for (size_t i = 0; i < x.size(); ++i) xq[i] = nn::quantize_value(x[i], q.input_scale);
  Device dev = Device::open("ref", BackendConfig{});
  const runtime::CnnRunResult r = runtime::run_cnn(dev, q, xq, n);
  EXPECT_EQ(r.output_i32, nn::forward_cnn_int_raw(q, xq, n));
  const std::vector<float> yq = nn::dequantize_output(q.head, r.output_i32, n);
  const std::vector<uint32_t> pf = nn::argmax_rows(yf, 10), pq = nn::argmax_rows(yq, 10);
  size_t ok_f = 0, ok_q = 0;
  for (uint64_t i = 0; i < n; ++i) {
    ok_f += pf[i] == labels[i];
    ok_q += pq[i] == labels[i];
  }
  const double acc_f = 100.0 * static_cast<double>(ok_f) / static_cast<double>(n);
  const double acc_q = 100.0 * static_cast<double>(ok_q) / static_cast<double>(n);
  EXPECT_GT(acc_f, 97.0);
  EXPECT_LE(std::fabs(acc_q - acc_f), 1.0) << "float " << acc_f << "%, int8 " << acc_q << "%";
  std::cout << "digits CNN: float " << acc_f << "%, int8 on the device " << acc_q << "%, " << r.cycles
            << " device cycles for " << n << " images\n";
}

}  // namespace
}  // namespace tpuw::compiler
