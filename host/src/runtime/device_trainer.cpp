// The device trainer (tpuw/runtime/device_trainer.h; docs/training.md "Device side").
#include "tpuw/runtime/device_trainer.h"

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>

#include "step_builder.h"
#include "tpuw/error.h"
#include "tpuw/numerics.h"
#include "tpuw/runtime/gemm_bf16.h"

namespace tpuw::runtime {
namespace {

using detail::round_down;
using detail::round_up;
using detail::StepBuilder;
using detail::Transfer;

constexpr size_t kNone = SIZE_MAX;

/// Device-memory buffers of one layer (indices into Layout::sizes).
struct LayerBufs {
  uint64_t wr = 0, wc = 0;  // stored weight dims (padded in memory)
  size_t wm = kNone, wb = kNone, v = kNone, g = kNone;  // fp32 master, bf16 copy, momentum, gradient
  size_t bm = kNone, bv = kNone, bg = kNone;            // bias master, momentum, gradient (fp32)
  size_t h = kNone;    // bf16 output [Bp, outp] (the next layer's input), all but the last layer
  size_t z = kNone;    // fp32 pre-activation [Bp, outp], layers with ReLU
  size_t dzb = kNone;  // bf16 dZ [Bp, outp]
  size_t dx = kNone;   // fp32 dX [Bp, inp], all but the first layer
};

struct Layout {
  std::vector<uint64_t> sizes;
  size_t x0 = kNone, logits = kNone, dz = kNone;
  std::vector<LayerBufs> layers;
};

Layout make_layout(const compiler::TrainModel& m, uint64_t bp, uint64_t an) {
  Layout lay;
  const auto add = [&](uint64_t bytes) {
    lay.sizes.push_back(bytes);
    return lay.sizes.size() - 1;
  };
  const uint64_t in0p = round_up(static_cast<uint64_t>(m.input_features), an);
  const uint64_t cp = round_up(static_cast<uint64_t>(m.classes()), an);
  lay.x0 = add(2 * bp * in0p);
  lay.logits = add(4 * bp * cp);
  lay.dz = add(4 * bp * cp);
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const compiler::TrainLayer& ly = m.layers[l];
    const uint64_t inp = round_up(static_cast<uint64_t>(ly.in), an);
    const uint64_t outp = round_up(static_cast<uint64_t>(ly.out), an);
    LayerBufs b;
    b.wr = ly.weight_out_in ? static_cast<uint64_t>(ly.out) : static_cast<uint64_t>(ly.in);
    b.wc = ly.weight_out_in ? static_cast<uint64_t>(ly.in) : static_cast<uint64_t>(ly.out);
    const uint64_t welems = round_up(b.wr, an) * round_up(b.wc, an);
    b.wm = add(4 * welems);
    b.wb = add(2 * welems);
    b.v = add(4 * welems);
    b.g = add(4 * welems);
    if (!ly.bias.empty()) {
      b.bm = add(4 * outp);
      b.bv = add(4 * outp);
      b.bg = add(4 * outp);
    }
    const bool last = l + 1 == m.layers.size();
    if (!last) b.h = add(2 * bp * outp);
    if (!last && ly.relu) b.z = add(4 * bp * outp);
    b.dzb = add(2 * bp * outp);
    if (l > 0) b.dx = add(4 * bp * inp);
    lay.layers.push_back(b);
  }
  return lay;
}

uint64_t alloc_bytes(uint64_t bytes) { return round_up(std::max<uint64_t>(bytes, 64), 4096); }

}  // namespace

struct DeviceTrainer::Impl {
  Device& dev;
  compiler::TrainModel model;
  int64_t batch = 0;
  uint64_t bp = 0;
  uint32_t an = 0;
  SgdConfig sgd;
  Layout lay;
  std::vector<HostBuffer> bufs;
  std::array<std::vector<isa::Word>, 4> progs;  // forward, backward, update, backward + update fused
  std::array<PerfCounters, 4> perf;
  int64_t steps = 0;

  DeviceTrainerSchedule opts;
  uint64_t backward_only_cycles = 0;  // fused: measured once, for the attribution
  // The split step (mirrored training): per layer the unfused backward and update, compiled on
  // first use.
  std::vector<std::vector<isa::Word>> layer_backward, layer_update;
  // Sharded update programs: shard_updates[shards][l][shard], compiled on first use.
  std::map<size_t, std::vector<std::vector<std::vector<isa::Word>>>> shard_updates;
  // The stage split (pipeline training): per layer the forward GEMM, compiled on first use.
  std::vector<std::vector<isa::Word>> layer_forward;

  Impl(Device& d, compiler::TrainModel m, int64_t b, const SgdConfig& s, const DeviceTrainerSchedule& o)
      : dev(d), model(std::move(m)), batch(b), sgd(s), opts(o) {}

  uint64_t addr(size_t i) const { return bufs.at(i).addr(); }
  uint64_t in0p() const { return round_up(static_cast<uint64_t>(model.input_features), an); }
  uint64_t cp() const { return round_up(static_cast<uint64_t>(model.classes()), an); }

  void compile();
  void emit_forward_layer(StepBuilder& sb, size_t l) const;
  std::vector<size_t> stash_buffers(size_t l0, size_t l1) const;
  /// Local rows of one dZ column block: the gradient, Z, the bias rows (gradient, master,
  /// momentum) and the UB rows of its bf16 copy.
  struct DzArea {
    uint64_t dreg, zreg, dbrow, ubrow;
  };
  void emit_dz(StepBuilder& sb, size_t l, bool fused) const;
  void emit_dz_loads(StepBuilder& sb, size_t l, uint64_t cb, const DzArea& ar, bool fused) const;
  void emit_dz_block(StepBuilder& sb, size_t l, uint64_t cb, const DzArea& ar, bool fused) const;
  void emit_backward(StepBuilder& sb, bool fused) const;
  void emit_update(StepBuilder& sb, size_t master, size_t grad, size_t mom, size_t copy, uint64_t bytes,
                   uint64_t& set) const;
  /// emit_update on the flat ACC rows [row_begin, row_end) of the parameter only (a shard).
  void emit_update_rows(StepBuilder& sb, size_t master, size_t grad, size_t mom, size_t copy, uint64_t row_begin,
                        uint64_t row_end, uint64_t& set) const;
  /// Shard `shard` of `shards` of layer l: flat rows (ArrayN fp32 values each) of the weight and of
  /// the bias arrays.
  struct ShardRows {
    uint64_t w0, w1, b0, b1;
  };
  ShardRows shard_rows(size_t l, size_t shard, size_t shards) const;
  const std::vector<isa::Word>& shard_update_code(size_t l, size_t shard, size_t shards);
  uint64_t run(size_t prog);
  uint64_t run_code(const std::vector<isa::Word>& code);
  void compile_split();
  void write_params(const std::map<std::string, std::vector<float>>& params,
                    const std::map<std::string, std::vector<float>>* momentum);
  void write_input(std::span<const float> inputs, int64_t rows);
  std::vector<float> read_logits(int64_t rows);
};

