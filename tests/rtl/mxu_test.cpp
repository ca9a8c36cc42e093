// tpu_mxu at N=4 against plain integer matrix math: single tiles, extremes, double buffering with
// back-to-back folds (cycle-exact), swap semantics, and a random schedule under the port contract.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "Vtpu_mxu_n4.h"
#include "verilated.h"
#if TPUW_RTL_TRACE_FST
#include "verilated_fst_c.h"
#endif

namespace {

constexpr int kN = 4;
constexpr int kLatency = 2 * kN - 1;  // row enters at cycle T, leaves at T + 2N - 1

using Tile = std::array<int8_t, kN * kN>;  // W[k][n] at k*N+n
using ActRow = std::array<int8_t, kN>;
using OutRow = std::array<int32_t, kN>;

// One cycle of stimulus.
struct Cycle {
  bool act_valid = false;
  bool swap = false;
  ActRow act{};
  uint16_t tag = 0;
  bool wt_valid = false;
  ActRow wt{};  // one tile row, element n = W[k][n]
};

struct Out {
  uint64_t cycle;
  uint16_t tag;
  OutRow data;
};

uint32_t pack8(const ActRow& r) {
  uint32_t v = 0;
  for (int i = 0; i < kN; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(r[i])) << (8 * i);
  return v;
}

class MxuTb {
 public:
  MxuTb() : ctx_(std::make_unique<VerilatedContext>()) {
    ctx_->commandArgs(0, static_cast<char**>(nullptr));
    m_ = std::make_unique<Vtpu_mxu_n4>(ctx_.get(), "mxu");
#if TPUW_RTL_TRACE_FST
    if (const char* f = std::getenv("TPUW_RTL_FST")) {
      ctx_->traceEverOn(true);
      tfp_ = std::make_unique<VerilatedFstC>();
      m_->trace(tfp_.get(), 99);
      tfp_->open(f);
    }
#endif
    m_->rst_ni = 0;
    for (int i = 0; i < 3; ++i) tick();
    m_->rst_ni = 1;
    cycle_ = 0;
  }
  ~MxuTb() {
#if TPUW_RTL_TRACE_FST
    if (tfp_) tfp_->close();
#endif
    m_->final();
  }

  // Drives one cycle: samples the outputs of this cycle, applies c, clocks.
  void step(const Cycle& c) {
    m_->act_valid_i = c.act_valid;
    m_->act_swap_i = c.swap;
    m_->act_data_i = pack8(c.act);
    m_->act_tag_i = c.tag;
    m_->wt_valid_i = c.wt_valid;
    m_->wt_data_i = pack8(c.wt);
    m_->clk_i = 0;
    m_->eval();
    if (m_->out_valid_o) {
      Out o{cycle_, m_->out_tag_o, {}};
      for (int n = 0; n < kN; ++n) o.data[n] = static_cast<int32_t>(m_->out_data_o[n]);
      outs_.push_back(o);
    }
    dump();
    m_->clk_i = 1;
    m_->eval();
    ++cycle_;
    dump();
  }

  std::vector<Out> run(const std::vector<Cycle>& cycles, int drain = kLatency + 2) {
    outs_.clear();
    for (const auto& c : cycles) step(c);
    for (int i = 0; i < drain; ++i) step(Cycle{});
    return outs_;
  }
  bool busy() const { return m_->busy_o; }

 private:
  void tick() {
    m_->clk_i = 0;
    m_->eval();
    m_->clk_i = 1;
    m_->eval();
  }
  void dump() {
#if TPUW_RTL_TRACE_FST
    if (tfp_) tfp_->dump(ctx_->time());
#endif
    ctx_->timeInc(1);
  }

