// The transpose unit (TRANSPOSE) and the vector unit (VECTOR) inside tpu_datapath at N=4 (small
// depths), through the datapath's ports only, against plain math: the transpose as index
// arithmetic, the vector lanes as tpuw/numerics.h (the contract's C++ twin). Covers every source
// row count, int8 and bf16 tiles, overlapping ranges, every VECTOR op on NaN / inf / subnormal /
// overflow operands, COLSUM order, the hazards with MATMUL / ACTIVATE / LOADW in random programs,
// DMA reads of the ACC beside a VECTOR (operand b shares the DMA's read port), the cycle costs
// of the unit headers and PERF_ACT_BUSY.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <vector>

#include "Vtpu_datapath_n4.h"
#include "tpuw/activate.h"
#include "tpuw/numerics.h"
#include "tpuw/spec.h"
#include "verilated.h"

namespace {

namespace sp = tpuw::spec;
namespace num = tpuw::num;

constexpr int kN = TPUW_RTL_DP_N;
constexpr uint32_t kUb = TPUW_RTL_DP_UB, kWb = TPUW_RTL_DP_WB, kAcc = TPUW_RTL_DP_ACC;
static_assert(kN == 4, "the verilated model is built at N=4 (128-bit DMA rows)");

using Instr = std::array<uint32_t, 4>;
using AccRow = std::array<uint32_t, kN>;
using UbRow = std::array<uint8_t, kN>;

void set_field(Instr& in, const sp::Field& f, uint64_t v) {
  for (unsigned b = 0; b < f.width; ++b) {
    if ((v >> b) & 1u) in[(f.lsb + b) / 32] |= 1u << ((f.lsb + b) % 32);
  }
}
uint64_t get(const Instr& in, const sp::Field& f) {
  uint64_t v = 0;
  for (unsigned b = 0; b < f.width; ++b) v |= uint64_t{(in[(f.lsb + b) / 32] >> ((f.lsb + b) % 32)) & 1u} << b;
  return v;
}
Instr op(sp::Opcode o) {
  Instr in{};
  set_field(in, sp::header::kOpcode, static_cast<uint8_t>(o));
  return in;
}
Instr transpose(uint32_t src, uint32_t dst, uint32_t rows, bool bf16) {
  Instr in = op(sp::Opcode::kTranspose);
  set_field(in, sp::transpose::kSrcAddr, src);
  set_field(in, sp::transpose::kDstAddr, dst);
  set_field(in, sp::transpose::kRows, rows);
  set_field(in, sp::transpose::kBf16, bf16);
  return in;
}
Instr vector(sp::VecOp vop, uint32_t dst, uint32_t a, uint32_t b, uint32_t rows, uint32_t s) {
  Instr in = op(sp::Opcode::kVector);
  set_field(in, sp::vector::kOp, static_cast<uint32_t>(vop));
  set_field(in, sp::vector::kDstAddr, dst);
  set_field(in, sp::vector::kAAddr, a);
  set_field(in, sp::vector::kBAddr, b);
  set_field(in, sp::vector::kRows, rows);
  set_field(in, sp::vector::kScalar, s);
  return in;
}
Instr loadw(uint32_t wb) {
  Instr in = op(sp::Opcode::kLoadw);
  set_field(in, sp::loadw::kWbAddr, wb);
  return in;
}
Instr matmul(uint32_t ub, uint32_t acc, uint32_t rows, bool swap, bool accumulate) {
  Instr in = op(sp::Opcode::kMatmul);
  set_field(in, sp::matmul::kUbAddr, ub);
  set_field(in, sp::matmul::kAccAddr, acc);
  set_field(in, sp::matmul::kRows, rows);
  set_field(in, sp::matmul::kSwap, swap);
  set_field(in, sp::matmul::kAccumulate, accumulate);
  return in;
}
Instr activate(uint32_t acc, uint32_t ub, uint32_t rows, uint32_t qp, bool relu) {
  Instr in = op(sp::Opcode::kActivate);
  set_field(in, sp::activate::kAccAddr, acc);
  set_field(in, sp::activate::kUbAddr, ub);
  set_field(in, sp::activate::kRows, rows);
  set_field(in, sp::activate::kQparamAddr, qp);
  set_field(in, sp::activate::kRelu, relu);
  return in;
}

// ------------------------------------------------------------------------------------------------
// Plain-math model of the compute queue, in program order.
struct Model {
  std::vector<UbRow> ub = std::vector<UbRow>(kUb);
  std::vector<UbRow> wb = std::vector<UbRow>(kWb);
  std::vector<AccRow> acc = std::vector<AccRow>(kAcc);
  std::array<std::array<int8_t, kN * kN>, 2> bank{};
  int sel = 0;

