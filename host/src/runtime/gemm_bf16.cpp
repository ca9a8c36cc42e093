// bf16 GEMM tiling, program generation, host contract model and runner (tpuw/runtime/gemm_bf16.h).
#include "tpuw/runtime/gemm_bf16.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <limits>

#include "step_builder.h"
#include "tpuw/checked.h"
#include "tpuw/error.h"
#include "tpuw/numerics.h"

namespace tpuw::runtime {

// ---------------------------------------------------------------------------------------------
// The numeric contract (docs/numerics.md), scalar by scalar.
// ---------------------------------------------------------------------------------------------
namespace bf16 {
// Thin float-typed wrappers over tpuw/numerics.h (the one implementation of the contract).
uint16_t from_float(float x) { return num::bf16_from_float(x); }
float to_float(uint16_t b) { return num::bf16_to_float(b); }
float round(float x) { return num::to_float(num::round_bf16(num::to_bits(x))); }
float add(float a, float b) { return num::to_float(num::add(num::to_bits(a), num::to_bits(b))); }
float mul_exact(float a, float b) {
  return num::to_float(num::mul(num::round_bf16(num::to_bits(a)), num::round_bf16(num::to_bits(b))));
}
}  // namespace bf16

namespace {

using detail::Builder;
using detail::dma_instr;
using detail::kC;
using detail::kL;
using detail::kS;
using detail::round_down;
using detail::round_up;
using detail::Transfer;

constexpr uint32_t kMaxWSlots = 64;
constexpr uint64_t kLookahead = 8;
// ACC strip buffers of a GEMM with the SGD epilogue (see plan_gemm_bf16).
constexpr uint64_t kSgdAccSets = 8;
// Folds per strip from which the first two strips of an M tile run side by side (emit_gemm_bf16):
// with fewer, the A LOADs they overlap are too short to pay for the later epilogues.
constexpr uint64_t kPairMinFolds = 8;

std::string spec_name(const Bf16GemmSpec& s) {
  return fmt::format("bf16 GEMM M={} K={} N={}{}{}", s.shape.m, s.shape.k, s.shape.n, s.trans_a ? " A^T" : "",
                     s.trans_b ? " B^T" : "");
}

void check_spec(const Bf16GemmSpec& s) {
  if (s.shape.m == 0 || s.shape.k == 0 || s.shape.n == 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: every dimension must be >= 1", spec_name(s)));
  }
  if (!s.bf16_out && (s.relu || s.z_out)) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: relu and z_out need the bf16 epilogue", spec_name(s)));
  }
  if (s.sgd && (s.bf16_out || s.accumulate || s.bias)) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: the SGD epilogue takes a plain fp32 product", spec_name(s)));
  }
  if (s.sgd && (!std::isfinite(s.lr) || !std::isfinite(s.momentum) || !std::isfinite(s.weight_decay))) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: non-finite SGD hyper-parameter", spec_name(s)));
  }
  if (s.accumulate && (s.bf16_out || s.bias)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: accumulate reads an fp32 C; it combines with neither bf16 output nor a bias",
                            spec_name(s)));
  }
  constexpr uint64_t kMax = uint64_t{1} << 24;  // keeps every padded size and byte count far inside 64 bits
  if (s.shape.m > kMax || s.shape.k > kMax || s.shape.n > kMax) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: a dimension exceeds {}", spec_name(s), kMax));
  }
}

}  // namespace