  std::unique_ptr<VerilatedContext> ctx_;
  std::unique_ptr<Vtpu_mxu_n4> m_;
#if TPUW_RTL_TRACE_FST
  std::unique_ptr<VerilatedFstC> tfp_;
#endif
  uint64_t cycle_ = 0;
  std::vector<Out> outs_;
};

OutRow matvec(const ActRow& a, const Tile& w) {
  OutRow r{};
  for (int n = 0; n < kN; ++n) {
    uint32_t s = 0;
    for (int k = 0; k < kN; ++k) s += static_cast<uint32_t>(int32_t{a[k]} * int32_t{w[k * kN + n]});
    r[n] = static_cast<int32_t>(s);
  }
  return r;
}

// Appends the N feed cycles of a tile (tile row N-1 first).
void feed_tile(std::vector<Cycle>& cyc, size_t at, const Tile& t) {
  if (cyc.size() < at + kN) cyc.resize(at + kN);
  for (int c = 0; c < kN; ++c) {
    Cycle& x = cyc[at + c];
    x.wt_valid = true;
    const int k = kN - 1 - c;
    for (int n = 0; n < kN; ++n) x.wt[n] = t[k * kN + n];
  }
}

void put_row(std::vector<Cycle>& cyc, size_t at, const ActRow& a, bool swap, uint16_t tag) {
  if (cyc.size() < at + 1) cyc.resize(at + 1);
  cyc[at].act_valid = true;
  cyc[at].swap = swap;
  cyc[at].act = a;
  cyc[at].tag = tag;
}

// Golden model of the port contract: a tile becomes the shadow when its last row is fed; a swap
// row exchanges active and shadow before it is multiplied. Returns expected output per tag and
// the cycle it must leave.
struct Expect {
  uint64_t cycle;
  OutRow data;
};
std::map<uint16_t, Expect> golden(const std::vector<Cycle>& cyc) {
  Tile active{}, shadow{}, pending{};
  int fed = 0;
  std::map<uint16_t, Expect> exp;
  for (size_t c = 0; c < cyc.size(); ++c) {
    const Cycle& x = cyc[c];
    if (x.act_valid) {
      if (x.swap) std::swap(active, shadow);
      exp[x.tag] = Expect{c + kLatency, matvec(x.act, active)};
    }
    if (x.wt_valid) {
      const int k = kN - 1 - fed;
      for (int n = 0; n < kN; ++n) pending[k * kN + n] = x.wt[n];
      if (++fed == kN) {
        shadow = pending;
        fed = 0;
      }
    }
  }
  return exp;
}

void check_against_golden(const std::vector<Cycle>& cyc, const std::vector<Out>& outs) {
  const auto exp = golden(cyc);
  ASSERT_EQ(outs.size(), exp.size());
  for (const Out& o : outs) {
    auto it = exp.find(o.tag);
    ASSERT_NE(it, exp.end()) << "unexpected tag " << o.tag;
    EXPECT_EQ(o.cycle, it->second.cycle) << "latency of tag " << o.tag;
    for (int n = 0; n < kN; ++n) EXPECT_EQ(o.data[n], it->second.data[n]) << "tag " << o.tag << " col " << n;
  }
}

Tile random_tile(std::mt19937& rng) {
  std::uniform_int_distribution<int> d(-128, 127);
  Tile t;
  for (auto& v : t) v = static_cast<int8_t>(d(rng));
  return t;
}
ActRow random_row(std::mt19937& rng) {
  std::uniform_int_distribution<int> d(-128, 127);
  ActRow r;
  for (auto& v : r) v = static_cast<int8_t>(d(rng));
  return r;
}

TEST(Mxu, RandomTileMatchesIntegerMatmulWithFixedLatency) {
  std::mt19937 rng(1);
  MxuTb tb;
  const Tile w = random_tile(rng);
  std::vector<Cycle> cyc;
  feed_tile(cyc, 0, w);
  std::vector<ActRow> a;
  for (int i = 0; i < 32; ++i) {
    a.push_back(random_row(rng));
    put_row(cyc, kN + i, a.back(), i == 0, static_cast<uint16_t>(i));
  }
  const auto outs = tb.run(cyc);
  ASSERT_EQ(outs.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(outs[i].tag, i);
    EXPECT_EQ(outs[i].cycle, static_cast<uint64_t>(kN + i + kLatency));
    const OutRow e = matvec(a[i], w);
    for (int n = 0; n < kN; ++n) EXPECT_EQ(outs[i].data[n], e[n]) << "row " << i << " col " << n;
  }
  check_against_golden(cyc, outs);
}

TEST(Mxu, ExtremeOperands) {
  MxuTb tb;
  Tile neg{}, pos{};
  neg.fill(-128);
  pos.fill(127);
  ActRow an{}, ap{}, mixed{};
  an.fill(-128);
  ap.fill(127);
  mixed = {-128, 127, -128, 127};
  std::vector<Cycle> cyc;
  feed_tile(cyc, 0, neg);
  put_row(cyc, kN + 0, an, true, 0);      // (-128)(-128) * N = 65536: largest positive sum
  put_row(cyc, kN + 1, ap, false, 1);     // 127 * -128 * N
  put_row(cyc, kN + 2, mixed, false, 2);  // cancels to 2 * (16384 - 16256)
  feed_tile(cyc, kN + 3, pos);
  put_row(cyc, 2 * kN + 3, an, true, 3);  // -128 * 127 * N: most negative sum
  put_row(cyc, 2 * kN + 4, ap, false, 4);
  const auto outs = tb.run(cyc);
  ASSERT_EQ(outs.size(), 5u);
  for (int n = 0; n < kN; ++n) {
    EXPECT_EQ(outs[0].data[n], 16384 * kN);
    EXPECT_EQ(outs[1].data[n], -16256 * kN);
    EXPECT_EQ(outs[2].data[n], 2 * (16384 - 16256));
    EXPECT_EQ(outs[3].data[n], -16256 * kN);
    EXPECT_EQ(outs[4].data[n], 16129 * kN);
  }
  check_against_golden(cyc, outs);
}

// Double buffering: tile j+1 is fed starting one cycle after the first row of fold j entered
// (while fold j streams); fold j+1 starts with swap on the cycle after fold j's last row.
// R = N+1 rows per fold is the shortest fold that fully hides the shift. Four folds of R rows
// must leave in exactly 4R consecutive cycles after the pipeline latency: no bubble.
TEST(Mxu, BackToBackFoldsHaveNoBubble) {
  std::mt19937 rng(2);
  MxuTb tb;
  constexpr int kFolds = 4, kR = kN + 1;
  std::vector<Tile> w;
  for (int j = 0; j < kFolds; ++j) w.push_back(random_tile(rng));
  std::vector<Cycle> cyc;
  feed_tile(cyc, 0, w[0]);
  const size_t t0 = kN;
  uint16_t tag = 0;
  for (int j = 0; j < kFolds; ++j) {
    const size_t start = t0 + static_cast<size_t>(j) * kR;
    for (int i = 0; i < kR; ++i) put_row(cyc, start + i, random_row(rng), i == 0, tag++);
    if (j + 1 < kFolds) feed_tile(cyc, start + 1, w[j + 1]);
  }
  const auto outs = tb.run(cyc);
  ASSERT_EQ(outs.size(), static_cast<size_t>(kFolds * kR));
  EXPECT_EQ(outs.front().cycle, t0 + kLatency);
  EXPECT_EQ(outs.back().cycle - t0 + 1, static_cast<uint64_t>(kFolds * kR + kLatency));
  for (size_t i = 1; i < outs.size(); ++i) EXPECT_EQ(outs[i].cycle, outs[i - 1].cycle + 1);
  check_against_golden(cyc, outs);
}

// Long folds: the next tile shifts in the background while the current one streams, and the
// fold's rows still use the current tile to the end (the shadow never leaks into a running fold).
TEST(Mxu, ShiftDuringLongFoldDoesNotDisturbActiveWeights) {
  std::mt19937 rng(3);
  MxuTb tb;
  const Tile a = random_tile(rng), b = random_tile(rng);
  std::vector<Cycle> cyc;
  feed_tile(cyc, 0, a);
  uint16_t tag = 0;
  for (int i = 0; i < 24; ++i) put_row(cyc, kN + i, random_row(rng), i == 0, tag++);
  feed_tile(cyc, kN + 1, b);  // as early as allowed
  for (int i = 0; i < 8; ++i) put_row(cyc, kN + 24 + i, random_row(rng), i == 0, tag++);
  check_against_golden(cyc, tb.run(cyc));
}

// swap exchanges active and shadow: a second swap without a feed returns to the older tile.
TEST(Mxu, SwapWithoutLoadReturnsToOlderTile) {
  std::mt19937 rng(4);
  MxuTb tb;
  const Tile a = random_tile(rng), b = random_tile(rng);
  std::vector<Cycle> cyc;
  feed_tile(cyc, 0, a);
  const ActRow x = random_row(rng);
  put_row(cyc, kN, x, true, 0);  // active = a
  feed_tile(cyc, kN + 1, b);
  put_row(cyc, 2 * kN + 1, x, true, 1);  // active = b
  put_row(cyc, 2 * kN + 2, x, true, 2);  // active = a again
  put_row(cyc, 2 * kN + 3, x, true, 3);  // b
  put_row(cyc, 2 * kN + 4, x, false, 4); // still b
  const auto outs = tb.run(cyc);
  ASSERT_EQ(outs.size(), 5u);
  EXPECT_EQ(outs[0].data, matvec(x, a));
  EXPECT_EQ(outs[1].data, matvec(x, b));
  EXPECT_EQ(outs[2].data, matvec(x, a));
  EXPECT_EQ(outs[3].data, matvec(x, b));
  EXPECT_EQ(outs[4].data, matvec(x, b));
  check_against_golden(cyc, outs);
}

// Random schedules under the port contract (tile rows back to back, no swap row during a feed),
// including feeds that start the cycle after a swap row and swaps right after a feed.
TEST(Mxu, RandomScheduleMatchesModel) {
  for (unsigned seed = 10; seed < 16; ++seed) {
    std::mt19937 rng(seed);
    MxuTb tb;
    std::vector<Cycle> cyc(3000);
    int feeding = 0;
    uint16_t tag = 0;
    std::uniform_int_distribution<int> pct(0, 99);
    Tile t{};
    for (size_t c = 0; c < cyc.size(); ++c) {
      if (feeding == 0 && pct(rng) < 8 && c + kN < cyc.size()) {
        t = random_tile(rng);
        feed_tile(cyc, c, t);
        feeding = kN;
      }
      if (pct(rng) < 80) {
        const bool swap = feeding == 0 && pct(rng) < 20;
        put_row(cyc, c, random_row(rng), swap, tag++);
      }
      if (feeding > 0) --feeding;
    }
    SCOPED_TRACE(seed);
    check_against_golden(cyc, tb.run(cyc));
  }
}

TEST(Mxu, BusyWhileRowsInFlight) {
  MxuTb tb;
  std::vector<Cycle> cyc;
  put_row(cyc, 0, ActRow{1, 2, 3, 4}, false, 0);
  tb.run(cyc, 0);
  EXPECT_TRUE(tb.busy());
  tb.run({}, kLatency + 1);
  EXPECT_FALSE(tb.busy());
}

}  // namespace
