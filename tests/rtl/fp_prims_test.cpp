// The floating-point primitives of rtl/prim (tpu_fp32_add, tpu_bf16_mul, tpu_fp32_to_bf16),
// each verilated alone, against the numerics contract (docs/numerics.md) on corner operands
// (zeros, subnormals, infinities, NaNs with any payload, the extremes of the normal range, exact
// ties, cancellation, overflow) crossed with each other and on random operands, bit for bit.
// The contract is tpuw/numerics.h (the reference model's implementation).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "Vtpu_bf16_mul.h"
#include "Vtpu_fp32_add.h"
#include "Vtpu_fp32_to_bf16.h"
#include "tpuw/numerics.h"
#include "verilated.h"

namespace {

namespace num = tpuw::num;

uint32_t oracle_add(uint32_t a, uint32_t b) { return num::add(a, b); }
uint32_t oracle_mul(uint16_t a, uint16_t b) { return num::mul_bf16(a, b); }
uint16_t oracle_to_bf16(uint32_t x) { return num::f32_to_bf16(x); }

std::vector<uint32_t> corners32() {
  std::vector<uint32_t> v = {
      0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x00400000u,  // zeros, subnormals
      0x00800000u, 0x80800000u, 0x00800001u, 0x00FFFFFFu, 0x01000000u,  // smallest normals
      0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F7FFFFEu, 0x7F000000u, 0x7E800000u,  // largest normals
      0x7F800000u, 0xFF800000u,                                         // infinities
      0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu, 0x7FBFFFFFu,  // NaNs
      0x3F800000u, 0xBF800000u, 0x3F800001u, 0xBF800001u, 0x3F7FFFFFu,  // around 1
      0x33800000u, 0x33800001u, 0xB3800000u, 0x34000000u, 0x4B000001u,  // ties against 1
      0x3FFFFFFFu, 0x40000000u, 0xC0000000u, 0x3F000000u, 0x7F7F0000u,
      0x7F7F8000u, 0x7F7FC000u, 0x7F7F7FFFu, 0x3F808000u, 0x3F818000u,  // bf16 rounding ties
      0x3F80FFFFu, 0x0080FFFFu, 0x00818000u};
  return v;
}

std::vector<uint16_t> corners16() {
  return {0x0000, 0x8000, 0x0001, 0x807F, 0x0080, 0x8080, 0x00FF, 0x0100, 0x7F7F, 0xFF7F,
          0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0xFFFF, 0x3F80, 0xBF80, 0x3FFF, 0x4000,
          0x1F80, 0x1F00, 0x2000, 0x5F80, 0x5F00, 0x5FFF, 0x6000, 0x2080, 0x207F, 0x1FFF};
}

struct Tb {
  std::unique_ptr<VerilatedContext> ctx = std::make_unique<VerilatedContext>();
};

std::string hex(uint32_t x) {
  char b[16];
  std::snprintf(b, sizeof b, "%08x", x);
  return b;
}

TEST(FpPrims, Fp32AddMatchesContract) {
  Tb tb;
  Vtpu_fp32_add m(tb.ctx.get(), "add");
  auto check = [&](uint32_t a, uint32_t b) {
    m.a_i = a;
    m.b_i = b;
    m.eval();
    ASSERT_EQ(hex(m.sum_o), hex(oracle_add(a, b))) << hex(a) << " + " << hex(b);
  };
  const auto c = corners32();
  for (uint32_t a : c)
    for (uint32_t b : c) {
      check(a, b);
      check(a, b ^ 0x80000000u);
    }
  std::mt19937 mt(11);
  auto rng = [&] { return static_cast<uint32_t>(mt()); };
  for (int i = 0; i < 400000; ++i) {
    uint32_t a = rng(), b = rng();
    switch (i % 5) {
      case 0: break;                                                  // anything
      case 1: b = (b & 0x807FFFFFu) | (a & 0x7F800000u); break;       // same exponent
      case 2: b = (b & 0x807FFFFFu) | ((a + ((rng() % 64) << 23)) & 0x7F800000u); break;
      case 3: b = (a ^ 0x80000000u) + (rng() % 8) - 4; break;         // cancellation
      case 4:                                                          // near under/overflow
        a = (a & 0x807FFFFFu) | ((rng() % 2 ? 1u + rng() % 8 : 250u + rng() % 5) << 23);
        b = (b & 0x807FFFFFu) | (a & 0x7F800000u);
        break;
    }
    check(a, b);
  }
}

TEST(FpPrims, Bf16MulMatchesContract) {
  Tb tb;
  Vtpu_bf16_mul m(tb.ctx.get(), "mul");
  auto check = [&](uint16_t a, uint16_t b) {
    m.a_i = a;
    m.b_i = b;
    m.eval();
    ASSERT_EQ(hex(m.prod_o), hex(oracle_mul(a, b))) << hex(a) << " * " << hex(b);
  };
  for (uint16_t a : corners16())
    for (uint16_t b : corners16()) check(a, b);
  // Every exponent pair with a few significands: covers every under/overflow boundary.
  std::mt19937 mt(12);
  auto rng = [&] { return static_cast<uint32_t>(mt()); };
  for (uint32_t ea = 0; ea < 256; ++ea)
    for (uint32_t eb = 0; eb < 256; ++eb)
      for (int r = 0; r < 2; ++r)
        check(static_cast<uint16_t>((rng() & 0x807Fu) | (ea << 7)),
              static_cast<uint16_t>((rng() & 0x807Fu) | (eb << 7)));
  for (int i = 0; i < 200000; ++i) check(static_cast<uint16_t>(rng()), static_cast<uint16_t>(rng()));
}

TEST(FpPrims, Fp32ToBf16MatchesContract) {
  Tb tb;
  Vtpu_fp32_to_bf16 m(tb.ctx.get(), "cvt");
  auto check = [&](uint32_t a) {
    m.a_i = a;
    m.eval();
    ASSERT_EQ(hex(m.bf16_o), hex(oracle_to_bf16(a))) << hex(a);
  };
  for (uint32_t a : corners32()) {
    check(a);
    check(a ^ 0x80000000u);
  }
  std::mt19937 mt(13);
  auto rng = [&] { return static_cast<uint32_t>(mt()); };
  for (int i = 0; i < 200000; ++i) {
    const uint32_t a = rng();
    check(a);
    check((a & 0xFFFF0000u) | 0x8000u);  // exact tie
    check((a & 0xFFFF0000u) | 0x7FFFu);
  }
}

}  // namespace
