// The CNN trainer's program cache (train_programs.h).
#include "train_programs.h"

#include <fmt/format.h>

#include <algorithm>

#include "program_builder.h"
#include "tpuw/error.h"
#include "tpuw/numerics.h"
#include "tpuw/runtime/maxpool.h"

namespace tpuw::runtime::detail {
namespace {

constexpr uint16_t kLowestBf16 = 0xFF7F;  // the max pool's pads (maxpool.h: never win a max)
constexpr uint16_t kOneBf16 = 0x3F80;     // 1.0, the identity tile's diagonal
// The value of the FENCEs between the programs of conv_param_grads (the driver keeps its own
// fence values apart from the ones inside a program).
constexpr uint32_t kDwFenceValue = 0x64570000;  // "dW"

double utilization(uint64_t macs, uint32_t an, uint64_t cycles) {
  const double peak = static_cast<double>(an) * static_cast<double>(an);
  return cycles > 0 ? static_cast<double>(macs) / (peak * static_cast<double>(cycles)) : 0.0;
}

bool same_geom(const ConvGeometry& a, const ConvGeometry& b) {
  return a.in_c == b.in_c && a.in_h == b.in_h && a.in_w == b.in_w && a.out_c == b.out_c && a.kernel_h == b.kernel_h &&
         a.kernel_w == b.kernel_w && a.stride_h == b.stride_h && a.stride_w == b.stride_w &&
         a.dilation_h == b.dilation_h && a.dilation_w == b.dilation_w && a.pad_top == b.pad_top &&
         a.pad_left == b.pad_left && a.pad_bottom == b.pad_bottom && a.pad_right == b.pad_right;
}

void require_vector(const Device& device, const char* what) {
  if ((device.info().features & spec::reg::kFeaturesBf16) == 0) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("{}: the {} device has no VECTOR unit (FEATURES.BF16 is 0)", what, device.info().backend));
  }
}

// The direct dW program (TrainProgramCache::conv_param_grads, docs/training.md "Convolutions and
// pools"): dW^T = dT . [im2col(x) | 1] with dT = the output gradient transposed ([O][P] bf16, rows
// padded to Pp = round_up(P, N) pixels), the im2col never formed. Per pass (groups of (tap, channel
// block) columns whose O ACC rows each fit) and per block kb of N pixels in increasing order: LOAD
// dT's N pixel columns of all O rows into a UB buffer (double buffered); per group, LOAD the
// weight tile = the N pixels' input rows at the tap's position in the forward's packed input
// (pack_conv_bf16_input: one DMA run per stretch of consecutive rows; the pixels past P from a
// zero block), LOADW, MATMUL O rows accumulate = (kb > 0) into the group's ACC rows; the all-ones
// column's tile (column 0 all 1.0) stays in a WB slot. Then STORE the pass's ACC rows (fp32 [group]
// [O][N]). Each output is the contract GEMM's sum over the same pixel blocks in the same order.
DirectDw direct_dw_shape(const DeviceParams& dp, const ConvPlan& pf, uint64_t O, uint64_t P) {
  const uint64_t an = dp.array_n;
  DirectDw d;
  d.groups = pf.taps * pf.c_blocks + 1;
  d.pp = (P + an - 1) / an * an;
  d.per_pass = O == 0 ? 0 : std::min<uint64_t>(d.groups, dp.acc_depth / O);
  d.passes = d.per_pass == 0 ? 0 : (d.groups + d.per_pass - 1) / d.per_pass;
  return d;
}

