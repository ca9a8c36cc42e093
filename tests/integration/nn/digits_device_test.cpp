// The digits MLP (examples/digits) on the device: int8 accuracy within 1 point of float on the
// held-out split, device output bit-identical to the CPU integer model, rtl == ref.
#include <gtest/gtest.h>

#include <string>

#include "tpuw/device.h"
#include "tpuw/nn/onnx_import.h"
#include "tpuw/nn/quantize.h"
#include "tpuw/runtime/network.h"
#include "tpuw/runtime/npy.h"

namespace tpuw::nn {
namespace {

const std::string kDir = std::string(TPUW_EXAMPLES_DIR) + "/digits/";

std::vector<float> as_float(const npy::Array& a) {
  const auto v = a.view<uint8_t>();
  return {v.begin(), v.end()};
}

double accuracy(std::span<const float> y, uint32_t classes, std::span<const uint8_t> labels) {
  const auto pred = argmax_rows(y, classes);
  size_t ok = 0;
  for (size_t i = 0; i < labels.size(); ++i) ok += pred[i] == labels[i];
  return static_cast<double>(ok) / static_cast<double>(labels.size());
}

struct Digits {
  FloatNetwork net = import_onnx(kDir + "digits_mlp.onnx");
  npy::Array test_x = npy::load(kDir + "test_x.npy");
  npy::Array test_y = npy::load(kDir + "test_y.npy");
  npy::Array calib_x = npy::load(kDir + "calib_x.npy");
  std::vector<float> x = as_float(test_x);
  uint64_t rows = test_x.shape[0];
  QNetwork q;
  std::vector<int8_t> x_q;
  Digits() {
    const std::vector<float> c = as_float(calib_x);
    q = quantize(net, c, calib_x.shape[0]);
    x_q = quantize_input(q, x);
  }
};

runtime::NetworkRunResult run_on(const char* backend, unsigned n, const Digits& d) {
  BackendConfig bc;
  bc.array_n = n;
  Device dev = Device::open(backend, bc);
  return runtime::run_network(dev, d.q, d.x_q, d.rows);
}

TEST(DigitsDevice, ModelShape) {
  const Digits d;
  ASSERT_EQ(d.net.layers.size(), 2u);
  EXPECT_EQ(d.net.input_features, 64u);
  EXPECT_EQ(d.net.layers[0].n, 32u);
  EXPECT_TRUE(d.net.layers[0].relu);
  EXPECT_EQ(d.net.layers[1].n, 10u);
  EXPECT_EQ(d.net.host_op, HostOp::kSoftmax);
  EXPECT_EQ(d.rows, 359u);
}

TEST(DigitsDevice, RefInt8AccuracyWithinOnePointOfFloatAndBitExact) {
  const Digits d;
  const runtime::NetworkRunResult r = run_on("ref", 16, d);
  EXPECT_EQ(r.output_i32, forward_int_raw(d.q, d.x_q, d.rows));
  const auto labels = d.test_y.view<uint8_t>();
  const double acc_f = accuracy(forward_float(d.net, d.x, d.rows), 10, labels);
  const double acc_q = accuracy(dequantize_output(d.q, r.output_i32, d.rows), 10, labels);
  EXPECT_GE(acc_f, 0.95);
  EXPECT_GE(acc_q, acc_f - 0.01) << "float " << acc_f << " int8 " << acc_q;
  EXPECT_GT(r.cycles, 0u);
  ASSERT_EQ(r.layers.size(), 2u);
  EXPECT_EQ(r.layers[0].m, d.rows);
  EXPECT_EQ(r.layers[0].mxu_active + r.layers[1].mxu_active, r.perf.mxu_active);
}

TEST(DigitsDevice, RtlN16BitIdenticalToRef) {
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  const Digits d;
  const runtime::NetworkRunResult ref = run_on("ref", 16, d);
  const runtime::NetworkRunResult rtl = run_on("rtl", 16, d);
  EXPECT_EQ(rtl.output_i32, ref.output_i32);
  EXPECT_EQ(rtl.output_i32, forward_int_raw(d.q, d.x_q, d.rows));
  EXPECT_EQ(rtl.perf.mxu_active, ref.perf.mxu_active);
  EXPECT_EQ(rtl.perf.rd_bytes, ref.perf.rd_bytes);
  EXPECT_EQ(rtl.perf.wr_bytes, ref.perf.wr_bytes);
}

// A deeper network with several k and n blocks and intermediate saturation corner cases, N=4.
TEST(DigitsDevice, RandomDeepMlpRtlN4MatchesGolden) {
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  FloatNetwork f;
  f.source = "random";
  f.input_features = 13;
  uint32_t k = 13;
  uint32_t seed = 5;
  for (uint32_t n : {9u, 17u, 6u}) {
    DenseLayer l;
    l.k = k;
    l.n = n;
    for (uint32_t i = 0; i < k * n; ++i) l.w.push_back(static_cast<float>((seed = seed * 1103515245u + 12345u) % 2001) / 1000.0f - 1.0f);
    for (uint32_t j = 0; j < n; ++j) l.b.push_back(static_cast<float>(j % 5) * 0.1f - 0.2f);
    l.relu = n != 6;
    f.layers.push_back(l);
    k = n;
  }
  const uint64_t rows = 21;
  std::vector<float> x;
  for (uint64_t i = 0; i < rows * 13; ++i) x.push_back(static_cast<float>((i * 37) % 23) / 11.0f - 1.0f);
  // Calibrate on half the range so that the other rows saturate somewhere.
  const std::vector<float> calib(x.begin(), x.begin() + 13 * 4);
  const QNetwork q = quantize(f, calib, 4);
  const auto xq = quantize_input(q, x);
  BackendConfig bc;
  bc.array_n = 4;
  Device dev = Device::open("rtl", bc);
  const auto r = runtime::run_network(dev, q, xq, rows);
  EXPECT_EQ(r.output_i32, forward_int_raw(q, xq, rows));
}

}  // namespace
}  // namespace tpuw::nn