Bf16GemmPlan plan_gemm_bf16(const DeviceParams& params, const Bf16GemmSpec& spec) {
  check_spec(spec);
  Bf16GemmPlan p;
  p.spec = spec;
  const uint64_t an = params.array_n;
  p.array_n = params.array_n;
  p.beat = params.dma_data_w / 8;
  if (an == 0 || p.beat == 0) throw Error(ErrorKind::kInvalidArgument, "plan_gemm_bf16: bad device parameters");
  if ((2 * an) % p.beat != 0) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("array size {} with a {}-byte DMA beat: a bf16 row is not a whole number of beats", an,
                            p.beat));
  }
  p.mp = round_up(spec.shape.m, an);
  p.kp = round_up(spec.shape.k, an);
  p.np = round_up(spec.shape.n, an);
  p.k_blocks = p.kp / an;
  p.n_blocks = p.np / an;
  if (2 * p.mp * p.kp + 2 * p.kp * p.np + 4 * p.mp * p.np >= (uint64_t{1} << 32)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: the operands exceed the 4 GiB device address space", spec_name(spec)));
  }

  // ACC: two strip buffers of m_tile rows (eight with the SGD epilogue: two gradient buffers and
  // three master and three momentum buffers, so the next strip's master and momentum are loaded
  // while the current strip computes, into a set whose previous STOREs finished a strip ago).
  const uint64_t acc_sets = spec.sgd ? kSgdAccSets : 2;
  const uint64_t acc_cap = round_down(std::min<uint64_t>(params.acc_depth / acc_sets, detail::kMaxRowsField / 2), an);
  if (acc_cap == 0) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("ACC depth {} cannot hold two output strips of {} rows", params.acc_depth, an));
  }
  // UB: A slots of 2*m_tile rows, the transpose scratch pair (2 x 2an rows) and the epilogue's two
  // output buffers (2 x 2*m_tile rows).
  const uint64_t scratch = spec.trans_a ? 4 * an : 0;
  const uint64_t out_per_row = (spec.bf16_out || spec.sgd) ? 4 : 0;
  if (params.ub_depth <= scratch) throw Error(ErrorKind::kUnsupported, "UB too small for the transpose scratch");
  const uint64_t ub_free = params.ub_depth - scratch;
  const uint64_t res_cap = round_down(ub_free / (2 * p.k_blocks + out_per_row), an);
  uint64_t mt = 0;
  if (res_cap >= an) {
    p.a_resident = true;
    mt = std::min({p.mp, acc_cap, res_cap});
  } else {
    p.a_resident = false;
    mt = std::min({p.mp, acc_cap, round_down(ub_free / (2 * 4 + out_per_row), an)});
    if (mt == 0) {
      throw Error(ErrorKind::kUnsupported,
                  fmt::format("UB depth {} is too small for bf16 GEMM tiles of {} rows", params.ub_depth, an));
    }
  }
  p.m_tiles = (p.mp + mt - 1) / mt;
  p.m_tile = round_up((p.mp + p.m_tiles - 1) / p.m_tiles, an);
  p.a_slots = static_cast<uint32_t>(p.a_resident ? p.k_blocks
                                                 : std::min<uint64_t>((ub_free - out_per_row * p.m_tile) /
                                                                          (2 * p.m_tile),
                                                                      64));
  p.w_slots = std::min<uint32_t>(params.wb_depth / (2 * params.array_n), kMaxWSlots);
  if (p.w_slots == 0) {
    throw Error(ErrorKind::kUnsupported, fmt::format("WB depth {} holds no bf16 weight tile", params.wb_depth));
  }
  p.folds = p.m_tiles * p.n_blocks * p.k_blocks;
  return p;
}

