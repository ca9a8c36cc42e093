// Arithmetic, GEMM against plain integer math, tokens/queues, FENCE, soft reset, cycle model.
#include <random>

#include "ref_harness.h"

namespace tpuw::ref::test {
namespace {

using spec::Mem;

// ---- ACTIVATE by hand ----------------------------------------------------------------------
// One ACC row x (N=4 columns) with bias, mult, shift rows -> one int8 UB row, through the device.
std::vector<int8_t> activate_row(const std::vector<int32_t>& x, const std::vector<int32_t>& bias,
                                 const std::vector<int32_t>& mult, const std::vector<int32_t>& shift, bool relu,
                                 bool use_bias = true) {
  Dev d;
  std::vector<int32_t> rows = x;
  rows.insert(rows.end(), bias.begin(), bias.end());
  rows.insert(rows.end(), mult.begin(), mult.end());
  rows.insert(rows.end(), shift.begin(), shift.end());
  d.put(0x1000, rows);  // ACC rows 0 (x), 1 (bias), 2 (mult), 3 (shift)
  d.submit({load(Mem::kAcc, 0, 0x1000, 1, 64, 64, true), activate(0, 0, 1, use_bias, 1, 2, relu, true, true),
            store(Mem::kUb, 0, 0x2000, 1, 8, 8, true), fence(1, 0x4000)});
  d.run();
  EXPECT_EQ(d.reg(r::kFaultCause), 0u);
  EXPECT_EQ(d.reg(r::kFenceValue), 1u);
  auto out = d.get<int8_t>(0x2000, 8);
  out.resize(4);
  return out;
}

using V8 = std::vector<int8_t>;

TEST(RefActivate, RoundHalfUpArithmeticShift) {
  // (x*1 + 2^(s-1)) >> s
  EXPECT_EQ(activate_row({3, -3, -1, 1}, {0, 0, 0, 0}, {1, 1, 1, 1}, {1, 1, 1, 1}, false), (V8{2, -1, 0, 1}));
  EXPECT_EQ(activate_row({5, 6, -5, -6}, {0, 0, 0, 0}, {1, 1, 1, 1}, {2, 2, 2, 2}, false), (V8{1, 2, -1, -1}));
  EXPECT_EQ(activate_row({-7, 7, 100, -100}, {0, 0, 0, 0}, {1, 1, 1, 1}, {0, 3, 0, 3}, false), (V8{-7, 1, 100, -12}));
}

TEST(RefActivate, SaturationAndRelu) {
  EXPECT_EQ(activate_row({1000, -1000, 127, -128}, {0, 0, 0, 0}, {1, 1, 1, 1}, {0, 0, 0, 0}, false),
            (V8{127, -128, 127, -128}));
  EXPECT_EQ(activate_row({1000, -1000, 5, -5}, {0, 0, 0, 0}, {1, 1, 1, 1}, {0, 0, 0, 0}, true), (V8{127, 0, 5, 0}));
}

TEST(RefActivate, BiasWrapsAt32BitsAndIsOptional) {
  constexpr int32_t kMax = 0x7FFFFFFF;
  EXPECT_EQ(activate_row({kMax, kMax, 10, 10}, {1, 0, -20, 0}, {1, 1, 1, 1}, {0, 0, 0, 0}, false),
            (V8{-128, 127, -10, 10}));
  EXPECT_EQ(activate_row({10, 10, 10, 10}, {100, 100, 100, 100}, {1, 1, 1, 1}, {0, 0, 0, 0}, false, false),
            (V8{10, 10, 10, 10}));
}

TEST(RefActivate, PerColumnMultAndSixBitShift) {
  // 64-bit product: 2^30 * 2^20 = 2^50, >> 44 = 64.  shift 65 uses its low 6 bits = 1.
  EXPECT_EQ(activate_row({1 << 30, 7, 7, 7}, {0, 0, 0, 0}, {1 << 20, 3, -3, 1}, {44, 65, 64, 0}, false),
            (V8{64, 11, -21, 7}));
  // negative multiplier with rounding: -5*3 = -15, (-15+2)>>2 = -4 (floor of -3.25)
  EXPECT_EQ(activate_row({-5, 5, 0, 0}, {0, 0, 0, 0}, {3, -3, 0, 0}, {2, 2, 0, 0}, false), (V8{-4, -4, 0, 0}));
}

TEST(RefActivate, LargestProductDoesNotOverflow) {
  constexpr int32_t kMin = static_cast<int32_t>(0x80000000u);
  // (-2^31) * (-2^31) = 2^62; (2^62 + 2^61) >> 62 = 1
  EXPECT_EQ(activate_row({kMin, kMin, 0, 0}, {0, 0, 0, 0}, {kMin, kMin, 0, 0}, {62, 0, 0, 0}, false),
            (V8{1, 127, 0, 0}));
}

// ---- MATMUL --------------------------------------------------------------------------------
TEST(RefMatmul, AccumulateWrapsAndOverwriteReplaces) {
  Dev d;
  // W = identity*1 (4x4), A row = {1,2,3,4}; ACC row 0 preset to INT32_MAX in every column.
  d.put<int8_t>(0x1000, {1, 2, 3, 4, 0, 0, 0, 0});
  d.put<int8_t>(0x1100, {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1});
  d.put<int32_t>(0x1200, {0x7FFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF, 9, 9, 9, 9});
  d.submit({load(Mem::kUb, 0, 0x1000, 1, 8, 8), load(Mem::kWb, 0, 0x1100, 1, 16, 16),
            load(Mem::kAcc, 0, 0x1200, 1, 32, 32, true), loadw(0, true),
            matmul(0, 0, 1, true, true),          // ACC row 0 += A*W (wraps)
            matmul(0, 1, 1, false, false, false, true),  // ACC row 1 = A*W (overwrites 9s)
            store(Mem::kAcc, 0, 0x2000, 1, 32, 32, true), fence(1, 0x4000)});
  d.run();
  const auto c = d.get<int32_t>(0x2000, 8);
  EXPECT_EQ(c, (std::vector<int32_t>{static_cast<int32_t>(0x80000000u), static_cast<int32_t>(0x80000001u),
                                     static_cast<int32_t>(0x80000002u), static_cast<int32_t>(0x80000003u), 1, 2, 3,
                                     4}));
}

TEST(RefMatmul, WeightBanksSwapAndReturnToTheOlderTile) {
  Dev d;
  d.put<int8_t>(0x1000, {1, 1, 1, 1, 0, 0, 0, 0});
  // tile 0 (WB rows 0..3): all 1; tile 1 (WB rows 4..7): all 2
  std::vector<int8_t> w(32, 1);
  for (size_t i = 16; i < 32; ++i) w[i] = 2;
  d.put(0x1100, w);
  d.submit({load(Mem::kUb, 0, 0x1000, 1, 8, 8), load(Mem::kWb, 0, 0x1100, 1, 32, 32, true), loadw(0, true),
            matmul(0, 0, 1, true),   // tile 0 active: 4
            loadw(4),                // tile 1 into the shadow bank
            matmul(0, 1, 1, false),  // no swap: still tile 0: 4
            matmul(0, 2, 1, true),   // swap: tile 1: 8
            matmul(0, 3, 1, true, false, false, true),  // swap without LOADW: back to tile 0: 4
            store(Mem::kAcc, 0, 0x2000, 4, 16, 16, true), fence(1, 0x4000)});
  d.run();
  const auto c = d.get<int32_t>(0x2000, 16);
  EXPECT_EQ(c, (std::vector<int32_t>{4, 4, 4, 4, 4, 4, 4, 4, 8, 8, 8, 8, 4, 4, 4, 4}));
}

TEST(RefMatmul, WbRowKByteNIsWeightKN) {
  Dev d;
  d.put<int8_t>(0x1000, {1, 0, 0, 0, 0, 1, 0, 0});  // UB rows e0, e1
  d.put<int8_t>(0x1100, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  d.submit({load(Mem::kUb, 0, 0x1000, 1, 8, 8), load(Mem::kWb, 0, 0x1100, 1, 16, 16, true), loadw(0, true),
            matmul(0, 0, 2, true, false, false, true), store(Mem::kAcc, 0, 0x2000, 1, 32, 32, true),
            fence(1, 0x4000)});
  d.run();
  EXPECT_EQ(d.get<int32_t>(0x2000, 8), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
}

// ---- GEMM by program vs plain integer math -------------------------------------------------
struct Gemm {
  unsigned n, m, k, nout;
  std::vector<int8_t> a, w;  // row-major M x K, K x Nout
  std::vector<int32_t> c;    // M x Nout
};

Gemm random_gemm(unsigned n, unsigned m, unsigned k, unsigned nout, uint32_t seed) {
  Gemm g{n, m, k, nout, {}, {}, {}};
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-128, 127);
  for (unsigned i = 0; i < m * k; ++i) g.a.push_back(static_cast<int8_t>(dist(rng)));
  for (unsigned i = 0; i < k * nout; ++i) g.w.push_back(static_cast<int8_t>(dist(rng)));
  g.c.assign(static_cast<size_t>(m) * nout, 0);
  for (unsigned i = 0; i < m; ++i) {
    for (unsigned j = 0; j < nout; ++j) {
      int32_t s = 0;
      for (unsigned kk = 0; kk < k; ++kk) s += int32_t{g.a[i * k + kk]} * int32_t{g.w[kk * nout + j]};
      g.c[i * nout + j] = s;
    }
  }
  return g;
}

constexpr uint32_t kA = 0x10000, kW = 0x40000, kC = 0x80000;

// A is placed as K/N column blocks of M x N bytes; W as (K/N)*(Nout/N) tiles of N x N bytes.
std::vector<isa::Word> gemm_program(Dev& d, const Gemm& g) {
  const unsigned n = g.n, kt_n = g.k / n, jt_n = g.nout / n;
  std::vector<int8_t> ablk, wblk;
  for (unsigned kt = 0; kt < kt_n; ++kt)
    for (unsigned i = 0; i < g.m; ++i)
      for (unsigned c = 0; c < n; ++c) ablk.push_back(g.a[i * g.k + kt * n + c]);
  for (unsigned kt = 0; kt < kt_n; ++kt)
    for (unsigned jt = 0; jt < jt_n; ++jt)
      for (unsigned r = 0; r < n; ++r)
        for (unsigned c = 0; c < n; ++c) wblk.push_back(g.w[(kt * n + r) * g.nout + jt * n + c]);
  d.put(kA, ablk);
  d.put(kW, wblk);
  std::vector<isa::Word> p;
  for (unsigned kt = 0; kt < kt_n; ++kt) p.push_back(load(Mem::kUb, kt * g.m, kA + kt * g.m * n, 1, g.m * n, 0));
  p.push_back(load(Mem::kWb, 0, kW, 1, kt_n * jt_n * n * n, 0, true));
  for (unsigned jt = 0; jt < jt_n; ++jt) {
    for (unsigned kt = 0; kt < kt_n; ++kt) {
      p.push_back(loadw((kt * jt_n + jt) * n, jt == 0 && kt == 0));
      p.push_back(matmul(kt * g.m, jt * g.m, g.m, true, kt > 0, false, kt + 1 == kt_n));
    }
  }
  for (unsigned jt = 0; jt < jt_n; ++jt) {
    p.push_back(store(Mem::kAcc, jt * g.m, kC + jt * n * 4, g.m, 4 * n, g.nout * 4, true));
  }
  p.push_back(fence(0xD0, 0x4000));
  return p;
}

TEST(RefGemm, TiledProgramMatchesIntegerMath) {
  struct Shape {
    unsigned n, m, k, nout;
  };
  for (const Shape s : {Shape{4, 4, 4, 4}, Shape{4, 12, 16, 8}, Shape{4, 2, 8, 12}, Shape{16, 16, 16, 16},
                        Shape{16, 40, 48, 32}}) {
    Dev d(s.n == 4 ? small() : big());
    const Gemm g = random_gemm(s.n, s.m, s.k, s.nout, s.m * 131 + s.k);
    d.submit(gemm_program(d, g));
    d.run();
    ASSERT_EQ(d.reg(r::kFaultCause), 0u);
    ASSERT_EQ(d.reg(r::kFenceValue), 0xD0u);
    EXPECT_EQ(d.get<int32_t>(kC, g.c.size()), g.c) << s.n << " " << s.m << "x" << s.k << "x" << s.nout;
    // counters follow the program
    const uint64_t instrs = s.k / s.n + 1 + 2 * (s.k / s.n) * (s.nout / s.n) + s.nout / s.n + 1;
    EXPECT_EQ(d.perf(r::kPerfInstretLo), instrs);
    EXPECT_EQ(d.perf(r::kPerfMxuActiveLo), uint64_t{s.m} * (s.k / s.n) * (s.nout / s.n));
    EXPECT_EQ(d.perf(r::kPerfRdBytesLo), 16 * instrs + uint64_t{s.m} * s.k + uint64_t{s.k} * s.nout);
    EXPECT_EQ(d.perf(r::kPerfWrBytesLo), 4u + 4ull * s.m * s.nout);
    EXPECT_EQ(d.perf(r::kPerfWeightShiftLo),
              (s.k / s.n) * (s.nout / s.n) * uint64_t{s.n + PerfModel{}.loadw_extra});
    EXPECT_GT(d.perf(r::kPerfCyclesLo), 0u);
    EXPECT_EQ(d.perf(r::kPerfCyclesLo), d.dev.cycles());  // doorbell at cycle 0 to the fence
  }
}

TEST(RefGemm, CyclesAreDeterministicAndRunStopsAtItsHorizon) {
  const Gemm g = random_gemm(16, 64, 64, 64, 7);
  Dev a(big()), b(big());
  a.submit(gemm_program(a, g));
  a.run();
  const uint64_t total = a.dev.cycles();
  b.submit(gemm_program(b, g));
  uint64_t steps = 0;
  while (!b.dev.irq()) {
    const uint64_t ran = b.run(100);
    if (!b.dev.irq()) {
      EXPECT_EQ(ran, 100u);
    }
    EXPECT_EQ(b.dev.cycles(), 100 * steps + ran);
    ++steps;
    ASSERT_LT(steps, 100000u);
  }
  EXPECT_EQ(b.dev.cycles(), total);
  EXPECT_EQ(b.get<int32_t>(kC, g.c.size()), g.c);
  // Sanity of the estimate: 16 folds of 64 rows on a 16x16 array = 1024 cycles of streaming;
  // this program loads everything first (8 KiB at 16 bytes/cycle = 512 cycles); the store of
  // each 4 KiB output strip overlaps the next strip's MATMULs, only the last (256 cycles) shows.
  EXPECT_GT(total, 512u + 1024u + 256u);
  EXPECT_LT(total, 2u * (512u + 1024u + 256u));
}

TEST(RefGemm, WeightStallWhenTheShiftCannotBeHidden) {
  // rows = 1 per MATMUL: the next tile (N cycles to shift) cannot hide behind 1 row.
  Dev d(big());
  std::vector<isa::Word> p{load(Mem::kWb, 0, 0x1000, 1, 512, 0, true), loadw(0, true), matmul(0, 0, 1, true),
                           loadw(16), matmul(0, 1, 1, true), fence(1, 0x4000)};
  d.submit(p);
  d.run();
  EXPECT_GT(d.perf(r::kPerfWeightStallLo), 10u);
  // rows = 64: the shift hides completely behind the first MATMUL
  Dev e(big());
  e.submit({load(Mem::kWb, 0, 0x1000, 1, 512, 0, true), loadw(0, true), matmul(0, 0, 64, true), loadw(16),
            matmul(0, 64, 64, true), fence(1, 0x4000)});
  e.run();
  const uint64_t stall_first = e.perf(r::kPerfWeightStallLo);
  EXPECT_LE(stall_first, uint64_t{16 + 1 + 1});  // only the very first tile waits
  EXPECT_EQ(e.perf(r::kPerfMxuActiveLo), 128u);
  EXPECT_GT(e.perf(r::kPerfDmaWaitLo), 0u);  // the first LOADW waited for the WB load
}

// ---- tokens, queues, deadlock, soft reset ----------------------------------------------------
TEST(RefQueues, DeadlockMakesNoProgressAndSoftResetRecovers) {
  Dev d;
  // The compute head waits for an ld2cmp token nobody pushes. Queue depth 8: the FIFO fills
  // with it and 7 NOPs, the 9th compute instruction cannot be dispatched: HEAD stops at 8.
  std::vector<isa::Word> p{nop(true)};
  for (int i = 0; i < 10; ++i) p.push_back(nop());
  p.push_back(fence(1, 0x4000));
  d.submit(p);
  EXPECT_EQ(d.run(100000), 100000u);
  EXPECT_FALSE(d.dev.irq());
  EXPECT_EQ(d.reg(r::kRingHead), 8u);
  EXPECT_EQ(d.reg(r::kFenceValue), 0u);
  EXPECT_EQ(d.reg(r::kStatus), r::kStatusBusy);
  EXPECT_EQ(d.run(100000), 100000u);  // still nothing
  EXPECT_EQ(d.reg(r::kRingHead), 8u);
  d.dev.write_reg(r::kCtrl, r::kCtrlSoftReset);
  EXPECT_EQ(d.reg(r::kStatus), 0u);
  EXPECT_EQ(d.reg(r::kRingHead), 0u);
  EXPECT_EQ(d.perf(r::kPerfInstretLo), 0u);
  d.dev.write_reg(r::kRingBase, kRing);
  d.dev.write_reg(r::kRingSize, kRingEntries);
  d.submit({nop(), fence(2, 0x4000)});
  d.run();
  EXPECT_EQ(d.reg(r::kFenceValue), 2u);
  EXPECT_EQ(d.reg(r::kStatus), 0u);
}

TEST(RefQueues, TokensCountAndOrderTheQueues) {
  Dev d;
  // Three LOADs each push a token; compute consumes them one at a time; the STORE waits for
  // the compute's token, then the compute waits for the STORE's token back (st2cmp).
  d.put<int8_t>(0x1000, {1, 2, 3, 4, 5, 6, 7, 8});
  d.submit({load(Mem::kUb, 0, 0x1000, 1, 8, 8, true), load(Mem::kUb, 2, 0x1000, 1, 8, 8, true),
            load(Mem::kUb, 4, 0x1000, 1, 8, 8, true), nop(true), nop(true), nop(true, true),
            store(Mem::kUb, 4, 0x2000, 1, 8, 8, true, true), nop(false, false, true), fence(3, 0x4000)});
  d.run();
  EXPECT_EQ(d.reg(r::kFaultCause), 0u);
  EXPECT_EQ(d.reg(r::kFenceValue), 3u);
  EXPECT_EQ(d.get<int8_t>(0x2000, 8), (std::vector<int8_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(d.perf(r::kPerfInstretLo), 9u);
}

TEST(RefQueues, LoadWaitsForComputeToken) {
  Dev d;
  // cmp2ld: the second LOAD overwrites UB rows only after the MATMUL has read them.
  d.put<int8_t>(0x1000, {1, 1, 1, 1, 0, 0, 0, 0});
  d.put<int8_t>(0x1010, {2, 2, 2, 2, 0, 0, 0, 0});
  d.put<int8_t>(0x1100, std::vector<int8_t>(16, 1));
  d.submit({load(Mem::kWb, 0, 0x1100, 1, 16, 16), load(Mem::kUb, 0, 0x1000, 1, 8, 8, true),
            load(Mem::kUb, 0, 0x1010, 1, 8, 8, true, true), loadw(0, true),
            isa::encode([] {
              auto i = isa::decode(matmul(0, 0, 1, true));
              i.push_prev = true;
              return i;
            }()),
            matmul(0, 1, 1, false, false, true, true), store(Mem::kAcc, 0, 0x2000, 2, 16, 16, true),
            fence(1, 0x4000)});
  d.run();
  EXPECT_EQ(d.get<int32_t>(0x2000, 8), (std::vector<int32_t>{4, 4, 4, 4, 8, 8, 8, 8}));
}

TEST(RefQueues, RingWrapsAround) {
  Dev d;
  d.dev.write_reg(r::kRingSize, 4);
  for (uint32_t v = 1; v <= 5; ++v) {
    d.submit({nop(), fence(v, 0x4000)});
    d.run();
    EXPECT_EQ(d.reg(r::kFenceValue), v);
    EXPECT_EQ(d.reg(r::kRingHead), (2 * v) % 4);
    d.dev.write_reg(r::kIrqStatus, 1);
  }
}

// ---- FENCE ---------------------------------------------------------------------------------
TEST(RefFence, ValueMemoryAndIrq) {
  Dev d;
  d.submit({fence(0x11, 0x4000, false), fence(0x22, 0x4004, false)});
  EXPECT_EQ(d.run(100000), 100000u);  // no irq requested
  EXPECT_FALSE(d.dev.irq());
  EXPECT_EQ(d.reg(r::kFenceValue), 0x22u);
  EXPECT_EQ(d.get<uint32_t>(0x4000, 2), (std::vector<uint32_t>{0x11, 0x22}));
  EXPECT_EQ(d.reg(r::kStatus), 0u);
  d.submit({fence(0xABCDEF01u, 0x4008, true)});
  EXPECT_LT(d.run(100000), 100000u);
  EXPECT_TRUE(d.dev.irq());
  EXPECT_EQ(d.reg(r::kFenceValue), 0xABCDEF01u);
  EXPECT_EQ(d.get<uint32_t>(0x4008, 1)[0], 0xABCDEF01u);
}

TEST(RefFence, WaitsForEveryEarlierInstruction) {
  // The fence's cycle is after the store's completion: the store's data is there when the
  // irq rises, and the fence completes later than a lone fence would.
  Dev a;
  a.submit({fence(1, 0x4000)});
  a.run();
  Dev b;
  b.put<int8_t>(0x1000, std::vector<int8_t>(4096, 3));
  b.submit({load(Mem::kUb, 0, 0x1000, 1, 4096, 0, true), nop(true, true), store(Mem::kUb, 0, 0x8000, 1, 4096, 0, true),
            fence(1, 0x4000)});
  b.run();
  EXPECT_GT(b.dev.cycles(), a.dev.cycles() + 2 * 4096 / 8);
  EXPECT_EQ(b.get<int8_t>(0x8000, 4096), std::vector<int8_t>(4096, 3));
}

TEST(RefDevices, AreIndependent) {
  Dev a, b;
  a.submit({fence(1, 0x4000)});
  b.submit({fence(2, 0x4000)});
  a.run();
  b.run();
  EXPECT_EQ(a.get<uint32_t>(0x4000, 1)[0], 1u);
  EXPECT_EQ(b.get<uint32_t>(0x4000, 1)[0], 2u);
}

}  // namespace
}  // namespace tpuw::ref::test
