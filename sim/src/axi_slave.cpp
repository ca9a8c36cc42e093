#include "tpuw/sim/axi_slave.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "tpuw/sim/error.h"

namespace tpuw::sim {

namespace {

uint64_t splitmix64(uint64_t& state) noexcept {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t align_down(uint64_t addr, uint8_t size) noexcept { return addr & ~((uint64_t{1} << size) - 1); }

}  // namespace

AxiSlave::AxiSlave(HostMemory& memory, const MemoryConfig& config, unsigned bus_bytes)
    : mem_(memory),
      bus_bytes_(bus_bytes),
      max_out_(config.max_outstanding),
      rd_latency_(std::max(1u, config.read_latency)),
      wr_latency_(std::max(1u, config.write_latency)),
      jitter_(config.latency_jitter),
      bpc_(config.bytes_per_cycle),
      credit_cap_(uint64_t{bus_bytes} + config.bytes_per_cycle - 1),
      rd_credit_(bus_bytes),
      wr_credit_(bus_bytes),
      bp_threshold_(0),
      rng_(config.seed) {
  if (bus_bytes == 0 || bus_bytes > kAxiMaxBusBytes || (bus_bytes & (bus_bytes - 1)) != 0) {
    throw SimError(SimErrorKind::kInvalidArgument,
                   fmt::format("AXI slave: bus width {} bytes is not a power of two in [1, {}]",
                               bus_bytes, kAxiMaxBusBytes));
  }
  if (!(config.backpressure >= 0.0 && config.backpressure < 1.0)) {
    throw SimError(SimErrorKind::kInvalidArgument,
                   fmt::format("AXI slave: backpressure {} is not a probability in [0, 1)",
                               config.backpressure));
  }
  if (max_out_ == 0) {
    throw SimError(SimErrorKind::kInvalidArgument, "AXI slave: max_outstanding must be at least 1");
  }
  bp_threshold_ = static_cast<uint64_t>(config.backpressure * 18446744073709551616.0);
  ar_.resize(max_out_);
  aw_.resize(max_out_);
  b_.resize(max_out_);
  out_.awready = true;
  out_.arready = true;
}

bool AxiSlave::draw() noexcept { return bp_threshold_ != 0 && splitmix64(rng_) < bp_threshold_; }

uint64_t AxiSlave::latency(unsigned base) noexcept {
  uint64_t l = base;
  if (jitter_ != 0) l += splitmix64(rng_) % (uint64_t{jitter_} + 1);
  return l;
}

uint8_t AxiSlave::check_burst(uint64_t addr, uint8_t len, uint8_t size, uint8_t burst) const noexcept {
  if (burst != kAxiIncr || size > 7 || (1u << size) > bus_bytes_) return kAxiSlvErr;
  const uint64_t end = align_down(addr, size) + ((uint64_t{len} + 1) << size);  // exclusive
  if (fail_all_ || end <= addr || !mem_.contains(addr, end - addr)) return kAxiDecErr;
  return kAxiOkay;
}

void AxiSlave::accept_ar(const AxiMasterSignals& in) noexcept {
  Burst b;
  b.addr = in.araddr;
  b.id = in.arid;
  b.beats_left = static_cast<uint16_t>(in.arlen + 1);
  b.size = in.arsize;
  b.resp = check_burst(in.araddr, in.arlen, in.arsize, in.arburst);
  b.ready = now_ + latency(rd_latency_);
  // Responses of one ID stay in order: never ready before an older burst of the same ID.
  for (unsigned i = 0; i < nar_; ++i) {
    if (ar_[i].id == b.id) b.ready = std::max(b.ready, ar_[i].ready);
  }
  ar_[nar_++] = b;
  ++stats_.read_bursts;
  if (b.resp != kAxiOkay) {
    ++stats_.read_errors;
    if (b.resp == kAxiSlvErr) ++stats_.protocol_errors;
  }
}

void AxiSlave::accept_aw(const AxiMasterSignals& in) noexcept {
  Burst b;
  b.addr = in.awaddr;
  b.id = in.awid;
  b.beats_left = static_cast<uint16_t>(in.awlen + 1);
  b.size = in.awsize;
  b.resp = check_burst(in.awaddr, in.awlen, in.awsize, in.awburst);
  aw_[(aw_head_ + naw_) % max_out_] = b;
  ++naw_;
  ++stats_.write_bursts;
  if (b.resp != kAxiOkay) {
    ++stats_.write_errors;
    if (b.resp == kAxiSlvErr) ++stats_.protocol_errors;
  }
}

void AxiSlave::write_beat(const AxiMasterSignals& in) noexcept {
  if (naw_ == 0) {  // cannot happen: WREADY is only raised with an AW pending
    ++stats_.protocol_errors;
    return;
  }
  Burst& b = aw_[aw_head_];
  ++stats_.write_beats;
  if (stats_.write_beats == 1) stats_.first_w_cycle = now_;
  stats_.last_w_cycle = now_;
  if (b.resp == kAxiOkay && in.wdata != nullptr) {
    const uint64_t lo = b.addr & (bus_bytes_ - 1);
    const uint64_t hi = (align_down(b.addr, b.size) & (bus_bytes_ - 1)) + (uint64_t{1} << b.size);
    uint8_t* dst = mem_.at(b.addr);
    const uint64_t lanes = hi - lo;
    const uint64_t mask = (lanes >= 64 ? ~uint64_t{0} : ((uint64_t{1} << lanes) - 1)) << lo;
    if (hi <= 64 && (in.wstrb & mask) == mask) {
      std::memcpy(dst, in.wdata + lo, lanes);
      stats_.write_bytes += lanes;
    } else {
      for (uint64_t i = lo; i < hi; ++i) {
        if (i < 64 && ((in.wstrb >> i) & 1u) != 0) {
          dst[i - lo] = in.wdata[i];
          ++stats_.write_bytes;
        }
      }
    }
  }
  b.addr = next_addr(b.addr, b.size);
  --b.beats_left;
  if ((b.beats_left == 0) != in.wlast) ++stats_.protocol_errors;
  if (b.beats_left == 0) {
    Burst done = b;
    done.ready = now_ + latency(wr_latency_);
    b_[(b_head_ + nb_) % max_out_] = done;
    ++nb_;
    aw_head_ = (aw_head_ + 1) % max_out_;
    --naw_;
  }
}

void AxiSlave::load_r_beat() noexcept {
  const Burst& b = ar_[static_cast<unsigned>(r_cur_)];
  const uint64_t lo = b.addr & (bus_bytes_ - 1);
  const uint64_t hi = (align_down(b.addr, b.size) & (bus_bytes_ - 1)) + (uint64_t{1} << b.size);
  std::memset(out_.rdata.data(), 0, bus_bytes_);
  if (b.resp == kAxiOkay) std::memcpy(out_.rdata.data() + lo, mem_.at(b.addr), hi - lo);
  out_.rvalid = true;
  out_.rid = b.id;
  out_.rresp = b.resp;
  out_.rlast = b.beats_left == 1;
}

void AxiSlave::reset() noexcept {
  nar_ = 0;
  r_cur_ = -1;
  aw_head_ = naw_ = 0;
  b_head_ = nb_ = 0;
  out_ = AxiSlaveSignals{};
}

void AxiSlave::posedge(const AxiMasterSignals& in) noexcept {
  // 1. Handshakes of this cycle.
  if (out_.rvalid && in.rready) {
    Burst& b = ar_[static_cast<unsigned>(r_cur_)];
    ++stats_.read_beats;
    if (stats_.read_beats == 1) stats_.first_r_cycle = now_;
    stats_.last_r_cycle = now_;
    if (b.resp == kAxiOkay) {
      stats_.read_bytes += (align_down(b.addr, b.size) + (uint64_t{1} << b.size)) - b.addr;
    }
    b.addr = next_addr(b.addr, b.size);
    if (--b.beats_left == 0) {
      for (unsigned i = static_cast<unsigned>(r_cur_) + 1; i < nar_; ++i) ar_[i - 1] = ar_[i];
      --nar_;
      r_cur_ = -1;
    }
    out_.rvalid = false;
  }
  if (out_.bvalid && in.bready) {
    b_head_ = (b_head_ + 1) % max_out_;
    --nb_;
    out_.bvalid = false;
  }
  if (out_.wready && in.wvalid) {
    if (bpc_ != 0) wr_credit_ -= std::min(wr_credit_, beat_bytes(aw_[aw_head_].size));
    write_beat(in);
  }
  if (out_.arready && in.arvalid) accept_ar(in);
  if (out_.awready && in.awvalid) accept_aw(in);

  ++now_;
  if (bpc_ != 0) {
    rd_credit_ = std::min(rd_credit_ + bpc_, credit_cap_);
    wr_credit_ = std::min(wr_credit_ + bpc_, credit_cap_);
  }

  // 2. Outputs of the next cycle.
  out_.arready = nar_ < max_out_ && !draw();
  out_.awready = naw_ + nb_ < max_out_ && !draw();
  out_.wready = naw_ != 0 && (bpc_ == 0 || wr_credit_ >= beat_bytes(aw_[aw_head_].size)) && !draw();

  if (!out_.bvalid && nb_ != 0 && b_[b_head_].ready <= now_ && !draw()) {
    const Burst& b = b_[b_head_];
    out_.bvalid = true;
    out_.bid = b.id;
    out_.bresp = b.resp;
  }

  if (!out_.rvalid && nar_ != 0) {
    if (r_cur_ < 0) {
      for (unsigned i = 0; i < nar_; ++i) {
        if (ar_[i].ready <= now_) {
          r_cur_ = static_cast<int>(i);
          break;
        }
      }
    }
    if (r_cur_ >= 0) {
      const uint64_t beat = beat_bytes(ar_[static_cast<unsigned>(r_cur_)].size);
      if ((bpc_ == 0 || rd_credit_ >= beat) && !draw()) {
        if (bpc_ != 0) rd_credit_ -= beat;
        load_r_beat();
      }
    }
  }
}

}  // namespace tpuw::sim