namespace detail {

StepBuilder::StepBuilder(const DeviceParams& params, size_t host_buffers)
    : params_(params),
      an_(params.array_n),
      beat_(params.dma_data_w / 8),
      ub_chunk_(2 * uint64_t{params.array_n}),
      wb_chunk_(2 * uint64_t{params.array_n}),
      acc_chunk_(params.array_n),
      ub0_(0),
      wb0_(ub0_ + (params.ub_depth + ub_chunk_ - 1) / ub_chunk_),
      acc0_(wb0_ + (params.wb_depth + wb_chunk_ - 1) / wb_chunk_),
      host0_(acc0_ + (params.acc_depth + acc_chunk_ - 1) / acc_chunk_),
      host_state_(host_buffers, HostState::kNone),
      b_(host0_ + host_buffers) {}

std::vector<size_t> StepBuilder::range(size_t base, uint64_t chunk, uint64_t row, uint64_t rows) const {
  std::vector<size_t> out;
  if (rows == 0) return out;
  for (uint64_t c = row / chunk; c <= (row + rows - 1) / chunk; ++c) out.push_back(base + c);
  return out;
}

std::vector<size_t> StepBuilder::ub(uint64_t row, uint64_t rows) const { return range(ub0_, ub_chunk_, row, rows); }
std::vector<size_t> StepBuilder::wb(uint64_t row, uint64_t rows) const { return range(wb0_, wb_chunk_, row, rows); }
std::vector<size_t> StepBuilder::acc(uint64_t row, uint64_t rows) const {
  return range(acc0_, acc_chunk_, row, rows);
}

uint64_t StepBuilder::local_rows(spec::Mem mem, const Transfer& t) const {
  const uint64_t row_bytes = mem == spec::Mem::kAcc ? 4 * uint64_t{an_} : an_;
  return t.rows * t.row_bytes / row_bytes;
}

std::vector<size_t> local_of(const StepBuilder& sb, spec::Mem mem, uint64_t row, uint64_t rows) {
  switch (mem) {
    case spec::Mem::kUb: return sb.ub(row, rows);
    case spec::Mem::kWb: return sb.wb(row, rows);
    default: return sb.acc(row, rows);
  }
}

void StepBuilder::load(spec::Mem mem, const Transfer& t, std::optional<size_t> host_buf) {
  std::vector<size_t> reads;
  if (host_buf) {
    HostState& st = host_state_.at(*host_buf);
    if (st == HostState::kStored) b_.emit(kC, isa::make_instr(spec::Opcode::kNop), {}, {host(*host_buf)});
    st = HostState::kLoaded;
    reads.push_back(host(*host_buf));
  }
  // Rows a STORE still reads (or wrote, never here): the LOAD orders behind it through a NOP.
  const std::vector<size_t> writes = local_of(*this, mem, t.local_row, local_rows(mem, t));
  b_.bridge(writes);
  b_.emit(kL, dma_instr(spec::Opcode::kLoad, mem, t), reads, writes);
}

void StepBuilder::store(spec::Mem mem, const Transfer& t, std::optional<size_t> host_buf) {
  std::vector<size_t> writes;
  if (host_buf) {
    HostState& st = host_state_.at(*host_buf);
    if (st == HostState::kLoaded) b_.emit(kC, isa::make_instr(spec::Opcode::kNop), {}, {host(*host_buf)});
    st = HostState::kStored;
    writes.push_back(host(*host_buf));
  }
  b_.emit(kS, dma_instr(spec::Opcode::kStore, mem, t), local_of(*this, mem, t.local_row, local_rows(mem, t)), writes);
}

void StepBuilder::compute(isa::Instr in, const std::vector<size_t>& reads, const std::vector<size_t>& writes,
                          bool is_matmul) {
  b_.emit(kC, std::move(in), reads, writes, is_matmul);
}

MergedProgram StepBuilder::finish() {
  return merge_program(b_, kLookahead, static_cast<int64_t>(2 * kLookahead + 24));
}

namespace {

// The SGD epilogue's ACC rows: gradient buffers 0 and 1 (the GEMM's strip buffers), then master
// and momentum buffers in three sets each (strip % 3).
uint64_t sgd_master_row(const Bf16GemmPlan& plan, uint64_t strip) { return (2 + strip % 3) * plan.m_tile; }
uint64_t sgd_momentum_row(const Bf16GemmPlan& plan, uint64_t strip) { return (5 + strip % 3) * plan.m_tile; }

// Where strip `strip` starts: M tile and column block.
struct StripPos {
  uint64_t m0, nb, rows;
};
StripPos strip_pos(const Bf16GemmPlan& plan, uint64_t strip) {
  const uint64_t mt = strip / plan.n_blocks;
  return {mt * plan.m_tile, strip % plan.n_blocks, plan.rows_of_tile(mt)};
}

// The SGD epilogue's loads of strip `strip` (its master and momentum rows into the strip's own ACC
// set), cut into `pieces` pieces of whole ACC rows; emits pieces [from, to). Emitted one or two
// per fold while the previous strip computes, they share the read channel with the weight tiles
// instead of stalling the epilogue. The first piece first takes the whole set over from the STOREs
// of three strips ago (one COMPUTE NOP, long satisfied).
void emit_sgd_loads(StepBuilder& sb, const Bf16GemmPlan& plan, const Bf16GemmAddrs& addrs, uint64_t strip,
                    uint64_t pieces, uint64_t from, uint64_t to) {
  const Bf16GemmSpec& s = plan.spec;
  const uint64_t an = plan.array_n;
  const StripPos sp = strip_pos(plan, strip);
  const bool mom = s.momentum != 0.0f;
  const uint64_t m_row = sgd_master_row(plan, strip), v_row = sgd_momentum_row(plan, strip);
  const uint64_t off4 = 4 * (sp.m0 * plan.np + sp.nb * an);
  const uint64_t per = mom ? pieces / 2 : pieces;  // pieces per buffer (pieces is even with momentum)
  const uint64_t piece_rows = (sp.rows + per - 1) / per;
  if (from == 0) {
    std::vector<size_t> set = sb.acc(m_row, sp.rows);
    if (mom) {
      for (size_t r : sb.acc(v_row, sp.rows)) set.push_back(r);
    }
    sb.builder().bridge(set);
  }
  for (uint64_t i = from; i < to; ++i) {
    const bool is_v = i >= per;
    const uint64_t r0 = (is_v ? i - per : i) * piece_rows;
    if (r0 >= sp.rows) continue;
    const uint64_t rows = std::min(piece_rows, sp.rows - r0);
    const uint64_t base = is_v ? addrs.momentum : addrs.master;
    sb.load(spec::Mem::kAcc,
            Transfer{(is_v ? v_row : m_row) + r0, base + off4 + 4 * r0 * plan.np, rows, 4 * an, 4 * plan.np});
  }
}

// The SGD epilogue on one finished gradient strip (ACC rows g_row.., `rows` rows of ArrayN
// columns), its master and momentum already loaded (emit_sgd_loads): the AXPY passes of
// docs/numerics.md, STORE them back, ACTIVATE bf16 into the UB and STORE the working copy.
void emit_sgd_strip(StepBuilder& sb, const Bf16GemmPlan& plan, const Bf16GemmAddrs& addrs, uint64_t g_row,
                    uint64_t strip, uint64_t out_row0) {
  const Bf16GemmSpec& s = plan.spec;
  const uint64_t an = plan.array_n;
  const StripPos sp = strip_pos(plan, strip);
  const uint64_t rows = sp.rows, buf = strip % 2;
  const uint64_t m_row = sgd_master_row(plan, strip), v_row = sgd_momentum_row(plan, strip);
  const uint64_t off4 = 4 * (sp.m0 * plan.np + sp.nb * an), off2 = 2 * (sp.m0 * plan.np + sp.nb * an);
  const bool wd = s.weight_decay != 0.0f, mom = s.momentum != 0.0f;
  const auto axpy = [&](uint64_t dst, uint64_t a, uint64_t b, float scalar) {
    isa::Instr v = isa::make_instr(spec::Opcode::kVector);
    v.set("op", static_cast<uint64_t>(spec::VecOp::kAxpy));
    v.set("dst_addr", dst);
    v.set("a_addr", a);
    v.set("b_addr", b);
    v.set("rows", rows);
    v.set("scalar", num::to_bits(scalar));
    std::vector<size_t> reads = sb.acc(a, rows);
    for (size_t r : sb.acc(b, rows)) reads.push_back(r);
    sb.compute(std::move(v), reads, sb.acc(dst, rows));
  };
  if (wd) axpy(g_row, m_row, g_row, s.weight_decay);  // d = w*wd + g
  if (mom) {
    axpy(v_row, v_row, g_row, s.momentum);  // v = v*momentum + d
    axpy(m_row, v_row, m_row, -s.lr);       // w = v*(-lr) + w
    sb.store(spec::Mem::kAcc, Transfer{v_row, addrs.momentum + off4, rows, 4 * an, 4 * plan.np});
  } else {
    axpy(m_row, g_row, m_row, -s.lr);  // w = d*(-lr) + w
  }
  sb.store(spec::Mem::kAcc, Transfer{m_row, addrs.master + off4, rows, 4 * an, 4 * plan.np});
  const uint64_t out_row = out_row0 + buf * 2 * plan.m_tile;
  isa::Instr act = isa::make_instr(spec::Opcode::kActivate);
  act.set("bf16", 1);
  act.set("acc_addr", m_row);
  act.set("ub_addr", out_row);
  act.set("rows", rows);
  sb.compute(std::move(act), sb.acc(m_row, rows), sb.ub(out_row, 2 * rows));
  sb.store(spec::Mem::kUb, Transfer{out_row, addrs.copy + off2, rows, 2 * an, 2 * plan.np});
}

}  // namespace

uint64_t gemm_ub_rows(const Bf16GemmPlan& plan) {
  const Bf16GemmSpec& s = plan.spec;
  return uint64_t{plan.a_slots} * 2 * plan.m_tile + (s.trans_a ? 4 * uint64_t{plan.array_n} : 0) +
         ((s.bf16_out || s.sgd) ? 4 * plan.m_tile : 0);
}

uint64_t gemm_acc_rows(const Bf16GemmPlan& plan) { return (plan.spec.sgd ? kSgdAccSets : 2) * plan.m_tile; }

void emit_gemm_bf16(StepBuilder& sb, const Bf16GemmPlan& plan, const Bf16GemmAddrs& addrs,
                    const Bf16GemmHostBufs& bufs, const Bf16GemmEpilogue& epilogue) {
  const Bf16GemmSpec& s = plan.spec;
  if (epilogue.finish && (s.sgd || s.accumulate || s.relu || s.z_out)) {
    throw Error(ErrorKind::kInternal, "emit_gemm_bf16: a caller's epilogue takes a plain fp32 product (+ bias)");
  }
  const uint64_t an = plan.array_n;
  const uint64_t beat = plan.beat;
  const auto check_addr = [&](uint64_t addr, uint64_t bytes, const char* what) {
    if (addr % beat != 0 || addr >= (uint64_t{1} << 32) || addr + bytes > (uint64_t{1} << 32)) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("compile_gemm_bf16: {} at 0x{:x} is not {}-byte aligned or reaches past 4 GiB", what,
                              addr, beat));
    }
  };
  check_addr(addrs.a, plan.a_bytes(), "A");
  check_addr(addrs.b, plan.b_bytes(), "B");
  if (s.sgd) {
    check_addr(addrs.master, plan.z_bytes(), "master");
    check_addr(addrs.momentum, plan.z_bytes(), "momentum");
    check_addr(addrs.copy, plan.z_bytes() / 2, "bf16 copy");
  } else {
    check_addr(addrs.c, plan.c_bytes(), "C");
  }
  if (s.bias) check_addr(addrs.bias, plan.bias_bytes(), "bias");
  if (s.z_out) check_addr(addrs.z, plan.z_bytes(), "Z");

  // Local memory layout.
  const uint64_t a_row0 = 0;
  const uint64_t scr_row0 = a_row0 + uint64_t{plan.a_slots} * 2 * plan.m_tile;
  const uint64_t out_row0 = scr_row0 + (s.trans_a ? 4 * an : 0);

  // The ACC preset of a strip (C when accumulating, the bias strip in every row with a bias), rows
  // [from, to) of it. After the first strip's, each is LOADed in pieces over the second half of
  // the previous strip's folds (from its middle on, the buffer's previous STOREs are done, so the
  // NOP that orders the LOADs behind them does not stall the array), so that the weight tiles
  // queued behind a piece do not wait long.
  const uint64_t total_strips = plan.m_tiles * plan.n_blocks;
  const bool has_preset = s.accumulate || s.bias;
  const auto preload = [&](uint64_t st, uint64_t from, uint64_t to) {
    const uint64_t pm = st / plan.n_blocks, pn = st % plan.n_blocks;
    const uint64_t prow = (st % 2) * plan.m_tile, prows = plan.rows_of_tile(pm), pm0 = pm * plan.m_tile;
    to = std::min(to, prows);
    if (!has_preset || from >= to) return;
    if (from == 0) sb.builder().bridge(sb.acc(prow, prows));
    if (s.accumulate) {
      sb.load(spec::Mem::kAcc,
              Transfer{prow + from, addrs.c + 4 * ((pm0 + from) * plan.np + pn * an), to - from, 4 * an, 4 * plan.np},
              bufs.c);
    } else {
      // The bias strip in every row of the ACC strip: one host row read `rows` times.
      sb.load(spec::Mem::kAcc, Transfer{prow + from, addrs.bias + 4 * pn * an, to - from, 4 * an, 0}, bufs.bias);
    }
  };
  // Taking a buffer over from its STOREs is a COMPUTE NOP, done (in order) only when the MATMUL
  // before it is: it goes one fold before the LOADs it orders, so that they do not hold up the
  // weight tiles queued behind them (but not at the strip's first fold, where it would wait for
  // the STOREs of the strip before). Preset: NOP one fold before the middle, pieces from the
  // middle fold on; with fewer than 4 folds, NOP and the whole preset at the middle fold.
  const uint64_t preset_first = plan.k_blocks / 2;
  const uint64_t preset_bridge = plan.k_blocks >= 4 ? preset_first - 1 : preset_first;
  const uint64_t preset_folds = plan.k_blocks >= 4 ? plan.k_blocks - preset_first : 1;
  // Pieces of the SGD loads per strip: about one ACC row block of the master (and one of the
  // momentum) per fold, at least one per buffer.
  const bool sgd_mom = s.momentum != 0.0f;
  const uint64_t sgd_pieces = (sgd_mom ? 2 : 1) * std::max<uint64_t>(1, plan.k_blocks / (sgd_mom ? 2 : 1));
  std::vector<int64_t> a_content(plan.a_slots, -1);
  uint64_t tile_counter = 0, a_ring = 0, scr_counter = 0;
  // One fold (K block kb) of strip st. `next` emits the next strip's preset, bridge and prefetch
  // hooks; the SGD loads of the next strip start at fold `sgd_from` (their NOP there).
  const auto fold = [&](uint64_t st, uint64_t kb, bool next, uint64_t sgd_from) {
    const uint64_t mt = st / plan.n_blocks, nb = st % plan.n_blocks;
    const uint64_t rows = plan.rows_of_tile(mt), m0 = mt * plan.m_tile;
    const uint64_t acc_row = (st % 2) * plan.m_tile;
    // Weight tile -> WB slot: op(B) rows kb*an.., columns nb*an.. .
    const uint64_t wslot = tile_counter++ % plan.w_slots;
    const uint64_t tile_addr = s.trans_b ? addrs.b + 2 * (nb * an * plan.kp + kb * an)
                                         : addrs.b + 2 * (kb * an * plan.np + nb * an);
    const uint64_t tile_stride = 2 * (s.trans_b ? plan.kp : plan.np);
    sb.load(spec::Mem::kWb, Transfer{wslot * 2 * an, tile_addr, an, 2 * an, tile_stride}, bufs.b);
    // A block -> UB slot, unless it is already there.
    const uint64_t aslot = plan.a_resident ? kb : (a_ring++ % plan.a_slots);
    const uint64_t slot_row = a_row0 + aslot * 2 * plan.m_tile;
    const auto a_id = static_cast<int64_t>(mt * plan.k_blocks + kb);
    if (a_content[aslot] != a_id) {
      if (!s.trans_a) {
        sb.load(spec::Mem::kUb, Transfer{slot_row, addrs.a + 2 * (m0 * plan.kp + kb * an), rows, 2 * an, 2 * plan.kp},
                bufs.a);
      } else {
        // A is stored [K, M]: its tile (kb, m chunk) is LOADed and TRANSPOSEd into the slot.
        for (uint64_t c = 0; c < rows / an; ++c, ++scr_counter) {
          const uint64_t sc_row = scr_row0 + (scr_counter % 2) * 2 * an;
          sb.load(spec::Mem::kUb,
                  Transfer{sc_row, addrs.a + 2 * (kb * an * plan.mp + m0 + c * an), an, 2 * an, 2 * plan.mp}, bufs.a);
          isa::Instr tr = isa::make_instr(spec::Opcode::kTranspose);
          tr.set("bf16", 1);
          tr.set("src_addr", sc_row);
          tr.set("dst_addr", slot_row + c * 2 * an);
          tr.set("rows", an);
          sb.compute(std::move(tr), sb.ub(sc_row, 2 * an), sb.ub(slot_row + c * 2 * an, 2 * an));
        }
      }
      a_content[aslot] = a_id;
    }
    isa::Instr lw = isa::make_instr(spec::Opcode::kLoadw);
    lw.set("wb_addr", wslot * 2 * an);
    lw.set("bf16", 1);
    lw.set("transpose", s.trans_b ? 1 : 0);
    sb.compute(std::move(lw), sb.wb(wslot * 2 * an, 2 * an), {});
    isa::Instr mm = isa::make_instr(spec::Opcode::kMatmul);
    mm.set("accumulate", (kb > 0 || s.accumulate || s.bias) ? 1 : 0);
    mm.set("swap", 1);
    mm.set("bf16", 1);
    mm.set("ub_addr", slot_row);
    mm.set("acc_addr", acc_row);
    mm.set("rows", rows);
    sb.compute(std::move(mm), sb.ub(slot_row, 2 * rows), sb.acc(acc_row, rows), /*is_matmul=*/true);
    // The next strip's preset, from half-way through this one: its buffer's previous STOREs are
    // long done by then, so the NOP that orders the LOADs behind them does not stall the array.
    if (next && st + 1 < total_strips) {
      const uint64_t next_rows = plan.rows_of_tile((st + 1) / plan.n_blocks);
      if (kb == preset_bridge) {
        if (has_preset) sb.builder().bridge(sb.acc(((st + 1) % 2) * plan.m_tile, next_rows));
        if (epilogue.bridge) epilogue.bridge(st + 1);
      }
      if (kb >= preset_first && kb < preset_first + preset_folds) {
        const uint64_t piece = (next_rows + preset_folds - 1) / preset_folds, i = kb - preset_first;
        preload(st + 1, i * piece, (i + 1) * piece);
      }
      if (kb == preset_first && epilogue.prefetch) epilogue.prefetch(st + 1);
    }
    // The SGD epilogue's master and momentum: the first strip's during its own folds, every next
    // strip's during the folds of the one before (NOP at fold sgd_from, pieces on the later ones).
    if (s.sgd) {
      const uint64_t k = plan.k_blocks;
      if (st == 0) emit_sgd_loads(sb, plan, addrs, 0, sgd_pieces, kb * sgd_pieces / k, (kb + 1) * sgd_pieces / k);
      if (st + 1 < total_strips && kb >= sgd_from) {
        const uint64_t first = k - sgd_from > 1 ? sgd_from + 1 : sgd_from;
        if (kb == sgd_from) emit_sgd_loads(sb, plan, addrs, st + 1, sgd_pieces, 0, 0);  // the NOP only
        if (kb >= first) {
          const uint64_t i = kb - first, n = k - first;
          emit_sgd_loads(sb, plan, addrs, st + 1, sgd_pieces, i * sgd_pieces / n, (i + 1) * sgd_pieces / n);
        }
      }
    }
  };
  // Strip st's product is in its ACC buffer: the epilogue.
  const auto finish = [&](uint64_t st) {
    const uint64_t mt = st / plan.n_blocks, nb = st % plan.n_blocks;
    const uint64_t rows = plan.rows_of_tile(mt), m0 = mt * plan.m_tile;
    const uint64_t buf = st % 2, acc_row = buf * plan.m_tile;
    if (s.sgd) {
      emit_sgd_strip(sb, plan, addrs, acc_row, st, out_row0);
      return;
    }
    if (epilogue.finish) {
      epilogue.finish(st, acc_row);
      return;
    }
    if (!s.bf16_out || s.z_out) {
      const uint64_t base = s.bf16_out ? addrs.z : addrs.c;
      sb.store(spec::Mem::kAcc, Transfer{acc_row, base + 4 * (m0 * plan.np + nb * an), rows, 4 * an, 4 * plan.np},
               s.bf16_out ? bufs.z : bufs.c);
    }
    if (s.bf16_out) {
      const uint64_t out_row = out_row0 + buf * 2 * plan.m_tile;
      isa::Instr act = isa::make_instr(spec::Opcode::kActivate);
      act.set("bf16", 1);
      act.set("relu", s.relu ? 1 : 0);
      act.set("acc_addr", acc_row);
      act.set("ub_addr", out_row);
      act.set("rows", rows);
      sb.compute(std::move(act), sb.acc(acc_row, rows), sb.ub(out_row, 2 * rows));
      sb.store(spec::Mem::kUb, Transfer{out_row, addrs.c + 2 * (m0 * plan.np + nb * an), rows, 2 * an, 2 * plan.np},
               bufs.c);
    }
  };
  // A strip whose preset and prefetch were not emitted during an earlier strip's folds.
  const auto start_fresh = [&](uint64_t st) {
    preload(st, 0, plan.rows_of_tile(st / plan.n_blocks));
    if (epilogue.prefetch) epilogue.prefetch(st);
  };
  // The first strip of an M tile LOADs the tile's resident A block by block, twice as many bytes
  // per fold as the array streams in bf16; so the first two strips of each M tile run fold by
  // fold side by side (each A block feeds two folds, in their two ACC buffers), then their
  // epilogues (with at least kPairMinFolds folds). Each output still sums its K blocks in
  // increasing order from its preset.
  const bool pair = plan.a_resident && plan.n_blocks >= 2 && plan.k_blocks >= kPairMinFolds;
  bool fresh = true;
  for (uint64_t st = 0; st < total_strips;) {
    if (pair && st % plan.n_blocks == 0) {
      const uint64_t s1 = st + 1;
      if (fresh) start_fresh(st);
      start_fresh(s1);
      for (uint64_t kb = 0; kb < plan.k_blocks; ++kb) {
        fold(st, kb, false, 0);
        fold(s1, kb, false, plan.k_blocks / 2);
      }
      finish(st);
      finish(s1);
      st += 2;
      fresh = true;
      continue;
    }
    if (fresh) start_fresh(st);
    for (uint64_t kb = 0; kb < plan.k_blocks; ++kb) fold(st, kb, true, 0);
    finish(st);
    ++st;
    fresh = false;
  }
}

}  // namespace detail

