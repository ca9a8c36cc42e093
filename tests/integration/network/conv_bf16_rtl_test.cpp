// bf16 convolution as an implicit GEMM on the verilated device: rtl == ref == the CPU contract
// (conv2d_bf16_host) bit for bit, the same bytes moved and MXU rows streamed; the digits CNN in
// bf16 (examples/digits/digits_cnn.onnx) rtl == ref == forward_cnn_bf16_host.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "support/conv_geometry.h"
#include "tpuw/compiler/conv_bf16.h"
#include "tpuw/compiler/onnx_importer.h"
#include "tpuw/device.h"
#include "tpuw/runtime/conv_bf16.h"
#include "tpuw/runtime/npy.h"

namespace tpuw::runtime {
namespace {

std::vector<uint32_t> bits(std::span<const float> v) {
  std::vector<uint32_t> b;
  for (const float f : v) b.push_back(std::bit_cast<uint32_t>(f));
  return b;
}

using test::geom;

struct Case {
  unsigned array_n;
  ConvGeometry g;
  uint64_t batch;
  Bf16ConvLayer::Kind kind = Bf16ConvLayer::Kind::kConv;
  uint32_t group = 1;
};

Bf16ConvLayer make_layer(const Case& c, std::mt19937& rng, bool relu) {
  Bf16ConvLayer l;
  l.name = "layer";
  l.kind = c.kind;
  l.geom = c.g;
  const uint64_t T = uint64_t{c.g.kernel_h} * c.g.kernel_w, C = c.g.in_c, O = c.g.out_c;
  l.w.assign(O * C * T, 0.0f);
  l.bias.assign(O, 0.0f);
  if (c.kind == Bf16ConvLayer::Kind::kAvgPool) {
    for (uint64_t o = 0; o < O; ++o) {
      for (uint64_t t = 0; t < T; ++t) l.w[(o * C + o) * T + t] = 1.0f / static_cast<float>(T);
    }
    return l;
  }
  l.relu = relu;
  std::normal_distribution<float> wd(0.0f, static_cast<float>(1.0 / std::sqrt(static_cast<double>(C / c.group * T))));
  const uint64_t cg = C / c.group, og = O / c.group;
  for (uint64_t o = 0; o < O; ++o) {
    for (uint64_t ci = (o / og) * cg; ci < (o / og + 1) * cg; ++ci) {
      for (uint64_t t = 0; t < T; ++t) l.w[(o * C + ci) * T + t] = wd(rng);
    }
  }
  std::uniform_real_distribution<float> bd(-0.5f, 0.5f);
  for (float& b : l.bias) b = bd(rng);
  return l;
}

TEST(ConvBf16Rtl, MatchesTheContractAndRef) {
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  std::vector<Case> cases = {
      {16, geom(20, 9, 9, 18, 3, 1, 1, 1), 3},                                   // channel blocks 2 -> 2
      {16, geom(8, 10, 11, 16, 3, 2, 1, 1), 2},                                  // stride 2: four phases
      {16, geom(32, 8, 8, 32, 3, 1, 1, 1), 2, Bf16ConvLayer::Kind::kConv, 32},   // depthwise: zero tiles skipped
      {16, geom(16, 7, 7, 16, 7, 1, 1, 0), 3, Bf16ConvLayer::Kind::kAvgPool},    // global average pool
      {4, geom(5, 8, 7, 6, 3, 1, 2, 2), 2},                                      // dilation 2, N=4 (8-byte beat)
      {4, geom(32, 6, 6, 32, 3, 1, 1, 1), 5},                                    // N=4: weights streamed
  };
  cases[1].g.pad_bottom = 0;  // asymmetric
  std::mt19937 rng(11);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(testing::Message() << "case " << i << " N=" << c.array_n);
    const Bf16ConvLayer l = make_layer(c, rng, i % 2 == 0);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> x(c.batch * c.g.in_c * c.g.in_h * c.g.in_w);
    for (auto& v : x) v = d(rng);
    BackendConfig cfg;
    cfg.array_n = c.array_n;
    Device rtl = Device::open("rtl", cfg);
    Device ref = Device::open("ref", cfg);
    const ConvBf16RunResult a = run_conv2d_bf16(rtl, l, x, c.batch);
    const ConvBf16RunResult b = run_conv2d_bf16(ref, l, x, c.batch);
    const std::vector<uint32_t> want = bits(conv2d_bf16_host(l, x, c.batch, c.array_n));
    EXPECT_EQ(bits(a.y), want);
    EXPECT_EQ(bits(b.y), want);
    EXPECT_EQ(a.perf.mxu_active, b.perf.mxu_active);
    EXPECT_EQ(a.perf.mxu_active, a.plan.mxu_rows());
    EXPECT_EQ(a.perf.rd_bytes, b.perf.rd_bytes);
    EXPECT_EQ(a.perf.wr_bytes, b.perf.wr_bytes);
    EXPECT_EQ(a.perf.instret, a.instructions);
  }
}

TEST(ConvBf16Rtl, DigitsCnnMatchesRef) {
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  const std::string dir = std::string(TPUW_EXAMPLES_DIR) + "/digits/";
  const Bf16Cnn net = compiler::compile_bf16_cnn(compiler::import_onnx_file(dir + "digits_cnn.onnx"));
  const npy::Array test_x = npy::load(dir + "test_x.npy");
  const uint64_t batch = 16;
  std::vector<float> x;
  for (uint8_t v : test_x.view<uint8_t>().first(batch * 64)) x.push_back(static_cast<float>(v));
  Device rtl = Device::open("rtl", BackendConfig{});
  Device ref = Device::open("ref", BackendConfig{});
  const CnnBf16RunResult a = run_cnn_bf16(rtl, net, x, batch);
  const CnnBf16RunResult b = run_cnn_bf16(ref, net, x, batch);
  EXPECT_EQ(bits(a.output), bits(forward_cnn_bf16_host(net, x, batch, 16)));
  EXPECT_EQ(bits(a.output), bits(b.output));
  EXPECT_EQ(a.moved_bytes, b.moved_bytes);
}

}  // namespace
}  // namespace tpuw::runtime
