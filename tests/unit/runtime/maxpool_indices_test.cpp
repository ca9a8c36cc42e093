// MaxPool with Indices on the device (tpuw/runtime/maxpool_indices.h), ref backend: the values
// equal run_max_pool / run_max_pool_bf16 bit for bit and the indices equal ONNX's (the first maximum
// in row-major window order, pads excluded, flattened over NCHW; storage_order=1 column-major), with
// many ties, pads, dilation, several channel blocks and tiles of images.
#include <gtest/gtest.h>

#include <random>

#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/nn/qconv.h"
#include "tpuw/numerics.h"
#include "tpuw/runtime/maxpool.h"
#include "tpuw/runtime/maxpool_indices.h"

namespace tpuw::runtime {
namespace {

struct PoolCase {
  uint32_t c, h, w, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
  uint64_t batch;
  unsigned array_n;
  bool relu;
};

ConvGeometry geometry(const PoolCase& c) {
  ConvGeometry g;
  g.in_c = g.out_c = c.c;
  g.in_h = c.h, g.in_w = c.w;
  g.kernel_h = c.kh, g.kernel_w = c.kw;
  g.stride_h = c.sh, g.stride_w = c.sw;
  g.dilation_h = c.dh, g.dilation_w = c.dw;
  g.pad_top = c.pt, g.pad_left = c.pl, g.pad_bottom = c.pb, g.pad_right = c.pr;
  return g;
}

// Pads of at most kernel - 1 on every side: every window holds an input pixel (as ONNX's).
const std::vector<PoolCase> kCases = {
    {2, 5, 5, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0, 3, 16, false},    // 2x2/2
    {2, 5, 5, 2, 2, 2, 2, 1, 1, 0, 0, 1, 1, 3, 16, false},    // ceil_mode: one extra end pad
    {2, 6, 6, 3, 3, 2, 2, 1, 1, 1, 1, 2, 2, 3, 16, true},     // pads 1 + ceil_mode, ReLU
    {3, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, 16, false},    // 3x3/1 pad 1
    {20, 9, 8, 3, 2, 2, 1, 1, 1, 1, 0, 0, 1, 3, 16, true},    // two channel blocks, asymmetric
    {5, 9, 9, 2, 2, 1, 1, 2, 2, 0, 0, 0, 0, 2, 16, false},    // dilation 2
    {6, 11, 10, 3, 3, 3, 2, 2, 1, 2, 1, 1, 2, 2, 4, false},   // N=4, stride 3x2, dilation 2x1
    {16, 11, 11, 2, 2, 2, 2, 1, 1, 0, 0, 1, 1, 40, 16, true}, // many images, several tiles
    {1, 5, 5, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 1, 16, false},    // ONNX's precomputed_pads shape
};

// Few distinct values (many ties), -128 included: a pad never wins over an input of -128.
std::vector<int8_t> tie_map(uint64_t n, std::mt19937& rng) {
  const int8_t vals[] = {-128, -128, -127, 0, 5, 5, 127};
  std::vector<int8_t> x(n);
  for (auto& v : x) v = vals[rng() % 7];
  return x;
}

std::vector<float> tie_map_bf16(uint64_t n, std::mt19937& rng) {
  const float vals[] = {-3.0f, -3.0f, -0.5f, 0.0f, 1.25f, 1.25f, 7.0f, 1000.0f};
  std::vector<float> x(n);
  for (auto& v : x) v = vals[rng() % 8];
  return x;
}

TEST(MaxPoolIndices, Int8ValuesAndOnnxIndices) {
  std::mt19937 rng(11);
  for (size_t i = 0; i < kCases.size(); ++i) {
    for (bool col : {false, true}) {
      const PoolCase& c = kCases[i];
      SCOPED_TRACE(testing::Message() << "case " << i << " column_major " << col);
      QConv2d l;
      l.name = "pool";
      l.max_pool = true;
      l.relu = c.relu;
      l.geom = geometry(c);
      const std::vector<int8_t> x = tie_map(c.batch * c.c * c.h * c.w, rng);
      BackendConfig cfg;
      cfg.array_n = c.array_n;
      Device dev = Device::open("ref", cfg);
      const MaxPoolIndicesRun r = run_max_pool_indices(dev, l, x, c.batch, col);
      EXPECT_EQ(r.values.y, nn::conv2d_int(l, x, c.batch));
      EXPECT_EQ(r.indices, max_pool_indices_host<int8_t>(l.geom, x, c.batch, col));
      EXPECT_GT(r.values.cycles, 0u);
      EXPECT_GE(r.values.moved_bytes, r.values.min_bytes);
    }
  }
}

TEST(MaxPoolIndices, Bf16ValuesAndOnnxIndices) {
  std::mt19937 rng(12);
  for (size_t i = 0; i < kCases.size(); ++i) {
    for (bool col : {false, true}) {
      const PoolCase& c = kCases[i];
      SCOPED_TRACE(testing::Message() << "case " << i << " column_major " << col);
      Bf16ConvLayer l;
      l.name = "pool";
      l.kind = Bf16ConvLayer::Kind::kMaxPool;  // a bf16 max pool has no ReLU of its own
      l.geom = geometry(c);
      const std::vector<float> x = tie_map_bf16(c.batch * c.c * c.h * c.w, rng);
      BackendConfig cfg;
      cfg.array_n = c.array_n;
      Device dev = Device::open("ref", cfg);
      const MaxPoolIndicesBf16Run r = run_max_pool_bf16_indices(dev, l, x, c.batch, col);
      EXPECT_EQ(r.values.y, run_max_pool_bf16(dev, l, x, c.batch).y);
      EXPECT_EQ(r.indices, max_pool_indices_host<float>(l.geom, x, c.batch, col));
    }
  }
}

TEST(MaxPoolIndices, OnnxPrecomputedCases) {
  // test_maxpool_with_argmax_2d_precomputed_pads and _strides (storage_order=1), int8 and bf16.
  std::vector<float> xf(25);
  std::vector<int8_t> xi(25);
  for (int k = 0; k < 25; ++k) xf[static_cast<size_t>(k)] = static_cast<float>(k + 1), xi[static_cast<size_t>(k)] = static_cast<int8_t>(k + 1);
  PoolCase pads{1, 5, 5, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 1, 16, false};
  PoolCase strides{1, 5, 5, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0, 1, 16, false};
  const std::vector<int64_t> want_pads = {12, 13, 14, 14, 14, 17, 18, 19, 19, 19, 22, 23, 24,
                                          24, 24, 22, 23, 24, 24, 24, 22, 23, 24, 24, 24};
  const std::vector<int64_t> want_strides = {6, 16, 8, 18};
  Device dev = Device::open("ref", BackendConfig{});
  for (int k = 0; k < 2; ++k) {
    const PoolCase& c = k == 0 ? pads : strides;
    const bool col = k == 1;
    QConv2d q;
    q.name = "pool";
    q.max_pool = true;
    q.geom = geometry(c);
    Bf16ConvLayer b;
    b.name = "pool";
    b.kind = Bf16ConvLayer::Kind::kMaxPool;
    b.geom = geometry(c);
    const std::vector<int64_t>& want = k == 0 ? want_pads : want_strides;
    EXPECT_EQ(run_max_pool_indices(dev, q, xi, 1, col).indices, want);
    EXPECT_EQ(run_max_pool_bf16_indices(dev, b, xf, 1, col).indices, want);
  }
}

TEST(MaxPoolIndices, TooLargeIsRefused) {
  ConvGeometry g = geometry({8, 1024, 1024, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0, 1, 16, false});
  Device dev = Device::open("ref", BackendConfig{});
  try {
    (void)plan_max_pool_indices(dev.info().params, g, 1, false);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("2^23"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tpuw::runtime
