// tpu_datapath at N=4 (small depths) through its ports only: DMA writes fill UB/WB/ACC, compute
// instructions go through the cmp_* engine interface, results come back through the DMA read
// port and are compared with a C++ model of the instruction semantics (docs/isa.md; the bf16
// modes and LOADW transpose of ISA 1.1 with tpuw/numerics.h, bit for bit).
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <random>
#include <vector>

#include "Vtpu_datapath_n4.h"
#include "tpuw/activate.h"
#include "tpuw/numerics.h"
#include "tpuw/spec.h"
#include "verilated.h"
#if TPUW_RTL_TRACE_FST
#include "verilated_fst_c.h"
#endif

namespace {

namespace sp = tpuw::spec;

constexpr int kN = TPUW_RTL_DP_N;
constexpr uint32_t kUb = TPUW_RTL_DP_UB, kWb = TPUW_RTL_DP_WB, kAcc = TPUW_RTL_DP_ACC;
static_assert(kN == 4, "the verilated model is built at N=4 (128-bit DMA rows)");
// Activation lanes of the verilated model: an ACC row takes kActP cycles in tpu_act_unit.
constexpr uint32_t kActLanes = TPUW_RTL_DP_ACT_LANES, kActP = kN / kActLanes;
static_assert(kActLanes >= 1 && kN % kActLanes == 0, "ActLanes divides ArrayN");

using Instr = std::array<uint32_t, 4>;

void set_field(Instr& in, const sp::Field& f, uint64_t v) {
  for (unsigned b = 0; b < f.width; ++b) {
    if ((v >> b) & 1u) in[(f.lsb + b) / 32] |= 1u << ((f.lsb + b) % 32);
  }
}
Instr op(sp::Opcode o) {
  Instr in{};
  set_field(in, sp::header::kOpcode, static_cast<uint8_t>(o));
  return in;
}
Instr loadw(uint32_t wb, bool bf16 = false, bool transpose = false) {
  Instr in = op(sp::Opcode::kLoadw);
  set_field(in, sp::loadw::kWbAddr, wb);
  set_field(in, sp::loadw::kBf16, bf16);
  set_field(in, sp::loadw::kTranspose, transpose);
  return in;
}
Instr matmul(uint32_t ub, uint32_t acc, uint32_t rows, bool swap, bool accumulate, bool bf16 = false) {
  Instr in = op(sp::Opcode::kMatmul);
  set_field(in, sp::matmul::kBf16, bf16);
  set_field(in, sp::matmul::kUbAddr, ub);
  set_field(in, sp::matmul::kAccAddr, acc);
  set_field(in, sp::matmul::kRows, rows);
  set_field(in, sp::matmul::kSwap, swap);
  set_field(in, sp::matmul::kAccumulate, accumulate);
  return in;
}
Instr activate(uint32_t acc, uint32_t ub, uint32_t rows, bool bias, uint32_t bias_addr, uint32_t qp,
               bool relu, bool bf16 = false) {
  Instr in = op(sp::Opcode::kActivate);
  set_field(in, sp::activate::kBf16, bf16);
  set_field(in, sp::activate::kAccAddr, acc);
  set_field(in, sp::activate::kUbAddr, ub);
  set_field(in, sp::activate::kRows, rows);
  set_field(in, sp::activate::kBias, bias);
  set_field(in, sp::activate::kBiasAddr, bias_addr);
  set_field(in, sp::activate::kQparamAddr, qp);
  set_field(in, sp::activate::kRelu, relu);
  return in;
}
Instr nop() { return op(sp::Opcode::kNop); }

// ------------------------------------------------------------------------------------------------
// C++ model of the compute-queue semantics, executed in program order.
struct Model {
  std::vector<std::array<int8_t, kN>> ub = std::vector<std::array<int8_t, kN>>(kUb);
  std::vector<std::array<int8_t, kN>> wb = std::vector<std::array<int8_t, kN>>(kWb);
  std::vector<std::array<uint32_t, kN>> acc = std::vector<std::array<uint32_t, kN>>(kAcc);
  std::array<std::array<uint16_t, kN * kN>, 2> bank{};  // 16-bit weights (int8 sign-extended)
  int sel = 0;

  // bf16 element n of the row pair (r, r+1): bytes 2n, 2n+1 of the pair, little-endian.
  using Rows = std::vector<std::array<int8_t, kN>>;
  static uint16_t pair_get(const Rows& m, uint64_t r, int n) {
    const auto lo = static_cast<uint8_t>(m[r + static_cast<uint64_t>(2 * n / kN)][(2 * n) % kN]);
    const auto hi = static_cast<uint8_t>(m[r + static_cast<uint64_t>((2 * n + 1) / kN)][(2 * n + 1) % kN]);
    return static_cast<uint16_t>(lo | (hi << 8));
  }
  static void pair_set(Rows& m, uint64_t r, int n, uint16_t v) {
    m[r + static_cast<uint64_t>(2 * n / kN)][(2 * n) % kN] = static_cast<int8_t>(v & 0xFFu);
    m[r + static_cast<uint64_t>((2 * n + 1) / kN)][(2 * n + 1) % kN] = static_cast<int8_t>(v >> 8);
  }

