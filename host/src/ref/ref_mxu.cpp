// MXU kernels (ref_mxu.h): the scalar definition and the x86 SIMD kernels for N = 16.
// Built with -ffp-contract=off (host/src/ref/CMakeLists.txt): a fused multiply-add would skip the
// flush of tiny products.
#include "ref_mxu.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tpuw/numerics.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TPUW_REF_X86 1
#else
#define TPUW_REF_X86 0
#endif

namespace tpuw::ref {

namespace {

inline uint16_t bf16_at(const uint8_t* row, size_t e) { return static_cast<uint16_t>(row[2 * e] | (row[2 * e + 1] << 8)); }

void mxu_int8_scalar(const int8_t* a_rows, uint64_t rows, const uint16_t* w, uint32_t n, uint32_t* acc, bool accumulate) {
  std::vector<uint32_t> sum(n);
  for (uint64_t i = 0; i < rows; ++i) {
    std::fill(sum.begin(), sum.end(), 0u);
    const int8_t* a = a_rows + i * n;
    for (uint32_t k = 0; k < n; ++k) {
      const int32_t ak = a[k];
      if (ak == 0) continue;
      const uint16_t* wrow = w + static_cast<size_t>(k) * n;
      for (uint32_t c = 0; c < n; ++c) {
        sum[c] += static_cast<uint32_t>(ak * static_cast<int32_t>(static_cast<int8_t>(wrow[c] & 0xFFu)));
      }
    }
    uint32_t* out = acc + i * n;
    for (uint32_t c = 0; c < n; ++c) out[c] = accumulate ? out[c] + sum[c] : sum[c];
  }
}

void mxu_bf16_scalar(const uint8_t* a_rows, uint64_t rows, const uint16_t* w, uint32_t n, uint32_t* acc, bool accumulate) {
  std::vector<uint32_t> sum(n);
  std::vector<uint16_t> a(n);
  for (uint64_t i = 0; i < rows; ++i) {
    const uint8_t* row = a_rows + i * 2 * n;
    for (size_t k = 0; k < n; ++k) a[k] = bf16_at(row, k);
    std::fill(sum.begin(), sum.end(), 0u);
    for (size_t k = 0; k < n; ++k) {
      const uint16_t* wrow = w + k * n;
      for (size_t c = 0; c < n; ++c) sum[c] = num::mac_bf16(sum[c], a[k], wrow[c]);
    }
    uint32_t* out = acc + i * n;
    for (size_t c = 0; c < n; ++c) out[c] = accumulate ? num::add(out[c], sum[c]) : sum[c];
  }
}

#if TPUW_REF_X86

// MXCSR for the bf16 kernels: round to nearest even, FTZ (bit 15), DAZ (bit 6), all exceptions
// masked (bits 7..12); restored on scope exit.
class FpEnv {
 public:
  FpEnv() : saved_(_mm_getcsr()) { _mm_setcsr((saved_ & ~0x6000u) | 0x8040u | 0x1F80u); }
  ~FpEnv() { _mm_setcsr(saved_); }
  FpEnv(const FpEnv&) = delete;
  FpEnv& operator=(const FpEnv&) = delete;

 private:
  unsigned saved_;
};

constexpr uint32_t kN = 16;

// int8 weights as 16-bit pairs: pair j, column c holds (w[2j][c], w[2j+1][c]).
void int8_pairs(const uint16_t* w, int16_t (&wp)[8][2 * kN]) {
  for (uint32_t j = 0; j < kN / 2; ++j) {
    for (uint32_t c = 0; c < kN; ++c) {
      wp[j][2 * c] = static_cast<int8_t>(w[(2 * j) * kN + c] & 0xFFu);
      wp[j][2 * c + 1] = static_cast<int8_t>(w[(2 * j + 1) * kN + c] & 0xFFu);
    }
  }
}

__attribute__((target("avx2"))) void mxu_int8_avx2(const int8_t* a_rows, uint64_t rows, const uint16_t* w, uint32_t* acc,
                                                   bool accumulate) {
  alignas(32) int16_t wp[8][2 * kN];
  int8_pairs(w, wp);
  __m256i wv[8][2];
  for (int j = 0; j < 8; ++j) {
    wv[j][0] = _mm256_load_si256(reinterpret_cast<const __m256i*>(&wp[j][0]));
    wv[j][1] = _mm256_load_si256(reinterpret_cast<const __m256i*>(&wp[j][16]));
  }
  for (uint64_t i = 0; i < rows; ++i) {
    const __m256i a16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a_rows + i * kN)));
    alignas(32) int32_t ap[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(ap), a16);
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i b = _mm256_set1_epi32(ap[j]);
      s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(b, wv[j][0]));
      s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(b, wv[j][1]));
    }
    auto* out = reinterpret_cast<__m256i*>(acc + i * kN);
    if (accumulate) {
      s0 = _mm256_add_epi32(s0, _mm256_loadu_si256(out));
      s1 = _mm256_add_epi32(s1, _mm256_loadu_si256(out + 1));
    }
    _mm256_storeu_si256(out, s0);
    _mm256_storeu_si256(out + 1, s1);
  }
}