void DeviceTrainer::Impl::compile() {
  const DeviceParams& params = dev.info().params;
  const size_t L = model.layers.size();
  // Forward.
  {
    StepBuilder sb(params, bufs.size());
    for (size_t l = 0; l < L; ++l) emit_forward_layer(sb, l);
    progs[0] = sb.finish().code;
  }
  // Backward, and backward with the update fused.
  for (const bool fused : {false, true}) {
    StepBuilder sb(params, bufs.size());
    emit_backward(sb, fused);
    progs[fused ? 3 : 1] = sb.finish().code;
  }
  // Update.
  {
    StepBuilder sb(params, bufs.size());
    uint64_t set = 0;
    for (size_t l = 0; l < L; ++l) {
      const LayerBufs& b = lay.layers[l];
      emit_update(sb, b.wm, b.g, b.v, b.wb, lay.sizes[b.wm], set);
      if (b.bm != kNone) emit_update(sb, b.bm, b.bg, b.bv, kNone, lay.sizes[b.bm], set);
    }
    progs[2] = sb.finish().code;
  }
}

// Layer l's forward GEMM: X . op(W_bf16) with the fp32 bias preloaded, ReLU and bf16 rounding by
// ACTIVATE into the next layer's input (and the fp32 Z kept for the ReLU derivative); fp32 logits
// for the last layer. The forward program is these in layer order; the stage split runs one alone.
void DeviceTrainer::Impl::emit_forward_layer(StepBuilder& sb, size_t l) const {
  const DeviceParams& params = dev.info().params;
  const compiler::TrainLayer& ly = model.layers[l];
  const LayerBufs& b = lay.layers[l];
  const bool last = l + 1 == model.layers.size();
  Bf16GemmSpec s;
  s.shape = {bp, static_cast<uint64_t>(ly.in), static_cast<uint64_t>(ly.out)};
  s.trans_b = ly.weight_out_in;
  s.bias = !ly.bias.empty();
  s.bf16_out = !last;
  s.relu = !last && ly.relu;
  s.z_out = s.relu;
  const size_t a = l == 0 ? lay.x0 : lay.layers[l - 1].h;
  const size_t c = last ? lay.logits : b.h;
  Bf16GemmAddrs ad{addr(a), addr(b.wb), addr(c), s.bias ? addr(b.bm) : 0, s.z_out ? addr(b.z) : 0};
  detail::Bf16GemmHostBufs hb{a, b.wb, c, s.bias ? std::optional<size_t>(b.bm) : std::nullopt,
                              s.z_out ? std::optional<size_t>(b.z) : std::nullopt};
  detail::emit_gemm_bf16(sb, plan_gemm_bf16(params, s), ad, hb);
}

void DeviceTrainer::Impl::emit_backward(StepBuilder& sb, bool fused) const {
  const DeviceParams& params = dev.info().params;
  bool dz_done = false;  // dZ of layer l already made by the epilogue of the dX GEMM above
  for (size_t l = model.layers.size(); l-- > 0;) {
    const compiler::TrainLayer& ly = model.layers[l];
    const LayerBufs& b = lay.layers[l];
    const size_t x = l == 0 ? lay.x0 : lay.layers[l - 1].h;
    const uint64_t in = static_cast<uint64_t>(ly.in), out = static_cast<uint64_t>(ly.out);
    if (!dz_done) emit_dz(sb, l, fused);
    dz_done = false;
    // dX = dZ . W ([out, in]) or dZ . W^T ([in, out]), with the weights before the update; its
    // columns blocks are the column blocks of the layer below's dZ: with the whole batch in one M
    // tile, each finished strip becomes that block of dZ (emit_dz_block) in its own epilogue.
    if (l > 0) {
      Bf16GemmSpec d;
      d.shape = {bp, out, in};
      d.trans_b = !ly.weight_out_in;
      const Bf16GemmPlan plan = plan_gemm_bf16(params, d);
      const uint64_t acc0 = detail::gemm_acc_rows(plan), ub0 = detail::gemm_ub_rows(plan);
      // Per set: Z (bp rows) and the three bias rows, starting on an ACC chunk.
      const uint64_t stride = bp + an;
      const bool fuse_dz = plan.m_tiles == 1 && acc0 + 2 * stride <= params.acc_depth && ub0 + 4 * bp <= params.ub_depth;
      if (fuse_dz) {
        const auto area = [&, acc0, ub0, stride](uint64_t strip) {
          const uint64_t set = strip % 2;
          return DzArea{0, acc0 + set * stride, acc0 + set * stride + bp, ub0 + set * 2 * bp};
        };
        detail::Bf16GemmEpilogue ep;
        ep.bridge = [&, area](uint64_t strip) { sb.builder().bridge(sb.acc(area(strip).dbrow, 3)); };
        ep.prefetch = [&, l, area](uint64_t strip) { emit_dz_loads(sb, l - 1, strip, area(strip), fused); };
        ep.finish = [&, l, area](uint64_t strip, uint64_t acc_row) {
          DzArea ar = area(strip);
          ar.dreg = acc_row;
          emit_dz_block(sb, l - 1, strip, ar, fused);
        };
        detail::emit_gemm_bf16(sb, plan, Bf16GemmAddrs{addr(b.dzb), addr(b.wb), addr(b.dx)},
                               detail::Bf16GemmHostBufs{b.dzb, b.wb, b.dx, std::nullopt, std::nullopt}, ep);
        dz_done = true;
      } else {
        detail::emit_gemm_bf16(sb, plan, Bf16GemmAddrs{addr(b.dzb), addr(b.wb), addr(b.dx)},
                               detail::Bf16GemmHostBufs{b.dzb, b.wb, b.dx, std::nullopt, std::nullopt});
      }
    }
    // dW in the stored layout (fused: the update instead of storing it).
    Bf16GemmSpec s;
    s.trans_a = true;
    size_t a = b.dzb, bb = x;
    if (ly.weight_out_in) {
      s.shape = {out, bp, in};
    } else {
      s.shape = {in, bp, out};
      std::swap(a, bb);
    }
    Bf16GemmAddrs ad{addr(a), addr(bb), addr(b.g)};
    if (fused) {
      s.sgd = true;
      s.lr = sgd.lr;
      s.momentum = sgd.momentum;
      s.weight_decay = sgd.weight_decay;
      ad.master = addr(b.wm);
      ad.momentum = addr(b.v);
      ad.copy = addr(b.wb);
    }
    detail::emit_gemm_bf16(sb, plan_gemm_bf16(params, s), ad,
                           detail::Bf16GemmHostBufs{a, bb, fused ? std::nullopt : std::optional<size_t>(b.g),
                                                    std::nullopt, std::nullopt});
  }
}