  static uint64_t get(const Instr& in, const sp::Field& f) {
    uint64_t v = 0;
    for (unsigned b = 0; b < f.width; ++b) v |= uint64_t{(in[(f.lsb + b) / 32] >> ((f.lsb + b) % 32)) & 1u} << b;
    return v;
  }
  void exec(const Instr& in) {
    switch (static_cast<sp::Opcode>(get(in, sp::header::kOpcode))) {
      case sp::Opcode::kLoadw: {
        const uint64_t wb0 = get(in, sp::loadw::kWbAddr);
        const bool bf = get(in, sp::loadw::kBf16) != 0, tr = get(in, sp::loadw::kTranspose) != 0;
        auto& sh = bank[1 - sel];
        for (int r = 0; r < kN; ++r)
          for (int i = 0; i < kN; ++i) {
            const uint16_t v = bf ? pair_get(wb, wb0 + 2 * static_cast<uint64_t>(r), i)
                                  : static_cast<uint16_t>(static_cast<int16_t>(wb[wb0 + static_cast<uint64_t>(r)][i]));
            (tr ? sh[i * kN + r] : sh[r * kN + i]) = v;  // transposed: PE(i, r) = element i of tile row r
          }
        break;
      }
      case sp::Opcode::kMatmul: {
        if (get(in, sp::matmul::kSwap)) sel ^= 1;
        const auto& w = bank[sel];
        const uint64_t u = get(in, sp::matmul::kUbAddr), a = get(in, sp::matmul::kAccAddr),
                       rows = get(in, sp::matmul::kRows);
        const bool accu = get(in, sp::matmul::kAccumulate);
        if (get(in, sp::matmul::kBf16)) {
          for (uint64_t i = 0; i < rows; ++i) {
            for (int n = 0; n < kN; ++n) {
              uint32_t s = 0;  // +0, then k = 0 .. N-1, one rounding each
              for (int k = 0; k < kN; ++k) s = tpuw::num::mac_bf16(s, pair_get(ub, u + 2 * i, k), w[k * kN + n]);
              acc[a + i][n] = accu ? tpuw::num::add(acc[a + i][n], s) : s;
            }
          }
          break;
        }
        for (uint64_t i = 0; i < rows; ++i) {
          for (int n = 0; n < kN; ++n) {
            uint32_t s = 0;
            for (int k = 0; k < kN; ++k)
              s += static_cast<uint32_t>(int32_t{ub[u + i][k]} * int32_t{static_cast<int8_t>(w[k * kN + n] & 0xFFu)});
            acc[a + i][n] = accu ? acc[a + i][n] + s : s;
          }
        }
        break;
      }
      case sp::Opcode::kActivate: {
        const uint64_t a = get(in, sp::activate::kAccAddr), u = get(in, sp::activate::kUbAddr),
                       rows = get(in, sp::activate::kRows), ba = get(in, sp::activate::kBiasAddr),
                       qp = get(in, sp::activate::kQparamAddr);
        const bool bias = get(in, sp::activate::kBias), relu = get(in, sp::activate::kRelu);
        if (get(in, sp::activate::kBf16)) {
          const auto brow16 = acc[ba];
          for (uint64_t i = 0; i < rows; ++i)
            for (int n = 0; n < kN; ++n)
              pair_set(ub, u + 2 * i, n, tpuw::num::activate_bf16(acc[a + i][n], brow16[n], bias, relu));
          break;
        }
        const auto mult = acc[qp], shift = acc[qp + 1], brow = acc[ba];
        for (uint64_t i = 0; i < rows; ++i)
          for (int n = 0; n < kN; ++n)
            ub[u + i][n] = tpuw::activate_element(acc[a + i][n], bias ? brow[n] : 0u, mult[n], shift[n], relu);
        break;
      }
      default:
        break;
    }
  }
};

// ------------------------------------------------------------------------------------------------
class DpTb {
 public:
  DpTb() : ctx_(std::make_unique<VerilatedContext>()) {
    ctx_->commandArgs(0, static_cast<char**>(nullptr));
    m_ = std::make_unique<Vtpu_datapath_n4>(ctx_.get(), "dp");
#if TPUW_RTL_TRACE_FST
    if (const char* f = std::getenv("TPUW_RTL_FST")) {
      ctx_->traceEverOn(true);
      tfp_ = std::make_unique<VerilatedFstC>();
      m_->trace(tfp_.get(), 99);
      tfp_->open(f);
    }
#endif
    m_->rst_ni = 0;
    for (int i = 0; i < 3; ++i) cycle();
    m_->rst_ni = 1;
    now_ = 0;
  }
  ~DpTb() {
#if TPUW_RTL_TRACE_FST
    if (tfp_) tfp_->close();
#endif
    m_->final();
  }