__attribute__((target("avx512f,avx512bw"))) void mxu_int8_avx512(const int8_t* a_rows, uint64_t rows,
                                                                  const uint16_t* w, uint32_t* acc, bool accumulate) {
  alignas(64) int16_t wp[8][2 * kN];
  int8_pairs(w, wp);
  __m512i wv[8];
  for (int j = 0; j < 8; ++j) wv[j] = _mm512_load_si512(&wp[j][0]);
  for (uint64_t i = 0; i < rows; ++i) {
    const __m256i a16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a_rows + i * kN)));
    alignas(32) int32_t ap[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(ap), a16);
    __m512i s0 = _mm512_madd_epi16(_mm512_set1_epi32(ap[0]), wv[0]);
    __m512i s1 = _mm512_madd_epi16(_mm512_set1_epi32(ap[1]), wv[1]);
    for (int j = 2; j < 8; j += 2) {
      s0 = _mm512_add_epi32(s0, _mm512_madd_epi16(_mm512_set1_epi32(ap[j]), wv[j]));
      s1 = _mm512_add_epi32(s1, _mm512_madd_epi16(_mm512_set1_epi32(ap[j + 1]), wv[j + 1]));
    }
    __m512i s = _mm512_add_epi32(s0, s1);
    uint32_t* out = acc + i * kN;
    if (accumulate) s = _mm512_add_epi32(s, _mm512_loadu_si512(out));
    _mm512_storeu_si512(out, s);
  }
}

inline float bf16_float(uint16_t h) {
  const uint32_t b = static_cast<uint32_t>(h) << 16;  // raw: DAZ flushes subnormals, NaNs stay NaN
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// One ACC write of fp32 lanes: + the ACC word when accumulating (the ACC word is the left operand;
// fp32 addition is commutative bit for bit), then NaNs made canonical.
__attribute__((target("avx2"))) inline void store_f32_avx2(uint32_t* out, __m256 s, bool accumulate) {
  if (accumulate) s = _mm256_add_ps(_mm256_loadu_ps(reinterpret_cast<const float*>(out)), s);
  const __m256i nan = _mm256_set1_epi32(static_cast<int>(num::kF32Nan));
  const __m256i r = _mm256_blendv_epi8(_mm256_castps_si256(s), nan, _mm256_castps_si256(_mm256_cmp_ps(s, s, _CMP_UNORD_Q)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), r);
}

__attribute__((target("avx512f,avx512bw"))) inline void store_f32_avx512(uint32_t* out, __m512 s, bool accumulate) {
  if (accumulate) s = _mm512_add_ps(_mm512_loadu_ps(out), s);
  const __mmask16 m = _mm512_cmp_ps_mask(s, s, _CMP_UNORD_Q);
  _mm512_storeu_si512(out, _mm512_mask_blend_epi32(m, _mm512_castps_si512(s), _mm512_set1_epi32(static_cast<int>(num::kF32Nan))));
}

// Rows are processed four at a time so that the four dependent add chains overlap.
__attribute__((target("avx2"))) void mxu_bf16_avx2(const uint8_t* a_rows, uint64_t rows, const uint16_t* w,
                                                   uint32_t* acc, bool accumulate) {
  FpEnv env;
  __m256 wv[kN][2];
  for (uint32_t k = 0; k < kN; ++k) {
    alignas(32) float t[kN];
    for (uint32_t c = 0; c < kN; ++c) t[c] = bf16_float(w[k * kN + c]);
    wv[k][0] = _mm256_load_ps(t);
    wv[k][1] = _mm256_load_ps(t + 8);
  }
  uint64_t i = 0;
  for (; i + 4 <= rows; i += 4) {
    __m256 s[4][2];
    for (auto& r : s) r[0] = r[1] = _mm256_setzero_ps();
    const uint8_t* base = a_rows + i * 2 * kN;
    for (uint32_t k = 0; k < kN; ++k) {
      for (int r = 0; r < 4; ++r) {
        const __m256 b = _mm256_set1_ps(bf16_float(bf16_at(base + r * 2 * kN, k)));
        s[r][0] = _mm256_add_ps(s[r][0], _mm256_mul_ps(b, wv[k][0]));
        s[r][1] = _mm256_add_ps(s[r][1], _mm256_mul_ps(b, wv[k][1]));
      }
    }
    for (int r = 0; r < 4; ++r) {
      store_f32_avx2(acc + (i + r) * kN, s[r][0], accumulate);
      store_f32_avx2(acc + (i + r) * kN + 8, s[r][1], accumulate);
    }
  }
  for (; i < rows; ++i) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    const uint8_t* row = a_rows + i * 2 * kN;
    for (uint32_t k = 0; k < kN; ++k) {
      const __m256 b = _mm256_set1_ps(bf16_float(bf16_at(row, k)));
      s0 = _mm256_add_ps(s0, _mm256_mul_ps(b, wv[k][0]));
      s1 = _mm256_add_ps(s1, _mm256_mul_ps(b, wv[k][1]));
    }
    store_f32_avx2(acc + i * kN, s0, accumulate);
    store_f32_avx2(acc + i * kN + 8, s1, accumulate);
  }
}

