// MaxPool in CNNs (tpuw/compiler/conv.h, nn::QConv2d::max_pool): output sizes with pads, strides
// and ceil_mode as PyTorch computes them, the int8 max on the device bit-exact with the integer pass,
// the scale kept across the pool, refused cases, and the PyTorch-exported Fashion-MNIST CNN
// (examples/fashion_mnist/train_cnn.py: conv-relu-maxpool x 2, x.view(x.size(0), -1), Linear).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>

#include "compiler_testlib.h"
#include "tpuw/compiler/conv.h"
#include "tpuw/compiler/conv_bf16.h"
#include "tpuw/compiler/onnx_importer.h"
#include "tpuw/compiler/passes.h"
#include "tpuw/compiler/quantize.h"
#include "tpuw/device.h"
#include "tpuw/nn/quantize.h"
#include "tpuw/numerics.h"
#include "tpuw/runtime/conv.h"
#include "tpuw/runtime/conv_bf16.h"
#include "tpuw/runtime/maxpool_indices.h"
#include "tpuw/runtime/npy.h"

namespace tpuw::compiler {
namespace {

using testing::expect_error;
using testing::graph_of;
using testing::ModelBuilder;
using testing::random_floats;

// x [batch, 2, size, size] -> MaxPool (out x out) -> Flatten -> Gemm(4).
ModelBuilder pool_model(int64_t size, int64_t k, int64_t s, int64_t pad, int64_t ceil, int64_t out,
                        bool indices = false) {
  ModelBuilder mb;
  mb.input("x", {-1, 2, size, size});
  std::vector<std::string> outs{"p"};
  if (indices) outs.push_back("idx");
  auto& p = mb.node("MaxPool", {"x"}, outs, "pool");
  ModelBuilder::attr_ints(p, "kernel_shape", {k, k});
  ModelBuilder::attr_ints(p, "strides", {s, s});
  if (pad != 0) ModelBuilder::attr_ints(p, "pads", {pad, pad, pad, pad});
  if (ceil != 0) ModelBuilder::attr_i(p, "ceil_mode", ceil);
  auto& f = mb.node("Flatten", {"p"}, {"f"}, "flatten");
  ModelBuilder::attr_i(f, "axis", 1);
  const int64_t feat = 2 * out * out;
  mb.init("fc.w", {4, feat}, random_floats(static_cast<size_t>(4 * feat), -0.5f, 0.5f, 3));
  mb.init("fc.b", {4}, random_floats(4, -0.1f, 0.1f, 4));
  auto& gm = mb.node("Gemm", {"f", "fc.w", "fc.b"}, {"y"}, "fc");
  ModelBuilder::attr_i(gm, "transB", 1);
  mb.output("y");
  return mb;
}

TEST(MaxPool, OutputSizesFollowPyTorch) {
  struct Case {
    int64_t size, k, s, pad, ceil;
    uint32_t out;
  };
  // torch.nn.MaxPool2d(k, s, pad, ceil_mode) on size x size.
  for (const Case c : {Case{5, 2, 2, 0, 0, 2}, Case{5, 2, 2, 0, 1, 3}, Case{6, 3, 2, 1, 1, 4}, Case{5, 2, 2, 1, 1, 3},
                       Case{11, 2, 2, 0, 1, 6}, Case{7, 3, 1, 1, 0, 7}}) {
    const uint64_t batch = 3;
    const uint64_t feat = 2 * static_cast<uint64_t>(c.size * c.size);
    const std::vector<float> x = random_floats(batch * feat, -1.0f, 1.0f, 11);
    const nn::QCnn q = compile_quantized_cnn(graph_of(pool_model(c.size, c.k, c.s, c.pad, c.ceil, c.out)), x, batch);
    ASSERT_EQ(q.convs.size(), 1u);
    EXPECT_TRUE(q.convs[0].max_pool);
    EXPECT_EQ(q.convs[0].geom.out_h(), c.out) << c.size << " k" << c.k << " s" << c.s << " p" << c.pad << " ceil" << c.ceil;
    EXPECT_EQ(q.convs[0].out_scale, q.input_scale);  // the scale is kept
    std::vector<int8_t> xq(x.size());
    for (size_t i = 0; i < x.size(); ++i) xq[i] = nn::quantize_value(x[i], q.input_scale);
    // The pooled int8 values are the quantized float max, exactly.
    const std::vector<int8_t> pooled = nn::conv2d_int(q.convs[0], xq, batch);
    const Graph og = optimize(graph_of(pool_model(c.size, c.k, c.s, c.pad, c.ceil, c.out)));
    const auto acts = interpret_float(og, x, batch);
    const std::vector<float>& pf = acts[static_cast<size_t>(og.nodes[0].outputs[0])];
    ASSERT_EQ(pf.size(), pooled.size());
    for (size_t i = 0; i < pf.size(); ++i) ASSERT_EQ(pooled[i], nn::quantize_value(pf[i], q.input_scale)) << i;
    Device dev = Device::open("ref", BackendConfig{});
    const runtime::CnnRunResult r = runtime::run_cnn(dev, q, xq, batch);
    EXPECT_FALSE(r.convs[0].host);  // on the device (VECTOR IMAX), bit for bit the host max
    EXPECT_GT(r.convs[0].cycles, 0u);
    EXPECT_EQ(r.convs[0].y, pooled);
    EXPECT_EQ(r.output_i32, nn::forward_cnn_int_raw(q, xq, batch));
  }
}

// x -> MaxPool -> Relu: no layer before the pool to take the Relu, so it is fused into the pool's
// own ACTIVATE (on the device) / applied after the host max.
TEST(MaxPool, ReluAfterAPoolOfTheInputFusesIntoThePool) {
  ModelBuilder mb;
  mb.input("x", {-1, 2, 6, 6});
  auto& p = mb.node("MaxPool", {"x"}, {"p"}, "pool");
  ModelBuilder::attr_ints(p, "kernel_shape", {2, 2});
  ModelBuilder::attr_ints(p, "strides", {2, 2});
  mb.node("Relu", {"p"}, {"r"}, "relu");
  auto& f = mb.node("Flatten", {"r"}, {"f"}, "flatten");
  ModelBuilder::attr_i(f, "axis", 1);
  mb.init("fc.w", {4, 18}, random_floats(72, -0.5f, 0.5f, 3));
  mb.init("fc.b", {4}, random_floats(4, -0.1f, 0.1f, 4));
  auto& gm = mb.node("Gemm", {"f", "fc.w", "fc.b"}, {"y"}, "fc");
  ModelBuilder::attr_i(gm, "transB", 1);
  mb.output("y");
  const uint64_t batch = 4;
  const std::vector<float> x = random_floats(batch * 72, -1.0f, 1.0f, 12);
  const nn::QCnn q = compile_quantized_cnn(graph_of(mb), x, batch);
  ASSERT_EQ(q.convs.size(), 1u);
  EXPECT_TRUE(q.convs[0].max_pool && q.convs[0].relu);
  std::vector<int8_t> xq(x.size());
  for (size_t i = 0; i < x.size(); ++i) xq[i] = nn::quantize_value(x[i], q.input_scale);
  const std::vector<int8_t> pooled = nn::conv2d_int(q.convs[0], xq, batch);
  for (const int8_t v : pooled) ASSERT_GE(v, 0);
  Device dev = Device::open("ref", BackendConfig{});
  const runtime::CnnRunResult r = runtime::run_cnn(dev, q, xq, batch);
  EXPECT_FALSE(r.convs[0].host);
  EXPECT_EQ(r.convs[0].y, pooled);
  EXPECT_EQ(r.output_i32, nn::forward_cnn_int_raw(q, xq, batch));
}

TEST(MaxPool, UnsupportedCasesAreNamed) {
  const std::vector<float> x(50, 0.5f);
  // An Indices output nobody reads is not computed.
  EXPECT_FALSE(compile_quantized_cnn(graph_of(pool_model(5, 2, 2, 0, 0, 2, true)), x, 1).convs[0].indices);
  ModelBuilder mb = pool_model(5, 2, 2, 0, 0, 2);
  ModelBuilder::attr_i(*mb.graph().mutable_node(0), "storage_order", 2);
  expect_error([&] { (void)compile_quantized_cnn(graph_of(mb), x, 1); }, ErrorKind::kBadFile,
               {"node 'pool' (MaxPool)", "storage_order"});
  ModelBuilder nok = pool_model(5, 2, 2, 0, 0, 2);
  nok.graph().mutable_node(0)->mutable_attribute()->DeleteSubrange(0, 1);  // kernel_shape
  expect_error([&] { (void)compile_quantized_cnn(graph_of(nok), x, 1); }, ErrorKind::kBadFile,
               {"node 'pool' (MaxPool)", "kernel_shape"});
}

// MaxPool's Indices as a graph output (runtime/maxpool_indices.h): computed on the device, ONNX's
// flattened index of the first maximum of the int8 input (row-major, or column-major for
// storage_order=1); a Relu after the pool stays in the pool (the indices are of its input).
TEST(MaxPool, IndicesOutputRunsOnTheDevice) {
  for (int64_t order : {0, 1}) {
    SCOPED_TRACE(order);
    ModelBuilder mb;
    mb.input("x", {-1, 3, 7, 6});
    auto& p = mb.node("MaxPool", {"x"}, {"p", "idx"}, "pool");
    ModelBuilder::attr_ints(p, "kernel_shape", {3, 3});
    ModelBuilder::attr_ints(p, "strides", {2, 2});
    ModelBuilder::attr_ints(p, "pads", {1, 1, 1, 1});
    ModelBuilder::attr_i(p, "storage_order", order);
    mb.node("Relu", {"p"}, {"r"}, "relu");
    mb.output("r");
    mb.output("idx");
    const uint64_t batch = 3;
    std::vector<float> x = random_floats(batch * 126, -1.0f, 1.0f, 21);
    for (size_t i = 0; i < x.size(); i += 5) x[i] = -1.0f;  // ties (and ReLU would tie them at 0)
    const nn::QCnn q = compile_quantized_cnn(graph_of(mb), x, batch);
    ASSERT_EQ(q.convs.size(), 1u);
    EXPECT_TRUE(q.convs[0].indices && q.convs[0].relu);
    EXPECT_EQ(q.convs[0].indices_column_major, order == 1);
    ASSERT_EQ(q.outputs.size(), 2u);
    EXPECT_TRUE(q.outputs[1].indices && q.outputs[1].layer == 0 && q.outputs[1].name == "idx");
    std::vector<int8_t> xq(x.size());
    for (size_t i = 0; i < x.size(); ++i) xq[i] = nn::quantize_value(x[i], q.input_scale);
    Device dev = Device::open("ref", BackendConfig{});
    const runtime::CnnRunResult r = runtime::run_cnn(dev, q, xq, batch);
    EXPECT_EQ(r.convs[0].y, nn::conv2d_int(q.convs[0], xq, batch));
    EXPECT_EQ(r.convs[0].indices, runtime::max_pool_indices_host<int8_t>(q.convs[0].geom, xq, batch, order == 1));
  }
}

// bf16: the same Indices output (Bf16Cnn::indices_outputs) from run_cnn_bf16.
TEST(MaxPool, Bf16IndicesOutputRunsOnTheDevice) {
  ModelBuilder mb;
  mb.input("x", {-1, 3, 7, 6});
  auto& p = mb.node("MaxPool", {"x"}, {"p", "idx"}, "pool");
  ModelBuilder::attr_ints(p, "kernel_shape", {3, 3});
  ModelBuilder::attr_ints(p, "strides", {2, 2});
  ModelBuilder::attr_ints(p, "pads", {1, 1, 1, 1});
  mb.output("idx");
  mb.output("p");
  const uint64_t batch = 3;
  std::vector<float> x = random_floats(batch * 126, -1.0f, 1.0f, 22);
  for (size_t i = 0; i < x.size(); i += 5) x[i] = -1.0f;  // ties
  const Bf16Cnn net = compile_bf16_cnn(graph_of(mb));
  ASSERT_EQ(net.convs.size(), 1u);
  EXPECT_TRUE(net.convs[0].indices);
  ASSERT_EQ(net.indices_outputs.size(), 1u);
  EXPECT_EQ(net.indices_outputs[0].name, "idx");
  EXPECT_EQ(net.head.output_name, "p");
  Device dev = Device::open("ref", BackendConfig{});
  const runtime::CnnBf16RunResult r = runtime::run_cnn_bf16(dev, net, x, batch);
  std::vector<float> xb(x.size());
  for (size_t i = 0; i < x.size(); ++i) xb[i] = num::bf16_to_float(num::bf16_from_float(x[i]));
  EXPECT_EQ(r.convs[0].indices, runtime::max_pool_indices_host<float>(net.convs[0].geom, xb, batch, false));
}

// The PyTorch-exported Fashion-MNIST CNN: the float interpreter reproduces PyTorch's logits, int8 on
// the device (ref) is bit-exact with the integer pass and within 1 point of float accuracy.
TEST(MaxPool, FashionCnnFromPyTorch) {
  const std::string dir = std::string(TPUW_EXAMPLES_DIR) + "/fashion_mnist/";
  const Graph g = import_onnx_file(dir + "fashion_cnn.onnx");
  const npy::Array test_x = npy::load(dir + "fashion_test_x.npy");
  const npy::Array test_y = npy::load(dir + "fashion_test_y.npy");
  const npy::Array expected = npy::load(dir + "fashion_cnn_expected.npy");
  const uint64_t n = 300;  // a part of the 1000 committed images keeps the test quick
  std::vector<float> x;
  for (uint8_t b : test_x.view<uint8_t>().subspan(0, n * 784)) x.push_back(static_cast<float>(b));
  const Graph og = optimize(g);
  const auto t = interpret_float(og, x, n);
  const std::vector<float>& yf = t[static_cast<size_t>(og.outputs[0].value)];
  const std::span<const float> want = expected.view<float>();
  for (size_t i = 0; i < yf.size(); ++i) ASSERT_NEAR(yf[i], want[i], 2e-3) << "element " << i;

  const nn::QCnn q = compile_quantized_cnn(g, x, n);
  ASSERT_EQ(q.convs.size(), 4u);  // conv1, pool1, conv2, pool2
  EXPECT_TRUE(q.convs[1].max_pool && q.convs[3].max_pool);
  EXPECT_EQ(q.convs[3].geom.out_h(), 6u);  // ceil_mode: 11 -> 6
  std::vector<int8_t> xq(x.size());
  for (size_t i = 0; i < x.size(); ++i) xq[i] = nn::quantize_value(x[i], q.input_scale);
  Device dev = Device::open("ref", BackendConfig{});
  const runtime::CnnRunResult r = runtime::run_cnn(dev, q, xq, n);
  EXPECT_EQ(r.output_i32, nn::forward_cnn_int_raw(q, xq, n));
  const std::vector<float> yq = nn::dequantize_output(q.head, r.output_i32, n);
  const auto pf = nn::argmax_rows(yf, 10), pq = nn::argmax_rows(yq, 10);
  const std::span<const int64_t> labels = test_y.view<int64_t>();
  size_t ok_f = 0, ok_q = 0;
  for (uint64_t i = 0; i < n; ++i) {
    ok_f += pf[i] == labels[i];
    ok_q += pq[i] == labels[i];
  }
  const double acc_f = 100.0 * static_cast<double>(ok_f) / static_cast<double>(n);
  const double acc_q = 100.0 * static_cast<double>(ok_q) / static_cast<double>(n);
  EXPECT_GT(acc_f, 85.0);
  EXPECT_LE(std::fabs(acc_q - acc_f), 1.0) << "float " << acc_f << "%, int8 " << acc_q << "%";
}

}  // namespace
}  // namespace tpuw::compiler
