// 2-D max pooling (int8) on the device (see tpuw/runtime/maxpool.h and docs/network_compiler.md,
// "MaxPool on the device").
//
// One emitter for int8 and bf16 (detail::emit_max_pool; bf16: UB row pairs, the identity of 1.0,
// VECTOR MAX on fp32 words, ACTIVATE bf16, no param rows). Sequential meaning of the program
// (program_builder.h derives the tokens):
//   LOAD ACC params <- (bias 0, mult 1, shift 0), one row each
//   LOAD WB slot 0 <- the identity tile; LOADW slot 0 (the first MATMUL swaps it in, for good)
//   for tile t (images_per_tile images; UB input buffer t%2):
//     for channel block cb: LOAD UB input buffer <- the tile's images of block cb (pads -128)
//     for channel block ob (strip s; ACC R and S buffers s%2, UB staging s%2):
//       for tap: for image i: MATMUL UB rows (image i, ob) + tap_offset[tap] -> R (tap 0) or S
//                [tap > 0: VECTOR IMAX R, S -> R over the strip's rows]
//       ACTIVATE R -> UB staging (the int8 value, ReLU)
//       for image i, for output row oy: STORE staging rows oy*wq .. + wo_stored -> host
// A variant (detail::MaxPoolHooks, maxpool_emit.h; the Indices program of maxpool_indices.cpp)
// adds ACC rows after S, steps around each MATMUL, its own combining step per tap, per stored row,
// and may run the strips channel-block-major (each loading its block of the input).
#include "tpuw/runtime/maxpool.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "conv_emit.h"
#include "maxpool_emit.h"
#include "program_builder.h"
#include "tpuw/error.h"
#include "tpuw/spec.h"

namespace tpuw::runtime {
namespace {

using detail::Builder;
using detail::dma_instr;
using detail::kC;
using detail::kL;
using detail::kS;
using detail::split_transfer;
using detail::Transfer;

constexpr uint64_t kLookahead = 96;  // as compile_conv

}  // namespace

bool max_pool_on_device(const DeviceInfo& info) { return (info.features & spec::reg::kFeaturesBf16) != 0; }

ConvPlan plan_max_pool(const DeviceParams& params, const ConvGeometry& geom, uint64_t batch) {
  if (geom.in_c != geom.out_c) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("max pool: in_c {} != out_c {}", geom.in_c, geom.out_c));
  }
  // plan_conv sizes the R strips from acc_depth - 3 * o_blocks: give it half of what is left after
  // the 3 param rows, so that the S strips (as many, as large) fit in the other half.
  DeviceParams q = params;
  const uint64_t o_blocks = (uint64_t{geom.out_c} + params.array_n - 1) / std::max<uint32_t>(params.array_n, 1);
  const uint64_t half = params.acc_depth > 3 ? (params.acc_depth - 3) / 2 : 0;
  q.acc_depth = static_cast<uint32_t>(std::min<uint64_t>(half + 3 * o_blocks, params.acc_depth));
  if (half == 0) q.acc_depth = 0;
  ConvPlan p = plan_conv(q, geom, batch);
  p.weight_tiles = 1;  // the identity tile
  p.pinned_tiles = 1;
  p.weights_resident = true;
  return p;
}

uint64_t max_pool_min_bytes(const ConvPlan& p) {
  return p.batch * p.geom.in_c * uint64_t{p.geom.in_h} * p.geom.in_w + p.batch * p.geom.out_c * p.ho * p.wo;
}

