// Each pass on its own (legalize, shape inference, constant folding, identity/Dropout removal,
// dead-code removal, dense fusion, lowering), then the pipeline on PyTorch's
// x.view(x.size(0), -1) pattern.
#include <gtest/gtest.h>

#include <cstring>

#include "compiler_testlib.h"
#include "tpuw/nn/quantize.h"

namespace tpuw::compiler {
namespace {

using testing::add_bool_init;
using testing::add_constant_i64;
using testing::expect_error;
using testing::graph_of;
using testing::ModelBuilder;
using testing::node_named;
using testing::op_types;
using testing::random_floats;

// Shape inference and folding to their fixed point, as the pipeline runs them.
void fold_all(Graph& g) {
  legalize(g);
  do infer_shapes(g, false);
  while (fold_constants(g));
  verify(g);
}

// ---- legalize -----------------------------------------------------------------------------------
TEST(CompilerLegalize, ReportsOperatorDomainAttributeAndArity) {
  ModelBuilder mb;
  mb.input("x", {-1, 4});
  mb.node("Relu", {"x"}, {"y"}, "r").set_domain("com.microsoft");
  mb.output("y");
  expect_error([&] { legalize(graph_of(mb)); }, ErrorKind::kUnsupported,
               {"node 'r' (Relu): operator domain 'com.microsoft' is not supported"});

  ModelBuilder mb2;
  mb2.input("x", {-1, 4});
  ModelBuilder::attr_i(mb2.node("Flatten", {"x"}, {"y"}, "f"), "keepdims", 1);
  mb2.output("y");
  expect_error([&] { legalize(graph_of(mb2)); }, ErrorKind::kUnsupported,
               {"node 'f' (Flatten): attribute 'keepdims' is not supported"});

  ModelBuilder mb3;
  mb3.input("x", {-1, 4});
  mb3.node("Relu", {"x", "x"}, {"y"}, "r2");
  mb3.output("y");
  expect_error([&] { legalize(graph_of(mb3)); }, ErrorKind::kBadFile, {"node 'r2' (Relu): has 2 inputs, expected 1"});

  ModelBuilder mb4;
  mb4.input("x", {-1, 4}).init("W", {4, 2}, random_floats(8, -1, 1, 1));
  ModelBuilder::attr_f(mb4.node("Gemm", {"x", "W"}, {"y"}, "g"), "transB", 1.0f);  // an int attribute as a float
  mb4.output("y");
  expect_error([&] { legalize(graph_of(mb4)); }, ErrorKind::kBadFile, {"node 'g' (Gemm): attribute 'transB' is not an int"});

  ModelBuilder mb5;
  mb5.input("x", {-1, 4});
  ModelBuilder::attr_i(mb5.node("Dropout", {"x"}, {"y"}, "d"), "is_test", 0);
  mb5.output("y");
  expect_error([&] { legalize(graph_of(mb5)); }, ErrorKind::kUnsupported, {"node 'd' (Dropout): is_test=0"});
}

// ---- shape inference ----------------------------------------------------------------------------
TEST(CompilerShapes, BatchStaysASymbol) {
  ModelBuilder mb;
  mb.input("x", {8, 2, 3}).init("W", {6, 5}, random_floats(30, -1, 1, 2)).init("B", {1, 5}, random_floats(5, -1, 1, 3));
  mb.node("Flatten", {"x"}, {"f"});
  mb.node("MatMul", {"f", "W"}, {"m"});
  mb.node("Add", {"m", "B"}, {"a"});
  mb.node("Softmax", {"a"}, {"y"});
  mb.output("y");
  Graph g = graph_of(mb);
  infer_shapes(g, true);
  // A declared batch of 8 is still the symbol: one compiled graph runs any batch.
  for (const char* name : {"x", "f", "m", "a", "y"}) {
    const auto it = std::find_if(g.values.begin(), g.values.end(), [&](const Value& v) { return v.name == name; });
    ASSERT_NE(it, g.values.end());
    ASSERT_TRUE(it->shape) << name;
    EXPECT_EQ(it->shape->at(0), kBatch) << name;
  }
  EXPECT_EQ(*g.value(g.nodes[2].outputs[0]).shape, (Dims{kBatch, 5}));
  EXPECT_EQ(*g.value(g.nodes[0].outputs[0]).shape, (Dims{kBatch, 6}));
}

TEST(CompilerShapes, ReshapeResolvesMinusOneAndZeroAgainstTheRealSize) {
  for (const auto& [shape, want] : std::vector<std::pair<std::vector<int64_t>, Dims>>{
           {{-1, 12}, {kBatch, 12}}, {{0, -1}, {kBatch, 12}}, {{0, 3, -1}, {kBatch, 3, 4}}, {{0, 0, 2, 2}, {kBatch, 3, 2, 2}}}) {
    ModelBuilder mb;
    mb.input("x", {-1, 3, 4}).init_i64("s", shape);
    mb.node("Reshape", {"x", "s"}, {"y"});
    mb.output("y");
    Graph g = graph_of(mb);
    infer_shapes(g, true);
    EXPECT_EQ(*g.value(g.nodes[0].outputs[0]).shape, want) << dims_string(shape);
  }
}

// Issue 14 class 9: shape operations that change the batch are refused, never reinterpreted.
TEST(CompilerShapes, ReshapeThatFixesMergesOrMovesTheBatchIsRefused) {
  const std::vector<std::pair<std::vector<int64_t>, std::string>> cases{
      {{1, -1}, "fixes the batch dimension to 1"},
      {{-1}, "merges the batch dimension"},
      {{-1, 6}, "changes the batch dimension"},
      {{0, 24}, "dimension 1 is 24"},
      {{-1, -1}, "ambiguous"},
  };
  for (const auto& [shape, msg] : cases) {
    ModelBuilder mb;
    mb.input("x", {-1, 3, 4}).init_i64("s", shape);
    mb.node("Reshape", {"x", "s"}, {"y"}, "rs");
    mb.output("y");
    Graph g = graph_of(mb);
    expect_error([&] { infer_shapes(g, true); }, ErrorKind::kUnsupported, {"node 'rs' (Reshape)", msg});
  }
  ModelBuilder mb;
  mb.input("x", {-1, 3, 4});
  auto& f = mb.node("Flatten", {"x"}, {"y"}, "fl");
  ModelBuilder::attr_i(f, "axis", 2);
  mb.output("y");
  Graph g = graph_of(mb);
  expect_error([&] { infer_shapes(g, true); }, ErrorKind::kUnsupported, {"node 'fl' (Flatten): axis=2 is not supported"});
}

TEST(CompilerShapes, LenientModeWaitsForAFoldedShape) {
  ModelBuilder mb;
  mb.input("x", {-1, 3, 4});
  add_constant_i64(mb, "s", {0, -1});
  mb.node("Reshape", {"x", "s"}, {"y"});
  mb.output("y");
  Graph g = graph_of(mb);
  infer_shapes(g, false);  // the shape is still a Constant node's output: no error, no shape
  EXPECT_FALSE(g.value(g.nodes[1].outputs[0]).shape);
  EXPECT_TRUE(fold_constants(g));
  infer_shapes(g, true);
  EXPECT_EQ(*g.value(g.nodes[0].outputs[0]).shape, (Dims{kBatch, 12}));
}

TEST(CompilerShapes, InputsNeedFixedFeatureDimensions) {
  ModelBuilder mb;
  mb.input("x", {-1, -1});
  mb.node("Relu", {"x"}, {"y"});
  mb.output("y");
  Graph g = graph_of(mb);
  expect_error([&] { infer_shapes(g, false); }, ErrorKind::kUnsupported,
               {"graph input 'x': dimension 1 is 'batch'; the non-batch dimensions must be fixed positive sizes"});
  ModelBuilder mb2;
  mb2.input("x", {-1, 1 << 20, 1 << 20});
  mb2.node("Relu", {"x"}, {"y"});
  mb2.output("y");
  Graph g2 = graph_of(mb2);
  expect_error([&] { infer_shapes(g2, false); }, ErrorKind::kUnsupported, {"more than 2^32 features per row"});
}

// ---- constant folding ---------------------------------------------------------------------------
// PyTorch's x.view(x.size(0), -1), exactly as torch.onnx.export writes it (opset 11: Unsqueeze
// takes its axes as an attribute; opset 13: as an input).
ModelBuilder view_model(int64_t opset, bool view, uint32_t n = 5) {
  ModelBuilder mb(opset);
  mb.input("x", {-1, 2, 3, 4}).init("W", {n, 24}, random_floats(24 * n, -1, 1, 40)).init("B", {n}, random_floats(n, -1, 1, 41));
  if (view) {
    mb.node("Shape", {"x"}, {"shape"}, "/Shape");
    add_constant_i64(mb, "zero", {0}, /*scalar=*/true).set_name("/Constant");
    ModelBuilder::attr_i(mb.node("Gather", {"shape", "zero"}, {"size0"}, "/Gather"), "axis", 0);
    if (opset < 13) {
      auto& u = mb.node("Unsqueeze", {"size0"}, {"u"}, "/Unsqueeze");
      auto* a = u.add_attribute();
      a->set_name("axes");
      a->set_type(onnx::AttributeProto_AttributeType_INTS);
      a->add_ints(0);
    } else {
      add_constant_i64(mb, "axes", {0}).set_name("/Constant_1");
      mb.node("Unsqueeze", {"size0", "axes"}, {"u"}, "/Unsqueeze");
    }
    add_constant_i64(mb, "minus1", {-1}).set_name("/Constant_2");
    ModelBuilder::attr_i(mb.node("Concat", {"u", "minus1"}, {"cat"}, "/Concat"), "axis", 0);
    mb.node("Reshape", {"x", "cat"}, {"flat"}, "/Reshape");
  } else {
    ModelBuilder::attr_i(mb.node("Flatten", {"x"}, {"flat"}, "/Flatten"), "axis", 1);
  }
  ModelBuilder::attr_i(mb.node("Gemm", {"flat", "W", "B"}, {"y"}, "/fc/Gemm"), "transB", 1);
  mb.output("y");
  return mb;
}

TEST(CompilerFold, ViewPatternFoldsToAReshapeByBatchMinusOne) {
  for (const int64_t opset : {11, 13}) {
    Graph g = graph_of(view_model(opset, true));
    fold_all(g);
    EXPECT_EQ(op_types(g), (std::vector<std::string>{"Reshape", "Gemm"})) << opset;
    const Value& s = g.value(node_named(g, "/Reshape").inputs[1]);
    ASSERT_TRUE(s.is_constant());
    EXPECT_EQ(s.data->i, (std::vector<int64_t>{kBatch, -1}));
    infer_shapes(g, true);
    EXPECT_EQ(*g.value(node_named(g, "/Reshape").outputs[0]).shape, (Dims{kBatch, 24}));
  }
}

TEST(CompilerFold, ViewPatternCompilesToTheSameNetworkAsFlatten) {
  const nn::FloatNetwork flat = view_model(13, false).import();
  for (const int64_t opset : {11, 13}) {
    const nn::FloatNetwork view = view_model(opset, true).import();
    ASSERT_EQ(view.layers.size(), 1u);
    EXPECT_EQ(view.input_features, 24u);
    EXPECT_EQ(view.layers[0].k, 24u);
    EXPECT_EQ(view.layers[0].name, "/fc/Gemm (Gemm)");
    ASSERT_EQ(view.layers[0].w.size(), flat.layers[0].w.size());
    EXPECT_EQ(std::memcmp(view.layers[0].w.data(), flat.layers[0].w.data(), view.layers[0].w.size() * sizeof(float)), 0);
    EXPECT_EQ(view.layers[0].b, flat.layers[0].b);
    const auto x = random_floats(3 * 24, -1, 1, 42);
    EXPECT_EQ(nn::forward_float(view, x, 3), nn::forward_float(flat, x, 3));
  }
}

TEST(CompilerFold, ConstantsIdentityAndGatherOfScalars) {
  ModelBuilder mb;
  mb.input("x", {-1, 3});
  mb.node("Shape", {"x"}, {"s"});
  add_constant_i64(mb, "idx", {-1, 0});
  mb.node("Gather", {"s", "idx"}, {"g"});
  mb.node("Identity", {"g"}, {"y"});
  mb.output("y");
  Graph g = graph_of(mb);
  fold_all(g);
  EXPECT_TRUE(g.nodes.empty());
  const Value& y = g.value(g.outputs[0].value);
  EXPECT_EQ(y.data->i, (std::vector<int64_t>{3, kBatch}));  // Gather [-1, 0] of [batch, 3]
  EXPECT_EQ(*y.shape, Dims{2});
}

TEST(CompilerFold, OutOfRangeIndexIsABadFile) {
  ModelBuilder mb;
  mb.input("x", {-1, 3});
  mb.node("Shape", {"x"}, {"s"});
  add_constant_i64(mb, "idx", {2}, true);
  mb.node("Gather", {"s", "idx"}, {"y"}, "g");
  mb.output("y");
  Graph g = graph_of(mb);
  expect_error([&] { fold_all(g); }, ErrorKind::kBadFile, {"node 'g' (Gather): index 2 is out of range for 2 elements"});
}

TEST(CompilerFold, ConcatOfAnActivationIsUnsupported) {
  ModelBuilder mb;
  mb.input("x", {-1, 3}).init("c", {1, 3}, {1, 2, 3});
  ModelBuilder::attr_i(mb.node("Concat", {"x", "c"}, {"y"}, "cat"), "axis", 1);
  mb.output("y");
  expect_error([&] { (void)mb.import(); }, ErrorKind::kUnsupported, {"node 'cat' (Concat): Concat of an activation"});
}

// ---- identity / Dropout removal and dead code ---------------------------------------------------
TEST(CompilerSimplify, DropoutOfEveryOpsetAndIdentityChainsVanish) {
  for (const int64_t opset : {7, 12, 13}) {
    ModelBuilder mb(opset);
    mb.input("x", {-1, 4});
    if (opset >= 12) {
      mb.init("ratio", {}, {0.5f});
      add_bool_init(mb, "training", false);
      mb.node("Dropout", {"x", "ratio", "training"}, {"d", "mask"}, "drop");  // the mask is never read
    } else {
      ModelBuilder::attr_f(mb.node("Dropout", {"x"}, {"d"}, "drop"), "ratio", 0.3f);
    }
    mb.node("Identity", {"d"}, {"i1"});
    mb.node("Identity", {"i1"}, {"y"});
    mb.output("y");
    Graph g = graph_of(mb);
    fold_all(g);
    remove_identities(g);
    verify(g);
    remove_dead_code(g);
    EXPECT_TRUE(g.nodes.empty()) << opset;
    ASSERT_EQ(g.outputs.size(), 1u);
    EXPECT_EQ(g.outputs[0].name, "y");  // the model's output name survives
    EXPECT_EQ(g.outputs[0].value, g.inputs[0].value);
  }
}

TEST(CompilerSimplify, DropoutInTrainingModeOrWithAReadMaskIsUnsupported) {
  ModelBuilder mb(13);
  mb.input("x", {-1, 4});
  add_bool_init(mb, "training", true);
  mb.node("Dropout", {"x", "", "training"}, {"y"}, "drop");
  mb.output("y");
  expect_error([&] { (void)mb.import(); }, ErrorKind::kUnsupported, {"node 'drop' (Dropout): training_mode must be false"});

  ModelBuilder mb2(13);
  mb2.input("x", {-1, 4});
  mb2.node("Dropout", {"x", "", "x"}, {"y"}, "drop");
  mb2.output("y");
  expect_error([&] { (void)mb2.import(); }, ErrorKind::kUnsupported, {"training_mode 'x' is computed from the input"});

  ModelBuilder mb3(13);
  mb3.input("x", {-1, 4});
  mb3.node("Dropout", {"x"}, {"d", "mask"}, "drop");
  mb3.node("Identity", {"mask"}, {"y"});
  mb3.output("y");
  expect_error([&] { (void)mb3.import(); }, ErrorKind::kUnsupported, {"node 'drop' (Dropout): the mask output"});
}

TEST(CompilerSimplify, DeadCodeIsRemoved) {
  ModelBuilder mb;
  mb.input("x", {-1, 4}).init("W", {4, 4}, random_floats(16, -1, 1, 50));
  mb.node("MatMul", {"x", "W"}, {"dead1"}, "unused_mm");
  mb.node("Relu", {"dead1"}, {"dead2"}, "unused_relu");
  mb.node("Relu", {"x"}, {"y"}, "live");
  mb.output("y");
  Graph g = graph_of(mb);
  remove_dead_code(g);
  verify(g);
  EXPECT_EQ(op_types(g), (std::vector<std::string>{"Relu"}));
  EXPECT_EQ(g.nodes[0].name, "live");
}

// ---- dense fusion -------------------------------------------------------------------------------
TEST(CompilerFuse, GemmBiasAddAndReluBecomeOneDense) {
  const uint32_t k = 3, n = 2;
  const std::vector<float> w{1, 2, 3, 4, 5, 6};  // [n, k] with transB = 1
  ModelBuilder mb;
  mb.input("x", {-1, k}).init("W", {n, k}, w).init("C", {n}, {0.5f, -1}).init("B", {1, n}, {0.25f, 2});
  auto& gm = mb.node("Gemm", {"x", "W", "C"}, {"h"}, "fc");
  ModelBuilder::attr_i(gm, "transB", 1);
  ModelBuilder::attr_f(gm, "alpha", 2.0f);
  ModelBuilder::attr_f(gm, "beta", 3.0f);
  mb.node("Add", {"B", "h"}, {"a"}, "bias");
  mb.node("Relu", {"a"}, {"y"}, "act");
  mb.output("y");
  Graph g = graph_of(mb);
  infer_shapes(g, true);
  fuse_dense(g);
  verify(g);
  ASSERT_EQ(op_types(g), (std::vector<std::string>{"Dense"}));
  const Node& d = g.nodes[0];
  EXPECT_EQ(d.origin, (std::vector<std::string>{"fc (Gemm)", "bias (Add)", "act (Relu)"}));
  EXPECT_EQ(d.attr("relu")->i, 1);
  EXPECT_EQ(g.value(d.outputs[0]).name, "y");
  EXPECT_EQ(*g.value(d.inputs[1]).shape, (Dims{k, n}));
  EXPECT_EQ(g.value(d.inputs[1]).data->f, (std::vector<double>{2, 8, 4, 10, 6, 12}));  // alpha * W^T, [k][n]
  EXPECT_EQ(g.value(d.inputs[2]).data->f, (std::vector<double>{3 * 0.5 + 0.25, -3 + 2.0}));
}

TEST(CompilerFuse, AReadOfTheMatrixOutputElsewhereStopsFusion) {
  ModelBuilder mb;
  mb.input("x", {-1, 2}).init("W", {2, 2}, {1, 2, 3, 4}).init("B", {2}, {1, 1});
  mb.node("MatMul", {"x", "W"}, {"m"}, "mm");
  mb.node("Add", {"m", "B"}, {"a"}, "bias");
  mb.node("Add", {"a", "m"}, {"y"}, "skip");
  mb.output("y");
  Graph g = graph_of(mb);
  infer_shapes(g, true);
  fuse_dense(g);
  verify(g);
  EXPECT_EQ(op_types(g), (std::vector<std::string>{"Dense", "Add", "Add"}));
  // ... and lowering names the branch.
  expect_error([&] { (void)lower_to_float_network(g); }, ErrorKind::kUnsupported,
               {"node 'skip' (Add): reads 'm', an earlier activation"});
}

TEST(CompilerFuse, MatrixOpsTheDeviceCannotRunAreRefused) {
  ModelBuilder mb;
  mb.input("x", {-1, 2}).init("W", {3, 2}, random_floats(6, -1, 1, 60));
  mb.node("MatMul", {"W", "x"}, {"y"}, "wx");
  mb.output("y");
  expect_error([&] { (void)mb.import(); }, ErrorKind::kUnsupported, {"node 'wx' (MatMul): the activation must be the first operand"});

  ModelBuilder mb2;
  mb2.input("x", {-1, 2, 3}).init("W", {3, 4}, random_floats(12, -1, 1, 61));
  mb2.node("MatMul", {"x", "W"}, {"y"}, "mm3");
  mb2.output("y");
  expect_error([&] { (void)mb2.import(); }, ErrorKind::kUnsupported,
               {"node 'mm3' (MatMul): the activation has feature shape [2, 3]; a dense layer needs [batch, k]"});
}

// ---- lowering -----------------------------------------------------------------------------------
TEST(CompilerLower, OneInputOneOutputAChain) {
  ModelBuilder mb;
  mb.input("x", {-1, 2}).input("z", {-1, 2});
  mb.node("Relu", {"x"}, {"y"});
  mb.output("y");
  expect_error([&] { (void)mb.import(); }, ErrorKind::kUnsupported, {"the graph has 2 inputs ('x', 'z')", "several inputs run when they meet in a Concat"});

  ModelBuilder mb2;
  mb2.input("x", {-1, 2}).init("W", {2, 2}, {1, 0, 0, 1});
  mb2.node("MatMul", {"x", "W"}, {"y"});
  mb2.node("Relu", {"y"}, {"z"});
  mb2.output("y").output("z");
  // Several outputs must all be the last layer's output (or host operators after it): y is before the ReLU.
  expect_error([&] { (void)mb2.import(); }, ErrorKind::kUnsupported,
               {"graph output 'y': is not the end of the layer chain"});
}

TEST(CompilerLower, PipelineDumpOfAnMlp) {
  ModelBuilder mb;
  mb.input("x", {-1, 4}).init("W1", {4, 3}, random_floats(12, -1, 1, 70)).init("B1", {3}, random_floats(3, -1, 1, 71));
  mb.init("W2", {3, 2}, random_floats(6, -1, 1, 72));
  mb.node("MatMul", {"x", "W1"}, {"m1"}, "mm1");
  mb.node("Add", {"m1", "B1"}, {"a1"}, "add1");
  mb.node("Relu", {"a1"}, {"r1"}, "relu1");
  mb.node("Dropout", {"r1"}, {"d1"}, "drop");
  mb.node("MatMul", {"d1", "W2"}, {"m2"}, "mm2");
  mb.node("Softmax", {"m2"}, {"y"}, "sm");
  mb.output("y");
  const Graph g = optimize(graph_of(mb, "mlp"));
  EXPECT_EQ(dump(g),
            "graph mlp\n"
            "  input  %x:fp32[batch, 4]\n"
            "  const  %mm1.w:fp32[4, 3]\n"
            "  const  %mm1.b:fp32[3]\n"
            "  const  %mm2.w:fp32[3, 2]\n"
            "  const  %mm2.b:fp32[2]\n"
            "  %r1:fp32[batch, 3] = Dense(%x:fp32[batch, 4], %mm1.w:fp32[4, 3], %mm1.b:fp32[3]) {relu=1}  # mm1\n"
            "  %m2:fp32[batch, 2] = Dense(%r1:fp32[batch, 3], %mm2.w:fp32[3, 2], %mm2.b:fp32[2]) {relu=0}  # mm2\n"
            "  %y:fp32[batch, 2] = Softmax(%m2:fp32[batch, 2]) {axis=-1}  # sm\n"
            "  output 'y' = %y:fp32[batch, 2]\n");
  const nn::FloatNetwork net = lower_to_float_network(g);
  ASSERT_EQ(net.layers.size(), 2u);
  EXPECT_EQ(net.layers[0].name, "mm1 (MatMul) + add1 (Add) + relu1 (Relu)");
  EXPECT_EQ(net.host_op, nn::HostOp::kSoftmax);
}

}  // namespace
}  // namespace tpuw::compiler

