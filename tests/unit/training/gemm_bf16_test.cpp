// bf16 GEMM: the scalar contract (docs/numerics.md), the host contract model against plain
// double math, the program's structure, and the ref backend against the host model bit for bit
// (all four transpose combinations, odd sizes, partial tiles, epilogue, accumulation).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/runtime/gemm_bf16.h"
#include "tpuw/spec.h"

namespace tpuw::runtime {
namespace {

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }
float from_bits(uint32_t b) { return std::bit_cast<float>(b); }

std::vector<float> random_bf16(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = bf16::round(d(rng));
  return v;
}

TEST(Bf16Contract, Rounding) {
  EXPECT_EQ(bf16::from_float(1.0f), 0x3F80);
  // Ties to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 -> 1; 1 + 3*2^-8 -> 1 + 2^-6.
  EXPECT_EQ(bf16::from_float(from_bits(0x3F808000u)), 0x3F80);
  EXPECT_EQ(bf16::from_float(from_bits(0x3F818000u)), 0x3F82);
  EXPECT_EQ(bf16::from_float(from_bits(0x3F808001u)), 0x3F81);
  EXPECT_EQ(bf16::from_float(std::numeric_limits<float>::quiet_NaN()), 0x7FC0);
  EXPECT_EQ(bf16::from_float(from_bits(0xFF812345u)), 0x7FC0);           // any NaN is canonical
  EXPECT_EQ(bf16::from_float(from_bits(0x00000001u)), 0x0000);           // subnormal flushes
  EXPECT_EQ(bf16::from_float(from_bits(0x80400000u)), 0x8000);           // to a zero of its sign
  EXPECT_EQ(bf16::from_float(std::numeric_limits<float>::max()), 0x7F80);  // rounds past the largest bf16
  EXPECT_EQ(bits(bf16::to_float(0x0001)), 0u);                             // a subnormal bf16 reads as +0
}

TEST(Bf16Contract, AddAndMultiply) {
  const float tiny = std::numeric_limits<float>::min();  // 2^-126
  // Exact results below 2^-126 flush to a zero of their sign.
  EXPECT_EQ(bits(bf16::add(from_bits(0x00800001u), -tiny)), 0u);
  EXPECT_EQ(bits(bf16::add(-from_bits(0x00800001u), tiny)), 0x80000000u);
  EXPECT_EQ(bits(bf16::mul_exact(from_bits(0x20000000u), from_bits(0x20000000u))), 0x00800000u);  // 2^-126: normal
  EXPECT_EQ(bits(bf16::mul_exact(from_bits(0x1F800000u), from_bits(0x20000000u))), 0u);  // 2^-127: flushed
  EXPECT_EQ(bits(bf16::mul_exact(from_bits(0x9F800000u), from_bits(0x20000000u))), 0x80000000u);
  EXPECT_TRUE(std::isinf(bf16::mul_exact(from_bits(0x7F000000u), 4.0f)));
  EXPECT_EQ(bits(bf16::mul_exact(std::numeric_limits<float>::infinity(), 0.0f)), 0x7FC00000u);
  EXPECT_EQ(bits(bf16::add(std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity())),
            0x7FC00000u);
  EXPECT_EQ(bits(bf16::add(-0.0f, -0.0f)), 0x80000000u);
  EXPECT_EQ(bits(bf16::add(-0.0f, 0.0f)), 0u);
  EXPECT_EQ(bits(bf16::add(from_bits(0x00000010u), -0.0f)), 0u);            // subnormal input reads as +0
  EXPECT_EQ(bits(bf16::add(from_bits(0x80000010u), -0.0f)), 0x80000000u);   // ... or -0
}

struct Case {
  uint64_t m, k, n;
  bool ta, tb;
};

std::vector<float> naive(const Bf16GemmSpec& s, const std::vector<float>& a, const std::vector<float>& b) {
  const uint64_t M = s.shape.m, K = s.shape.k, N = s.shape.n;
  std::vector<float> c(M * N);
  for (uint64_t i = 0; i < M; ++i) {
    for (uint64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (uint64_t k = 0; k < K; ++k) {
        acc += static_cast<double>(s.trans_a ? a[k * M + i] : a[i * K + k]) *
               static_cast<double>(s.trans_b ? b[j * K + k] : b[k * N + j]);
      }
      c[i * N + j] = static_cast<float>(acc);
    }
  }
  return c;
}

TEST(Bf16GemmHost, CloseToPlainMath) {
  for (const Case& c : {Case{5, 40, 7, false, false}, Case{5, 40, 7, true, false}, Case{5, 40, 7, false, true},
                        Case{5, 40, 7, true, true}}) {
    Bf16GemmSpec s;
    s.shape = {c.m, c.k, c.n};
    s.trans_a = c.ta;
    s.trans_b = c.tb;
    const auto a = random_bf16(c.m * c.k, 3), b = random_bf16(c.k * c.n, 4);
    const auto got = gemm_bf16_host(s, 16, a, b);
    const auto want = naive(s, a, b);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * std::sqrt(c.k)) << i;
  }
}

