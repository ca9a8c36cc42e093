// 2-D max pooling in bf16 on the device (see tpuw/runtime/maxpool.h and docs/network_compiler.md,
// "MaxPool on the device"): compile_max_pool's program with bf16 MATMULs (UB row pairs, the
// identity tile of 1.0), VECTOR MAX on the fp32 ACC copies and ACTIVATE bf16.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "program_builder.h"
#include "tpuw/error.h"
#include "tpuw/numerics.h"
#include "tpuw/runtime/maxpool.h"
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

constexpr uint64_t kLookahead = 96;       // as compile_conv_bf16
constexpr uint16_t kLowestBf16 = 0xFF7F;  // -3.3895e38: the pads (never win a max)
constexpr uint16_t kOneBf16 = 0x3F80;     // 1.0

}  // namespace

ConvPlan plan_max_pool_bf16(const DeviceParams& params, const ConvGeometry& geom, uint64_t batch) {
  if (geom.in_c != geom.out_c) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("bf16 max pool: in_c {} != out_c {}", geom.in_c, geom.out_c));
  }
  // plan_conv reserves 3 * o_blocks ACC rows for params and sizes the R strips from the rest: give
  // it half the ACC (plus those rows) so that the S strips fit in the other half.
  DeviceParams q = params;
  const uint64_t o_blocks = (uint64_t{geom.out_c} + params.array_n - 1) / std::max<uint32_t>(params.array_n, 1);
  const uint64_t half = params.acc_depth / 2;
  q.acc_depth = half == 0 ? 0 : static_cast<uint32_t>(std::min<uint64_t>(half + 3 * o_blocks, params.acc_depth));
  ConvPlan p = plan_conv_bf16(q, geom, batch);
  p.weight_tiles = 1;  // the identity tile
  p.pinned_tiles = 1;
  p.weights_resident = true;
  return p;
}

uint64_t max_pool_bf16_min_bytes(const ConvPlan& p) { return 2 * max_pool_min_bytes(p); }