std::vector<isa::Word> direct_dw_program(const DeviceParams& dp, const ConvPlan& pf, uint64_t O, uint64_t P,
                                         const DirectDw& d, uint64_t in_addr, uint64_t dt_addr, uint64_t zero_addr,
                                         uint64_t ones_addr, uint64_t out_addr) {
  const ConvGeometry& g = pf.geom;
  const uint64_t an = dp.array_n, px = 2 * an, beat = dp.dma_data_w / 8, kb_n = d.pp / an;
  const uint64_t hw = pf.ho * pf.wo, slots = std::min<uint64_t>(dp.wb_depth / px - 1, 16);
  const size_t r_w = 0, r_ones = slots, r_act = r_ones + 1, r_acc = r_act + 2;
  Builder b(r_acc + 1);
  const uint64_t ones_slot = slots;
  for (const Transfer& t : split_transfer(ones_slot * px, ones_addr, an * px, an, beat)) {
    b.emit(kL, dma_instr(spec::Opcode::kLoad, spec::Mem::kWb, t), {}, {r_ones});
  }
  // The input row of pixel p (batch-major, then oy, ox) at tap (ky, kx), channel block cb.
  auto in_row = [&](uint64_t p, uint64_t tap, uint64_t cb) {
    const uint64_t bi = p / hw, q = p % hw, oy = q / pf.wo, ox = q % pf.wo;
    const uint64_t Y = oy * g.stride_h + (tap / g.kernel_w) * g.dilation_h;
    const uint64_t X = ox * g.stride_w + (tap % g.kernel_w) * g.dilation_w;
    const uint64_t row = ((Y % g.stride_h) * g.stride_w + X % g.stride_w) * pf.hq * pf.wq + (Y / g.stride_h) * pf.wq +
                         X / g.stride_w;
    return (cb * pf.batch + bi) * pf.img_rows + row;
  };
  uint64_t ring = 0;
  for (uint64_t pass = 0; pass < d.passes; ++pass) {
    const uint64_t g0 = pass * d.per_pass, ng = std::min(d.per_pass, d.groups - g0);
    for (uint64_t kb = 0; kb < kb_n; ++kb) {
      const uint64_t ab = kb % 2, act_row = 2 * ab * O;
      b.emit(kL, dma_instr(spec::Opcode::kLoad, spec::Mem::kUb, Transfer{act_row, dt_addr + kb * px, O, px, 2 * d.pp}),
             {}, {r_act + ab});
      for (uint64_t gi = 0; gi < ng; ++gi) {
        const uint64_t grp = g0 + gi;
        uint64_t slot = ones_slot;
        if (grp + 1 < d.groups) {
          const uint64_t tap = grp / pf.c_blocks, cb = grp % pf.c_blocks;
          slot = ring++ % slots;
          // Runs of consecutive input rows; the pixels past P read zeros.
          uint64_t r = 0;
          while (r < an) {
            const uint64_t p = kb * an + r;
            if (p >= P) {
              b.emit(kL, dma_instr(spec::Opcode::kLoad, spec::Mem::kWb,
                                   Transfer{slot * px + 2 * r, zero_addr, an - r, px, px}),
                     {}, {r_w + slot});
              break;
            }
            const uint64_t row0 = in_row(p, tap, cb);
            uint64_t len = 1;
            while (r + len < an && p + len < P && in_row(p + len, tap, cb) == row0 + len) ++len;
            b.emit(kL, dma_instr(spec::Opcode::kLoad, spec::Mem::kWb,
                                 Transfer{slot * px + 2 * r, in_addr + row0 * px, len, px, px}),
                   {}, {r_w + slot});
            r += len;
          }
        }
        isa::Instr lw = isa::make_instr(spec::Opcode::kLoadw);
        lw.set("wb_addr", slot * px);
        lw.set("bf16", 1);
        b.emit(kC, std::move(lw), {slot == ones_slot ? r_ones : r_w + slot}, {});
        isa::Instr mm = isa::make_instr(spec::Opcode::kMatmul);
        mm.set("bf16", 1);
        mm.set("accumulate", kb > 0 ? 1 : 0);
        mm.set("swap", 1);
        mm.set("ub_addr", act_row);
        mm.set("acc_addr", gi * O);
        mm.set("rows", O);
        b.emit(kC, std::move(mm), {r_act + ab}, {r_acc}, /*is_matmul=*/true);
      }
    }
    for (const Transfer& t : split_transfer(0, out_addr + g0 * O * 4 * an, ng * O * 4 * an, 4 * an, beat)) {
      b.emit(kS, dma_instr(spec::Opcode::kStore, spec::Mem::kAcc, t), {r_acc}, {});
    }
  }
  return merge_program(b, 96, 2 * 96 + 24).code;
}

}  // namespace

TrainProgramCache::Entry* TrainProgramCache::find(uint64_t slot, uint64_t rows) {
  const auto it = entries_.find({slot, rows});
  return it == entries_.end() ? nullptr : &it->second;
}

TrainProgramCache::Entry& TrainProgramCache::make(uint64_t slot, uint64_t rows) {
  Entry& e = entries_[{slot, rows}];
  e = Entry{};
  ++compiled_;
  return e;
}

void TrainProgramCache::run_conv(const Entry& e, const HostBuffer& out, ConvBf16RunResult& r) {
  r.perf = run(e);
  std::vector<uint16_t> packed(r.plan.out_bytes());
  device_->read(out, 0, packed.data(), packed.size() * 2);
  r.y = unpack_conv_bf16_output(r.plan, packed);
  r.cycles = r.perf.cycles;
  r.instructions = e.code.size() + 1;
  r.moved_bytes = r.perf.rd_bytes + r.perf.wr_bytes;
}

HostBuffer TrainProgramCache::alloc(uint64_t bytes) { return device_->alloc(std::max<uint64_t>(bytes, 64), 4096); }

PerfCounters TrainProgramCache::run(const Entry& e) {
  device_->clear_perf();
  device_->wait(device_->submit(e.code));
  return device_->perf();
}

