// Hand-assembly helpers for the integration tests: instructions are encoded from the field table
// in tpuw/spec.h (no dependency on the host assembler), written into a ring in host memory.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <random>
#include <string>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "tpuw/sim/sim_device.h"
#include "tpuw/spec.h"

namespace tpuw::sim::testing {

struct Instr {
  std::array<uint32_t, 4> w{};

  Instr& set(const spec::Field& f, uint64_t v) {
    for (unsigned i = 0; i < f.width; ++i) {
      if ((v >> i) & 1u) {
        const unsigned b = f.lsb + i;
        w[b / 32] |= 1u << (b % 32);
      }
    }
    return *this;
  }
  Instr& pop_prev() { return set(spec::header::kPopPrev, 1); }
  Instr& pop_next() { return set(spec::header::kPopNext, 1); }
  Instr& push_prev() { return set(spec::header::kPushPrev, 1); }
  Instr& push_next() { return set(spec::header::kPushNext, 1); }
};

inline Instr op(spec::Opcode o) {
  Instr i;
  i.set(spec::header::kOpcode, static_cast<uint8_t>(o));
  return i;
}

inline Instr load(spec::Mem mem, uint32_t local, uint32_t host, uint32_t rows, uint32_t row_bytes,
                  uint32_t stride) {
  Instr i = op(spec::Opcode::kLoad);
  i.set(spec::load::kMem, static_cast<uint8_t>(mem)).set(spec::load::kLocalAddr, local);
  i.set(spec::load::kHostAddr, host).set(spec::load::kRows, rows);
  i.set(spec::load::kRowBytes, row_bytes).set(spec::load::kHostStride, stride);
  return i;
}

inline Instr store(spec::Mem mem, uint32_t local, uint32_t host, uint32_t rows, uint32_t row_bytes,
                   uint32_t stride) {
  Instr i = op(spec::Opcode::kStore);
  i.set(spec::store::kMem, static_cast<uint8_t>(mem)).set(spec::store::kLocalAddr, local);
  i.set(spec::store::kHostAddr, host).set(spec::store::kRows, rows);
  i.set(spec::store::kRowBytes, row_bytes).set(spec::store::kHostStride, stride);
  return i;
}

inline Instr loadw(uint32_t wb_addr) {
  return op(spec::Opcode::kLoadw).set(spec::loadw::kWbAddr, wb_addr);
}

inline Instr matmul(uint32_t ub, uint32_t acc, uint32_t rows, bool swap, bool accumulate) {
  Instr i = op(spec::Opcode::kMatmul);
  i.set(spec::matmul::kUbAddr, ub).set(spec::matmul::kAccAddr, acc).set(spec::matmul::kRows, rows);
  i.set(spec::matmul::kSwap, swap ? 1 : 0).set(spec::matmul::kAccumulate, accumulate ? 1 : 0);
  return i;
}

inline Instr fence(uint32_t value, uint32_t host, bool irq) {
  Instr i = op(spec::Opcode::kFence);
  i.set(spec::fence::kValue, value).set(spec::fence::kHostAddr, host).set(spec::fence::kIrq, irq ? 1 : 0);
  return i;
}

/// Writes the program at `ring` (RING_SIZE = `ring_entries`), enables both interrupts and rings
/// the doorbell.
inline void submit(SimDevice& d, uint32_t ring, uint32_t ring_entries, const std::vector<Instr>& prog) {
  for (size_t k = 0; k < prog.size(); ++k) d.mem_write(ring + 16 * k, prog[k].w.data(), 16);
  d.write_reg(spec::reg::kIrqEnable, spec::reg::kIrqEnableFence | spec::reg::kIrqEnableFault);
  d.write_reg(spec::reg::kRingBase, ring);
  d.write_reg(spec::reg::kRingSize, ring_entries);
  d.write_reg(spec::reg::kRingTail, static_cast<uint32_t>(prog.size()));
}

/// Host row size that satisfies both LOAD/STORE rules: a multiple of the local row and the beat.
inline uint32_t host_row_bytes(uint32_t local_row_bytes, const DeviceParams& p) {
  return std::lcm(local_row_bytes, p.dma_data_w / 8);
}

// ---------------------------------------------------------------------------------------------
// A single-tile GEMM program and its expected result.

inline constexpr uint32_t kBase = 0x10000000;  // host memory window used by these tests
inline constexpr uint32_t kSize = 1u << 20;

inline SimDeviceConfig config_for(unsigned n) {
  SimDeviceConfig c;
  c.array_n = n;
  c.memory.base = kBase;
  c.memory.size = kSize;
  return c;
}

struct Layout {
  uint32_t ring = kBase;
  uint32_t a = kBase + 0x1000;
  uint32_t w = kBase + 0x4000;
  uint32_t c = kBase + 0x8000;
  uint32_t fence = kBase + 0xF000;
};

struct Gemm {
  unsigned n = 0, m = 0;
  std::vector<int8_t> a, w;  // A: m x n, W: n x n (row k = weights multiplying element k)
  std::vector<int32_t> expect;
};

inline Gemm make_gemm(unsigned n, unsigned m, uint64_t seed) {
  Gemm g;
  g.n = n;
  g.m = m;
  std::mt19937_64 rng(seed);
  g.a.resize(size_t{m} * n);
  g.w.resize(size_t{n} * n);
  for (auto& x : g.a) x = static_cast<int8_t>(rng());
  for (auto& x : g.w) x = static_cast<int8_t>(rng());
  g.expect.assign(size_t{m} * n, 0);
  for (unsigned i = 0; i < m; ++i) {
    for (unsigned j = 0; j < n; ++j) {
      int32_t s = 0;
      for (unsigned k = 0; k < n; ++k) s += int32_t{g.a[i * n + k]} * int32_t{g.w[k * n + j]};
      g.expect[i * n + j] = s;
    }
  }
  return g;
}

// LOAD W -> WB, LOAD A -> UB, LOADW, MATMUL(swap), STORE ACC, FENCE(irq).
inline std::vector<Instr> gemm_program(SimDevice& d, const Gemm& g, const Layout& l, uint32_t fence_value) {
  const DeviceParams& p = d.params();
  d.mem_write(l.a, g.a.data(), g.a.size());
  d.mem_write(l.w, g.w.data(), g.w.size());
  const uint32_t rb8 = host_row_bytes(p.array_n, p);
  const uint32_t rb32 = host_row_bytes(4 * p.array_n, p);
  const auto bytes_a = static_cast<uint32_t>(g.a.size());
  const auto bytes_w = static_cast<uint32_t>(g.w.size());
  const uint32_t bytes_c = g.m * 4 * g.n;
  EXPECT_EQ(bytes_a % rb8, 0u);
  EXPECT_EQ(bytes_c % rb32, 0u);
  using spec::Mem;
  return {
      load(Mem::kWb, 0, l.w, bytes_w / rb8, rb8, rb8).push_next(),
      load(Mem::kUb, 0, l.a, bytes_a / rb8, rb8, rb8).push_next(),
      loadw(0).pop_prev(),
      matmul(0, 0, g.m, true, false).pop_prev().push_next(),
      store(Mem::kAcc, 0, l.c, bytes_c / rb32, rb32, rb32).pop_prev(),
      fence(fence_value, l.fence, true),
  };
}

inline std::vector<int32_t> read_result(SimDevice& d, const Gemm& g, const Layout& l) {
  std::vector<int32_t> c(size_t{g.m} * g.n);
  d.mem_read(l.c, c.data(), c.size() * 4);
  return c;
}

inline std::string fault_text(SimDevice& d) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "STATUS=%#x FAULT_CAUSE=%u FAULT_PC=%#x FAULT_INFO=%#x RING_HEAD=%u cycle=%llu",
                d.read_reg(spec::reg::kStatus), d.read_reg(spec::reg::kFaultCause), d.read_reg(spec::reg::kFaultPc),
                d.read_reg(spec::reg::kFaultInfo), d.read_reg(spec::reg::kRingHead),
                static_cast<unsigned long long>(d.cycle()));
  return buf;
}

}  // namespace tpuw::sim::testing