  // bf16 element j of the UB row pair starting at row r (little-endian, bytes 2j, 2j+1).
  uint16_t bf16_at(uint64_t r, int j) const {
    const int byte = 2 * j;
    return static_cast<uint16_t>(ub[r + byte / kN][byte % kN] | (ub[r + (byte + 1) / kN][(byte + 1) % kN] << 8));
  }
  void set_bf16(uint64_t r, int j, uint16_t v) {
    const int byte = 2 * j;
    ub[r + byte / kN][byte % kN] = static_cast<uint8_t>(v);
    ub[r + (byte + 1) / kN][(byte + 1) % kN] = static_cast<uint8_t>(v >> 8);
  }

  void exec(const Instr& in) {
    switch (static_cast<sp::Opcode>(get(in, sp::header::kOpcode))) {
      case sp::Opcode::kTranspose: {
        const uint64_t src = get(in, sp::transpose::kSrcAddr), dst = get(in, sp::transpose::kDstAddr),
                       rows = get(in, sp::transpose::kRows);
        const bool bf16 = get(in, sp::transpose::kBf16) != 0;
        std::array<std::array<uint16_t, kN>, kN> t{};  // t[i][j] = src[i][j]
        for (uint64_t i = 0; i < rows; ++i)
          for (int j = 0; j < kN; ++j) t[i][j] = bf16 ? bf16_at(src + 2 * i, j) : ub[src + i][j];
        for (int j = 0; j < kN; ++j)
          for (int i = 0; i < kN; ++i) {
            if (bf16) set_bf16(dst + 2 * j, i, t[i][j]);
            else ub[dst + j][i] = static_cast<uint8_t>(t[i][j]);
          }
        break;
      }
      case sp::Opcode::kVector: {
        const auto vop = static_cast<sp::VecOp>(get(in, sp::vector::kOp));
        const uint64_t dst = get(in, sp::vector::kDstAddr), a = get(in, sp::vector::kAAddr),
                       b = get(in, sp::vector::kBAddr), rows = get(in, sp::vector::kRows);
        const auto s = static_cast<uint32_t>(get(in, sp::vector::kScalar));
        if (vop == sp::VecOp::kColsum) {
          AccRow sum{};
          for (uint64_t i = 0; i < rows; ++i)
            for (int n = 0; n < kN; ++n) sum[n] = num::colsum_step(sum[n], acc[a + i][n]);
          acc[dst] = sum;
        } else {
          for (uint64_t i = 0; i < rows; ++i)  // destination equal to a source or disjoint
            for (int n = 0; n < kN; ++n) acc[dst + i][n] = num::vector_lane(vop, acc[a + i][n], acc[b + i][n], s);
        }
        break;
      }
      case sp::Opcode::kLoadw: {
        const uint64_t wb0 = get(in, sp::loadw::kWbAddr);
        auto& sh = bank[1 - sel];
        for (int k = 0; k < kN; ++k)
          for (int n = 0; n < kN; ++n) sh[k * kN + n] = static_cast<int8_t>(wb[wb0 + k][n]);
        break;
      }
      case sp::Opcode::kMatmul: {
        if (get(in, sp::matmul::kSwap)) sel ^= 1;
        const auto& w = bank[sel];
        const uint64_t u = get(in, sp::matmul::kUbAddr), a = get(in, sp::matmul::kAccAddr),
                       rows = get(in, sp::matmul::kRows);
        const bool accu = get(in, sp::matmul::kAccumulate);
        for (uint64_t i = 0; i < rows; ++i)
          for (int n = 0; n < kN; ++n) {
            uint32_t s = 0;
            for (int k = 0; k < kN; ++k)
              s += static_cast<uint32_t>(int32_t{static_cast<int8_t>(ub[u + i][k])} * int32_t{w[k * kN + n]});
            acc[a + i][n] = accu ? acc[a + i][n] + s : s;
          }
        break;
      }
      case sp::Opcode::kActivate: {
        const uint64_t a = get(in, sp::activate::kAccAddr), u = get(in, sp::activate::kUbAddr),
                       rows = get(in, sp::activate::kRows), qp = get(in, sp::activate::kQparamAddr);
        const bool relu = get(in, sp::activate::kRelu);
        const auto mult = acc[qp], shift = acc[qp + 1];
        for (uint64_t i = 0; i < rows; ++i)
          for (int n = 0; n < kN; ++n)
            ub[u + i][n] = static_cast<uint8_t>(tpuw::activate_element(acc[a + i][n], 0u, mult[n], shift[n], relu));
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
    m_->rst_ni = 0;
    for (int i = 0; i < 3; ++i) cycle();
    m_->rst_ni = 1;
    now_ = 0;
  }
  ~DpTb() { m_->final(); }

  uint64_t act_busy = 0, rd_stalls = 0;
  std::vector<uint64_t> done_cycles, accept_cycles;
  std::deque<AccRow> rd_rsp;

  void dma_write(sp::Mem mem, uint32_t addr, const AccRow& words) { wr_.push_back({mem, addr, words}); }
  void dma_write_ub(uint32_t addr, const UbRow& r) {
    AccRow w{};
    for (int i = 0; i < kN; ++i) w[i / 4] |= uint32_t{r[i]} << (8 * (i % 4));
    dma_write(sp::Mem::kUb, addr, w);
  }
  void dma_read_req(sp::Mem mem, uint32_t addr) { rd_.push_back({mem, addr, {}}); }
  void submit(const Instr& in) { instr_.push_back(in); }

  void cycle() {
    const bool wr = !wr_.empty(), rd = !rd_.empty(), iv = !instr_.empty();
    m_->dma_wr_valid_i = wr;
    m_->dma_rd_req_valid_i = rd;
    m_->cmp_valid_i = iv;
    if (wr) {
      m_->dma_wr_mem_i = static_cast<uint8_t>(wr_.front().mem);
      m_->dma_wr_addr_i = wr_.front().addr;
      for (int i = 0; i < kN; ++i) m_->dma_wr_data_i[i] = wr_.front().words[i];
    }
    if (rd) {
      m_->dma_rd_mem_i = static_cast<uint8_t>(rd_.front().mem);
      m_->dma_rd_addr_i = rd_.front().addr;
    }
    if (iv)
      for (int i = 0; i < 4; ++i) m_->cmp_instr_i[i] = instr_.front()[i];
    m_->clk_i = 0;
    m_->eval();
    if (m_->rst_ni) {
      if (m_->dma_rd_rsp_valid_o) {
        AccRow r{};
        for (int i = 0; i < kN; ++i) r[i] = m_->dma_rd_rsp_data_o[i];
        rd_rsp.push_back(r);
      }
      if (m_->cmp_done_o) done_cycles.push_back(now_);
      act_busy += m_->perf_act_busy_o;
      EXPECT_TRUE(m_->dma_wr_ready_o);
      if (wr && m_->dma_wr_ready_o) wr_.pop_front();
      if (rd && !m_->dma_rd_req_ready_o) ++rd_stalls;
      if (rd && m_->dma_rd_req_ready_o) rd_.pop_front();
      if (iv && m_->cmp_ready_o) {
        instr_.pop_front();
        accept_cycles.push_back(now_);
      }
    }
    m_->clk_i = 1;
    m_->eval();
    ++now_;
  }

  void run_to_idle(uint64_t limit = 100000) {
    const uint64_t start = now_;
    while (!instr_.empty() || !wr_.empty() || !rd_.empty() || !m_->cmp_idle_o ||
           done_cycles.size() < accept_cycles.size()) {
      cycle();
      ASSERT_LT(now_ - start, limit) << "datapath did not go idle";
    }
    cycle();  // the last read response
  }

  void load(const Model& md) {
    for (uint32_t r = 0; r < kUb; ++r) dma_write_ub(r, md.ub[r]);
    for (uint32_t r = 0; r < kWb; ++r) {
      AccRow w{};
      for (int i = 0; i < kN; ++i) w[i / 4] |= uint32_t{md.wb[r][i]} << (8 * (i % 4));
      dma_write(sp::Mem::kWb, r, w);
    }
    for (uint32_t r = 0; r < kAcc; ++r) dma_write(sp::Mem::kAcc, r, md.acc[r]);
    run_to_idle();
  }
  void expect_memories(const Model& md, const char* what) {
    rd_rsp.clear();
    for (uint32_t r = 0; r < kUb; ++r) dma_read_req(sp::Mem::kUb, r);
    for (uint32_t r = 0; r < kAcc; ++r) dma_read_req(sp::Mem::kAcc, r);
    run_to_idle();
    ASSERT_EQ(rd_rsp.size(), size_t{kUb + kAcc});
    for (uint32_t r = 0; r < kUb; ++r)
      for (int i = 0; i < kN; ++i)
        ASSERT_EQ(static_cast<uint8_t>(rd_rsp[r][i / 4] >> (8 * (i % 4))), md.ub[r][i])
            << what << ": UB row " << r << " byte " << i;
    for (uint32_t r = 0; r < kAcc; ++r)
      for (int i = 0; i < kN; ++i)
        ASSERT_EQ(rd_rsp[kUb + r][i], md.acc[r][i]) << std::hex << what << ": ACC row " << std::dec << r << " lane " << i;
  }

 private:
  struct Req {
    sp::Mem mem;
    uint32_t addr;
    AccRow words;
  };
  std::unique_ptr<VerilatedContext> ctx_;
  std::unique_ptr<Vtpu_datapath_n4> m_;
  std::deque<Req> wr_, rd_;
  std::deque<Instr> instr_;
  uint64_t now_ = 0;
};

// fp32 operands that exercise every rule: corners, bf16 values, moderate randoms.
uint32_t rnd_f32(std::mt19937& rng) {
  static constexpr std::array<uint32_t, 20> kCorners = {
      0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x00800000u, 0x80800000u, 0x7F7FFFFFu,
      0xFF7FFFFFu, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00001u, 0x7F800001u, 0x3F800000u,
      0xBF800000u, 0x3F808000u, 0x3F818000u, 0x207FFFFFu, 0x20000000u, 0x7F000000u};
  const uint32_t r = static_cast<uint32_t>(rng());
  switch (r % 4) {
    case 0: return kCorners[(r >> 8) % kCorners.size()];
    case 1: return static_cast<uint32_t>(rng()) & 0xFFFF0000u;
    case 2: return (static_cast<uint32_t>(rng()) & 0x807FFFFFu) | ((0x70u + (r >> 8) % 0x20u) << 23);
    default: return static_cast<uint32_t>(rng());
  }
}

void randomize(Model& md, std::mt19937& rng) {
  for (auto& r : md.ub)
    for (auto& v : r) v = static_cast<uint8_t>(rng());
  for (auto& r : md.wb)
    for (auto& v : r) v = static_cast<uint8_t>(rng());
  for (auto& r : md.acc)
    for (auto& v : r) v = rnd_f32(rng);
}

void run_and_compare(DpTb& tb, Model& md, const std::vector<Instr>& prog, const char* what) {
  for (const auto& in : prog) {
    tb.submit(in);
    md.exec(in);
  }
  tb.run_to_idle();
  tb.expect_memories(md, what);
}

TEST(AuxUnits, TransposeInt8EveryRowCount) {
  std::mt19937 rng(11);
  for (uint32_t rows = 1; rows <= kN; ++rows) {
    for (uint32_t dst : {uint32_t{20}, uint32_t{3}, uint32_t{0}}) {  // disjoint, overlapping, same start
      DpTb tb;
      Model md;
      randomize(md, rng);
      tb.load(md);
      run_and_compare(tb, md, {transpose(3, dst, rows, false)}, "transpose int8");
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(AuxUnits, TransposeBf16EveryRowCount) {
  std::mt19937 rng(12);
  for (uint32_t rows = 1; rows <= kN; ++rows) {
    for (uint32_t dst : {uint32_t{30}, uint32_t{6}, uint32_t{4}}) {
      DpTb tb;
      Model md;
      randomize(md, rng);
      tb.load(md);
      run_and_compare(tb, md, {transpose(4, dst, rows, true)}, "transpose bf16");
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(AuxUnits, TransposeTwiceIsIdentityAndCost) {
  std::mt19937 rng(13);
  DpTb tb;
  Model md;
  randomize(md, rng);
  tb.load(md);
  const auto before = md.ub;
  tb.done_cycles.clear();
  tb.accept_cycles.clear();
  tb.act_busy = 0;
  run_and_compare(tb, md, {transpose(0, 8, kN, false), transpose(8, 0, kN, false)}, "transpose twice");
  for (uint32_t r = 0; r < kN; ++r) EXPECT_EQ(md.ub[r], before[r]);
  // int8: rows reads, one gap, N writes: the unit's done rows + N + 1 cycles after its go, which
  // is the cycle after acceptance; cmp_done_o one cycle after the unit's. The second goes the
  // cycle after the first's unit done.
  ASSERT_GE(tb.done_cycles.size(), 2u);
  EXPECT_EQ(tb.done_cycles[0] - tb.accept_cycles[0], uint64_t{1 + (kN + kN + 1) + 1});
  EXPECT_EQ(tb.done_cycles[1] - tb.done_cycles[0], uint64_t{1 + (kN + kN + 1)});
  EXPECT_EQ(tb.act_busy, uint64_t{2 * (kN + kN + 1)});  // PERF_ACT_BUSY: the unit's busy cycles
}

TEST(AuxUnits, EveryVectorOpOnSpecialOperands) {
  std::mt19937 rng(21);
  for (uint32_t opv = 0; opv <= static_cast<uint32_t>(sp::VecOp::kImax); ++opv) {
    for (int rep = 0; rep < 4; ++rep) {
      DpTb tb;
      Model md;
      randomize(md, rng);
      tb.load(md);
      const auto vop = static_cast<sp::VecOp>(opv);
      const uint32_t rows = 1 + static_cast<uint32_t>(rng() % 12), s = rnd_f32(rng);
      // rep 0: disjoint; 1: dst = a; 2: dst = b; 3: a = b (same rows)
      const uint32_t a = 2, b = rep == 3 ? 2 : 20, dst = rep == 1 ? a : rep == 2 ? b : 40;
      run_and_compare(tb, md, {vector(vop, dst, a, b, rows, s)}, "vector op");
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(AuxUnits, VectorCostColsumAndSgd) {
  std::mt19937 rng(22);
  DpTb tb;
  Model md;
  randomize(md, rng);
  tb.load(md);
  tb.done_cycles.clear();
  tb.accept_cycles.clear();
  tb.act_busy = 0;
  const uint32_t rows = 10;
  // SGD with momentum on w (rows 0..9), g (10..19), v (20..29): d = AXPY(w, wd, g) into g,
  // v = AXPY(v, momentum, g), w = AXPY(v, -lr, w); then a COLSUM of the new w.
  const uint32_t wd = num::to_bits(1e-4f), mom = num::to_bits(0.9f), nlr = num::to_bits(-0.05f);
  run_and_compare(tb, md,
                  {vector(sp::VecOp::kAxpy, 10, 0, 10, rows, wd), vector(sp::VecOp::kAxpy, 20, 20, 10, rows, mom),
                   vector(sp::VecOp::kAxpy, 0, 20, 0, rows, nlr), vector(sp::VecOp::kColsum, 63, 0, 0, rows, 0)},
                  "sgd");
  ASSERT_EQ(tb.done_cycles.size(), 4u);
  // rows reads; each row written three cycles after its read; the unit's done rows + 3 after its
  // go (the cycle after acceptance), cmp_done_o one later; the next goes after the unit's done.
  EXPECT_EQ(tb.done_cycles[0] - tb.accept_cycles[0], uint64_t{1 + (rows + 3) + 1});
  for (int i = 1; i < 4; ++i) EXPECT_EQ(tb.done_cycles[i] - tb.done_cycles[i - 1], uint64_t{1 + (rows + 3)});
  EXPECT_EQ(tb.act_busy, uint64_t{4 * (rows + 3)});
}

TEST(AuxUnits, AccDmaReadsBesideAVector) {
  std::mt19937 rng(23);
  DpTb tb;
  Model md;
  randomize(md, rng);
  tb.load(md);
  tb.rd_rsp.clear();
  md.exec(vector(sp::VecOp::kAdd, 40, 0, 20, 16, 0));
  tb.submit(vector(sp::VecOp::kAdd, 40, 0, 20, 16, 0));
  for (uint32_t r = 0; r < 16; ++r) tb.dma_read_req(sp::Mem::kAcc, 20 + r);  // b rows, unchanged
  tb.run_to_idle();
  EXPECT_GT(tb.rd_stalls, 0u) << "the DMA waits while operand b uses the port";
  ASSERT_EQ(tb.rd_rsp.size(), 16u);
  for (uint32_t r = 0; r < 16; ++r) EXPECT_EQ(tb.rd_rsp[r], md.acc[20 + r]) << "row " << r;
  tb.expect_memories(md, "vector beside dma");
}

// Random compute programs: MATMUL / ACTIVATE / LOADW (int8) feed and consume TRANSPOSE and
// VECTOR results through the UB and the ACC (the ordering hazards of tpu_compute).
TEST(AuxUnits, RandomProgramsWithMatmulAndActivate) {
  std::mt19937 rng(31);
  for (int prog = 0; prog < 40; ++prog) {
    DpTb tb;
    Model md;
    randomize(md, rng);
    // qparams at ACC rows 62, 63 keep ACTIVATE meaningful
    for (int n = 0; n < kN; ++n) {
      md.acc[62][n] = static_cast<uint32_t>(std::uniform_int_distribution<int>(-40000, 40000)(rng));
      md.acc[63][n] = static_cast<uint32_t>(std::uniform_int_distribution<int>(8, 24)(rng));
    }
    tb.load(md);
    std::vector<Instr> p;
    auto rnd = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
    p.push_back(loadw(0));
    bool swapped = false;
    for (int i = 0; i < 25; ++i) {
      switch (rnd(0, 5)) {
        case 0: p.push_back(loadw(rnd(0, 7) * 4)); break;
        case 1: {
          const uint32_t rows = rnd(1, 8);
          p.push_back(matmul(rnd(0, kUb - rows), rnd(0, 60 - rows), rows, !swapped || rnd(0, 3) == 0, rnd(0, 1)));
          swapped = true;
          break;
        }
        case 2: {
          const uint32_t rows = rnd(1, 8);
          p.push_back(activate(rnd(0, 60 - rows), rnd(0, kUb - rows), rows, 62, rnd(0, 1)));
          break;
        }
        case 3: {
          const bool bf16 = rnd(0, 1);
          const uint32_t rows = rnd(1, kN), span = bf16 ? 2 * kN : kN;
          p.push_back(transpose(rnd(0, (kUb - span) / 2) * 2, rnd(0, (kUb - span) / 2) * 2, rows, bf16));
          break;
        }
        default: {
          const auto vop = static_cast<sp::VecOp>(rnd(0, 9));
          const uint32_t rows = rnd(1, 8), a = rnd(0, 60 - rows);
          const uint32_t b = rnd(0, 1) ? a : rnd(0, 60 - rows);
          uint32_t dst = rnd(0, 2) == 0 ? a : rnd(0, 60 - rows);
          const bool reads_b = num::vecop_reads_b(vop);
          const auto bad = [&](uint32_t s) { return dst != s && dst < s + rows && s < dst + rows; };
          if (vop != sp::VecOp::kColsum && (bad(a) || (reads_b && bad(b)))) dst = a;
          if (vop != sp::VecOp::kColsum && reads_b && bad(b)) break;  // a and b overlap unequally
          p.push_back(vector(vop, dst, a, b, rows, rnd_f32(rng)));
          break;
        }
      }
    }
    run_and_compare(tb, md, p, "random program");
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace
