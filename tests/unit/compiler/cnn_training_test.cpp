// The CNN training pass (build_cnn_training_model): initializer names for Conv (with and without a
// bias) and a MatMul + Add head; the models it refuses, naming the node.
#include <gtest/gtest.h>

#include "compiler_testlib.h"
#include "tpuw/compiler/cnn_training.h"

namespace tpuw::compiler {
namespace {

using testing::expect_error;
using testing::graph_of;
using testing::ModelBuilder;

void ints(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_INTS);
  for (const int64_t x : v) a->add_ints(x);
}

// x [2, 6, 6] -> Conv 3x3 pad 1 (4 channels) -> Relu -> MaxPool 2 -> Flatten -> MatMul [36, 3] + Add.
ModelBuilder small(bool conv_bias, int64_t group = 1, bool scale = false) {
  ModelBuilder mb;
  mb.input("x", {-1, 2, 6, 6});
  mb.init("c.w", {4, 2 / group, 3, 3}, std::vector<float>(static_cast<size_t>(4 * 2 / group * 9), 0.1f));
  std::vector<std::string> in = {"x", "c.w"};
  if (conv_bias) {
    mb.init("c.b", {4}, std::vector<float>(4, 0.0f));
    in.push_back("c.b");
  }
  auto& c = mb.node("Conv", in, {"c"}, "conv");
  ints(c, "pads", {1, 1, 1, 1});
  if (group != 1) ModelBuilder::attr_i(c, "group", group);
  mb.node("Relu", {"c"}, {"r"}, "relu");
  auto& p = mb.node("MaxPool", {"r"}, {"p"}, "pool");
  ints(p, "kernel_shape", {2, 2});
  ints(p, "strides", {2, 2});
  mb.node("Flatten", {"p"}, {"f"}, "flatten");
  mb.init("fc.w", {36, 3}, std::vector<float>(108, 0.01f));
  mb.init("fc.b", {3}, std::vector<float>(3, 0.0f));
  mb.node("MatMul", {"f", "fc.w"}, {"mm"}, "fc");
  mb.node("Add", {"mm", "fc.b"}, {"y"}, "fc_bias");
  if (scale) {  // an elementwise op the pass cannot train (a Mul by a constant)
    mb.init("k", {1}, std::vector<float>(1, 2.0f));
    mb.node("Mul", {"y", "k"}, {"s"}, "scale");
  }
  mb.output(scale ? "s" : "y");
  return mb;
}

TEST(CnnTraining, NamesAndLayouts) {
  for (const bool bias : {true, false}) {
    const CnnTrainModel m = build_cnn_training_model(graph_of(small(bias)));
    ASSERT_EQ(m.net.convs.size(), 2u);
    EXPECT_EQ(m.conv_weight[0], "c.w");
    EXPECT_EQ(m.conv_bias[0], bias ? "c.b" : "");
    EXPECT_EQ(m.conv_weight[1], "");  // the pool
    ASSERT_EQ(m.dense_weight.size(), 1u);
    EXPECT_EQ(m.dense_weight[0], "fc.w");
    EXPECT_EQ(m.dense_bias[0], "fc.b");
    EXPECT_EQ(m.dense_out_in[0], 0);
    EXPECT_EQ(m.classes(), 3);
    EXPECT_TRUE(m.net.convs[0].relu);
  }
}

TEST(CnnTraining, RefusesNamingTheNode) {
  expect_error([] { (void)build_cnn_training_model(graph_of(small(true, 2))); }, ErrorKind::kUnsupported,
               {"node 'conv' (Conv)", "grouped or depthwise"});
  expect_error([] { (void)build_cnn_training_model(graph_of(small(true, 1, true))); }, ErrorKind::kUnsupported,
               {"node 'scale' (Mul)", "cannot be trained"});
  // A residual Add runs in bf16 inference (a 1x1 conv over both maps) but is not trained yet.
  ModelBuilder mb;
  mb.input("x", {-1, 2, 6, 6});
  mb.init("w", {2, 2, 3, 3}, std::vector<float>(36, 0.1f));
  auto& c = mb.node("Conv", {"x", "w"}, {"c"}, "conv");
  onnx::AttributeProto* pads = c.add_attribute();
  pads->set_name("pads");
  pads->set_type(onnx::AttributeProto::INTS);
  for (int i = 0; i < 4; ++i) pads->add_ints(1);
  mb.node("Add", {"c", "x"}, {"y"}, "res");
  mb.output("y");
  expect_error([&] { (void)build_cnn_training_model(graph_of(mb)); }, ErrorKind::kUnsupported,
               {"layer 'res (Add)' cannot be trained", "no residual Add"});
}

}  // namespace
}  // namespace tpuw::compiler