ConvProgram compile_max_pool_bf16(const ConvPlan& p, bool relu, uint64_t in_addr, uint64_t w_addr,
                                  uint64_t out_addr) {
  const uint64_t an = p.array_n, beat = 2 * uint64_t{p.beat}, kimg = p.images_per_tile;
  for (uint64_t addr : {in_addr, w_addr, out_addr}) {
    if (addr % beat != 0 || addr >= (uint64_t{1} << 32)) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("compile_max_pool_bf16: host address 0x{:x} is not {}-byte aligned or above 4 GiB", addr,
                              beat));
    }
  }
  // In pixels: UB [input buffer 0 | input buffer 1 | staging 0 | staging 1]; ACC [R 0 | R 1 | S 0 | S 1].
  const uint64_t in_buf_rows = p.c_blocks * kimg * p.img_rows;
  const uint64_t stage_rows = kimg * p.acc_rows;
  const uint64_t s_row = p.buffers * stage_rows;
  const uint64_t px = 2 * an;  // bytes of a bf16 pixel (a UB row pair) and of a weight tile row
  const size_t r_w = 0, r_in = 1, r_stage = 3, r_acc = 5, r_s = 7;
  Builder b(r_s + 2);

  for (const Transfer& t : split_transfer(0, w_addr, an * px, an, beat)) {
    b.emit(kL, dma_instr(spec::Opcode::kLoad, spec::Mem::kWb, t), {}, {r_w});
  }
  isa::Instr lw = isa::make_instr(spec::Opcode::kLoadw);
  lw.set("wb_addr", 0);
  lw.set("bf16", 1);
  b.emit(kC, std::move(lw), {r_w}, {});
  bool swap = true;  // the first MATMUL swaps the identity in; it stays for the whole program
  uint64_t strip = 0;
  for (uint64_t tile = 0; tile < p.tiles; ++tile) {
    const uint64_t img0 = tile * kimg;
    const uint64_t nimg = std::min(kimg, p.batch - img0);
    const uint64_t ib = tile % p.buffers;
    const uint64_t in_base = ib * in_buf_rows;
    for (uint64_t cb = 0; cb < p.c_blocks; ++cb) {
      const uint64_t host = in_addr + (cb * p.batch + img0) * p.img_rows * px;
      for (const Transfer& t :
           split_transfer(2 * (in_base + cb * kimg * p.img_rows), host, nimg * p.img_rows * px, an, beat)) {
        b.emit(kL, dma_instr(spec::Opcode::kLoad, spec::Mem::kUb, t), {}, {r_in + ib});
      }
    }
    for (uint64_t ob = 0; ob < p.o_blocks; ++ob, ++strip) {
      const uint64_t sb = strip % p.buffers;
      const uint64_t acc_base = sb * stage_rows;
      const uint64_t s_base = s_row + sb * stage_rows;
      const uint64_t stage_base = p.buffers * in_buf_rows + sb * stage_rows;
      for (uint64_t tap = 0; tap < p.taps; ++tap) {
        const uint64_t dst = tap == 0 ? acc_base : s_base;
        for (uint64_t i = 0; i < nimg; ++i) {
          isa::Instr mm = isa::make_instr(spec::Opcode::kMatmul);
          mm.set("bf16", 1);
          mm.set("accumulate", 0);
          mm.set("swap", swap ? 1 : 0);
          swap = false;
          mm.set("ub_addr", 2 * (in_base + (ob * kimg + i) * p.img_rows + p.tap_offset[tap]));
          mm.set("acc_addr", dst + i * p.acc_rows);
          mm.set("rows", p.acc_rows);
          b.emit(kC, std::move(mm), {r_in + ib}, {tap == 0 ? r_acc + sb : r_s + sb}, /*is_matmul=*/true);
        }
        if (tap == 0) continue;
        isa::Instr v = isa::make_instr(spec::Opcode::kVector);
        v.set("op", static_cast<uint64_t>(spec::VecOp::kMax));
        v.set("dst_addr", acc_base);
        v.set("a_addr", acc_base);
        v.set("b_addr", s_base);
        v.set("rows", nimg * p.acc_rows);
        b.emit(kC, std::move(v), {r_acc + sb, r_s + sb}, {r_acc + sb});
      }
      isa::Instr act = isa::make_instr(spec::Opcode::kActivate);
      act.set("bf16", 1);
      act.set("relu", relu ? 1 : 0);
      act.set("bias", 0);
      act.set("acc_addr", acc_base);
      act.set("ub_addr", 2 * stage_base);
      act.set("rows", nimg * p.acc_rows);
      b.emit(kC, std::move(act), {r_acc + sb}, {r_stage + sb});
      for (uint64_t i = 0; i < nimg; ++i) {
        const uint64_t host_img = out_addr + ((img0 + i) * p.o_blocks + ob) * p.ho * p.wo_stored * px;
        for (uint64_t oy = 0; oy < p.ho; ++oy) {
          for (const Transfer& t : split_transfer(2 * (stage_base + i * p.acc_rows + oy * p.wq),
                                                  host_img + oy * p.wo_stored * px, p.wo_stored * px, an, beat)) {
            b.emit(kS, dma_instr(spec::Opcode::kStore, spec::Mem::kUb, t), {r_stage + sb}, {});
          }
        }
      }
    }
  }
  detail::MergedProgram merged = detail::merge_program(b, kLookahead, static_cast<int64_t>(2 * kLookahead + 24));
  ConvProgram prog;
  detail::take_merged(std::move(merged), prog);
  return prog;
}

