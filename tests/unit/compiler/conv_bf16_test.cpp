// bf16 CNNs through the compiler (compile_bf16_cnn): a Conv/AveragePool/GlobalAveragePool/MaxPool
// chain with a dense head or ending in its feature map, run on the ref device in bf16 ==
// forward_cnn_bf16_host bit for bit and within bf16 tolerance of the float interpreter (also branches
// joined by a residual Add and a Concat); chain
// errors name the node.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include "compiler_testlib.h"
#include "tpuw/compiler/conv_bf16.h"
#include "tpuw/compiler/quantize.h"
#include "tpuw/device.h"
#include "tpuw/runtime/conv_bf16.h"

namespace tpuw::compiler {
namespace {

using testing::expect_error;
using testing::graph_of;
using testing::ModelBuilder;
using testing::random_floats;

void ints(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_INTS);
  for (const int64_t x : v) a->add_ints(x);
}

void conv(ModelBuilder& mb, uint32_t& seed, const std::string& name, const std::string& in, const std::string& out,
          int64_t o, int64_t c, int64_t group = 1, std::vector<int64_t> strides = {1, 1}) {
  const auto r = static_cast<float>(1.5 / std::sqrt(static_cast<double>(c / group * 9)));
  mb.init(name + ".w", {o, c / group, 3, 3}, random_floats(static_cast<size_t>(o * c / group * 9), -r, r, seed++));
  mb.init(name + ".b", {o}, random_floats(static_cast<size_t>(o), -0.1f, 0.1f, seed++));
  auto& n = mb.node("Conv", {in, name + ".w", name + ".b"}, {name + ".y"}, name);
  ints(n, "pads", {1, 1, 1, 1});
  ints(n, "strides", strides);
  if (group != 1) ModelBuilder::attr_i(n, "group", group);
  mb.node("Relu", {name + ".y"}, {out}, name + "_relu");
}

// Conv -> AveragePool -> depthwise Conv (stride 2) -> MaxPool -> Conv -> GlobalAveragePool ->
// Flatten -> Gemm -> Softmax, or (head = false) ending in the GlobalAveragePool's feature map.
ModelBuilder cnn(bool head) {
  uint32_t seed = 3;
  ModelBuilder mb;
  mb.input("x", {-1, 3, 16, 16});
  conv(mb, seed, "conv1", "x", "a1", 20, 3);  // [20, 16, 16]
  auto& p = mb.node("AveragePool", {"a1"}, {"p1"}, "pool1");
  ints(p, "kernel_shape", {3, 3});  // 1/9: not a power of two
  ints(p, "strides", {2, 2});
  ints(p, "pads", {1, 1, 1, 1});
  ModelBuilder::attr_i(p, "count_include_pad", 1);  // [20, 8, 8]
  conv(mb, seed, "dw", "p1", "a2", 20, 20, 20, {2, 2});  // depthwise, [20, 4, 4]
  auto& m = mb.node("MaxPool", {"a2"}, {"m"}, "maxpool");
  ints(m, "kernel_shape", {2, 2});
  ints(m, "strides", {1, 1});  // [20, 3, 3]
  conv(mb, seed, "conv3", "m", "a3", 24, 20);  // [24, 3, 3]
  mb.node("GlobalAveragePool", {"a3"}, {head ? "g" : "y"}, "gap");
  if (head) {
    auto& f = mb.node("Flatten", {"g"}, {"f"}, "flatten");
    ModelBuilder::attr_i(f, "axis", 1);
    mb.init("fc.w", {10, 24}, random_floats(240, -0.5f, 0.5f, seed++));
    mb.init("fc.b", {10}, random_floats(10, -0.1f, 0.1f, seed++));
    auto& gm = mb.node("Gemm", {"f", "fc.w", "fc.b"}, {"logits"}, "fc");
    ModelBuilder::attr_i(gm, "transB", 1);
    mb.node("Softmax", {"logits"}, {"y"}, "softmax");
  }
  mb.output("y");
  return mb;
}

TEST(ConvBf16Compiler, CnnOnTheDeviceMatchesTheContractAndFloat) {
  const uint64_t batch = 6;
  const std::vector<float> x = random_floats(batch * 768, -1.0f, 1.0f, 21);
  Device dev = Device::open("ref", BackendConfig{});
  for (const bool head : {true, false}) {
    SCOPED_TRACE(head ? "dense head" : "feature-map output");
    const Graph g = graph_of(cnn(head));
    const Bf16Cnn net = compile_bf16_cnn(g);
    ASSERT_EQ(net.convs.size(), 6u);
    EXPECT_EQ(net.convs[1].kind, Bf16ConvLayer::Kind::kAvgPool);
    EXPECT_EQ(net.convs[3].kind, Bf16ConvLayer::Kind::kMaxPool);
    EXPECT_TRUE(net.convs[2].relu);
    EXPECT_EQ(net.head.layers.size(), head ? 1u : 0u);
    EXPECT_EQ(net.head.host_op, head ? nn::HostOp::kSoftmax : nn::HostOp::kNone);
    EXPECT_EQ(net.output_dims, head ? std::vector<int64_t>{10} : std::vector<int64_t>({24, 1, 1}));
    const runtime::CnnBf16RunResult r = runtime::run_cnn_bf16(dev, net, x, batch);
    const std::vector<float> want = runtime::forward_cnn_bf16_host(net, x, batch, 16);
    ASSERT_EQ(r.output.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(r.output[i]), std::bit_cast<uint32_t>(want[i])) << "output " << i;
    }
    EXPECT_GT(r.convs[2].plan.weight_tiles, r.convs[2].plan.executed_tiles());  // depthwise: zero tiles skipped
    std::vector<float> y = r.output;
    if (head) nn::softmax_rows(y, 10);
    const Graph og = optimize(g);
    const auto t = interpret_float(og, x, batch);
    const std::vector<float>& yf = t[static_cast<size_t>(og.outputs[0].value)];
    ASSERT_EQ(y.size(), yf.size());
    double ymax = 0, worst = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      ymax = std::max(ymax, std::fabs(static_cast<double>(yf[i])));
      worst = std::max(worst, std::fabs(static_cast<double>(y[i]) - yf[i]));
    }
    EXPECT_LT(worst, 0.02 * ymax) << "largest error " << worst << " of " << ymax;
  }
}