GemmProgram compile_gemm_bf16(const Bf16GemmPlan& plan, const Bf16GemmAddrs& addrs) {
  DeviceParams params{};
  // The plan's tiling already fits the device; the builder only needs the memory sizes to
  // cover every row the program touches.
  params.array_n = plan.array_n;
  params.dma_data_w = plan.beat * 8;
  params.ub_depth = static_cast<uint32_t>(std::min<uint64_t>(
      UINT32_MAX, uint64_t{plan.a_slots} * 2 * plan.m_tile + 4 * plan.array_n + 4 * plan.m_tile));
  params.wb_depth = plan.w_slots * 2 * plan.array_n;
  params.acc_depth = static_cast<uint32_t>(detail::gemm_acc_rows(plan));
  detail::StepBuilder sb(params, 0);
  detail::emit_gemm_bf16(sb, plan, addrs);
  detail::MergedProgram merged = sb.finish();
  GemmProgram prog;
  detail::take_merged(std::move(merged), prog);
  return prog;
}

// ---------------------------------------------------------------------------------------------
// Layouts
// ---------------------------------------------------------------------------------------------

namespace {
void check_size(std::span<const float> m, uint64_t rows, uint64_t cols, const char* what) {
  if (m.size() != rows * cols) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: {} elements, expected {} x {} = {}", what, m.size(), rows, cols, rows * cols));
  }
}
}  // namespace