namespace tpuw::compiler {
namespace {

// Random byte mutations of the view model exercise the folding operators on broken input: every
// result imports or throws Error(kBadFile / kUnsupported), never another error, never a crash.
TEST(CompilerFuzz, MutatedViewModelsImportOrFailCleanly) {
  const std::string s = view_model(13, true).bytes();
  const std::vector<uint8_t> full(s.begin(), s.end());
  std::mt19937 rng(23);
  int errors = 0, imported = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> b = full;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && b.size() > 1; ++e) {
      const size_t pos = rng() % b.size();
      if (rng() % 2 == 0) {
        b[pos] = static_cast<uint8_t>(rng());
      } else {
        b[pos] = static_cast<uint8_t>(b[pos] ^ (1u << (rng() % 8)));
      }
    }
    try {
      const Graph g = import_onnx_graph(b, "fuzz");
      const nn::FloatNetwork net = compile_float(g);
      ASSERT_EQ(net.layers.empty() ? net.input_features : net.layers[0].k, net.input_features);
      ++imported;
    } catch (const Error& e) {
      ++errors;
      ASSERT_TRUE(e.kind() == ErrorKind::kBadFile || e.kind() == ErrorKind::kUnsupported) << e.what();
    }
  }
  EXPECT_GT(errors, 500);
  EXPECT_GT(imported, 100);
}

}  // namespace
}  // namespace tpuw::compiler
