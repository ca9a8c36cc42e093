// Host operators at the end of the dense path (issue 13): Softmax, LogSoftmax and
// LayerNormalization lowered to nn::HostStep (axes, opset semantics, parameters), their fp32
// arithmetic against a direct double computation, the float reference and the int8 model applying
// them, and the refusals (the batch axis, a device operator after a host operator that follows the
// device, read statistics). Host operators on the graph input (before any device operator) run on
// the raw rows before the device: input_steps.
#include <gtest/gtest.h>

#include <cmath>

#include "compiler_testlib.h"
#include "tpuw/compiler/passes.h"
#include "tpuw/nn/float_network.h"
#include "tpuw/nn/quantize.h"

namespace tpuw::compiler {
namespace {

using testing::expect_error;
using testing::graph_of;
using testing::ModelBuilder;
using testing::random_floats;

nn::FloatNetwork compile(const ModelBuilder& mb) { return compile_float(graph_of(mb)); }

// Softmax / LogSoftmax over `len` of a [outer][len][inner] row, in double (the ONNX definition).
std::vector<double> reference_softmax(const std::vector<float>& x, size_t outer, size_t len, size_t inner, bool log) {
  std::vector<double> y(x.size());
  const size_t row = outer * len * inner;
  for (size_t r = 0; r < x.size(); r += row) {
    for (size_t o = 0; o < outer; ++o) {
      for (size_t i = 0; i < inner; ++i) {
        auto at = [&](size_t l) { return r + (o * len + l) * inner + i; };
        double mx = x[at(0)], sum = 0;
        for (size_t l = 0; l < len; ++l) mx = std::max(mx, double{x[at(l)]});
        for (size_t l = 0; l < len; ++l) sum += std::exp(x[at(l)] - mx);
        for (size_t l = 0; l < len; ++l) y[at(l)] = log ? x[at(l)] - mx - std::log(sum) : std::exp(x[at(l)] - mx) / sum;
      }
    }
  }
  return y;
}

TEST(CompilerHostOps, SoftmaxAndLogSoftmaxAfterAGemmAreHostSteps) {
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    ModelBuilder mb;
    mb.input("x", {-1, 4}).init("W", {4, 3}, random_floats(12, -1, 1, 5));
    mb.node("MatMul", {"x", "W"}, {"h"}, "mm");
    mb.node(op, {"h"}, {"y"}, "sm");
    mb.output("y");
    const nn::FloatNetwork net = compile(mb);
    ASSERT_EQ(net.layers.size(), 1u) << op;
    if (op[0] == 'S') {
      // A Softmax over every output feature keeps the network's one host_op (the CNN head's form).
      EXPECT_EQ(net.host_op, nn::HostOp::kSoftmax);
      EXPECT_TRUE(net.host_steps.empty());
    } else {
      EXPECT_EQ(net.host_op, nn::HostOp::kNone);
      ASSERT_EQ(net.host_steps.size(), 1u);
      const nn::HostStep& s = net.host_steps[0];
      EXPECT_EQ(s.op, nn::HostOp::kLogSoftmax);
      EXPECT_EQ(s.name, "sm (LogSoftmax)");
      EXPECT_EQ((std::vector<uint32_t>{s.outer, s.len, s.inner}), (std::vector<uint32_t>{1, 3, 1}));
    }
    // The float reference applies it: the device layer's output, then the host operator.
    const std::vector<float> x = random_floats(8, -2, 2, 6);
    const std::vector<float> logits = nn::forward_float_layers(net, x, 2).back();
    const std::vector<float> y = nn::forward_float(net, x, 2);
    const std::vector<double> want = reference_softmax(logits, 1, 3, 1, op[0] == 'L');
    for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-6) << op << " " << i;
  }
}