ConvBf16RunResult TrainProgramCache::conv(uint64_t slot, const Bf16ConvLayer& l, std::span<const float> x,
                                          uint64_t batch) {
  if (l.kind == Bf16ConvLayer::Kind::kMaxPool) return max_pool(slot, l, x, batch);
  l.check();
  if ((device_->info().features & spec::reg::kFeaturesBf16) == 0) {
    throw Error(ErrorKind::kUnsupported, "bf16 convolution: the device has no bf16 mode (FEATURES.BF16 is 0)");
  }
  ConvPlan plan = plan_conv_bf16(device_->info().params, l.geom, batch);
  const std::vector<uint16_t> xin = pack_conv_bf16_input(plan, x);
  const std::vector<uint16_t> wp = pack_conv_bf16_weights(plan, l.w);
  mark_zero_tiles_bf16(plan, wp);
  Entry* e = find(slot, batch);
  // Reused only when the slot holds conv()'s own program for this plan (another kind of program
  // on the slot, e.g. a dX program, has other buffers).
  if (e == nullptr || !e->forward_conv || e->conv_plan.zero_tile != plan.zero_tile ||
      !same_geom(e->conv_plan.geom, l.geom) || e->relu != l.relu) {
    e = &make(slot, batch);
    e->forward_conv = true;
    e->conv_plan = plan;
    e->relu = l.relu;
    e->bufs.push_back(alloc(conv_bf16_in_bytes(plan)));
    e->bufs.push_back(alloc(conv_bf16_w_bytes(plan)));
    e->bufs.push_back(alloc(conv_bf16_param_bytes(plan)));
    e->bufs.push_back(alloc(conv_bf16_out_bytes(plan)));
    e->code = compile_conv_bf16(plan, l.relu, e->bufs[0].addr(), e->bufs[1].addr(), e->bufs[2].addr(),
                                e->bufs[3].addr())
                  .code;
  }
  std::vector<float> bias(plan.o_blocks * plan.array_n, 0.0f);
  std::copy(l.bias.begin(), l.bias.end(), bias.begin());
  device_->write(e->bufs[0], 0, xin.data(), xin.size() * 2);
  device_->write(e->bufs[1], 0, wp.data(), wp.size() * 2);
  device_->write(e->bufs[2], 0, bias.data(), bias.size() * 4);
  ConvBf16RunResult r;
  r.plan = std::move(plan);
  run_conv(*e, e->bufs[3], r);
  r.min_bytes = conv_bf16_min_bytes(r.plan);
  r.utilization = utilization(r.plan.macs(), r.plan.array_n, r.cycles);
  return r;
}

bool TrainProgramCache::conv_input_grad(uint64_t slot, uint64_t fwd_slot, const Bf16ConvLayer& fwd,
                                        const Bf16ConvLayer& t, std::span<const float> z, uint64_t batch,
                                        ConvBf16RunResult& r, std::span<const uint64_t> fwd_tap) {
  const Entry* f = find(fwd_slot, batch);
  if (f == nullptr || f->bufs.size() != 4 || f->code.empty() || !same_geom(f->conv_plan.geom, fwd.geom) ||
      fwd.kind == Bf16ConvLayer::Kind::kMaxPool) {
    return false;
  }
  const ConvPlan& fp = f->conv_plan;
  ConvPlan plan = plan_conv_bf16(device_->info().params, t.geom, batch);
  if ((fwd_tap.empty() ? plan.taps != fp.taps : plan.taps != fwd_tap.size()) || plan.c_blocks != fp.o_blocks ||
      plan.o_blocks != fp.c_blocks) {
    return false;
  }
  // Tile (ob, tap, cb) of the transposed layer: the forward's (cb, taps - 1 - tap, ob), transposed.
  ConvWeightSource src;
  src.transpose = true;
  src.tile.resize(plan.weight_tiles);
  plan.zero_tile.assign(plan.weight_tiles, 0);
  for (uint64_t ob = 0; ob < plan.o_blocks; ++ob) {
    for (uint64_t tap = 0; tap < plan.taps; ++tap) {
      for (uint64_t cb = 0; cb < plan.c_blocks; ++cb) {
        const uint64_t wt = (ob * plan.taps + tap) * plan.c_blocks + cb;
        const uint64_t ftap = fwd_tap.empty() ? fp.taps - 1 - tap : fwd_tap[tap];
        if (ftap >= fp.taps) return false;
        const uint64_t ft = (cb * fp.taps + ftap) * fp.c_blocks + ob;
        src.tile[wt] = ft;
        plan.zero_tile[wt] = fp.zero_tile.empty() ? 0 : fp.zero_tile[ft];
      }
    }
  }
  const uint64_t w_addr = f->bufs[1].addr();
  Entry* e = find(slot, batch);
  if (e == nullptr || e->conv_plan.zero_tile != plan.zero_tile || !same_geom(e->conv_plan.geom, t.geom) ||
      e->in_addr != w_addr) {
    e = &make(slot, batch);
    e->conv_plan = plan;
    e->in_addr = w_addr;  // the forward's weights this program reads
    e->bufs.push_back(alloc(conv_bf16_in_bytes(plan)));
    e->bufs.push_back(alloc(conv_bf16_param_bytes(plan)));
    e->bufs.push_back(alloc(conv_bf16_out_bytes(plan)));
    const std::vector<float> bias(plan.o_blocks * plan.array_n, 0.0f);  // the transposed layer's: zero
    device_->write(e->bufs[1], 0, bias.data(), bias.size() * 4);
    e->code = compile_conv_bf16(plan, false, e->bufs[0].addr(), w_addr, e->bufs[1].addr(), e->bufs[2].addr(), {},
                                false, &src)
                  .code;
  }
  const std::vector<uint16_t> xin = pack_conv_bf16_input(plan, z);
  device_->write(e->bufs[0], 0, xin.data(), xin.size() * 2);
  r = ConvBf16RunResult{};
  r.plan = std::move(plan);
  run_conv(*e, e->bufs[2], r);
  r.min_bytes = conv_bf16_min_bytes(r.plan);
  r.utilization = utilization(r.plan.macs(), r.plan.array_n, r.cycles);
  return true;
}

