// MaxPool (int8) on the verilated device (tpuw/runtime/maxpool.h): rtl == ref == the host max pool
// bit for bit, with the same bytes and instructions; bf16 (run_max_pool_bf16) likewise against its
// contract (max_pool_bf16_host).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "tpuw/device.h"
#include "tpuw/nn/qconv.h"
#include "tpuw/numerics.h"
#include "tpuw/runtime/maxpool.h"
#include "tpuw/runtime/maxpool_indices.h"

namespace tpuw::runtime {
namespace {

TEST(MaxPoolRtl, MatchesHostAndRef) {
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  struct Case {
    unsigned array_n;
    ConvGeometry g;
    uint64_t batch;
    bool relu;
  };
  std::vector<Case> cases(2);
  // 20 channels (two blocks) 9x9, 3x3 window, stride 2, pads 1 and ceil_mode's extra end pad, ReLU.
  cases[0].array_n = 16, cases[0].batch = 3, cases[0].relu = true;
  cases[0].g.in_c = cases[0].g.out_c = 20, cases[0].g.in_h = cases[0].g.in_w = 9;
  cases[0].g.kernel_h = cases[0].g.kernel_w = 3, cases[0].g.stride_h = cases[0].g.stride_w = 2;
  cases[0].g.pad_top = cases[0].g.pad_left = 1, cases[0].g.pad_bottom = cases[0].g.pad_right = 2;
  // N=4: 6 channels 8x7, 2x2 window, dilation 2, asymmetric pads.
  cases[1].array_n = 4, cases[1].batch = 2, cases[1].relu = false;
  cases[1].g.in_c = cases[1].g.out_c = 6, cases[1].g.in_h = 8, cases[1].g.in_w = 7;
  cases[1].g.kernel_h = cases[1].g.kernel_w = 2, cases[1].g.dilation_h = cases[1].g.dilation_w = 2;
  cases[1].g.pad_top = 1, cases[1].g.pad_right = 1;
  std::mt19937 rng(3);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(testing::Message() << "case " << i << " N=" << c.array_n);
    QConv2d l;
    l.name = "pool";
    l.max_pool = true;
    l.relu = c.relu;
    l.geom = c.g;
    std::uniform_int_distribution<int> d(-128, 127);
    std::vector<int8_t> x(c.batch * c.g.in_c * c.g.in_h * c.g.in_w);
    for (auto& v : x) v = static_cast<int8_t>(d(rng));
    BackendConfig cfg;
    cfg.array_n = c.array_n;
    Device rtl = Device::open("rtl", cfg);
    Device ref = Device::open("ref", cfg);
    const ConvRunResult a = run_max_pool(rtl, l, x, c.batch);
    const ConvRunResult b = run_max_pool(ref, l, x, c.batch);
    const std::vector<int8_t> want = nn::conv2d_int(l, x, c.batch);
    EXPECT_EQ(a.y, want);
    EXPECT_EQ(b.y, want);
    EXPECT_EQ(a.perf.mxu_active, b.perf.mxu_active);
    EXPECT_EQ(a.perf.rd_bytes, b.perf.rd_bytes);
    EXPECT_EQ(a.perf.wr_bytes, b.perf.wr_bytes);
    EXPECT_EQ(a.perf.instret, a.instructions);
    EXPECT_EQ(a.perf.instret, b.perf.instret);
  }
}

TEST(MaxPoolRtl, Bf16MatchesContractAndRef) {
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  Bf16ConvLayer l;
  l.name = "pool";
  l.kind = Bf16ConvLayer::Kind::kMaxPool;
  l.geom.in_c = l.geom.out_c = 18, l.geom.in_h = 7, l.geom.in_w = 7;
  l.geom.kernel_h = l.geom.kernel_w = 2, l.geom.stride_h = l.geom.stride_w = 2;
  l.geom.pad_bottom = l.geom.pad_right = 1;  // ceil_mode: 7 -> 4
  const uint64_t batch = 2;
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> d(-4.0f, 4.0f);
  std::vector<float> x(batch * 18 * 49);
  for (auto& v : x) v = num::bf16_to_float(num::bf16_from_float(d(rng)));
  Device rtl = Device::open("rtl", BackendConfig{});
  Device ref = Device::open("ref", BackendConfig{});
  const ConvBf16RunResult a = run_max_pool_bf16(rtl, l, x, batch);
  const ConvBf16RunResult b = run_max_pool_bf16(ref, l, x, batch);
  const std::vector<float> want = max_pool_bf16_host(l, x, batch, 16);
  ASSERT_EQ(a.y.size(), want.size());
  EXPECT_EQ(std::memcmp(a.y.data(), want.data(), want.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(b.y.data(), want.data(), want.size() * sizeof(float)), 0);
  EXPECT_EQ(a.perf.rd_bytes, b.perf.rd_bytes);
  EXPECT_EQ(a.perf.wr_bytes, b.perf.wr_bytes);
  EXPECT_EQ(a.perf.instret, b.perf.instret);
}

}  // namespace
}  // namespace tpuw::runtime

