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

// MatMul of [batch, G, M, K] by a constant B that broadcasts over the batch ([1, G, K, P], [G, K, P],
// [1, 1, K, P]): one dense layer with a block-diagonal weight; B varying along the batch axis, or a
// weight beyond the limit, is refused naming the node.
TEST(CompilerFeatureMaps, BatchedMatMulIsABlockDiagonalLayer) {
  const int64_t G = 2, M = 3, K = 4, P = 3;
  std::vector<float> x(static_cast<size_t>(2 * G * M * K));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  std::vector<float> b(static_cast<size_t>(G * K * P));
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.125f * static_cast<float>(i % 5) - 0.25f;
  for (const std::vector<int64_t>& bshape : {std::vector<int64_t>{1, G, K, P}, std::vector<int64_t>{G, K, P},
                                             std::vector<int64_t>{1, 1, K, P}}) {
    SCOPED_TRACE(bshape.size());
    const bool shared = bshape[1] == 1;  // one [K, P] for every g
    std::vector<float> bv(shared ? b.begin() : b.begin(), shared ? b.begin() + K * P : b.end());
    ModelBuilder mb;
    mb.input("a", {-1, G, M, K}).init("b", bshape, bv);
    mb.node("MatMul", {"a", "b"}, {"c"}, "mm");
    mb.output("c");
    size_t layers = 0;
    const std::vector<float> y = run(mb, x, 2, &layers);
    EXPECT_EQ(layers, 1u);
    ASSERT_EQ(y.size(), static_cast<size_t>(2 * G * M * P));
    for (int64_t n = 0; n < 2; ++n) {
      for (int64_t g = 0; g < G; ++g) {
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t p = 0; p < P; ++p) {
            double want = 0;
            for (int64_t k = 0; k < K; ++k) {
              want += double(x[static_cast<size_t>(((n * G + g) * M + m) * K + k)]) *
                      bv[static_cast<size_t>(((shared ? 0 : g) * K + k) * P + p)];
            }
            EXPECT_NEAR(y[static_cast<size_t>(((n * G + g) * M + m) * P + p)], want, 1e-6);
          }
        }
      }
    }
  }
  ModelBuilder bad;
  bad.input("a", {-1, G, M, K}).init("b", {2, G, K, P}, std::vector<float>(static_cast<size_t>(2 * G * K * P), 1.0f));
  bad.node("MatMul", {"a", "b"}, {"c"}, "mm");
  bad.output("c");
  expect_error([&] { compile_float(graph_of(bad)); }, ErrorKind::kUnsupported, {"node 'mm' (MatMul)", "batch"});
  ModelBuilder big;
  big.input("a", {-1, 64, 32, 32}).init("b", {1, 64, 32, 32}, std::vector<float>(64 * 32 * 32, 1.0f));
  big.node("MatMul", {"a", "b"}, {"c"}, "mm");
  big.output("c");
  expect_error([&] { compile_float(graph_of(big)); }, ErrorKind::kUnsupported, {"node 'mm' (MatMul)", "block-diagonal"});
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
