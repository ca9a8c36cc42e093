// The floating-point contract of ISA 1.1 (docs/numerics.md) as functions on bit patterns.
//
// One implementation of every rule, shared by the reference model, the runtime, the tests and
// the RTL testbenches: fp32 values are uint32_t bit patterns, bf16 values uint16_t. Every
// function here is exact with respect to the contract, independent of the host's floating-point
// environment as long as it rounds to nearest (the C++ default; do not call these with a
// directed rounding mode set) and the build does not use -ffast-math.
//
// How the arithmetic is done: an fp32 sum or product is computed in double, where a product of
// two fp32 values is exact and a sum is rounded once; converting that double to float is then
// correctly rounded (double has 53 >= 2*24 + 2 bits, so the double rounding of a sum is
// innocuous). The flush to zero of tiny results is decided on the double, i.e. before the final
// rounding, which is the contract's rule 3 (x86's own FTZ decides after rounding for products).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "tpuw/spec.h"

namespace tpuw::num {

// ---- Formats ----
inline constexpr uint32_t kF32Nan = 0x7FC00000u;   // the canonical fp32 NaN
inline constexpr uint16_t kBf16Nan = 0x7FC0u;      // the canonical bf16 NaN
inline constexpr uint32_t kF32SignBit = 0x80000000u;
inline constexpr uint32_t kF32PosInf = 0x7F800000u;
inline constexpr uint32_t kF32NegInf = 0xFF800000u;
inline constexpr uint16_t kBf16SignBit = 0x8000u;
inline constexpr double kMinNormal = 0x1p-126;      // smallest normal fp32 magnitude

inline float to_float(uint32_t bits) { return std::bit_cast<float>(bits); }
inline uint32_t to_bits(float f) { return std::bit_cast<uint32_t>(f); }

inline constexpr bool is_nan(uint32_t a) { return (a & 0x7FFFFFFFu) > kF32PosInf; }
inline constexpr bool is_inf(uint32_t a) { return (a & 0x7FFFFFFFu) == kF32PosInf; }
inline constexpr bool is_zero(uint32_t a) { return (a & 0x7FFFFFFFu) == 0; }
inline constexpr bool is_subnormal(uint32_t a) { return (a & 0x7F800000u) == 0 && (a & 0x007FFFFFu) != 0; }
inline constexpr bool sign_of(uint32_t a) { return (a & kF32SignBit) != 0; }
inline constexpr bool is_nan_bf16(uint16_t a) { return (a & 0x7FFFu) > 0x7F80u; }

/// Rule 1: a subnormal operand reads as a zero of the same sign; everything else is unchanged.
inline constexpr uint32_t ftz(uint32_t a) { return (a & 0x7F800000u) == 0 ? (a & kF32SignBit) : a; }

/// Rules 1 and 5 on an operand: flushed, and any NaN made canonical.
inline constexpr uint32_t canon(uint32_t a) { return is_nan(a) ? kF32Nan : ftz(a); }

/// Rules 2 and 3: the fp32 result of an exact (or once-rounded, see the file comment) double.
/// NaN -> canonical; |x| < 2^-126 -> a zero of x's sign; otherwise round to nearest even
/// (overflow to infinity by the conversion itself).
inline uint32_t from_double(double x) {
  if (std::isnan(x)) return kF32Nan;
  if (std::fabs(x) < kMinNormal) return std::signbit(x) ? kF32SignBit : 0u;
  return to_bits(static_cast<float>(x));
}

inline double to_double(uint32_t a) { return static_cast<double>(to_float(a)); }

// ---- fp32 arithmetic (rules 1-6) ----

/// a + b. Zeros as IEEE 754 (x + (-x) = +0, (-0) + (-0) = -0).
inline uint32_t add(uint32_t a, uint32_t b) {
  a = ftz(a);
  b = ftz(b);
  if (is_nan(a) || is_nan(b)) return kF32Nan;
  return from_double(to_double(a) + to_double(b));
}

/// a - b = a + (-b).
inline uint32_t sub(uint32_t a, uint32_t b) { return add(a, b ^ kF32SignBit); }

/// a * b; a product whose exact magnitude is below 2^-126 is a zero (sign = xor of the signs).
inline uint32_t mul(uint32_t a, uint32_t b) {
  a = ftz(a);
  b = ftz(b);
  if (is_nan(a) || is_nan(b)) return kF32Nan;
  return from_double(to_double(a) * to_double(b));  // exact in double; inf * 0 -> NaN
}

// ---- bf16 (rules 7, 8) ----

/// Rule 8: bf16 -> fp32, exact after flushing a subnormal and canonicalizing a NaN.
inline constexpr uint32_t bf16_to_f32(uint16_t h) { return canon(static_cast<uint32_t>(h) << 16); }

/// Rule 7: fp32 -> bf16, round to nearest even; NaN -> 0x7FC0; subnormal input -> +-0; a finite
/// value rounding past the largest bf16 becomes +-inf. Never subnormal.
inline constexpr uint16_t f32_to_bf16(uint32_t a) {
  if (is_nan(a)) return kBf16Nan;
  a = ftz(a);
  return static_cast<uint16_t>((a + 0x7FFFu + ((a >> 16) & 1u)) >> 16);
}

/// ROUND_BF16: fp32 -> bf16 -> fp32 (rule 7, then rule 8).
inline constexpr uint32_t round_bf16(uint32_t a) { return static_cast<uint32_t>(f32_to_bf16(a)) << 16; }

/// The MXU's bf16 x bf16 product, exact in fp32 except under/overflow (tiny -> +-0, huge -> +-inf).
inline uint32_t mul_bf16(uint16_t a, uint16_t b) { return mul(bf16_to_f32(a), bf16_to_f32(b)); }

/// Float conveniences (host data <-> device bit patterns).
inline uint16_t bf16_from_float(float f) { return f32_to_bf16(to_bits(f)); }
inline float bf16_to_float(uint16_t h) { return to_float(bf16_to_f32(h)); }

// ---- The MXU column and ACTIVATE in bf16 mode ----

/// One PE of a bf16 column: the partial sum from above plus this PE's product, rounded once.
inline uint32_t mac_bf16(uint32_t partial, uint16_t act, uint16_t weight) {
  return add(partial, mul_bf16(act, weight));
}

/// ACTIVATE bf16 on one element: x = acc (+ bias); ReLU keeps x > 0 and NaN, else +0; -> bf16.
inline uint16_t activate_bf16(uint32_t acc, uint32_t bias, bool use_bias, bool relu) {
  uint32_t x = canon(acc);
  if (use_bias) x = add(x, bias);
  if (relu && !is_nan(x) && !(to_float(x) > 0.0f)) x = 0;
  return f32_to_bf16(x);
}

// ---- VECTOR lanes ----

/// AXPY: (a * s) + b, two roundings.
inline uint32_t axpy(uint32_t a, uint32_t s, uint32_t b) { return add(mul(a, s), b); }

/// SCALE: a * s.
inline uint32_t scale(uint32_t a, uint32_t s) { return mul(a, s); }

/// MAX: canonical NaN if either is NaN, else a > b ? a : b (so MAX(+0, -0) = -0, MAX(-0, +0) = +0).
inline uint32_t vmax(uint32_t a, uint32_t b) {
  a = ftz(a);
  b = ftz(b);
  if (is_nan(a) || is_nan(b)) return kF32Nan;
  return to_float(a) > to_float(b) ? a : b;
}

/// MAXS: MAX with the scalar as b.
inline uint32_t vmaxs(uint32_t a, uint32_t s) { return vmax(a, s); }

/// SELECT: +0 if a <= 0, else b (a NaN selects b); b flushed and canonicalized.
inline uint32_t select(uint32_t a, uint32_t b) {
  a = ftz(a);
  if (!is_nan(a) && to_float(a) <= 0.0f) return 0;
  return canon(b);
}

/// IMAX (ISA 1.3): the larger of a and b as signed 32-bit integers (int8 MaxPool on int32 ACC words).
inline uint32_t imax(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a) > static_cast<int32_t>(b) ? a : b;
}

