// Cycle-level AXI4-Lite master: runs one register read or write at a time on the device's s_axil_*
// port. Same timing model as AxiSlave: out() is driven for a whole cycle, posedge() samples the
// slave's signals just before the rising edge and computes the next cycle's outputs.
//
// A write raises AWVALID and WVALID together and holds each until its handshake, with BREADY
// high until the response; a read holds ARVALID until ARREADY, with RREADY high until RVALID.
#pragma once

#include <cstdint>

namespace tpuw::sim {

struct AxilMasterSignals {
  bool awvalid = false;
  uint32_t awaddr = 0;
  bool wvalid = false;
  uint32_t wdata = 0;
  uint8_t wstrb = 0;
  bool bready = false;
  bool arvalid = false;
  uint32_t araddr = 0;
  bool rready = false;
};

struct AxilSlaveSignals {
  bool awready = false;
  bool wready = false;
  bool bvalid = false;
  uint8_t bresp = 0;
  bool arready = false;
  bool rvalid = false;
  uint32_t rdata = 0;
  uint8_t rresp = 0;
};

/// Outcome of one AXI4-Lite access: the response code (0 OKAY, 2 SLVERR, 3 DECERR) and, for a
/// read, the data.
struct AxilResult {
  uint32_t data = 0;
  uint8_t resp = 0;
  bool ok() const noexcept { return resp == 0 || resp == 1; }
};

class AxilMaster {
 public:
  enum class Phase : uint8_t { kIdle, kRead, kWrite };

  /// Start an access; the master must be idle (else returns false and does nothing).
  bool start_read(uint32_t addr) noexcept;
  bool start_write(uint32_t addr, uint32_t data, uint8_t strb = 0xF) noexcept;

  const AxilMasterSignals& out() const noexcept { return out_; }
  void posedge(const AxilSlaveSignals& in) noexcept;

  bool busy() const noexcept { return phase_ != Phase::kIdle; }
  Phase phase() const noexcept { return phase_; }
  /// Result of the last completed access.
  const AxilResult& result() const noexcept { return result_; }
  /// What a pending access is still waiting for, e.g. "AWREADY, WREADY" (for timeout messages).
  const char* waiting_for() const noexcept;
  /// Drop a pending access (after a timeout): all valids and readies go low.
  void abort() noexcept;

 private:
  AxilMasterSignals out_;
  AxilResult result_;
  Phase phase_ = Phase::kIdle;
};

}  // namespace tpuw::sim
