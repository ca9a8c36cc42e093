// Emulated host memory: a byte-addressable window [base, base+size) the device masters into over
// AXI4 (through AxiSlave) and the CPU side reads and writes directly (no device cycles pass).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace tpuw::sim {

/// Host memory and AXI4 slave knobs. Mirrors tpuw::HostMemoryConfig (host/include/tpuw/backend.h)
/// field for field, plus two simulation-only knobs at the end.
struct MemoryConfig {
  uint64_t base = 0x0;            // first byte address of host memory
  uint64_t size = 64ull << 20;    // bytes; accesses outside [base, base+size) get DECERR
  unsigned read_latency = 16;     // cycles from AR handshake to first R beat (min 1)
  unsigned write_latency = 16;    // cycles from last W beat to B (min 1)
  unsigned bytes_per_cycle = 16;  // bandwidth limit of each direction; 0 = unlimited (one beat/cycle)
  double backpressure = 0.0;      // probability per cycle that a ready/valid is withheld
  uint64_t seed = 1;              // for backpressure and latency jitter
  // simulation-only
  unsigned latency_jitter = 0;    // each burst's latency gets an extra uniform 0..jitter cycles
  unsigned max_outstanding = 16;  // bursts in flight per direction before AWREADY/ARREADY drop
};

class HostMemory {
 public:
  /// Throws SimError(kInvalidArgument) for size 0 or a window that wraps around 2^64.
  HostMemory(uint64_t base, uint64_t size);

  uint64_t base() const noexcept { return base_; }
  uint64_t size() const noexcept { return size_; }
  /// True when `addr` and every byte of [addr, addr+bytes) lie in the window (no overflow).
  bool contains(uint64_t addr, uint64_t bytes) const noexcept {
    return addr >= base_ && addr - base_ < size_ && bytes <= size_ - (addr - base_);
  }

  /// CPU-side access. Throws SimError(kOutOfRange) naming the range when it leaves the window.
  void write(uint64_t addr, const void* src, size_t bytes);
  void read(uint64_t addr, void* dst, size_t bytes) const;
  void fill(uint64_t addr, uint8_t value, size_t bytes);

  /// Direct pointer to the byte at `addr` (must be in the window; unchecked, for the AXI model).
  uint8_t* at(uint64_t addr) noexcept { return data_.get() + (addr - base_); }
  const uint8_t* at(uint64_t addr) const noexcept { return data_.get() + (addr - base_); }

 private:
  struct Free {
    void operator()(uint8_t* p) const noexcept;
  };
  void check(uint64_t addr, size_t bytes, const char* what) const;

  uint64_t base_;
  uint64_t size_;
  std::unique_ptr<uint8_t[], Free> data_;  // calloc'd: untouched pages cost nothing
};

}  // namespace tpuw::sim