// dZ of layer l, one column block (ArrayN columns, all Bp rows) at a time in two alternating ACC
// sets: the incoming gradient (the host's dZ at the logits, or dX of the layer above) in `dreg`,
// SELECT with the pre-activation for a ReLU, COLSUM into the bias gradient, ACTIVATE bf16 into the
// UB and STORE as the bf16 dZ the GEMMs read. `emit_dz_loads` emits a block's LOADs other than the
// gradient (Z, and with the fused update the bias master and momentum rows), `emit_dz_block` the
// rest. `emit_dz` does the whole layer on its own (LOADing the gradient); for the layers below the
// last, the dX GEMM of the layer above does it in its epilogue, strip by strip while dX is still
// in the ACC (emit_backward), so dX never goes to device memory.
void DeviceTrainer::Impl::emit_dz_loads(StepBuilder& sb, size_t l, uint64_t cb, const DzArea& ar, bool fused) const {
  const compiler::TrainLayer& ly = model.layers[l];
  const LayerBufs& b = lay.layers[l];
  const bool last = l + 1 == model.layers.size();
  const uint64_t outp = round_up(static_cast<uint64_t>(ly.out), an);
  const uint64_t an4 = 4 * uint64_t{an};
  if (!last && ly.relu) sb.load(spec::Mem::kAcc, Transfer{ar.zreg, addr(b.z) + 4 * cb * an, bp, an4, 4 * outp}, b.z);
  if (b.bg != kNone && fused) {
    // The bias update on this block (read and written here only: no host tracking).
    const uint64_t off = 4 * cb * an;
    sb.load(spec::Mem::kAcc, Transfer{ar.dbrow + 1, addr(b.bm) + off, 1, an4, an4});
    if (sgd.momentum != 0.0f) sb.load(spec::Mem::kAcc, Transfer{ar.dbrow + 2, addr(b.bv) + off, 1, an4, an4});
  }
}

void DeviceTrainer::Impl::emit_dz_block(StepBuilder& sb, size_t l, uint64_t cb, const DzArea& ar, bool fused) const {
  const compiler::TrainLayer& ly = model.layers[l];
  const LayerBufs& b = lay.layers[l];
  const bool last = l + 1 == model.layers.size();
  const bool select = !last && ly.relu;
  const uint64_t outp = round_up(static_cast<uint64_t>(ly.out), an);
  const uint64_t an4 = 4 * uint64_t{an}, an2 = 2 * uint64_t{an};
  const uint64_t dreg = ar.dreg, zreg = ar.zreg, dbrow = ar.dbrow, bmrow = dbrow + 1, bvrow = dbrow + 2;
  if (select) {
    isa::Instr v = isa::make_instr(spec::Opcode::kVector);
    v.set("op", static_cast<uint64_t>(spec::VecOp::kSelect));
    v.set("dst_addr", dreg);
    v.set("a_addr", zreg);
    v.set("b_addr", dreg);
    v.set("rows", bp);
    std::vector<size_t> reads = sb.acc(zreg, bp);
    for (size_t r : sb.acc(dreg, bp)) reads.push_back(r);
    sb.compute(std::move(v), reads, sb.acc(dreg, bp));
  }
  if (b.bg != kNone) {
    isa::Instr v = isa::make_instr(spec::Opcode::kVector);
    v.set("op", static_cast<uint64_t>(spec::VecOp::kColsum));
    v.set("dst_addr", dbrow);
    v.set("a_addr", dreg);
    v.set("b_addr", dreg);
    v.set("rows", bp);
    sb.compute(std::move(v), sb.acc(dreg, bp), sb.acc(dbrow, 1));
    if (!fused) {
      sb.store(spec::Mem::kAcc, Transfer{dbrow, addr(b.bg) + 4 * cb * an, 1, an4, an4}, b.bg);
    } else {
      const uint64_t off = 4 * cb * an;
      const bool mom = sgd.momentum != 0.0f;
      const auto axpy = [&](uint64_t dst, uint64_t a, uint64_t bb, float scalar) {
        isa::Instr x = isa::make_instr(spec::Opcode::kVector);
        x.set("op", static_cast<uint64_t>(spec::VecOp::kAxpy));
        x.set("dst_addr", dst);
        x.set("a_addr", a);
        x.set("b_addr", bb);
        x.set("rows", 1);
        x.set("scalar", num::to_bits(scalar));
        std::vector<size_t> reads = sb.acc(a, 1);
        for (size_t r : sb.acc(bb, 1)) reads.push_back(r);
        sb.compute(std::move(x), reads, sb.acc(dst, 1));
      };
      if (sgd.weight_decay != 0.0f) axpy(dbrow, bmrow, dbrow, sgd.weight_decay);
      if (mom) {
        axpy(bvrow, bvrow, dbrow, sgd.momentum);
        axpy(bmrow, bvrow, bmrow, -sgd.lr);
        sb.store(spec::Mem::kAcc, Transfer{bvrow, addr(b.bv) + off, 1, an4, an4});
      } else {
        axpy(bmrow, dbrow, bmrow, -sgd.lr);
      }
      sb.store(spec::Mem::kAcc, Transfer{bmrow, addr(b.bm) + off, 1, an4, an4});
    }
  }
  isa::Instr act = isa::make_instr(spec::Opcode::kActivate);
  act.set("bf16", 1);
  act.set("acc_addr", dreg);
  act.set("ub_addr", ar.ubrow);
  act.set("rows", bp);
  sb.compute(std::move(act), sb.acc(dreg, bp), sb.ub(ar.ubrow, 2 * bp));
  sb.store(spec::Mem::kUb, Transfer{ar.ubrow, addr(b.dzb) + 2 * cb * an, bp, an2, 2 * outp}, b.dzb);
}

void DeviceTrainer::Impl::emit_dz(StepBuilder& sb, size_t l, bool fused) const {
  const compiler::TrainLayer& ly = model.layers[l];
  const bool last = l + 1 == model.layers.size();
  const size_t src = last ? lay.dz : lay.layers[l + 1].dx;
  const uint64_t outp = round_up(static_cast<uint64_t>(ly.out), an);
  // Sets start on an ACC chunk (ArrayN rows, the builder's hazard granularity) where they fit, so
  // that one block's LOADs do not wait for the other set's instructions.
  const uint64_t stride = 2 * (2 * bp + an) <= dev.info().params.acc_depth ? 2 * bp + an : 2 * bp + 3;
  for (uint64_t cb = 0; cb < outp / an; ++cb) {
    const uint64_t set = cb % 2;
    const uint64_t base = set * stride;
    const DzArea ar{base + bp, base, base + 2 * bp, set * 2 * bp};
    sb.load(spec::Mem::kAcc, Transfer{ar.dreg, addr(src) + 4 * cb * an, bp, 4 * uint64_t{an}, 4 * outp}, src);
    emit_dz_loads(sb, l, cb, ar, fused);
    emit_dz_block(sb, l, cb, ar, fused);
  }
}