TEST(Bf16GemmPlan, ProgramStructure) {
  const DeviceParams& p = *find_device_config(16);
  Bf16GemmSpec s;
  s.shape = {40, 50, 20};
  s.trans_a = true;
  s.trans_b = true;
  const Bf16GemmPlan plan = plan_gemm_bf16(p, s);
  EXPECT_EQ(plan.mp, 48u);
  EXPECT_EQ(plan.kp, 64u);
  EXPECT_EQ(plan.np, 32u);
  EXPECT_TRUE(plan.a_resident);
  const GemmProgram prog = compile_gemm_bf16(plan, {0, 1 << 20, 2 << 20, 3 << 20});
  uint64_t transposes = 0, loadw_t = 0, mm_bf16 = 0;
  for (const auto& w : prog.code) {
    const isa::Instr in = isa::decode(w);
    if (in.opcode == static_cast<uint8_t>(spec::Opcode::kTranspose)) {
      ++transposes;
      EXPECT_EQ(in.get("bf16"), 1u);
    }
    if (in.opcode == static_cast<uint8_t>(spec::Opcode::kLoadw)) loadw_t += in.get("transpose");
    if (in.opcode == static_cast<uint8_t>(spec::Opcode::kMatmul)) mm_bf16 += in.get("bf16");
  }
  EXPECT_EQ(transposes, 3u * 4u);                  // A resident: every (m chunk, k block) tile once
  EXPECT_EQ(loadw_t, plan.folds);                  // every weight tile enters transposed
  EXPECT_EQ(mm_bf16, plan.folds);
  Bf16GemmSpec bad = s;
  bad.relu = true;  // relu without the bf16 epilogue
  EXPECT_THROW((void)plan_gemm_bf16(p, bad), Error);
  bad = s;
  bad.shape.k = 0;
  EXPECT_THROW((void)plan_gemm_bf16(p, bad), Error);
}

// The ref backend against the host contract model, bit for bit. Skips while the backend lacks
// FEATURES.BF16 / TRANSPOSE (the reference model gains them on helper branch h-ref).
bool has_bf16(Device& dev) {
  const uint32_t need = spec::reg::kFeaturesBf16 | spec::reg::kFeaturesTranspose;
  return (dev.info().features & need) == need;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(bits(got[i]), bits(want[i])) << what << " element " << i << ": " << got[i] << " vs " << want[i];
  }
}

void run_case(Device& dev, const Bf16GemmSpec& s, uint32_t seed) {
  const uint64_t M = s.shape.m, K = s.shape.k, N = s.shape.n;
  const auto a = random_bf16(M * K, seed), b = random_bf16(K * N, seed + 1);
  const auto c_in = s.accumulate ? random_bf16(M * N, seed + 2, 4.0f) : std::vector<float>{};
  const auto bias = s.bias ? random_bf16(N, seed + 3) : std::vector<float>{};
  const Bf16GemmResult r = gemm_bf16(dev, s, a, b, c_in, bias);
  std::vector<float> z;
  const std::string what = fmt::format("M={} K={} N={} ta={} tb={} acc={} out={} bias={} relu={}", M, K, N, s.trans_a,
                                       s.trans_b, s.accumulate, s.bf16_out, s.bias, s.relu);
  expect_same_bits(r.c, gemm_bf16_host(s, dev.info().params.array_n, a, b, c_in, bias, &z), what);
  if (s.z_out) expect_same_bits(r.z, z, what + " Z");
  EXPECT_GT(r.cycles, 0u);
}

TEST(Bf16GemmRef, AllTransposeCombinationsOddSizes) {
  for (uint32_t an : {16u, 4u}) {
    BackendConfig cfg;
    cfg.array_n = an;
    Device dev = Device::open("ref", cfg);
    if (!has_bf16(dev)) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
    uint32_t seed = 10;
    for (const auto& [m, k, n] : std::vector<std::array<uint64_t, 3>>{
             {1, 1, 1}, {7, 13, 11}, {16, 16, 16}, {17, 31, 19}, {40, 70, 33}}) {
      for (int t = 0; t < 4; ++t) {
        Bf16GemmSpec s;
        s.shape = {m, k, n};
        s.trans_a = (t & 1) != 0;
        s.trans_b = (t & 2) != 0;
        run_case(dev, s, seed += 4);
      }
    }
  }
}

TEST(Bf16GemmRef, EpilogueAndAccumulate) {
  Device dev = Device::open("ref", BackendConfig{});
  if (!has_bf16(dev)) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
  uint32_t seed = 100;
  for (const auto& [m, k, n] : std::vector<std::array<uint64_t, 3>>{{9, 21, 35}, {33, 48, 16}}) {
    Bf16GemmSpec s;
    s.shape = {m, k, n};
    s.accumulate = true;
    run_case(dev, s, seed += 4);
    s.trans_b = true;
    run_case(dev, s, seed += 4);
    s = {};
    s.shape = {m, k, n};
    s.bf16_out = true;
    s.bias = true;
    s.relu = true;
    s.z_out = true;
    run_case(dev, s, seed += 4);
    s.relu = false;
    s.trans_a = true;
    run_case(dev, s, seed += 4);
    s = {};
    s.shape = {m, k, n};
    s.bias = true;  // fp32 output with the bias preloaded
    s.trans_b = true;
    run_case(dev, s, seed += 4);
  }
}

TEST(Bf16GemmRef, SpecialValues) {
  Device dev = Device::open("ref", BackendConfig{});
  if (!has_bf16(dev)) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
  Bf16GemmSpec s;
  s.shape = {5, 20, 6};
  auto a = random_bf16(100, 1, 1e30f), b = random_bf16(120, 2, 1e10f);
  a[3] = std::numeric_limits<float>::infinity();
  a[7] = std::numeric_limits<float>::quiet_NaN();
  b[5] = 0.0f;
  b[8] = from_bits(0x00400000u);  // subnormal: flushed
  a[50] = 1e-30f;
  b[60] = 1e-30f;
  const Bf16GemmResult r = gemm_bf16(dev, s, a, b);
  expect_same_bits(r.c, gemm_bf16_host(s, 16, a, b), "special values");
}

}  // namespace
}  // namespace tpuw::runtime
