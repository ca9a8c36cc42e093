#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>

#include "tpuw/sim/axil_master.h"

namespace tpuw::sim {
namespace {

// A register-file AXI4-Lite slave with random ready/valid delays: offsets 0x00..0x3C exist,
// anything else answers SLVERR (reads return 0). Registered outputs, like the RTL.
class TestAxilSlave {
 public:
  explicit TestAxilSlave(double delay, uint64_t seed) : delay_(delay), rng_(seed) {}
  const AxilSlaveSignals& out() const { return out_; }

  void posedge(const AxilMasterSignals& m) {
    if (out_.awready && m.awvalid) { aw_ = m.awaddr; have_aw_ = true; }
    if (out_.wready && m.wvalid) { w_ = m.wdata; strb_ = m.wstrb; have_w_ = true; }
    if (out_.bvalid && m.bready) out_.bvalid = false;
    if (out_.arready && m.arvalid) { ar_ = m.araddr; have_ar_ = true; }
    if (out_.rvalid && m.rready) out_.rvalid = false;
    if (have_aw_ && have_w_ && !out_.bvalid && !slow()) {
      const bool ok = aw_ < 0x40 && aw_ % 4 == 0;
      if (ok) {
        uint32_t v = regs_[aw_];
        for (unsigned b = 0; b < 4; ++b) {
          if ((strb_ >> b) & 1u) v = (v & ~(0xFFu << (8 * b))) | (w_ & (0xFFu << (8 * b)));
        }
        regs_[aw_] = v;
      }
      out_.bresp = ok ? 0 : 2;
      out_.bvalid = true;
      have_aw_ = have_w_ = false;
    }
    if (have_ar_ && !out_.rvalid && !slow()) {
      const bool ok = ar_ < 0x40 && ar_ % 4 == 0;
      out_.rdata = ok ? regs_[ar_] : 0;
      out_.rresp = ok ? 0 : 2;
      out_.rvalid = true;
      have_ar_ = false;
    }
    out_.awready = !have_aw_ && !slow();
    out_.wready = !have_w_ && !slow();
    out_.arready = !have_ar_ && !slow();
  }

  std::map<uint32_t, uint32_t> regs_;
  bool mute = false;  // never answers

 private:
  bool slow() { return mute || std::uniform_real_distribution<double>(0, 1)(rng_) < delay_; }
  double delay_;
  std::mt19937_64 rng_;
  AxilSlaveSignals out_;
  uint32_t aw_ = 0, w_ = 0, ar_ = 0;
  uint8_t strb_ = 0;
  bool have_aw_ = false, have_w_ = false, have_ar_ = false;
};

// Runs one access to completion; returns the cycles it took or -1 after `limit`.
int run(AxilMaster& m, TestAxilSlave& s, int limit = 1000) {
  for (int c = 1; c <= limit; ++c) {
    const AxilSlaveSignals so = s.out();
    s.posedge(m.out());
    m.posedge(so);
    if (!m.busy()) return c;
  }
  return -1;
}

TEST(AxilMaster, WritesAndReadsBackUnderRandomDelays) {
  for (double delay : {0.0, 0.5, 0.9}) {
    TestAxilSlave s(delay, 17);
    AxilMaster m;
    std::mt19937 rng(1);
    std::map<uint32_t, uint32_t> expect;
    for (int k = 0; k < 200; ++k) {
      const uint32_t off = (rng() % 16) * 4;
      if (rng() % 2) {
        const uint32_t v = static_cast<uint32_t>(rng());
        ASSERT_TRUE(m.start_write(off, v));
        ASSERT_GT(run(m, s), 0);
        EXPECT_TRUE(m.result().ok());
        expect[off] = v;
      } else {
        ASSERT_TRUE(m.start_read(off));
        ASSERT_GT(run(m, s), 0);
        EXPECT_TRUE(m.result().ok());
        EXPECT_EQ(m.result().data, expect[off]) << "offset " << off << " delay " << delay;
      }
    }
  }
}

TEST(AxilMaster, ByteStrobesReachTheSlave) {
  TestAxilSlave s(0.2, 3);
  AxilMaster m;
  m.start_write(0x8, 0x11223344);
  ASSERT_GT(run(m, s), 0);
  m.start_write(0x8, 0xAABBCCDD, 0b0101);
  ASSERT_GT(run(m, s), 0);
  m.start_read(0x8);
  ASSERT_GT(run(m, s), 0);
  EXPECT_EQ(m.result().data, 0x11BB33DDu);
}

TEST(AxilMaster, ReportsSlverr) {
  TestAxilSlave s(0.0, 3);
  AxilMaster m;
  m.start_read(0x100);
  ASSERT_GT(run(m, s), 0);
  EXPECT_EQ(m.result().resp, 2);
  EXPECT_FALSE(m.result().ok());
  m.start_write(0x104, 1);
  ASSERT_GT(run(m, s), 0);
  EXPECT_EQ(m.result().resp, 2);
}

TEST(AxilMaster, ABusyMasterRefusesANewAccessAndAbortClears) {
  TestAxilSlave s(0.0, 3);
  s.mute = true;
  AxilMaster m;
  ASSERT_TRUE(m.start_read(0));
  EXPECT_FALSE(m.start_write(0, 1));
  EXPECT_EQ(run(m, s, 50), -1);
  EXPECT_STREQ(m.waiting_for(), "ARREADY");
  m.abort();
  EXPECT_FALSE(m.busy());
  EXPECT_FALSE(m.out().arvalid);
  EXPECT_FALSE(m.out().rready);
}

TEST(AxilMaster, MinimumLatencyIsTwoCyclesPerRead) {
  TestAxilSlave s(0.0, 3);
  // let the slave raise its readies first
  AxilMaster idle;
  s.posedge(idle.out());
  AxilMaster m;
  m.start_read(0);
  EXPECT_EQ(run(m, s), 2);  // AR handshake, then R
}

}  // namespace
}  // namespace tpuw::sim