// SGD with momentum on one parameter (docs/numerics.md): the padded fp32 arrays as flat ACC rows,
// in chunks in two alternating ACC sets of (master, gradient, momentum). Within this program each
// chunk's host bytes are read and written by that chunk only (the write depends on the read
// through the ACC), so the buffers need no host-side hazard tracking.
void DeviceTrainer::Impl::emit_update(StepBuilder& sb, size_t master, size_t grad, size_t mom, size_t copy,
                                      uint64_t bytes, uint64_t& set) const {
  emit_update_rows(sb, master, grad, mom, copy, 0, bytes / (4 * uint64_t{an}), set);
}

void DeviceTrainer::Impl::emit_update_rows(StepBuilder& sb, size_t master, size_t grad, size_t mom, size_t copy,
                                           uint64_t row_begin, uint64_t row_end, uint64_t& set) const {
  const DeviceParams& p = dev.info().params;
  const uint64_t an4 = 4 * uint64_t{an};
  const uint64_t total = row_end;
  // Whole ACC chunks (ArrayN rows, the hazard unit), so the sets do not share one.
  const uint64_t cap = std::max<uint64_t>(round_down(std::min<uint64_t>({p.acc_depth / 6, p.ub_depth / 4, 4096}), an),
                                          std::min<uint64_t>({p.acc_depth / 6, p.ub_depth / 4, 4096, an}));
  const bool wd = sgd.weight_decay != 0.0f, use_mom = sgd.momentum != 0.0f;
  const auto vec = [&](uint64_t dst, uint64_t a, uint64_t b, uint64_t rows, float s, bool reads_b) {
    isa::Instr v = isa::make_instr(spec::Opcode::kVector);
    v.set("op", static_cast<uint64_t>(spec::VecOp::kAxpy));
    v.set("dst_addr", dst);
    v.set("a_addr", a);
    v.set("b_addr", b);
    v.set("rows", rows);
    v.set("scalar", num::to_bits(s));
    std::vector<size_t> reads = sb.acc(a, rows);
    if (reads_b) {
      for (size_t r : sb.acc(b, rows)) reads.push_back(r);
    }
    sb.compute(std::move(v), reads, sb.acc(dst, rows));
  };
  for (uint64_t r0 = row_begin; r0 < total; r0 += cap, ++set) {
    const uint64_t rows = std::min(cap, total - r0);
    const uint64_t base = (set % 2) * 3 * cap;
    const uint64_t mreg = base, greg = base + cap, vreg = base + 2 * cap;
    const uint64_t off = r0 * an4;
    const auto ld = [&](size_t buf, uint64_t reg) {
      for (const Transfer& t : detail::split_transfer(reg, addr(buf) + off, rows * an4, an4, sb.beat())) {
        sb.load(spec::Mem::kAcc, t);
      }
    };
    const auto st = [&](size_t buf, uint64_t reg) {
      for (const Transfer& t : detail::split_transfer(reg, addr(buf) + off, rows * an4, an4, sb.beat())) {
        sb.store(spec::Mem::kAcc, t);
      }
    };
    ld(master, mreg);
    ld(grad, greg);
    if (use_mom) ld(mom, vreg);
    if (wd) vec(greg, mreg, greg, rows, sgd.weight_decay, true);  // d = w*wd + g
    if (use_mom) {
      vec(vreg, vreg, greg, rows, sgd.momentum, true);  // v = v*momentum + d
      vec(mreg, vreg, mreg, rows, -sgd.lr, true);        // w = v*(-lr) + w
      st(mom, vreg);
    } else {
      vec(mreg, greg, mreg, rows, -sgd.lr, true);  // w = d*(-lr) + w
    }
    st(master, mreg);
    if (copy != kNone) {
      const uint64_t ubrow = (set % 2) * 2 * cap;
      isa::Instr act = isa::make_instr(spec::Opcode::kActivate);
      act.set("bf16", 1);
      act.set("acc_addr", mreg);
      act.set("ub_addr", ubrow);
      act.set("rows", rows);
      sb.compute(std::move(act), sb.acc(mreg, rows), sb.ub(ubrow, 2 * rows));
      for (const Transfer& t : detail::split_transfer(ubrow, addr(copy) + r0 * 2 * an, rows * 2 * an, an, sb.beat())) {
        sb.store(spec::Mem::kUb, t);
      }
    }
  }
}

uint64_t DeviceTrainer::Impl::run(size_t prog) {
  dev.clear_perf();
  const uint32_t fence = dev.submit(progs[prog]);
  dev.wait(fence);
  perf[prog] = dev.perf();
  return perf[prog].cycles;
}

void DeviceTrainer::Impl::write_params(const std::map<std::string, std::vector<float>>& params,
                                       const std::map<std::string, std::vector<float>>* momentum) {
  const auto get = [&](const std::map<std::string, std::vector<float>>& m, const std::string& name, uint64_t n,
                       const char* what) -> const std::vector<float>& {
    const auto it = m.find(name);
    if (it == m.end()) throw Error(ErrorKind::kInvalidArgument, fmt::format("training state: no {} '{}'", what, name));
    if (it->second.size() != n) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("training state: {} '{}' has {} elements, expected {}",
                                                           what, name, it->second.size(), n));
    }
    return it->second;
  };
  for (size_t l = 0; l < model.layers.size(); ++l) {
    const compiler::TrainLayer& ly = model.layers[l];
    const LayerBufs& b = lay.layers[l];
    const std::vector<float>& w = get(params, ly.weight, b.wr * b.wc, "parameter");
    const std::vector<float> wp = pad_f32(w, b.wr, b.wc, an);
    dev.write(bufs[b.wm], 0, wp.data(), wp.size() * 4);
    const std::vector<uint16_t> wbp = pad_bf16(w, b.wr, b.wc, an);
    dev.write(bufs[b.wb], 0, wbp.data(), wbp.size() * 2);
    std::vector<float> vp(wp.size(), 0.0f);
    if (momentum != nullptr) vp = pad_f32(get(*momentum, ly.weight, b.wr * b.wc, "momentum"), b.wr, b.wc, an);
    dev.write(bufs[b.v], 0, vp.data(), vp.size() * 4);
    if (b.bm != kNone) {
      const uint64_t out = static_cast<uint64_t>(ly.out);
      std::vector<float> bpad(lay.sizes[b.bm] / 4, 0.0f);
      const std::vector<float>& bias = get(params, ly.bias, out, "parameter");
      std::copy(bias.begin(), bias.end(), bpad.begin());
      dev.write(bufs[b.bm], 0, bpad.data(), bpad.size() * 4);
      std::vector<float> bv(bpad.size(), 0.0f);
      if (momentum != nullptr) {
        const std::vector<float>& m = get(*momentum, ly.bias, out, "momentum");
        std::copy(m.begin(), m.end(), bv.begin());
      }
      dev.write(bufs[b.bv], 0, bv.data(), bv.size() * 4);
    }
  }
}

