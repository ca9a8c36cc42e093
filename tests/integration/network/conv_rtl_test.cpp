// Convolution as an implicit GEMM on the verilated device: rtl == ref == the integer CPU
// convolution bit for bit, and the two backends move the same bytes and stream the same MXU rows.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>

#include "support/conv_geometry.h"
#include "tpuw/compiler/conv.h"
#include "tpuw/compiler/onnx_importer.h"
#include "tpuw/device.h"
#include "tpuw/nn/quantize.h"
#include "tpuw/runtime/conv.h"
#include "tpuw/runtime/npy.h"

namespace tpuw::runtime {
namespace {

QConv2d random_layer(const ConvGeometry& g, std::mt19937& rng, bool relu) {
  QConv2d l;
  l.name = "conv";
  l.geom = g;
  l.relu = relu;
  std::uniform_int_distribution<int> w8(-127, 127);
  l.w_q.resize(uint64_t{g.out_c} * g.in_c * g.kernel_h * g.kernel_w);
  for (auto& v : l.w_q) v = static_cast<int8_t>(w8(rng));
  std::uniform_int_distribution<int32_t> bd(-20000, 20000);
  const double fan = static_cast<double>(g.in_c) * g.kernel_h * g.kernel_w;
  for (uint32_t o = 0; o < g.out_c; ++o) {
    l.bias_q.push_back(bd(rng));
    const nn::Requant rq = nn::quantize_multiplier((0.5 + 0.01 * o) / (64.0 * std::sqrt(fan)));
    l.mult.push_back(rq.mult);
    l.shift.push_back(rq.shift);
  }
  return l;
}

struct Case {
  unsigned array_n;
  ConvGeometry g;
  uint64_t batch;
};

using test::geom;

TEST(ConvRtl, MatchesCpuAndRef) {
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  std::vector<Case> cases = {
      {16, geom(20, 9, 9, 18, 3, 1, 1, 1), 3},   // channel blocks 2 -> 2, several images per tile
      {16, geom(8, 10, 11, 16, 3, 2, 1, 1), 2},  // stride 2: four phases
      {4, geom(5, 8, 7, 6, 3, 1, 2, 2), 2},      // dilation 2, N=4 (8-byte beat: padded rows)
      {4, geom(64, 6, 6, 32, 3, 1, 1, 1), 5},    // N=4: weights streamed through the WB ring
  };
  cases[1].g.pad_bottom = 0;  // asymmetric
  std::mt19937 rng(11);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(testing::Message() << "case " << i << " N=" << c.array_n);
    const QConv2d l = random_layer(c.g, rng, i % 2 == 0);
    std::uniform_int_distribution<int> d(-128, 127);
    std::vector<int8_t> x(c.batch * c.g.in_c * c.g.in_h * c.g.in_w);
    for (auto& v : x) v = static_cast<int8_t>(d(rng));
    BackendConfig cfg;
    cfg.array_n = c.array_n;
    Device rtl = Device::open("rtl", cfg);
    Device ref = Device::open("ref", cfg);
    const ConvRunResult a = run_conv2d(rtl, l, x, c.batch);
    const ConvRunResult b = run_conv2d(ref, l, x, c.batch);
    const std::vector<int8_t> want = nn::conv2d_int(l, x, c.batch);
    ASSERT_EQ(a.y.size(), want.size());
    EXPECT_EQ(a.y, want);
    EXPECT_EQ(b.y, want);
    EXPECT_EQ(a.perf.mxu_active, b.perf.mxu_active);
    EXPECT_EQ(a.perf.mxu_active, a.plan.mxu_rows());
    EXPECT_EQ(a.perf.rd_bytes, b.perf.rd_bytes);
    EXPECT_EQ(a.perf.wr_bytes, b.perf.wr_bytes);
    EXPECT_EQ(a.perf.instret, a.instructions);
  }
}

TEST(ConvRtl, SmallCnnMatchesCpuAndRef) {
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  std::mt19937 rng(5);
  nn::QCnn net;
  net.in_c = 3, net.in_h = 10, net.in_w = 10;
  net.convs.push_back(random_layer(geom(3, 10, 10, 12, 3, 1, 1, 1), rng, true));
  net.convs.push_back(random_layer(geom(12, 10, 10, 20, 3, 2, 1, 1), rng, true));  // -> 20 x 5 x 5
  net.convs[0].out_scale = 0.5f;
  net.convs[1].out_scale = 0.25f;
  // Head 500 -> 10, int32 output.
  nn::QLayer fc;
  fc.name = "fc";
  fc.k = 500, fc.n = 10;
  std::uniform_int_distribution<int> w8(-127, 127);
  for (uint32_t i = 0; i < fc.k * fc.n; ++i) fc.w_q.push_back(static_cast<int8_t>(w8(rng)));
  fc.bias_q.assign(10, 100);
  fc.int32_output = true;
  fc.out_scale.assign(10, 0.001f);
  net.head.input_features = 500;
  net.head.input_scale = 0.25f;
  net.head.layers.push_back(fc);
  std::uniform_int_distribution<int> d(-128, 127);
  const uint64_t batch = 6;
  std::vector<int8_t> x(batch * 300);
  for (auto& v : x) v = static_cast<int8_t>(d(rng));
  Device rtl = Device::open("rtl", BackendConfig{});
  Device ref = Device::open("ref", BackendConfig{});
  const CnnRunResult a = run_cnn(rtl, net, x, batch);
  const CnnRunResult b = run_cnn(ref, net, x, batch);
  EXPECT_EQ(a.output_i32, nn::forward_cnn_int_raw(net, x, batch));
  EXPECT_EQ(a.output_i32, b.output_i32);
  EXPECT_EQ(a.moved_bytes, b.moved_bytes);
}

// The PyTorch-exported digits CNN (examples/digits/digits_cnn.onnx) in int8: rtl == ref == CPU.
TEST(ConvRtl, DigitsCnnMatchesRef) {
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  const std::string dir = std::string(TPUW_EXAMPLES_DIR) + "/digits/";
  std::ifstream f(dir + "digits_cnn.onnx", std::ios::binary);
  ASSERT_TRUE(f.good());
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto floats = [](const npy::Array& a, size_t n) {
    std::vector<float> v;
    for (uint8_t b : a.view<uint8_t>().first(n)) v.push_back(static_cast<float>(b));
    return v;
  };
  const npy::Array calib_x = npy::load(dir + "calib_x.npy");
  const npy::Array test_x = npy::load(dir + "test_x.npy");
  const nn::QCnn q = compiler::compile_quantized_cnn(compiler::import_onnx_graph(bytes, "digits_cnn.onnx"),
                                                     floats(calib_x, calib_x.data.size()), calib_x.shape[0]);
  const uint64_t batch = 32;
  const std::vector<float> x = floats(test_x, batch * 64);
  std::vector<int8_t> xq(x.size());
  for (size_t i = 0; i < x.size(); ++i) xq[i] = nn::quantize_value(x[i], q.input_scale);
  Device rtl = Device::open("rtl", BackendConfig{});
  Device ref = Device::open("ref", BackendConfig{});
  const CnnRunResult a = run_cnn(rtl, q, xq, batch);
  const CnnRunResult b = run_cnn(ref, q, xq, batch);
  EXPECT_EQ(a.output_i32, nn::forward_cnn_int_raw(q, xq, batch));
  EXPECT_EQ(a.output_i32, b.output_i32);
  EXPECT_EQ(a.moved_bytes, b.moved_bytes);
  std::cout << "digits CNN on rtl N=16, batch " << batch << ": " << a.cycles << " cycles ("
            << a.cycles / batch << " per image), utilization " << a.utilization << ", " << a.moved_bytes
            << " bytes moved, layer minimum sum " << a.min_bytes << "\n";
}

}  // namespace
}  // namespace tpuw::runtime
