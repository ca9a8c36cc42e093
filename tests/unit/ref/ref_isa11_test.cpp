// ISA 1.1 in the reference model against plain math (tpuw/numerics.h): LOADW transpose and bf16,
// MATMUL bf16 (column order, accumulate), ACTIVATE bf16, TRANSPOSE, every VECTOR op, every new
// decode rule, and the build without bf16 (RefConfig::enable_bf16 = false).
#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ref_harness.h"
#include "tpuw/activate.h"
#include "tpuw/numerics.h"

namespace tpuw::ref::test {
namespace {

using spec::Fault;
using spec::Mem;
using spec::Opcode;
using spec::VecOp;

constexpr uint64_t kIn = 0x10000;   // host input area
constexpr uint64_t kIn2 = 0x30000;
constexpr uint64_t kOut = 0x50000;  // host output area

// ---- decode ----

struct Case {
  const char* what;
  isa::Word word;
  Fault cause;
  uint32_t info;
};

void check_cases(const std::vector<Case>& cases, const RefConfig& cfg = {}) {
  for (const auto& c : cases) {
    Dev d(small(), {}, cfg);
    d.submit({nop(), c.word, fence(1, 0x4000)});
    d.run(1'000'000);
    if (c.cause == Fault::kNone) {
      EXPECT_EQ(d.reg(r::kFaultCause), 0u) << c.what;
      EXPECT_EQ(d.reg(r::kFenceValue), 1u) << c.what;
      continue;
    }
    EXPECT_EQ(d.reg(r::kFaultCause), static_cast<uint32_t>(c.cause)) << c.what;
    EXPECT_EQ(d.reg(r::kFaultInfo), c.info) << c.what;
    EXPECT_EQ(d.reg(r::kFaultPc), kRing + 16u) << c.what;
    EXPECT_EQ(d.reg(r::kRingHead), 1u) << c.what;
  }
}

isa::Word with_bit(isa::Word w, unsigned bit) {
  isa::set_bits(w, bit, 1, 1);
  return w;
}

isa::Word vec(VecOp op, uint64_t dst, uint64_t a, uint64_t b, uint64_t rows, uint32_t s = 0, bool pop_prev = false,
              bool push_next = false) {
  return word(Opcode::kVector,
              {{"op", static_cast<uint64_t>(op)}, {"dst_addr", dst}, {"a_addr", a}, {"b_addr", b}, {"rows", rows},
               {"scalar", s}},
              pop_prev, push_next);
}

isa::Word vec_raw_op(uint64_t op, uint64_t rows) {
  return word(Opcode::kVector, {{"op", op}, {"dst_addr", 0}, {"a_addr", 0}, {"b_addr", 0}, {"rows", rows}});
}

isa::Word tr(uint64_t src, uint64_t dst, uint64_t rows, bool bf16, bool pop_prev = false, bool push_next = false) {
  return word(Opcode::kTranspose, {{"src_addr", src}, {"dst_addr", dst}, {"rows", rows}, {"bf16", bf16 ? 1u : 0u}},
              pop_prev, push_next);
}

isa::Word lw(uint64_t wb, bool transpose, bool bf16, bool pop_prev = false) {
  return word(Opcode::kLoadw, {{"wb_addr", wb}, {"transpose", transpose ? 1u : 0u}, {"bf16", bf16 ? 1u : 0u}},
              pop_prev);
}

isa::Word mm16(uint64_t ub, uint64_t acc, uint64_t rows, bool swap, bool accumulate = false, bool push_next = false) {
  return word(Opcode::kMatmul,
              {{"ub_addr", ub}, {"acc_addr", acc}, {"rows", rows}, {"swap", swap ? 1u : 0u},
               {"accumulate", accumulate ? 1u : 0u}, {"bf16", 1}},
              false, push_next);
}

isa::Word act16(uint64_t acc, uint64_t ub, uint64_t rows, bool bias, uint64_t bias_addr, bool relu,
                uint64_t qp = 0, bool push_next = false) {
  return word(Opcode::kActivate,
              {{"acc_addr", acc}, {"ub_addr", ub}, {"rows", rows}, {"bias", bias ? 1u : 0u}, {"bias_addr", bias_addr},
               {"relu", relu ? 1u : 0u}, {"qparam_addr", qp}, {"bf16", 1}},
              false, push_next);
}

// N = 4: UB 2048, WB 512, ACC 1024 rows.
TEST(RefIsa11Validation, NewRulesInTheContractsOrder) {
  check_cases({
      // LOADW
      {"loadw bf16 odd", lw(3, false, true), Fault::kIllegalField, 16},
      {"loadw bf16 fits", lw(504, true, true), Fault::kNone, 0},
      {"loadw bf16 counts pairs", lw(506, false, true), Fault::kLocalRange, 512},
      {"loadw int8 transpose", lw(508, true, false), Fault::kNone, 0},
      {"loadw int8 odd is fine", lw(3, true, false), Fault::kNone, 0},
      // MATMUL
      {"matmul bf16 rows=0 first", mm16(1, 0, 0, false), Fault::kIllegalField, 56},
      {"matmul bf16 odd ub", mm16(1, 0, 1, false), Fault::kIllegalField, 16},
      {"matmul bf16 fits", mm16(2040, 0, 4, false), Fault::kNone, 0},
      {"matmul bf16 counts pairs", mm16(2040, 0, 5, false), Fault::kLocalRange, 2048},
      {"matmul bf16 acc", mm16(0, 1020, 5, false), Fault::kLocalRange, 1024},
      // ACTIVATE
      {"activate bf16 odd ub", act16(0, 7, 1, false, 0, false), Fault::kIllegalField, 36},
      {"activate bf16 rows=0 first", act16(0, 7, 0, false, 0, false), Fault::kIllegalField, 56},
      {"activate bf16 counts pairs", act16(0, 2046, 2, false, 0, false), Fault::kLocalRange, 2048},
      {"activate bf16 acc", act16(1023, 0, 2, false, 0, false), Fault::kLocalRange, 1024},
      {"activate bf16 qparam unused", act16(0, 0, 1, false, 0, false, 0xFFFFF), Fault::kNone, 0},
      {"activate bf16 bias checked", act16(0, 0, 1, true, 1024, false), Fault::kLocalRange, 1024},
      // TRANSPOSE
      {"transpose rows=0", tr(0, 8, 0, false), Fault::kIllegalField, 56},
      {"transpose rows>N", tr(0, 8, 5, false), Fault::kIllegalField, 56},
      {"transpose rows>N before odd", tr(1, 8, 5, true), Fault::kIllegalField, 56},
      {"transpose bf16 odd src", tr(1, 8, 4, true), Fault::kIllegalField, 16},
      {"transpose bf16 odd dst", tr(2, 9, 4, true), Fault::kIllegalField, 36},
      {"transpose int8 src fits", tr(2044, 0, 4, false), Fault::kNone, 0},
      {"transpose int8 src", tr(2046, 0, 3, false), Fault::kLocalRange, 2048},
      {"transpose int8 dst", tr(0, 2045, 1, false), Fault::kLocalRange, 2048},
      {"transpose bf16 src pairs", tr(2042, 0, 4, true), Fault::kLocalRange, 2048},
      {"transpose bf16 dst pairs", tr(0, 2042, 1, true), Fault::kLocalRange, 2048},
      {"transpose overlap is fine", tr(0, 2, 4, true), Fault::kNone, 0},
      // VECTOR
      {"vector op 11", vec_raw_op(11, 1), Fault::kIllegalField, 12},  // 10 is IMAX since ISA 1.3
      {"vector op 15", vec_raw_op(15, 1), Fault::kIllegalField, 12},
      {"vector op before rows", vec_raw_op(12, 0), Fault::kIllegalField, 12},
      {"vector rows=0", vec(VecOp::kAdd, 0, 0, 0, 0), Fault::kIllegalField, 76},
      {"vector in place", vec(VecOp::kAdd, 4, 4, 4, 8), Fault::kNone, 0},
      {"vector dst = b", vec(VecOp::kAxpy, 4, 20, 4, 8), Fault::kNone, 0},
      {"vector disjoint", vec(VecOp::kSub, 0, 8, 16, 8), Fault::kNone, 0},
      {"vector dst overlaps a", vec(VecOp::kAdd, 5, 4, 40, 8), Fault::kIllegalField, 16},
      {"vector dst overlaps b", vec(VecOp::kMax, 4, 4, 11, 8), Fault::kIllegalField, 16},
      {"vector b unused may overlap", vec(VecOp::kScale, 4, 4, 6, 8), Fault::kNone, 0},
      {"vector b unused not checked", vec(VecOp::kMaxs, 0, 0, 0xFFFFF, 8), Fault::kNone, 0},
      {"vector b checked when read", vec(VecOp::kSelect, 0, 0, 1020, 8), Fault::kLocalRange, 1024},
      {"colsum dst inside a", vec(VecOp::kColsum, 3, 0, 0xFFFFF, 8), Fault::kNone, 0},
      {"colsum one dst row", vec(VecOp::kColsum, 1023, 0, 0, 8), Fault::kNone, 0},
      {"vector dst range", vec(VecOp::kRoundBf16, 1020, 0, 0, 8), Fault::kLocalRange, 1024},
      {"vector a range", vec(VecOp::kRoundBf16, 0, 1020, 0, 8), Fault::kLocalRange, 1024},
      {"vector overlap before range", vec(VecOp::kAdd, 1021, 1020, 0, 8), Fault::kIllegalField, 16},
  });
}

TEST(RefIsa11Validation, BuildWithoutBf16) {
  RefConfig no;
  no.enable_bf16 = false;
  {
    Dev d(small(), {}, no);
    EXPECT_EQ(d.reg(r::kFeatures), 0x5Fu);  // TRANSPOSE and LUT yes, BF16 no
  }
  check_cases(
      {
          {"vector", vec(VecOp::kAdd, 0, 0, 0, 1), Fault::kIllegalOpcode, 9},
          {"loadw bf16", lw(0, false, true), Fault::kIllegalField, 14},
          {"matmul bf16", mm16(0, 0, 1, false), Fault::kIllegalField, 14},
          {"activate bf16", act16(0, 0, 1, false, 0, false), Fault::kIllegalField, 14},
          {"transpose bf16", tr(0, 8, 1, true), Fault::kIllegalField, 14},
          {"lower reserved bit first", with_bit(lw(0, false, true), 13), Fault::kIllegalField, 13},
          {"bf16 bit before fields", mm16(1, 0, 0, false), Fault::kIllegalField, 14},
          {"int8 transpose works", tr(0, 8, 4, false), Fault::kNone, 0},
          {"loadw transpose works", lw(0, true, false), Fault::kNone, 0},
      },
      no);
}

// ISA 1.2 ACTIVATE `lut`: with bf16 it is ILLEGAL_FIELD (after rows), its table rows extend the
// qparam range (N = 4: 16 rows after the shift row), and a build without it reserves the bit.
isa::Word act_lut(uint64_t qp, uint64_t rows, bool bf16 = false) {
  return word(Opcode::kActivate,
              {{"acc_addr", 0}, {"ub_addr", 0}, {"rows", rows}, {"qparam_addr", qp}, {"lut", 1}, {"bf16", bf16 ? 1u : 0u}});
}

TEST(RefIsa12Validation, LutRules) {
  check_cases({
      {"lut rows=0 first", act_lut(0, 0, true), Fault::kIllegalField, 56},
      {"lut with bf16", act_lut(0, 1, true), Fault::kIllegalField, 15},
      {"lut table fits", act_lut(1024 - 18, 1), Fault::kNone, 0},
      {"lut table past the end", act_lut(1024 - 17, 1), Fault::kLocalRange, 1024},
      {"no lut: two rows only", word(Opcode::kActivate, {{"rows", 1}, {"qparam_addr", 1022}}), Fault::kNone, 0},
  });
  RefConfig no;
  no.enable_lut = false;
  {
    Dev d(small(), {}, no);
    EXPECT_EQ(d.reg(r::kFeatures), 0x3Fu);  // everything but LUT
  }
  check_cases({{"lut reserved", act_lut(0, 1), Fault::kIllegalField, 15}}, no);
}

// ---- data helpers ----

// A bf16 pattern for tests: mostly moderate values, sometimes zeros, subnormals, infinities, NaNs
// and huge values whose products overflow.
uint16_t rand_bf16(std::mt19937& rng) {
  const auto v = static_cast<uint16_t>(rng());
  switch (rng() % 16) {
    case 0: return static_cast<uint16_t>(v & 0x8000u);                          // +-0
    case 1: return static_cast<uint16_t>((v & 0x807Fu) | 1u);                   // subnormal
    case 2: return static_cast<uint16_t>((v & 0x8000u) | 0x7F80u);              // +-inf
    case 3: return static_cast<uint16_t>(0x7F81u | (v & 0x803Fu));              // NaN (any payload)
    case 4: return static_cast<uint16_t>((v & 0x807Fu) | 0x7E00u);              // huge: 2^125..
    case 5: return static_cast<uint16_t>((v & 0x807Fu) | 0x0100u);              // tiny normal 2^-125
    default: return static_cast<uint16_t>((v & 0x807Fu) | (0x3C00u + (v & 0x0380u)));  // ~2^-7 .. 2^7
  }
}

uint32_t rand_f32(std::mt19937& rng) {
  const auto v = static_cast<uint32_t>(rng());
  switch (rng() % 12) {
    case 0: return v & 0x80000000u;
    case 1: return (v & 0x807FFFFFu) | 1u;                    // subnormal
    case 2: return (v & 0x80000000u) | 0x7F800000u;           // inf
    case 3: return 0x7F800001u | (v & 0x803FFFFFu);           // NaN
    case 4: return (v & 0x807FFFFFu) | 0x7F000000u;           // huge
    case 5: return (v & 0x807FFFFFu) | 0x00800000u;           // smallest binade
    default: return (v & 0x807FFFFFu) | ((100u + v % 56u) << 23);  // 2^-27 .. 2^28
  }
}

// Runs `prog` + FENCE; expects no fault.
void run_ok(Dev& d, std::vector<isa::Word> prog) {
  prog.push_back(fence(77, 0x4000));
  d.submit(prog);
  d.run();
  ASSERT_EQ(d.reg(r::kFaultCause), 0u) << "fault info " << d.reg(r::kFaultInfo);
  ASSERT_EQ(d.reg(r::kFenceValue), 77u);
}

// ---- MATMUL / LOADW bf16 ----

struct Bf16Gemm {
  uint32_t n, m;
  std::vector<uint16_t> act;     // m x n (row i = UB row pair)
  std::vector<uint16_t> tile;    // n x n (row r = WB row pair)
  std::vector<uint32_t> acc0;    // m x n initial ACC (accumulate)
};

// Plain math of docs/numerics.md: column c = (((+0 + p0) + p1) + ...), then + ACC when accumulating.
std::vector<uint32_t> expected_gemm(const Bf16Gemm& g, bool transpose, bool accumulate) {
  std::vector<uint32_t> out(static_cast<size_t>(g.m) * g.n);
  for (uint32_t i = 0; i < g.m; ++i) {
    for (uint32_t c = 0; c < g.n; ++c) {
      uint32_t s = 0;
      for (uint32_t k = 0; k < g.n; ++k) {
        const uint16_t w = transpose ? g.tile[c * g.n + k] : g.tile[k * g.n + c];
        s = num::add(s, num::mul(num::bf16_to_f32(g.act[i * g.n + k]), num::bf16_to_f32(w)));
      }
      out[i * g.n + c] = accumulate ? num::add(g.acc0[i * g.n + c], s) : s;
    }
  }
  return out;
}

std::vector<uint32_t> run_gemm(const DeviceParams& p, const Bf16Gemm& g, bool transpose, bool accumulate) {
  Dev d(p);
  const uint32_t n = g.n, rb = 2 * n;  // bf16 row bytes
  d.put(kIn, g.act);
  d.put(kIn2, g.tile);
  d.put(kOut, g.acc0);
  // UB pairs at 10.., WB pairs at 6.. (even), ACC rows at 3..
  run_ok(d, {load(Mem::kUb, 10, kIn, g.m, rb, rb), load(Mem::kAcc, 3, kOut, g.m, 4 * n, 4 * n),
             load(Mem::kWb, 6, kIn2, n, rb, rb, /*push_next=*/true), lw(6, transpose, true, /*pop_prev=*/true),
             mm16(10, 3, g.m, true, accumulate, /*push_next=*/true),
             store(Mem::kAcc, 3, kOut, g.m, 4 * n, 4 * n, /*pop_prev=*/true)});
  return d.get<uint32_t>(kOut, static_cast<size_t>(g.m) * n);
}

Bf16Gemm random_gemm(uint32_t n, uint32_t m, std::mt19937& rng) {
  Bf16Gemm g{n, m, {}, {}, {}};
  for (uint32_t i = 0; i < m * n; ++i) g.act.push_back(rand_bf16(rng));
  for (uint32_t i = 0; i < n * n; ++i) g.tile.push_back(rand_bf16(rng));
  for (uint32_t i = 0; i < m * n; ++i) g.acc0.push_back(rand_f32(rng));
  return g;
}

TEST(RefIsa11Matmul, Bf16MatchesTheColumnOrderBitForBit) {
  std::mt19937 rng(1);
  for (const auto& p : {small(), big()}) {
    for (int rep = 0; rep < 6; ++rep) {
      const Bf16Gemm g = random_gemm(p.array_n, 9, rng);
      for (bool transpose : {false, true}) {
        for (bool accumulate : {false, true}) {
          EXPECT_EQ(run_gemm(p, g, transpose, accumulate), expected_gemm(g, transpose, accumulate))
              << "n " << p.array_n << " rep " << rep << " transpose " << transpose << " accumulate " << accumulate;
        }
      }
    }
  }
}

TEST(RefIsa11Matmul, Bf16HandPickedOrderAndSpecials) {
  // N = 4. Column order matters: 2^24 + 1 + 1 ... from +0 in k order.
  Bf16Gemm g{4, 3, {}, std::vector<uint16_t>(16, 0), std::vector<uint32_t>(12, 0)};
  const uint16_t one = 0x3F80, big24 = 0x4B80 /* 2^24 */, inf = 0x7F80, ninf = 0xFF80, nan = 0x7FA0;
  // Row 0: [2^24, 1, 1, 1] x column of ones: ((2^24 + 1) + 1) + 1 = 2^24 (each +1 is a tie to even).
  // Row 1: [inf, -inf, 1, 1]: NaN.  Row 2: [nan, 0, 0, 0]: canonical NaN.
  g.act = {big24, one, one, one, inf, ninf, one, one, nan, 0, 0, 0};
  for (int k = 0; k < 4; ++k) g.tile[static_cast<size_t>(k) * 4] = one;  // column 0 all ones
  const auto out = run_gemm(small(), g, false, false);
  EXPECT_EQ(out[0], 0x4B800000u);
  EXPECT_EQ(out[4], num::kF32Nan);
  EXPECT_EQ(out[8], num::kF32Nan);
  EXPECT_EQ(out[1], 0u);  // column 1: zeros (+0 + +0 ...)
  // Products underflow to zero and overflow to infinity.
  Bf16Gemm h{4, 1, {0x0100, 0x7F00, 0, 0}, std::vector<uint16_t>(16, 0), std::vector<uint32_t>(4, 0)};
  h.tile[0] = 0x3E80;  // 2^-125 * 0.25 = 2^-127 -> 0
  h.tile[4 + 1] = 0x7F00;  // 2^127 * 2^127 -> inf (row k=1, column 1)
  const auto o2 = run_gemm(small(), h, false, false);
  EXPECT_EQ(o2[0], 0u);
  EXPECT_EQ(o2[1], num::kF32PosInf);
}

TEST(RefIsa11Matmul, Int8LoadwTransposeGivesWTransposed) {
  const DeviceParams p = big();  // 16-byte rows = one DMA beat
  const uint32_t n = p.array_n;
  std::mt19937 rng(3);
  std::vector<int8_t> a(static_cast<size_t>(5) * n), w(static_cast<size_t>(n) * n);
  for (auto& v : a) v = static_cast<int8_t>(rng());
  for (auto& v : w) v = static_cast<int8_t>(rng());
  Dev d(p);
  d.put(kIn, a);
  d.put(kIn2, w);
  run_ok(d, {load(Mem::kUb, 0, kIn, 5, n, n), load(Mem::kWb, 3, kIn2, n, n, n, true), lw(3, true, false, true),
             matmul(0, 0, 5, true, false, false, true), store(Mem::kAcc, 0, kOut, 5, 4 * n, 4 * n, true)});
  const auto out = d.get<int32_t>(kOut, static_cast<size_t>(5) * n);
  for (uint32_t i = 0; i < 5; ++i) {
    for (uint32_t c = 0; c < n; ++c) {
      int32_t s = 0;
      for (uint32_t k = 0; k < n; ++k) s += a[i * n + k] * w[c * n + k];  // W^T[k][c] = W[c][k]
      EXPECT_EQ(out[i * n + c], s) << i << "," << c;
    }
  }
}

TEST(RefIsa11Matmul, WeightRegistersAre16BitsAcrossModes) {
  // int8 LOADW stores the sign-extended byte: as bf16, int8 -1 = 0xFFFF is a NaN and
  // int8 64 = 0x0040 a subnormal (zero). A bf16 LOADW then int8 MATMUL uses the low byte.
  const uint32_t n = 4;
  Dev d(small());
  std::vector<int8_t> w(16, 0);
  w[0] = -1;
  w[1] = 64;
  const std::vector<uint16_t> act = {0x3F80, 0, 0, 0};  // one row: [1, 0, 0, 0]
  d.put(kIn, act);
  d.put(kIn2, w);
  // N = 4 with an 8-byte beat: one host row of 8 bytes fills two int8 rows.
  run_ok(d, {load(Mem::kUb, 0, kIn, 1, 2 * n, 2 * n), load(Mem::kWb, 0, kIn2, 2, 2 * n, 2 * n, true), lw(0, false, false, true),
             mm16(0, 0, 1, true, false, true), store(Mem::kAcc, 0, kOut, 1, 4 * n, 4 * n, true)});
  const auto out = d.get<uint32_t>(kOut, n);
  EXPECT_EQ(out[0], num::kF32Nan);
  EXPECT_EQ(out[1], 0u);

  Dev e(small());
  const std::vector<uint16_t> wt = {0x0103, 0xFF7F, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};  // low bytes 3, 0x7F
  const std::vector<int8_t> a8 = {2, 0, 0, 0, 0, 0, 0, 0};
  e.put(kIn, a8);
  e.put(kIn2, wt);
  run_ok(e, {load(Mem::kUb, 0, kIn, 1, 2 * n, 2 * n), load(Mem::kWb, 0, kIn2, n, 2 * n, 2 * n, true), lw(0, false, true, true),
             matmul(0, 0, 1, true, false, false, true), store(Mem::kAcc, 0, kOut, 1, 4 * n, 4 * n, true)});
  const auto o8 = e.get<int32_t>(kOut, n);
  EXPECT_EQ(o8[0], 6);
  EXPECT_EQ(o8[1], 254);
}

// ---- ACTIVATE bf16 ----

TEST(RefIsa11Activate, Bf16BiasReluRoundBitForBit) {
  for (const auto& p : {small(), big()}) {
    const uint32_t n = p.array_n, rows = 7;
    std::mt19937 rng(n);
    std::vector<uint32_t> accv(static_cast<size_t>(rows) * n), bias(n);
    for (auto& v : accv) v = rand_f32(rng);
    for (auto& v : bias) v = rand_f32(rng);
    for (bool use_bias : {false, true}) {
      for (bool relu : {false, true}) {
        Dev d(p);
        d.put(kIn, accv);
        d.put(kIn2, bias);
        // qparam_addr far out of range: not used in bf16 mode.
        run_ok(d, {load(Mem::kAcc, 0, kIn, rows, 4 * n, 4 * n), load(Mem::kAcc, 20, kIn2, 1, 4 * n, 4 * n, true),
                   word(Opcode::kActivate,
                        {{"acc_addr", 0}, {"ub_addr", 4}, {"rows", rows}, {"bias", use_bias}, {"bias_addr", 20},
                         {"relu", relu}, {"qparam_addr", 0xFFFFF}, {"bf16", 1}},
                        true, true),
                   store(Mem::kUb, 4, kOut, rows, 2 * n, 2 * n, true)});
        const auto out = d.get<uint16_t>(kOut, static_cast<size_t>(rows) * n);
        for (uint32_t i = 0; i < rows * n; ++i) {
          EXPECT_EQ(out[i], num::activate_bf16(accv[i], bias[i % n], use_bias, relu))
              << "n " << n << " i " << i << " bias " << use_bias << " relu " << relu;
        }
      }
    }
  }
}

// ACTIVATE `lut` maps every requantized result through the table in the ACC rows after the shift
// row (entry e = byte e % 4 of word e / 4), after bias, requantization and ReLU.
TEST(RefIsa12Activate, LutMapsEveryRequantizedResult) {
  for (const auto& p : {small(), big()}) {
    const uint32_t n = p.array_n, rows = 8;  // stored as rows / 4 host rows of 4N bytes (a beat multiple)
    const uint64_t lrows = lut_rows(n);
    std::mt19937 rng(100 + n);
    std::vector<uint32_t> accv(static_cast<size_t>(rows) * n), bias(n), qp(static_cast<size_t>(2 + lrows) * n, 0);
    for (auto& v : accv) v = static_cast<uint32_t>(static_cast<int32_t>(rng() % 20001) - 10000);
    for (auto& v : bias) v = static_cast<uint32_t>(static_cast<int32_t>(rng() % 2001) - 1000);
    LutTable table{};
    for (auto& t : table) t = static_cast<int8_t>(rng());
    for (uint32_t j = 0; j < n; ++j) {
      qp[j] = (1u << 30) + static_cast<uint32_t>(rng() % (1u << 20));  // mult
      qp[n + j] = static_cast<uint32_t>(36 + rng() % 6);                 // shift: results of either sign, some saturated
    }
    const std::vector<uint32_t> words = lut_acc_words(table, n);
    std::copy(words.begin(), words.end(), qp.begin() + 2 * n);
    for (bool relu : {false, true}) {
      Dev d(p);
      d.put(kIn, accv);
      d.put(kIn2, bias);
      d.put(kIn2 + 0x1000, qp);
      run_ok(d, {load(Mem::kAcc, 0, kIn, rows, 4 * n, 4 * n), load(Mem::kAcc, 20, kIn2, 1, 4 * n, 4 * n),
                 load(Mem::kAcc, 30, kIn2 + 0x1000, 2 + lrows, 4 * n, 4 * n, true),
                 word(Opcode::kActivate,
                      {{"acc_addr", 0}, {"ub_addr", 4}, {"rows", rows}, {"bias", 1}, {"bias_addr", 20},
                       {"relu", relu}, {"qparam_addr", 30}, {"lut", 1}},
                      true, true),
                 store(Mem::kUb, 4, kOut, rows / 4, 4 * n, 4 * n, true)});
      const auto out = d.get<int8_t>(kOut, static_cast<size_t>(rows) * n);
      for (uint32_t i = 0; i < rows * n; ++i) {
        const uint32_t j = i % n;
        const int8_t q = activate_element(accv[i], bias[j], qp[j], qp[n + j], relu);
        EXPECT_EQ(out[i], lut_apply(table, q)) << "n " << n << " i " << i << " relu " << relu;
      }
    }
  }
}

// ---- TRANSPOSE ----

TEST(RefIsa11Transpose, Int8AndBf16WithZeroFillAndOverlap) {
  for (const auto& p : {small(), big()}) {
    const uint32_t n = p.array_n;
    std::mt19937 rng(n + 1);
    for (bool bf16 : {false, true}) {
      const uint32_t esz = bf16 ? 2 : 1, rb = esz * n;
      for (uint32_t rows : {1u, n / 2, n}) {
        // Source at UB 8, destination overlapping it at 8 + esz*2 (even in bf16), and a disjoint one.
        for (uint64_t dst : {uint64_t{8} + 2 * esz, uint64_t{100}}) {
          std::vector<uint8_t> src(static_cast<size_t>(n) * rb);
          for (auto& v : src) v = static_cast<uint8_t>(rng());
          Dev d(p);
          d.put(kIn, src);
          const uint32_t hrb = std::max(rb, p.dma_data_w / 8), hrows = n * rb / hrb;  // DMA rows: whole beats
          run_ok(d, {load(Mem::kUb, 8, kIn, hrows, hrb, hrb, true), tr(8, dst, rows, bf16, true, true),
                     store(Mem::kUb, dst, kOut, hrows, hrb, hrb, true)});
          const auto out = d.get<uint8_t>(kOut, static_cast<size_t>(n) * rb);
          for (uint32_t j = 0; j < n; ++j) {
            for (uint32_t i = 0; i < n; ++i) {
              for (uint32_t b = 0; b < esz; ++b) {
                const uint8_t want = i < rows ? src[i * rb + j * esz + b] : 0;
                ASSERT_EQ(out[j * rb + i * esz + b], want)
                    << "n " << n << " bf16 " << bf16 << " rows " << rows << " dst " << dst << " j " << j << " i " << i;
              }
            }
          }
        }
      }
    }
  }
}

// ---- VECTOR ----

TEST(RefIsa11Vector, EveryOpBitForBit) {
  for (const auto& p : {small(), big()}) {
    const uint32_t n = p.array_n, rows = 6;
    std::mt19937 rng(n + 7);
    std::vector<uint32_t> a(static_cast<size_t>(rows) * n), b(a.size());
    for (auto& v : a) v = rand_f32(rng);
    for (auto& v : b) v = rand_f32(rng);
    for (uint32_t s : {0x3F000000u, 0u, 0x80000000u, 0xC2F60000u, 0x7F800000u, 0x7FC12345u, 0x00000005u,
                       0x7F000000u}) {
      for (uint32_t opv = 0; opv <= 9; ++opv) {
        const auto op = static_cast<VecOp>(opv);
        Dev d(p);
        d.put(kIn, a);
        d.put(kIn2, b);
        const bool colsum = op == VecOp::kColsum;
        run_ok(d, {load(Mem::kAcc, 0, kIn, rows, 4 * n, 4 * n), load(Mem::kAcc, 10, kIn2, rows, 4 * n, 4 * n, true),
                   vec(op, 20, 0, 10, rows, s, true, true),
                   store(Mem::kAcc, 20, kOut, colsum ? 1 : rows, 4 * n, 4 * n, true)});
        const auto out = d.get<uint32_t>(kOut, static_cast<size_t>(colsum ? 1 : rows) * n);
        if (colsum) {
          for (uint32_t c = 0; c < n; ++c) {
            uint32_t sum = 0;
            for (uint32_t i = 0; i < rows; ++i) sum = num::colsum_step(sum, a[i * n + c]);
            EXPECT_EQ(out[c], sum) << "colsum n " << n << " c " << c;
          }
          continue;
        }
        for (size_t i = 0; i < out.size(); ++i) {
          ASSERT_EQ(out[i], num::vector_lane(op, a[i], b[i], s)) << spec::to_string(op) << " n " << n << " i " << i;
        }
      }
    }
  }
}

TEST(RefIsa11Vector, HandPickedLanes) {
  // N = 4, one row: a = [1, -0, NaN, 3], b = [2, +0, 5, subnormal], s = 0.5.
  const uint32_t n = 4;
  const std::vector<uint32_t> a = {0x3F800000u, 0x80000000u, 0x7F800001u, 0x40400000u};
  const std::vector<uint32_t> b = {0x40000000u, 0x00000000u, 0x40A00000u, 0x00000001u};
  const auto run = [&](VecOp op, uint32_t s) {
    Dev d(small());
    d.put(kIn, a);
    d.put(kIn2, b);
    run_ok(d, {load(Mem::kAcc, 0, kIn, 1, 4 * n, 4 * n), load(Mem::kAcc, 1, kIn2, 1, 4 * n, 4 * n, true),
               vec(op, 2, 0, 1, 1, s, true, true), store(Mem::kAcc, 2, kOut, 1, 4 * n, 4 * n, true)});
    return d.get<uint32_t>(kOut, n);
  };
  EXPECT_EQ(run(VecOp::kAdd, 0), (std::vector<uint32_t>{0x40400000u, 0u, num::kF32Nan, 0x40400000u}));
  EXPECT_EQ(run(VecOp::kMax, 0), (std::vector<uint32_t>{0x40000000u, 0u, num::kF32Nan, 0x40400000u}));
  EXPECT_EQ(run(VecOp::kSelect, 0), (std::vector<uint32_t>{0x40000000u, 0u, 0x40A00000u, 0u}));
  EXPECT_EQ(run(VecOp::kAxpy, 0x3F000000u), (std::vector<uint32_t>{0x40200000u, 0u, num::kF32Nan, 0x3FC00000u}));
  EXPECT_EQ(run(VecOp::kMaxs, 0), (std::vector<uint32_t>{0x3F800000u, 0u, num::kF32Nan, 0x40400000u}));
}

TEST(RefIsa11Vector, InPlaceSgdStepMatchesTheFormula) {
  // d = AXPY(w, wd, g) into g; v = AXPY(v, m, d) into v; w = AXPY(v, -lr, w) into w (docs/numerics.md).
  const uint32_t n = 16, rows = 3;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint32_t> w(rows * n), g(rows * n), v(rows * n, 0u);
  for (auto& x : w) x = num::to_bits(u(rng));
  for (auto& x : g) x = num::to_bits(u(rng) * 0.01f);
  const uint32_t wd = num::to_bits(1e-4f), m = num::to_bits(0.9f), nlr = num::to_bits(-0.05f);
  Dev d(big());
  d.put(kIn, w);
  d.put(kIn2, g);
  // ACC: w at 0, g at 10, v at 20 (zero after power-on).
  run_ok(d, {load(Mem::kAcc, 0, kIn, rows, 4 * n, 4 * n), load(Mem::kAcc, 10, kIn2, rows, 4 * n, 4 * n, true),
             vec(VecOp::kAxpy, 10, 0, 10, rows, wd, true), vec(VecOp::kAxpy, 20, 20, 10, rows, m),
             vec(VecOp::kAxpy, 0, 20, 0, rows, nlr, false, true), store(Mem::kAcc, 0, kOut, rows, 4 * n, 4 * n, true)});
  const auto out = d.get<uint32_t>(kOut, rows * n);
  for (uint32_t i = 0; i < rows * n; ++i) {
    const uint32_t dd = num::axpy(w[i], wd, g[i]);
    const uint32_t vv = num::axpy(0u, m, dd);
    EXPECT_EQ(vv, dd);
    EXPECT_EQ(out[i], num::axpy(vv, nlr, w[i])) << i;
    // And against plain float math (both roundings of PyTorch's add(alpha=)).
    const float step = num::to_float(vv) * -0.05f;
    EXPECT_EQ(out[i], num::to_bits(step + num::to_float(w[i]))) << i;
  }
}

// ---- timing entries ----

TEST(RefIsa11Timing, NonMatrixUnitsCountTheirBusyCycles) {
  const PerfModel pm;
  {
    Dev d(small());
    run_ok(d, {vec(VecOp::kAdd, 0, 0, 0, 9)});
    EXPECT_EQ(d.perf(r::kPerfActBusyLo), 9u + pm.vector_pipeline);
  }
  {
    Dev d(small());
    run_ok(d, {tr(0, 8, 3, true)});
    EXPECT_EQ(d.perf(r::kPerfActBusyLo), 3u + 4u + pm.transpose_pipeline);
  }
  {
    // bf16 MATMUL: one row pair per cycle, like int8.
    Dev a(small()), b(small());
    run_ok(a, {matmul(0, 0, 12, false)});
    run_ok(b, {mm16(0, 0, 12, false)});
    EXPECT_EQ(a.perf(r::kPerfMxuActiveLo), 12u);
    EXPECT_EQ(b.perf(r::kPerfMxuActiveLo), 12u);
    EXPECT_EQ(a.perf(r::kPerfCyclesLo), b.perf(r::kPerfCyclesLo));
  }
}

}  // namespace
}  // namespace tpuw::ref::test
