// Activation functions after convolutions (int8 lookup tables in the conv's ACTIVATE): the
// PyTorch blocks of examples/cnn_blocks/make_act_models.py (float interpreter = PyTorch, int8 on
// ref = the integer model bit for bit and within tolerance of PyTorch), and the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <iterator>

#include "compiler_testlib.h"
#include "tpuw/compiler/conv.h"
#include "tpuw/compiler/onnx_importer.h"
#include "tpuw/compiler/quantize.h"
#include "tpuw/device.h"
#include "tpuw/nn/quantize.h"
#include "tpuw/runtime/conv.h"
#include "tpuw/runtime/npy.h"

namespace tpuw::compiler {
namespace {

using testing::expect_error;
using testing::graph_of;
using testing::ModelBuilder;
using testing::random_floats;

struct ActBlock {
  std::string name;
  size_t layers, tables;
  double tol;
};

TEST(CnnActivations, PyTorchBlocks) {
  const std::string dir = std::string(TPUW_EXAMPLES_DIR) + "/cnn_blocks/";
  for (const ActBlock& b : {ActBlock{"mobilenet_block", 5, 2, 0.02}, ActBlock{"act_chain", 5, 5, 0.02}}) {
    SCOPED_TRACE(b.name);
    std::ifstream f(dir + b.name + ".onnx", std::ios::binary);
    ASSERT_TRUE(f.good());
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const Graph g = import_onnx_graph(bytes, b.name + ".onnx");
    const npy::Array xa = npy::load(dir + b.name + "_x.npy");
    const npy::Array ea = npy::load(dir + b.name + "_expected.npy");
    const std::vector<float> x(xa.view<float>().begin(), xa.view<float>().end());
    const std::span<const float> want = ea.view<float>();
    const uint64_t n = xa.shape[0];
    const Graph og = optimize(g);
    const auto t = interpret_float(og, x, n);
    const std::vector<float>& yf = t[static_cast<size_t>(og.outputs[0].value)];
    ASSERT_EQ(yf.size(), want.size());
    double ymax = 0;
    for (size_t i = 0; i < yf.size(); ++i) {
      ASSERT_NEAR(yf[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << "element " << i;
      ymax = std::max(ymax, std::fabs(static_cast<double>(want[i])));
    }
    const nn::QCnn q = compile_quantized_cnn(g, x, n);
    EXPECT_EQ(q.convs.size(), b.layers);
    size_t tables = 0;
    for (const nn::QConv2d& l : q.convs) tables += l.lut.empty() ? 0 : 1;
    EXPECT_EQ(tables, b.tables);
    std::vector<int8_t> xq(x.size());
    for (size_t i = 0; i < x.size(); ++i) xq[i] = nn::quantize_value(x[i], q.input_scale);
    Device dev = Device::open("ref", BackendConfig{});
    const runtime::CnnRunResult r = runtime::run_cnn(dev, q, xq, n);
    EXPECT_EQ(r.output_i32, nn::forward_cnn_int_raw(q, xq, n));
    std::vector<float> y(r.output_i32.size());
    if (q.has_head()) {
      y = nn::dequantize_output(q.head, r.output_i32, n);
    } else {
      for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(r.output_i32[i]) * q.map_scale();
    }
    ASSERT_EQ(y.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(y[i]) - want[i]));
    EXPECT_LE(worst, b.tol * ymax) << "int8: largest error " << worst << " of max " << ymax;
    if (q.has_head()) {  // the classifier's decision: int8 agrees with PyTorch on every image
      const uint64_t k = y.size() / n;
      uint64_t agree = 0;
      for (uint64_t i = 0; i < n; ++i) {
        const auto row = [&](auto v) { return std::max_element(v + i * k, v + (i + 1) * k) - (v + i * k); };
        agree += row(y.begin()) == row(want.begin()) ? 1 : 0;
      }
      EXPECT_EQ(agree, n);
    }
    std::cout << b.name << ": int8 max error " << worst / ymax << " of max |y|, " << r.cycles << " ref cycles for " << n
              << " images\n";
  }
}

TEST(CnnActivations, FunctionsWhereNoTableFitsAreNamed) {
  auto model = [](bool after_max, bool relu_after) {
    ModelBuilder mb;
    mb.input("x", {-1, 2, 6, 6});
    mb.init("w", {4, 2, 3, 3}, random_floats(72, -0.4f, 0.4f, 3));
    mb.node("Conv", {"x", "w"}, {"c"}, "conv");
    std::string cur = "c";
    if (after_max) {
      auto& p = mb.node("MaxPool", {"c"}, {"p"}, "pool");
      ModelBuilder::attr_ints(p, "kernel_shape", {2, 2});
      ModelBuilder::attr_ints(p, "strides", {2, 2});
      cur = "p";
    }
    mb.node("Sigmoid", {cur}, {relu_after ? "s" : "y"}, "sig");
    if (relu_after) mb.node("Relu", {"s"}, {"y"}, "relu");
    mb.output("y");
    return mb;
  };
  const std::vector<float> x = random_floats(2 * 72, -1.0f, 1.0f, 4);
  expect_error([&] { (void)compile_quantized_cnn(graph_of(model(true, false)), x, 2); }, ErrorKind::kUnsupported,
               {"node 'sig' (Sigmoid)", "not after a MaxPool"});
  expect_error([&] { (void)compile_quantized_cnn(graph_of(model(false, true)), x, 2); }, ErrorKind::kUnsupported,
               {"node 'relu' (Relu)"});
  const nn::QCnn q = compile_quantized_cnn(graph_of(model(false, false)), x, 2);
  ASSERT_EQ(q.convs.size(), 1u);
  EXPECT_EQ(q.convs[0].lut.size(), 256u);
  EXPECT_NE(q.convs[0].name.find("sig (Sigmoid)"), std::string::npos) << q.convs[0].name;
}

TEST(CnnOutputs, HiddenLayerMapNextToTheHead) {
  // x -> conv1 + Relu (also a graph output 'hidden') -> GlobalAveragePool -> Flatten -> Gemm -> y.
  ModelBuilder mb;
  mb.input("x", {-1, 2, 6, 6});
  mb.init("w", {8, 2, 3, 3}, random_floats(144, -0.4f, 0.4f, 5));
  mb.init("b", {8}, random_floats(8, -0.1f, 0.1f, 6));
  auto& c = mb.node("Conv", {"x", "w", "b"}, {"c"}, "conv1");
  ModelBuilder::attr_ints(c, "pads", {1, 1, 1, 1});
  mb.node("Relu", {"c"}, {"hidden"}, "relu1");
  mb.node("GlobalAveragePool", {"hidden"}, {"g"}, "gap");
  auto& f = mb.node("Flatten", {"g"}, {"f"}, "flatten");
  ModelBuilder::attr_i(f, "axis", 1);
  mb.init("fc.w", {3, 8}, random_floats(24, -0.5f, 0.5f, 7));
  mb.init("fc.b", {3}, random_floats(3, -0.1f, 0.1f, 8));
  auto& gm = mb.node("Gemm", {"f", "fc.w", "fc.b"}, {"y"}, "fc");
  ModelBuilder::attr_i(gm, "transB", 1);
  mb.output("y");
  mb.output("hidden");
  const uint64_t batch = 3;
  const std::vector<float> x = random_floats(batch * 72, -1.0f, 1.0f, 9);
  const nn::QCnn q = compile_quantized_cnn(graph_of(mb), x, batch);
  ASSERT_EQ(q.outputs.size(), 2u);
  EXPECT_EQ(q.outputs[0].name, "y");
  EXPECT_EQ(q.outputs[0].layer, -1);
  EXPECT_EQ(q.outputs[1].name, "hidden");
  ASSERT_EQ(q.outputs[1].layer, 0);
  EXPECT_TRUE(q.convs[0].relu);
  std::vector<int8_t> xq(x.size());
  for (size_t i = 0; i < x.size(); ++i) xq[i] = nn::quantize_value(x[i], q.input_scale);
  Device dev = Device::open("ref", BackendConfig{});
  const runtime::CnnRunResult r = runtime::run_cnn(dev, q, xq, batch);
  const std::vector<std::vector<int8_t>> maps = nn::forward_cnn_int_maps(q, xq, batch);
  EXPECT_EQ(r.convs[0].y, maps[0]);
  EXPECT_EQ(r.output_i32, nn::forward_cnn_int_raw(q, xq, batch));
  const Graph og = optimize(graph_of(mb));
  const auto t = interpret_float(og, x, batch);
  const std::vector<float>& hf = t[static_cast<size_t>(og.outputs[1].value)];
  ASSERT_EQ(hf.size(), maps[0].size());
  for (size_t i = 0; i < hf.size(); ++i) {
    EXPECT_NEAR(maps[0][i] * static_cast<double>(q.convs[0].out_scale), hf[i], 0.03 * 127 * q.convs[0].out_scale) << i;
  }
  // The conv's output before its Relu as a graph output: the Relu cannot fuse and is named.
  ModelBuilder pre = mb;
  pre.output("c");
  expect_error([&] { (void)compile_quantized_cnn(graph_of(pre), x, batch); }, ErrorKind::kUnsupported, {"node 'relu1' (Relu)"});
}

}  // namespace
}  // namespace tpuw::compiler
