// tpu_act_unit alone at N=4 with 1 lane (a row takes 4 cycles) and with 4 lanes (full width),
// against the requantize formula on random and extreme inputs: INT32_MIN/MAX accumulators, biases
// and multipliers, every shift 0..63 on every lane, exact rounding halves, ReLU on and off. Checks
// every output row and tag, the handshake (in_ready_o, rows held by the source until accepted) and
// the cycle behaviour of the file header: out_valid_o P+1 cycles after acceptance, busy_o exactly
// while a row is in flight.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <vector>

#include "Vtpu_act_unit_n4_l1.h"
#include "Vtpu_act_unit_n4_l4.h"
#include "tpuw/activate.h"
#include "verilated.h"

namespace {

constexpr int kN = 4;
using Row32 = std::array<uint32_t, kN>;

struct Params {
  Row32 bias{}, mult{}, shift{};
  bool relu = false;
};
struct Row {
  Row32 acc{};
  uint16_t tag = 0;
};
struct Batch {
  Params prm;
  std::vector<Row> rows;
  unsigned gap_pct = 0;  // chance (%) that the source has no row in a cycle
};

constexpr std::array<uint32_t, 8> kExtremes = {0x80000000u, 0x7fffffffu, 0u,          1u,
                                               0xffffffffu, 0x40000000u, 0xc0000000u, 0x80000001u};

uint32_t pick(std::mt19937& rng, unsigned extreme_pct) {
  if (std::uniform_int_distribution<unsigned>(0, 99)(rng) < extreme_pct)
    return kExtremes[std::uniform_int_distribution<size_t>(0, kExtremes.size() - 1)(rng)];
  return static_cast<uint32_t>(rng());
}

// Batches 0..63 walk every shift 0..63 over every lane with extreme/random operands; 64..127
// place accumulators on and next to exact rounding halves (mult +-1, shift 1..23); the rest are
// random with small multipliers so the results are mostly in range.
std::vector<Batch> make_batches(unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<Batch> out;
  uint16_t tag = 0;
  auto rnd = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int b = 0; b < 192; ++b) {
    Batch bt;
    bt.gap_pct = std::array<unsigned, 3>{0, 30, 70}[static_cast<size_t>(b % 3)];
    bt.prm.relu = rnd(0, 1) != 0;
    const int nrows = rnd(1, 6);
    for (int j = 0; j < kN; ++j) {
      if (b < 64) {
        bt.prm.shift[j] = static_cast<uint32_t>((b + 16 * j) % 64);
        bt.prm.mult[j] = pick(rng, 50);
        bt.prm.bias[j] = rnd(0, 2) == 0 ? 0u : pick(rng, 50);
      } else if (b < 128) {
        bt.prm.shift[j] = static_cast<uint32_t>(1 + (b + 7 * j) % 23);
        bt.prm.mult[j] = rnd(0, 1) ? 1u : 0xffffffffu;
        bt.prm.bias[j] = 0;
      } else {
        bt.prm.shift[j] = static_cast<uint32_t>(rnd(0, 24));
        bt.prm.mult[j] = static_cast<uint32_t>(rnd(-70000, 70000));
        bt.prm.bias[j] = static_cast<uint32_t>(rnd(-100000, 100000));
      }
    }
    for (int r = 0; r < nrows; ++r) {
      Row row;
      row.tag = tag++;
      for (int j = 0; j < kN; ++j) {
        if (b < 64) {
          row.acc[j] = pick(rng, 50);
        } else if (b < 128) {
          const unsigned s = bt.prm.shift[j];
          // r*2^s + 2^(s-1) + {-1, 0, +1}, r in [-130, 130]: around +-127.5 and the other halves.
          const int64_t v = int64_t{rnd(-130, 130)} * (int64_t{1} << s) + (int64_t{1} << (s - 1)) + rnd(-1, 1);
          row.acc[j] = static_cast<uint32_t>(static_cast<int32_t>(std::clamp<int64_t>(v, INT32_MIN, INT32_MAX)));
        } else {
          row.acc[j] = static_cast<uint32_t>(rnd(-2000000, 2000000));
        }
      }
      bt.rows.push_back(row);
    }
    out.push_back(bt);
  }
  return out;
}

uint32_t expected_out(const Params& p, const Row& r) {
  uint32_t w = 0;
  for (int j = 0; j < kN; ++j) {
    const int8_t v = tpuw::activate_element(r.acc[j], p.bias[j], p.mult[j], p.shift[j], p.relu);
    w |= static_cast<uint32_t>(static_cast<uint8_t>(v)) << (8 * j);
  }
  return w;
}

