// The graph IR: verify() catches every broken invariant, dump() is readable and stable, and the
// ONNX importer maps a model faithfully (unknown operators included) and normalizes opset quirks.
#include <gtest/gtest.h>

#include "compiler_testlib.h"

namespace tpuw::compiler {
namespace {

using testing::add_bool_init;
using testing::expect_error;
using testing::graph_of;
using testing::ModelBuilder;
using testing::op_types;

Graph tiny() {
  Graph g;
  g.source = "tiny";
  Value x;
  x.name = "x";
  x.shape = Dims{kBatch, 2};
  const ValueId xi = g.add_value(x);
  g.inputs.push_back(GraphInput{xi, true, {-1, 2}, {"batch", ""}});
  TensorData w;
  w.f = {1, 2, 3, 4, 5, 6};
  const ValueId wi = g.add_constant("w", DType::kFloat32, {2, 3}, w);
  Value y;
  y.name = "y";
  const ValueId yi = g.add_value(y);
  Node n;
  n.op = Op::kMatMul;
  n.op_type = "MatMul";
  n.name = "mm";
  n.inputs = {xi, wi};
  n.outputs = {yi};
  g.nodes.push_back(n);
  g.outputs.push_back(GraphOutput{"y", yi});
  return g;
}

TEST(CompilerIr, VerifyAcceptsAWellFormedGraph) { EXPECT_NO_THROW(verify(tiny())); }

TEST(CompilerIr, VerifyCatchesEveryBrokenInvariant) {
  {
    Graph g = tiny();
    g.nodes[0].inputs[1] = 99;  // out of range
    expect_error([&] { verify(g); }, ErrorKind::kInternal, {"invalid value id"});
  }
  {
    Graph g = tiny();
    g.nodes.push_back(g.nodes[0]);  // y defined twice
    expect_error([&] { verify(g); }, ErrorKind::kInternal, {"redefines 'y'"});
  }
  {
    Graph g = tiny();
    Node relu;
    relu.op = Op::kRelu;
    relu.op_type = "Relu";
    relu.name = "r";
    relu.inputs = {g.nodes[0].outputs[0]};
    Value z;
    z.name = "z";
    relu.outputs = {g.add_value(z)};
    g.nodes.insert(g.nodes.begin(), relu);  // reads y before mm defines it
    expect_error([&] { verify(g); }, ErrorKind::kInternal, {"node 'r' reads 'y' before it is defined"});
  }
  {
    Graph g = tiny();
    g.value(1).data->f.pop_back();  // 5 values for [2, 3]
    expect_error([&] { verify(g); }, ErrorKind::kInternal, {"constant 'w' has 5 values for shape [2, 3]"});
  }
  {
    Graph g = tiny();
    Value u;
    u.name = "u";
    g.outputs.push_back(GraphOutput{"u", g.add_value(u)});
    expect_error([&] { verify(g); }, ErrorKind::kInternal, {"graph output 'u' is not defined"});
  }
}

TEST(CompilerIr, DumpIsReadable) {
  Graph g = tiny();
  infer_shapes(g, true);
  EXPECT_EQ(dump(g),
            "graph tiny\n"
            "  input  %x:fp32[batch, 2]\n"
            "  const  %w:fp32[2, 3]\n"
            "  %y:fp32[batch, 3] = MatMul(%x:fp32[batch, 2], %w:fp32[2, 3])  # mm\n"
            "  output 'y' = %y:fp32[batch, 3]\n");
}

TEST(CompilerIr, CheckedElementsNeverOverflows) {
  EXPECT_EQ(checked_elements(Dims{kBatch, 3, 4}), 12);
  EXPECT_EQ(checked_elements(Dims{}), 1);
  EXPECT_EQ(checked_elements(Dims{int64_t{1} << 31, 2}), int64_t{1} << 32);
  EXPECT_FALSE(checked_elements(Dims{int64_t{1} << 31, 3}));
  EXPECT_FALSE(checked_elements(Dims{int64_t{1} << 40, int64_t{1} << 40, int64_t{1} << 40}));
  EXPECT_FALSE(checked_elements(Dims{4, -1}));
  EXPECT_EQ(dims_string(Dims{kBatch, 64}), "[batch, 64]");
}

TEST(CompilerImporter, UnknownOperatorsImportAsNodes) {
  ModelBuilder mb;
  mb.input("x", {-1, 4});
  auto& s = mb.node("Sinh", {"x"}, {"y"}, "sinh");
  ModelBuilder::attr_f(s, "fancy", 2.0f);
  mb.output("y");
  const Graph g = graph_of(mb);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op, Op::kUnknown);
  EXPECT_EQ(g.nodes[0].op_type, "Sinh");
  EXPECT_EQ(g.nodes[0].name, "sinh");
  ASSERT_NE(g.nodes[0].attr("fancy"), nullptr);
  EXPECT_EQ(g.nodes[0].attr("fancy")->f, 2.0f);
  EXPECT_NO_THROW(verify(g));
  // ... and a later pass names it.
  expect_error([&] { legalize(g); }, ErrorKind::kUnsupported, {"m.onnx: node 'sinh' (Sinh): operator is not supported"});
}

TEST(CompilerImporter, ConstantsKeepTheirTypesAndData) {
  ModelBuilder mb;
  mb.input("x", {-1, 2}).init("W", {2, 2}, {1.5f, -2, 0.25f, 8}).init_i64("s", {-1, 2});
  add_bool_init(mb, "flag", true);
  mb.node("MatMul", {"x", "W"}, {"y"});
  mb.output("y");
  const Graph g = graph_of(mb);
  ASSERT_EQ(g.values.size(), 5u);  // W, s, flag, x, y
  EXPECT_EQ(g.values[0].dtype, DType::kFloat32);
  EXPECT_EQ(g.values[0].data->f, (std::vector<double>{1.5, -2, 0.25, 8}));
  EXPECT_EQ(g.values[1].dtype, DType::kInt64);
  EXPECT_EQ(g.values[1].data->i, (std::vector<int64_t>{-1, 2}));
  EXPECT_EQ(g.values[2].dtype, DType::kBool);
  EXPECT_EQ(*g.values[2].shape, Dims{});
  EXPECT_EQ(g.values[2].data->i, (std::vector<int64_t>{1}));
  ASSERT_EQ(g.inputs.size(), 1u);
  EXPECT_EQ(g.inputs[0].declared, (std::vector<int64_t>{-1, 2}));
  EXPECT_EQ(g.inputs[0].dim_params[0], "batch");
}

TEST(CompilerImporter, NormalizesSoftmaxAxisAndOpset1Reshape) {
  for (const int64_t opset : {11, 13}) {
    ModelBuilder mb(opset);
    mb.input("x", {-1, 4});
    mb.node("Softmax", {"x"}, {"y"});
    mb.output("y");
    const Graph g = graph_of(mb);
    ASSERT_NE(g.nodes[0].attr("axis"), nullptr);
    EXPECT_EQ(g.nodes[0].attr("axis")->i, opset < 13 ? 1 : -1);
  }
  ModelBuilder mb(4);
  mb.input("x", {-1, 2, 2});
  auto& r = mb.node("Reshape", {"x"}, {"y"}, "rs");
  auto* a = r.add_attribute();
  a->set_name("shape");
  a->set_type(onnx::AttributeProto_AttributeType_INTS);
  a->add_ints(0);
  a->add_ints(4);
  mb.output("y");
  const Graph g = graph_of(mb);
  ASSERT_EQ(g.nodes[0].inputs.size(), 2u);
  EXPECT_EQ(g.nodes[0].attr("shape"), nullptr);
  EXPECT_EQ(g.value(g.nodes[0].inputs[1]).data->i, (std::vector<int64_t>{0, 4}));
}

TEST(CompilerImporter, ReferencesMustBeDefinedOnceAndEarlier) {
  ModelBuilder mb;
  mb.input("x", {-1, 2});
  mb.node("Relu", {"later"}, {"y"}, "r");
  mb.node("Relu", {"x"}, {"later"}, "r2");
  mb.output("y");
  expect_error([&] { (void)graph_of(mb); }, ErrorKind::kBadFile,
               {"m.onnx: node 'r' (Relu): reads 'later', which no initializer or earlier node defines"});
  ModelBuilder mb2;
  mb2.input("x", {-1, 2});
  mb2.node("Relu", {"x"}, {"y"}, "a");
  mb2.node("Relu", {"x"}, {"y"}, "b");
  mb2.output("y");
  expect_error([&] { (void)graph_of(mb2); }, ErrorKind::kBadFile, {"node 'b' (Relu): defines 'y', which is already defined"});
}

TEST(CompilerImporter, NamelessNodesAreNumbered) {
  ModelBuilder mb;
  mb.input("x", {-1, 2});
  mb.node("Relu", {"x"}, {"y"}).set_name("");
  mb.output("y");
  const Graph g = graph_of(mb);
  EXPECT_EQ(g.nodes[0].name, "#0");
  EXPECT_EQ(g.nodes[0].label(), "#0 (Relu)");
  EXPECT_EQ(op_types(g), (std::vector<std::string>{"Relu"}));
}

}  // namespace
}  // namespace tpuw::compiler