__attribute__((target("avx512f,avx512bw"))) void mxu_bf16_avx512(const uint8_t* a_rows, uint64_t rows,
                                                                  const uint16_t* w, uint32_t* acc, bool accumulate) {
  FpEnv env;
  __m512 wv[kN];
  for (uint32_t k = 0; k < kN; ++k) {
    alignas(64) float t[kN];
    for (uint32_t c = 0; c < kN; ++c) t[c] = bf16_float(w[k * kN + c]);
    wv[k] = _mm512_load_ps(t);
  }
  uint64_t i = 0;
  for (; i + 8 <= rows; i += 8) {
    __m512 s[8];
    for (auto& r : s) r = _mm512_setzero_ps();
    const uint8_t* base = a_rows + i * 2 * kN;
    for (uint32_t k = 0; k < kN; ++k) {
      for (int r = 0; r < 8; ++r) {
        s[r] = _mm512_add_ps(s[r], _mm512_mul_ps(_mm512_set1_ps(bf16_float(bf16_at(base + r * 2 * kN, k))), wv[k]));
      }
    }
    for (int r = 0; r < 8; ++r) store_f32_avx512(acc + (i + r) * kN, s[r], accumulate);
  }
  for (; i < rows; ++i) {
    __m512 s = _mm512_setzero_ps();
    const uint8_t* row = a_rows + i * 2 * kN;
    for (uint32_t k = 0; k < kN; ++k) s = _mm512_add_ps(s, _mm512_mul_ps(_mm512_set1_ps(bf16_float(bf16_at(row, k))), wv[k]));
    store_f32_avx512(acc + i * kN, s, accumulate);
  }
}

#endif  // TPUW_REF_X86

}  // namespace

SimdLevel best_simd_level() {
#if TPUW_REF_X86
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) return SimdLevel::kAvx512;
  if (__builtin_cpu_supports("avx2")) return SimdLevel::kAvx2;
#endif
  return SimdLevel::kScalar;
}

void mxu_int8(SimdLevel level, const int8_t* a, uint64_t rows, const uint16_t* w, uint32_t n, uint32_t* acc,
              bool accumulate) {
#if TPUW_REF_X86
  if (n == kN && level == SimdLevel::kAvx512) return mxu_int8_avx512(a, rows, w, acc, accumulate);
  if (n == kN && level == SimdLevel::kAvx2) return mxu_int8_avx2(a, rows, w, acc, accumulate);
#endif
  (void)level;
  mxu_int8_scalar(a, rows, w, n, acc, accumulate);
}

void mxu_bf16(SimdLevel level, const uint8_t* a, uint64_t rows, const uint16_t* w, uint32_t n, uint32_t* acc,
              bool accumulate) {
#if TPUW_REF_X86
  if (n == kN && level == SimdLevel::kAvx512) return mxu_bf16_avx512(a, rows, w, acc, accumulate);
  if (n == kN && level == SimdLevel::kAvx2) return mxu_bf16_avx2(a, rows, w, acc, accumulate);
#endif
  (void)level;
  mxu_bf16_scalar(a, rows, w, n, acc, accumulate);
}

}  // namespace tpuw::ref