void DeviceTrainer::Impl::write_input(std::span<const float> inputs, int64_t rows) {
  const auto in = static_cast<uint64_t>(model.input_features);
  if (rows < 1 || rows > batch || inputs.size() != static_cast<uint64_t>(rows) * in) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("device trainer: {} input values for {} rows of {} features (batch {})", inputs.size(),
                            rows, in, batch));
  }
  std::vector<uint16_t> x(bp * in0p(), 0);
  for (uint64_t r = 0; r < static_cast<uint64_t>(rows); ++r) {
    for (uint64_t c = 0; c < in; ++c) x[r * in0p() + c] = bf16::from_float(inputs[r * in + c]);
  }
  dev.write(bufs[lay.x0], 0, x.data(), x.size() * 2);
}

std::vector<float> DeviceTrainer::Impl::read_logits(int64_t rows) {
  std::vector<float> p(static_cast<size_t>(rows) * cp());
  dev.read(bufs[lay.logits], 0, p.data(), p.size() * 4);
  return unpad_f32(p, static_cast<uint64_t>(rows), static_cast<uint64_t>(model.classes()), an);
}

DeviceTrainer::DeviceTrainer(Device& device, compiler::TrainModel model, int64_t batch, const SgdConfig& sgd,
                             const DeviceTrainerSchedule& options)
    : impl_(std::make_unique<Impl>(device, std::move(model), batch, sgd, options)) {
  Impl& im = *impl_;
  const DeviceInfo& info = device.info();
  if (batch < 1) throw Error(ErrorKind::kInvalidArgument, fmt::format("device trainer: batch {} < 1", batch));
  if (!std::isfinite(sgd.lr) || sgd.lr <= 0.0f || !std::isfinite(sgd.momentum) || !std::isfinite(sgd.weight_decay)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("device trainer: learning rate {} must be finite and > 0 (momentum {}, weight decay {} "
                            "finite)",
                            sgd.lr, sgd.momentum, sgd.weight_decay));
  }
  if (im.model.layers.empty()) throw Error(ErrorKind::kInvalidArgument, "device trainer: the model has no layer");
  if (im.model.layers.back().relu) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("{}: ReLU on the logits ({}) cannot be trained (the loss takes the logits)",
                            im.model.source, im.model.layers.back().node));
  }
  const uint32_t need = spec::reg::kFeaturesBf16 | spec::reg::kFeaturesTranspose;
  if ((info.features & need) != need) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("device trainer: the {} device has no bf16 mode or no transposes (FEATURES 0x{:x})",
                            info.backend, info.features));
  }
  im.an = info.params.array_n;
  im.bp = round_up(static_cast<uint64_t>(batch), im.an);
  const DeviceParams& p = info.params;
  if (2 * (2 * im.bp + 3) > p.acc_depth || 4 * im.bp > p.ub_depth || im.bp > detail::kMaxRowsField ||
      p.acc_depth / 6 == 0) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("device trainer: batch {} does not fit the device's memories (ACC {} rows, UB {} rows): "
                            "at most {} rows",
                            batch, p.acc_depth, p.ub_depth,
                            round_down(std::min<uint64_t>((p.acc_depth - 6) / 4, p.ub_depth / 4), im.an)));
  }
  im.lay = make_layout(im.model, im.bp, im.an);
  uint64_t total = 0;
  for (uint64_t s : im.lay.sizes) total += alloc_bytes(s);
  for (uint64_t s : im.lay.sizes) {
    im.bufs.push_back(device.alloc(alloc_bytes(s), 4096));
  }
  (void)total;
  // Zero every buffer once (padding stays zero: nothing writes it afterwards).
  for (size_t i = 0; i < im.bufs.size(); ++i) {
    const std::vector<uint8_t> zeros(im.lay.sizes[i], 0);
    device.write(im.bufs[i], 0, zeros.data(), zeros.size());
  }
  im.write_params(im.model.params, nullptr);
  im.compile();
}

DeviceTrainer::~DeviceTrainer() = default;

uint64_t DeviceTrainer::memory_bytes(const compiler::TrainModel& model, int64_t batch, uint32_t array_n) {
  const Layout lay = make_layout(model, round_up(static_cast<uint64_t>(std::max<int64_t>(batch, 1)), array_n), array_n);
  uint64_t total = 0;
  for (uint64_t s : lay.sizes) total += alloc_bytes(s);
  return total;
}

TrainStepReport DeviceTrainer::step(std::span<const float> inputs, std::span<const int64_t> labels, int64_t rows) {
  Impl& im = *impl_;
  if (labels.size() != static_cast<uint64_t>(std::max<int64_t>(rows, 0))) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("device trainer: {} labels for {} rows", labels.size(), rows));
  }
  im.write_input(inputs, rows);
  TrainStepReport r;
  r.rows = rows;
  r.forward_cycles = im.run(0);
  const std::vector<float> logits = im.read_logits(rows);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> grad;
  const int64_t classes = im.model.classes();
  r.loss = compiler::softmax_cross_entropy(logits, labels, rows, classes, &grad);
  std::vector<float> dz(im.bp * im.cp(), 0.0f);
  for (int64_t i = 0; i < rows; ++i) {
    std::copy_n(grad.data() + i * classes, classes, dz.data() + static_cast<uint64_t>(i) * im.cp());
  }
  r.host_loss_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  im.dev.write(im.bufs[im.lay.dz], 0, dz.data(), dz.size() * 4);
  r.host_loss_bytes = static_cast<uint64_t>(rows) * im.cp() * 4 + dz.size() * 4;
  if (im.opts.fuse_update) {
    if (im.backward_only_cycles == 0) im.backward_only_cycles = im.run(1);  // attribution, once
    const uint64_t both = im.run(3);
    r.backward_cycles = std::min(both, im.backward_only_cycles);
    r.update_cycles = both - r.backward_cycles;
    r.update_busy_cycles = im.perf[3].act_busy - std::min(im.perf[3].act_busy, im.perf[1].act_busy);
  } else {
    r.backward_cycles = im.run(1);
    r.update_cycles = im.run(2);
    r.update_busy_cycles = im.perf[2].act_busy;
  }
  r.cycles = r.forward_cycles + r.backward_cycles + r.update_cycles;
  r.macs = im.model.step_macs(rows);
  const double peak = static_cast<double>(im.an) * static_cast<double>(im.an);
  r.utilization = r.cycles > 0 ? static_cast<double>(r.macs) / (peak * static_cast<double>(r.cycles)) : 0.0;
  ++im.steps;
  return r;
}

