// A small cycle-level AXI4 master for testing AxiSlave: queues read and write bursts, issues them
// with optional random valid delays and random RREADY/BREADY, checks the AXI ordering rules it can
// see, and collects the responses.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <random>
#include <vector>

#include "tpuw/sim/axi_slave.h"

namespace tpuw::sim::testing {

struct ReadBurst {
  uint64_t addr = 0;
  uint8_t len = 0;
  uint8_t size = 0;
  uint32_t id = 0;
  uint8_t burst = kAxiIncr;
  // filled in
  std::vector<std::vector<uint8_t>> beats;  // bus_bytes each
  std::vector<uint8_t> resps;
  bool last_ok = true;  // RLAST exactly on the last beat
  uint64_t ar_cycle = 0, first_r_cycle = 0, done_cycle = 0;
  bool done = false;
  uint64_t seq = 0;  // completion order
};

struct WriteBurst {
  uint64_t addr = 0;
  uint8_t len = 0;
  uint8_t size = 0;
  uint32_t id = 0;
  uint8_t burst = kAxiIncr;
  std::vector<std::vector<uint8_t>> data;  // bus_bytes per beat
  std::vector<uint64_t> strb;
  // filled in
  uint8_t bresp = 0xFF;
  bool done = false;
  uint64_t last_w_cycle = 0, b_cycle = 0;
  uint64_t seq = 0;
};

class TestMaster {
 public:
  TestMaster(AxiSlave& slave, double valid_delay = 0.0, double ready_drop = 0.0, uint64_t seed = 7)
      : slave_(slave), bus_(slave.bus_bytes()), valid_delay_(valid_delay), ready_drop_(ready_drop), rng_(seed) {}

  /// Returns an index into reads().
  size_t read(uint64_t addr, uint8_t len, uint8_t size, uint32_t id, uint8_t burst = kAxiIncr) {
    ReadBurst r;
    r.addr = addr; r.len = len; r.size = size; r.id = id; r.burst = burst;
    reads_.push_back(r);
    ar_pending_.push_back(reads_.size() - 1);
    return reads_.size() - 1;
  }
  size_t write(WriteBurst w) {
    writes_.push_back(std::move(w));
    aw_pending_.push_back(writes_.size() - 1);
    return writes_.size() - 1;
  }

  /// One clock cycle of the pair (slave first sees this cycle's master outputs, then both update).
  void step() {
    const AxiSlaveSignals so = slave_.out();
    AxiMasterSignals mi = out_;
    mi.wdata = wdata_.data();
    slave_.posedge(mi);
    posedge(so);
    ++cycle_;
  }
  bool all_done() const {
    for (const auto& r : reads_) if (!r.done) return false;
    for (const auto& w : writes_) if (!w.done) return false;
    return true;
  }
  /// Steps until everything completed; fails the test after `limit` cycles.
  uint64_t run(uint64_t limit = 100000) {
    uint64_t n = 0;
    while (!all_done()) {
      step();
      if (++n > limit) {
        ADD_FAILURE() << "AXI transactions did not complete in " << limit << " cycles";
        break;
      }
    }
    return n;
  }

  std::vector<ReadBurst>& reads() { return reads_; }
  std::vector<WriteBurst>& writes() { return writes_; }
  uint64_t cycle() const { return cycle_; }
  unsigned max_reads_in_flight() const { return max_rd_inflight_; }