  // Per-cycle bookkeeping visible to the tests.
  struct Perf {
    uint64_t mxu_active = 0, weight_stall = 0, weight_shift = 0, act_busy = 0;
  } perf;
  std::vector<uint64_t> done_cycles, mxu_active_cycles;
  uint64_t now() const { return now_; }

  // Row helpers: UB/WB rows are N int8, ACC rows N int32 (all fit the 4-word port).
  void dma_write(sp::Mem mem, uint32_t addr, const std::array<uint32_t, kN>& words) {
    wr_queue_.push_back({mem, addr, words});
  }
  void dma_write_i8(sp::Mem mem, uint32_t addr, const std::array<int8_t, kN>& r) {
    std::array<uint32_t, kN> w{};
    for (int i = 0; i < kN; ++i) w[i / 4] |= static_cast<uint32_t>(static_cast<uint8_t>(r[i])) << (8 * (i % 4));
    dma_write(mem, addr, w);
  }
  void dma_read_req(sp::Mem mem, uint32_t addr) { rd_queue_.push_back({mem, addr, {}}); }
  std::deque<std::array<uint32_t, kN>> rd_rsp;

  void submit(const Instr& in) { instr_queue_.push_back(in); }

  // One clock cycle: drive the heads of the DMA and instruction queues, sample, clock.
  void cycle() {
    const bool wr = !wr_queue_.empty(), rd = !rd_queue_.empty(), iv = !instr_queue_.empty();
    m_->dma_wr_valid_i = wr;
    m_->dma_rd_req_valid_i = rd;
    m_->cmp_valid_i = iv;
    if (wr) {
      const auto& w = wr_queue_.front();
      m_->dma_wr_mem_i = static_cast<uint8_t>(w.mem);
      m_->dma_wr_addr_i = w.addr;
      for (int i = 0; i < kN; ++i) m_->dma_wr_data_i[i] = w.words[i];
    }
    if (rd) {
      m_->dma_rd_mem_i = static_cast<uint8_t>(rd_queue_.front().mem);
      m_->dma_rd_addr_i = rd_queue_.front().addr;
    }
    if (iv)
      for (int i = 0; i < 4; ++i) m_->cmp_instr_i[i] = instr_queue_.front()[i];
    m_->clk_i = 0;
    m_->eval();
    if (rst_done()) {
      if (m_->dma_rd_rsp_valid_o) {
        std::array<uint32_t, kN> r{};
        for (int i = 0; i < kN; ++i) r[i] = m_->dma_rd_rsp_data_o[i];
        rd_rsp.push_back(r);
      }
      if (m_->cmp_done_o) done_cycles.push_back(now_);
      if (m_->perf_mxu_active_o) mxu_active_cycles.push_back(now_);
      perf.mxu_active += m_->perf_mxu_active_o;
      perf.weight_stall += m_->perf_weight_stall_o;
      perf.weight_shift += m_->perf_weight_shift_o;
      perf.act_busy += m_->perf_act_busy_o;
      EXPECT_TRUE(m_->dma_wr_ready_o);
      EXPECT_TRUE(m_->dma_rd_req_ready_o);
      if (wr && m_->dma_wr_ready_o) wr_queue_.pop_front();
      if (rd && m_->dma_rd_req_ready_o) rd_queue_.pop_front();
      if (iv && m_->cmp_ready_o) {
        instr_queue_.pop_front();
        ++accepted_;
      }
    }
    dump();
    m_->clk_i = 1;
    m_->eval();
    dump();
    ++now_;
  }

  bool idle() const { return m_->cmp_idle_o; }
  uint64_t accepted() const { return accepted_; }

  // Runs until everything submitted is accepted and done and the DMA queues are drained.
  void run_to_idle(uint64_t limit = 100000) {
    const uint64_t start = now_;
    while (!instr_queue_.empty() || !wr_queue_.empty() || !rd_queue_.empty() || !m_->cmp_idle_o ||
           done_cycles.size() < accepted_) {
      cycle();
      ASSERT_LT(now_ - start, limit) << "datapath did not go idle";
    }
    cycle();  // let the last read response arrive
  }