// Opset 13 normalizes over `axis` alone; before 13 the axes from `axis` on are coerced to one.
TEST(CompilerHostOps, AxisSemanticsFollowTheOpset) {
  struct Case {
    int64_t opset, axis;
    uint32_t outer, len, inner;
  };
  for (const Case c : {Case{13, 1, 1, 4, 5}, Case{13, 2, 4, 5, 1}, Case{13, -1, 4, 5, 1}, Case{13, -2, 1, 4, 5},
                       Case{11, 1, 1, 20, 1}, Case{11, 2, 4, 5, 1}, Case{11, -2, 1, 20, 1}}) {
    for (const char* op : {"Softmax", "LogSoftmax"}) {
      ModelBuilder mb(c.opset);
      mb.input("x", {-1, 4, 5});
      ModelBuilder::attr_i(mb.node(op, {"x"}, {"y"}, "s"), "axis", c.axis);
      mb.output("y");
      const nn::FloatNetwork net = compile(mb);
      // On the graph input: a host step on the raw rows before the device.
      EXPECT_EQ(net.host_op, nn::HostOp::kNone);
      EXPECT_TRUE(net.host_steps.empty());
      ASSERT_EQ(net.input_steps.size(), 1u);
      const nn::HostStep& s = net.input_steps[0];
      EXPECT_EQ((std::vector<uint32_t>{s.outer, s.len, s.inner}), (std::vector<uint32_t>{c.outer, c.len, c.inner}))
          << op << " opset " << c.opset << " axis " << c.axis;
      // No matrix operator: an identity layer carries the rows through the device.
      ASSERT_EQ(net.layers.size(), 1u);
      const std::vector<float> x = random_floats(40, -3, 3, 7);
      const std::vector<float> y = nn::forward_float(net, x, 2);
      const std::vector<double> want = reference_softmax(x, c.outer, c.len, c.inner, op[0] == 'L');
      for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 2e-6) << op << " " << i;
    }
  }
  // The default axis: 1 before opset 13 (all features), -1 from 13 on (the last axis).
  for (const int64_t opset : {11, 13}) {
    ModelBuilder mb(opset);
    mb.input("x", {-1, 4, 5});
    mb.node("LogSoftmax", {"x"}, {"y"}, "s");
    mb.output("y");
    const nn::HostStep s = compile(mb).input_steps.at(0);
    EXPECT_EQ(s.len, opset == 11 ? 20u : 5u);
  }
}

TEST(CompilerHostOps, LayerNormalizationWithScaleAndBias) {
  const std::vector<float> scale{0.5f, 2, -1, 1.5f}, bias{0.25f, -1, 0, 3};
  ModelBuilder mb(17);
  mb.input("x", {-1, 3, 4}).init("scale", {4}, scale).init("B", {4}, bias);
  auto& ln = mb.node("LayerNormalization", {"x", "scale", "B"}, {"y"}, "ln");
  ModelBuilder::attr_f(ln, "epsilon", 0.01f);
  mb.output("y");
  const nn::FloatNetwork net = compile(mb);
  ASSERT_EQ(net.input_steps.size(), 1u);  // on the graph input: before the device
  const nn::HostStep& s = net.input_steps[0];
  EXPECT_EQ(s.op, nn::HostOp::kLayerNorm);
  EXPECT_EQ((std::vector<uint32_t>{s.outer, s.len, s.inner}), (std::vector<uint32_t>{3, 4, 1}));
  EXPECT_FLOAT_EQ(s.epsilon, 0.01f);
  EXPECT_EQ(s.scale, scale);
  EXPECT_EQ(s.bias, bias);
  const std::vector<float> x = random_floats(24, -3, 3, 8);
  const std::vector<float> y = nn::forward_float(net, x, 2);
  for (size_t b = 0; b < x.size(); b += 4) {
    double mean = 0, var = 0;
    for (size_t j = 0; j < 4; ++j) mean += x[b + j] / 4.0;
    for (size_t j = 0; j < 4; ++j) var += (x[b + j] - mean) * (x[b + j] - mean) / 4.0;
    for (size_t j = 0; j < 4; ++j) {
      const double want = (x[b + j] - mean) / std::sqrt(var + 0.01) * scale[j] + bias[j];
      EXPECT_NEAR(y[b + j], want, 1e-5) << b + j;
    }
  }
  // Axis 1 of [batch, 3, 4]: one block of 12 features; a [1, 4] scale broadcasts over the 3.
  ModelBuilder mb2(17);
  mb2.input("x", {-1, 3, 4}).init("scale", {1, 4}, scale);
  ModelBuilder::attr_i(mb2.node("LayerNormalization", {"x", "scale"}, {"y"}, "ln"), "axis", 1);
  mb2.output("y");
  const nn::HostStep s2 = compile(mb2).input_steps.at(0);
  EXPECT_EQ((std::vector<uint32_t>{s2.outer, s2.len, s2.inner}), (std::vector<uint32_t>{1, 12, 1}));
  ASSERT_EQ(s2.scale.size(), 12u);
  for (size_t j = 0; j < 12; ++j) EXPECT_EQ(s2.scale[j], scale[j % 4]);
  EXPECT_TRUE(s2.bias.empty());
}