namespace tpuw::runtime {
namespace {

// MaxPool with Indices (tpuw/runtime/maxpool_indices.h): rtl == ref bit for bit, values and
// indices, both precisions, with ties, pads and two channel blocks; the indices are ONNX's.
TEST(MaxPoolRtl, IndicesMatchRefAndOnnx) {
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  ConvGeometry g;
  g.in_c = g.out_c = 18, g.in_h = 7, g.in_w = 6;
  g.kernel_h = g.kernel_w = 3, g.stride_h = g.stride_w = 2;
  g.pad_top = g.pad_left = 1, g.pad_bottom = g.pad_right = 2;
  const uint64_t batch = 2;
  std::mt19937 rng(9);
  std::vector<int8_t> xi(batch * 18 * 42);
  std::vector<float> xf(xi.size());
  const int8_t vals[] = {-128, -128, -3, 0, 4, 4, 127};
  for (size_t k = 0; k < xi.size(); ++k) {
    xi[k] = vals[rng() % 7];
    xf[k] = static_cast<float>(xi[k]) * 0.25f;
  }
  Device rtl = Device::open("rtl", BackendConfig{});
  Device ref = Device::open("ref", BackendConfig{});
  for (bool col : {false, true}) {
    SCOPED_TRACE(testing::Message() << "column_major " << col);
    QConv2d q;
    q.name = "pool";
    q.max_pool = true;
    q.relu = true;
    q.geom = g;
    const MaxPoolIndicesRun a = run_max_pool_indices(rtl, q, xi, batch, col);
    const MaxPoolIndicesRun b = run_max_pool_indices(ref, q, xi, batch, col);
    EXPECT_EQ(a.values.y, b.values.y);
    EXPECT_EQ(a.values.y, nn::conv2d_int(q, xi, batch));
    EXPECT_EQ(a.indices, b.indices);
    EXPECT_EQ(a.indices, max_pool_indices_host<int8_t>(g, xi, batch, col));
    EXPECT_EQ(a.values.perf.instret, b.values.perf.instret);
    EXPECT_EQ(a.values.perf.rd_bytes, b.values.perf.rd_bytes);
    Bf16ConvLayer l;
    l.name = "pool";
    l.kind = Bf16ConvLayer::Kind::kMaxPool;
    l.geom = g;
    const MaxPoolIndicesBf16Run c = run_max_pool_bf16_indices(rtl, l, xf, batch, col);
    const MaxPoolIndicesBf16Run d = run_max_pool_bf16_indices(ref, l, xf, batch, col);
    EXPECT_EQ(c.values.y, d.values.y);
    EXPECT_EQ(c.indices, d.indices);
    EXPECT_EQ(c.indices, max_pool_indices_host<float>(g, xf, batch, col));
    EXPECT_EQ(c.values.perf.instret, d.values.perf.instret);
  }
}

}  // namespace
}  // namespace tpuw::runtime