  std::array<int8_t, kN> read_ub(sp::Mem mem, uint32_t addr) {
    rd_rsp.clear();
    dma_read_req(mem, addr);
    run_to_idle();
    std::array<int8_t, kN> r{};
    EXPECT_EQ(rd_rsp.size(), 1u);
    if (rd_rsp.empty()) return r;
    for (int i = 0; i < kN; ++i) r[i] = static_cast<int8_t>(rd_rsp.front()[i / 4] >> (8 * (i % 4)));
    for (int i = 1; i < kN; ++i) EXPECT_EQ(rd_rsp.front()[i], 0u) << "UB/WB rows use only the low 8N bits";
    return r;
  }
  std::array<uint32_t, kN> read_acc(uint32_t addr) {
    rd_rsp.clear();
    dma_read_req(sp::Mem::kAcc, addr);
    run_to_idle();
    EXPECT_EQ(rd_rsp.size(), 1u);
    return rd_rsp.empty() ? std::array<uint32_t, kN>{} : rd_rsp.front();
  }

  // Loads the model's memories into the device.
  void load(const Model& md) {
    for (uint32_t r = 0; r < kUb; ++r) dma_write_i8(sp::Mem::kUb, r, md.ub[r]);
    for (uint32_t r = 0; r < kWb; ++r) dma_write_i8(sp::Mem::kWb, r, md.wb[r]);
    for (uint32_t r = 0; r < kAcc; ++r) dma_write(sp::Mem::kAcc, r, md.acc[r]);
    run_to_idle();
  }
  // Compares every UB and ACC row with the model (reads are pipelined, one per cycle).
  void expect_memories(const Model& md) {
    rd_rsp.clear();
    for (uint32_t r = 0; r < kUb; ++r) dma_read_req(sp::Mem::kUb, r);
    for (uint32_t r = 0; r < kAcc; ++r) dma_read_req(sp::Mem::kAcc, r);
    run_to_idle();
    ASSERT_EQ(rd_rsp.size(), size_t{kUb + kAcc});
    for (uint32_t r = 0; r < kUb; ++r) {
      for (int i = 0; i < kN; ++i) {
        EXPECT_EQ(static_cast<int8_t>(rd_rsp[r][i / 4] >> (8 * (i % 4))), md.ub[r][i]) << "UB row " << r << " col " << i;
      }
    }
    for (uint32_t r = 0; r < kAcc; ++r) {
      for (int i = 0; i < kN; ++i) EXPECT_EQ(rd_rsp[kUb + r][i], md.acc[r][i]) << "ACC row " << r << " col " << i;
    }
  }

 private:
  struct Wr {
    sp::Mem mem;
    uint32_t addr;
    std::array<uint32_t, kN> words;
  };
  bool rst_done() const { return m_->rst_ni; }
  void dump() {
#if TPUW_RTL_TRACE_FST
    if (tfp_) tfp_->dump(ctx_->time());
#endif
    ctx_->timeInc(1);
  }