bool TrainProgramCache::conv_param_grads_direct(uint64_t slot, uint64_t fwd_slot, const Bf16ConvLayer& l,
                                                const ConvPlan& pf, const DirectDw& dd, std::span<const float> x,
                                                std::span<const float> d, uint64_t batch, ConvParamGradResult& r,
                                                uint64_t& macs) {
  const ConvGeometry& g = l.geom;
  const DeviceParams& dp = device_->info().params;
  const uint64_t an = dp.array_n, C = g.in_c, T = uint64_t{g.kernel_h} * g.kernel_w, CT = C * T, O = g.out_c;
  const uint64_t P = batch * g.out_h() * g.out_w();
  // The forward program's uploaded input, when it is this layer's at this row count.
  uint64_t in_addr = 0;
  bool own_input = true;
  if (const Entry* f = find(fwd_slot, batch);
      f != nullptr && f->bufs.size() == 4 && !f->code.empty() && same_geom(f->conv_plan.geom, g)) {
    in_addr = f->bufs[0].addr();
    own_input = false;
  }
  Entry* e = find(slot, batch);
  if (e == nullptr || !e->direct || !same_geom(e->conv_plan.geom, g) ||
      (!own_input && e->in_addr != in_addr) || (own_input && e->in_addr != e->bufs[0].addr())) {
    e = &make(slot, batch);
    e->direct = true;
    e->conv_plan = pf;
    e->bufs.push_back(alloc(conv_bf16_in_bytes(pf)));  // [0] the input, when the forward's is not usable
    e->in_addr = own_input ? e->bufs[0].addr() : in_addr;
    e->bufs.push_back(alloc(2 * O * dd.pp));           // [1] dT [O][Pp]
    e->bufs.push_back(alloc(2 * an * an));             // [2] zeros: the pixel rows past P
    e->bufs.push_back(alloc(2 * an * an));             // [3] the all-ones column's tile
    e->bufs.push_back(alloc(dd.groups * O * 4 * an));  // [4] dW^T per group [O][N] fp32
    const std::vector<uint16_t> zero(an * an, 0);
    device_->write(e->bufs[2], 0, zero.data(), zero.size() * 2);
    std::vector<uint16_t> ones(an * an, 0);
    for (uint64_t k = 0; k < an; ++k) ones[k * an] = kOneBf16;
    device_->write(e->bufs[3], 0, ones.data(), ones.size() * 2);
    std::vector<uint16_t> dt(O * dd.pp, 0);  // the padding columns stay +0
    device_->write(e->bufs[1], 0, dt.data(), dt.size() * 2);
    e->code = direct_dw_program(dp, pf, O, P, dd, e->in_addr, e->bufs[1].addr(), e->bufs[2].addr(),
                                e->bufs[3].addr(), e->bufs[4].addr());
  }
  r.host_bytes = 0;
  if (own_input) {
    const std::vector<uint16_t> xin = pack_conv_bf16_input(pf, x);
    device_->write(e->bufs[0], 0, xin.data(), xin.size() * 2);
    r.host_bytes += 2 * xin.size();
  }
  {
    // d is [P][O] (conv_grad_rows); the program reads its transpose, bf16 rows of Pp pixels.
    std::vector<uint16_t> dt(O * dd.pp, 0);
    for (uint64_t p = 0; p < P; ++p) {
      for (uint64_t o = 0; o < O; ++o) dt[o * dd.pp + p] = num::bf16_from_float(d[p * O + o]);
    }
    device_->write(e->bufs[1], 0, dt.data(), dt.size() * 2);
    r.host_bytes += 2 * d.size();
  }
  r.gemm = Bf16GemmResult{};
  r.gemm.perf = run(*e);
  r.gemm.cycles = r.gemm.perf.cycles;
  std::vector<float> out(dd.groups * O * an);
  device_->read(e->bufs[4], 0, out.data(), out.size() * 4);
  std::vector<float> gm((CT + 1) * O);
  for (uint64_t grp = 0; grp + 1 < dd.groups; ++grp) {
    const uint64_t tap = grp / pf.c_blocks, cb = grp % pf.c_blocks;
    for (uint64_t n = 0; n < an && cb * an + n < C; ++n) {
      const uint64_t c = cb * an + n;
      for (uint64_t o = 0; o < O; ++o) gm[(c * T + tap) * O + o] = out[(grp * O + o) * an + n];
    }
  }
  for (uint64_t o = 0; o < O; ++o) gm[CT * O + o] = out[((dd.groups - 1) * O + o) * an];
  split_conv_param_grads(l, gm, r);
  r.gemm.plan = plan_gemm_bf16(dp, conv_param_grad_spec(l, batch));
  macs = r.gemm.plan.macs();
  r.gemm.utilization = utilization(macs, static_cast<uint32_t>(an), r.gemm.cycles);
  return true;
}

