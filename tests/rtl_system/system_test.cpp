// Device-level tests of the system half: registers, DMA width conversion and 2-D transfers,
// tokens, FENCE, faults, soft reset, and MXU utilization of a 512^3 GEMM at N=16.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "tpuw/numerics.h"
#include "tpuw/sim/sim_device.h"
#include "tpuw/spec.h"

namespace {

using tpuw::sim::SimDevice;
using tpuw::sim::SimDeviceConfig;
namespace spec = tpuw::spec;
namespace reg = tpuw::spec::reg;

using Word = std::array<uint8_t, 16>;

void set_bits(Word& w, unsigned lsb, unsigned width, uint64_t v) {
  for (unsigned i = 0; i < width; ++i) {
    const unsigned b = lsb + i;
    const uint8_t m = static_cast<uint8_t>(1u << (b % 8));
    if ((v >> i) & 1u) w[b / 8] |= m; else w[b / 8] &= static_cast<uint8_t>(~m);
  }
}
void set(Word& w, const spec::Field& f, uint64_t v) { set_bits(w, f.lsb, f.width, v); }

struct Flags {
  bool pop_prev = false, pop_next = false, push_prev = false, push_next = false;
};
Word header(spec::Opcode op, Flags f) {
  Word w{};
  set(w, spec::header::kOpcode, static_cast<uint64_t>(op));
  set(w, spec::header::kPopPrev, f.pop_prev);
  set(w, spec::header::kPopNext, f.pop_next);
  set(w, spec::header::kPushPrev, f.push_prev);
  set(w, spec::header::kPushNext, f.push_next);
  return w;
}
Word dma(spec::Opcode op, Flags f, spec::Mem mem, uint32_t local, uint32_t host, uint32_t rows,
         uint32_t row_bytes, uint32_t stride) {
  Word w = header(op, f);
  set(w, spec::load::kMem, static_cast<uint64_t>(mem));
  set(w, spec::load::kLocalAddr, local);
  set(w, spec::load::kHostAddr, host);
  set(w, spec::load::kRows, rows);
  set(w, spec::load::kRowBytes, row_bytes);
  set(w, spec::load::kHostStride, stride);
  return w;
}
Word load(Flags f, spec::Mem m, uint32_t local, uint32_t host, uint32_t rows, uint32_t rb, uint32_t st) {
  return dma(spec::Opcode::kLoad, f, m, local, host, rows, rb, st);
}
Word store(Flags f, spec::Mem m, uint32_t local, uint32_t host, uint32_t rows, uint32_t rb, uint32_t st) {
  return dma(spec::Opcode::kStore, f, m, local, host, rows, rb, st);
}
Word nop(Flags f) { return header(spec::Opcode::kNop, f); }
Word loadw(Flags f, uint32_t wb) {
  Word w = header(spec::Opcode::kLoadw, f);
  set(w, spec::loadw::kWbAddr, wb);
  return w;
}
Word matmul(Flags f, uint32_t ub, uint32_t acc, uint32_t rows, bool accumulate, bool swap) {
  Word w = header(spec::Opcode::kMatmul, f);
  set(w, spec::matmul::kUbAddr, ub);
  set(w, spec::matmul::kAccAddr, acc);
  set(w, spec::matmul::kRows, rows);
  set(w, spec::matmul::kAccumulate, accumulate);
  set(w, spec::matmul::kSwap, swap);
  return w;
}
Word fence(uint32_t value, uint32_t host, bool irq) {
  Word w = header(spec::Opcode::kFence, {});
  set(w, spec::fence::kValue, value);
  set(w, spec::fence::kHostAddr, host);
  set(w, spec::fence::kIrq, irq);
  return w;
}

constexpr uint32_t kRing = 0x1000;
constexpr uint32_t kFenceAddr = 0x800;

struct Dev {
  SimDevice dev;
  explicit Dev(unsigned n, double bp = 0.0, unsigned jitter = 0, uint64_t mem = 16u << 20)
      : dev(make_cfg(n, bp, jitter, mem)) {}
  static SimDeviceConfig make_cfg(unsigned n, double bp, unsigned jitter, uint64_t mem) {
    SimDeviceConfig c;
    c.array_n = n;
    c.memory.size = mem;
    c.memory.backpressure = bp;
    c.memory.latency_jitter = jitter;
    return c;
  }
  uint32_t rd(uint32_t off) { return dev.read_reg(off); }
  void wr(uint32_t off, uint32_t v) { dev.write_reg(off, v); }

