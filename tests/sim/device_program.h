// Hand-assembly helpers for the integration tests: instructions are encoded from the field table
// in tpuw/spec.h (no dependency on the host assembler), written into a ring in host memory.
#pragma once

#include <array>
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

}  // namespace tpuw::sim::testing
