// Fixtures shared by the bf16 convolution backward tests (conv_train_bf16_test.cpp,
// train_programs_test.cpp): square geometries, normal weights, pool layers and the bit-for-bit check.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "support/conv_geometry.h"
#include "tpuw/runtime/conv_bf16.h"

namespace tpuw::runtime::conv_fixtures {

using test::geom;

inline std::vector<float> normal(size_t n, std::mt19937& rng, float sd) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

/// A Conv "conv": weights N(0, 1/(C*KH*KW)), bias 0.1.
inline Bf16ConvLayer conv_layer(const ConvGeometry& g, std::mt19937& rng) {
  Bf16ConvLayer l;
  l.name = "conv";
  l.geom = g;
  const uint64_t T = uint64_t{g.kernel_h} * g.kernel_w;
  l.w = normal(uint64_t{g.out_c} * g.in_c * T, rng, static_cast<float>(1.0 / std::sqrt(double(g.in_c) * double(T))));
  l.bias.assign(g.out_c, 0.1f);
  return l;
}

/// A pool "pool" of `kind`; an average pool has 1/(KH*KW) on the channel diagonal and bias 0.
inline Bf16ConvLayer pool_layer(const ConvGeometry& g, Bf16ConvLayer::Kind kind, const std::string& name = "pool") {
  Bf16ConvLayer l;
  l.name = name;
  l.kind = kind;
  l.geom = g;
  if (kind == Bf16ConvLayer::Kind::kAvgPool) {
    const uint64_t T = uint64_t{g.kernel_h} * g.kernel_w;
    l.w.assign(uint64_t{g.out_c} * g.in_c * T, 0.0f);
    for (uint64_t o = 0; o < g.out_c; ++o) {
      for (uint64_t t = 0; t < T; ++t) l.w[(o * g.in_c + o) * T + t] = 1.0f / static_cast<float>(T);
    }
    l.bias.assign(g.out_c, 0.0f);
  }
  return l;
}

/// A test case: one geometry at one array size and batch.
struct GeomCase {
  const char* what;
  unsigned array_n;
  ConvGeometry g;
  uint64_t batch;
};

inline void expect_bits(std::span<const float> got, std::span<const float> want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
        << what << " element " << i << ": device " << got[i] << ", contract " << want[i];
  }
}

}  // namespace tpuw::runtime::conv_fixtures
