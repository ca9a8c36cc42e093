// The fp32 cells of the vector unit against the contract's C++ twin (tpuw/numerics.h):
// tpu_fp32_mul (the cell) and tpu_fp_pkg's add (the device's one fp32 adder) and
// fp32 -> bf16 -> fp32 rounding (through the test wrapper tpu_fp32_tb), on every pair of a corner
// list (zeros, subnormals, the smallest and largest normals, infinities, NaNs with payloads, ties)
// and on a million random pairs drawn to hit cancellation, exponent gaps, underflow right at
// 2^-126 and overflow.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "Vtpu_fp32_mul.h"
#include "Vtpu_fp32_tb.h"
#include "tpuw/numerics.h"
#include "verilated.h"

namespace {

namespace num = tpuw::num;

const std::vector<uint32_t>& corners() {
  static const std::vector<uint32_t> c = {
      0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x00400000u,  // zeros, subnormals
      0x00800000u, 0x80800000u, 0x00800001u, 0x00FFFFFFu,               // smallest normals
      0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F000000u, 0x7F7FFFFEu,               // largest normals
      0x7F800000u, 0xFF800000u,                                          // infinities
      0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu, 0x7FA00000u,  // NaNs
      0x3F800000u, 0xBF800000u, 0x3F800001u, 0x3FFFFFFFu, 0x40000000u,  // 1, -1, ...
      0x3F808000u, 0x3F818000u, 0x3F80C000u, 0x3F7FFFFFu, 0xBF7FFFFFu,  // bf16 ties
      0x1F800000u, 0x1F7FFFFFu, 0x20000000u, 0x5F800000u, 0x5F7FFFFFu,  // products near 2^-126 / 2^128
      0x33800000u, 0x34000000u, 0x4B800000u, 0xCB800001u, 0x4B7FFFFFu,  // 1 +- ulp gaps
  };
  return c;
}

// Random operands: sign and exponent chosen to make the interesting cases common.
uint32_t rnd_operand(std::mt19937& rng, uint32_t other) {
  std::uniform_int_distribution<uint32_t> any;
  const uint32_t r = any(rng);
  switch (r % 8) {
    case 0: return corners()[any(rng) % corners().size()];
    case 1: return (other ^ (any(rng) & 0x8000000Fu));                // near-cancellation
    case 2: return (other & 0xFF800000u) | (any(rng) & 0x807FFFFFu);  // same exponent
    case 3: {                                                          // exponent gap 0..30
      const uint32_t e = (other >> 23) & 0xFF, gap = any(rng) % 31;
      const uint32_t ne = e > gap ? e - gap : 1;
      return (any(rng) & 0x807FFFFFu) | (ne << 23);
    }
    case 4: return (any(rng) & 0x807FFFFFu) | ((0x30u + any(rng) % 0x20u) << 23);  // tiny products
    case 5: return (any(rng) & 0x807FFFFFu) | ((0xB0u + any(rng) % 0x20u) << 23);  // huge products
    case 6: return any(rng) & 0xFFFF0000u;                                          // bf16 values
    default: return any(rng);
  }
}

class Fp32Tb {
 public:
  Fp32Tb() : ctx_(std::make_unique<VerilatedContext>()) {
    mul_ = std::make_unique<Vtpu_fp32_mul>(ctx_.get(), "mul");
    tb_ = std::make_unique<Vtpu_fp32_tb>(ctx_.get(), "tb");
  }
  ~Fp32Tb() {
    mul_->final();
    tb_->final();
  }
  void check(uint32_t a, uint32_t b) {
    mul_->a_i = a;
    mul_->b_i = b;
    mul_->eval();
    tb_->a_i = a;
    tb_->b_i = b;
    tb_->eval();
    const uint32_t m = num::mul(a, b), s = num::add(a, b), r = num::round_bf16(a);
    ASSERT_EQ(mul_->prod_o, m) << std::hex << "mul " << a << " * " << b;
    ASSERT_EQ(tb_->mul_o, m) << std::hex << "mul_f " << a << " * " << b;
    ASSERT_EQ(tb_->add_o, s) << std::hex << "add " << a << " + " << b;
    ASSERT_EQ(tb_->round_o, r) << std::hex << "round_bf16 " << a;
  }

 private:
  std::unique_ptr<VerilatedContext> ctx_;
  std::unique_ptr<Vtpu_fp32_mul> mul_;
  std::unique_ptr<Vtpu_fp32_tb> tb_;
};

TEST(Fp32Cells, CornerPairsMatchTheContract) {
  Fp32Tb tb;
  for (uint32_t a : corners()) {
    for (uint32_t b : corners()) {
      tb.check(a, b);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(Fp32Cells, FlushBeforeRoundingAndOverflow) {
  Fp32Tb tb;
  // (2^-63 * (2 - 2^-23)) * 2^-63: exact product just below 2^-126 rounds up to 2^-126 in IEEE,
  // the contract flushes it.
  tb.check(0x207FFFFFu, 0x20000000u);
  tb.check(0x207FFFFFu, 0x20000001u);
  tb.check(0xA07FFFFFu, 0x20000000u);
  // Sums that cancel to below 2^-126 flush (exact), x + (-x) = +0, (-0) + (-0) = -0.
  tb.check(0x00800001u, 0x80800000u);
  tb.check(0x3F800000u, 0xBF800000u);
  tb.check(0x80000000u, 0x80000001u);
  // Overflow to infinity, rounding carry into the exponent.
  tb.check(0x7F7FFFFFu, 0x73000000u);
  tb.check(0x7F7FFFFFu, 0x3F800001u);
  tb.check(0x3FFFFFFFu, 0x3F800001u);
}

TEST(Fp32Cells, RandomPairsMatchTheContract) {
  Fp32Tb tb;
  std::mt19937 rng(1234);
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t a = rnd_operand(rng, static_cast<uint32_t>(rng()));
    const uint32_t b = rnd_operand(rng, a);
    if (i & 1) tb.check(a, b); else tb.check(b, a);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace
