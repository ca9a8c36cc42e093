// Functions in a CNN's dense head: a Sigmoid / Tanh / LeakyRelu / HardSwish / ... after a Gemm
// that follows the convolutions joins that dense layer (DenseLayer::act).
//   bf16: VECTOR ops on the layer's finished fp32 strips (run_network_bf16's GEMM finish hook):
//         device == forward_cnn_bf16_host bit for bit, within 2% of the float interpreter.
//   int8: the layer's ACTIVATE lookup table (the head's last layer then gets an identity output
//         layer, as on the MLP path): ref and rtl == forward_cnn_int_raw bit for bit, within 3% of
//         the float interpreter's largest magnitude (2.2% at worst here).
// A second function on one dense layer is refused naming the node.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <iostream>

#include "compiler_testlib.h"
#include "tpuw/compiler/cnn_training.h"
#include "tpuw/compiler/conv.h"
#include "tpuw/compiler/conv_bf16.h"
#include "tpuw/compiler/quantize.h"
#include "tpuw/device.h"
#include "tpuw/nn/quantize.h"
#include "tpuw/runtime/conv.h"
#include "tpuw/runtime/conv_bf16.h"

namespace tpuw::compiler {
namespace {

using testing::expect_error;
using testing::graph_of;
using testing::ModelBuilder;
using testing::random_floats;

/// x [2, 6, 6] -> Conv 3x3 pad 1 (4) -> Relu -> Flatten -> Gemm (144 -> 24) [-> Relu] -> f1
/// [-> Gemm (24 -> 10) -> f2] [-> Softmax].
ModelBuilder head_model(const std::string& f1, bool relu, const std::string& f2, bool softmax) {
  uint32_t seed = 7;
  ModelBuilder mb;
  mb.input("x", {-1, 2, 6, 6});
  mb.init("c.w", {4, 2, 3, 3}, random_floats(72, -0.5f, 0.5f, seed++));
  mb.init("c.b", {4}, random_floats(4, -0.1f, 0.1f, seed++));
  auto& c = mb.node("Conv", {"x", "c.w", "c.b"}, {"c"}, "conv");
  auto* pads = c.add_attribute();
  pads->set_name("pads");
  pads->set_type(onnx::AttributeProto_AttributeType_INTS);
  for (int i = 0; i < 4; ++i) pads->add_ints(1);
  mb.node("Relu", {"c"}, {"r"}, "relu");
  auto& fl = mb.node("Flatten", {"r"}, {"f"}, "flatten");
  ModelBuilder::attr_i(fl, "axis", 1);
  mb.init("fc1.w", {144, 24}, random_floats(144 * 24, -0.2f, 0.2f, seed++));
  mb.init("fc1.b", {24}, random_floats(24, -0.3f, 0.3f, seed++));
  mb.node("MatMul", {"f", "fc1.w"}, {"m1"}, "fc1");
  mb.node("Add", {"m1", "fc1.b"}, {"h1"}, "fc1_bias");
  std::string cur = "h1";
  if (relu) {
    mb.node("Relu", {cur}, {"h1r"}, "fc1_relu");
    cur = "h1r";
  }
  const auto fn = [&](const std::string& op, const std::string& name) {
    auto& n = mb.node(op, {cur}, {name + ".y"}, name);
    if (op == "LeakyRelu") {
      auto* a = n.add_attribute();
      a->set_name("alpha");
      a->set_type(onnx::AttributeProto_AttributeType_FLOAT);
      a->set_f(0.1f);
    }
    cur = name + ".y";
  };
  fn(f1, "act1");
  if (!f2.empty()) {
    mb.init("fc2.w", {24, 10}, random_floats(240, -0.4f, 0.4f, seed++));
    mb.init("fc2.b", {10}, random_floats(10, -0.2f, 0.2f, seed++));
    mb.node("MatMul", {cur, "fc2.w"}, {"m2"}, "fc2");
    mb.node("Add", {"m2", "fc2.b"}, {"h2"}, "fc2_bias");
    cur = "h2";
    fn(f2, "act2");
  }
  if (softmax) {
    mb.node("Softmax", {cur}, {"y"}, "softmax");
  } else {
    mb.node("Identity", {cur}, {"y"}, "out");
  }
  mb.output("y");
  return mb;
}

void expect_head(const ModelBuilder& mb, size_t dense_layers) {
  const Graph g = graph_of(mb);
  const Bf16Cnn net = compile_bf16_cnn(g);
  ASSERT_EQ(net.head.layers.size(), dense_layers);
  for (const nn::DenseLayer& l : net.head.layers) EXPECT_FALSE(l.act.none()) << l.name;
  const uint64_t batch = 5;
  const std::vector<float> x = random_floats(batch * 72, -1.0f, 1.0f, 3);
  Device dev = Device::open("ref", BackendConfig{});
  const runtime::CnnBf16RunResult r = runtime::run_cnn_bf16(dev, net, x, batch);
  const std::vector<float> want = runtime::forward_cnn_bf16_host(net, x, batch, 16);
  ASSERT_EQ(r.output.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(r.output[i]), std::bit_cast<uint32_t>(want[i])) << "output " << i;
  }
  EXPECT_GT(r.head.cycles, 0u);
  std::vector<float> y = r.output;
  if (net.head.host_op == nn::HostOp::kSoftmax) nn::softmax_rows(y, net.head.output_features());
  const Graph og = optimize(g);
  const auto t = interpret_float(og, x, batch);
  const std::vector<float>& yf = t[static_cast<size_t>(og.outputs[0].value)];
  ASSERT_EQ(yf.size(), y.size());
  double ymax = 0, worst = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    ymax = std::max(ymax, std::fabs(static_cast<double>(yf[i])));
    worst = std::max(worst, std::fabs(static_cast<double>(y[i]) - yf[i]));
  }
  EXPECT_GT(ymax, 0.05);
  EXPECT_LE(worst, 0.02 * ymax) << "largest error " << worst << " of " << ymax;
}