TEST(CompilerHostOps, ChainOfHostOperatorsAndLayoutAfterThem) {
  ModelBuilder mb(17);
  mb.input("x", {-1, 6}).init("W", {6, 4}, random_floats(24, -1, 1, 9)).init("scale", {4}, {1, 1, 1, 1});
  mb.init_i64("shape", {0, 2, 2});
  mb.node("Gemm", {"x", "W"}, {"h"}, "fc");
  mb.node("LayerNormalization", {"h", "scale"}, {"n"}, "ln");
  mb.node("Reshape", {"n", "shape"}, {"r"}, "rs");
  mb.node("LogSoftmax", {"r"}, {"y"}, "ls");
  mb.output("y");
  const nn::FloatNetwork net = compile(mb);
  ASSERT_EQ(net.host_steps.size(), 2u);
  EXPECT_EQ(net.host_steps[0].name, "ln (LayerNormalization)");
  EXPECT_EQ(net.host_steps[1].name, "ls (LogSoftmax)");
  EXPECT_EQ((std::vector<uint32_t>{net.host_steps[1].outer, net.host_steps[1].len}), (std::vector<uint32_t>{2, 2}));
}

// Host operators that read the graph input run on the raw fp32 rows before the device: a Softmax
// of 10000..10003 (ONNX's large-number case) keeps its four distinct values, which int8 (scale
// 10003/127) and bf16 (8 significant bits) would merge; LayerNormalization then Gemm: the device
// layer reads the normalized rows, calibrated on them.
TEST(CompilerHostOps, HostOperatorsOnTheGraphInputRunBeforeTheDevice) {
  {
    ModelBuilder mb;
    mb.input("x", {-1, 4});
    mb.node("Softmax", {"x"}, {"y"}, "sm");
    mb.output("y");
    const nn::FloatNetwork net = compile(mb);
    ASSERT_EQ(net.input_steps.size(), 1u);
    EXPECT_EQ(net.input_steps[0].name, "sm (Softmax)");
    ASSERT_EQ(net.layers.size(), 1u);  // the identity layer: still one device program
    const std::vector<float> x = {0, 1, 2, 3, 10000, 10001, 10002, 10003};
    const std::vector<double> want = reference_softmax(x, 1, 4, 1, false);
    const nn::QNetwork q = nn::quantize(net, x, 2);
    ASSERT_EQ(q.input_steps.size(), 1u);
    const std::vector<float> y = nn::forward_int(q, x, 2);
    for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 0.01) << i;  // int8 of [0, 0.64]
    EXPECT_GT(y[7] - y[4], 0.5);                                                 // not the uniform 0.25
    const std::vector<float> f = nn::forward_float(net, x, 2);
    for (size_t i = 0; i < f.size(); ++i) EXPECT_NEAR(f[i], want[i], 1e-6) << i;
  }
  {
    ModelBuilder mb(17);
    mb.input("x", {-1, 6}).init("scale", {6}, random_floats(6, 0.5f, 2, 21));
    mb.init("W", {6, 3}, random_floats(18, -1, 1, 22)).init("b", {3}, random_floats(3, -0.2f, 0.2f, 23));
    mb.node("LayerNormalization", {"x", "scale"}, {"n"}, "ln");
    mb.node("Gemm", {"n", "W", "b"}, {"h"}, "fc");
    mb.node("Softmax", {"h"}, {"y"}, "sm");
    mb.output("y");
    const nn::FloatNetwork net = compile(mb);
    ASSERT_EQ(net.input_steps.size(), 1u);
    EXPECT_EQ(net.input_steps[0].op, nn::HostOp::kLayerNorm);
    ASSERT_EQ(net.layers.size(), 1u);
    EXPECT_EQ(net.host_op, nn::HostOp::kSoftmax);  // after the device, as before
    const uint64_t rows = 16;
    std::vector<float> x = random_floats(rows * 6, -1, 1, 24);
    for (size_t i = 0; i < x.size(); i += 6) x[i] += 5000.0f;  // rows far from 0: raw int8 would lose them
    const std::vector<float> f = nn::forward_float(net, x, rows);
    const nn::QNetwork q = nn::quantize(net, x, rows);
    const std::vector<float> y = nn::forward_int(q, x, rows);
    ASSERT_EQ(y.size(), f.size());
    for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], f[i], 0.03) << i;
  }
}