 private:
  bool chance(double p) { return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

  void posedge(const AxiSlaveSignals& so) {
    // handshakes with this cycle's signals
    if (out_.arvalid && so.arready) {
      size_t i = ar_pending_.front();
      ar_pending_.pop_front();
      reads_[i].ar_cycle = cycle_;
      rd_inflight_.push_back(i);
      out_.arvalid = false;
    }
    if (out_.awvalid && so.awready) {
      size_t i = aw_pending_.front();
      aw_pending_.pop_front();
      w_queue_.push_back(i);
      b_inflight_.push_back(i);
      out_.awvalid = false;
    }
    if (out_.wvalid && so.wready) {
      WriteBurst& w = writes_[w_queue_.front()];
      if (++w_beat_ == w.len + 1u) {
        w.last_w_cycle = cycle_;
        w_queue_.pop_front();
        w_beat_ = 0;
      }
      out_.wvalid = false;
    }
    if (so.rvalid && out_.rready) {
      // oldest in-flight read with this id
      bool found = false;
      for (auto it = rd_inflight_.begin(); it != rd_inflight_.end(); ++it) {
        ReadBurst& r = reads_[*it];
        if (r.id != so.rid) continue;
        found = true;
        if (r.beats.empty()) r.first_r_cycle = cycle_;
        r.beats.emplace_back(so.rdata.begin(), so.rdata.begin() + bus_);
        r.resps.push_back(so.rresp);
        const bool last = r.beats.size() == r.len + 1u;
        if (last != so.rlast) r.last_ok = false;
        if (last) {
          r.done = true;
          r.done_cycle = cycle_;
          r.seq = seq_++;
          rd_inflight_.erase(it);
        }
        break;
      }
      EXPECT_TRUE(found) << "R beat with RID " << so.rid << " and no read of that ID in flight";
    }
    if (so.bvalid && out_.bready) {
      bool found = false;
      for (auto it = b_inflight_.begin(); it != b_inflight_.end(); ++it) {
        WriteBurst& w = writes_[*it];
        if (w.id != so.bid) continue;
        found = true;
        EXPECT_TRUE(std::find(w_queue_.begin(), w_queue_.end(), *it) == w_queue_.end())
            << "B before the last W beat";
        w.bresp = so.bresp;
        w.done = true;
        w.b_cycle = cycle_;
        w.seq = seq_++;
        b_inflight_.erase(it);
        break;
      }
      EXPECT_TRUE(found) << "B with BID " << so.bid << " and no write of that ID in flight";
    }
    // valid stability checks on the slave side
    if (prev_rvalid_pending_) {
      EXPECT_TRUE(so.rvalid) << "RVALID dropped before its handshake";
    }
    prev_rvalid_pending_ = so.rvalid && !out_.rready;
    if (prev_bvalid_pending_) {
      EXPECT_TRUE(so.bvalid) << "BVALID dropped before its handshake";
    }
    prev_bvalid_pending_ = so.bvalid && !out_.bready;
    max_rd_inflight_ = std::max<unsigned>(max_rd_inflight_, static_cast<unsigned>(rd_inflight_.size()));

    // next outputs
    if (!out_.arvalid && !ar_pending_.empty() && !chance(valid_delay_)) {
      const ReadBurst& r = reads_[ar_pending_.front()];
      out_.arvalid = true; out_.araddr = r.addr; out_.arlen = r.len; out_.arsize = r.size;
      out_.arid = r.id; out_.arburst = r.burst;
    }
    if (!out_.awvalid && !aw_pending_.empty() && !chance(valid_delay_)) {
      const WriteBurst& w = writes_[aw_pending_.front()];
      out_.awvalid = true; out_.awaddr = w.addr; out_.awlen = w.len; out_.awsize = w.size;
      out_.awid = w.id; out_.awburst = w.burst;
    }
    if (!out_.wvalid && !w_queue_.empty() && !chance(valid_delay_)) {
      const WriteBurst& w = writes_[w_queue_.front()];
      wdata_ = w.data[w_beat_];
      out_.wstrb = w.strb[w_beat_];
      out_.wlast = w_beat_ == w.len;
      out_.wvalid = true;
    }
    out_.rready = !chance(ready_drop_);
    out_.bready = !chance(ready_drop_);
  }

  AxiSlave& slave_;
  unsigned bus_;
  double valid_delay_, ready_drop_;
  std::mt19937_64 rng_;
  AxiMasterSignals out_;
  std::vector<uint8_t> wdata_ = std::vector<uint8_t>(kAxiMaxBusBytes, 0);
  std::vector<ReadBurst> reads_;
  std::vector<WriteBurst> writes_;
  std::deque<size_t> ar_pending_, aw_pending_, w_queue_, b_inflight_;
  std::vector<size_t> rd_inflight_;
  unsigned w_beat_ = 0;
  uint64_t cycle_ = 0, seq_ = 0;
  bool prev_rvalid_pending_ = false, prev_bvalid_pending_ = false;
  unsigned max_rd_inflight_ = 0;
};

}  // namespace tpuw::sim::testing