std::vector<float> DeviceTrainer::logits(std::span<const float> inputs, int64_t rows) {
  Impl& im = *impl_;
  const auto in = static_cast<uint64_t>(im.model.input_features);
  if (rows < 0 || inputs.size() != static_cast<uint64_t>(rows) * in) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("device trainer: {} input values for {} rows of {} features", inputs.size(), rows, in));
  }
  std::vector<float> out;
  for (int64_t r0 = 0; r0 < rows; r0 += im.batch) {
    const int64_t n = std::min(im.batch, rows - r0);
    im.write_input(inputs.subspan(static_cast<uint64_t>(r0) * in, static_cast<uint64_t>(n) * in), n);
    (void)im.run(0);
    const std::vector<float> l = im.read_logits(n);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

TrainState DeviceTrainer::state() const {
  const Impl& im = *impl_;
  TrainState s;
  s.steps = im.steps;
  const auto read_f32 = [&](size_t buf) {
    std::vector<float> v(im.lay.sizes[buf] / 4);
    im.dev.read(im.bufs[buf], 0, v.data(), v.size() * 4);
    return v;
  };
  for (size_t l = 0; l < im.model.layers.size(); ++l) {
    const compiler::TrainLayer& ly = im.model.layers[l];
    const LayerBufs& b = im.lay.layers[l];
    s.params[ly.weight] = unpad_f32(read_f32(b.wm), b.wr, b.wc, im.an);
    s.momentum[ly.weight] = unpad_f32(read_f32(b.v), b.wr, b.wc, im.an);
    if (b.bm != kNone) {
      const auto out = static_cast<size_t>(ly.out);
      std::vector<float> bm = read_f32(b.bm), bv = read_f32(b.bv);
      bm.resize(out);
      bv.resize(out);
      s.params[ly.bias] = std::move(bm);
      s.momentum[ly.bias] = std::move(bv);
    }
  }
  return s;
}

void DeviceTrainer::load_state(const TrainState& s) {
  Impl& im = *impl_;
  im.write_params(s.params, &s.momentum);
  im.steps = s.steps;
}

int64_t DeviceTrainer::batch() const { return impl_->batch; }
int64_t DeviceTrainer::classes() const { return impl_->model.classes(); }
std::string DeviceTrainer::name() const { return impl_->dev.info().backend; }

const std::array<PerfCounters, 4>& DeviceTrainer::last_perf() const { return impl_->perf; }

std::array<uint64_t, 4> DeviceTrainer::program_sizes() const {
  return {impl_->progs[0].size() + 1, impl_->progs[1].size() + 1, impl_->progs[2].size() + 1,
          impl_->progs[3].size() + 1};
}

// --- The split step (mirrored training) ---

uint64_t DeviceTrainer::Impl::run_code(const std::vector<isa::Word>& code) {
  dev.clear_perf();
  const uint32_t fence = dev.submit(code);
  dev.wait(fence);
  return dev.perf().cycles;
}

void DeviceTrainer::Impl::compile_split() {
  if (!layer_backward.empty()) return;
  const DeviceParams& params = dev.info().params;
  const size_t L = model.layers.size();
  std::vector<std::vector<isa::Word>> bwd(L), upd(L);
  for (size_t l = 0; l < L; ++l) {
    const compiler::TrainLayer& ly = model.layers[l];
    const LayerBufs& b = lay.layers[l];
    const uint64_t in = static_cast<uint64_t>(ly.in), out = static_cast<uint64_t>(ly.out);
    const size_t x = l == 0 ? lay.x0 : lay.layers[l - 1].h;
    {
      // emit_backward(sb, false) restricted to layer l.
      StepBuilder sb(params, bufs.size());
      emit_dz(sb, l, false);
      if (l > 0) {
        Bf16GemmSpec d;
        d.shape = {bp, out, in};
        d.trans_b = !ly.weight_out_in;
        detail::emit_gemm_bf16(sb, plan_gemm_bf16(params, d), Bf16GemmAddrs{addr(b.dzb), addr(b.wb), addr(b.dx)},
                               detail::Bf16GemmHostBufs{b.dzb, b.wb, b.dx, std::nullopt, std::nullopt});
      }
      Bf16GemmSpec s;
      s.trans_a = true;
      size_t a = b.dzb, bb = x;
      if (ly.weight_out_in) {
        s.shape = {out, bp, in};
      } else {
        s.shape = {in, bp, out};
        std::swap(a, bb);
      }
      detail::emit_gemm_bf16(sb, plan_gemm_bf16(params, s), Bf16GemmAddrs{addr(a), addr(bb), addr(b.g)},
                             detail::Bf16GemmHostBufs{a, bb, b.g, std::nullopt, std::nullopt});
      bwd[l] = sb.finish().code;
    }
    {
      // The update program restricted to layer l.
      StepBuilder sb(params, bufs.size());
      uint64_t set = 0;
      emit_update(sb, b.wm, b.g, b.v, b.wb, lay.sizes[b.wm], set);
      if (b.bm != kNone) emit_update(sb, b.bm, b.bg, b.bv, kNone, lay.sizes[b.bm], set);
      upd[l] = sb.finish().code;
    }
  }
  layer_backward = std::move(bwd);
  layer_update = std::move(upd);
}

size_t DeviceTrainer::layers() const { return impl_->model.layers.size(); }

std::vector<float> DeviceTrainer::forward_chunk(std::span<const float> inputs, int64_t rows) {
  Impl& im = *impl_;
  im.write_input(inputs, rows);
  (void)im.run(0);
  return im.read_logits(rows);
}

void DeviceTrainer::set_logit_grad(std::span<const float> dz, int64_t rows) {
  Impl& im = *impl_;
  const auto classes = static_cast<uint64_t>(im.model.classes());
  if (rows < 1 || rows > im.batch || dz.size() != static_cast<uint64_t>(rows) * classes) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("device trainer: {} logit gradients for {} rows of {} classes (batch {})", dz.size(), rows,
                            classes, im.batch));
  }
  std::vector<float> p(im.bp * im.cp(), 0.0f);
  for (uint64_t i = 0; i < static_cast<uint64_t>(rows); ++i) {
    std::copy_n(dz.data() + i * classes, classes, p.data() + i * im.cp());
  }
  im.dev.write(im.bufs[im.lay.dz], 0, p.data(), p.size() * 4);
}

uint64_t DeviceTrainer::backward_layer(size_t l) {
  Impl& im = *impl_;
  im.compile_split();
  return im.run_code(im.layer_backward.at(l));
}

uint64_t DeviceTrainer::gradient_elems(size_t l) const {
  const Impl& im = *impl_;
  const LayerBufs& b = im.lay.layers.at(l);
  return (im.lay.sizes[b.wm] + (b.bm != kNone ? im.lay.sizes[b.bm] : 0)) / 4;
}

std::vector<float> DeviceTrainer::read_gradient(size_t l) const {
  const Impl& im = *impl_;
  const LayerBufs& b = im.lay.layers.at(l);
  std::vector<float> g(gradient_elems(l));
  const uint64_t wbytes = im.lay.sizes[b.wm];
  im.dev.read(im.bufs[b.g], 0, g.data(), wbytes);
  if (b.bm != kNone) im.dev.read(im.bufs[b.bg], 0, g.data() + wbytes / 4, im.lay.sizes[b.bm]);
  return g;
}