TEST(CompilerHostOps, Refusals) {
  // The batch axis: rows are not independent.
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    for (const int64_t axis : {0, -2}) {
      ModelBuilder mb;
      mb.input("x", {-1, 4});
      ModelBuilder::attr_i(mb.node(op, {"x"}, {"y"}, "s"), "axis", axis);
      mb.output("y");
      expect_error([&] { (void)compile(mb); }, ErrorKind::kUnsupported,
                   {std::string("node 's' (") + op + ")", "is the batch axis"});
    }
  }
  {
    ModelBuilder mb(17);
    mb.input("x", {-1, 4}).init("scale", {4, 4}, std::vector<float>(16, 1.0f));
    ModelBuilder::attr_i(mb.node("LayerNormalization", {"x", "scale"}, {"y"}, "ln"), "axis", 0);
    mb.output("y");
    expect_error([&] { (void)compile(mb); }, ErrorKind::kUnsupported, {"node 'ln' (LayerNormalization)", "batch axis"});
  }
  // A device operator after a host operator that follows the device.
  {
    ModelBuilder mb;
    mb.input("x", {-1, 4}).init("W", {4, 4}, random_floats(16, -1, 1, 10));
    mb.init("W2", {4, 4}, random_floats(16, -1, 1, 14));
    mb.node("MatMul", {"x", "W2"}, {"h"}, "mm0");
    mb.node("Softmax", {"h"}, {"s"}, "sm");
    mb.node("MatMul", {"s", "W"}, {"y"}, "mm");
    mb.output("y");
    expect_error([&] { (void)compile(mb); }, ErrorKind::kUnsupported,
                 {"node 'mm' (", "follows the host operator sm (Softmax)"});
  }
  // LayerNormalization's Mean output read by the graph.
  {
    ModelBuilder mb(17);
    mb.input("x", {-1, 4}).init("scale", {4}, {1, 1, 1, 1});
    mb.node("LayerNormalization", {"x", "scale"}, {"y", "mean"}, "ln");
    mb.output("y").output("mean");
    expect_error([&] { (void)compile(mb); }, ErrorKind::kUnsupported, {"node 'ln' (LayerNormalization)", "Mean"});
  }
  // A Scale that is not a constant, or does not fit the normalized dimensions.
  {
    ModelBuilder mb(17);
    mb.input("x", {-1, 4}).init("scale", {3}, {1, 1, 1});
    mb.node("LayerNormalization", {"x", "scale"}, {"y"}, "ln");
    mb.output("y");
    expect_error([&] { (void)compile(mb); }, ErrorKind::kUnsupported,
                 {"node 'ln' (LayerNormalization)", "'scale' (Scale) has shape [3]", "[4]"});
  }
}

// nn::quantize keeps the host steps: the int8 model's dequantized output goes through them, the
// same function on the same values as the float reference's.
TEST(CompilerHostOps, TheInt8ModelAppliesTheSameHostSteps) {
  ModelBuilder mb(17);
  mb.input("x", {-1, 5}).init("W", {5, 6}, random_floats(30, -1, 1, 11)).init("scale", {6}, random_floats(6, 0.5f, 2, 12));
  mb.node("MatMul", {"x", "W"}, {"h"}, "mm");
  mb.node("LayerNormalization", {"h", "scale"}, {"n"}, "ln");
  mb.node("Softmax", {"n"}, {"y"}, "sm");
  mb.output("y");
  const nn::FloatNetwork net = compile(mb);
  const std::vector<float> x = random_floats(20, -1, 1, 13);
  const nn::QNetwork q = nn::quantize(net, x, 4);
  ASSERT_EQ(q.host_steps.size(), 2u);
  const std::vector<int32_t> raw = nn::forward_int_raw(q, nn::quantize_input(q, x), 4);
  std::vector<float> plain(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) plain[i] = static_cast<float>(raw[i]) * q.layers.back().out_scale[i % 6];
  nn::apply_host_ops(plain, 6, nn::HostOp::kNone, net.host_steps);
  const std::vector<float> y = nn::dequantize_output(q, raw, 4);
  ASSERT_EQ(y.size(), plain.size());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], plain[i]) << i;
  // Within int8 error of the float model, and the softmax rows sum to 1.
  const std::vector<float> f = nn::forward_float(net, x, 4);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], f[i], 0.05) << i;
  for (size_t r = 0; r < 4; ++r) {
    double sum = 0;
    for (size_t j = 0; j < 6; ++j) sum += y[r * 6 + j];
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
}