// The int8 CNN (calibrated on x): ref, and rtl when built, equal the CPU integer model bit for bit;
// the dequantized output (then the host Softmax) within 3% of the float interpreter's largest
// magnitude. Returns how many dense layers have a lookup table.
size_t expect_head_int8(const ModelBuilder& mb, size_t dense_layers) {
  const Graph g = graph_of(mb);
  const uint64_t batch = 6;
  const std::vector<float> x = random_floats(batch * 72, -1.0f, 1.0f, 3);
  const nn::QCnn q = compile_quantized_cnn(g, x, batch);
  EXPECT_EQ(q.head.layers.size(), dense_layers);
  size_t tables = 0;
  for (const nn::QLayer& l : q.head.layers) tables += l.lut.empty() ? 0 : 1;
  std::vector<int8_t> xq(x.size());
  for (size_t i = 0; i < x.size(); ++i) xq[i] = nn::quantize_value(x[i], q.input_scale);
  const std::vector<int32_t> raw = nn::forward_cnn_int_raw(q, xq, batch);
  std::vector<std::string> backends = {"ref"};
  if (!backend_array_sizes("rtl").empty()) backends.emplace_back("rtl");
  for (const std::string& be : backends) {
    Device dev = Device::open(be, BackendConfig{});
    const runtime::CnnRunResult r = runtime::run_cnn(dev, q, xq, batch);
    EXPECT_EQ(r.output_i32, raw) << be;
    EXPECT_GT(r.head.cycles, 0u);
  }
  const std::vector<float> y = nn::dequantize_output(q.head, raw, batch);  // with the host Softmax
  const Graph og = optimize(g);
  const auto t = interpret_float(og, x, batch);
  const std::vector<float>& yf = t[static_cast<size_t>(og.outputs[0].value)];
  EXPECT_EQ(yf.size(), y.size());
  double ymax = 0, worst = 0;
  for (size_t i = 0; i < y.size() && i < yf.size(); ++i) {
    ymax = std::max(ymax, std::fabs(static_cast<double>(yf[i])));
    worst = std::max(worst, std::fabs(static_cast<double>(y[i]) - yf[i]));
  }
  EXPECT_GT(ymax, 0.05);
  EXPECT_LE(worst, 0.03 * ymax) << "largest error " << worst << " of " << ymax;
  std::cout << "int8 head: " << tables << " table(s), largest error " << worst / ymax << " of max |y|, "
            << backends.size() << " backend(s)\n";
  return tables;
}