void DeviceTrainer::write_gradient(size_t l, std::span<const float> grad) {
  Impl& im = *impl_;
  const LayerBufs& b = im.lay.layers.at(l);
  if (grad.size() != gradient_elems(l)) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("device trainer: layer {} gradient has {} values, expected {}",
                                                         l, grad.size(), gradient_elems(l)));
  }
  const uint64_t wbytes = im.lay.sizes[b.wm];
  im.dev.write(im.bufs[b.g], 0, grad.data(), wbytes);
  if (b.bm != kNone) im.dev.write(im.bufs[b.bg], 0, grad.data() + wbytes / 4, im.lay.sizes[b.bm]);
}

uint64_t DeviceTrainer::apply_update(size_t l) {
  Impl& im = *impl_;
  im.compile_split();
  return im.run_code(im.layer_update.at(l));
}

DeviceTrainer::Impl::ShardRows DeviceTrainer::Impl::shard_rows(size_t l, size_t shard, size_t shards) const {
  if (shards < 1 || shard >= shards) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("device trainer: update shard {} of {}", shard, shards));
  }
  const LayerBufs& b = lay.layers.at(l);
  const uint64_t an4 = 4 * uint64_t{an};
  const uint64_t tw = lay.sizes[b.wm] / an4, tb = b.bm != kNone ? lay.sizes[b.bm] / an4 : 0;
  const auto cut = [&](uint64_t total, size_t i) { return total * i / shards; };
  return ShardRows{cut(tw, shard), cut(tw, shard + 1), cut(tb, shard), cut(tb, shard + 1)};
}

const std::vector<isa::Word>& DeviceTrainer::Impl::shard_update_code(size_t l, size_t shard, size_t shards) {
  (void)shard_rows(l, shard, shards);  // checks the arguments
  auto& progs_s = shard_updates[shards];
  if (progs_s.empty()) progs_s.resize(model.layers.size());
  auto& per = progs_s.at(l);
  if (per.empty()) {
    per.resize(shards);
    for (size_t s = 0; s < shards; ++s) {
      const ShardRows q = shard_rows(l, s, shards);
      const LayerBufs& b = lay.layers[l];
      StepBuilder sb(dev.info().params, bufs.size());
      uint64_t set = 0;
      emit_update_rows(sb, b.wm, b.g, b.v, b.wb, q.w0, q.w1, set);
      if (b.bm != kNone) emit_update_rows(sb, b.bm, b.bg, b.bv, kNone, q.b0, q.b1, set);
      per[s] = sb.finish().code;
    }
  }
  return per[shard];
}

uint64_t DeviceTrainer::apply_update_shard(size_t l, size_t shard, size_t shards) {
  Impl& im = *impl_;
  if (shards == 1) return apply_update(l);  // the same program
  return im.run_code(im.shard_update_code(l, shard, shards));
}

uint64_t DeviceTrainer::gradient_shard_elems(size_t l, size_t shard, size_t shards) const {
  const Impl::ShardRows r = impl_->shard_rows(l, shard, shards);
  return impl_->an * (r.w1 - r.w0 + r.b1 - r.b0);
}

void DeviceTrainer::write_gradient_shard(size_t l, size_t shard, size_t shards, std::span<const float> grad) {
  Impl& im = *impl_;
  const LayerBufs& b = im.lay.layers.at(l);
  if (grad.size() != gradient_elems(l)) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("device trainer: layer {} gradient has {} values, expected {}",
                                                         l, grad.size(), gradient_elems(l)));
  }
  const Impl::ShardRows r = im.shard_rows(l, shard, shards);
  const uint64_t an = im.an, wbytes = im.lay.sizes[b.wm];
  if (r.w1 > r.w0) im.dev.write(im.bufs[b.g], 4 * an * r.w0, grad.data() + an * r.w0, 4 * an * (r.w1 - r.w0));
  if (b.bm != kNone && r.b1 > r.b0) {
    im.dev.write(im.bufs[b.bg], 4 * an * r.b0, grad.data() + wbytes / 4 + an * r.b0, 4 * an * (r.b1 - r.b0));
  }
}

namespace {
// A shard's pieces of layer l's variables: (buffer, byte offset, bytes), in a fixed order.
struct Piece {
  size_t buf;
  uint64_t off, bytes;
};

std::vector<Piece> shard_pieces(const LayerBufs& b, uint64_t an, uint64_t w0, uint64_t w1, uint64_t b0,
                                       uint64_t b1) {
  std::vector<Piece> v;
  if (w1 > w0) {
    v.push_back({b.wm, 4 * an * w0, 4 * an * (w1 - w0)});
    v.push_back({b.wb, 2 * an * w0, 2 * an * (w1 - w0)});
    v.push_back({b.v, 4 * an * w0, 4 * an * (w1 - w0)});
  }
  if (b.bm != kNone && b1 > b0) {
    v.push_back({b.bm, 4 * an * b0, 4 * an * (b1 - b0)});
    v.push_back({b.bv, 4 * an * b0, 4 * an * (b1 - b0)});
  }
  return v;
}
}  // namespace

std::vector<uint8_t> DeviceTrainer::shard_bytes(size_t l, size_t shard, size_t shards) const {
  const Impl& im = *impl_;
  const Impl::ShardRows r = im.shard_rows(l, shard, shards);
  const std::vector<Piece> ps = shard_pieces(im.lay.layers.at(l), im.an, r.w0, r.w1, r.b0, r.b1);
  uint64_t total = 0;
  for (const Piece& p : ps) total += p.bytes;
  std::vector<uint8_t> out(total);
  uint64_t off = 0;
  for (const Piece& p : ps) {
    im.dev.read(im.bufs[p.buf], p.off, out.data() + off, p.bytes);
    off += p.bytes;
  }
  return out;
}

void DeviceTrainer::load_shard_bytes(size_t l, size_t shard, size_t shards, std::span<const uint8_t> bytes) {
  Impl& im = *impl_;
  const Impl::ShardRows r = im.shard_rows(l, shard, shards);
  const std::vector<Piece> ps = shard_pieces(im.lay.layers.at(l), im.an, r.w0, r.w1, r.b0, r.b1);
  uint64_t total = 0;
  for (const Piece& p : ps) total += p.bytes;
  if (bytes.size() != total) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("device trainer: layer {} shard {} of {}: {} bytes, expected {}",
                                                         l, shard, shards, bytes.size(), total));
  }
  uint64_t off = 0;
  for (const Piece& p : ps) {
    im.dev.write(im.bufs[p.buf], p.off, bytes.data() + off, p.bytes);
    off += p.bytes;
  }
}