// ---- Squeeze / Unsqueeze of an activation: layout only ------------------------------------------
TEST(CompilerLayout, SqueezeAndUnsqueezeKeepTheBatchAxis) {
  struct Case {
    const char* op;
    int64_t opset;
    Dims in;
    std::vector<int64_t> axes;
    Dims want;
  };
  for (const Case& c : {Case{"Squeeze", 13, {-1, 4, 1, 1}, {2, 3}, {kBatch, 4}},
                        Case{"Squeeze", 11, {-1, 4, 1, 1}, {-1}, {kBatch, 4, 1}},
                        Case{"Unsqueeze", 13, {-1, 4}, {2}, {kBatch, 4, 1}},
                        Case{"Unsqueeze", 11, {-1, 4}, {-1, 1}, {kBatch, 1, 4, 1}}}) {
    ModelBuilder mb(c.opset);
    mb.input("x", c.in).init("W", {4, 4}, random_floats(16, -1, 1, 20));
    auto& n = mb.node(c.op, c.opset >= 13 ? std::vector<std::string>{"x", "axes"} : std::vector<std::string>{"x"}, {"s"}, "sq");
    if (c.opset >= 13) {
      mb.init_i64("axes", c.axes);
    } else {
      auto* a = n.add_attribute();
      a->set_name("axes");
      a->set_type(onnx::AttributeProto_AttributeType_INTS);
      for (const int64_t v : c.axes) a->add_ints(v);
    }
    mb.output("s");
    Graph g = graph_of(mb);
    infer_shapes(g, true);
    EXPECT_EQ(*g.value(g.nodes[0].outputs[0]).shape, c.want) << c.op << " " << dims_string(c.axes);
    // The rows pass through unchanged (an identity layer; exact in float).
    const nn::FloatNetwork net = compile(mb);
    const std::vector<float> x = random_floats(8, -1, 1, 21);
    EXPECT_EQ(nn::forward_float(net, x, 2), x) << c.op;
  }
  // [batch, C, 1, 1] -> Squeeze -> Gemm: the head of a CNN-style export.
  ModelBuilder mb;
  mb.input("x", {-1, 4, 1, 1}).init("W", {4, 3}, random_floats(12, -1, 1, 22)).init_i64("axes", {-1, -2});
  mb.node("Squeeze", {"x", "axes"}, {"s"}, "sq");
  mb.node("Gemm", {"s", "W"}, {"y"}, "fc");
  mb.output("y");
  const nn::FloatNetwork net = compile(mb);
  ASSERT_EQ(net.layers.size(), 1u);
  EXPECT_EQ(net.layers[0].k, 4u);
}