ConvBf16RunResult TrainProgramCache::max_pool(uint64_t slot, const Bf16ConvLayer& l, std::span<const float> x,
                                              uint64_t batch) {
  l.check();
  if (l.kind != Bf16ConvLayer::Kind::kMaxPool) {
    throw Error(ErrorKind::kInternal, fmt::format("train program cache: layer '{}' is not a max pool", l.name));
  }
  if (!max_pool_on_device(device_->info())) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("bf16 max pool '{}': the device has no bf16 mode / VECTOR unit (FEATURES.BF16)", l.name));
  }
  ConvPlan plan = plan_max_pool_bf16(device_->info().params, l.geom, batch);
  const uint64_t an = plan.array_n;
  Entry* e = find(slot, batch);
  if (e == nullptr || !same_geom(e->conv_plan.geom, l.geom) || e->relu != l.relu) {
    e = &make(slot, batch);
    e->conv_plan = plan;
    e->relu = l.relu;
    e->bufs.push_back(alloc(conv_bf16_in_bytes(plan)));
    e->bufs.push_back(alloc(an * an * 2));
    e->bufs.push_back(alloc(conv_bf16_out_bytes(plan)));
    std::vector<uint16_t> w(an * an, 0);
    for (uint64_t k = 0; k < an; ++k) w[k * an + k] = kOneBf16;
    device_->write(e->bufs[1], 0, w.data(), w.size() * 2);
    e->code = compile_max_pool_bf16(plan, l.relu, e->bufs[0].addr(), e->bufs[1].addr(), e->bufs[2].addr()).code;
  }
  const std::vector<uint16_t> xin = pack_conv_bf16_input(plan, x, kLowestBf16);
  device_->write(e->bufs[0], 0, xin.data(), xin.size() * 2);
  ConvBf16RunResult r;
  r.plan = std::move(plan);
  run_conv(*e, e->bufs[2], r);
  r.min_bytes = max_pool_bf16_min_bytes(r.plan);
  return r;
}

Bf16GemmResult TrainProgramCache::gemm(uint64_t slot, const Bf16GemmSpec& s, std::span<const float> a,
                                       std::span<const float> b, std::span<const float> bias) {
  if (s.accumulate || s.z_out || s.sgd) {
    throw Error(ErrorKind::kInternal, "train program cache: a GEMM with accumulate, z_out or sgd");
  }
  const uint64_t M = s.shape.m, K = s.shape.k, N = s.shape.n;
  const uint64_t a_rows = s.trans_a ? K : M, a_cols = s.trans_a ? M : K, b_rows = s.trans_b ? N : K,
                 b_cols = s.trans_b ? K : N;
  if (a.size() != a_rows * a_cols || b.size() != b_rows * b_cols || (s.bias && bias.size() != N)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("bf16 GEMM {}x{}x{}: A has {} values, B {}, bias {}", M, K, N, a.size(), b.size(),
                            bias.size()));
  }
  Entry* e = find(slot, M ^ (K << 32));  // the batch rows are M, or K for a transposed A
  if (e == nullptr || e->gemm_plan.spec.shape.m != M || e->gemm_plan.spec.shape.k != K ||
      e->gemm_plan.spec.shape.n != N || e->gemm_plan.spec.trans_a != s.trans_a ||
      e->gemm_plan.spec.trans_b != s.trans_b || e->gemm_plan.spec.bias != s.bias ||
      e->gemm_plan.spec.relu != s.relu || e->gemm_plan.spec.bf16_out != s.bf16_out) {
    const DeviceInfo& info = device_->info();
    if ((info.features & spec::reg::kFeaturesBf16) == 0) {
      throw Error(ErrorKind::kUnsupported, "bf16 GEMM: the device has no bf16 mode (FEATURES.BF16 is 0)");
    }
    if (s.trans_a && (info.features & spec::reg::kFeaturesTranspose) == 0) {
      throw Error(ErrorKind::kUnsupported,
                  "bf16 GEMM with a transposed A: the device has no TRANSPOSE (FEATURES.TRANSPOSE is 0)");
    }
    e = &make(slot, M ^ (K << 32));
    e->gemm_plan = plan_gemm_bf16(info.params, s);
    const Bf16GemmPlan& p = e->gemm_plan;
    e->bufs.push_back(alloc(p.a_bytes()));
    e->bufs.push_back(alloc(p.b_bytes()));
    e->bufs.push_back(alloc(p.c_bytes()));
    e->bufs.push_back(alloc(p.bias_bytes()));
    e->bufs.push_back(alloc(64));
    e->code = compile_gemm_bf16(p, {e->bufs[0].addr(), e->bufs[1].addr(), e->bufs[2].addr(), e->bufs[3].addr(),
                                    e->bufs[4].addr()})
                  .code;
  }
  const Bf16GemmPlan& p = e->gemm_plan;
  const uint32_t an = p.array_n;
  {
    const auto ap = pad_bf16(a, a_rows, a_cols, an);
    const auto bp = pad_bf16(b, b_rows, b_cols, an);
    device_->write(e->bufs[0], 0, ap.data(), ap.size() * 2);
    device_->write(e->bufs[1], 0, bp.data(), bp.size() * 2);
    if (s.bias) {
      const auto bp2 = pad_f32(bias, 1, N, an);
      device_->write(e->bufs[3], 0, bp2.data(), p.bias_bytes());
    }
  }
  Bf16GemmResult r;
  r.plan = p;
  r.perf = run(*e);
  if (s.bf16_out) {
    std::vector<uint16_t> cp(p.c_bytes() / 2);
    device_->read(e->bufs[2], 0, cp.data(), p.c_bytes());
    r.c = unpad_bf16(cp, M, N, an);
  } else {
    std::vector<float> cp(p.c_bytes() / 4);
    device_->read(e->bufs[2], 0, cp.data(), p.c_bytes());
    r.c = unpad_f32(cp, M, N, an);
  }
  r.cycles = r.perf.cycles;
  r.instructions = e->code.size() + 1;
  r.utilization = utilization(p.macs(), an, r.cycles);
  return r;
}