namespace detail {

ConvProgram emit_max_pool(const ConvPlan& p, bool bf16, bool relu, uint64_t in_addr, uint64_t w_addr,
                          uint64_t param_addr, uint64_t out_addr, MaxPoolHooks* hooks) {
  MaxPoolHooks plain;
  MaxPoolHooks& h = hooks != nullptr ? *hooks : plain;
  // bf16: a pixel is a UB row pair of 2-byte elements, the host beat doubles, no param rows.
  const uint64_t esz = bf16 ? 2 : 1, ub = bf16 ? 2 : 1;
  const uint64_t an = p.array_n, beat = esz * uint64_t{p.beat}, kimg = p.images_per_tile;
  std::vector<uint64_t> addrs{in_addr, w_addr, out_addr};
  if (!bf16) addrs.push_back(param_addr);
  check_host_addrs(bf16 ? "compile_max_pool_bf16" : "compile_max_pool", addrs, beat);
  // In pixels: UB [input buffer 0 | input buffer 1 | staging 0 | staging 1];
  // ACC [R 0 | R 1 | S 0 | S 1 | the hooks' rows | params (int8)] (one of each when plan.buffers == 1).
  const uint64_t in_buf_rows = p.c_blocks * kimg * p.img_rows;
  const uint64_t stage_rows = kimg * p.acc_rows;
  const uint64_t s_row = p.buffers * stage_rows;
  const uint64_t hook_row = 2 * p.buffers * stage_rows;
  const uint64_t params_row = hook_row + h.acc_rows();
  const uint64_t px = esz * an;  // bytes of a pixel and of a weight tile row
  // Resources: WB slot, input buffers (2), staging (2), R (2), S (2), params, the hooks'.
  const size_t r_w = 0, r_in = 1, r_stage = 3, r_acc = 5, r_s = 7, r_par = 9;
  h.place(hook_row, r_par + 1);
  Builder b(r_par + 1 + h.resources());

  if (!bf16) {
    for (const Transfer& t : split_transfer(params_row, param_addr, 3 * 4 * an, 4 * an, beat)) {
      b.emit(kL, dma_instr(spec::Opcode::kLoad, spec::Mem::kAcc, t), {}, {r_par});
    }
  }
  for (const Transfer& t : split_transfer(0, w_addr, an * px, an, beat)) {
    b.emit(kL, dma_instr(spec::Opcode::kLoad, spec::Mem::kWb, t), {}, {r_w});
  }
  isa::Instr lw = isa::make_instr(spec::Opcode::kLoadw);
  lw.set("wb_addr", 0);
  if (bf16) lw.set("bf16", 1);
  b.emit(kC, std::move(lw), {r_w}, {});
  bool swap = true;  // the first MATMUL swaps the identity in; it stays for the whole program
  // One strip per (tile, channel block): tile-major, every block of a tile loaded at once, or
  // block-major (hooks), each strip loading its block alone. Either way the input crosses once.
  const bool blocks_outer = h.blocks_outer();
  const uint64_t steps = p.tiles * p.o_blocks;
  for (uint64_t step = 0; step < steps; ++step) {
    const uint64_t tile = blocks_outer ? step % p.tiles : step / p.o_blocks;
    const uint64_t ob = blocks_outer ? step / p.tiles : step % p.o_blocks;
    const uint64_t strip = step;
    const uint64_t img0 = tile * kimg;
    const uint64_t nimg = std::min(kimg, p.batch - img0);
    const uint64_t load = blocks_outer ? step : tile;  // the input load this strip reads
    const uint64_t ib = load % p.buffers;
    const uint64_t in_base = ib * in_buf_rows;
    if (blocks_outer || ob == 0) {
      emit_input_tile(b, p, esz, beat, in_addr, in_base, img0, nimg, blocks_outer ? ob : 0,
                      blocks_outer ? ob + 1 : p.c_blocks, r_in + ib);
    }
    const uint64_t sb = strip % p.buffers;
    const uint64_t stage_base = p.buffers * in_buf_rows + sb * stage_rows;
    const MaxPoolStrip st{b, tile, ob, nimg, sb, sb * stage_rows, s_row + sb * stage_rows, r_acc + sb, r_s + sb,
                          nimg * p.acc_rows};
    h.begin_strip(st);
    for (uint64_t tap = 0; tap < p.taps; ++tap) {
      const uint64_t dst = tap == 0 ? st.r : st.s;
      const size_t r_dst = tap == 0 ? st.r_res : st.s_res;
      for (uint64_t i = 0; i < nimg; ++i) {
        const bool acc = h.before_matmul(st, tap, i, dst + i * p.acc_rows);
        isa::Instr mm = isa::make_instr(spec::Opcode::kMatmul);
        if (bf16) mm.set("bf16", 1);
        mm.set("accumulate", acc ? 1 : 0);
        mm.set("swap", swap ? 1 : 0);
        swap = false;
        mm.set("ub_addr", ub * (in_base + (ob * kimg + i) * p.img_rows + p.tap_offset[tap]));
        mm.set("acc_addr", dst + i * p.acc_rows);
        mm.set("rows", p.acc_rows);
        b.emit(kC, std::move(mm), acc ? std::vector<size_t>{r_in + ib, r_dst} : std::vector<size_t>{r_in + ib}, {r_dst},
               /*is_matmul=*/true);
        h.after_matmul(st, tap, i);
      }
      if (tap == 0 || h.combine(st, tap)) continue;
      // IMAX: the int32 words of int8 MATMULs; MAX: the fp32 words of bf16 ones.
      isa::Instr v = isa::make_instr(spec::Opcode::kVector);
      v.set("op", static_cast<uint64_t>(bf16 ? spec::VecOp::kMax : spec::VecOp::kImax));
      v.set("dst_addr", st.r);
      v.set("a_addr", st.r);
      v.set("b_addr", st.s);
      v.set("rows", st.rows);
      b.emit(kC, std::move(v), {st.r_res, st.s_res}, {st.r_res});
    }
    isa::Instr act = isa::make_instr(spec::Opcode::kActivate);
    if (bf16) act.set("bf16", 1);
    act.set("relu", relu ? 1 : 0);
    act.set("bias", !bf16 && h.int8_bias() ? 1 : 0);
    act.set("acc_addr", st.r);
    act.set("ub_addr", ub * stage_base);
    act.set("rows", st.rows);
    if (!bf16) {
      act.set("bias_addr", params_row);
      act.set("qparam_addr", params_row + 1);
    }
    b.emit(kC, std::move(act), bf16 ? std::vector<size_t>{st.r_res} : std::vector<size_t>{st.r_res, r_par},
           {r_stage + sb});
    for (uint64_t i = 0; i < nimg; ++i) {
      const uint64_t blk = ((img0 + i) * p.o_blocks + ob) * p.ho * p.wo_stored;
      for (uint64_t oy = 0; oy < p.ho; ++oy) {
        for (const Transfer& t : split_transfer(ub * (stage_base + i * p.acc_rows + oy * p.wq),
                                                out_addr + (blk + oy * p.wo_stored) * px, p.wo_stored * px, an, beat)) {
          b.emit(kS, dma_instr(spec::Opcode::kStore, spec::Mem::kUb, t), {r_stage + sb}, {});
        }
        h.store_row(st, i, oy, blk + oy * p.wo_stored);
      }
    }
  }
  MergedProgram merged = merge_program(b, kLookahead, static_cast<int64_t>(2 * kLookahead + 24));
  ConvProgram prog;
  take_merged(std::move(merged), prog);
  return prog;
}

}  // namespace detail

