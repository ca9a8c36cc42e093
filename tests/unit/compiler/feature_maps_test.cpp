// Per-row affine operators as dense layers (tpuw/compiler/feature_maps.h): Add/Sub/Mul/Div by a
// constant, BatchNormalization, Transpose keeping the batch, Relu on the input; folded into the
// Dense before them or run as their own layer; the refusals; a model with no matrix operator.
#include <gtest/gtest.h>

#include <cmath>

#include "compiler_testlib.h"
#include "tpuw/compiler/feature_maps.h"
#include "tpuw/compiler/passes.h"
#include "tpuw/nn/float_network.h"

namespace tpuw::compiler {
namespace {

using testing::expect_error;
using testing::graph_of;
using testing::ModelBuilder;

std::vector<float> run(const ModelBuilder& mb, const std::vector<float>& x, uint64_t rows, size_t* layers = nullptr) {
  const nn::FloatNetwork net = compile_float(graph_of(mb));
  if (layers != nullptr) *layers = net.layers.size();
  return nn::forward_float(net, x, rows);
}

TEST(CompilerFeatureMaps, ElementwiseByABroadcastConstantIsOneDiagonalLayer) {
  const std::vector<float> x{1, -2, 3, 4, 5, -6, 0.5f, 8, -1, 2, 3, 4};  // [2, 2, 3]
  const std::vector<float> c{2, -4, 0.5f};                               // [3], broadcast over [2, 3]
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    ModelBuilder mb;
    mb.input("x", {-1, 2, 3}).init("c", {3}, c);
    mb.node(op, {"x", "c"}, {"y"}, "e");
    mb.output("y");
    size_t layers = 0;
    const std::vector<float> y = run(mb, x, 2, &layers);
    EXPECT_EQ(layers, 1u) << op;
    ASSERT_EQ(y.size(), x.size()) << op;
    for (size_t i = 0; i < x.size(); ++i) {
      const float cv = c[i % 3];
      const float want = op[0] == 'A' ? x[i] + cv : op[0] == 'S' ? x[i] - cv : op[0] == 'M' ? x[i] * cv : x[i] / cv;
      EXPECT_FLOAT_EQ(y[i], want) << op << " " << i;
    }
  }
  // The constant first: c - x.
  ModelBuilder mb;
  mb.input("x", {-1, 3}).init("c", {1, 3}, c);
  mb.node("Sub", {"c", "x"}, {"y"}, "e");
  mb.output("y");
  const std::vector<float> y = run(mb, {1, 2, 3}, 1);
  EXPECT_EQ(y, (std::vector<float>{1, -6, -2.5f}));
}

TEST(CompilerFeatureMaps, BatchNormAfterMatMulFoldsIntoItsLayer) {
  ModelBuilder mb;
  mb.input("x", {-1, 2}).init("W", {2, 2}, {1, 2, 3, 4});
  mb.init("scale", {2}, {2, 0.5f}).init("B", {2}, {1, -1}).init("mean", {2}, {0.5f, 1}).init("var", {2}, {3, 0.25f});
  mb.node("MatMul", {"x", "W"}, {"h"}, "mm");
  auto& bn = mb.node("BatchNormalization", {"h", "scale", "B", "mean", "var"}, {"y"}, "bn");
  ModelBuilder::attr_f(bn, "epsilon", 1.0f);
  mb.output("y");
  size_t layers = 0;
  const std::vector<float> y = run(mb, {1, 1}, 1, &layers);
  EXPECT_EQ(layers, 1u);
  // h = [4, 6]; y = scale * (h - mean) / sqrt(var + eps) + B
  EXPECT_NEAR(y[0], 2 * (4 - 0.5) / 2.0 + 1, 1e-5);
  EXPECT_NEAR(y[1], 0.5 * (6 - 1) / std::sqrt(1.25) - 1, 1e-5);
}

TEST(CompilerFeatureMaps, StandaloneBatchNormIsPerChannel) {
  ModelBuilder mb;
  mb.input("x", {-1, 2, 1, 2});
  mb.init("scale", {2}, {1, 2}).init("B", {2}, {0, 1}).init("mean", {2}, {0, 1}).init("var", {2}, {1, 4});
  auto& bn = mb.node("BatchNormalization", {"x", "scale", "B", "mean", "var"}, {"y"}, "bn");
  ModelBuilder::attr_f(bn, "epsilon", 0.0f);
  mb.output("y");
  const std::vector<float> y = run(mb, {1, 2, 3, 5}, 1);
  EXPECT_EQ(y, (std::vector<float>{1, 2, 3, 5}));  // channel 1: 2 * (x - 1) / 2 + 1 = x
  const std::vector<float> y2 = run(mb, {1, 2, 5, 9}, 1);
  EXPECT_EQ(y2, (std::vector<float>{1, 2, 5, 9}));
}

TEST(CompilerFeatureMaps, TransposeKeepingTheBatchIsAPermutation) {
  ModelBuilder mb;
  mb.input("x", {-1, 2, 3});
  auto& t = mb.node("Transpose", {"x"}, {"y"}, "t");
  auto* a = t.add_attribute();
  a->set_name("perm");
  a->set_type(onnx::AttributeProto_AttributeType_INTS);
  for (const int64_t p : {0, 2, 1}) a->add_ints(p);
  mb.output("y");
  const std::vector<float> y = run(mb, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 2);
  EXPECT_EQ(y, (std::vector<float>{1, 4, 2, 5, 3, 6, 7, 10, 8, 11, 9, 12}));
}

TEST(CompilerFeatureMaps, ReluOnTheInputAndAModelWithoutAMatrixOperator) {
  ModelBuilder mb;
  mb.input("x", {-1, 3});
  mb.node("Relu", {"x"}, {"y"}, "r");
  mb.output("y");
  EXPECT_EQ(run(mb, {-1, 2, -3}, 1), (std::vector<float>{0, 2, 0}));
  ModelBuilder mf;
  mf.input("x", {-1, 2, 2});
  mf.node("Flatten", {"x"}, {"y"}, "f");
  mf.output("y");
  size_t layers = 0;
  EXPECT_EQ(run(mf, {1, -2, 3, 4}, 1, &layers), (std::vector<float>{1, -2, 3, 4}));
  EXPECT_EQ(layers, 1u);  // the identity layer
}

TEST(CompilerFeatureMaps, WhatCannotRunIsRefusedNamingTheNode) {
  ModelBuilder m1;
  m1.input("x", {-1, 3}).init("c", {2, 3}, {1, 2, 3, 4, 5, 6});
  m1.node("Mul", {"x", "c"}, {"y"}, "m");
  m1.output("y");
  expect_error([&] { compile_float(graph_of(m1)); }, ErrorKind::kUnsupported,
               {"node 'm' (Mul)", "must not vary along the batch axis"});
  ModelBuilder m2;
  m2.input("x", {-1, 3}).init("c", {3}, {1, 2, 3});
  m2.node("Div", {"c", "x"}, {"y"}, "d");
  m2.output("y");
  expect_error([&] { compile_float(graph_of(m2)); }, ErrorKind::kUnsupported, {"node 'd' (Div)", "division of a constant"});
  ModelBuilder m3;
  m3.input("x", {-1, 3}).init("c", {3}, {1, 0, 3});
  m3.node("Div", {"x", "c"}, {"y"}, "d");
  m3.output("y");
  expect_error([&] { compile_float(graph_of(m3)); }, ErrorKind::kUnsupported, {"node 'd' (Div)", "has a zero"});
  ModelBuilder m4;
  m4.input("x", {-1, 2, 3});
  auto& t = m4.node("Transpose", {"x"}, {"y"}, "t");
  (void)t;
  m4.output("y");  // default perm reverses: moves the batch
  expect_error([&] { compile_float(graph_of(m4)); }, ErrorKind::kUnsupported, {"node 't' (Transpose)", "moves the batch axis"});
  ModelBuilder m5;
  m5.input("x", {-1, 2});
  m5.init("s", {2}, {1, 1}).init("b", {2}, {0, 0}).init("m", {2}, {0, 0}).init("v", {2}, {1, 1});
  auto& bn = m5.node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y"}, "bn");
  ModelBuilder::attr_i(bn, "training_mode", 1);
  m5.output("y");
  expect_error([&] { compile_float(graph_of(m5)); }, ErrorKind::kUnsupported, {"node 'bn' (BatchNormalization)", "training_mode=1"});
  ModelBuilder m6;  // a standalone map over more than kMaxFeatureMapFeatures features
  m6.input("x", {-1, kMaxFeatureMapFeatures + 1}).init("c", {1}, {2});
  m6.node("Mul", {"x", "c"}, {"y"}, "big");
  m6.output("y");
  expect_error([&] { compile_float(graph_of(m6)); }, ErrorKind::kUnsupported, {"node 'big' (Mul)", "folded into it"});
}

}  // namespace
}  // namespace tpuw::compiler