ReluBackwardResult TrainProgramCache::elementwise(uint64_t slot, std::span<const float> a, std::span<const float> b,
                                                  std::span<const VecStep> steps, const char* what) {
  if (a.size() != b.size()) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: {} and {} values", what, a.size(), b.size()));
  }
  require_vector(*device_, what);
  ReluBackwardResult r;
  if (a.empty()) return r;
  const uint64_t an = device_->info().params.array_n, rows = (a.size() + an - 1) / an, bytes = rows * an * 4;
  Entry* e = find(slot, a.size());
  if (e == nullptr) {
    e = &make(slot, a.size());
    for (int i = 0; i < 3; ++i) e->bufs.push_back(alloc(bytes));
    e->code = elementwise_program(device_->info().params, a.size(), e->bufs[0].addr(), e->bufs[1].addr(),
                                  e->bufs[2].addr(), steps);
  }
  device_->write(e->bufs[0], 0, a.data(), a.size() * 4);
  device_->write(e->bufs[1], 0, b.data(), b.size() * 4);
  r.perf = run(*e);
  r.cycles = r.perf.cycles;
  r.d.resize(a.size());
  device_->read(e->bufs[2], 0, r.d.data(), r.d.size() * 4);
  return r;
}

ReluBackwardResult TrainProgramCache::relu_backward(uint64_t slot, std::span<const float> y,
                                                    std::span<const float> dy) {
  const VecStep steps[] = {{spec::VecOp::kSelect, 0}};
  return elementwise(slot, y, dy, steps, "relu backward");
}

ReluBackwardResult TrainProgramCache::add(uint64_t slot, std::span<const float> a, std::span<const float> b,
                                          bool relu) {
  const VecStep with_relu[] = {{spec::VecOp::kAdd, 0}, {spec::VecOp::kMaxs, 0}, {spec::VecOp::kRoundBf16, 0}};
  const VecStep plain[] = {{spec::VecOp::kAdd, 0}, {spec::VecOp::kRoundBf16, 0}};
  return relu ? elementwise(slot, a, b, with_relu, "bf16 add") : elementwise(slot, a, b, plain, "bf16 add");
}

MaxPoolRouteResult TrainProgramCache::max_pool_route(uint64_t slot, std::span<const float> m,
                                                     std::span<const float> dy, std::span<const float> taps) {
  const uint64_t K = max_pool_route_check(m, dy, taps), P = m.size();
  require_vector(*device_, "max pool routing");
  const uint32_t an = device_->info().params.array_n;
  const uint64_t plane = (P + an - 1) / an * an;
  const std::vector<float> img = max_pool_route_image(m, dy, taps, an);
  Entry* e = find(slot, P * 64 + K);
  if (e == nullptr) {
    e = &make(slot, P * 64 + K);
    e->bufs.push_back(alloc(img.size() * 4));
    e->bufs.push_back(alloc(K * plane * 4));
    e->code = max_pool_route_program(device_->info().params, P, K, e->bufs[0].addr(), e->bufs[1].addr());
  }
  device_->write(e->bufs[0], 0, img.data(), img.size() * 4);
  MaxPoolRouteResult r;
  r.perf = run(*e);
  r.cycles = r.perf.cycles;
  std::vector<float> o(K * plane);
  device_->read(e->bufs[1], 0, o.data(), o.size() * 4);
  r.g.resize(K * P);
  for (uint64_t k = 0; k < K; ++k) {
    std::copy_n(o.begin() + static_cast<ptrdiff_t>(k * plane), P, r.g.begin() + static_cast<ptrdiff_t>(k * P));
  }
  r.host_bytes = 4 * (img.size() + o.size());
  return r;
}