// A Reshape whose shape fixes dimension 0 keeps the batch for exactly that many rows: the network
// records it (the runtime checks the rows); -1 and 0 resolve against the real row size.
TEST(CompilerLayout, ReshapeWithAFixedBatchIsRecordedNotReinterpreted) {
  for (const auto& [shape, want] : std::vector<std::pair<std::vector<int64_t>, Dims>>{
           {{2, 12}, {kBatch, 12}}, {{2, -1, 2}, {kBatch, 6, 2}}, {{2, 0, 1, -1}, {kBatch, 3, 1, 4}},
           {{2, 3, 4}, {kBatch, 3, 4}}, {{1, -1}, {kBatch, 12}}}) {
    ModelBuilder mb;
    mb.input("x", {-1, 3, 4}).init_i64("s", shape);
    mb.node("Reshape", {"x", "s"}, {"y"}, "rs");
    mb.output("y");
    Graph g = graph_of(mb);
    // Only a consumer that records the row count accepts it (the CNN and training paths do not).
    expect_error([&] { (void)optimize(g); }, ErrorKind::kUnsupported,
                 {"node 'rs' (Reshape)", "fixes the batch dimension to " + std::to_string(shape[0])});
    g.batch_may_be_fixed = true;
    infer_shapes(g, true);
    EXPECT_EQ(*g.value(g.nodes[0].outputs[0]).shape, want) << dims_string(shape);
    // Kept by remove_identities even when it changes nothing ([2, 3, 4]): its batch is recorded.
    const nn::FloatNetwork net = compile(mb);
    EXPECT_EQ(net.fixed_batch, static_cast<uint64_t>(shape[0])) << dims_string(shape);
    EXPECT_EQ(net.fixed_batch_by, "node 'rs' (Reshape): reshape to " + dims_string(shape));
  }
  // Keeping the batch symbol: any number of rows.
  ModelBuilder mb;
  mb.input("x", {-1, 3, 4}).init_i64("s", {-1, 12});
  mb.node("Reshape", {"x", "s"}, {"y"}, "rs");
  mb.output("y");
  EXPECT_EQ(compile(mb).fixed_batch, 0u);
  // Two Reshapes that fix different batches cannot both hold.
  ModelBuilder mb2;
  mb2.input("x", {-1, 3, 4}).init_i64("s", {2, 12}).init_i64("t", {3, 12});
  mb2.node("Reshape", {"x", "s"}, {"y"}, "r1");
  mb2.node("Reshape", {"y", "t"}, {"z"}, "r2");
  mb2.output("z");
  expect_error([&] { (void)compile(mb2); }, ErrorKind::kUnsupported,
               {"node 'r2' (Reshape): reshape to [3, 12] fixes the batch to 3 rows, but node 'r1' (Reshape)"});
  // A wrong element count is an error naming the node.
  ModelBuilder mb3;
  mb3.input("x", {-1, 3, 4}).init_i64("s", {2, 5, -1});
  mb3.node("Reshape", {"x", "s"}, {"y"}, "rs");
  mb3.output("y");
  expect_error([&] { (void)compile(mb3); }, ErrorKind::kBadFile, {"node 'rs' (Reshape)", "does not divide 12 features"});
}

TEST(CompilerLayout, SqueezeAndUnsqueezeRefusals) {
  struct Case {
    const char* op;
    Dims in;
    std::vector<int64_t> axes;  // empty: no axes input
    ErrorKind kind;
    std::string msg;
  };
  for (const Case& c : {Case{"Squeeze", {-1, 4, 1}, {0}, ErrorKind::kUnsupported, "axis 0 is the batch axis"},
                        Case{"Squeeze", {-1, 4, 1}, {1}, ErrorKind::kBadFile, "has size 4, not 1"},
                        Case{"Squeeze", {-1, 4, 1}, {3}, ErrorKind::kBadFile, "axis 3 is out of range"},
                        Case{"Squeeze", {-1, 4, 1}, {}, ErrorKind::kUnsupported, "give the axes"},
                        Case{"Unsqueeze", {-1, 4}, {0}, ErrorKind::kUnsupported, "axis 0 is the batch axis"},
                        Case{"Unsqueeze", {-1, 4}, {1, 1}, ErrorKind::kBadFile, "axis 1 is repeated"}}) {
    ModelBuilder mb;
    mb.input("x", c.in);
    if (!c.axes.empty()) mb.init_i64("axes", c.axes);
    mb.node(c.op, c.axes.empty() ? std::vector<std::string>{"x"} : std::vector<std::string>{"x", "axes"}, {"y"}, "sq");
    mb.output("y");
    expect_error([&] { (void)compile(mb); }, c.kind, {std::string("node 'sq' (") + c.op + ")", c.msg});
  }
}