TEST(ConvBf16Compiler, BranchesJoinedByAddAndConcat) {
  // conv2 reads the input, not conv1's output: two branches joined by an Add (a 1x1 conv over the
  // channel concatenation with [I; I] weights), then a Concat with the input (identity weights).
  uint32_t seed = 1;
  ModelBuilder mb;
  mb.input("x", {-1, 2, 6, 6});
  conv(mb, seed, "conv1", "x", "a1", 4, 2);
  conv(mb, seed, "conv2", "x", "a2", 4, 2);
  mb.node("Add", {"a1", "a2"}, {"s"}, "join");
  mb.node("Relu", {"s"}, {"r"}, "relu");
  auto& cat = mb.node("Concat", {"r", "x"}, {"y"}, "cat");
  onnx::AttributeProto* axis = cat.add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(1);
  mb.output("y");
  const Graph g = graph_of(mb);
  const Bf16Cnn net = compile_bf16_cnn(g);
  ASSERT_EQ(net.convs.size(), 4u);
  EXPECT_EQ(net.convs[1].sources, (std::vector<int32_t>{-1}));
  EXPECT_EQ(net.convs[2].sources, (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(net.convs[2].relu);
  EXPECT_EQ(net.convs[3].sources, (std::vector<int32_t>{2, -1}));
  EXPECT_EQ(net.convs[3].geom.out_c, 6u);
  const uint64_t batch = 3;
  const std::vector<float> x = random_floats(batch * 2 * 36, -1.0f, 1.0f, 5);
  Device dev = Device::open("ref", BackendConfig{});
  const runtime::CnnBf16RunResult r = runtime::run_cnn_bf16(dev, net, x, batch);
  const std::vector<float> want = runtime::forward_cnn_bf16_host(net, x, batch, 16);
  ASSERT_EQ(r.output.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(std::bit_cast<uint32_t>(r.output[i]), std::bit_cast<uint32_t>(want[i])) << i;
  const Graph og = optimize(g);
  const auto t = interpret_float(og, x, batch);
  const std::vector<float>& yf = t[static_cast<size_t>(og.outputs[0].value)];
  ASSERT_EQ(yf.size(), want.size());
  double ymax = 0, worst = 0;
  for (size_t i = 0; i < yf.size(); ++i) {
    ymax = std::max(ymax, std::fabs(static_cast<double>(yf[i])));
    worst = std::max(worst, std::fabs(static_cast<double>(r.output[i]) - yf[i]));
  }
  EXPECT_LT(worst, 0.02 * ymax) << "largest error " << worst << " of " << ymax;
}

TEST(ConvBf16Compiler, ChainErrorsNameTheNode) {
  {
    ModelBuilder mb;
    mb.input("x", {-1, 1, 4, 4});
    mb.init("w", {2, 1, 3, 3}, std::vector<float>(18, 0.1f));
    mb.node("Conv", {"x", "w"}, {"c"}, "conv");
    auto& p = mb.node("LpPool", {"c"}, {"p"}, "pool");
    ints(p, "kernel_shape", {2, 2});
    mb.output("p");
    expect_error([&] { (void)compile_bf16_cnn(graph_of(mb)); }, ErrorKind::kUnsupported,
                 {"node 'pool' (LpPool)", "operator is not supported"});
  }
  {
    ModelBuilder mb;  // not an image input
    mb.input("x", {-1, 4});
    mb.init("w", {4, 2}, std::vector<float>(8, 0.1f));
    mb.node("MatMul", {"x", "w"}, {"y"}, "mm");
    mb.output("y");
    expect_error([&] { (void)compile_bf16_cnn(graph_of(mb)); }, ErrorKind::kUnsupported,
                 {"graph input 'x'", "[batch, channels, height, width]"});
  }
}

}  // namespace
}  // namespace tpuw::compiler
