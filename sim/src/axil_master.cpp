#include "tpuw/sim/axil_master.h"

namespace tpuw::sim {

bool AxilMaster::start_read(uint32_t addr) noexcept {
  if (busy()) return false;
  out_ = AxilMasterSignals{};
  out_.arvalid = true;
  out_.araddr = addr;
  out_.rready = true;
  phase_ = Phase::kRead;
  return true;
}

bool AxilMaster::start_write(uint32_t addr, uint32_t data, uint8_t strb) noexcept {
  if (busy()) return false;
  out_ = AxilMasterSignals{};
  out_.awvalid = true;
  out_.awaddr = addr;
  out_.wvalid = true;
  out_.wdata = data;
  out_.wstrb = strb;
  out_.bready = true;
  phase_ = Phase::kWrite;
  return true;
}

void AxilMaster::posedge(const AxilSlaveSignals& in) noexcept {
  switch (phase_) {
    case Phase::kIdle:
      return;
    case Phase::kRead:
      if (out_.arvalid && in.arready) out_.arvalid = false;
      // A response before the address handshake would be a slave bug; accept it only after.
      if (!out_.arvalid && in.rvalid) {
        result_.data = in.rdata;
        result_.resp = in.rresp;
        out_.rready = false;
        phase_ = Phase::kIdle;
      }
      return;
    case Phase::kWrite:
      if (out_.awvalid && in.awready) out_.awvalid = false;
      if (out_.wvalid && in.wready) out_.wvalid = false;
      if (!out_.awvalid && !out_.wvalid && in.bvalid) {
        result_.data = 0;
        result_.resp = in.bresp;
        out_.bready = false;
        phase_ = Phase::kIdle;
      }
      return;
  }
}

const char* AxilMaster::waiting_for() const noexcept {
  switch (phase_) {
    case Phase::kIdle: return "nothing";
    case Phase::kRead: return out_.arvalid ? "ARREADY" : "RVALID";
    case Phase::kWrite:
      if (out_.awvalid && out_.wvalid) return "AWREADY and WREADY";
      if (out_.awvalid) return "AWREADY";
      if (out_.wvalid) return "WREADY";
      return "BVALID";
  }
  return "?";
}

void AxilMaster::abort() noexcept {
  out_ = AxilMasterSignals{};
  phase_ = Phase::kIdle;
}

}  // namespace tpuw::sim