// ---- several outputs: views of the last layer's output, each with its own host operators --------
TEST(CompilerOutputs, LogitsAndTheirSoftmaxAndLogSoftmax) {
  ModelBuilder mb;
  mb.input("x", {-1, 4}).init("W", {4, 3}, random_floats(12, -1, 1, 31)).init("B", {3}, random_floats(3, -1, 1, 32));
  mb.node("Gemm", {"x", "W", "B"}, {"logits"}, "fc");
  mb.node("Softmax", {"logits"}, {"probs"}, "sm");
  mb.node("Reshape", {"logits", "shape"}, {"r"}, "rs");
  mb.init_i64("shape", {-1, 3, 1});
  ModelBuilder::attr_i(mb.node("LogSoftmax", {"r"}, {"logp"}, "lsm"), "axis", 1);
  mb.output("logits").output("probs").output("logp");
  const nn::FloatNetwork net = compile(mb);
  ASSERT_EQ(net.layers.size(), 1u);
  EXPECT_EQ(net.host_op, nn::HostOp::kNone);
  EXPECT_TRUE(net.host_steps.empty());
  EXPECT_EQ(net.output_name, "logits");
  ASSERT_EQ(net.outputs.size(), 3u);
  EXPECT_EQ(net.outputs[0].name, "logits");
  EXPECT_EQ(net.outputs[1].name, "probs");
  EXPECT_EQ(net.outputs[2].name, "logp");
  for (const nn::NetOutput& o : net.outputs) {
    EXPECT_EQ(o.col, 0u);
    EXPECT_EQ(o.cols, 3u);
  }
  EXPECT_TRUE(net.outputs[0].host_steps.empty());
  ASSERT_EQ(net.outputs[1].host_steps.size(), 1u);
  EXPECT_EQ(net.outputs[1].host_steps[0].op, nn::HostOp::kSoftmax);
  ASSERT_EQ(net.outputs[2].host_steps.size(), 1u);
  EXPECT_EQ(net.outputs[2].host_steps[0].op, nn::HostOp::kLogSoftmax);
  EXPECT_EQ(net.outputs[2].host_steps[0].name, "lsm (LogSoftmax)");

  // split_outputs: the raw rows, their softmax and log-softmax (the ONNX definition, in double).
  const std::vector<float> x = random_floats(20, -1, 1, 33);
  const std::vector<float> y = nn::forward_float(net, x, 5);  // no host operator on the network itself
  const std::vector<std::vector<float>> outs = nn::split_outputs(net, y, 5);
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(outs[0], y);
  const std::vector<double> sm = reference_softmax(y, 1, 3, 1, false), lsm = reference_softmax(y, 1, 3, 1, true);
  for (size_t i = 0; i < y.size(); ++i) {
    EXPECT_NEAR(outs[1][i], sm[i], 1e-6) << i;
    EXPECT_NEAR(outs[2][i], lsm[i], 1e-5) << i;
  }
}

TEST(CompilerOutputs, EveryOutputMustBeTheLastLayersOutput) {
  // A hidden layer's output: the device returns only the last layer's.
  ModelBuilder mb;
  mb.input("x", {-1, 4}).init("W1", {4, 3}, random_floats(12, -1, 1, 34)).init("W2", {3, 2}, random_floats(6, -1, 1, 35));
  mb.node("MatMul", {"x", "W1"}, {"h"}, "mm1");
  mb.node("Relu", {"h"}, {"hr"}, "relu");
  mb.node("MatMul", {"hr", "W2"}, {"y"}, "mm2");
  mb.output("y").output("hr");
  expect_error([&] { (void)compile(mb); }, ErrorKind::kUnsupported,
               {"graph output 'hr': is not the end of the layer chain", "output of 1 of the 2 layers"});
  // The last layer before its ReLU, next to the ReLU's output.
  ModelBuilder mb2;
  mb2.input("x", {-1, 4}).init("W", {4, 3}, random_floats(12, -1, 1, 36));
  mb2.node("MatMul", {"x", "W"}, {"h"}, "mm");
  mb2.node("Relu", {"h"}, {"y"}, "relu");
  mb2.output("y").output("h");
  expect_error([&] { (void)compile(mb2); }, ErrorKind::kUnsupported,
               {"graph output 'h': is not the end of the layer chain", "before its bias or ReLU"});
  // A host operator on a hidden layer's output (a branch the device cannot return).
  ModelBuilder mb3;
  mb3.input("x", {-1, 4}).init("W1", {4, 3}, random_floats(12, -1, 1, 37)).init("W2", {3, 2}, random_floats(6, -1, 1, 38));
  mb3.node("MatMul", {"x", "W1"}, {"h"}, "mm1");
  mb3.node("MatMul", {"h", "W2"}, {"y"}, "mm2");
  mb3.node("Softmax", {"h"}, {"p"}, "sm");
  mb3.output("y").output("p");
  expect_error([&] { (void)compile(mb3); }, ErrorKind::kUnsupported, {"node 'sm' (Softmax)", "reads 'h', an earlier activation"});
}