TEST(CnnHeadInt8, FunctionAfterTheLastDenseLayer) {
  // The last dense layer's table needs an int8 output: an identity layer (int32 output) follows.
  for (const char* f : {"Sigmoid", "Tanh", "LeakyRelu", "HardSwish", "HardSigmoid", "Erf"}) {
    SCOPED_TRACE(f);
    EXPECT_EQ(expect_head_int8(head_model(f, false, "", false), 2), 1u);
  }
}

TEST(CnnHeadInt8, FunctionAfterAReluAndBetweenDenseLayers) {
  EXPECT_EQ(expect_head_int8(head_model("Tanh", true, "Sigmoid", false), 3), 2u);
  EXPECT_EQ(expect_head_int8(head_model("Sigmoid", false, "Tanh", true), 3), 2u);  // then Softmax on the host
  EXPECT_EQ(expect_head_int8(head_model("HardSwish", true, "", true), 2), 1u);
}

TEST(CnnHeadInt8, SecondFunctionOnOneDenseLayerIsRefused) {
  ModelBuilder m;  // Conv -> Flatten -> MatMul -> Sigmoid -> Tanh
  uint32_t seed = 1;
  m.input("x", {-1, 1, 4, 4});
  m.init("w", {2, 1, 3, 3}, random_floats(18, -0.5f, 0.5f, seed++));
  m.node("Conv", {"x", "w"}, {"c"}, "conv");
  auto& fl = m.node("Flatten", {"c"}, {"f"}, "flatten");
  ModelBuilder::attr_i(fl, "axis", 1);
  m.init("fc.w", {8, 3}, random_floats(24, -0.5f, 0.5f, seed++));
  m.node("MatMul", {"f", "fc.w"}, {"m"}, "fc");
  m.node("Sigmoid", {"m"}, {"s"}, "sig");
  m.node("Tanh", {"s"}, {"y"}, "tanh");
  m.output("y");
  const std::vector<float> x = random_floats(2 * 16, -1.0f, 1.0f, 5);
  expect_error([&] { (void)compile_quantized_cnn(graph_of(m), x, 2); }, ErrorKind::kUnsupported,
               {"node 'tanh' (Tanh)", "follows another function (sig", "dense layer"});
}

TEST(CnnHeadBf16, FunctionAfterTheLastDenseLayer) {
  for (const char* f : {"Sigmoid", "Tanh", "LeakyRelu", "HardSwish", "HardSigmoid", "Erf"}) {
    SCOPED_TRACE(f);
    expect_head(head_model(f, false, "", false), 1);
  }
}

TEST(CnnHeadBf16, FunctionAfterAReluAndBetweenDenseLayers) {
  expect_head(head_model("Tanh", true, "Sigmoid", false), 2);
  expect_head(head_model("Sigmoid", false, "Tanh", true), 2);  // then Softmax on the host
}

TEST(CnnHeadBf16, SecondFunctionOnOneDenseLayerIsRefused) {
  ModelBuilder m2;  // Conv -> Flatten -> MatMul -> Sigmoid -> Tanh
  {
    uint32_t seed = 1;
    m2.input("x", {-1, 1, 4, 4});
    m2.init("w", {2, 1, 3, 3}, random_floats(18, -0.5f, 0.5f, seed++));
    m2.node("Conv", {"x", "w"}, {"c"}, "conv");
    auto& fl = m2.node("Flatten", {"c"}, {"f"}, "flatten");
    ModelBuilder::attr_i(fl, "axis", 1);
    m2.init("fc.w", {8, 3}, random_floats(24, -0.5f, 0.5f, seed++));
    m2.node("MatMul", {"f", "fc.w"}, {"m"}, "fc");
    m2.node("Sigmoid", {"m"}, {"s"}, "sig");
    m2.node("Tanh", {"s"}, {"y"}, "tanh");
    m2.output("y");
  }
  expect_error([&] { (void)compile_bf16_cnn(graph_of(m2)); }, ErrorKind::kUnsupported,
               {"node 'tanh' (Tanh)", "follows another function (sig", "dense layer"});
}

}  // namespace
}  // namespace tpuw::compiler

namespace tpuw::compiler {
namespace {

TEST(CnnHeadBf16, TrainingRefusesAHeadFunction) {
  testing::expect_error([] { (void)build_cnn_training_model(testing::graph_of(head_model("Sigmoid", false, "", false))); },
                        ErrorKind::kUnsupported, {"cannot be trained", "act1"});
}

}  // namespace
}  // namespace tpuw::compiler
