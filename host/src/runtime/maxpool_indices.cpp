// MaxPool with Indices on the device, int8 and bf16 (see tpuw/runtime/maxpool_indices.h and
// docs/network_compiler.md, "MaxPool's Indices on the device").
//
// Sequential meaning of the program (program_builder.h derives the tokens):
//   [int8: LOAD ACC params <- (bias -0x4B000100, mult 1, shift 0)]
//   LOAD WB slot 0 <- the identity tile; LOADW slot 0 (swapped in by the first MATMUL, for good)
//   for tile t (UB input buffer t%2):
//     for channel block cb: LOAD UB input buffer <- the tile's images of block cb
//     for channel block ob (strip s; ACC R, S, D, I and UB staging s%2):
//       [ob changed: LOAD ACC constants <- block ob's KP_t and IDX_t]
//       tap 0: per image: SCALE R = KP_0; MATMUL acc -> R; SCALE I = IDX_0
//       tap t: per image: SCALE S = KP_t; MATMUL acc -> S; SUB D = S - R; MAX R = R, S;
//              per image: SUB S = IDX_t - I; SELECT S = (D, S); ADD I = I + S
//       ACTIVATE R -> UB staging; STORE staging rows -> values; STORE ACC I rows -> indices
#include "tpuw/runtime/maxpool_indices.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "program_builder.h"
#include "tpuw/error.h"
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

constexpr uint64_t kLookahead = 96;            // as compile_max_pool
constexpr uint32_t kIndexBase = 0x4B000000;    // fp32 2^23: 2^23 + i has the bits kIndexBase + i
constexpr uint32_t kInt8Base = 0x4B000100;     // int8 S = 2^23 + 256 + v
constexpr uint32_t kInt8PadBase = 0x4B0000FF;  // a pad tap: one below, so -128 from a pad loses
constexpr uint32_t kNegInf = 0xFF800000;       // bf16 pad taps start from -inf
constexpr uint32_t kOne = 0x3F800000;          // fp32 1.0 (SCALE: an exact copy)
constexpr uint16_t kLowestBf16 = 0xFF7F;
constexpr uint16_t kOneBf16 = 0x3F80;

// ACC rows of the constant block of one channel block.
uint64_t const_rows(const ConvPlan& p) { return 2 * p.taps * p.acc_rows; }

isa::Instr vec(spec::VecOp op, uint64_t dst, uint64_t a, uint64_t b, uint64_t rows, uint32_t scalar = 0) {
  isa::Instr v = isa::make_instr(spec::Opcode::kVector);
  v.set("op", static_cast<uint64_t>(op));
  v.set("dst_addr", dst);
  v.set("a_addr", a);
  v.set("b_addr", b);
  v.set("rows", rows);
  if (scalar != 0) v.set("scalar", scalar);
  return v;
}

}  // namespace

ConvPlan plan_max_pool_indices(const DeviceParams& params, const ConvGeometry& geom, uint64_t batch, bool bf16) {
  const char* what = bf16 ? "bf16 max pool with Indices" : "max pool with Indices";
  if (uint64_t{geom.in_c} * geom.in_h * geom.in_w >= (uint64_t{1} << 23)) {
    throw Error(ErrorKind::kUnsupported, fmt::format("{}: C*H*W = {} must be below 2^23 (the fp32 index words)", what,
                                                     uint64_t{geom.in_c} * geom.in_h * geom.in_w));
  }
  const ConvPlan full = bf16 ? plan_max_pool_bf16(params, geom, batch) : plan_max_pool(params, geom, batch);
  // R, S, D and I strips (as many, as large) share what the constants and the 3 param rows leave;
  // plan_conv sizes its strips from acc_depth - 3 * o_blocks.
  const uint64_t fixed = const_rows(full) + 3;
  if (fixed + 4 * full.acc_rows > params.acc_depth) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("{}: {} taps x {} rows of index constants and 4 x {} strip rows need more than the {} "
                            "ACC rows",
                            what, full.taps, full.acc_rows, full.acc_rows, params.acc_depth));
  }
  DeviceParams q = params;
  q.acc_depth = static_cast<uint32_t>((params.acc_depth - fixed) / 4 + 3 * full.o_blocks);
  ConvPlan p = bf16 ? plan_conv_bf16(q, geom, batch) : plan_conv(q, geom, batch);
  p.weight_tiles = 1;  // the identity tile
  p.pinned_tiles = 1;
  p.weights_resident = true;
  return p;
}