ConvBf16RunResult run_max_pool_bf16(Device& device, const Bf16ConvLayer& layer, std::span<const float> x,
                                    uint64_t batch) {
  layer.check();
  if (layer.kind != Bf16ConvLayer::Kind::kMaxPool) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("run_max_pool_bf16: layer '{}' is not a max pool", layer.name));
  }
  if (!max_pool_on_device(device.info())) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("bf16 max pool '{}': the device has no bf16 mode / VECTOR unit (FEATURES.BF16)", layer.name));
  }
  ConvBf16RunResult r;
  r.plan = plan_max_pool_bf16(device.info().params, layer.geom, batch);
  const ConvPlan& p = r.plan;
  const uint64_t an = p.array_n;
  const std::vector<uint16_t> xin = pack_conv_bf16_input(p, x, kLowestBf16);
  std::vector<uint16_t> w(an * an, 0);
  for (uint64_t k = 0; k < an; ++k) w[k * an + k] = kOneBf16;
  HostBuffer ibuf = device.alloc(conv_bf16_in_bytes(p), 4096);
  HostBuffer wbuf = device.alloc(w.size() * 2, 4096);
  HostBuffer obuf = device.alloc(conv_bf16_out_bytes(p), 4096);
  device.write(ibuf, 0, xin.data(), xin.size() * 2);
  device.write(wbuf, 0, w.data(), w.size() * 2);
  const ConvProgram prog = compile_max_pool_bf16(p, layer.relu, ibuf.addr(), wbuf.addr(), obuf.addr());
  r.instructions = prog.code.size() + 1;

  device.clear_perf();
  const auto t0 = std::chrono::steady_clock::now();
  const uint32_t fence = device.submit(prog.code);
  device.wait(fence);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<uint16_t> packed(p.out_bytes());
  device.read(obuf, 0, packed.data(), packed.size() * 2);
  r.y = unpack_conv_bf16_output(p, packed);
  r.perf = device.perf();
  r.cycles = r.perf.cycles;
  r.min_bytes = max_pool_bf16_min_bytes(p);
  r.moved_bytes = r.perf.rd_bytes + r.perf.wr_bytes;
  r.utilization = 0;  // no multiply-accumulates of its own
  r.row_efficiency = static_cast<double>(p.ho * p.wo) / static_cast<double>(p.acc_rows);
  return r;
}

std::vector<float> max_pool_bf16_host(const Bf16ConvLayer& layer, std::span<const float> x, uint64_t batch,
                                      uint32_t array_n) {
  layer.check();
  const ConvGeometry& g = layer.geom;
  const uint64_t C = g.in_c, H = g.in_h, W = g.in_w, Ho = g.out_h(), Wo = g.out_w(), an = array_n;
  if (layer.kind != Bf16ConvLayer::Kind::kMaxPool || an == 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("max_pool_bf16_host: layer '{}' is not a max pool (or array_n is 0)", layer.name));
  }
  if (x.size() != batch * C * H * W) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("bf16 max pool '{}': input has {} values, expected {}",
                                                         layer.name, x.size(), batch * C * H * W));
  }
  const uint64_t cp = (C + an - 1) / an * an;
  std::vector<float> y(batch * C * Ho * Wo);
  std::vector<uint16_t> col(cp);
  std::vector<uint32_t> acc(C);
  for (uint64_t b = 0; b < batch; ++b) {
    for (uint64_t oy = 0; oy < Ho; ++oy) {
      for (uint64_t ox = 0; ox < Wo; ++ox) {
        for (uint64_t t = 0; t < uint64_t{g.kernel_h} * g.kernel_w; ++t) {
          const uint64_t dy = t / g.kernel_w, dx = t % g.kernel_w;
          const int64_t iy = static_cast<int64_t>(oy * g.stride_h + dy * g.dilation_h) - g.pad_top;
          const int64_t ix = static_cast<int64_t>(ox * g.stride_w + dx * g.dilation_w) - g.pad_left;
          const bool inside = iy >= 0 && iy < static_cast<int64_t>(H) && ix >= 0 && ix < static_cast<int64_t>(W);
          // The UB pixel: the channels (bf16), the lanes past C and every pad the lowest bf16.
          std::fill(col.begin(), col.end(), kLowestBf16);
          if (inside) {
            for (uint64_t c = 0; c < C; ++c) {
              col[c] = num::bf16_from_float(x[((b * C + c) * H + static_cast<uint64_t>(iy)) * W + static_cast<uint64_t>(ix)]);
            }
          }
          for (uint64_t o = 0; o < C; ++o) {
            const uint64_t cb = o / an;
            uint32_t s = 0;  // +0; the identity's column o: 1.0 on row o, +0 elsewhere
            for (uint64_t k = cb * an; k < (cb + 1) * an; ++k) s = num::mac_bf16(s, col[k], k == o ? kOneBf16 : 0);
            acc[o] = t == 0 ? s : num::vmax(acc[o], s);
          }
        }
        for (uint64_t o = 0; o < C; ++o) {
          y[((b * C + o) * Ho + oy) * Wo + ox] = num::bf16_to_float(num::activate_bf16(acc[o], 0, false, layer.relu));
        }
      }
    }
  }
  return y;
}

}  // namespace tpuw::runtime