namespace {
// The buffers that make up a replica's variables, in a fixed order.
std::vector<size_t> replica_buffers(const Layout& lay) {
  std::vector<size_t> v;
  for (const LayerBufs& b : lay.layers) {
    for (size_t i : {b.wm, b.wb, b.v, b.bm, b.bv}) {
      if (i != kNone) v.push_back(i);
    }
  }
  return v;
}
}  // namespace

std::vector<uint8_t> DeviceTrainer::replica_bytes() const {
  const Impl& im = *impl_;
  uint64_t total = 0;
  for (size_t i : replica_buffers(im.lay)) total += im.lay.sizes[i];
  std::vector<uint8_t> out(total);
  uint64_t off = 0;
  for (size_t i : replica_buffers(im.lay)) {
    im.dev.read(im.bufs[i], 0, out.data() + off, im.lay.sizes[i]);
    off += im.lay.sizes[i];
  }
  return out;
}

void DeviceTrainer::load_replica_bytes(std::span<const uint8_t> bytes) {
  Impl& im = *impl_;
  uint64_t total = 0;
  for (size_t i : replica_buffers(im.lay)) total += im.lay.sizes[i];
  if (bytes.size() != total) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("device trainer: replica state of {} bytes, expected {}", bytes.size(), total));
  }
  uint64_t off = 0;
  for (size_t i : replica_buffers(im.lay)) {
    im.dev.write(im.bufs[i], 0, bytes.data() + off, im.lay.sizes[i]);
    off += im.lay.sizes[i];
  }
}

// --- The stage split (pipeline training) ---

void DeviceTrainer::write_input(std::span<const float> inputs, int64_t rows) { impl_->write_input(inputs, rows); }

uint64_t DeviceTrainer::forward_layer(size_t l) {
  Impl& im = *impl_;
  if (im.layer_forward.empty()) {
    std::vector<std::vector<isa::Word>> fwd(im.model.layers.size());
    for (size_t k = 0; k < fwd.size(); ++k) {
      StepBuilder sb(im.dev.info().params, im.bufs.size());
      im.emit_forward_layer(sb, k);
      fwd[k] = sb.finish().code;
    }
    im.layer_forward = std::move(fwd);
  }
  return im.run_code(im.layer_forward.at(l));
}

std::vector<float> DeviceTrainer::read_logits(int64_t rows) const {
  const Impl& im = *impl_;
  if (rows < 1 || rows > im.batch) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("device trainer: {} logit rows (batch {})", rows, im.batch));
  }
  std::vector<float> p(static_cast<size_t>(rows) * im.cp());
  im.dev.read(im.bufs[im.lay.logits], 0, p.data(), p.size() * 4);
  return unpad_f32(p, static_cast<uint64_t>(rows), static_cast<uint64_t>(im.model.classes()), im.an);
}

namespace {
// Layer l's buffer `which` (h or dx), or Error(kInvalidArgument) naming what the layer lacks.
size_t stage_buffer(const Layout& lay, size_t l, bool dx) {
  if (l >= lay.layers.size()) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("device trainer: no layer {} ({} layers)", l, lay.layers.size()));
  }
  const size_t i = dx ? lay.layers[l].dx : lay.layers[l].h;
  if (i == kNone) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("device trainer: layer {} has no {} at a stage boundary", l,
                            dx ? "input gradient (it is the first)" : "activation output (it is the last)"));
  }
  return i;
}
}  // namespace

std::vector<uint8_t> DeviceTrainer::read_activation(size_t l) const {
  const Impl& im = *impl_;
  const size_t i = stage_buffer(im.lay, l, false);
  std::vector<uint8_t> v(im.lay.sizes[i]);
  im.dev.read(im.bufs[i], 0, v.data(), v.size());
  return v;
}

void DeviceTrainer::write_activation(size_t l, std::span<const uint8_t> bytes) {
  Impl& im = *impl_;
  const size_t i = stage_buffer(im.lay, l, false);
  if (bytes.size() != im.lay.sizes[i]) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("device trainer: layer {} activation of {} bytes, expected {}",
                                                         l, bytes.size(), im.lay.sizes[i]));
  }
  im.dev.write(im.bufs[i], 0, bytes.data(), bytes.size());
}

std::vector<uint8_t> DeviceTrainer::read_input_grad(size_t l) const {
  const Impl& im = *impl_;
  const size_t i = stage_buffer(im.lay, l, true);
  std::vector<uint8_t> v(im.lay.sizes[i]);
  im.dev.read(im.bufs[i], 0, v.data(), v.size());
  return v;
}

void DeviceTrainer::write_input_grad(size_t l, std::span<const uint8_t> bytes) {
  Impl& im = *impl_;
  const size_t i = stage_buffer(im.lay, l, true);
  if (bytes.size() != im.lay.sizes[i]) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("device trainer: layer {} input gradient of {} bytes, "
                                                         "expected {}", l, bytes.size(), im.lay.sizes[i]));
  }
  im.dev.write(im.bufs[i], 0, bytes.data(), bytes.size());
}

std::vector<size_t> DeviceTrainer::Impl::stash_buffers(size_t l0, size_t l1) const {
  if (l0 >= l1 || l1 > lay.layers.size()) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("device trainer: layers [{}, {}) are not a stage of {} layers", l0, l1, lay.layers.size()));
  }
  std::vector<size_t> v{l0 == 0 ? lay.x0 : lay.layers[l0 - 1].h};
  for (size_t l = l0; l < l1; ++l) {
    if (l + 1 < l1) v.push_back(lay.layers[l].h);
    if (lay.layers[l].z != kNone) v.push_back(lay.layers[l].z);
  }
  return v;
}

std::vector<uint8_t> DeviceTrainer::stash_activations(size_t l0, size_t l1) const {
  const Impl& im = *impl_;
  const std::vector<size_t> bs = im.stash_buffers(l0, l1);
  uint64_t total = 0;
  for (size_t i : bs) total += im.lay.sizes[i];
  std::vector<uint8_t> out(total);
  uint64_t off = 0;
  for (size_t i : bs) {
    im.dev.read(im.bufs[i], 0, out.data() + off, im.lay.sizes[i]);
    off += im.lay.sizes[i];
  }
  return out;
}

void DeviceTrainer::restore_activations(size_t l0, size_t l1, std::span<const uint8_t> bytes) {
  Impl& im = *impl_;
  const std::vector<size_t> bs = im.stash_buffers(l0, l1);
  uint64_t total = 0;
  for (size_t i : bs) total += im.lay.sizes[i];
  if (bytes.size() != total) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("device trainer: stash of layers [{}, {}) has {} bytes, expected {}", l0, l1, bytes.size(),
                            total));
  }
  uint64_t off = 0;
  for (size_t i : bs) {
    im.dev.write(im.bufs[i], 0, bytes.data() + off, im.lay.sizes[i]);
    off += im.lay.sizes[i];
  }
}

}  // namespace tpuw::runtime
