// What exporters write that the importer and the shape folding must take (issue 25 item 2,
// issue 29): shared initializers (read directly and through the Identity nodes torch.onnx.export
// writes for tensors it stores once), initializers also listed as graph inputs, -inf constants,
// shape arithmetic folded at compile time (Shape, Gather, Cast, Div, Mul, Add, Slice, Range,
// ConstantOfShape, Equal, Where, Squeeze, Unsqueeze, Concat), duplicate attributes refused, and
// sizes refused from the shapes before anything big is allocated.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>

#include "compiler_testlib.h"
#include "tpuw/compiler/conv.h"
#include "tpuw/compiler/conv_bf16.h"
#include "tpuw/compiler/quantize.h"

namespace tpuw::compiler {
namespace {

using testing::add_constant_i64;
using testing::expect_error;
using testing::graph_of;
using testing::ModelBuilder;
using testing::random_floats;

// Shape inference and folding to their fixed point, as optimize() runs them.
void fold(Graph& g) {
  legalize(g);
  for (;;) {
    infer_shapes(g, false);
    if (!fold_constants(g)) break;
    verify(g);
  }
}

const Value* value_named(const Graph& g, const std::string& name) {
  for (const Value& v : g.values) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

// ---- duplicate attributes (issue 29: "two alpha attributes on one Gemm are accepted") ----------

TEST(ImportAttributes, TwoAlphaOnOneGemmAreRefused) {
  ModelBuilder mb;
  mb.input("x", {-1, 4}).output("y");
  mb.init("w", {4, 3}, random_floats(12, -1, 1, 1));
  auto& n = mb.node("Gemm", {"x", "w"}, {"y"}, "fc");
  ModelBuilder::attr_f(n, "alpha", 1.0f);
  ModelBuilder::attr_f(n, "alpha", 2.0f);
  expect_error([&] { graph_of(mb); }, ErrorKind::kBadFile, {"m.onnx", "node 'fc' (Gemm)", "attribute 'alpha'", "more than once"});
  expect_error([&] { (void)mb.import(); }, ErrorKind::kBadFile, {"node 'fc' (Gemm)", "'alpha'"});
}

TEST(ImportAttributes, DuplicateConvPadsAreRefused) {
  ModelBuilder mb;
  mb.input("x", {-1, 1, 4, 4}).output("y");
  mb.init("w", {2, 1, 3, 3}, random_floats(18, -1, 1, 2));
  auto& n = mb.node("Conv", {"x", "w"}, {"y"}, "conv");
  ModelBuilder::attr_ints(n, "pads", {1, 1, 1, 1});
  ModelBuilder::attr_ints(n, "strides", {1, 1});
  ModelBuilder::attr_ints(n, "pads", {1, 1, 1, 1});  // the same value twice is still two attributes
  expect_error([&] { graph_of(mb); }, ErrorKind::kBadFile, {"node 'conv' (Conv)", "attribute 'pads'"});
}

TEST(ImportAttributes, DuplicatesOfDifferentTypesAndUnknownOperatorsAreRefused) {
  ModelBuilder mb;
  mb.input("x", {-1, 4}).output("y");
  auto& n = mb.node("Softmax", {"x"}, {"y"}, "sm");
  ModelBuilder::attr_i(n, "axis", 1);
  ModelBuilder::attr_ints(n, "axis", {1});
  expect_error([&] { graph_of(mb); }, ErrorKind::kBadFile, {"node 'sm' (Softmax)", "attribute 'axis'"});
  // The rule is the file's, not the operator's: an operator we do not run is refused for it first.
  ModelBuilder mu;
  mu.input("x", {-1, 4}).output("y");
  auto& u = mu.node("NoSuchOp", {"x"}, {"y"}, "odd");
  ModelBuilder::attr_i(u, "k", 1);
  ModelBuilder::attr_i(u, "k", 2);
  expect_error([&] { graph_of(mu); }, ErrorKind::kBadFile, {"node 'odd' (NoSuchOp)", "attribute 'k'"});
}

// ---- initializers: shared, listed as inputs, -inf ----------------------------------------------

// x [batch, 2, 6, 6] -> conv1 -> relu -> conv2 -> y; both convs read bias `b` (and conv2 through an
// Identity when `identity`), the way torch.onnx.export stores equal tensors once.
ModelBuilder shared_bias_model(bool identity) {
  ModelBuilder mb;
  mb.input("x", {-1, 2, 6, 6}).output("y");
  mb.init("w1", {4, 2, 3, 3}, random_floats(72, -0.4f, 0.4f, 3));
  mb.init("w2", {4, 4, 1, 1}, random_floats(16, -0.5f, 0.5f, 4));
  mb.init("b", {4}, {0.f, 0.f, 0.f, 0.f});
  if (identity) mb.node("Identity", {"b"}, {"b2"}, "id");
  auto& c1 = mb.node("Conv", {"x", "w1", "b"}, {"c"}, "conv1");
  ModelBuilder::attr_ints(c1, "pads", {1, 1, 1, 1});
  mb.node("Relu", {"c"}, {"r"}, "relu");
  mb.node("Conv", {"r", "w2", identity ? "b2" : "b"}, {"y"}, "conv2");
  return mb;
}

TEST(ImportInitializers, ASharedBiasCompilesDirectlyAndThroughIdentity) {
  for (const bool identity : {false, true}) {
    SCOPED_TRACE(identity ? "through Identity" : "direct");
    const std::vector<float> x = random_floats(2 * 72, -1, 1, 5);
    const Graph g = optimize(graph_of(shared_bias_model(identity)));
    ASSERT_EQ(testing::op_types(g), (std::vector<std::string>{"Conv", "Conv"}));
    for (const Node& n : g.nodes) EXPECT_TRUE(g.is_constant(n.inputs.at(2))) << n.name;
    // int8 and bf16 compile it; the int8 network runs both layers with a zero bias.
    const nn::QCnn q = compile_quantized_cnn(graph_of(shared_bias_model(identity)), x, 2);
    ASSERT_EQ(q.convs.size(), 2U);
    for (const nn::QConv2d& c : q.convs) {
      for (const int32_t b : c.bias_q) EXPECT_EQ(b, 0);
    }
    EXPECT_EQ(compile_bf16_cnn(graph_of(shared_bias_model(identity))).convs.size(), 2U);
  }
}

TEST(ImportInitializers, InitializersListedAsGraphInputsAreConstants) {
  // Older exporters list every initializer among the graph inputs too; they stay constants and
  // the one real input is the model's input.
  ModelBuilder mb;
  mb.input("x", {-1, 3});
  mb.input("w", {3, 2});
  mb.input("bias", {2});
  mb.output("y");
  mb.init("w", {3, 2}, {1, 2, 3, 4, 5, 6});
  mb.init("bias", {2}, {0.5f, -0.5f});
  mb.node("Gemm", {"x", "w", "bias"}, {"y"}, "fc");
  const Graph g = graph_of(mb);
  ASSERT_EQ(g.inputs.size(), 1U);
  EXPECT_EQ(g.value(g.inputs[0].value).name, "x");
  EXPECT_TRUE(g.is_constant(g.nodes[0].inputs[1]));
  EXPECT_TRUE(g.is_constant(g.nodes[0].inputs[2]));
  const nn::FloatNetwork net = mb.import();
  ASSERT_EQ(net.layers.size(), 1U);
  EXPECT_FLOAT_EQ(net.layers[0].b[0], 0.5f);
}

TEST(ImportInitializers, MinusInfinityConstantsKeepTheirValue) {
  // masked_fill(mask, -inf) as exported: Where(Equal(Range(0, 4, 1), 2), -inf, 0), then used.
  ModelBuilder mb;
  mb.input("x", {-1, 4}).output("y");
  mb.init("neg", {1}, {-std::numeric_limits<float>::infinity()});
  mb.init("zero", {1}, {0.0f});
  add_constant_i64(mb, "s", {0}, true);
  add_constant_i64(mb, "l", {4}, true);
  add_constant_i64(mb, "d", {1}, true);
  add_constant_i64(mb, "two", {2}, true);
  mb.node("Range", {"s", "l", "d"}, {"r"}, "range");
  mb.node("Equal", {"r", "two"}, {"eq"}, "eq");
  mb.node("Where", {"eq", "neg", "zero"}, {"mask"}, "where");
  mb.node("Add", {"x", "mask"}, {"y"}, "add");
  Graph g = graph_of(mb);
  fold(g);
  const Value* m = value_named(g, "mask");
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(m->is_constant());
  EXPECT_EQ(*m->shape, (Dims{4}));
  EXPECT_EQ(m->data->f[0], 0.0);
  EXPECT_TRUE(std::isinf(m->data->f[2]) && m->data->f[2] < 0);
  EXPECT_EQ(m->data->f[3], 0.0);
  ASSERT_EQ(g.nodes.size(), 1U);  // only the Add of the activation is left
}

// ---- shape arithmetic -------------------------------------------------------------------------

// shufflenet's channel_shuffle as torch.onnx.export writes it (opset 13, dynamic batch):
// b, c, h, w = x.size(); x.view(b, 2, c // 2, h, w).transpose(1, 2).view(b, -1, h, w).
ModelBuilder shuffle_model(int64_t c = 4, int64_t h = 3) {
  ModelBuilder mb;
  mb.input("x", {-1, c, h, h}).output("y");
  const char* const shapes[] = {"s0", "s1", "s2", "s3"};
  const char* const idx[] = {"i0", "i1", "i2", "i3"};
  const char* const dims[] = {"g0", "g1", "g2", "g3"};
  for (int64_t k = 0; k < 4; ++k) {
    const auto u = static_cast<size_t>(k);
    mb.node("Shape", {"x"}, {shapes[u]});
    add_constant_i64(mb, idx[u], {k}, true);
    mb.node("Gather", {shapes[u], idx[u]}, {dims[u]});
  }
  add_constant_i64(mb, "two", {2}, true);
  mb.node("Div", {"g1", "two"}, {"half"}, "div");
  ModelBuilder::attr_i(mb.node("Cast", {"half"}, {"half_c"}, "cast"), "to", 7);
  add_constant_i64(mb, "ax0", {0});
  mb.node("Unsqueeze", {"g0", "ax0"}, {"g0_u"});
  mb.node("Unsqueeze", {"half_c", "ax0"}, {"half_c_u"});
  mb.node("Unsqueeze", {"g2", "ax0"}, {"g2_u"});
  mb.node("Unsqueeze", {"g3", "ax0"}, {"g3_u"});
  add_constant_i64(mb, "groups", {2});
  ModelBuilder::attr_i(mb.node("Concat", {"g0_u", "groups", "half_c_u", "g2_u", "g3_u"}, {"shape5"}, "cat"), "axis", 0);
  mb.node("Reshape", {"x", "shape5"}, {"r5"}, "view");
  ModelBuilder::attr_ints(mb.node("Transpose", {"r5"}, {"t5"}, "transpose"), "perm", {0, 2, 1, 3, 4});
  add_constant_i64(mb, "m1", {-1});
  ModelBuilder::attr_i(mb.node("Concat", {"g0_u", "m1", "g2_u", "g3_u"}, {"shape4"}, "cat4"), "axis", 0);
  mb.node("Reshape", {"t5", "shape4"}, {"y"}, "view2");
  return mb;
}

TEST(ShapeFolding, ChannelShuffleShapesFoldToConstants) {
  Graph g = graph_of(shuffle_model(6, 3));
  fold(g);
  EXPECT_EQ(testing::op_types(g), (std::vector<std::string>{"Reshape", "Transpose", "Reshape"}));
  const Value* s5 = value_named(g, "shape5");
  ASSERT_TRUE(s5 != nullptr && s5->is_constant());
  EXPECT_EQ(s5->data->i, (std::vector<int64_t>{kBatch, 2, 3, 3, 3}));
  const Value* s4 = value_named(g, "shape4");
  ASSERT_TRUE(s4 != nullptr && s4->is_constant());
  EXPECT_EQ(s4->data->i, (std::vector<int64_t>{kBatch, -1, 3, 3}));
  infer_shapes(g, true);
  EXPECT_EQ(*value_named(g, "y")->shape, (Dims{kBatch, 6, 3, 3}));
}

TEST(ShapeFolding, SliceRangeConstantOfShapeSqueezeAndArithmetic) {
  ModelBuilder mb;
  mb.input("x", {-1, 8}).output("y");
  mb.init_i64("v", {10, 20, 30, 40, 50});
  add_constant_i64(mb, "st", {1});
  add_constant_i64(mb, "en", {-1});
  mb.node("Slice", {"v", "st", "en"}, {"sl"}, "slice");  // [20, 30, 40]
  add_constant_i64(mb, "c3", {3}, true);
  mb.node("Mul", {"sl", "c3"}, {"m"}, "mul");            // [60, 90, 120]
  mb.node("Sub", {"m", "sl"}, {"sb"}, "sub");            // [40, 60, 80]
  mb.node("Add", {"sb", "c3"}, {"ad"}, "add");           // [43, 63, 83]
  mb.node("Div", {"ad", "c3"}, {"dv"}, "div");           // [14, 21, 27]
  add_constant_i64(mb, "r0", {0}, true);
  add_constant_i64(mb, "r1", {6}, true);
  add_constant_i64(mb, "r2", {2}, true);
  mb.node("Range", {"r0", "r1", "r2"}, {"rg"}, "range");  // [0, 2, 4]
  add_constant_i64(mb, "shp", {2, 1});
  auto& cs = mb.node("ConstantOfShape", {"shp"}, {"ones"}, "cos");
  auto* a = cs.add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto_AttributeType_TENSOR);
  a->mutable_t()->set_data_type(onnx::TensorProto_DataType_INT64);
  a->mutable_t()->add_dims(1);
  a->mutable_t()->add_int64_data(7);
  add_constant_i64(mb, "sq_ax", {1});
  mb.node("Squeeze", {"ones", "sq_ax"}, {"sq"}, "squeeze");  // [7, 7]
  mb.node("Range", {"r0", "r2", "c3"}, {"rg2"}, "range2");   // [0]
  ModelBuilder::attr_i(mb.node("Cast", {"rg"}, {"rgf"}, "castf"), "to", 1);
  mb.node("Relu", {"x"}, {"y"}, "relu");
  Graph g = graph_of(mb);
  fold(g);
  EXPECT_EQ(value_named(g, "sl")->data->i, (std::vector<int64_t>{20, 30, 40}));
  EXPECT_EQ(value_named(g, "dv")->data->i, (std::vector<int64_t>{14, 21, 27}));
  EXPECT_EQ(value_named(g, "rg")->data->i, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(value_named(g, "sq")->data->i, (std::vector<int64_t>{7, 7}));
  EXPECT_EQ(*value_named(g, "sq")->shape, (Dims{2}));
  EXPECT_EQ(value_named(g, "rg2")->data->i, (std::vector<int64_t>{0}));
  EXPECT_EQ(value_named(g, "rgf")->data->f, (std::vector<double>{0, 2, 4}));
  EXPECT_EQ(value_named(g, "rgf")->dtype, DType::kFloat32);
  EXPECT_EQ(g.nodes.size(), 1U);
}

TEST(ShapeFolding, ArithmeticOnTheBatchStaysExactOrUnfolded) {
  // batch * 1 and batch + 0 keep the symbol; batch * 2 has no compile-time value: the Reshape by
  // it is then refused naming the node, never given a wrong shape.
  for (const int64_t k : {1, 2}) {
    SCOPED_TRACE(k);
    ModelBuilder mb;
    mb.input("x", {-1, 2, 3}).output("y");
    mb.node("Shape", {"x"}, {"s"}, "shape");
    add_constant_i64(mb, "i0", {0});
    mb.node("Gather", {"s", "i0"}, {"b"}, "gather");
    add_constant_i64(mb, "k", {k});
    mb.node("Mul", {"b", "k"}, {"bk"}, "mul");
    add_constant_i64(mb, "m1", {-1});
    ModelBuilder::attr_i(mb.node("Concat", {"bk", "m1"}, {"shp"}, "cat"), "axis", 0);
    mb.node("Reshape", {"x", "shp"}, {"y"}, "view");
    if (k == 1) {
      Graph g = optimize(graph_of(mb));
      ASSERT_EQ(g.nodes.size(), 1U);
      EXPECT_EQ(*g.value(g.nodes[0].outputs[0]).shape, (Dims{kBatch, 6}));
    } else {
      expect_error([&] { optimize(graph_of(mb)); }, ErrorKind::kUnsupported, {"node 'mul' (Mul)", "[batch] and [2]", "no value at compile time"});
    }
  }
}

TEST(ShapeFolding, HugeComputedConstantsAreRefusedBeforeAllocating) {
  // ConstantOfShape([100000, 100000]) would be 10^10 values: refused from its shape, at once.
  ModelBuilder mb;
  mb.input("x", {-1, 4}).output("y");
  add_constant_i64(mb, "shp", {100000, 100000});
  mb.node("ConstantOfShape", {"shp"}, {"big"}, "cos");
  mb.node("Relu", {"x"}, {"y"}, "relu");
  const auto t0 = std::chrono::steady_clock::now();
  expect_error([&] { optimize(graph_of(mb)); }, ErrorKind::kUnsupported, {"node 'cos' (ConstantOfShape)", "[100000, 100000]"});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  // Range(0, 1e12, 1) likewise.
  ModelBuilder mr;
  mr.input("x", {-1, 4}).output("y");
  add_constant_i64(mr, "s", {0}, true);
  add_constant_i64(mr, "l", {1000000000000}, true);
  add_constant_i64(mr, "d", {1}, true);
  mr.node("Range", {"s", "l", "d"}, {"big"}, "range");
  mr.node("Relu", {"x"}, {"y"}, "relu");
  expect_error([&] { optimize(graph_of(mr)); }, ErrorKind::kUnsupported, {"node 'range' (Range)", "above"});
}

TEST(ShapeFolding, LeftOverShapeOperatorsOnActivationsAreReported) {
  ModelBuilder mb;
  mb.input("x", {-1, 4}).output("y");
  ModelBuilder::attr_i(mb.node("Cast", {"x"}, {"y"}, "cast"), "to", 7);
  expect_error([&] { optimize(graph_of(mb)); }, ErrorKind::kUnsupported, {"node 'cast' (Cast)", "of an activation"});
}

}  // namespace
}  // namespace tpuw::compiler

namespace tpuw::compiler {
namespace {

// ---- sizes from the shapes before allocating (issue 29: "a Conv with pads=1000 takes 19 s and
// 2.6 GB before it is refused") ------------------------------------------------------------------

ModelBuilder padded_model(const std::string& op, int64_t c, int64_t h, const std::vector<int64_t>& pads) {
  ModelBuilder mb;
  mb.input("x", {-1, c, h, h}).output("y");
  std::vector<std::string> ins = {"x"};
  if (op == "Conv") {
    mb.init("w", {16, c, 3, 3}, random_floats(static_cast<size_t>(16 * c * 9), -0.3f, 0.3f, 20));
    ins.push_back("w");
  }
  auto& n = mb.node(op, ins, {"y"}, "big");
  ModelBuilder::attr_ints(n, "kernel_shape", {3, 3});
  ModelBuilder::attr_ints(n, "pads", pads);
  return mb;
}

void expect_refused_at_once(const ModelBuilder& mb, int64_t c, int64_t h) {
  const std::vector<float> x = random_floats(static_cast<size_t>(10 * c * h * h), -1, 1, 21);
  const auto t0 = std::chrono::steady_clock::now();
  expect_error([&] { compile_quantized_cnn(graph_of(mb), x, 10); }, ErrorKind::kUnsupported,
               {"node 'big'", "values", "above the 16777216", "spatial tiling is not implemented"});
  expect_error([&] { compile_bf16_cnn(graph_of(mb)); }, ErrorKind::kUnsupported, {"node 'big'", "above the 16777216"});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

TEST(ShapesBeforeAllocating, ConvWithPads1000IsRefusedFromItsShape) {
  expect_refused_at_once(padded_model("Conv", 16, 28, {1000, 1000, 1000, 1000}), 16, 28);  // the case
}

TEST(ShapesBeforeAllocating, AsymmetricPadsOnOneChannelAreRefusedFromTheShape) {
  expect_refused_at_once(padded_model("Conv", 1, 8, {0, 0, 5000, 5000}), 1, 8);
}

TEST(ShapesBeforeAllocating, APooledMapAboveTheLimitIsRefusedToo) {
  expect_refused_at_once(padded_model("AveragePool", 4, 8, {2100, 2100, 2100, 2100}), 4, 8);
  // A layer far larger than a device's UB but below the limit still compiles (the runtime plans
  // it and reports what does not fit).
  const std::vector<float> x = random_floats(16 * 28 * 28, -1, 1, 22);
  EXPECT_EQ(compile_quantized_cnn(graph_of(padded_model("Conv", 16, 28, {100, 100, 100, 100})), x, 1).convs.size(), 1U);
}

}  // namespace
}  // namespace tpuw::compiler