template <class M, int kLanes>
void run_act_unit(unsigned seed) {
  constexpr uint64_t kP = kN / kLanes;
  auto ctx = std::make_unique<VerilatedContext>();
  auto m = std::make_unique<M>(ctx.get(), "act");
  uint64_t now = 0;
  auto clock = [&] {
    m->clk_i = 1;
    m->eval();
    m->clk_i = 0;
    m->eval();
    ++now;
  };
  m->clk_i = 0;
  m->in_valid_i = 0;
  m->rst_ni = 0;
  for (int i = 0; i < 3; ++i) clock();
  m->rst_ni = 1;
  m->eval();

  struct Pending {
    uint64_t out_cycle;
    uint32_t data;
    uint16_t tag;
  };
  std::deque<Pending> pending;
  std::mt19937 gap_rng(seed + 1);
  uint64_t last_accept = 0, rows_out = 0, rows_in = 0;
  bool any_accept = false;

  // One cycle: drive, check the registered outputs against what is in flight, clock.
  auto step = [&](const Row* row) {
    m->in_valid_i = row != nullptr;
    if (row != nullptr) {
      for (int j = 0; j < kN; ++j) m->in_acc_i[j] = row->acc[j];
      m->in_tag_i = row->tag;
    }
    m->eval();
    EXPECT_EQ(m->busy_o != 0, !pending.empty()) << "cycle " << now;
    const bool ready_exp = kP == 1 || !any_accept || now >= last_accept + kP;
    EXPECT_EQ(m->in_ready_o != 0, ready_exp) << "cycle " << now;
    if (m->out_valid_o) {
      EXPECT_FALSE(pending.empty()) << "unexpected output at cycle " << now;
      if (!pending.empty()) {
        EXPECT_EQ(pending.front().out_cycle, now) << "output timing";
        EXPECT_EQ(m->out_data_o, pending.front().data) << "row tag " << pending.front().tag;
        EXPECT_EQ(m->out_tag_o, pending.front().tag);
        pending.pop_front();
        ++rows_out;
      }
    } else {
      EXPECT_TRUE(pending.empty() || pending.front().out_cycle > now) << "missing output at cycle " << now;
    }
    const bool accepted = row != nullptr && m->in_ready_o;
    clock();
    return accepted;
  };

  for (const Batch& bt : make_batches(seed)) {
    // Parameters change only while the unit is idle (tpu_act_unit's contract).
    while (m->busy_o) step(nullptr);
    for (int j = 0; j < kN; ++j) {
      m->bias_i[j] = bt.prm.bias[j];
      m->mult_i[j] = bt.prm.mult[j];
    }
    uint32_t sh = 0;
    for (int j = 0; j < kN; ++j) sh |= (bt.prm.shift[j] & 63u) << (6 * j);
    m->shift_i = sh;
    m->relu_i = bt.prm.relu;
    for (const Row& r : bt.rows) {
      // The source holds the row (valid stays high) until the unit takes it.
      while (true) {
        const bool gap = std::uniform_int_distribution<unsigned>(0, 99)(gap_rng) < bt.gap_pct;
        const uint64_t t = now;
        if (gap) {
          step(nullptr);
          continue;
        }
        if (step(&r)) {
          pending.push_back({t + kP + 1, expected_out(bt.prm, r), r.tag});
          last_accept = t;
          any_accept = true;
          ++rows_in;
          break;
        }
      }
    }
  }
  for (int i = 0; i < 10; ++i) step(nullptr);
  EXPECT_TRUE(pending.empty());
  EXPECT_EQ(rows_out, rows_in);
  EXPECT_GT(rows_in, 500u);
  m->final();
}

TEST(ActUnit, OneLaneMatchesFormula) {
  for (unsigned seed = 1; seed <= 3; ++seed) {
    SCOPED_TRACE(seed);
    run_act_unit<Vtpu_act_unit_n4_l1, 1>(seed);
  }
}

TEST(ActUnit, FullWidthMatchesFormula) {
  for (unsigned seed = 1; seed <= 3; ++seed) {
    SCOPED_TRACE(seed);
    run_act_unit<Vtpu_act_unit_n4_l4, 4>(seed);
  }
}

// Back-to-back rows at the unit's rate (valid always high): one row out every P cycles, each
// presented intact although the next row's first group is already in the pipeline.
TEST(ActUnit, OneLaneBackToBackThroughput) {
  auto ctx = std::make_unique<VerilatedContext>();
  auto m = std::make_unique<Vtpu_act_unit_n4_l1>(ctx.get(), "act");
  auto clock = [&] {
    m->clk_i = 1;
    m->eval();
    m->clk_i = 0;
    m->eval();
  };
  m->rst_ni = 0;
  m->in_valid_i = 0;
  for (int i = 0; i < 3; ++i) clock();
  m->rst_ni = 1;
  Params p;
  p.mult = {1u, 0xffffffffu, 2u, 0x7fffffffu};
  p.shift = {0u, 0u, 1u, 62u};
  for (int j = 0; j < kN; ++j) {
    m->bias_i[j] = 0;
    m->mult_i[j] = p.mult[j];
  }
  m->shift_i = 0u | (0u << 6) | (1u << 12) | (62u << 18);
  m->relu_i = 0;
  std::vector<uint64_t> accept_cycles, out_cycles;
  std::vector<uint32_t> outs;
  std::vector<uint32_t> want;
  uint16_t next = 0;
  for (uint64_t c = 0; c < 60; ++c) {
    Row r;
    r.tag = next;
    for (int j = 0; j < kN; ++j) r.acc[j] = static_cast<uint32_t>(static_cast<int32_t>(next) * 7 - 100 + j * 33);
    r.acc[3] = 0x80000000u + next;  // near INT32_MIN: product near -2^62, shift 62 -> about -1
    m->in_valid_i = next < 12;
    for (int j = 0; j < kN; ++j) m->in_acc_i[j] = r.acc[j];
    m->in_tag_i = r.tag;
    m->eval();
    if (m->out_valid_o) {
      out_cycles.push_back(c);
      outs.push_back(m->out_data_o);
      EXPECT_EQ(m->out_tag_o, outs.size() - 1);
    }
    if (m->in_valid_i && m->in_ready_o) {
      accept_cycles.push_back(c);
      want.push_back(expected_out(p, r));
      ++next;
    }
    clock();
  }
  ASSERT_EQ(accept_cycles.size(), 12u);
  ASSERT_EQ(out_cycles.size(), 12u);
  for (size_t i = 0; i < accept_cycles.size(); ++i) {
    EXPECT_EQ(accept_cycles[i], accept_cycles[0] + 4 * i);
    EXPECT_EQ(out_cycles[i], accept_cycles[i] + 5);
    EXPECT_EQ(outs[i], want[i]) << "row " << i;
  }
  m->final();
}

}  // namespace