std::vector<uint32_t> max_pool_index_constants(const ConvPlan& p, bool bf16, bool column_major) {
  const ConvGeometry& g = p.geom;
  const uint64_t an = p.array_n, H = g.in_h, W = g.in_w, C = g.in_c;
  std::vector<uint32_t> out(p.o_blocks * const_rows(p) * an);
  for (uint64_t ob = 0; ob < p.o_blocks; ++ob) {
    for (uint64_t t = 0; t < p.taps; ++t) {
      const uint64_t dy = t / g.kernel_w, dx = t % g.kernel_w;
      uint32_t* kp = &out[((ob * p.taps + t) * 2) * p.acc_rows * an];
      uint32_t* idx = kp + p.acc_rows * an;
      for (uint64_t r = 0; r < p.acc_rows; ++r) {
        const uint64_t oy = r / p.wq, ox = r % p.wq;
        const int64_t iy = static_cast<int64_t>(oy * g.stride_h + dy * g.dilation_h) - g.pad_top;
        const int64_t ix = static_cast<int64_t>(ox * g.stride_w + dx * g.dilation_w) - g.pad_left;
        const bool inside = ox < p.wo && oy < p.ho && iy >= 0 && iy < static_cast<int64_t>(H) && ix >= 0 &&
                            ix < static_cast<int64_t>(W);
        for (uint64_t l = 0; l < an; ++l) {
          const uint64_t c = ob * an + l;
          const bool real = inside && c < C;
          kp[r * an + l] = bf16 ? (real ? 0u : kNegInf) : (real ? kInt8Base : kInt8PadBase);
          uint64_t i = 0;
          if (real) {
            const auto h = static_cast<uint64_t>(iy), w = static_cast<uint64_t>(ix);
            i = c * H * W + (column_major ? w * H + h : h * W + w);
          }
          idx[r * an + l] = kIndexBase + static_cast<uint32_t>(i);
        }
      }
    }
  }
  return out;
}

