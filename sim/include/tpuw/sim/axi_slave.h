// Cycle-level AXI4 slave over HostMemory: what the device's DMA master talks to.
//
// Timing model (one call of posedge() per device clock):
//   1. the caller drives out() onto the device's inputs and evaluates the device with clk low;
//   2. the caller samples the device's outputs into AxiMasterSignals and calls posedge(): every
//      channel with valid && ready handshakes, the slave advances one cycle and computes the
//      outputs of the next cycle (registered: they never depend on this cycle's master signals);
//   3. the caller raises clk (the device sees the same handshakes).
//
// Behaviour:
//  - INCR bursts (any awsize/arsize up to the bus width, narrow and unaligned first beats
//    included, at most 256 beats); WSTRB is honoured; FIXED/WRAP bursts and oversize beats are
//    answered SLVERR without touching memory.
//  - Up to MemoryConfig::max_outstanding bursts in flight per direction. Reads of different IDs
//    may complete out of order (latency jitter); responses of one ID are always in order. Read
//    bursts are not interleaved. Write data follows AW order (AXI4 has no WID); W beats are
//    accepted once their AW has been.
//  - A burst any byte of which falls outside [base, base+size) is answered DECERR: every R beat
//    carries zero data, RRESP=DECERR and RLAST on the last; write beats are consumed and dropped,
//    BRESP=DECERR. Memory is never touched by an erroring burst.
//  - Latency: first R beat no earlier than read_latency cycles after the AR handshake; B no
//    earlier than write_latency cycles after the last W beat (minimum 1 each).
//  - Bandwidth: a credit of bytes_per_cycle per cycle and direction; a beat of 2^size bytes needs
//    that much credit. The credit is capped at bus width + bytes_per_cycle - 1, so a continuous
//    stream runs at exactly bytes_per_cycle and an idle period buys at most one extra beat.
//  - Backpressure: with probability `backpressure` each of AWREADY, WREADY, ARREADY is withheld
//    for a cycle, and a not-yet-raised RVALID/BVALID is delayed a cycle (a raised valid is
//    always held until its handshake, as AXI requires). Seeded, deterministic.
// No heap allocation after construction; an idle cycle costs a handful of branches.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "tpuw/sim/host_memory.h"

namespace tpuw::sim {

inline constexpr unsigned kAxiMaxBusBytes = 64;  // up to 512-bit data buses (WSTRB fits 64 bits)

enum AxiResp : uint8_t { kAxiOkay = 0, kAxiExOkay = 1, kAxiSlvErr = 2, kAxiDecErr = 3 };
enum AxiBurst : uint8_t { kAxiFixed = 0, kAxiIncr = 1, kAxiWrap = 2 };

/// What the master drives, sampled just before the rising edge.
struct AxiMasterSignals {
  bool awvalid = false;
  uint32_t awid = 0;
  uint64_t awaddr = 0;
  uint8_t awlen = 0;
  uint8_t awsize = 0;
  uint8_t awburst = kAxiIncr;
  bool wvalid = false;
  const uint8_t* wdata = nullptr;  // bus_bytes bytes, byte lane i at wdata[i]
  uint64_t wstrb = 0;              // bit i enables byte lane i
  bool wlast = false;
  bool bready = false;
  bool arvalid = false;
  uint32_t arid = 0;
  uint64_t araddr = 0;
  uint8_t arlen = 0;
  uint8_t arsize = 0;
  uint8_t arburst = kAxiIncr;
  bool rready = false;
};

/// What the slave drives for a whole cycle.
struct AxiSlaveSignals {
  bool awready = false;
  bool wready = false;
  bool bvalid = false;
  uint32_t bid = 0;
  uint8_t bresp = kAxiOkay;
  bool arready = false;
  bool rvalid = false;
  uint32_t rid = 0;
  uint8_t rresp = kAxiOkay;
  bool rlast = false;
  alignas(8) std::array<uint8_t, kAxiMaxBusBytes> rdata{};  // first bus_bytes bytes are the beat
};

struct AxiSlaveStats {
  uint64_t read_bursts = 0, write_bursts = 0;
  uint64_t read_beats = 0, write_beats = 0;
  uint64_t read_bytes = 0, write_bytes = 0;  // bytes moved to/from memory (strobed bytes for writes)
  uint64_t read_errors = 0, write_errors = 0;  // bursts answered DECERR/SLVERR
  uint64_t protocol_errors = 0;  // master violations seen (WLAST mismatch, W without AW, bad burst)
  uint64_t first_r_cycle = 0, last_r_cycle = 0;  // cycles of the first / last R handshake
  uint64_t first_w_cycle = 0, last_w_cycle = 0;  // cycles of the first / last W handshake
};

class AxiSlave {
 public:
  /// bus_bytes: data bus width in bytes (power of two, 1..kAxiMaxBusBytes). Throws
  /// SimError(kInvalidArgument) for a bad width or a backpressure outside [0, 1).
  AxiSlave(HostMemory& memory, const MemoryConfig& config, unsigned bus_bytes);

