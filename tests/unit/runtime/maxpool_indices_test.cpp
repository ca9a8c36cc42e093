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
#include "pool_cases.h"

namespace tpuw::runtime {
namespace {

using pool_cases::geometry;
using pool_cases::PoolCase;

const std::vector<PoolCase> kCases = [] {
  std::vector<PoolCase> v = pool_cases::attribute_cases();
  v.push_back({1, 5, 5, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 1, 16, false});  // ONNX's precomputed_pads shape
  return v;
}();

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