ConvProgram compile_max_pool_indices(const ConvPlan& p, bool bf16, bool relu, uint64_t in_addr, uint64_t w_addr,
                                     uint64_t param_addr, uint64_t const_addr, uint64_t out_addr, uint64_t idx_addr) {
  const uint64_t an = p.array_n, kimg = p.images_per_tile, ar = p.acc_rows;
  const uint64_t esz = bf16 ? 2 : 1;         // bytes of an element in UB / WB / the values output
  const uint64_t ub = bf16 ? 2 : 1;          // UB rows per pixel
  const uint64_t beat = esz * uint64_t{p.beat};
  for (uint64_t addr : {in_addr, w_addr, param_addr, const_addr, out_addr, idx_addr}) {
    if (addr % beat != 0 || addr >= (uint64_t{1} << 32)) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("compile_max_pool_indices: host address 0x{:x} is not {}-byte aligned or above 4 GiB",
                              addr, beat));
    }
  }
  // In pixels: UB [input buffer 0 | input buffer 1 | staging 0 | staging 1];
  // ACC [R 0 | R 1 | S 0 | S 1 | D 0 | D 1 | I 0 | I 1 | constants | params].
  const uint64_t in_buf_rows = p.c_blocks * kimg * p.img_rows;
  const uint64_t stage_rows = kimg * ar;
  const uint64_t region = p.buffers * stage_rows;
  const uint64_t s_row = region, d_row = 2 * region, i_row = 3 * region, c_row = 4 * region;
  const uint64_t params_row = c_row + const_rows(p);
  const uint64_t px = esz * an;  // bytes of a pixel (and of a weight tile row)
  const uint64_t acc_px = 4 * an;
  const size_t r_w = 0, r_in = 1, r_stage = 3, r_r = 5, r_s = 7, r_d = 9, r_i = 11, r_c = 13, r_par = 14;
  Builder b(r_par + 1);

  if (!bf16) {
    for (const Transfer& t : split_transfer(params_row, param_addr, 3 * acc_px, acc_px, beat)) {
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
  bool swap = true;
  uint64_t strip = 0;
  uint64_t loaded_ob = p.o_blocks;  // none yet
  for (uint64_t tile = 0; tile < p.tiles; ++tile) {
    const uint64_t img0 = tile * kimg;
    const uint64_t nimg = std::min(kimg, p.batch - img0);
    const uint64_t ib = tile % p.buffers;
    const uint64_t in_base = ib * in_buf_rows;
    for (uint64_t cb = 0; cb < p.c_blocks; ++cb) {
      const uint64_t host = in_addr + (cb * p.batch + img0) * p.img_rows * px;
      for (const Transfer& t :
           split_transfer(ub * (in_base + cb * kimg * p.img_rows), host, nimg * p.img_rows * px, an, beat)) {
        b.emit(kL, dma_instr(spec::Opcode::kLoad, spec::Mem::kUb, t), {}, {r_in + ib});
      }
    }
    for (uint64_t ob = 0; ob < p.o_blocks; ++ob, ++strip) {
      const uint64_t sb = strip % p.buffers;
      const uint64_t R = sb * stage_rows, S = s_row + sb * stage_rows, D = d_row + sb * stage_rows,
                     I = i_row + sb * stage_rows;
      const uint64_t stage_base = p.buffers * in_buf_rows + sb * stage_rows;
      const uint64_t all = nimg * ar;
      if (loaded_ob != ob) {
        loaded_ob = ob;
        for (const Transfer& t : split_transfer(c_row, const_addr + ob * const_rows(p) * acc_px,
                                                const_rows(p) * acc_px, acc_px, beat)) {
          b.emit(kL, dma_instr(spec::Opcode::kLoad, spec::Mem::kAcc, t), {}, {r_c});
        }
      }
      for (uint64_t tap = 0; tap < p.taps; ++tap) {
        const uint64_t kp = c_row + 2 * tap * ar, idx = kp + ar;
        const uint64_t dst = tap == 0 ? R : S;
        const size_t r_dst = tap == 0 ? r_r + sb : r_s + sb;
        for (uint64_t i = 0; i < nimg; ++i) {
          b.emit(kC, vec(spec::VecOp::kScale, dst + i * ar, kp, 0, ar, kOne), {r_c}, {r_dst});
          isa::Instr mm = isa::make_instr(spec::Opcode::kMatmul);
          if (bf16) mm.set("bf16", 1);
          mm.set("accumulate", 1);
          mm.set("swap", swap ? 1 : 0);
          swap = false;
          mm.set("ub_addr", ub * (in_base + (ob * kimg + i) * p.img_rows + p.tap_offset[tap]));
          mm.set("acc_addr", dst + i * ar);
          mm.set("rows", ar);
          b.emit(kC, std::move(mm), {r_in + ib, r_dst}, {r_dst}, /*is_matmul=*/true);
          if (tap == 0) b.emit(kC, vec(spec::VecOp::kScale, I + i * ar, idx, 0, ar, kOne), {r_c}, {r_i + sb});
        }
        if (tap == 0) continue;
        b.emit(kC, vec(spec::VecOp::kSub, D, S, R, all), {r_s + sb, r_r + sb}, {r_d + sb});
        b.emit(kC, vec(spec::VecOp::kMax, R, R, S, all), {r_r + sb, r_s + sb}, {r_r + sb});
        for (uint64_t i = 0; i < nimg; ++i) {
          b.emit(kC, vec(spec::VecOp::kSub, S + i * ar, idx, I + i * ar, ar), {r_c, r_i + sb}, {r_s + sb});
        }
        b.emit(kC, vec(spec::VecOp::kSelect, S, D, S, all), {r_d + sb, r_s + sb}, {r_s + sb});
        b.emit(kC, vec(spec::VecOp::kAdd, I, I, S, all), {r_i + sb, r_s + sb}, {r_i + sb});
      }
      isa::Instr act = isa::make_instr(spec::Opcode::kActivate);
      if (bf16) {
        act.set("bf16", 1);
        act.set("bias", 0);
      } else {
        act.set("bias", 1);
        act.set("bias_addr", params_row);
        act.set("qparam_addr", params_row + 1);
      }
      act.set("relu", relu ? 1 : 0);
      act.set("acc_addr", R);
      act.set("ub_addr", ub * stage_base);
      act.set("rows", all);
      b.emit(kC, std::move(act), bf16 ? std::vector<size_t>{r_r + sb} : std::vector<size_t>{r_r + sb, r_par},
             {r_stage + sb});
      for (uint64_t i = 0; i < nimg; ++i) {
        const uint64_t blk = ((img0 + i) * p.o_blocks + ob) * p.ho * p.wo_stored;
        for (uint64_t oy = 0; oy < p.ho; ++oy) {
          for (const Transfer& t : split_transfer(ub * (stage_base + i * ar + oy * p.wq),
                                                  out_addr + (blk + oy * p.wo_stored) * px, p.wo_stored * px, an,
                                                  beat)) {
            b.emit(kS, dma_instr(spec::Opcode::kStore, spec::Mem::kUb, t), {r_stage + sb}, {});
          }
          for (const Transfer& t : split_transfer(I + i * ar + oy * p.wq, idx_addr + (blk + oy * p.wo_stored) * acc_px,
                                                  p.wo_stored * acc_px, acc_px, beat)) {
            b.emit(kS, dma_instr(spec::Opcode::kStore, spec::Mem::kAcc, t), {r_i + sb}, {});
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

template <class T>
std::vector<int64_t> max_pool_indices_host(const ConvGeometry& g, std::span<const T> x, uint64_t batch,
                                           bool column_major) {
  const uint64_t C = g.in_c, H = g.in_h, W = g.in_w, Ho = g.out_h(), Wo = g.out_w();
  if (x.size() != batch * C * H * W) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("max_pool_indices_host: input has {} values, expected {}", x.size(), batch * C * H * W));
  }
  std::vector<int64_t> out(batch * C * Ho * Wo, -1);
  for (uint64_t n = 0; n < batch; ++n) {
    for (uint64_t c = 0; c < C; ++c) {
      const T* plane = &x[(n * C + c) * H * W];
      for (uint64_t oy = 0; oy < Ho; ++oy) {
        for (uint64_t ox = 0; ox < Wo; ++ox) {
          bool any = false;
          T best{};
          int64_t arg = -1;
          for (uint64_t dy = 0; dy < g.kernel_h; ++dy) {
            for (uint64_t dx = 0; dx < g.kernel_w; ++dx) {
              const int64_t iy = static_cast<int64_t>(oy * g.stride_h + dy * g.dilation_h) - g.pad_top;
              const int64_t ix = static_cast<int64_t>(ox * g.stride_w + dx * g.dilation_w) - g.pad_left;
              if (iy < 0 || iy >= static_cast<int64_t>(H) || ix < 0 || ix >= static_cast<int64_t>(W)) continue;
              const auto h = static_cast<uint64_t>(iy), w = static_cast<uint64_t>(ix);
              const T v = plane[h * W + w];
              if (!any || v > best) {
                any = true;
                best = v;
                arg = static_cast<int64_t>((n * C + c) * H * W + (column_major ? w * H + h : h * W + w));
              }
            }
          }
          out[((n * C + c) * Ho + oy) * Wo + ox] = arg;
        }
      }
    }
  }
  return out;
}
template std::vector<int64_t> max_pool_indices_host<int8_t>(const ConvGeometry&, std::span<const int8_t>, uint64_t,
                                                            bool);
template std::vector<int64_t> max_pool_indices_host<float>(const ConvGeometry&, std::span<const float>, uint64_t, bool);

namespace {

// The index words [batch][o_blocks][ho][wo_stored][an] -> NCHW int64: subtract 2^23, add n*C*H*W.
std::vector<int64_t> unpack_indices(const ConvPlan& p, std::span<const uint32_t> words) {
  const ConvGeometry& g = p.geom;
  const uint64_t C = g.out_c, an = p.array_n, chw = uint64_t{g.in_c} * g.in_h * g.in_w;
  std::vector<int64_t> out(p.batch * C * p.ho * p.wo);
  for (uint64_t n = 0; n < p.batch; ++n) {
    for (uint64_t c = 0; c < C; ++c) {
      const uint64_t ob = c / an, l = c % an;
      for (uint64_t oy = 0; oy < p.ho; ++oy) {
        for (uint64_t ox = 0; ox < p.wo; ++ox) {
          const uint32_t w = words[(((n * p.o_blocks + ob) * p.ho + oy) * p.wo_stored + ox) * an + l];
          out[((n * C + c) * p.ho + oy) * p.wo + ox] =
              static_cast<int64_t>(w) - int64_t{kIndexBase} + static_cast<int64_t>(n * chw);
        }
      }
    }
  }
  return out;
}

template <class Result>
void finish(Device& device, const ConvPlan& p, const ConvProgram& prog, Result& r) {
  r.instructions = prog.code.size() + 1;
  r.wall_s = detail::submit_and_wait(device, prog.code);
  r.perf = device.perf();
  r.cycles = r.perf.cycles;
  r.moved_bytes = r.perf.rd_bytes + r.perf.wr_bytes;
  r.utilization = 0;
  r.row_efficiency = static_cast<double>(p.ho * p.wo) / static_cast<double>(p.acc_rows);
}

}  // namespace

MaxPoolIndicesRun run_max_pool_indices(Device& device, const QConv2d& layer, std::span<const int8_t> x,
                                       uint64_t batch, bool column_major) {
  layer.check();
  if (!layer.max_pool) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("run_max_pool_indices: layer '{}' is not a max pool", layer.name));
  }
  if (!max_pool_on_device(device.info())) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("max pool '{}' with Indices: the device has no VECTOR unit (FEATURES.BF16)", layer.name));
  }
  MaxPoolIndicesRun run;
  ConvRunResult& r = run.values;
  r.plan = plan_max_pool_indices(device.info().params, layer.geom, batch, false);
  const ConvPlan& p = r.plan;
  const uint64_t an = p.array_n;
  const std::vector<int8_t> xin = pack_conv_input(p, x, -128);
  std::vector<int8_t> w(an * an, 0);
  for (uint64_t k = 0; k < an; ++k) w[k * an + k] = 1;
  std::vector<uint32_t> params(3 * an, 0);
  std::fill(params.begin(), params.begin() + static_cast<std::ptrdiff_t>(an), static_cast<uint32_t>(-kInt8Base));
  std::fill(params.begin() + static_cast<std::ptrdiff_t>(an), params.begin() + static_cast<std::ptrdiff_t>(2 * an), 1u);
  const std::vector<uint32_t> consts = max_pool_index_constants(p, false, column_major);
  const uint64_t idx_bytes = p.batch * p.o_blocks * p.ho * p.wo_stored * an * 4;
  HostBuffer ibuf = device.alloc(p.in_bytes(), 4096);
  HostBuffer wbuf = device.alloc(w.size(), 4096);
  HostBuffer pbuf = device.alloc(params.size() * 4, 4096);
  HostBuffer cbuf = device.alloc(consts.size() * 4, 4096);
  HostBuffer obuf = device.alloc(p.out_bytes(), 4096);
  HostBuffer xbuf = device.alloc(idx_bytes, 4096);
  device.write(ibuf, 0, xin.data(), xin.size());
  device.write(wbuf, 0, w.data(), w.size());
  device.write(pbuf, 0, params.data(), params.size() * 4);
  device.write(cbuf, 0, consts.data(), consts.size() * 4);
  const ConvProgram prog = compile_max_pool_indices(p, false, layer.relu, ibuf.addr(), wbuf.addr(), pbuf.addr(),
                                                    cbuf.addr(), obuf.addr(), xbuf.addr());
  finish(device, p, prog, r);
  std::vector<int8_t> packed(p.out_bytes());
  device.read(obuf, 0, packed.data(), packed.size());
  r.y = unpack_conv_output(p, packed);
  std::vector<uint32_t> words(idx_bytes / 4);
  device.read(xbuf, 0, words.data(), idx_bytes);
  run.indices = unpack_indices(p, words);
  // Input and both outputs once (the indices as the device's int32 words).
  r.min_bytes = max_pool_min_bytes(p) + p.batch * p.geom.out_c * p.ho * p.wo * 4;
  return run;
}

MaxPoolIndicesBf16Run run_max_pool_bf16_indices(Device& device, const Bf16ConvLayer& layer, std::span<const float> x,
                                                uint64_t batch, bool column_major) {
  layer.check();
  if (layer.kind != Bf16ConvLayer::Kind::kMaxPool) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("run_max_pool_bf16_indices: layer '{}' is not a max pool", layer.name));
  }
  if (!max_pool_on_device(device.info())) {
    throw Error(ErrorKind::kUnsupported, fmt::format("bf16 max pool '{}' with Indices: the device has no bf16 mode / "
                                                     "VECTOR unit (FEATURES.BF16)",
                                                     layer.name));
  }
  MaxPoolIndicesBf16Run run;
  ConvBf16RunResult& r = run.values;
  r.plan = plan_max_pool_indices(device.info().params, layer.geom, batch, true);
  const ConvPlan& p = r.plan;
  const uint64_t an = p.array_n;
  const std::vector<uint16_t> xin = pack_conv_bf16_input(p, x, kLowestBf16);
  std::vector<uint16_t> w(an * an, 0);
  for (uint64_t k = 0; k < an; ++k) w[k * an + k] = kOneBf16;
  const std::vector<uint32_t> consts = max_pool_index_constants(p, true, column_major);
  const uint64_t idx_bytes = p.batch * p.o_blocks * p.ho * p.wo_stored * an * 4;
  HostBuffer ibuf = device.alloc(conv_bf16_in_bytes(p), 4096);
  HostBuffer wbuf = device.alloc(w.size() * 2, 4096);
  HostBuffer cbuf = device.alloc(consts.size() * 4, 4096);
  HostBuffer obuf = device.alloc(conv_bf16_out_bytes(p), 4096);
  HostBuffer xbuf = device.alloc(idx_bytes, 4096);
  device.write(ibuf, 0, xin.data(), xin.size() * 2);
  device.write(wbuf, 0, w.data(), w.size() * 2);
  device.write(cbuf, 0, consts.data(), consts.size() * 4);
  const ConvProgram prog = compile_max_pool_indices(p, true, layer.relu, ibuf.addr(), wbuf.addr(), wbuf.addr(),
                                                    cbuf.addr(), obuf.addr(), xbuf.addr());
  finish(device, p, prog, r);
  std::vector<uint16_t> packed(p.out_bytes());
  device.read(obuf, 0, packed.data(), packed.size() * 2);
  r.y = unpack_conv_bf16_output(p, packed);
  std::vector<uint32_t> words(idx_bytes / 4);
  device.read(xbuf, 0, words.data(), idx_bytes);
  run.indices = unpack_indices(p, words);
  r.min_bytes = max_pool_bf16_min_bytes(p) + p.batch * p.geom.out_c * p.ho * p.wo * 4;
  return run;
}

}  // namespace tpuw::runtime