  const AxiSlaveSignals& out() const noexcept { return out_; }
  void posedge(const AxiMasterSignals& in) noexcept;

  /// Forgets every burst in flight and drives idle outputs (the device's reset: rst_ni low).
  void reset() noexcept;

  /// Nothing in flight in either direction.
  bool idle() const noexcept { return nar_ == 0 && naw_ == 0 && nb_ == 0; }
  uint64_t cycle() const noexcept { return now_; }
  const AxiSlaveStats& stats() const noexcept { return stats_; }
  unsigned bus_bytes() const noexcept { return bus_bytes_; }

  /// Fault injection (tests): while on, every burst accepted from now on is answered DECERR as if
  /// it fell outside the window (memory untouched). Costs nothing per cycle: checked per burst.
  void set_fail_all(bool on) noexcept { fail_all_ = on; }
  bool fail_all() const noexcept { return fail_all_; }

 private:
  struct Burst {
    uint64_t addr = 0;      // address of the next beat
    uint64_t ready = 0;     // cycle from which it may answer
    uint32_t id = 0;
    uint16_t beats_left = 0;
    uint8_t size = 0;
    uint8_t resp = kAxiOkay;
  };

  bool draw() noexcept;  // true: withhold this cycle (backpressure)
  uint64_t latency(unsigned base) noexcept;
  uint8_t check_burst(uint64_t addr, uint8_t len, uint8_t size, uint8_t burst) const noexcept;
  void accept_ar(const AxiMasterSignals& in) noexcept;
  void accept_aw(const AxiMasterSignals& in) noexcept;
  void write_beat(const AxiMasterSignals& in) noexcept;
  void load_r_beat() noexcept;
  uint64_t beat_bytes(uint8_t size) const noexcept {
    return std::min<uint64_t>(uint64_t{1} << (size & 7u), bus_bytes_);
  }
  static uint64_t next_addr(uint64_t addr, uint8_t size) noexcept {
    return (addr & ~((uint64_t{1} << size) - 1)) + (uint64_t{1} << size);
  }

  HostMemory& mem_;
  unsigned bus_bytes_;
  unsigned max_out_;
  unsigned rd_latency_, wr_latency_, jitter_;
  uint64_t bpc_;       // bytes per cycle, 0 = unlimited
  uint64_t credit_cap_;
  uint64_t rd_credit_, wr_credit_;
  uint64_t bp_threshold_;  // backpressure probability scaled to 2^64; 0 = off
  uint64_t rng_;
  uint64_t now_ = 0;
  bool fail_all_ = false;

  AxiSlaveSignals out_;
  AxiSlaveStats stats_;

  // Reads accepted and not finished, oldest first; ar_[0] is the burst on the R channel when
  // r_active_. Fixed capacity (max_outstanding), shifted on removal.
  std::vector<Burst> ar_;
  unsigned nar_ = 0;
  int r_cur_ = -1;  // index into ar_ of the burst streaming on R, -1 none
  // Writes accepted on AW whose data has not all arrived, oldest first (ring).
  std::vector<Burst> aw_;
  unsigned aw_head_ = 0, naw_ = 0;
  // Writes whose data has arrived, waiting for B, oldest first (ring).
  std::vector<Burst> b_;
  unsigned b_head_ = 0, nb_ = 0;
};

}  // namespace tpuw::sim