  // Writes the program to the ring, rings the doorbell and runs until irq_o (or the limit).
  uint64_t run(const std::vector<Word>& prog, uint64_t max_cycles = 2'000'000,
               uint32_t ring_size = 0) {
    const uint32_t n = static_cast<uint32_t>(prog.size());
    for (uint32_t i = 0; i < n; ++i) dev.mem_write(kRing + 16u * i, prog[i].data(), 16);
    wr(reg::kIrqEnable, reg::kIrqEnableFence | reg::kIrqEnableFault);
    wr(reg::kRingBase, kRing);
    wr(reg::kRingSize, ring_size ? ring_size : n + 1);
    const uint64_t t0 = dev.cycle();
    wr(reg::kRingTail, n);
    dev.run(max_cycles);
    return dev.cycle() - t0;
  }
  uint64_t perf(uint32_t lo) {
    const uint64_t l = rd(lo);
    return l | (static_cast<uint64_t>(rd(lo + 4)) << 32);
  }
};

std::vector<uint8_t> random_bytes(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(g());
  return v;
}

// ------------------------------------------------------------------------------------------------
TEST(SystemRegs, IdentityConfigAndAccessTypes) {
  Dev d(4);
  EXPECT_EQ(d.rd(reg::kId), 0x54505557u);
  EXPECT_EQ(d.rd(reg::kVersion), 0x00010003u);  // ISA 1.3
  EXPECT_EQ(d.rd(reg::kArrayN), 4u);
  EXPECT_EQ(d.rd(reg::kDmaDataW), d.dev.params().dma_data_w);
  EXPECT_EQ(d.rd(reg::kQueueDepth), d.dev.params().queue_depth);
  EXPECT_EQ(d.rd(reg::kUbDepth), d.dev.params().ub_depth);
  EXPECT_EQ(d.rd(reg::kDmaWinBase), 0u);
  EXPECT_EQ(d.rd(reg::kDmaWinLast), 0xFFFFFFFFu);
  EXPECT_EQ(d.rd(reg::kStatus), 0u);
  // undefined offsets: SLVERR, read data 0
  auto r = d.dev.try_read_reg(0x060);
  EXPECT_EQ(r.resp, 2u);
  EXPECT_EQ(r.data, 0u);
  EXPECT_EQ(d.dev.try_write_reg(0xFFC, 1), 2u);
  EXPECT_EQ(d.dev.try_read_reg(0x002).resp, 2u);
  // rw with byte strobes
  d.wr(reg::kRingBase, 0x12345670);
  EXPECT_EQ(d.dev.try_write_reg(reg::kRingBase, 0xAABBCCDD, 0x2), 0u);
  EXPECT_EQ(d.rd(reg::kRingBase), 0x1234CC70u);
  // ro ignores writes
  EXPECT_EQ(d.dev.try_write_reg(reg::kId, 0), 0u);
  EXPECT_EQ(d.rd(reg::kId), 0x54505557u);
}

// The generated register block (rtl/core/tpu_reg_top.sv) against the generated table
// (spec::kRegs): every offset answers OKAY, bits outside the fields read 0, rw / w1c registers
// come out of reset at their table value, rw registers keep exactly their bits, ro and w1c ones
// ignore writes of ones, and CTRL.SOFT_RESET resets exactly the registers the table says.
TEST(SystemRegs, GeneratedBlockFollowsTheTable) {
  Dev d(4);
  for (const spec::RegInfo& r : spec::kRegs) {
    const auto rd = d.dev.try_read_reg(r.offset);
    EXPECT_EQ(rd.resp, 0u) << r.name;
    EXPECT_EQ(rd.data & ~r.mask, 0u) << r.name;
    if (r.kind == spec::Access::kRw || r.kind == spec::Access::kW1c) {
      EXPECT_EQ(rd.data, r.reset) << r.name;
    }
    if (r.kind == spec::Access::kRo && r.reset != 0) {
      // constants (FEATURES: the bits with a fixed value; TRANSPOSE, BF16 and LUT are the build's)
      const uint32_t build_bits =
          r.offset == reg::kFeatures ? reg::kFeaturesTranspose | reg::kFeaturesBf16 | reg::kFeaturesLut : 0u;
      EXPECT_EQ(rd.data & ~build_bits, r.reset) << r.name;
    }
  }
  for (const spec::RegInfo& r : spec::kRegs) {
    // RING_TAIL rings the doorbell, CTRL and PERF_CTRL start actions: covered elsewhere.
    if (r.offset == reg::kRingTail || r.kind == spec::Access::kW1s) continue;
    const uint32_t before = d.rd(r.offset);
    EXPECT_EQ(d.dev.try_write_reg(r.offset, 0xFFFFFFFFu), 0u) << r.name;
    const uint32_t after = d.rd(r.offset);
    if (r.kind == spec::Access::kRw) {
      EXPECT_EQ(after, r.mask) << r.name;
      d.wr(r.offset, 0);
      EXPECT_EQ(d.rd(r.offset), 0u) << r.name;
    } else {
      EXPECT_EQ(after, before) << r.name;  // ro, and w1c with nothing pending
    }
  }
  // Soft reset: kept registers keep their value, the others return to reset.
  for (const spec::RegInfo& r : spec::kRegs) {
    if (r.kind == spec::Access::kRw && r.offset != reg::kRingTail) d.wr(r.offset, 0x5A5A5A50u);
  }
  d.wr(reg::kCtrl, reg::kCtrlSoftReset);
  for (int i = 0; i < 100 && (d.rd(reg::kStatus) & reg::kStatusResetting) != 0; ++i) d.dev.tick(1);
  for (const spec::RegInfo& r : spec::kRegs) {
    if (r.kind != spec::Access::kRw || r.offset == reg::kRingTail) continue;
    EXPECT_EQ(d.rd(r.offset), r.soft_reset ? r.reset : (0x5A5A5A50u & r.mask)) << r.name;
  }
}

// LOAD (2-D, strided) into UB and ACC, STORE back with another stride; N=4 has 64-bit beats
// (2 UB rows per beat, 2 beats per ACC row), N=16 128-bit beats (4 beats per ACC row).
class DmaRoundTrip : public ::testing::TestWithParam<std::tuple<unsigned, double>> {};

TEST_P(DmaRoundTrip, StridedLoadStoreUbAndAcc) {
  const auto [n, bp] = GetParam();
  Dev d(n, bp, bp > 0 ? 7 : 0);
  const uint32_t beat = d.dev.params().dma_data_w / 8;
  const uint32_t ub_rb = std::max(n, beat) * 2, acc_rb = 4 * n * 2;
  const uint32_t rows = 37;
  const uint32_t src = 0x10000, dst = 0x40000, src2 = 0x80000, dst2 = 0xC0000;
  const uint32_t s_in = ub_rb + 3 * beat, s_out = ub_rb + 5 * beat;
  const uint32_t a_in = acc_rb + beat, a_out = acc_rb + 2 * beat;
  const auto in = random_bytes(rows * s_in, 1);
  const auto in2 = random_bytes(rows * a_in, 2);
  d.dev.mem_write(src, in.data(), in.size());
  d.dev.mem_write(src2, in2.data(), in2.size());

  std::vector<Word> p;
  p.push_back(load({}, spec::Mem::kUb, 5, src, rows, ub_rb, s_in));
  p.push_back(load({.push_next = true}, spec::Mem::kAcc, 3, src2, rows, acc_rb, a_in));
  p.push_back(nop({.pop_prev = true, .push_next = true}));
  p.push_back(store({.pop_prev = true}, spec::Mem::kUb, 5, dst, rows, ub_rb, s_out));
  p.push_back(store({}, spec::Mem::kAcc, 3, dst2, rows, acc_rb, a_out));
  p.push_back(fence(0xCAFE0001u, kFenceAddr, true));
  d.run(p, 500000);
  ASSERT_TRUE(d.dev.irq());
  EXPECT_EQ(d.rd(reg::kStatus), 0u);
  EXPECT_EQ(d.rd(reg::kFenceValue), 0xCAFE0001u);
  EXPECT_EQ(d.rd(reg::kIrqStatus), reg::kIrqStatusFence);
  EXPECT_EQ(d.rd(reg::kRingHead), static_cast<uint32_t>(p.size()));
  uint32_t fv = 0;
  d.dev.mem_read(kFenceAddr, &fv, 4);
  EXPECT_EQ(fv, 0xCAFE0001u);
  for (uint32_t r = 0; r < rows; ++r) {
    std::vector<uint8_t> got(ub_rb), got2(acc_rb);
    d.dev.mem_read(dst + r * s_out, got.data(), ub_rb);
    ASSERT_EQ(0, std::memcmp(got.data(), &in[r * s_in], ub_rb)) << "UB row " << r;
    d.dev.mem_read(dst2 + r * a_out, got2.data(), acc_rb);
    ASSERT_EQ(0, std::memcmp(got2.data(), &in2[r * a_in], acc_rb)) << "ACC row " << r;
  }
  // bytes between the strided rows are untouched (still zero)
  std::vector<uint8_t> gap(s_out - ub_rb);
  d.dev.mem_read(dst + ub_rb, gap.data(), gap.size());
  for (auto b : gap) EXPECT_EQ(b, 0);
  EXPECT_EQ(d.perf(reg::kPerfInstretLo), p.size());
  EXPECT_EQ(d.perf(reg::kPerfWrBytesLo), 2ull * rows * (ub_rb + acc_rb) / 2 + 4);
  EXPECT_EQ(d.perf(reg::kPerfRdBytesLo), 16ull * p.size() + rows * (ub_rb + acc_rb));
  EXPECT_GT(d.perf(reg::kPerfCyclesLo), 0u);
  // IRQ_STATUS is w1c
  d.wr(reg::kIrqStatus, reg::kIrqStatusFence);
  EXPECT_FALSE(d.dev.irq());
}

INSTANTIATE_TEST_SUITE_P(Configs, DmaRoundTrip,
                         ::testing::Values(std::make_tuple(4u, 0.0), std::make_tuple(4u, 0.3),
                                           std::make_tuple(16u, 0.0), std::make_tuple(16u, 0.3)));

// Contiguous transfer crossing 4 KiB pages: bursts split at the boundary, data intact.
TEST(SystemDma, ContiguousAcrossPages) {
  Dev d(4, 0.2, 5);
  const uint32_t src = 0x20000 - 0x40, dst = 0x60000 + 0x100, bytes = 6144;  // 1536 UB rows
  const auto in = random_bytes(bytes, 3);
  d.dev.mem_write(src, in.data(), in.size());
  const uint32_t rb = 256, rows = bytes / rb;  // 24 rows of 256 B, contiguous (stride = row)
  std::vector<Word> p{load({.push_next = true}, spec::Mem::kUb, 0, src, rows, rb, rb),
                      nop({.pop_prev = true, .push_next = true}),
                      store({.pop_prev = true}, spec::Mem::kUb, 0, dst, rows, rb, rb),
                      fence(7, kFenceAddr, true)};
  d.run(p, 200000);
  ASSERT_TRUE(d.dev.irq());
  ASSERT_EQ(d.rd(reg::kStatus), 0u);
  std::vector<uint8_t> got(bytes);
  d.dev.mem_read(dst, got.data(), bytes);
  EXPECT_EQ(got, in);
}

// FENCE writes exactly 4 bytes (wstrb) even when the word is not beat-aligned.
TEST(SystemFence, WritesOnlyItsWord) {
  Dev d(16);
  std::vector<uint8_t> ones(32, 0xEE);
  d.dev.mem_write(0x2000, ones.data(), ones.size());
  d.run({fence(0x11223344u, 0x2008, true)}, 10000);
  ASSERT_TRUE(d.dev.irq());
  std::vector<uint8_t> got(32);
  d.dev.mem_read(0x2000, got.data(), 32);
  for (int i = 0; i < 32; ++i) {
    const uint8_t want_le = (i >= 8 && i < 12) ? static_cast<uint8_t>(0x11223344u >> (8 * (i - 8))) : 0xEE;
    EXPECT_EQ(got[i], want_le) << i;
  }
  EXPECT_EQ(d.perf(reg::kPerfWrBytesLo), 4u);
}

// The ring wraps: a second submission continues at HEAD and wraps past RING_SIZE - 1.
TEST(SystemRing, WrapsAround) {
  Dev d(4);
  d.wr(reg::kIrqEnable, reg::kIrqEnableFence);
  d.wr(reg::kRingBase, kRing);
  d.wr(reg::kRingSize, 4);
  for (uint32_t i = 0; i < 3; ++i) d.dev.mem_write(kRing + 16 * i, fence(10 + i, kFenceAddr, i == 2).data(), 16);
  d.wr(reg::kRingTail, 3);
  d.dev.run(10000);
  ASSERT_TRUE(d.dev.irq());
  EXPECT_EQ(d.rd(reg::kFenceValue), 12u);
  EXPECT_EQ(d.rd(reg::kRingHead), 3u);
  d.wr(reg::kIrqStatus, reg::kIrqStatusFence);
  const uint32_t idx[3] = {3, 0, 1};
  for (uint32_t i = 0; i < 3; ++i)
    d.dev.mem_write(kRing + 16 * idx[i], fence(20 + i, kFenceAddr, i == 2).data(), 16);
  d.wr(reg::kRingTail, 2);
  d.dev.run(10000);
  ASSERT_TRUE(d.dev.irq());
  EXPECT_EQ(d.rd(reg::kFenceValue), 22u);
  EXPECT_EQ(d.rd(reg::kRingHead), 2u);
  EXPECT_EQ(d.rd(reg::kStatus), 0u);
  EXPECT_EQ(d.perf(reg::kPerfInstretLo), 6u);
}

// ------------------------------------------------------------------------------------------------
// Faults and soft reset
void expect_fault(Dev& d, spec::Fault cause, uint32_t pc, uint32_t info) {
  EXPECT_TRUE(d.dev.irq());
  EXPECT_EQ(d.rd(reg::kStatus) & reg::kStatusFault, reg::kStatusFault);
  EXPECT_EQ(d.rd(reg::kStatus) & reg::kStatusBusy, 0u);
  EXPECT_EQ(d.rd(reg::kFaultCause), static_cast<uint32_t>(cause));
  EXPECT_EQ(d.rd(reg::kFaultPc), pc);
  EXPECT_EQ(d.rd(reg::kFaultInfo), info);
  EXPECT_EQ(d.rd(reg::kIrqStatus) & reg::kIrqStatusFault, reg::kIrqStatusFault);
}

void soft_reset(Dev& d) {
  d.wr(reg::kCtrl, reg::kCtrlSoftReset);
  for (int i = 0; i < 1000 && (d.rd(reg::kCtrl) & reg::kCtrlSoftReset); ++i) d.dev.tick(10);
  EXPECT_EQ(d.rd(reg::kCtrl), 0u);
  EXPECT_EQ(d.rd(reg::kStatus), 0u);
}

TEST(SystemFault, IllegalOpcodeAfterDrain) {
  Dev d(4);
  Word bad{};
  bad[0] = 0x5A;
  const auto in = random_bytes(64, 4);
  d.dev.mem_write(0x3000, in.data(), 64);
  std::vector<Word> p{load({.push_next = true}, spec::Mem::kUb, 0, 0x3000, 1, 64, 64),
                      nop({.pop_prev = true, .push_next = true}),
                      store({.pop_prev = true}, spec::Mem::kUb, 0, 0x5000, 1, 64, 64), bad,
                      fence(1, kFenceAddr, true)};
  d.run(p, 100000);
  expect_fault(d, spec::Fault::kIllegalOpcode, kRing + 3 * 16, 0x5A);
  // everything before the fault finished (drained)
  std::vector<uint8_t> got(64);
  d.dev.mem_read(0x5000, got.data(), 64);
  EXPECT_EQ(got, in);
  EXPECT_EQ(d.rd(reg::kFenceValue), 0u);
  EXPECT_EQ(d.rd(reg::kRingHead), 3u);
}

TEST(SystemFault, ValidationCausesAndInfo) {
  struct Case { Word w; spec::Fault cause; uint32_t info; };
  Word rsv = nop({});
  set_bits(rsv, 100, 1, 1);
  Word rsv2 = load({}, spec::Mem::kUb, 0, 0x100, 1, 16, 16);
  set_bits(rsv2, 14, 1, 1);
  set_bits(rsv2, 125, 1, 1);
  const std::vector<Case> cases{
      {rsv, spec::Fault::kIllegalField, 100},
      {rsv2, spec::Fault::kIllegalField, 14},
      {load({.pop_prev = true}, spec::Mem::kUb, 0, 0x100, 1, 16, 16), spec::Fault::kIllegalField, 8},
      {store({.push_next = true}, spec::Mem::kUb, 0, 0x100, 1, 16, 16), spec::Fault::kIllegalField, 11},
      {load({}, static_cast<spec::Mem>(3), 0, 0x100, 1, 16, 16), spec::Fault::kIllegalField, 12},
      {store({}, spec::Mem::kWb, 0, 0x100, 1, 16, 16), spec::Fault::kIllegalField, 12},
      {load({}, spec::Mem::kUb, 0, 0x100, 0, 16, 16), spec::Fault::kIllegalField, 68},
      {load({}, spec::Mem::kAcc, 0, 0x100, 1, 8, 16), spec::Fault::kIllegalField, 84},
      {load({}, spec::Mem::kUb, 0, 0x104, 1, 8, 16), spec::Fault::kIllegalField, 36},
      {load({}, spec::Mem::kUb, 0, 0x100, 2, 8, 12), spec::Fault::kIllegalField, 100},
      {load({}, spec::Mem::kWb, 510, 0x100, 1, 16, 16), spec::Fault::kLocalRange, 512},
      {loadw({}, 600), spec::Fault::kLocalRange, 600},
      {matmul({}, 2040, 0, 16, false, false), spec::Fault::kLocalRange, 2048},
      {matmul({}, 0, 1020, 0, false, false), spec::Fault::kIllegalField, 56},
      {fence(0, 0x102, false), spec::Fault::kIllegalField, 64},
      {load({}, spec::Mem::kUb, 0, 0xFFFFFF00u, 2, 8, 0x100), spec::Fault::kDmaWindow, 0xFFFFFF00u},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    Dev d(4);
    d.run({nop({}), cases[i].w}, 20000);
    SCOPED_TRACE(i);
    expect_fault(d, cases[i].cause, kRing + 16, cases[i].info);
  }
}

TEST(SystemFault, DmaWindowAndSoftReset) {
  Dev d(4);
  d.wr(reg::kDmaWinBase, 0x10000);
  d.wr(reg::kDmaWinLast, 0x1FFFF);
  d.run({load({}, spec::Mem::kUb, 0, 0x1FFF8, 2, 8, 8)}, 20000);
  expect_fault(d, spec::Fault::kDmaWindow, kRing, 0x1FFF8);
  soft_reset(d);
  EXPECT_EQ(d.rd(reg::kRingBase), 0u);
  EXPECT_EQ(d.rd(reg::kRingHead), 0u);
  EXPECT_EQ(d.rd(reg::kFaultCause), 0u);
  EXPECT_EQ(d.rd(reg::kIrqStatus), 0u);
  EXPECT_EQ(d.rd(reg::kDmaWinBase), 0x10000u);   // kept
  EXPECT_EQ(d.rd(reg::kDmaWinLast), 0x1FFFFu);   // kept
  EXPECT_EQ(d.rd(reg::kIrqEnable), reg::kIrqEnableFence | reg::kIrqEnableFault);
  EXPECT_EQ(d.perf(reg::kPerfInstretLo), 0u);
  // works again afterwards
  d.run({fence(42, 0x10000, true)}, 20000);
  ASSERT_TRUE(d.dev.irq());
  EXPECT_EQ(d.rd(reg::kFenceValue), 42u);
}

TEST(SystemFault, AxiErrorOnLoadStoreAndFence) {
  // host memory is 1 MiB: addresses above answer DECERR
  {
    Dev d(4, 0.0, 0, 1u << 20);
    d.run({nop({}), load({}, spec::Mem::kUb, 0, 0x100000 - 0x20, 4, 16, 16)}, 20000);
    // the first two 16-byte rows are fine, the third burst (0x100000) fails
    expect_fault(d, spec::Fault::kAxiError, kRing + 16, 0x100000);
    soft_reset(d);
  }
  {
    Dev d(16, 0.0, 0, 1u << 20);
    d.run({nop({.push_next = true}), store({.pop_prev = true}, spec::Mem::kAcc, 0, 0xFFFC0, 2, 64, 64)},
          20000);
    expect_fault(d, spec::Fault::kAxiError, kRing + 16, 0x100000);
    soft_reset(d);
    EXPECT_EQ(d.rd(reg::kStatus), 0u);
  }
  {
    // a row that straddles the end of host memory (and a 4 KiB page): FAULT_INFO is the row start
    Dev d(4, 0.0, 0, 1u << 20);
    d.run({load({}, spec::Mem::kUb, 0, 0xFFFD0, 2, 32, 32)}, 20000);
    expect_fault(d, spec::Fault::kAxiError, kRing, 0xFFFF0);
  }
  {
    Dev d(4, 0.0, 0, 1u << 20);
    d.run({fence(5, 0x200000, true)}, 20000);
    expect_fault(d, spec::Fault::kAxiError, kRing, 0x200000);
  }
}

TEST(SystemFault, RingConfig) {
  Dev d(4);
  d.wr(reg::kIrqEnable, reg::kIrqEnableFault);
  d.wr(reg::kRingBase, kRing);
  d.wr(reg::kRingSize, 4);
  d.wr(reg::kRingTail, 4);
  d.dev.run(1000);
  expect_fault(d, spec::Fault::kRingConfig, kRing, 4);
}

// Soft reset while DMA traffic is in flight: waits for the bus, then the device is usable.
TEST(SystemSoftReset, DuringTraffic) {
  Dev d(4, 0.3, 9);
  const auto in = random_bytes(64 * 1024, 5);
  d.dev.mem_write(0x10000, in.data(), in.size());
  std::vector<Word> p;
  for (int i = 0; i < 16; ++i) p.push_back(load({}, spec::Mem::kUb, 0, 0x10000 + i * 4096, 512, 8, 8));
  for (uint32_t i = 0; i < p.size(); ++i) d.dev.mem_write(kRing + 16 * i, p[i].data(), 16);
  d.wr(reg::kRingBase, kRing);
  d.wr(reg::kRingSize, 64);
  d.wr(reg::kRingTail, static_cast<uint32_t>(p.size()));
  d.dev.tick(300);
  EXPECT_EQ(d.rd(reg::kStatus) & reg::kStatusBusy, reg::kStatusBusy);
  soft_reset(d);
  EXPECT_EQ(d.rd(reg::kRingTail), 0u);
  d.run({fence(9, kFenceAddr, true)}, 20000);
  ASSERT_TRUE(d.dev.irq());
  EXPECT_EQ(d.rd(reg::kFenceValue), 9u);
}

// ------------------------------------------------------------------------------------------------
// GEMM C[M][Nn] = A[M][K] * B[K][Nn] (int8 in, int32 out) with A resident in the UB, weight tiles
// streamed through an 8-slot WB ring and 2 ACC strips double-buffered against the stores.
struct GemmResult {
  uint64_t cycles, busy, mxu_active, dma_wait;
  bool correct;
};

GemmResult run_gemm(unsigned n, uint32_t M, uint32_t K, uint32_t Nn, double bp = 0.0) {
  Dev d(n, bp);
  const uint32_t A = 0x100000, B = A + M * K, C = 0x800000;
  auto a = random_bytes(M * K, 10), b = random_bytes(K * Nn, 11);
  d.dev.mem_write(A, a.data(), a.size());
  d.dev.mem_write(B, b.data(), b.size());
  const uint32_t kt_n = K / n, nt_n = Nn / n, slots = 8;
  // When a UB row (n bytes) is narrower than a DMA beat, strided n-byte rows are illegal: the
  // host then keeps A as kt-major M x n blocks and B as contiguous n x n tiles. Otherwise A and B
  // stay row-major and the loads are 2-D (A: M rows of n bytes, stride K: one beat per burst).
  const bool pretile = n < d.dev.params().dma_data_w / 8;
  if (pretile) {
    std::vector<uint8_t> at(a.size()), bt(b.size());
    for (uint32_t kt = 0; kt < kt_n; ++kt)
      for (uint32_t m = 0; m < M; ++m)
        for (uint32_t k = 0; k < n; ++k) at[(kt * M + m) * n + k] = a[m * K + kt * n + k];
    for (uint32_t nt = 0; nt < nt_n; ++nt)
      for (uint32_t kt = 0; kt < kt_n; ++kt)
        for (uint32_t r = 0; r < n; ++r)
          for (uint32_t c = 0; c < n; ++c)
            bt[((nt * kt_n + kt) * n + r) * n + c] = b[(kt * n + r) * Nn + nt * n + c];
    d.dev.mem_write(A, at.data(), at.size());
    d.dev.mem_write(B, bt.data(), bt.size());
  }
  std::vector<Word> p;
  uint32_t tile = 0;
  for (uint32_t nt = 0; nt < nt_n; ++nt) {
    const uint32_t strip = (nt % 2) * M;
    for (uint32_t kt = 0; kt < kt_n; ++kt, ++tile) {
      if (nt == 0) {
        p.push_back(pretile ? load({}, spec::Mem::kUb, kt * M, A + kt * M * n, 1, M * n, M * n)
                            : load({}, spec::Mem::kUb, kt * M, A + kt * n, M, n, K));
      }
      const uint32_t slot = (tile % slots) * n;
      const Flags wf{.pop_next = tile >= slots, .push_next = true};
      p.push_back(pretile ? load(wf, spec::Mem::kWb, slot, B + (nt * kt_n + kt) * n * n, 1, n * n, n * n)
                          : load(wf, spec::Mem::kWb, slot, B + kt * n * Nn + nt * n, n, n, Nn));
      p.push_back(loadw({.pop_prev = true, .push_prev = true}, slot));
      p.push_back(matmul({.pop_next = (kt == 0 && nt >= 2), .push_next = (kt == kt_n - 1)},
                         kt * M, strip, M, kt != 0, true));
    }
    p.push_back(store({.pop_prev = true, .push_prev = nt + 2 < nt_n}, spec::Mem::kAcc, strip,
                      C + nt * n * 4, M, 4 * n, Nn * 4));
  }
  p.push_back(fence(0x600D, kFenceAddr, true));
  d.wr(reg::kPerfCtrl, reg::kPerfCtrlClear);
  const uint64_t cyc = d.run(p, 20'000'000, static_cast<uint32_t>(p.size() + 8));
  GemmResult r{};
  r.cycles = cyc;
  r.busy = d.perf(reg::kPerfCyclesLo);
  r.mxu_active = d.perf(reg::kPerfMxuActiveLo);
  r.dma_wait = d.perf(reg::kPerfDmaWaitLo);
  r.correct = d.dev.irq() && d.rd(reg::kFenceValue) == 0x600D && d.rd(reg::kStatus) == 0;
  if (!r.correct) return r;
  std::vector<int32_t> c(static_cast<size_t>(M) * Nn);
  d.dev.mem_read(C, c.data(), c.size() * 4);
  for (uint32_t i = 0; i < M && r.correct; ++i) {
    for (uint32_t j = 0; j < Nn; ++j) {
      int32_t s = 0;
      for (uint32_t k = 0; k < K; ++k)
        s += static_cast<int8_t>(a[i * K + k]) * static_cast<int8_t>(b[k * Nn + j]);
      if (c[i * Nn + j] != s) {
        ADD_FAILURE() << "C[" << i << "][" << j << "] = " << c[i * Nn + j] << ", want " << s;
        r.correct = false;
        break;
      }
    }
  }
  return r;
}

TEST(SystemGemm, SmallN4WithBackpressure) {
  const auto r = run_gemm(4, 24, 16, 20, 0.25);
  EXPECT_TRUE(r.correct);
}

TEST(SystemGemm, Mxu512CubedUtilizationN16) {
  const uint32_t M = 512, K = 512, Nn = 512;
  const auto r = run_gemm(16, M, K, Nn);
  ASSERT_TRUE(r.correct);
  const double util = static_cast<double>(M) * K * Nn / (16.0 * 16.0 * static_cast<double>(r.busy));
  std::printf("gemm 512^3 N=16: busy %llu cycles, mxu_active %llu, dma_wait %llu, utilization %.3f\n",
              static_cast<unsigned long long>(r.busy), static_cast<unsigned long long>(r.mxu_active),
              static_cast<unsigned long long>(r.dma_wait), util);
  EXPECT_GE(util, 0.90);
}

// ------------------------------------------------------------------------------------------------
// ISA 1.1 TRANSPOSE and VECTOR through the whole device (decoder field rules, dispatch, data).
Word transpose_w(Flags f, uint32_t src, uint32_t dst, uint32_t rows, bool bf16) {
  Word w = header(spec::Opcode::kTranspose, f);
  set(w, spec::transpose::kSrcAddr, src);
  set(w, spec::transpose::kDstAddr, dst);
  set(w, spec::transpose::kRows, rows);
  set(w, spec::transpose::kBf16, bf16);
  return w;
}
Word vector_w(Flags f, uint32_t op, uint32_t dst, uint32_t a, uint32_t b, uint32_t rows, uint32_t s) {
  Word w = header(spec::Opcode::kVector, f);
  set(w, spec::vector::kOp, op);
  set(w, spec::vector::kDstAddr, dst);
  set(w, spec::vector::kAAddr, a);
  set(w, spec::vector::kBAddr, b);
  set(w, spec::vector::kRows, rows);
  set(w, spec::vector::kScalar, s);
  return w;
}

TEST(SystemFault, TransposeAndVectorFieldRules) {
  // N=4 device: UB 2048 rows, ACC 1024 rows.
  constexpr uint32_t kAdd = 0, kScale = 4, kColsum = 8;
  Word rsv = transpose_w({}, 0, 0, 1, false);
  set_bits(rsv, 13, 1, 1);
  struct Case { Word w; spec::Fault cause; uint32_t info; };
  const std::vector<Case> cases{
      {rsv, spec::Fault::kIllegalField, 13},
      {transpose_w({}, 0, 8, 0, false), spec::Fault::kIllegalField, 56},
      {transpose_w({}, 0, 8, 5, false), spec::Fault::kIllegalField, 56},
      {transpose_w({}, 1, 8, 4, true), spec::Fault::kIllegalField, 16},
      {transpose_w({}, 0, 9, 4, true), spec::Fault::kIllegalField, 36},
      {transpose_w({}, 2046, 0, 4, false), spec::Fault::kLocalRange, 2048},
      {transpose_w({}, 2042, 0, 4, true), spec::Fault::kLocalRange, 2048},
      {transpose_w({}, 0, 2045, 1, false), spec::Fault::kLocalRange, 2048},
      {transpose_w({}, 0, 2042, 1, true), spec::Fault::kLocalRange, 2048},
      {transpose_w({.pop_prev = true, .push_next = true}, 0, 2045, 1, false), spec::Fault::kLocalRange, 2048},
      {vector_w({}, 11, 0, 8, 16, 4, 0), spec::Fault::kIllegalField, 12},  // 10 is IMAX since ISA 1.3
      {vector_w({}, 15, 0, 8, 16, 4, 0), spec::Fault::kIllegalField, 12},
      {vector_w({}, kAdd, 0, 8, 16, 0, 0), spec::Fault::kIllegalField, 76},
      {vector_w({}, kAdd, 9, 8, 100, 4, 0), spec::Fault::kIllegalField, 16},
      {vector_w({}, kAdd, 100, 8, 97, 4, 0), spec::Fault::kIllegalField, 16},
      {vector_w({}, kAdd, 1022, 8, 100, 4, 0), spec::Fault::kLocalRange, 1024},
      {vector_w({}, kColsum, 1024, 0, 0, 4, 0), spec::Fault::kLocalRange, 1024},
      {vector_w({}, kAdd, 0, 1021, 100, 4, 0), spec::Fault::kLocalRange, 1024},
      {vector_w({}, kAdd, 0, 8, 1023, 2, 0), spec::Fault::kLocalRange, 1023 + 1},
      {vector_w({}, kAdd, 0, 8, 0xFFFFF, 2, 0), spec::Fault::kLocalRange, 0xFFFFF},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    Dev d(4);
    d.run({nop({}), cases[i].w}, 20000);
    SCOPED_TRACE(i);
    expect_fault(d, cases[i].cause, kRing + 16, cases[i].info);
  }
  // Legal: ops that do not read b ignore b_addr; COLSUM's one destination row may overlap a; an
  // element-wise destination equal to a source.
  Dev d(4);
  d.run({vector_w({}, kScale, 0, 8, 0xFFFFF, 4, 0x3F800000u), vector_w({}, kColsum, 9, 8, 0xFFFFF, 4, 0),
         vector_w({}, kAdd, 8, 8, 8, 4, 0), fence(7, kFenceAddr, true)},
        20000);
  EXPECT_EQ(d.rd(reg::kStatus) & reg::kStatusFault, 0u);
  EXPECT_EQ(d.rd(reg::kFenceValue), 7u);
}

TEST(SystemAux, TransposeAndVectorResults) {
  Dev d(4);
  constexpr uint32_t kN = 4, kIn = 0x4000, kOut = 0x8000;
  EXPECT_EQ(d.rd(reg::kFeatures) & reg::kFeaturesTranspose, reg::kFeaturesTranspose);
  // UB rows 0..3: an int8 tile; ACC rows 0..7: a, 8..15: b (fp32 with special values).
  std::vector<uint8_t> ub = random_bytes(kN * kN, 21);
  std::vector<uint32_t> acc(16 * kN);
  std::mt19937 g(22);
  const uint32_t specials[] = {0x7FC00001u, 0xFF800000u, 0x7F800000u, 0x00000001u, 0x80000000u, 0x7F7FFFFFu};
  for (size_t i = 0; i < acc.size(); ++i) acc[i] = (g() % 4 == 0) ? specials[g() % 6] : static_cast<uint32_t>(g());
  d.dev.mem_write(kIn, ub.data(), ub.size());
  d.dev.mem_write(kIn + 0x100, acc.data(), acc.size() * 4);
  const uint32_t s = 0xBD4CCCCDu;  // -0.05f
  std::vector<Word> p{
      load({}, spec::Mem::kUb, 0, kIn, 1, kN * kN, kN * kN),
      load({.push_next = true}, spec::Mem::kAcc, 0, kIn + 0x100, 16, 4 * kN, 4 * kN),
      transpose_w({.pop_prev = true}, 0, 8, 3, false),
      vector_w({}, 3 /*AXPY*/, 16, 0, 8, 8, s),
      vector_w({.push_next = true}, 8 /*COLSUM*/, 24, 16, 0, 8, 0),
      store({.pop_prev = true}, spec::Mem::kUb, 8, kOut, 1, kN * kN, kN * kN),
      store({}, spec::Mem::kAcc, 16, kOut + 0x100, 9, 4 * kN, 4 * kN),
      fence(1, kFenceAddr, true)};
  d.run(p, 100000);
  ASSERT_EQ(d.rd(reg::kStatus) & reg::kStatusFault, 0u);
  ASSERT_EQ(d.rd(reg::kFenceValue), 1u);
  std::vector<uint8_t> t(kN * kN);
  d.dev.mem_read(kOut, t.data(), t.size());
  for (uint32_t j = 0; j < kN; ++j)
    for (uint32_t i = 0; i < kN; ++i) EXPECT_EQ(t[j * kN + i], i < 3 ? ub[i * kN + j] : 0u) << j << "," << i;
  std::vector<uint32_t> out(9 * kN);
  d.dev.mem_read(kOut + 0x100, out.data(), out.size() * 4);
  std::vector<uint32_t> sum(kN, 0);
  for (uint32_t r = 0; r < 8; ++r) {
    for (uint32_t n = 0; n < kN; ++n) {
      const uint32_t want = tpuw::num::axpy(acc[r * kN + n], s, acc[(8 + r) * kN + n]);
      EXPECT_EQ(out[r * kN + n], want) << "AXPY row " << r << " lane " << n;
      sum[n] = tpuw::num::colsum_step(sum[n], want);
    }
  }
  for (uint32_t n = 0; n < kN; ++n) EXPECT_EQ(out[8 * kN + n], sum[n]) << "COLSUM lane " << n;
  EXPECT_GT(d.perf(reg::kPerfActBusyLo), 0u);
}

}  // namespace
