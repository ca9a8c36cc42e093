// The MXU's arithmetic for a whole MATMUL (private to the ref backend): `rows` activation rows
// through one N x N weight tile into ACC rows. One scalar implementation that follows
// docs/numerics.md literally (through tpuw/numerics.h), and SIMD kernels for N = 16 that give the
// same bits faster:
//   int8: int32 sums are exact modulo 2^32, so any order works (pairs of int8 products through
//         16-bit multiply-add);
//   bf16: vectorized across the N columns (the column order k = 0 .. N-1 is kept per lane), with
//         MXCSR set to round-to-nearest-even, FTZ and DAZ around the kernel and restored after.
//         DAZ is rule 1; a bf16 x bf16 product has at most 16 significant bits, so x86's tininess
//         after rounding equals the contract's "tiny before rounding" (rule 3); a tiny sum of two
//         normals is exact either way; NaNs are made canonical at every ACC write (rule 5).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tpuw::ref {

enum class SimdLevel { kScalar, kAvx2, kAvx512 };

/// The best kernel level this CPU runs (AVX-512 F+BW, AVX2, or none).
SimdLevel best_simd_level();

/// int8 MATMUL: `a` holds `rows` rows of n int8 (row stride n bytes), `w` the 16-bit weight
/// registers [k*n + c] (the low byte is the int8 weight), `acc` `rows` rows of n words
/// (int32 as uint32). ACC = (accumulate ? ACC : 0) + sum_k a[k] * w[k][c], wrapping.
void mxu_int8(SimdLevel level, const int8_t* a, uint64_t rows, const uint16_t* w, uint32_t n, uint32_t* acc,
              bool accumulate);

/// bf16 MATMUL: `a` holds `rows` rows of n bf16 (little-endian, row stride 2n bytes), `w` the
/// bf16 weights [k*n + c], `acc` fp32 bit patterns. Column c of row i is
/// s = (((+0 + p0) + p1) + ...) + p_{n-1}; ACC = accumulate ? ACC + s : s (docs/numerics.md).
void mxu_bf16(SimdLevel level, const uint8_t* a, uint64_t rows, const uint16_t* w, uint32_t n, uint32_t* acc,
              bool accumulate);

}  // namespace tpuw::ref