std::vector<uint16_t> pad_bf16(std::span<const float> m, uint64_t rows, uint64_t cols, uint32_t array_n) {
  check_size(m, rows, cols, "pad_bf16");
  const uint64_t cp = round_up(cols, array_n);
  std::vector<uint16_t> out(round_up(rows, array_n) * cp, 0);
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t c = 0; c < cols; ++c) out[r * cp + c] = bf16::from_float(m[r * cols + c]);
  }
  return out;
}

std::vector<float> pad_f32(std::span<const float> m, uint64_t rows, uint64_t cols, uint32_t array_n) {
  check_size(m, rows, cols, "pad_f32");
  const uint64_t cp = round_up(cols, array_n);
  std::vector<float> out(round_up(rows, array_n) * cp, 0.0f);
  for (uint64_t r = 0; r < rows; ++r) std::copy_n(m.data() + r * cols, cols, out.data() + r * cp);
  return out;
}

std::vector<float> unpad_f32(std::span<const float> p, uint64_t rows, uint64_t cols, uint32_t array_n) {
  const uint64_t cp = round_up(cols, array_n);
  if (p.size() < rows * cp) throw Error(ErrorKind::kInvalidArgument, "unpad_f32: padded matrix too small");
  std::vector<float> out(rows * cols);
  for (uint64_t r = 0; r < rows; ++r) std::copy_n(p.data() + r * cp, cols, out.data() + r * cols);
  return out;
}

