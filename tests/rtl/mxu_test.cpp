// tpu_mxu at N=4 against plain integer matrix math: single tiles, extremes, double buffering with
// back-to-back folds (cycle-exact), swap semantics, and a random schedule under the port contract;
// bf16 rows against the column order of docs/numerics.md (tpuw/numerics.h), int8 and bf16 rows
// mixed back to back, and transposed tile feeds.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "Vtpu_mxu_n4.h"
#include "tpuw/numerics.h"
#include "verilated.h"
#if TPUW_RTL_TRACE_FST
#include "verilated_fst_c.h"
#endif

namespace {

constexpr int kN = 4;
constexpr int kLatency = 2 * kN - 1;  // row enters at cycle T, leaves at T + 2N - 1

using Tile = std::array<int8_t, kN * kN>;  // W[k][n] at k*N+n
using ActRow = std::array<int8_t, kN>;
using Row16 = std::array<uint16_t, kN>;
using Tile16 = std::array<uint16_t, kN * kN>;  // as the PEs hold it: bf16 or sign-extended int8
using OutRow = std::array<int32_t, kN>;

// One cycle of stimulus.
struct Cycle {
  bool act_valid = false;
  bool swap = false;
  bool bf16 = false;  // the row is bf16 (act16), else int8 (act)
  ActRow act{};
  Row16 act16{};
  uint16_t tag = 0;
  bool wt_valid = false;
  bool wt_tr = false;   // transposed tile
  bool wt_is16 = false; // the tile row is wt16 (bf16), else wt (int8, sign-extended)
  ActRow wt{};  // one tile row, element n = W[k][n]
  Row16 wt16{};
};

uint16_t sext(int8_t v) { return static_cast<uint16_t>(static_cast<int16_t>(v)); }
Row16 wt_row16(const Cycle& c) {
  if (c.wt_is16) return c.wt16;
  Row16 r{};
  for (int i = 0; i < kN; ++i) r[i] = sext(c.wt[i]);
  return r;
}

struct Out {
  uint64_t cycle;
  uint16_t tag;
  OutRow data;
};

uint64_t pack16(const Row16& r) {
  uint64_t v = 0;
  for (int i = 0; i < kN; ++i) v |= static_cast<uint64_t>(r[i]) << (16 * i);
  return v;
}
uint64_t pack_act(const Cycle& c) {
  if (c.bf16) return pack16(c.act16);
  Row16 r{};  // int8 rows: the low byte of each element (the upper byte is ignored: garbage)
  for (int i = 0; i < kN; ++i) r[i] = static_cast<uint16_t>(0xA500u | static_cast<uint8_t>(c.act[i]));
  return pack16(r);
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
    m_->act_bf16_i = c.bf16;
    m_->act_data_i = pack_act(c);
    m_->act_tag_i = c.tag;
    m_->wt_valid_i = c.wt_valid;
    m_->wt_transpose_i = c.wt_tr;
    m_->wt_data_i = pack16(wt_row16(c));
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

// The int8 and bf16 products of a row with the tile as the PEs hold it.
OutRow matvec16(const Cycle& x, const Tile16& w) {
  OutRow r{};
  for (int n = 0; n < kN; ++n) {
    uint32_t s = 0;
    for (int k = 0; k < kN; ++k) {
      if (x.bf16) {
        s = tpuw::num::mac_bf16(s, x.act16[k], w[k * kN + n]);
      } else {
        s += static_cast<uint32_t>(int32_t{x.act[k]} *
                                   int32_t{static_cast<int8_t>(w[k * kN + n] & 0xFFu)});
      }
    }
    r[n] = static_cast<int32_t>(s);
  }
  return r;
}

// Appends the N feed cycles of a tile (tile row N-1 first).
void feed_tile(std::vector<Cycle>& cyc, size_t at, const Tile& t, bool tr = false) {
  if (cyc.size() < at + kN) cyc.resize(at + kN);
  for (int c = 0; c < kN; ++c) {
    Cycle& x = cyc[at + c];
    x.wt_valid = true;
    x.wt_tr = tr;
    const int k = kN - 1 - c;
    for (int n = 0; n < kN; ++n) x.wt[n] = t[k * kN + n];
  }
}
void feed_tile16(std::vector<Cycle>& cyc, size_t at, const Tile16& t, bool tr = false) {
  if (cyc.size() < at + kN) cyc.resize(at + kN);
  for (int c = 0; c < kN; ++c) {
    Cycle& x = cyc[at + c];
    x.wt_valid = true;
    x.wt_tr = tr;
    x.wt_is16 = true;
    const int k = kN - 1 - c;
    for (int n = 0; n < kN; ++n) x.wt16[n] = t[k * kN + n];
  }
}
void put_row16(std::vector<Cycle>& cyc, size_t at, const Row16& a, bool swap, uint16_t tag) {
  if (cyc.size() < at + 1) cyc.resize(at + 1);
  cyc[at].act_valid = true;
  cyc[at].swap = swap;
  cyc[at].bf16 = true;
  cyc[at].act16 = a;
  cyc[at].tag = tag;
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
  Tile16 active{}, shadow{}, pending{};
  int fed = 0;
  std::map<uint16_t, Expect> exp;
  for (size_t c = 0; c < cyc.size(); ++c) {
    const Cycle& x = cyc[c];
    if (x.act_valid) {
      if (x.swap) std::swap(active, shadow);
      exp[x.tag] = Expect{c + kLatency, matvec16(x, active)};
    }
    if (x.wt_valid) {
      const int r = kN - 1 - fed;  // tile row
      const Row16 row = wt_row16(x);
      for (int i = 0; i < kN; ++i) {
        if (x.wt_tr) pending[i * kN + r] = row[i];  // PE(i, r) takes element i of tile row r
        else         pending[r * kN + i] = row[i];
      }
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
    for (int n = 0; n < kN; ++n)
      EXPECT_EQ(static_cast<uint32_t>(o.data[n]), static_cast<uint32_t>(it->second.data[n]))
          << std::hex << "tag " << o.tag << " col " << n;
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

// bf16 operands: random normals of moderate range mixed with the corner values of the contract
// (zeros of both signs, subnormals, infinities, NaNs with payloads, huge and tiny magnitudes).
uint16_t random_bf16(std::mt19937& rng, int corner_pct) {
  static constexpr std::array<uint16_t, 16> kCorners = {
      0x0000, 0x8000, 0x0001, 0x807F, 0x7F80, 0xFF80, 0x7FC0, 0xFF81,
      0x7F7F, 0xFF7F, 0x0080, 0x8080, 0x3F80, 0xBF80, 0x5F80, 0x1F80};
  std::uniform_int_distribution<int> pct(0, 99);
  if (pct(rng) < corner_pct)
    return kCorners[std::uniform_int_distribution<size_t>(0, kCorners.size() - 1)(rng)];
  const uint32_t e = std::uniform_int_distribution<uint32_t>(110, 144)(rng);
  return static_cast<uint16_t>((rng() & 0x807Fu) | (e << 7));
}
Tile16 random_tile16(std::mt19937& rng, int corner_pct) {
  Tile16 t;
  for (auto& v : t) v = random_bf16(rng, corner_pct);
  return t;
}
Row16 random_row16(std::mt19937& rng, int corner_pct) {
  Row16 r;
  for (auto& v : r) v = random_bf16(rng, corner_pct);
  return r;
}

// A bf16 tile and bf16 rows: every output word is the column sum of docs/numerics.md, bit for bit.
TEST(Mxu, Bf16RowsMatchColumnOrderBitForBit) {
  std::mt19937 rng(20);
  MxuTb tb;
  const Tile16 w = random_tile16(rng, 0);
  std::vector<Cycle> cyc;
  feed_tile16(cyc, 0, w);
  for (int i = 0; i < 32; ++i) put_row16(cyc, kN + i, random_row16(rng, 0), i == 0, static_cast<uint16_t>(i));
  const auto outs = tb.run(cyc);
  ASSERT_EQ(outs.size(), 32u);
  check_against_golden(cyc, outs);
  // One hand-checked value: 1.0 * 1.5 + 2.0 * (-0.5) + ... on a known tile.
  Tile16 ones{};
  ones.fill(0x3F80);  // 1.0
  std::vector<Cycle> c2;
  feed_tile16(c2, 0, ones);
  put_row16(c2, kN, Row16{0x3FC0, 0xC000, 0x4040, 0xBF80}, true, 0);  // 1.5 - 2 + 3 - 1 = 1.5
  put_row16(c2, kN + 1, Row16{0x7F80, 0xFF80, 0x3F80, 0x3F80}, false, 1);  // inf - inf: NaN
  put_row16(c2, kN + 2, Row16{0x8000, 0x8000, 0x8000, 0x8000}, false, 2);  // +0 + -0...: +0
  put_row16(c2, kN + 3, Row16{0x7F7F, 0x7F7F, 0x0001, 0x0000}, false, 3);  // overflow: +inf
  const auto o2 = tb.run(c2);
  ASSERT_EQ(o2.size(), 4u);
  for (int n = 0; n < kN; ++n) {
    EXPECT_EQ(static_cast<uint32_t>(o2[0].data[n]), 0x3FC00000u);
    EXPECT_EQ(static_cast<uint32_t>(o2[1].data[n]), 0x7FC00000u);
    EXPECT_EQ(static_cast<uint32_t>(o2[2].data[n]), 0x00000000u);
    EXPECT_EQ(static_cast<uint32_t>(o2[3].data[n]), 0x7F800000u);
  }
}

// Corner operands everywhere (a third of them), int8 and bf16 rows interleaved back to back on the
// same tile (an int8 row reads the low byte of the bf16 weights), bf16 and int8 tiles alternating.
TEST(Mxu, MixedModesAndCornerOperandsMatchModel) {
  for (unsigned seed = 30; seed < 34; ++seed) {
    std::mt19937 rng(seed);
    MxuTb tb;
    std::vector<Cycle> cyc(1500);
    int feeding = 0;
    uint16_t tag = 0;
    std::uniform_int_distribution<int> pct(0, 99);
    for (size_t c = 0; c < cyc.size(); ++c) {
      if (feeding == 0 && pct(rng) < 8 && c + kN < cyc.size()) {
        const bool tr = pct(rng) < 50;
        if (pct(rng) < 50) feed_tile16(cyc, c, random_tile16(rng, 30), tr);
        else               feed_tile(cyc, c, random_tile(rng), tr);
        feeding = kN;
      }
      if (pct(rng) < 85) {
        const bool swap = feeding == 0 && pct(rng) < 20;
        if (pct(rng) < 50) put_row16(cyc, c, random_row16(rng, 30), swap, tag++);
        else               put_row(cyc, c, random_row(rng), swap, tag++);
      }
      if (feeding > 0) --feeding;
    }
    SCOPED_TRACE(seed);
    check_against_golden(cyc, tb.run(cyc));
  }
}

// A transposed feed puts element k of tile row n into PE(k, n): the product is x * W^T.
TEST(Mxu, TransposedTileMultipliesByTranspose) {
  std::mt19937 rng(40);
  MxuTb tb;
  const Tile w = random_tile(rng);
  Tile wt{};
  for (int k = 0; k < kN; ++k)
    for (int n = 0; n < kN; ++n) wt[k * kN + n] = w[n * kN + k];
  std::vector<Cycle> cyc;
  feed_tile(cyc, 0, w, true);
  std::vector<ActRow> a;
  for (int i = 0; i < 8; ++i) {
    a.push_back(random_row(rng));
    put_row(cyc, kN + i, a.back(), i == 0, static_cast<uint16_t>(i));
  }
  // Back to back: a plain tile right after the transposed one, swapped in by a second fold.
  feed_tile(cyc, kN + 1, w, false);
  for (int i = 0; i < 8; ++i) put_row(cyc, kN + 8 + i, a[static_cast<size_t>(i)], i == 0, static_cast<uint16_t>(8 + i));
  const auto outs = tb.run(cyc);
  ASSERT_EQ(outs.size(), 16u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(outs[static_cast<size_t>(i)].data, matvec(a[static_cast<size_t>(i)], wt)) << i;
    EXPECT_EQ(outs[static_cast<size_t>(8 + i)].data, matvec(a[static_cast<size_t>(i)], w)) << i;
  }
  check_against_golden(cyc, outs);
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
