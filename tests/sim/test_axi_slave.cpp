#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "axi_test_master.h"
#include "tpuw/sim/axi_slave.h"
#include "tpuw/sim/error.h"
#include "tpuw/sim/host_memory.h"

namespace tpuw::sim {
namespace {

using testing::ReadBurst;
using testing::TestMaster;
using testing::WriteBurst;

constexpr unsigned kBus = 16;  // 128-bit bus

MemoryConfig quick_config() {
  MemoryConfig c;
  c.base = 0x10000;
  c.size = 0x10000;
  c.read_latency = 5;
  c.write_latency = 3;
  c.bytes_per_cycle = 0;
  return c;
}

void fill_pattern(HostMemory& m) {
  for (uint64_t i = 0; i < m.size(); ++i) *m.at(m.base() + i) = static_cast<uint8_t>(i * 7 + (i >> 8));
}

/// The bytes an INCR beat carries (lane range) per AXI: first beat may be unaligned.
struct Lanes {
  uint64_t addr, lo, hi;
};
Lanes beat_lanes(uint64_t start, uint8_t size, unsigned beat, unsigned bus) {
  const uint64_t sz = uint64_t{1} << size;
  const uint64_t aligned = start & ~(sz - 1);
  const uint64_t a = beat == 0 ? start : aligned + beat * sz;
  const uint64_t lo = a % bus;
  const uint64_t hi = ((a & ~(sz - 1)) % bus) + sz;
  return {a, lo, hi};
}

WriteBurst make_write(uint64_t addr, uint8_t len, uint8_t size, uint32_t id, std::mt19937_64& rng,
                      bool random_strobes) {
  WriteBurst w;
  w.addr = addr; w.len = len; w.size = size; w.id = id;
  for (unsigned b = 0; b <= len; ++b) {
    std::vector<uint8_t> d(kBus);
    for (auto& x : d) x = static_cast<uint8_t>(rng());
    w.data.push_back(d);
    w.strb.push_back(random_strobes ? rng() & 0xFFFF : 0xFFFF);
  }
  return w;
}

/// Applies a write burst to a shadow copy the way AXI defines it.
void apply_write(std::vector<uint8_t>& shadow, uint64_t base, const WriteBurst& w) {
  for (unsigned b = 0; b <= w.len; ++b) {
    const Lanes l = beat_lanes(w.addr, w.size, b, kBus);
    for (uint64_t i = l.lo; i < l.hi; ++i) {
      if ((w.strb[b] >> i) & 1u) shadow[l.addr - base + (i - l.lo)] = w.data[b][i];
    }
  }
}

TEST(AxiSlave, ReadBurstReturnsMemoryWithConfiguredLatency) {
  MemoryConfig c = quick_config();
  HostMemory mem(c.base, c.size);
  fill_pattern(mem);
  AxiSlave s(mem, c, kBus);
  TestMaster m(s);
  const size_t r = m.read(0x10100, 7, 4, 2);
  m.run();
  const ReadBurst& rb = m.reads()[r];
  ASSERT_EQ(rb.beats.size(), 8u);
  EXPECT_TRUE(rb.last_ok);
  EXPECT_EQ(rb.first_r_cycle - rb.ar_cycle, c.read_latency);
  EXPECT_EQ(rb.done_cycle - rb.first_r_cycle, 7u);  // one beat per cycle, unlimited bandwidth
  for (unsigned b = 0; b < 8; ++b) {
    EXPECT_EQ(rb.resps[b], kAxiOkay);
    for (unsigned i = 0; i < kBus; ++i) EXPECT_EQ(rb.beats[b][i], *mem.at(0x10100 + b * kBus + i));
  }
  EXPECT_EQ(s.stats().read_bytes, 128u);
  EXPECT_TRUE(s.idle());
}

TEST(AxiSlave, WriteBurstHonoursStrobesAndLatency) {
  MemoryConfig c = quick_config();
  HostMemory mem(c.base, c.size);
  AxiSlave s(mem, c, kBus);
  TestMaster m(s);
  std::mt19937_64 rng(3);
  WriteBurst w = make_write(0x10200, 3, 4, 1, rng, false);
  w.strb = {0xFFFF, 0x00F0, 0x8001, 0x0000};
  std::vector<uint8_t> shadow(c.size, 0);
  apply_write(shadow, c.base, w);
  const size_t i = m.write(w);
  m.run();
  EXPECT_EQ(m.writes()[i].bresp, kAxiOkay);
  EXPECT_EQ(m.writes()[i].b_cycle - m.writes()[i].last_w_cycle, c.write_latency);
  EXPECT_EQ(0, std::memcmp(shadow.data(), mem.at(c.base), c.size));
  EXPECT_EQ(*mem.at(0x10210), 0);  // strobe 0 lanes untouched
  EXPECT_EQ(s.stats().write_bytes, 16u + 4u + 2u);
}

TEST(AxiSlave, NarrowAndUnalignedBursts) {
  MemoryConfig c = quick_config();
  HostMemory mem(c.base, c.size);
  fill_pattern(mem);
  std::vector<uint8_t> shadow(mem.at(c.base), mem.at(c.base) + c.size);
  AxiSlave s(mem, c, kBus);
  TestMaster m(s);
  std::mt19937_64 rng(5);
  // 2-byte beats starting at an odd address, 4-byte beats crossing bus words, unaligned 16-byte
  WriteBurst w1 = make_write(0x10301, 9, 1, 0, rng, false);
  WriteBurst w2 = make_write(0x1040A, 5, 2, 0, rng, true);
  WriteBurst w3 = make_write(0x10507, 2, 4, 0, rng, false);
  for (const auto* w : {&w1, &w2, &w3}) apply_write(shadow, c.base, *w);
  m.write(w1); m.write(w2); m.write(w3);
  const size_t r1 = m.read(0x10303, 4, 1, 3);
  const size_t r2 = m.read(0x10609, 3, 3, 3);
  m.run();
  EXPECT_EQ(0, std::memcmp(shadow.data(), mem.at(c.base), c.size));
  for (size_t r : {r1, r2}) {
    const ReadBurst& rb = m.reads()[r];
    ASSERT_EQ(rb.beats.size(), rb.len + 1u);
    for (unsigned b = 0; b <= rb.len; ++b) {
      const Lanes l = beat_lanes(rb.addr, rb.size, b, kBus);
      for (uint64_t i = l.lo; i < l.hi; ++i) {
        EXPECT_EQ(rb.beats[b][i], *mem.at(l.addr + (i - l.lo))) << "burst " << r << " beat " << b;
      }
    }
  }
}

// Random reads and writes with random latency (jitter), slave backpressure, master valid delays
// and ready drops, several IDs in flight. Writes go to disjoint slots, reads to a preset region.
TEST(AxiSlave, RandomTrafficWithBackpressureAndOutstandingIds) {
  MemoryConfig c = quick_config();
  c.backpressure = 0.3;
  c.latency_jitter = 200;
  c.seed = 42;
  c.max_outstanding = 8;
  HostMemory mem(c.base, c.size);
  fill_pattern(mem);
  std::vector<uint8_t> shadow(mem.at(c.base), mem.at(c.base) + c.size);
  AxiSlave s(mem, c, kBus);
  TestMaster m(s, 0.3, 0.3, 11);
  std::mt19937_64 rng(99);
  for (unsigned k = 0; k < 60; ++k) {
    const auto len = static_cast<uint8_t>(rng() % 16);
    const auto size = static_cast<uint8_t>(rng() % 5);
    const auto id = static_cast<uint32_t>(rng() % 4);
    const uint64_t off = (rng() % 64) * 16 + rng() % 16;
    // writes: slot k of 256 bytes in the upper half; reads: the lower half
    WriteBurst w = make_write(c.base + 0x8000 + k * 256 + (off % 16), len, size, id, rng, true);
    apply_write(shadow, c.base, w);
    m.write(w);
    m.read(c.base + off, len, size, id);
  }
  m.run(200000);
  ASSERT_TRUE(m.all_done());
  EXPECT_EQ(0, std::memcmp(shadow.data(), mem.at(c.base), c.size));
  std::map<uint32_t, uint64_t> last_seq;
  bool out_of_order_across_ids = false;
  uint64_t prev_seq = 0;
  for (const ReadBurst& rb : m.reads()) {
    EXPECT_TRUE(rb.last_ok);
    ASSERT_EQ(rb.beats.size(), rb.len + 1u);
    for (unsigned b = 0; b <= rb.len; ++b) {
      EXPECT_EQ(rb.resps[b], kAxiOkay);
      const Lanes l = beat_lanes(rb.addr, rb.size, b, kBus);
      for (uint64_t i = l.lo; i < l.hi; ++i) ASSERT_EQ(rb.beats[b][i], shadow[l.addr - c.base + i - l.lo]);
    }
    // per ID in order
    auto it = last_seq.find(rb.id);
    if (it != last_seq.end()) {
      EXPECT_GT(rb.seq, it->second) << "ID " << rb.id << " answered out of order";
    }
    last_seq[rb.id] = rb.seq;
    if (rb.seq < prev_seq) out_of_order_across_ids = true;
    prev_seq = rb.seq;
  }
  for (const WriteBurst& w : m.writes()) EXPECT_EQ(w.bresp, kAxiOkay);
  EXPECT_GT(m.max_reads_in_flight(), 1u);
  EXPECT_TRUE(out_of_order_across_ids) << "jitter should let different IDs overtake each other";
  EXPECT_EQ(s.stats().protocol_errors, 0u);
}

TEST(AxiSlave, OutOfWindowBurstsGetDecerrAndLeaveMemoryUntouched) {
  MemoryConfig c = quick_config();
  HostMemory mem(c.base, c.size);
  fill_pattern(mem);
  std::vector<uint8_t> before(mem.at(c.base), mem.at(c.base) + c.size);
  AxiSlave s(mem, c, kBus);
  TestMaster m(s);
  std::mt19937_64 rng(1);
  const uint64_t end = c.base + c.size;
  // starts inside, runs 16 bytes past the end; entirely below base; entirely above
  const size_t w1 = m.write(make_write(end - 48, 3, 4, 0, rng, false));
  const size_t w2 = m.write(make_write(c.base - 64, 1, 4, 1, rng, false));
  const size_t w3 = m.write(make_write(end + 0x100, 0, 2, 2, rng, false));
  const size_t ok = m.write(make_write(c.base, 0, 4, 3, rng, false));
  const size_t r1 = m.read(end - 32, 3, 4, 0);
  const size_t r2 = m.read(c.base - 1, 0, 0, 1);
  const size_t r3 = m.read(c.base, 0, 4, 2);
  m.run();
  EXPECT_EQ(m.writes()[w1].bresp, kAxiDecErr);
  EXPECT_EQ(m.writes()[w2].bresp, kAxiDecErr);
  EXPECT_EQ(m.writes()[w3].bresp, kAxiDecErr);
  EXPECT_EQ(m.writes()[ok].bresp, kAxiOkay);
  // only the legal write changed memory
  EXPECT_EQ(0, std::memcmp(before.data() + 16, mem.at(c.base + 16), c.size - 16));
  for (size_t r : {r1, r2}) {
    const ReadBurst& rb = m.reads()[r];
    ASSERT_EQ(rb.beats.size(), rb.len + 1u);
    EXPECT_TRUE(rb.last_ok);
    for (unsigned b = 0; b <= rb.len; ++b) {
      EXPECT_EQ(rb.resps[b], kAxiDecErr);
      for (uint8_t x : rb.beats[b]) EXPECT_EQ(x, 0);
    }
  }
  EXPECT_EQ(m.reads()[r3].resps[0], kAxiOkay);
  EXPECT_EQ(s.stats().read_errors, 2u);
  EXPECT_EQ(s.stats().write_errors, 3u);
  EXPECT_TRUE(s.idle());
}

TEST(AxiSlave, UnsupportedBurstTypeGetsSlverr) {
  MemoryConfig c = quick_config();
  HostMemory mem(c.base, c.size);
  AxiSlave s(mem, c, kBus);
  TestMaster m(s);
  const size_t r = m.read(c.base, 3, 4, 0, kAxiWrap);
  const size_t r2 = m.read(c.base, 0, 5, 0);  // 32-byte beats on a 16-byte bus
  m.run();
  for (uint8_t x : m.reads()[r].resps) EXPECT_EQ(x, kAxiSlvErr);
  EXPECT_EQ(m.reads()[r2].resps.at(0), kAxiSlvErr);
  EXPECT_EQ(s.stats().protocol_errors, 2u);
}

struct BwCase {
  unsigned bytes_per_cycle;
  double expected;
};

class AxiSlaveBandwidth : public ::testing::TestWithParam<BwCase> {};

TEST_P(AxiSlaveBandwidth, LongBurstsRunAtTheConfiguredRate) {
  MemoryConfig c = quick_config();
  c.bytes_per_cycle = GetParam().bytes_per_cycle;
  HostMemory mem(c.base, c.size);
  AxiSlave s(mem, c, kBus);
  TestMaster m(s);
  std::mt19937_64 rng(2);
  for (unsigned k = 0; k < 8; ++k) {
    m.read(c.base + k * 4096, 255, 4, k % 2);
    m.write(make_write(c.base + 0x8000 + k * 4096, 255, 4, k % 2, rng, false));
  }
  m.run(1000000);
  const AxiSlaveStats& st = s.stats();
  ASSERT_EQ(st.read_bytes, 8u * 256 * kBus);
  ASSERT_EQ(st.write_bytes, 8u * 256 * kBus);
  const double rd = static_cast<double>(st.read_bytes) / static_cast<double>(st.last_r_cycle - st.first_r_cycle + 1);
  const double wr = static_cast<double>(st.write_bytes) / static_cast<double>(st.last_w_cycle - st.first_w_cycle + 1);
  EXPECT_NEAR(rd, GetParam().expected, GetParam().expected * 0.02) << "read bytes/cycle";
  EXPECT_NEAR(wr, GetParam().expected, GetParam().expected * 0.02) << "write bytes/cycle";
}

INSTANTIATE_TEST_SUITE_P(Rates, AxiSlaveBandwidth,
                         ::testing::Values(BwCase{16, 16.0}, BwCase{8, 8.0}, BwCase{4, 4.0},
                                           BwCase{3, 3.0}, BwCase{0, 16.0}),
                         [](const ::testing::TestParamInfo<BwCase>& p) {
                           return p.param.bytes_per_cycle == 0
                                      ? std::string("Unlimited")
                                      : "Bpc" + std::to_string(p.param.bytes_per_cycle);
                         });

TEST(AxiSlave, LimitsOutstandingBursts) {
  MemoryConfig c = quick_config();
  c.read_latency = 200;
  c.max_outstanding = 4;
  HostMemory mem(c.base, c.size);
  AxiSlave s(mem, c, kBus);
  TestMaster m(s);
  for (unsigned k = 0; k < 10; ++k) m.read(c.base + 64 * k, 0, 4, k % 4);
  for (unsigned i = 0; i < 100; ++i) m.step();
  EXPECT_EQ(m.max_reads_in_flight(), 4u);
  EXPECT_EQ(s.stats().read_bursts, 4u);
  EXPECT_FALSE(s.out().arready);
  m.run();
  EXPECT_EQ(s.stats().read_bursts, 10u);
}

TEST(AxiSlave, RejectsBadConfiguration) {
  HostMemory mem(0, 4096);
  MemoryConfig c;
  EXPECT_THROW(AxiSlave(mem, c, 12), SimError);
  EXPECT_THROW(AxiSlave(mem, c, 256), SimError);
  c.backpressure = 1.0;
  EXPECT_THROW(AxiSlave(mem, c, 16), SimError);
}

TEST(AxiSlave, IdleCyclesDoNothing) {
  MemoryConfig c = quick_config();
  HostMemory mem(c.base, c.size);
  AxiSlave s(mem, c, kBus);
  AxiMasterSignals idle;
  for (int i = 0; i < 1000; ++i) s.posedge(idle);
  EXPECT_TRUE(s.idle());
  EXPECT_TRUE(s.out().arready);
  EXPECT_TRUE(s.out().awready);
  EXPECT_FALSE(s.out().wready);
  EXPECT_FALSE(s.out().rvalid);
  EXPECT_FALSE(s.out().bvalid);
  EXPECT_EQ(s.cycle(), 1000u);
}

}  // namespace
}  // namespace tpuw::sim