std::vector<float> unpad_bf16(std::span<const uint16_t> p, uint64_t rows, uint64_t cols, uint32_t array_n) {
  const uint64_t cp = round_up(cols, array_n);
  if (p.size() < rows * cp) throw Error(ErrorKind::kInvalidArgument, "unpad_bf16: padded matrix too small");
  std::vector<float> out(rows * cols);
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t c = 0; c < cols; ++c) out[r * cols + c] = bf16::to_float(p[r * cp + c]);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Host contract model
// ---------------------------------------------------------------------------------------------

std::vector<float> gemm_bf16_host(const Bf16GemmSpec& s, uint32_t array_n, std::span<const float> a,
                                  std::span<const float> b, std::span<const float> c_in, std::span<const float> bias,
                                  std::vector<float>* z) {
  check_spec(s);
  const uint64_t M = s.shape.m, K = s.shape.k, N = s.shape.n, an = array_n;
  check_size(a, s.trans_a ? K : M, s.trans_a ? M : K, "gemm_bf16_host: A");
  check_size(b, s.trans_b ? N : K, s.trans_b ? K : N, "gemm_bf16_host: B");
  if (s.accumulate) check_size(c_in, M, N, "gemm_bf16_host: C");
  if (s.bias) check_size(bias, 1, N, "gemm_bf16_host: bias");
  const uint64_t kp = round_up(K, an);
  // op(A) [M, kp] and op(B) [kp, N] as bf16 values, zero padded (+0) in k.
  std::vector<float> oa(M * kp, 0.0f), ob(kp * N, 0.0f);
  for (uint64_t i = 0; i < M; ++i) {
    for (uint64_t k = 0; k < K; ++k) oa[i * kp + k] = bf16::round(s.trans_a ? a[k * M + i] : a[i * K + k]);
  }
  for (uint64_t k = 0; k < K; ++k) {
    for (uint64_t j = 0; j < N; ++j) ob[k * N + j] = bf16::round(s.trans_b ? b[j * K + k] : b[k * N + j]);
  }
  std::vector<float> c(M * N);
  if (z != nullptr) z->assign(M * N, 0.0f);
  const bool preset = s.accumulate || s.bias;
  for (uint64_t i = 0; i < M; ++i) {
    for (uint64_t j = 0; j < N; ++j) {
      float acc = s.accumulate ? c_in[i * N + j] : s.bias ? bias[j] : 0.0f;
      for (uint64_t k0 = 0; k0 < kp; k0 += an) {
        float sum = 0.0f;
        for (uint64_t k = k0; k < k0 + an; ++k) sum = bf16::add(sum, bf16::mul_exact(oa[i * kp + k], ob[k * N + j]));
        acc = (k0 == 0 && !preset) ? sum : bf16::add(acc, sum);
      }
      if (z != nullptr) (*z)[i * N + j] = acc;
      if (s.bf16_out) acc = bf16::to_float(num::activate_bf16(num::to_bits(acc), 0u, false, s.relu));
      c[i * N + j] = acc;
    }
  }
  return c;
}