ConvProgram compile_max_pool(const ConvPlan& p, bool relu, uint64_t in_addr, uint64_t w_addr, uint64_t param_addr,
                             uint64_t out_addr) {
  return detail::emit_max_pool(p, false, relu, in_addr, w_addr, param_addr, out_addr);
}

ConvRunResult run_max_pool(Device& device, const QConv2d& layer, std::span<const int8_t> x, uint64_t batch) {
  layer.check();
  if (!layer.max_pool) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("run_max_pool: layer '{}' is not a max pool", layer.name));
  }
  if (!max_pool_on_device(device.info())) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("max pool '{}': the device has no VECTOR unit (FEATURES.BF16)", layer.name));
  }
  ConvRunResult r;
  r.plan = plan_max_pool(device.info().params, layer.geom, batch);
  const ConvPlan& p = r.plan;
  const uint64_t an = p.array_n;
  const std::vector<int8_t> xin = pack_conv_input(p, x, -128);
  std::vector<int8_t> w(an * an, 0);
  for (uint64_t k = 0; k < an; ++k) w[k * an + k] = 1;
  std::vector<int32_t> params(3 * an, 0);
  std::fill(params.begin() + static_cast<std::ptrdiff_t>(an), params.begin() + static_cast<std::ptrdiff_t>(2 * an), 1);
  HostBuffer ibuf = device.alloc(p.in_bytes(), 4096);
  HostBuffer wbuf = device.alloc(w.size(), 4096);
  HostBuffer pbuf = device.alloc(params.size() * sizeof(int32_t), 4096);
  HostBuffer obuf = device.alloc(p.out_bytes(), 4096);
  device.write(ibuf, 0, xin.data(), xin.size());
  device.write(wbuf, 0, w.data(), w.size());
  device.write(pbuf, 0, params.data(), params.size() * sizeof(int32_t));
  const ConvProgram prog = compile_max_pool(p, layer.relu, ibuf.addr(), wbuf.addr(), pbuf.addr(), obuf.addr());
  r.instructions = prog.code.size() + 1;

  r.wall_s = detail::submit_and_wait(device, prog.code);
  std::vector<int8_t> packed(p.out_bytes());
  device.read(obuf, 0, packed.data(), packed.size());
  r.y = unpack_conv_output(p, packed);
  r.perf = device.perf();
  r.cycles = r.perf.cycles;
  r.min_bytes = max_pool_min_bytes(p);
  r.moved_bytes = r.perf.rd_bytes + r.perf.wr_bytes;
  r.utilization = 0;  // no multiply-accumulates of its own
  r.row_efficiency = static_cast<double>(p.ho * p.wo) / static_cast<double>(p.acc_rows);
  return r;
}

}  // namespace tpuw::runtime