/// One COLSUM step: running + a (the running sum starts at +0, rows in order).
inline uint32_t colsum_step(uint32_t running, uint32_t a) { return add(running, a); }

/// One lane of an element-wise VECTOR op (every op but COLSUM, which is colsum_step over rows).
/// Returns the canonical NaN for COLSUM and undefined ops (the decoder rejects those).
inline uint32_t vector_lane(spec::VecOp op, uint32_t a, uint32_t b, uint32_t s) {
  switch (op) {
    case spec::VecOp::kAdd: return add(a, b);
    case spec::VecOp::kSub: return sub(a, b);
    case spec::VecOp::kMul: return mul(a, b);
    case spec::VecOp::kAxpy: return axpy(a, s, b);
    case spec::VecOp::kScale: return scale(a, s);
    case spec::VecOp::kMax: return vmax(a, b);
    case spec::VecOp::kMaxs: return vmaxs(a, s);
    case spec::VecOp::kSelect: return select(a, b);
    case spec::VecOp::kRoundBf16: return round_bf16(a);
    case spec::VecOp::kImax: return imax(a, b);
    case spec::VecOp::kColsum: break;
  }
  return kF32Nan;
}

/// Whether a VECTOR op value is defined (0 .. 10; IMAX since ISA 1.3).
inline constexpr bool vecop_defined(uint32_t op) { return op <= static_cast<uint32_t>(spec::VecOp::kImax); }

/// Whether a VECTOR op reads operand b (ADD, SUB, MUL, AXPY, MAX, SELECT, IMAX).
inline constexpr bool vecop_reads_b(spec::VecOp op) {
  switch (op) {
    case spec::VecOp::kAdd:
    case spec::VecOp::kSub:
    case spec::VecOp::kMul:
    case spec::VecOp::kAxpy:
    case spec::VecOp::kMax:
    case spec::VecOp::kSelect:
    case spec::VecOp::kImax: return true;
    default: return false;
  }
}

}  // namespace tpuw::num
