// tpuw/numerics.h against plain math: every rule of docs/numerics.md on hand-picked edge cases,
// then random bit patterns against an independent oracle (the host's IEEE float arithmetic with
// gradual underflow, flushed afterwards; long double to decide "tiny before rounding").
#include "tpuw/numerics.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <random>

namespace tpuw::num {
namespace {

constexpr uint32_t kPosZero = 0x00000000u, kNegZero = 0x80000000u;
constexpr uint32_t kOne = 0x3F800000u, kMinusOne = 0xBF800000u, kTwo = 0x40000000u;
constexpr uint32_t kMinNorm = 0x00800000u, kMaxFinite = 0x7F7FFFFFu;
constexpr uint32_t kSubMin = 0x00000001u, kSubMax = 0x007FFFFFu;
constexpr uint32_t kOddNan = 0x7F800001u, kNegNan = 0xFFC12345u;

uint32_t b(float f) { return to_bits(f); }

TEST(Numerics, ClassifyAndFlush) {
  EXPECT_TRUE(is_nan(kOddNan));
  EXPECT_TRUE(is_nan(kNegNan));
  EXPECT_FALSE(is_nan(kF32PosInf));
  EXPECT_TRUE(is_inf(kF32NegInf));
  EXPECT_TRUE(is_subnormal(kSubMin));
  EXPECT_FALSE(is_subnormal(kNegZero));
  EXPECT_EQ(ftz(kSubMin), kPosZero);
  EXPECT_EQ(ftz(kSubMax | kF32SignBit), kNegZero);
  EXPECT_EQ(ftz(kMinNorm), kMinNorm);
  EXPECT_EQ(ftz(kOddNan), kOddNan);  // ftz leaves NaN alone; canon makes it canonical
  EXPECT_EQ(canon(kNegNan), kF32Nan);
  EXPECT_EQ(canon(kSubMax), kPosZero);
}

TEST(Numerics, AddBasicsAndZeros) {
  EXPECT_EQ(add(kOne, kOne), kTwo);
  EXPECT_EQ(add(b(1.5f), b(2.25f)), b(3.75f));
  EXPECT_EQ(add(kOne, kMinusOne), kPosZero);    // x + (-x) = +0
  EXPECT_EQ(add(kNegZero, kNegZero), kNegZero);  // (-0) + (-0) = -0
  EXPECT_EQ(add(kPosZero, kNegZero), kPosZero);
  EXPECT_EQ(add(kNegZero, kPosZero), kPosZero);
  EXPECT_EQ(sub(kPosZero, kPosZero), kPosZero);
  EXPECT_EQ(sub(kNegZero, kPosZero), kNegZero);
  EXPECT_EQ(sub(kTwo, kOne), kOne);
}

TEST(Numerics, AddNanAndInfinities) {
  EXPECT_EQ(add(kOddNan, kOne), kF32Nan);
  EXPECT_EQ(add(kOne, kNegNan), kF32Nan);
  EXPECT_EQ(add(kF32PosInf, kOne), kF32PosInf);
  EXPECT_EQ(add(kF32NegInf, kMaxFinite), kF32NegInf);
  EXPECT_EQ(add(kF32PosInf, kF32NegInf), kF32Nan);  // inf - inf
  EXPECT_EQ(sub(kF32PosInf, kF32PosInf), kF32Nan);
  EXPECT_EQ(add(kF32PosInf, kF32PosInf), kF32PosInf);
}

TEST(Numerics, AddOverflowAndRoundingTies) {
  EXPECT_EQ(add(kMaxFinite, kMaxFinite), kF32PosInf);
  EXPECT_EQ(add(kMaxFinite | kF32SignBit, kMaxFinite | kF32SignBit), kF32NegInf);
  // 1 + 2^-24 is a tie between 1 and 1 + 2^-23: even -> 1.
  EXPECT_EQ(add(kOne, b(0x1p-24f)), kOne);
  // (1 + 2^-23) + 2^-24 is a tie between 1 + 2^-23 (odd) and 1 + 2^-22: even -> 1 + 2^-22.
  EXPECT_EQ(add(b(1.0f + 0x1p-23f), b(0x1p-24f)), b(1.0f + 0x1p-22f));
  // Just above the tie rounds up.
  EXPECT_EQ(add(kOne, b(0x1p-24f + 0x1p-47f)), b(1.0f + 0x1p-23f));
  // Far apart: the small operand only matters through rounding.
  EXPECT_EQ(add(b(0x1p100f), b(0x1p-100f)), b(0x1p100f));
}

TEST(Numerics, AddSubnormals) {
  // Subnormal inputs read as zero of the same sign.
  EXPECT_EQ(add(kSubMax, kOne), kOne);
  EXPECT_EQ(add(kSubMax, kSubMax), kPosZero);
  EXPECT_EQ(add(kSubMax | kF32SignBit, kNegZero), kNegZero);
  EXPECT_EQ(add(kSubMin | kF32SignBit, kPosZero), kPosZero);  // -0 + +0
  // A subnormal result of normals is flushed, sign of the exact result.
  const uint32_t a = b(1.5f * 0x1p-126f), c = kMinNorm | kF32SignBit;  // 1.5*2^-126 - 2^-126 = 2^-127
  EXPECT_EQ(add(a, c), kPosZero);
  EXPECT_EQ(add(a ^ kF32SignBit, kMinNorm), kNegZero);
  EXPECT_EQ(sub(b(0x1.000002p-126f), kMinNorm), kPosZero);
  // Exactly the smallest normal survives.
  EXPECT_EQ(sub(b(0x1p-125f), kMinNorm), kMinNorm);
}

TEST(Numerics, MulBasics) {
  EXPECT_EQ(mul(kTwo, b(3.0f)), b(6.0f));
  EXPECT_EQ(mul(kMinusOne, kPosZero), kNegZero);
  EXPECT_EQ(mul(kNegZero, kNegZero), kPosZero);
  EXPECT_EQ(mul(kF32PosInf, kPosZero), kF32Nan);
  EXPECT_EQ(mul(kF32NegInf, kNegZero), kF32Nan);
  EXPECT_EQ(mul(kF32NegInf, kTwo), kF32NegInf);
  EXPECT_EQ(mul(kF32NegInf, kMinusOne), kF32PosInf);
  EXPECT_EQ(mul(kOddNan, kPosZero), kF32Nan);
  EXPECT_EQ(mul(kMaxFinite, kTwo), kF32PosInf);
  EXPECT_EQ(mul(kMaxFinite, kMinusOne | 0x00400000u), kF32NegInf);  // * -1.5
  // Subnormal operand: zero; inf * subnormal = inf * 0 = NaN.
  EXPECT_EQ(mul(kSubMax, kMaxFinite), kPosZero);
  EXPECT_EQ(mul(kSubMax | kF32SignBit, kTwo), kNegZero);
  EXPECT_EQ(mul(kF32PosInf, kSubMin), kF32Nan);
  // RNE tie: (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 -> tie between 1 + 2^-11 and 1 + 2^-11 + 2^-23.
  const float x = 1.0f + 0x1p-12f;
  EXPECT_EQ(mul(b(x), b(x)), b(1.0f + 0x1p-11f));
}

TEST(Numerics, MulTinyBeforeRounding) {
  // The x86 boundary: an exact product just below 2^-126 that rounds up to 2^-126. x86 (tininess
  // after rounding, FTZ) returns 2^-126; the contract says tiny before rounding -> 0.
  const float a = 1.0f + 0x1p-23f;
  const uint32_t lo = b(0x1.fffffep-1f);  // 1 - 2^-24: (1 - 2^-24) * 2^-126 rounds to 2^-126
  EXPECT_EQ(mul(lo, kMinNorm), kPosZero);
  EXPECT_EQ(mul(lo | kF32SignBit, kMinNorm), kNegZero);
  // Exact product (1 - 2^-25)(1 + ...) style: (1 - 2^-24) * (1 + 2^-23) * 2^-126 < 2^-126 too.
  EXPECT_EQ(mul(b(0x1.fffffep-64f), b(0x1p-63f)), kPosZero);
  // Products at or above 2^-126 stay.
  EXPECT_EQ(mul(b(a), kMinNorm), b(a * 0x1p-126f));
  EXPECT_EQ(mul(b(0x1p-63f), b(0x1p-63f)), kMinNorm);
  // Far below: zero with the xor sign.
  EXPECT_EQ(mul(b(-0x1p-100f), b(0x1p-100f)), kNegZero);
}

TEST(Numerics, Bf16Conversions) {
  EXPECT_EQ(f32_to_bf16(kOne), 0x3F80);
  EXPECT_EQ(f32_to_bf16(kOddNan), kBf16Nan);
  EXPECT_EQ(f32_to_bf16(kNegNan), kBf16Nan);
  EXPECT_EQ(f32_to_bf16(kF32NegInf), 0xFF80);
  EXPECT_EQ(f32_to_bf16(kSubMax), 0x0000);
  EXPECT_EQ(f32_to_bf16(kSubMax | kF32SignBit), 0x8000);
  EXPECT_EQ(f32_to_bf16(kMaxFinite), 0x7F80);             // rounds past the largest bf16
  EXPECT_EQ(f32_to_bf16(0x7F7F7FFFu), 0x7F7F);            // just below the tie stays finite
  EXPECT_EQ(f32_to_bf16(0x7F7F8000u), 0x7F80);            // tie, odd -> up -> inf
  EXPECT_EQ(f32_to_bf16(0x3F808000u), 0x3F80);            // tie, even stays
  EXPECT_EQ(f32_to_bf16(0x3F818000u), 0x3F82);            // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(0x3F808001u), 0x3F81);            // above the tie
  EXPECT_EQ(f32_to_bf16(0x3F807FFFu), 0x3F80);            // below the tie
  EXPECT_EQ(f32_to_bf16(0x007FFFFFu + 1u), 0x0080);       // smallest normal
  EXPECT_EQ(f32_to_bf16(0x00FFFFFFu), 0x0100);            // rounds up across a binade
  EXPECT_EQ(bf16_to_f32(0x3F80), kOne);
  EXPECT_EQ(bf16_to_f32(0x7F81), kF32Nan);
  EXPECT_EQ(bf16_to_f32(0xFFC1), kF32Nan);
  EXPECT_EQ(bf16_to_f32(0x0001), kPosZero);
  EXPECT_EQ(bf16_to_f32(0x807F), kNegZero);
  EXPECT_EQ(bf16_to_f32(0xFF80), kF32NegInf);
  EXPECT_EQ(round_bf16(0x3F818000u), 0x3F820000u);
  EXPECT_EQ(round_bf16(kOddNan), kF32Nan);
  EXPECT_EQ(round_bf16(kSubMax | kF32SignBit), kNegZero);
  EXPECT_EQ(bf16_from_float(1.00390625f), 0x3F80);  // 1 + 2^-8: a tie, even -> 1
  EXPECT_EQ(bf16_to_float(0xC040), -3.0f);
}

TEST(Numerics, Bf16ProductsAreExact) {
  std::mt19937 rng(11);
  for (int i = 0; i < 20000; ++i) {
    const auto a = static_cast<uint16_t>(0x3000u + rng() % 0x1800u);  // moderate exponents
    const auto w = static_cast<uint16_t>(rng());
    const uint32_t p = mul_bf16(a, w);
    if (is_nan_bf16(w) || is_inf(bf16_to_f32(w))) continue;
    const long double exact = static_cast<long double>(bf16_to_float(a)) * bf16_to_float(w);
    if (std::fabs(exact) < 0x1p-126L || std::fabs(exact) >= 0x1p128L) continue;
    EXPECT_EQ(static_cast<long double>(to_float(p)), exact) << std::hex << a << " * " << w;
  }
  // Underflow and overflow of a product.
  EXPECT_EQ(mul_bf16(0x0080, 0x3F00), kPosZero);          // 2^-126 * 0.5
  EXPECT_EQ(mul_bf16(0x8080, 0x3F00), kNegZero);
  EXPECT_EQ(mul_bf16(0x7F00, 0x7F00), kF32PosInf);        // 2^127 * 2^127
  EXPECT_EQ(mul_bf16(0x7F80, 0x0000), kF32Nan);
  EXPECT_EQ(mul_bf16(0x7FC1, 0x3F80), kF32Nan);
}

TEST(Numerics, MacAndActivate) {
  EXPECT_EQ(mac_bf16(kPosZero, 0x3F80, 0x4000), kTwo);
  EXPECT_EQ(mac_bf16(kPosZero, 0x8000, 0x3F80), kPosZero);  // +0 + -0 = +0
  EXPECT_EQ(activate_bf16(kOne, 0, false, false), 0x3F80);
  EXPECT_EQ(activate_bf16(kOne, kMinusOne | 0x00400000u, true, false), 0xBF00);  // 1 - 1.5
  EXPECT_EQ(activate_bf16(kOne, kMinusOne | 0x00400000u, true, true), 0x0000);
  EXPECT_EQ(activate_bf16(kNegZero, 0, false, true), 0x0000);   // ReLU(-0) = +0
  EXPECT_EQ(activate_bf16(kNegZero, 0, false, false), 0x8000);
  EXPECT_EQ(activate_bf16(kNegNan, 0, false, true), kBf16Nan);   // ReLU(NaN) = NaN
  EXPECT_EQ(activate_bf16(kSubMax, 0, false, true), 0x0000);
  EXPECT_EQ(activate_bf16(kF32NegInf, 0, false, true), 0x0000);
  EXPECT_EQ(activate_bf16(kF32PosInf, kF32NegInf, true, true), kBf16Nan);
  EXPECT_EQ(activate_bf16(kMaxFinite, 0, false, false), 0x7F80);
}

TEST(Numerics, VectorLanes) {
  using spec::VecOp;
  const uint32_t half = b(0.5f), three = b(3.0f);
  EXPECT_EQ(vector_lane(VecOp::kAdd, kOne, kTwo, 0), three);
  EXPECT_EQ(vector_lane(VecOp::kSub, kOne, kTwo, 0), kMinusOne);
  EXPECT_EQ(vector_lane(VecOp::kMul, three, kTwo, 0), b(6.0f));
  EXPECT_EQ(vector_lane(VecOp::kAxpy, three, kTwo, half), b(3.5f));  // 3 * 0.5 + 2
  EXPECT_EQ(vector_lane(VecOp::kScale, three, kOddNan, half), b(1.5f));
  EXPECT_EQ(vector_lane(VecOp::kMax, kPosZero, kNegZero, 0), kNegZero);
  EXPECT_EQ(vector_lane(VecOp::kMax, kNegZero, kPosZero, 0), kPosZero);
  EXPECT_EQ(vector_lane(VecOp::kMax, kOne, kOddNan, 0), kF32Nan);
  EXPECT_EQ(vector_lane(VecOp::kMax, kNegNan, kOne, 0), kF32Nan);
  EXPECT_EQ(vector_lane(VecOp::kMax, kSubMax, kNegZero, 0), kNegZero);  // +0 > -0 is false
  EXPECT_EQ(vector_lane(VecOp::kMaxs, kMinusOne, 0, 0), kPosZero);     // ReLU
  EXPECT_EQ(vector_lane(VecOp::kMaxs, three, 0, 0), three);
  EXPECT_EQ(vector_lane(VecOp::kMaxs, three, 0, kOddNan), kF32Nan);
  EXPECT_EQ(vector_lane(VecOp::kSelect, kMinusOne, three, 0), kPosZero);
  EXPECT_EQ(vector_lane(VecOp::kSelect, kNegZero, three, 0), kPosZero);
  EXPECT_EQ(vector_lane(VecOp::kSelect, kSubMin, three, 0), kPosZero);  // flushed a = +0
  EXPECT_EQ(vector_lane(VecOp::kSelect, kOne, three, 0), three);
  EXPECT_EQ(vector_lane(VecOp::kSelect, kNegNan, three, 0), three);      // NaN a selects b
  EXPECT_EQ(vector_lane(VecOp::kSelect, kOne, kNegNan, 0), kF32Nan);
  EXPECT_EQ(vector_lane(VecOp::kSelect, kOne, kSubMax | kF32SignBit, 0), kNegZero);
  EXPECT_EQ(vector_lane(VecOp::kRoundBf16, 0x3F818000u, 0, 0), 0x3F820000u);
  EXPECT_EQ(colsum_step(colsum_step(kPosZero, kOne), kTwo), three);
  // IMAX (ISA 1.3): signed 32-bit integers, no flushing, no NaN rule.
  EXPECT_EQ(vector_lane(VecOp::kImax, 0xFFFFFF80u, 5u, 0), 5u);           // -128 < 5
  EXPECT_EQ(vector_lane(VecOp::kImax, 0xFFFFFF80u, 0xFFFFFF81u, 0), 0xFFFFFF81u);
  EXPECT_EQ(vector_lane(VecOp::kImax, 0x80000000u, 0x7FFFFFFFu, 0), 0x7FFFFFFFu);
  EXPECT_EQ(vector_lane(VecOp::kImax, 0x7FC00001u, 1u, 0), 0x7FC00001u);  // a NaN pattern is an int
  EXPECT_EQ(vector_lane(VecOp::kImax, 3u, 0x00000001u, 0), 3u);            // no flush-to-zero
  EXPECT_TRUE(vecop_reads_b(VecOp::kImax));
  EXPECT_TRUE(vecop_defined(10));
  EXPECT_FALSE(vecop_defined(11));
  EXPECT_TRUE(vecop_reads_b(VecOp::kSelect));
  EXPECT_FALSE(vecop_reads_b(VecOp::kColsum));
}

TEST(Numerics, SgdAxpyPassesMatchTheFormula) {
  // d = g + wd*w; v = m*v + d (v starting at +0 gives v = d exactly); w = w - lr*v.
  const float w = 0.75f, g = -0.125f, wd = 0.01f, m = 0.9f, lr = 0.05f;
  const uint32_t d = axpy(b(w), b(wd), b(g));
  const float p = w * wd;
  EXPECT_EQ(d, b(p + g));
  const uint32_t v = axpy(kPosZero, b(m), d);
  EXPECT_EQ(v, d);
  const uint32_t w1 = axpy(v, b(-lr), b(w));
  const float q = to_float(v) * -lr;
  EXPECT_EQ(w1, b(q + w));
}

// ---- Random cases against an independent oracle ----

// A random fp32 pattern biased to the interesting places: exponents near 0, 1, 126/127 (tiny
// products), 254/255, subnormals, zeros, infinities, NaNs.
uint32_t random_f32(std::mt19937& gen) {
  const auto rng = [&gen] { return static_cast<uint32_t>(gen()); };
  const uint32_t sign = (rng() & 1u) << 31;
  const uint32_t frac = rng() & 0x7FFFFFu;
  uint32_t exp = 0;
  switch (rng() % 8) {
    case 0: exp = 0; break;                               // zero / subnormal
    case 1: exp = 255; break;                             // inf / NaN
    case 2: exp = 1 + rng() % 4; break;                   // near the smallest normal
    case 3: exp = 251 + rng() % 4; break;                 // near overflow
    case 4: exp = 50 + rng() % 30; break;                 // products near 2^-126
    default: exp = rng() % 256; break;
  }
  uint32_t v = sign | (exp << 23) | frac;
  if (rng() % 16 == 0) v &= 0xFFFF8000u;                  // few significant bits: exact cases, ties
  return v;
}

// The oracle: the host's float arithmetic (IEEE, gradual underflow, round to nearest even) on
// flushed inputs, then the contract's output rules.
uint32_t oracle_add(uint32_t a, uint32_t c) {
  const float x = to_float(ftz(a)), y = to_float(ftz(c));
  const float r = x + y;
  if (std::isnan(r)) return kF32Nan;
  if (std::fpclassify(r) == FP_SUBNORMAL) return to_bits(r) & kF32SignBit;  // exact for a sum
  return to_bits(r);
}

uint32_t oracle_mul(uint32_t a, uint32_t c) {
  const float x = to_float(ftz(a)), y = to_float(ftz(c));
  const float r = x * y;
  if (std::isnan(r)) return kF32Nan;
  const long double exact = static_cast<long double>(x) * static_cast<long double>(y);
  if (std::fabs(exact) < 0x1p-126L) return (to_bits(x) ^ to_bits(y)) & kF32SignBit;
  return to_bits(r);
}

TEST(Numerics, RandomAddSubAgainstOracle) {
  std::mt19937 rng(2026);
  for (int i = 0; i < 400000; ++i) {
    const uint32_t a = random_f32(rng), c = random_f32(rng);
    ASSERT_EQ(add(a, c), oracle_add(a, c)) << std::hex << a << " + " << c;
    ASSERT_EQ(sub(a, c), oracle_add(a, c ^ kF32SignBit)) << std::hex << a << " - " << c;
  }
}

TEST(Numerics, RandomMulAgainstOracle) {
  std::mt19937 rng(7);
  for (int i = 0; i < 400000; ++i) {
    const uint32_t a = random_f32(rng), c = random_f32(rng);
    ASSERT_EQ(mul(a, c), oracle_mul(a, c)) << std::hex << a << " * " << c;
  }
}

TEST(Numerics, RandomBf16RoundTripAgainstOracle) {
  std::mt19937 rng(5);
  for (int i = 0; i < 400000; ++i) {
    const uint32_t a = random_f32(rng);
    const uint16_t h = f32_to_bf16(a);
    if (is_nan(a)) {
      ASSERT_EQ(h, kBf16Nan);
      continue;
    }
    // Oracle: round the flushed value to 8 significant bits in long double (RNE), overflow past
    // the largest bf16 (0x7F7F = (2 - 2^-7) * 2^127) rounds to infinity.
    const long double x = to_float(ftz(a));
    long double r = x;
    if (std::isfinite(x) && x != 0) {
      int e = 0;
      const long double m = std::frexp(x, &e);             // |m| in [0.5, 1)
      const long double scaled = std::ldexp(m, 8);         // 8 significant bits
      r = std::ldexp(std::nearbyint(scaled), e - 8);       // default rounding: nearest even
      if (std::fabs(r) >= 0x1p128L) r = std::copysign(static_cast<long double>(INFINITY), x);
    }
    ASSERT_EQ(static_cast<long double>(bf16_to_float(h)), r) << std::hex << a;
    ASSERT_EQ(std::signbit(bf16_to_float(h)), std::signbit(x)) << std::hex << a;
  }
}

}  // namespace
}  // namespace tpuw::num