bool TrainProgramCache::conv_param_grads(uint64_t slot, uint64_t fwd_slot, const Bf16ConvLayer& l,
                                         std::span<const float> x, std::span<const float> d, uint64_t batch,
                                         ConvParamGradResult& r, uint64_t& macs) {
  l.check();
  if (l.kind != Bf16ConvLayer::Kind::kConv) {
    throw Error(ErrorKind::kInternal, fmt::format("train program cache: dW of '{}', which is not a Conv", l.name));
  }
  const ConvGeometry& g = l.geom;
  const DeviceParams& dp = device_->info().params;
  const uint64_t an = dp.array_n, C = g.in_c, T = uint64_t{g.kernel_h} * g.kernel_w, CT = C * T, M = CT + 1;
  const uint64_t O = g.out_c, K = batch * g.out_h() * g.out_w(), blocks = (M + an - 1) / an;
  if (x.size() != batch * C * g.in_h * g.in_w || d.size() != K * O) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("conv backward '{}': input {} values, gradient rows {} "
                                                         "(expected {} and {})",
                                                         l.name, x.size(), d.size(), batch * C * g.in_h * g.in_w,
                                                         K * O));
  }
  // Block j: the one-hot convolution whose output channels are the columns j*N .. j*N + M_j - 1.
  auto block_layer = [&](uint64_t j) {
    const uint64_t mj = std::min<uint64_t>(an, M - j * an);
    Bf16ConvLayer b;
    b.name = fmt::format("{}.im2col{}", l.name, j);
    b.geom = g;
    b.geom.out_c = static_cast<uint32_t>(mj);
    b.w.assign(mj * CT, 0.0f);
    b.bias.assign(mj, 0.0f);
    for (uint64_t i = 0; i < mj; ++i) {
      const uint64_t col = j * an + i;  // tap-major: col = t * C + c (a block spans few taps)
      if (col < CT) {
        b.w[i * CT + (col % C) * T + col / C] = 1.0f;
      } else {
        b.bias[i] = 1.0f;  // the all-ones column (db)
      }
    }
    return b;
  };
  const ConvPlan p0 = plan_conv_bf16(dp, block_layer(0).geom, batch);
  const bool one_hot_ok = p0.wo_stored == p0.wo;  // the one-hot blocks are stored as whole pixel rows
  last_dw_direct_ = false;
  if (dw_mode_ != DwMode::kOneHot) {
    const ConvPlan pf = plan_conv_bf16(dp, g, batch);
    const DirectDw dd = direct_dw_shape(dp, pf, O, K);
    const uint64_t px = 2 * an, beat = dp.dma_data_w / 8;
    const bool fits = dd.passes > 0 && 4 * O <= dp.ub_depth && dp.wb_depth / px >= 4 && px % beat == 0 &&
                      (4 * an) % beat == 0 && O <= kMaxRowsField;
    // Cycles, estimated (the DMA moves `beat` bytes a cycle, a weight tile shifts in N cycles): the
    // direct program streams a weight tile of 2N^2 bytes per (tap, channel block) and pixel block;
    // the one-hot one streams every output pixel row once per tap of each block through the MXU,
    // then per block a GEMM moving an A and a B tile per pixel block.
    const uint64_t kbs = dd.pp / an, tile_cycles = std::max<uint64_t>(an, 2 * an * an / beat) + 4;
    const uint64_t direct = dd.passes * kbs * (O * px / beat) + kbs * ((dd.groups - 1) * tile_cycles + an + 4);
    uint64_t one_hot = 0;
    for (uint64_t j = 0; j < blocks; ++j) {
      uint64_t taps = 0, last = ~uint64_t{0};
      for (uint64_t col = j * an; col < std::min<uint64_t>(M, (j + 1) * an); ++col) {
        if (col < CT && col / C != last) {
          ++taps;
          last = col / C;
        }
      }
      one_hot += taps * p0.c_blocks * batch * p0.acc_rows + kbs * (2 * tile_cycles);
    }
    if (fits && (dw_mode_ == DwMode::kDirect || !one_hot_ok || direct < one_hot)) {
      last_dw_direct_ = true;
      return conv_param_grads_direct(slot, fwd_slot, l, pf, dd, x, d, batch, r, macs);
    }
  }
  if (!one_hot_ok) return false;
  // The forward program's uploaded input, when its layout is this one's.
  uint64_t in_addr = 0;
  bool own_input = true;
  if (const Entry* f = find(fwd_slot, batch); f != nullptr && !f->bufs.empty()) {
    const ConvPlan& q = f->conv_plan;
    if (same_geom([&] {
          ConvGeometry h = q.geom;
          h.out_c = g.out_c;
          return h;
        }(),
                  g) &&
        q.batch == batch && q.c_blocks == p0.c_blocks && q.img_rows == p0.img_rows && q.hq == p0.hq &&
        q.wq == p0.wq && q.phases == p0.phases && conv_bf16_in_bytes(q) == conv_bf16_in_bytes(p0)) {
      in_addr = f->bufs[0].addr();
      own_input = false;
    }
  }
  Entry* e = find(slot, batch);
  if (e == nullptr || e->direct || !same_geom(e->conv_plan.geom, p0.geom) || e->codes.size() != 2 * blocks ||
      (!own_input && e->in_addr != in_addr) || (own_input && e->in_addr != e->bufs[0].addr())) {
    e = &make(slot, batch);
    e->conv_plan = p0;
    e->bufs.push_back(alloc(conv_bf16_in_bytes(p0)));  // [0] the input, when the forward's is not usable
    e->in_addr = own_input ? e->bufs[0].addr() : in_addr;
    Bf16GemmSpec s0;
    s0.shape = {std::min<uint64_t>(an, M), K, O};
    s0.trans_a = true;
    e->bufs.push_back(alloc(plan_gemm_bf16(dp, s0).b_bytes()));  // [1] the gradient rows, shared
    for (uint64_t j = 0; j < blocks; ++j) {
      const Bf16ConvLayer b = block_layer(j);
      ConvPlan pj = plan_conv_bf16(dp, b.geom, batch);
      const std::vector<uint16_t> wp = pack_conv_bf16_weights(pj, b.w);
      mark_zero_tiles_bf16(pj, wp);
      Bf16GemmSpec s;
      s.shape = {b.geom.out_c, K, O};
      s.trans_a = true;
      const Bf16GemmPlan gp = plan_gemm_bf16(dp, s);
      const uint64_t at = e->bufs.size();
      e->bufs.push_back(alloc(conv_bf16_w_bytes(pj)));
      e->bufs.push_back(alloc(conv_bf16_param_bytes(pj)));
      const uint64_t a_bytes = std::max(conv_bf16_out_bytes(pj), gp.a_bytes());
      e->bufs.push_back(alloc(a_bytes));
      e->bufs.push_back(alloc(gp.c_bytes()));
      e->bufs.push_back(alloc(gp.bias_bytes()));
      e->bufs.push_back(alloc(64));
      std::vector<float> bias(pj.o_blocks * an, 0.0f);
      std::copy(b.bias.begin(), b.bias.end(), bias.begin());
      device_->write(e->bufs[at], 0, wp.data(), wp.size() * 2);
      device_->write(e->bufs[at + 1], 0, bias.data(), bias.size() * 4);
      // The GEMM reads kp >= K rows: the rows the convolution does not write stay zero.
      std::vector<uint16_t> zero(a_bytes / 2, 0);
      if (j * an >= CT) {
        // Only the all-ones column: a constant block, written once (what its convolution, all
        // weight tiles zero and bias 1.0, would write every step).
        for (uint64_t k = 0; k < K; ++k) zero[k * an] = kOneBf16;
        e->codes.emplace_back();
      } else {
        e->codes.push_back(compile_conv_bf16(pj, false, e->in_addr, e->bufs[at].addr(), e->bufs[at + 1].addr(),
                                             e->bufs[at + 2].addr())
                               .code);
      }
      device_->write(e->bufs[at + 2], 0, zero.data(), zero.size() * 2);
      e->codes.push_back(compile_gemm_bf16(gp, {e->bufs[at + 2].addr(), e->bufs[1].addr(), e->bufs[at + 3].addr(),
                                                e->bufs[at + 4].addr(), e->bufs[at + 5].addr()})
                             .code);
      e->gemm_plans.push_back(gp);
    }
    // One program for the layer: the blocks' convolutions and GEMMs in order, each behind a FENCE
    // (the programs were compiled each for the whole device: the FENCE orders a GEMM behind the
    // convolution that wrote its block, and each program's local rows behind the one before).
    e->bufs.push_back(alloc(64));  // where the in-program FENCEs write (never read)
    const uint64_t sink = e->bufs.back().addr();
    for (const std::vector<isa::Word>& c : e->codes) {
      if (c.empty()) continue;
      if (!e->code.empty()) {
        isa::Instr f = isa::make_instr(spec::Opcode::kFence);
        f.set("value", kDwFenceValue);
        f.set("host_addr", sink);
        e->code.push_back(isa::encode(f));
      }
      e->code.insert(e->code.end(), c.begin(), c.end());
    }
  }
  r.host_bytes = 0;
  if (own_input) {
    const std::vector<uint16_t> xin = pack_conv_bf16_input(p0, x);
    device_->write(e->bufs[0], 0, xin.data(), xin.size() * 2);
    r.host_bytes += 2 * xin.size();
  }
  {
    const std::vector<uint16_t> bp = pad_bf16(d, K, O, static_cast<uint32_t>(an));
    device_->write(e->bufs[1], 0, bp.data(), bp.size() * 2);
    r.host_bytes += 2 * d.size();
  }
  std::vector<float> gm(M * O);
  r.gemm = Bf16GemmResult{};
  macs = 0;
  r.gemm.perf = run(*e);
  r.gemm.cycles = r.gemm.perf.cycles;
  for (uint64_t j = 0; j < blocks; ++j) {
    const Bf16GemmPlan& gp = e->gemm_plans[j];
    std::vector<float> cp(gp.c_bytes() / 4);
    device_->read(e->bufs[2 + 6 * j + 3], 0, cp.data(), gp.c_bytes());
    const uint64_t mj = gp.spec.shape.m;
    const std::vector<float> c = unpad_f32(cp, mj, O, static_cast<uint32_t>(an));
    for (uint64_t i = 0; i < mj; ++i) {
      const uint64_t col = j * an + i, row = col < CT ? (col % C) * T + col / C : CT;  // the contract's row
      std::copy_n(c.begin() + static_cast<ptrdiff_t>(i * O), O, gm.begin() + static_cast<ptrdiff_t>(row * O));
    }
    macs += gp.macs();
  }
  split_conv_param_grads(l, gm, r);
  r.gemm.plan = e->gemm_plans.back();
  r.gemm.utilization = utilization(macs, static_cast<uint32_t>(an), r.gemm.cycles);
  return true;
}

}  // namespace tpuw::runtime::detail