// Two heads on one trunk: one device layer with both heads' columns, each output its columns.
TEST(CompilerOutputs, TwoHeadsOnOneTrunkAreOneLayer) {
  const std::vector<float> w0 = random_floats(12, -1, 1, 40), w1 = random_floats(6, -1, 1, 41),
                           w2 = random_floats(9, -1, 1, 42), b1 = random_floats(2, -1, 1, 43),
                           b2 = random_floats(3, -1, 1, 44);
  ModelBuilder mb;
  mb.input("x", {-1, 4}).init("W0", {4, 3}, w0).init("W1", {3, 2}, w1).init("B1", {2}, b1).init("W2", {3, 3}, w2);
  mb.init("B2", {3}, b2);
  mb.node("MatMul", {"x", "W0"}, {"h"}, "trunk");
  mb.node("Relu", {"h"}, {"t"}, "relu");
  mb.node("Gemm", {"t", "W1", "B1"}, {"a"}, "head_a");
  mb.node("Gemm", {"t", "W2", "B2"}, {"b"}, "head_b");
  mb.node("Softmax", {"b"}, {"bp"}, "sm");
  mb.output("a").output("bp");
  const nn::FloatNetwork net = compile(mb);
  ASSERT_EQ(net.layers.size(), 2u);
  EXPECT_EQ(net.layers[1].n, 5u);
  EXPECT_EQ(net.layers[1].name, "head_a (Gemm) | head_b (Gemm)");
  ASSERT_EQ(net.outputs.size(), 2u);
  EXPECT_EQ(net.outputs[0].name, "a");
  EXPECT_EQ(net.outputs[0].col, 0u);
  EXPECT_EQ(net.outputs[0].cols, 2u);
  EXPECT_TRUE(net.outputs[0].host_steps.empty());
  EXPECT_EQ(net.outputs[1].name, "bp");
  EXPECT_EQ(net.outputs[1].col, 2u);
  EXPECT_EQ(net.outputs[1].cols, 3u);
  ASSERT_EQ(net.outputs[1].host_steps.size(), 1u);
  EXPECT_EQ(net.outputs[1].host_steps[0].features(), 3u);

  const std::vector<float> x = random_floats(8, -1, 1, 45);
  const std::vector<std::vector<float>> outs = nn::split_outputs(net, nn::forward_float(net, x, 2), 2);
  for (size_t r = 0; r < 2; ++r) {
    std::vector<double> h(3), a(2), b(3);
    for (size_t j = 0; j < 3; ++j) {
      for (size_t i = 0; i < 4; ++i) h[j] += double{x[r * 4 + i]} * w0[i * 3 + j];
      h[j] = std::max(h[j], 0.0);
    }
    for (size_t j = 0; j < 2; ++j) {
      a[j] = b1[j];
      for (size_t i = 0; i < 3; ++i) a[j] += h[i] * w1[i * 2 + j];
      EXPECT_NEAR(outs[0][r * 2 + j], a[j], 1e-5);
    }
    double mx = -1e30, sum = 0;
    for (size_t j = 0; j < 3; ++j) {
      b[j] = b2[j];
      for (size_t i = 0; i < 3; ++i) b[j] += h[i] * w2[i * 3 + j];
      mx = std::max(mx, b[j]);
    }
    for (size_t j = 0; j < 3; ++j) sum += std::exp(b[j] - mx);
    for (size_t j = 0; j < 3; ++j) EXPECT_NEAR(outs[1][r * 3 + j], std::exp(b[j] - mx) / sum, 1e-5);
  }

  // Heads that disagree on the ReLU cannot share a layer; one head alone as the output is refused.
  ModelBuilder mb2;
  mb2.input("x", {-1, 4}).init("W1", {4, 2}, random_floats(8, -1, 1, 46)).init("W2", {4, 3}, random_floats(12, -1, 1, 47));
  mb2.node("MatMul", {"x", "W1"}, {"a"}, "ha");
  mb2.node("MatMul", {"x", "W2"}, {"b0"}, "hb");
  mb2.node("Relu", {"b0"}, {"b"}, "rb");
  mb2.output("a").output("b");
  expect_error([&] { (void)compile(mb2); }, ErrorKind::kUnsupported, {"the heads of one layer must agree"});
}

}  // namespace
}  // namespace tpuw::compiler
