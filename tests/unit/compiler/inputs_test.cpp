// Several graph inputs (compiler/inputs.cpp merge_graph_inputs; quantize.cpp's product scale per
// column): the lowering to one input row, the weights the quantizer builds, the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "compiler_testlib.h"
#include "tpuw/nn/onnx_import.h"
#include "tpuw/nn/quantize.h"

namespace tpuw::compiler::testing {
namespace {

// x [batch, 3] and z [batch, 2] -> Concat(z, x) -> Gemm(5 -> 4) -> Relu -> Gemm(4 -> 2).
ModelBuilder concat_model() {
  ModelBuilder mb;
  mb.input("x", {-1, 3}).input("z", {-1, 2});
  mb.init("W1", {5, 4}, random_floats(20, -1, 1, 301)).init("B1", {4}, random_floats(4, -1, 1, 302));
  mb.init("W2", {4, 2}, random_floats(8, -1, 1, 303)).init("B2", {2}, random_floats(2, -1, 1, 304));
  ModelBuilder::attr_i(mb.node("Concat", {"z", "x"}, {"c"}, "cat"), "axis", 1);
  mb.node("MatMul", {"c", "W1"}, {"h0"}, "fc1");
  mb.node("Add", {"h0", "B1"}, {"h1"}, "fc1_bias");
  mb.node("Relu", {"h1"}, {"h"}, "relu");
  mb.node("MatMul", {"h", "W2"}, {"y0"}, "fc2");
  mb.node("Add", {"y0", "B2"}, {"y"}, "fc2_bias");
  mb.output("y");
  return mb;
}

// a [batch, 2] -> Gemm(2 -> 3), b [batch, 4] -> Gemm(4 -> 3) with weights / 100, Add, Relu, Gemm(3 -> 2).
ModelBuilder add_model() {
  ModelBuilder mb;
  std::vector<float> wb = random_floats(12, -1, 1, 312);
  for (float& v : wb) v *= 0.01f;
  mb.input("a", {-1, 2}).input("b", {-1, 4});
  mb.init("Wa", {2, 3}, random_floats(6, -1, 1, 311)).init("Ba", {3}, random_floats(3, -1, 1, 313));
  mb.init("Wb", {4, 3}, wb).init("Bb", {3}, random_floats(3, -1, 1, 314));
  mb.init("W2", {3, 2}, random_floats(6, -1, 1, 315)).init("B2", {2}, random_floats(2, -1, 1, 316));
  mb.node("Gemm", {"a", "Wa", "Ba"}, {"ya"}, "fa");
  mb.node("Gemm", {"b", "Wb", "Bb"}, {"yb"}, "fb");
  mb.node("Add", {"ya", "yb"}, {"s"}, "add");
  mb.node("Relu", {"s"}, {"h"}, "relu");
  mb.node("Gemm", {"h", "W2", "B2"}, {"y"}, "fc");
  mb.output("y");
  return mb;
}

TEST(CompilerInputs, ConcatOfInputsIsTheInputRowInTheConcatsOrder) {
  const nn::FloatNetwork net = concat_model().import();
  ASSERT_EQ(net.input_parts.size(), 2u);
  EXPECT_EQ(net.input_parts[0].name, "z");
  EXPECT_EQ(net.input_parts[0].features, 2u);
  EXPECT_EQ(net.input_parts[1].name, "x");
  EXPECT_EQ(net.input_parts[1].features, 3u);
  EXPECT_EQ(net.input_parts[1].shape, (std::vector<int64_t>{-1, 3}));
  EXPECT_EQ(net.input_name, "z+x");
  EXPECT_EQ(net.input_features, 5u);
  ASSERT_EQ(net.layers.size(), 2u);
  EXPECT_EQ(net.layers[0].k, 5u);
  EXPECT_TRUE(net.layers[0].relu);
  // The float reference on the row [z | x] is the model's: fc1 over the concatenation.
  const std::vector<float> w1 = random_floats(20, -1, 1, 301), b1 = random_floats(4, -1, 1, 302);
  EXPECT_EQ(net.layers[0].w, w1);
  EXPECT_EQ(net.layers[0].b, b1);
}

TEST(CompilerInputs, AddOfTwoInputsGemmsIsOneLayerWithStackedWeights) {
  const nn::FloatNetwork net = add_model().import();
  ASSERT_EQ(net.input_parts.size(), 2u);
  EXPECT_EQ(net.input_parts[0].name, "a");
  EXPECT_EQ(net.input_parts[1].name, "b");
  ASSERT_EQ(net.layers.size(), 2u);
  const nn::DenseLayer& l = net.layers[0];
  EXPECT_EQ(l.k, 6u);
  EXPECT_EQ(l.n, 3u);
  EXPECT_TRUE(l.relu);
  EXPECT_NE(l.name.find("fa (Gemm) + fb (Gemm) + add (Add)"), std::string::npos) << l.name;
  std::vector<float> wb = random_floats(12, -1, 1, 312);
  for (float& v : wb) v *= 0.01f;
  std::vector<float> w = random_floats(6, -1, 1, 311);
  w.insert(w.end(), wb.begin(), wb.end());
  EXPECT_EQ(l.w, w);
  const std::vector<float> ba = random_floats(3, -1, 1, 313), bb = random_floats(3, -1, 1, 314);
  for (size_t j = 0; j < 3; ++j) EXPECT_EQ(l.b[j], ba[j] + bb[j]);
}

TEST(CompilerInputs, Int8ScalesPerInputReconciledInTheFirstLayersWeights) {
  const nn::FloatNetwork net = add_model().import();
  // 40 rows: a in [-1, 1], b in [-100, 100] (100x the scale).
  const uint64_t rows = 40;
  const std::vector<float> a = random_floats(rows * 2, -1, 1, 320), b0 = random_floats(rows * 4, -1, 1, 321);
  std::vector<float> x;
  float ma = 0, mb = 0;
  for (uint64_t r = 0; r < rows; ++r) {
    for (int k = 0; k < 2; ++k) {
      x.push_back(a[r * 2 + k]);
      ma = std::max(ma, std::fabs(a[r * 2 + k]));
    }
    for (int k = 0; k < 4; ++k) {
      x.push_back(100.0f * b0[r * 4 + k]);
      mb = std::max(mb, std::fabs(100.0f * b0[r * 4 + k]));
    }
  }
  const nn::QNetwork q = nn::quantize(net, x, rows);
  ASSERT_EQ(q.input_part_scales.size(), 2u);
  EXPECT_EQ(q.input_part_features, (std::vector<uint32_t>{2, 4}));
  EXPECT_FLOAT_EQ(q.input_part_scales[0], ma / 127.0f);
  EXPECT_FLOAT_EQ(q.input_part_scales[1], mb / 127.0f);
  // Every column's weight blocks share one product scale p_j: the larger block has the full range,
  // and w_q[r, j] = round(W[r, j] s(r) / p_j).
  const nn::QLayer& l = q.layers[0];
  for (uint32_t j = 0; j < l.n; ++j) {
    double p = 0;
    for (uint32_t r = 0; r < l.k; ++r) {
      p = std::max(p, std::fabs(static_cast<double>(net.layers[0].w[r * l.n + j])) * q.input_part_scales[r < 2 ? 0 : 1]);
    }
    p /= 127.0;
    int m = 0;
    for (uint32_t r = 0; r < l.k; ++r) {
      const double want = std::round(static_cast<double>(net.layers[0].w[r * l.n + j]) * q.input_part_scales[r < 2 ? 0 : 1] / p);
      EXPECT_EQ(l.w_q[r * l.n + j], static_cast<int8_t>(want)) << r << "," << j;
      m = std::max(m, std::abs(static_cast<int>(l.w_q[r * l.n + j])));
    }
    EXPECT_EQ(m, 127);
    EXPECT_EQ(l.bias_q[j], static_cast<int32_t>(std::round(static_cast<double>(net.layers[0].b[j]) / p)));
  }
  // Each input quantized with its own scale, and the integer model near the float one.
  const std::vector<int8_t> xq = nn::quantize_input(q, x);
  EXPECT_EQ(xq[0], static_cast<int8_t>(std::round(x[0] / q.input_part_scales[0])));
  EXPECT_EQ(xq[2], static_cast<int8_t>(std::round(x[2] / q.input_part_scales[1])));
  const std::vector<float> yf = nn::forward_float(net, x, rows), yi = nn::forward_int(q, x, rows);
  float err = 0, top = 0;
  for (size_t i = 0; i < yf.size(); ++i) {
    err = std::max(err, std::fabs(yf[i] - yi[i]));
    top = std::max(top, std::fabs(yf[i]));
  }
  EXPECT_LE(err, 0.03f * top);
}

TEST(CompilerInputs, OneInputKeepsItsScale) {
  ModelBuilder mb;
  mb.input("x", {-1, 3}).init("W", {3, 2}, random_floats(6, -1, 1, 330));
  mb.node("MatMul", {"x", "W"}, {"y"});
  mb.output("y");
  const nn::FloatNetwork net = mb.import();
  EXPECT_TRUE(net.input_parts.empty());
  const nn::QNetwork q = nn::quantize(net, random_floats(12, -1, 1, 331), 4);
  EXPECT_TRUE(q.input_part_scales.empty());
}

TEST(CompilerInputs, Refusals) {
  {  // inputs that meet with no Gemm of each
    ModelBuilder mb;
    mb.input("x", {-1, 2}).input("z", {-1, 2});
    mb.node("Add", {"x", "z"}, {"y"});
    mb.output("y");
    expect_error([&] { (void)mb.import(); }, ErrorKind::kUnsupported,
                 {"the graph has 2 inputs ('x', 'z')", "a Concat along the features or in an Add of a Gemm/MatMul"});
  }
  {  // a Concat along the batch
    ModelBuilder mb;
    mb.input("x", {-1, 2}).input("z", {-1, 2}).init("W", {2, 2}, random_floats(4, -1, 1, 340));
    ModelBuilder::attr_i(mb.node("Concat", {"x", "z"}, {"c"}, "cat"), "axis", 0);
    mb.node("MatMul", {"c", "W"}, {"y"});
    mb.output("y");
    expect_error([&] { (void)mb.import(); }, ErrorKind::kUnsupported, {"node 'cat' (Concat)", "Concat of an activation is not supported"});
  }
  {  // an image input with a second input
    ModelBuilder mb;
    mb.input("img", {-1, 1, 2, 2}).input("v", {-1, 3});
    mb.node("Relu", {"img"}, {"y"});
    mb.output("y");
    expect_error([&] { (void)mb.import(); }, ErrorKind::kUnsupported,
                 {"graph input 'img' has shape [batch, 1, 2, 2]", "each as [batch, features]"});
  }
  {  // a Gemm with its own ReLU before the Add
    ModelBuilder mb = add_model();
    mb.graph().mutable_node(0)->set_output(0, "ya0");
    mb.node("Relu", {"ya0"}, {"ya"}, "ra");
    // keep topological order: move the Relu right after fa
    auto* nodes = mb.graph().mutable_node();
    for (int k = nodes->size() - 1; k > 1; --k) nodes->SwapElements(k, k - 1);
    expect_error([&] { (void)mb.import(); }, ErrorKind::kUnsupported, {"has its own activation"});
  }
}

}  // namespace
}  // namespace tpuw::compiler::testing
