// The MXU kernels of the ref backend (host/src/ref/ref_mxu.h): every SIMD level this CPU runs
// gives the scalar definition's bits (docs/numerics.md) on random operands full of specials,
// including the x86 boundary cases (tiny products, subnormal ACC words, NaN payloads), and the
// caller's floating-point environment is left as it was.
#include <cfenv>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "ref_mxu.h"
#include "tpuw/numerics.h"

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace tpuw::ref {
namespace {

constexpr uint32_t kN = 16;

uint16_t rand_bf16(std::mt19937& rng) {
  const auto v = static_cast<uint16_t>(rng());
  switch (rng() % 12) {
    case 0: return static_cast<uint16_t>(v & 0x8000u);
    case 1: return static_cast<uint16_t>((v & 0x807Fu) | 1u);                   // subnormal
    case 2: return static_cast<uint16_t>((v & 0x8000u) | 0x7F80u);              // inf
    case 3: return static_cast<uint16_t>(0x7F81u | (v & 0x807Fu));              // NaN, any payload
    case 4: return static_cast<uint16_t>((v & 0x807Fu) | 0x7E00u);              // huge
    case 5: return static_cast<uint16_t>((v & 0x807Fu) | (0x0080u + (v & 0x0380u)));  // 2^-126 .. 2^-119
    case 6: return static_cast<uint16_t>((v & 0x807Fu) | 0x3F00u);              // around 1: products near 2^-126
    default: return static_cast<uint16_t>((v & 0x807Fu) | (0x3C00u + (v & 0x0380u)));
  }
}

uint32_t rand_acc(std::mt19937& rng) {
  const auto v = static_cast<uint32_t>(rng());
  switch (rng() % 8) {
    case 0: return v & 0x807FFFFFu;                    // zero or subnormal
    case 1: return 0x7F800001u | (v & 0x803FFFFFu);    // NaN
    case 2: return (v & 0x80000000u) | 0x7F800000u;    // inf
    case 3: return (v & 0x807FFFFFu) | 0x00800000u;    // smallest binade: sums that go tiny
    default: return (v & 0x807FFFFFu) | ((110u + v % 40u) << 23);
  }
}

std::vector<SimdLevel> levels() {
  std::vector<SimdLevel> l;
  const SimdLevel best = best_simd_level();
  if (best == SimdLevel::kAvx2 || best == SimdLevel::kAvx512) l.push_back(SimdLevel::kAvx2);
  if (best == SimdLevel::kAvx512) l.push_back(SimdLevel::kAvx512);
  return l;
}

TEST(RefMxu, Bf16KernelsMatchTheScalarDefinition) {
  if (levels().empty()) GTEST_SKIP() << "no SIMD kernel on this CPU";
  std::mt19937 rng(1);
  for (int rep = 0; rep < 40; ++rep) {
    const uint64_t rows = 1 + rng() % 40;
    std::vector<uint8_t> a(rows * 2 * kN);
    for (size_t i = 0; i < a.size(); i += 2) {
      const uint16_t h = rand_bf16(rng);
      a[i] = static_cast<uint8_t>(h);
      a[i + 1] = static_cast<uint8_t>(h >> 8);
    }
    std::vector<uint16_t> w(kN * kN);
    for (auto& x : w) x = rand_bf16(rng);
    std::vector<uint32_t> acc0(rows * kN);
    for (auto& x : acc0) x = rand_acc(rng);
    for (bool accumulate : {false, true}) {
      std::vector<uint32_t> want = acc0;
      mxu_bf16(SimdLevel::kScalar, a.data(), rows, w.data(), kN, want.data(), accumulate);
      for (const SimdLevel l : levels()) {
        std::vector<uint32_t> got = acc0;
        mxu_bf16(l, a.data(), rows, w.data(), kN, got.data(), accumulate);
        ASSERT_EQ(got, want) << "level " << static_cast<int>(l) << " rep " << rep << " accumulate " << accumulate;
      }
    }
  }
}

TEST(RefMxu, Bf16BoundaryCases) {
  if (levels().empty()) GTEST_SKIP() << "no SIMD kernel on this CPU";
  // Row: a[0] = 2^-126, a[1] = 1 - 2^-8, a[2] = 2^-100, the rest 0. Column 0 of W: 1 - 2^-8
  // (product 2^-126 (1 - 2^-8): tiny before rounding -> 0), column 1: 2^-126 * 1, column 2: -1
  // (-2^-126 + ... ), column 3: a subnormal weight (DAZ).
  std::vector<uint16_t> w(kN * kN, 0);
  w[0] = 0x3F7F;
  w[1] = 0x3F80;
  w[2] = 0xBF80;
  w[3] = 0x0001;
  w[kN + 2] = 0x0080;  // row k=1, column 2: (1 - 2^-8) * 2^-126 -> 0, so column 2 = -2^-126 + 0
  w[2 * kN + 4] = 0x1380;  // row k=2, column 4: 2^-100 * 2^-24 -> 0 (tiny)
  const std::vector<uint16_t> row = {0x0080, 0x3F7F, 0x0D80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  std::vector<uint8_t> a(2 * kN);
  for (uint32_t k = 0; k < kN; ++k) {
    a[2 * k] = static_cast<uint8_t>(row[k]);
    a[2 * k + 1] = static_cast<uint8_t>(row[k] >> 8);
  }
  for (bool accumulate : {false, true}) {
    std::vector<uint32_t> acc0(kN, 0x00000001u);  // subnormal ACC words: read as +0
    acc0[5] = 0xFFC12345u;                         // a NaN with a payload: canonical out
    std::vector<uint32_t> want = acc0;
    mxu_bf16(SimdLevel::kScalar, a.data(), 1, w.data(), kN, want.data(), accumulate);
    EXPECT_EQ(want[0], 0u);
    EXPECT_EQ(want[1], 0x00800000u);
    EXPECT_EQ(want[2], 0x80800000u);
    EXPECT_EQ(want[4], 0u);
    EXPECT_EQ(want[5], accumulate ? num::kF32Nan : 0u);
    for (const SimdLevel l : levels()) {
      std::vector<uint32_t> got = acc0;
      mxu_bf16(l, a.data(), 1, w.data(), kN, got.data(), accumulate);
      EXPECT_EQ(got, want) << "level " << static_cast<int>(l);
    }
  }
}

TEST(RefMxu, Int8KernelsMatchTheScalarDefinition) {
  if (levels().empty()) GTEST_SKIP() << "no SIMD kernel on this CPU";
  std::mt19937 rng(2);
  for (int rep = 0; rep < 40; ++rep) {
    const uint64_t rows = 1 + rng() % 40;
    std::vector<int8_t> a(rows * kN);
    for (auto& x : a) x = static_cast<int8_t>(rep % 4 == 0 ? (rng() % 2 ? -128 : 127) : static_cast<int>(rng()));
    std::vector<uint16_t> w(kN * kN);
    for (auto& x : w) x = static_cast<uint16_t>(rep % 4 == 0 ? (rng() % 2 ? 0xFF80 : 0x807F) : rng());  // high byte ignored
    std::vector<uint32_t> acc0(rows * kN);
    for (auto& x : acc0) x = static_cast<uint32_t>(rng());
    for (bool accumulate : {false, true}) {
      std::vector<uint32_t> want = acc0;
      mxu_int8(SimdLevel::kScalar, a.data(), rows, w.data(), kN, want.data(), accumulate);
      for (const SimdLevel l : levels()) {
        std::vector<uint32_t> got = acc0;
        mxu_int8(l, a.data(), rows, w.data(), kN, got.data(), accumulate);
        ASSERT_EQ(got, want) << "level " << static_cast<int>(l) << " rep " << rep;
      }
    }
  }
}

TEST(RefMxu, FloatingPointEnvironmentIsRestored) {
#if defined(__x86_64__)
  const unsigned before = _mm_getcsr();
  std::vector<uint8_t> a(2 * kN, 0x3F);
  std::vector<uint16_t> w(kN * kN, 0x3F80);
  std::vector<uint32_t> acc(kN, 0);
  mxu_bf16(best_simd_level(), a.data(), 1, w.data(), kN, acc.data(), false);
  EXPECT_EQ(_mm_getcsr(), before);
#else
  GTEST_SKIP();
#endif
}

}  // namespace
}  // namespace tpuw::ref