// ---------------------------------------------------------------------------------------------
// Runner
// ---------------------------------------------------------------------------------------------

Bf16GemmResult gemm_bf16(Device& device, const Bf16GemmSpec& s, std::span<const float> a, std::span<const float> b,
                         std::span<const float> c_in, std::span<const float> bias, const GemmOptions& options) {
  check_spec(s);
  const DeviceInfo& info = device.info();
  if ((info.features & spec::reg::kFeaturesBf16) == 0) {
    throw Error(ErrorKind::kUnsupported, "bf16 GEMM: the device has no bf16 mode (FEATURES.BF16 is 0)");
  }
  if (s.sgd) {
    throw Error(ErrorKind::kInvalidArgument, "bf16 GEMM: the SGD epilogue runs inside the device trainer only");
  }
  if (s.trans_a && (info.features & spec::reg::kFeaturesTranspose) == 0) {
    throw Error(ErrorKind::kUnsupported, "bf16 GEMM with a transposed A: the device has no TRANSPOSE (FEATURES.TRANSPOSE is 0)");
  }
  const uint64_t M = s.shape.m, K = s.shape.k, N = s.shape.n;
  check_size(a, s.trans_a ? K : M, s.trans_a ? M : K, "bf16 GEMM: A");
  check_size(b, s.trans_b ? N : K, s.trans_b ? K : N, "bf16 GEMM: B");
  if (s.accumulate) check_size(c_in, M, N, "bf16 GEMM: C");
  if (s.bias) check_size(bias, 1, N, "bf16 GEMM: bias");

  Bf16GemmResult r;
  r.plan = plan_gemm_bf16(info.params, s);
  const Bf16GemmPlan& p = r.plan;
  const uint32_t an = p.array_n;
  HostBuffer abuf = device.alloc(p.a_bytes(), 4096);
  HostBuffer bbuf = device.alloc(p.b_bytes(), 4096);
  HostBuffer cbuf = device.alloc(p.c_bytes(), 4096);
  HostBuffer biasbuf = device.alloc(std::max<uint64_t>(p.bias_bytes(), 64), 4096);
  HostBuffer zbuf = device.alloc(s.z_out ? p.z_bytes() : 64, 4096);
  {
    const auto ap = pad_bf16(a, s.trans_a ? K : M, s.trans_a ? M : K, an);
    const auto bp = pad_bf16(b, s.trans_b ? N : K, s.trans_b ? K : N, an);
    device.write(abuf, 0, ap.data(), ap.size() * 2);
    device.write(bbuf, 0, bp.data(), bp.size() * 2);
    if (s.accumulate) {
      const auto cp = pad_f32(c_in, M, N, an);
      device.write(cbuf, 0, cp.data(), cp.size() * 4);
    }
    if (s.bias) {
      const auto bp2 = pad_f32(bias, 1, N, an);
      device.write(biasbuf, 0, bp2.data(), p.bias_bytes());
    }
  }
  const GemmProgram prog = compile_gemm_bf16(p, {abuf.addr(), bbuf.addr(), cbuf.addr(), biasbuf.addr(), zbuf.addr()});
  r.instructions = prog.code.size() + 1;

  device.clear_perf();
  const ProgressFn progress = detail::fold_progress(device, prog.fold_index, options.progress);
  const auto t0 = std::chrono::steady_clock::now();
  const uint32_t fence = device.submit(prog.code, progress);
  device.wait(fence, progress);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (options.progress) options.progress(1.0);

  if (s.bf16_out) {
    std::vector<uint16_t> cp(p.c_bytes() / 2);
    device.read(cbuf, 0, cp.data(), p.c_bytes());
    r.c = unpad_bf16(cp, M, N, an);
    if (s.z_out) {
      std::vector<float> zp(p.z_bytes() / 4);
      device.read(zbuf, 0, zp.data(), p.z_bytes());
      r.z = unpad_f32(zp, M, N, an);
    }
  } else {
    std::vector<float> cp(p.c_bytes() / 4);
    device.read(cbuf, 0, cp.data(), p.c_bytes());
    r.c = unpad_f32(cp, M, N, an);
  }
  r.perf = device.perf();
  r.cycles = r.perf.cycles;
  const double peak = static_cast<double>(an) * static_cast<double>(an);
  r.utilization = r.cycles > 0 ? static_cast<double>(p.macs()) / (peak * static_cast<double>(r.cycles)) : 0.0;
  return r;
}

}  // namespace tpuw::runtime