  std::unique_ptr<VerilatedContext> ctx_;
  std::unique_ptr<Vtpu_datapath_n4> m_;
#if TPUW_RTL_TRACE_FST
  std::unique_ptr<VerilatedFstC> tfp_;
#endif
  std::deque<Wr> wr_queue_;
  std::deque<Wr> rd_queue_;
  std::deque<Instr> instr_queue_;
  uint64_t now_ = 0, accepted_ = 0;
};

int8_t rnd8(std::mt19937& rng) { return static_cast<int8_t>(std::uniform_int_distribution<int>(-128, 127)(rng)); }

void randomize(Model& md, std::mt19937& rng) {
  for (auto& r : md.ub)
    for (auto& v : r) v = rnd8(rng);
  for (auto& r : md.wb)
    for (auto& v : r) v = rnd8(rng);
  for (auto& r : md.acc)
    for (auto& v : r) v = static_cast<uint32_t>(rng());
}

// ACC rows kAcc-4 .. kAcc-1 hold requantization parameters that keep results in range:
// qparam A = (kAcc-4, kAcc-3) moderate, qparam B = (kAcc-2, kAcc-1) extreme corners.
constexpr uint32_t kQpA = kAcc - 4, kQpB = kAcc - 2, kBiasRow = kAcc - 5;
void set_qparams(Model& md, std::mt19937& rng) {
  for (int n = 0; n < kN; ++n) {
    md.acc[kQpA][n] = static_cast<uint32_t>(std::uniform_int_distribution<int>(-40000, 40000)(rng));
    md.acc[kQpA + 1][n] = static_cast<uint32_t>(std::uniform_int_distribution<int>(8, 24)(rng)) | 0xABCDE00u;  // high bits ignored
    md.acc[kBiasRow][n] = static_cast<uint32_t>(std::uniform_int_distribution<int>(-300000, 300000)(rng));
  }
  md.acc[kBiasRow][0] = 0x7fffffffu;  // x + bias wraps for any positive x
  // Corners: largest multipliers, shift 0 / 1 / 63 / 62.
  md.acc[kQpB] = {0x7fffffffu, 0x80000000u, 1u, 0xffffffffu};
  md.acc[kQpB + 1] = {63u, 62u, 0u, 1u};
}

TEST(Datapath, DmaPortsRoundTrip) {
  DpTb tb;
  tb.dma_write(sp::Mem::kAcc, 7, {0x80000000u, 0x7fffffffu, 0xdeadbeefu, 1u});
  tb.dma_write_i8(sp::Mem::kUb, 3, {-128, 127, 0, -1});
  tb.dma_write_i8(sp::Mem::kWb, kWb - 1, {1, 2, 3, 4});
  tb.run_to_idle();
  EXPECT_EQ(tb.read_acc(7), (std::array<uint32_t, kN>{0x80000000u, 0x7fffffffu, 0xdeadbeefu, 1u}));
  EXPECT_EQ(tb.read_ub(sp::Mem::kUb, 3), (std::array<int8_t, kN>{-128, 127, 0, -1}));
  EXPECT_EQ(tb.read_ub(sp::Mem::kWb, kWb - 1), (std::array<int8_t, kN>{1, 2, 3, 4}));
  // Back-to-back read requests: one response per cycle, in request order, one cycle later.
  tb.rd_rsp.clear();
  tb.dma_read_req(sp::Mem::kAcc, 7);
  tb.dma_read_req(sp::Mem::kUb, 3);
  tb.dma_read_req(sp::Mem::kAcc, 7);
  tb.run_to_idle();
  ASSERT_EQ(tb.rd_rsp.size(), 3u);
  EXPECT_EQ(tb.rd_rsp[0][0], 0x80000000u);
  EXPECT_EQ(tb.rd_rsp[1][0], 0xff007f80u);
  EXPECT_EQ(tb.rd_rsp[2][3], 1u);
}

TEST(Datapath, MatmulAccumulateWrapsAndActivateCorners) {
  std::mt19937 rng(5);
  Model md;
  randomize(md, rng);
  set_qparams(md, rng);
  // All -128 weights and activations: each MATMUL row adds 65536; start near INT32_MAX to wrap.
  for (int k = 0; k < kN; ++k) md.wb[k].fill(-128);
  md.ub[0].fill(-128);
  md.acc[10] = {0x7fff0000u, 0x7fffffffu, 0xffff0000u, 0u};
  DpTb tb;
  tb.load(md);
  std::vector<Instr> prog = {loadw(0), matmul(0, 10, 1, true, true), matmul(0, 10, 1, false, true),
                             matmul(0, 11, 1, false, false),
                             activate(10, 20, 2, false, 0, kQpB, false),
                             activate(10, 22, 2, true, kBiasRow, kQpA, true),
                             activate(10, 24, 2, true, kBiasRow, kQpB, false)};
  for (const auto& in : prog) {
    md.exec(in);
    tb.submit(in);
  }
  tb.run_to_idle();
  EXPECT_EQ(md.acc[10][0], 0x80010000u);  // the model itself wrapped
  tb.expect_memories(md);
  EXPECT_EQ(tb.done_cycles.size(), prog.size());
}

// Hazards with rows = 1: back-to-back accumulating MATMULs into the same ACC row (needs the
// read-modify-write forward), ACTIVATE right after the MATMUL that writes its source, and a
// MATMUL right after the ACTIVATE that writes its UB rows (layer chaining).
TEST(Datapath, HazardsWithSingleRowInstructions) {
  std::mt19937 rng(6);
  Model md;
  randomize(md, rng);
  set_qparams(md, rng);
  DpTb tb;
  tb.load(md);
  std::vector<Instr> prog;
  prog.push_back(loadw(4));
  prog.push_back(matmul(0, 0, 1, true, false));
  for (int i = 0; i < 9; ++i) prog.push_back(matmul(static_cast<uint32_t>(i % 3), 0, 1, false, true));
  prog.push_back(matmul(5, 1, 1, false, true));  // distance 1 to a different row
  prog.push_back(matmul(6, 0, 2, false, true));  // overlaps row 0 and 1 again
  prog.push_back(activate(0, 30, 2, true, kBiasRow, kQpA, false));
  prog.push_back(matmul(30, 2, 2, false, false));  // reads the rows ACTIVATE just wrote
  prog.push_back(activate(2, 30, 1, false, 0, kQpA, true));
  prog.push_back(matmul(30, 3, 1, false, true));
  prog.push_back(nop());
  prog.push_back(loadw(8));
  prog.push_back(matmul(30, 4, 1, true, false));
  for (const auto& in : prog) {
    md.exec(in);
    tb.submit(in);
  }
  tb.run_to_idle();
  EXPECT_EQ(tb.done_cycles.size(), prog.size());
  tb.expect_memories(md);
}

// Random programs of LOADW / MATMUL / ACTIVATE / NOP against the model, with random DMA traffic
// to rows the program never touches running concurrently.
TEST(Datapath, RandomProgramsMatchModel) {
  for (unsigned seed = 20; seed < 28; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    Model md;
    randomize(md, rng);
    set_qparams(md, rng);
    DpTb tb;
    tb.load(md);
    auto u = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
    // Program area: UB rows 0..47, ACC rows 0..47; params at the top of ACC; DMA plays in UB/ACC
    // rows 48..(depth-6) and the last WB tile.
    for (int i = 0; i < 60; ++i) {
      Instr in;
      const uint32_t kind = u(0, 9);
      if (kind < 2) {
        in = loadw(u(0, kWb - 2 * kN));
      } else if (kind < 7) {
        const uint32_t rows = u(0, 3) == 0 ? 1 : u(1, 12);
        in = matmul(u(0, 47 - rows + 1), u(0, 47 - rows + 1), rows, u(0, 1), u(0, 1));
      } else if (kind < 9) {
        const uint32_t rows = u(1, 8);
        in = activate(u(0, 47 - rows + 1), u(0, 47 - rows + 1), rows, u(0, 1), u(0, 1) ? kBiasRow : u(0, 47),
                      u(0, 1) ? kQpA : kQpB, u(0, 1));
      } else {
        in = nop();
      }
      md.exec(in);
      tb.submit(in);
      if (u(0, 2) == 0) {
        std::array<int8_t, kN> r{};
        for (auto& v : r) v = rnd8(rng);
        const uint32_t row = u(48, kUb - 6);
        md.ub[row] = r;
        tb.dma_write_i8(sp::Mem::kUb, row, r);
        tb.dma_read_req(sp::Mem::kAcc, u(48, kAcc - 6));
      }
    }
    tb.run_to_idle();
    EXPECT_EQ(tb.done_cycles.size(), 60u);
    tb.expect_memories(md);
  }
}

// Double buffering at the datapath level: LOADW / MATMUL(swap, R rows) pairs stream with no
// bubble once R >= N+1, the MXU input is busy every cycle from the first to the last row, and
// the shift is hidden (no weight stall after the first tile).
TEST(Datapath, BackToBackFoldsStreamWithoutBubble) {
  std::mt19937 rng(7);
  Model md;
  randomize(md, rng);
  DpTb tb;
  tb.load(md);
  constexpr uint32_t kR = kN + 1, kFolds = 6;
  std::vector<Instr> prog;
  prog.push_back(loadw(0));
  for (uint32_t j = 0; j < kFolds; ++j) {
    prog.push_back(matmul(j * kR, j * kR, kR, true, j % 2 == 1));
    if (j + 1 < kFolds) prog.push_back(loadw(((j + 1) % (kWb / kN)) * kN));
  }
  for (const auto& in : prog) {
    md.exec(in);
    tb.submit(in);
  }
  // DMA traffic on every cycle of the run, to rows the program does not use: UB writes, WB writes
  // to a tile no LOADW reads, ACC reads. The MXU must not lose a cycle to it.
  constexpr uint32_t kSpareUb = kR * kFolds, kSpareTile = kWb - kN;
  for (uint32_t i = 0; i < 40; ++i) {
    std::array<int8_t, kN> r{};
    for (auto& v : r) v = rnd8(rng);
    const uint32_t row = kSpareUb + i % (kUb - kSpareUb);
    md.ub[row] = r;
    tb.dma_write_i8(sp::Mem::kUb, row, r);
    tb.dma_read_req(sp::Mem::kAcc, kAcc - 1 - i % 8);
  }
  static_assert(kSpareTile >= kN * (kFolds % (kWb / kN)), "spare WB tile not used by the program");
  tb.perf = {};
  tb.mxu_active_cycles.clear();
  const uint64_t t0 = tb.now();
  tb.run_to_idle();
  ASSERT_EQ(tb.mxu_active_cycles.size(), size_t{kR * kFolds});
  EXPECT_EQ(tb.mxu_active_cycles.back() - tb.mxu_active_cycles.front() + 1, uint64_t{kR * kFolds});
  // Only the first MATMUL waits for its tile: LOADW dispatch, N row reads, then the MATMUL.
  EXPECT_EQ(tb.perf.weight_stall, uint64_t{kN - 1});
  EXPECT_EQ(tb.perf.weight_shift, uint64_t{kN * kFolds});
  EXPECT_EQ(tb.perf.mxu_active, uint64_t{kR * kFolds});
  EXPECT_EQ(tb.perf.act_busy, 0u);
  // Fixed latencies (see the report): first instruction accepted at t0, LOADW dispatched at t0+1,
  // shifts t0+2..t0+N+1, MATMUL dispatched at t0+N+1, first row enters at t0+N+3.
  EXPECT_EQ(tb.mxu_active_cycles.front(), t0 + kN + 3);
  // Last MATMUL done: last row enters at E, ACC written at E + 2N, done pulse at E + 2N + 1.
  EXPECT_EQ(tb.done_cycles.back(), tb.mxu_active_cycles.back() + 2 * kN + 1);
  tb.expect_memories(md);
}

// done means the memory effects are visible: at the cycle of each MATMUL's done pulse, a DMA read
// of its last ACC row returns the final value; and a LOADW queued behind a long MATMUL is
// reported after it (acceptance order) although its shift finishes first.
TEST(Datapath, DoneIsInOrderAndAfterTheWrites) {
  std::mt19937 rng(8);
  Model md;
  randomize(md, rng);
  DpTb tb;
  tb.load(md);
  std::vector<Instr> prog = {loadw(0), matmul(0, 0, 24, true, false), loadw(4), nop(),
                             matmul(24, 24, 1, true, true)};
  for (const auto& in : prog) {
    md.exec(in);
    tb.submit(in);
  }
  // Poll: on each done pulse issue a read of ACC row 23 in the same cycle as the pulse.
  uint64_t seen = 0;
  tb.rd_rsp.clear();
  const uint64_t start = tb.now();
  std::vector<uint64_t> row_mm_done;
  while (tb.done_cycles.size() < prog.size()) {
    tb.cycle();
    ASSERT_LT(tb.now() - start, 1000u);
    if (tb.done_cycles.size() > seen) {
      seen = tb.done_cycles.size();
      if (seen == 2) tb.dma_read_req(sp::Mem::kAcc, 23);  // issued in the cycle after the pulse
    }
  }
  tb.run_to_idle();
  ASSERT_EQ(tb.rd_rsp.size(), 1u);
  EXPECT_EQ(tb.rd_rsp.front(), md.acc[23]);
  // The LOADW (3rd) cannot be reported before the 24-row MATMUL (2nd).
  ASSERT_EQ(tb.done_cycles.size(), prog.size());
  for (size_t i = 1; i < tb.done_cycles.size(); ++i) EXPECT_GT(tb.done_cycles[i], tb.done_cycles[i - 1]);
  tb.expect_memories(md);
}

// ACTIVATE timing (the reference model's estimate uses it): dispatch one cycle after acceptance,
// mult/shift(/bias) rows read in the next 2(3) cycles, then one ACC row every P = N/ActLanes
// cycles, each written to the UB P + 2 cycles after its read (data one cycle later, P + 1 in
// tpu_act_unit). act_busy (dispatch+1 .. last UB write) = P*rows + 5 (+1 with bias); done one
// cycle after the last UB write, P*rows + 7 (+1) cycles after acceptance. At full width (P = 1,
// the simulated device) that is rows + 5 and rows + 7.
TEST(Datapath, ActivateLatency) {
  std::mt19937 rng(9);
  Model md;
  randomize(md, rng);
  set_qparams(md, rng);
  DpTb tb;
  tb.load(md);
  for (const bool bias : {false, true}) {
    for (const uint32_t rows : {1u, 7u}) {
      const Instr in = activate(3, 9, rows, bias, kBiasRow, kQpA, !bias);
      md.exec(in);
      tb.perf = {};
      const size_t done_before = tb.done_cycles.size();
      const uint64_t t0 = tb.now();
      tb.submit(in);
      tb.run_to_idle();
      EXPECT_EQ(tb.perf.act_busy, kActP * rows + 5 + (bias ? 1 : 0));
      ASSERT_EQ(tb.done_cycles.size(), done_before + 1);
      EXPECT_EQ(tb.done_cycles.back(), t0 + kActP * rows + 7 + (bias ? 1 : 0));
      EXPECT_EQ(tb.perf.mxu_active, 0u);
    }
  }
  tb.expect_memories(md);
}

// ISA 1.1 at the datapath: random programs mixing int8 and bf16 LOADW (plain and transposed),
// MATMUL (with and without accumulate) and ACTIVATE (bias, ReLU) against the model, bit for bit.
// UB/WB hold bf16 row pairs of moderate values mixed with the contract's corners (zeros of both
// signs, subnormals, infinities, NaNs with payloads, huge and tiny magnitudes); the ACC starts
// with random 32-bit patterns (any fp32, NaNs and subnormals included).
uint16_t rnd_bf16(std::mt19937& rng) {
  static constexpr std::array<uint16_t, 14> kCorners = {0x0000, 0x8000, 0x0001, 0x807F, 0x7F80,
                                                        0xFF80, 0x7FC0, 0xFF81, 0x7F7F, 0xFF7F,
                                                        0x0080, 0x8080, 0x5F80, 0x1F80};
  const uint32_t pick = std::uniform_int_distribution<uint32_t>(0, 99)(rng);
  if (pick < 15) return kCorners[std::uniform_int_distribution<size_t>(0, kCorners.size() - 1)(rng)];
  if (pick < 25) return static_cast<uint16_t>(rng());
  const uint32_t e = std::uniform_int_distribution<uint32_t>(118, 136)(rng);
  return static_cast<uint16_t>((static_cast<uint32_t>(rng()) & 0x807Fu) | (e << 7));
}

TEST(Datapath, Bf16AndTransposeProgramsMatchModel) {
  for (unsigned seed = 40; seed < 46; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    Model md;
    randomize(md, rng);
    set_qparams(md, rng);
    for (uint32_t r = 0; r + 1 < kUb; r += 2)
      for (int n = 0; n < kN; ++n) Model::pair_set(md.ub, r, n, rnd_bf16(rng));
    for (uint32_t r = 0; r + 1 < kWb; r += 2)
      for (int n = 0; n < kN; ++n) Model::pair_set(md.wb, r, n, rnd_bf16(rng));
    for (int n = 0; n < kN; ++n) md.acc[kBiasRow][n] = static_cast<uint32_t>(rnd_bf16(rng)) << 16;
    DpTb tb;
    tb.load(md);
    auto u = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
    auto even = [&](uint32_t lo, uint32_t hi) { return 2 * u(lo / 2, hi / 2); };
    for (int i = 0; i < 60; ++i) {
      Instr in;
      const uint32_t kind = u(0, 9);
      const bool bf = u(0, 2) != 0;
      if (kind < 2) {
        in = bf ? loadw(even(0, kWb - 2 * kN), true, u(0, 1)) : loadw(u(0, kWb - kN), false, u(0, 1));
      } else if (kind < 7) {
        const uint32_t rows = u(0, 3) == 0 ? 1 : u(1, 10);
        in = bf ? matmul(even(0, 47 - 2 * rows + 1), u(0, 47 - rows + 1), rows, u(0, 1), u(0, 1), true)
                : matmul(u(0, 47 - rows + 1), u(0, 47 - rows + 1), rows, u(0, 1), u(0, 1));
      } else if (kind < 9) {
        const uint32_t rows = u(1, 8);
        in = bf ? activate(u(0, 47 - rows + 1), even(0, 47 - 2 * rows + 1), rows, u(0, 1),
                           u(0, 1) ? kBiasRow : u(0, 47), 0xFFFFF /* not checked in bf16 */, u(0, 1), true)
                : activate(u(0, 47 - rows + 1), u(0, 47 - rows + 1), rows, u(0, 1),
                           u(0, 1) ? kBiasRow : u(0, 47), u(0, 1) ? kQpA : kQpB, u(0, 1));
      } else {
        in = nop();
      }
      md.exec(in);
      tb.submit(in);
    }
    tb.run_to_idle();
    EXPECT_EQ(tb.done_cycles.size(), 60u);
    tb.expect_memories(md);
  }
}

// A bf16 MATMUL streams one row pair per cycle: back-to-back bf16 folds of R >= N+1 rows keep the
// MXU input busy every cycle, exactly like int8 (the row pair is one banked UB read).
TEST(Datapath, Bf16FoldsStreamOneRowPairPerCycle) {
  std::mt19937 rng(47);
  Model md;
  randomize(md, rng);
  for (uint32_t r = 0; r + 1 < kUb; r += 2)
    for (int n = 0; n < kN; ++n) Model::pair_set(md.ub, r, n, rnd_bf16(rng));
  for (uint32_t r = 0; r + 1 < kWb; r += 2)
    for (int n = 0; n < kN; ++n) Model::pair_set(md.wb, r, n, rnd_bf16(rng));
  DpTb tb;
  tb.load(md);
  constexpr uint32_t kR = kN + 1;
  std::vector<Instr> prog;
  prog.push_back(loadw(0, true));
  for (uint32_t f = 0; f < 3; ++f) {
    prog.push_back(matmul(2 * f * kR % 24, f * kR, kR, true, false, true));
    prog.push_back(loadw(2 * kN * ((f + 1) % 2), true, f % 2 == 0));
  }
  prog.push_back(matmul(0, 3 * kR, kR, true, true, true));
  tb.mxu_active_cycles.clear();
  for (const auto& in : prog) {
    md.exec(in);
    tb.submit(in);
  }
  tb.run_to_idle();
  EXPECT_EQ(tb.done_cycles.size(), prog.size());
  ASSERT_EQ(tb.mxu_active_cycles.size(), size_t{4 * kR});
  for (size_t i = 1; i < tb.mxu_active_cycles.size(); ++i)
    EXPECT_EQ(tb.mxu_active_cycles[i], tb.mxu_active_cycles[i - 1] + 1) << "bubble before row " << i;
  tb.expect_memories(md);
}

}  // namespace
