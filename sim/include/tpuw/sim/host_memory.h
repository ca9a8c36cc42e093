// Emulated host memory: pages mapped into an address range [base, base+size) that the device
// masters into over AXI4 (through AxiSlave) and the CPU side reads and writes directly (no device
// cycles pass). Pages can be mapped while the device runs (map()); bytes already mapped never move.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace tpuw::sim {

/// Host memory and AXI4 slave knobs. Mirrors tpuw::HostMemoryConfig (host/include/tpuw/backend.h)
/// field for field, plus two simulation-only knobs at the end.
struct MemoryConfig {
  uint64_t base = 0x0;            // first byte address of the range (a multiple of 4096)
  uint64_t size = 64ull << 20;    // bytes of address range; accesses outside mapped pages get DECERR
  uint64_t mapped = UINT64_MAX;   // bytes from base mapped at construction (clamped to size)
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
  static constexpr uint64_t kPageBytes = 4096;          // mapping granularity (an AXI burst's limit)
  static constexpr unsigned kChunkShift = 20;           // backing store: 1 MiB calloc'd chunks

  /// Maps the first `mapped` bytes (all by default). Throws SimError(kInvalidArgument) for size 0,
  /// a base that is not a multiple of kPageBytes or a range that wraps around 2^64.
  HostMemory(uint64_t base, uint64_t size, uint64_t mapped = UINT64_MAX);

  uint64_t base() const noexcept { return base_; }
  uint64_t size() const noexcept { return size_; }
  uint64_t mapped_bytes() const noexcept { return mapped_bytes_; }

  /// Maps the pages covering [addr, addr+bytes) (zero-filled). Throws SimError(kOutOfRange) outside
  /// the range, SimError(kInvalidArgument) when the backing store cannot be allocated.
  void map(uint64_t addr, uint64_t bytes);

  /// True when every byte of [addr, addr+bytes) is mapped (no overflow).
  bool contains(uint64_t addr, uint64_t bytes) const noexcept;

  /// CPU-side access. Throws SimError(kOutOfRange) naming the range when it leaves mapped memory.
  void write(uint64_t addr, const void* src, size_t bytes);
  void read(uint64_t addr, void* dst, size_t bytes) const;
  void fill(uint64_t addr, uint8_t value, size_t bytes);

  /// Direct pointer to the byte at `addr` (must be mapped; unchecked, for the AXI model). The bytes
  /// up to the end of addr's page are contiguous.
  uint8_t* at(uint64_t addr) noexcept {
    const uint64_t off = addr - base_;
    return chunks_[off >> kChunkShift].get() + (off & ((uint64_t{1} << kChunkShift) - 1));
  }
  const uint8_t* at(uint64_t addr) const noexcept { return const_cast<HostMemory*>(this)->at(addr); }

 private:
  struct Free {
    void operator()(uint8_t* p) const noexcept;
  };
  void check(uint64_t addr, size_t bytes, const char* what) const;
  template <typename F>
  void for_each_span(uint64_t addr, size_t bytes, F&& f) const;

  uint64_t base_;
  uint64_t size_;
  uint64_t mapped_bytes_ = 0;
  std::vector<std::unique_ptr<uint8_t[], Free>> chunks_;  // calloc'd: untouched pages cost nothing
  std::vector<bool> page_mapped_;
};

}  // namespace tpuw::sim
