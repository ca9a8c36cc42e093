// What the int8 convolution (runtime/conv.cpp) and the bf16 one (runtime/conv_bf16.cpp) share: the
// host images over the element type (int8, or bf16 bits), the program's loads, weight tiles,
// MATMULs and stores over the element size, and the run (buffers, program, counters). What differs
// stays with each: the element conversion, the parameter rows, and what ends a strip (int8:
// ACTIVATE with requantization per group; bf16: VECTOR SCALE per group, ACTIVATE bf16). The max pools
// (runtime/maxpool.cpp, maxpool_indices.cpp) use its host-address check and input-tile loads.
// Internal to the runtime.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "program_builder.h"
#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/runtime/conv.h"
#include "tpuw/runtime/conv_bf16.h"

namespace tpuw::runtime::detail {

/// Host image of the input: [c_block][batch][img_rows][N], the padded, phase-split image of each
/// block, `pad` where there is no input pixel; `elem(v)` is a source value's element.
/// `what` names the layer kind in errors ("conv", "bf16 conv").
template <class T, class S, class Elem>
std::vector<T> pack_conv_image(const ConvPlan& p, std::span<const S> x, T pad, const char* what, Elem elem) {
  const ConvGeometry& g = p.geom;
  const uint64_t an = p.array_n;
  const uint64_t hw = uint64_t{g.in_h} * g.in_w;
  if (x.size() != p.batch * g.in_c * hw) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: input has {} elements, expected batch*C*H*W = {}", what,
                                                         x.size(), p.batch * g.in_c * hw));
  }
  std::vector<T> out(p.in_bytes(), pad);
  for (uint64_t b = 0; b < p.batch; ++b) {
    for (uint64_t c = 0; c < g.in_c; ++c) {
      T* img = out.data() + ((c / an) * p.batch + b) * p.img_rows * an + c % an;
      const S* src = x.data() + (b * g.in_c + c) * hw;
      for (uint64_t y = 0; y < g.in_h; ++y) {
        const uint64_t Y = y + g.pad_top;
        const uint64_t row_base = ((Y % g.stride_h) * g.stride_w) * p.hq * p.wq + (Y / g.stride_h) * p.wq;
        for (uint64_t xx = 0; xx < g.in_w; ++xx) {
          const uint64_t X = xx + g.pad_left;
          const uint64_t row = row_base + (X % g.stride_w) * p.hq * p.wq + X / g.stride_w;
          img[row * an] = elem(src[y * g.in_w + xx]);
        }
      }
    }
  }
  return out;
}

/// The weight tiles: tile (ob, tap, cb), row k = input channel cb*N + k, column n = output channel
/// ob*N + n; w is [O][C][KH][KW].
template <class T, class S, class Elem>
std::vector<T> pack_conv_tiles(const ConvPlan& p, std::span<const S> w, const char* what, Elem elem) {
  const ConvGeometry& g = p.geom;
  const uint64_t an = p.array_n;
  if (w.size() != uint64_t{g.out_c} * g.in_c * p.taps) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: weights have {} elements, expected O*C*KH*KW = {}", what,
                                                         w.size(), uint64_t{g.out_c} * g.in_c * p.taps));
  }
  std::vector<T> out(p.w_bytes(), T{0});
  for (uint64_t o = 0; o < g.out_c; ++o) {
    for (uint64_t c = 0; c < g.in_c; ++c) {
      for (uint64_t t = 0; t < p.taps; ++t) {
        const uint64_t tile = ((o / an) * p.taps + t) * p.c_blocks + c / an;
        out[tile * an * an + (c % an) * an + o % an] = elem(w[(o * g.in_c + c) * p.taps + t]);
      }
    }
  }
  return out;
}

/// Fills plan.zero_tile: a tile is zero when `is_zero` holds for every element.
template <class T, class IsZero>
void mark_zero_conv_tiles(ConvPlan& p, std::span<const T> packed, IsZero is_zero) {
  const uint64_t tile = uint64_t{p.array_n} * p.array_n;
  p.zero_tile.assign(p.weight_tiles, 0);
  for (uint64_t t = 0; t < p.weight_tiles; ++t) {
    const T* b = packed.data() + t * tile;
    p.zero_tile[t] = std::all_of(b, b + tile, is_zero) ? 1 : 0;
  }
}

/// y NCHW [batch][out_c][ho][wo] from the host image [batch][o_block][ho][wo_stored][N].
template <class D, class T, class Value>
std::vector<D> unpack_conv_image(const ConvPlan& p, std::span<const T> packed, const char* what, const char* unit,
                                 Value value) {
  const uint64_t an = p.array_n, oc = p.geom.out_c;
  if (packed.size() < p.out_bytes()) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: output image has {} {}, the plan needs {}", what, packed.size(), unit, p.out_bytes()));
  }
  std::vector<D> y(p.batch * oc * p.ho * p.wo);
  for (uint64_t b = 0; b < p.batch; ++b) {
    for (uint64_t o = 0; o < oc; ++o) {
      const T* src = packed.data() + (b * p.o_blocks + o / an) * p.ho * p.wo_stored * an + o % an;
      D* dst = y.data() + (b * oc + o) * p.ho * p.wo;
      for (uint64_t oy = 0; oy < p.ho; ++oy) {
        for (uint64_t ox = 0; ox < p.wo; ++ox) dst[oy * p.wo + ox] = value(src[(oy * p.wo_stored + ox) * an]);
      }
    }
  }
  return y;
}

/// Throws Error(kInvalidArgument) naming `what` unless every host address is `beat`-aligned and
/// below 4 GiB (the DMA's).
void check_host_addrs(const char* what, std::span<const uint64_t> addrs, uint64_t beat);

/// The LOADs of one tile of images' input (convolutions and max pools): channel blocks
/// cb_first .. cb_end - 1 of images img0 .. img0 + nimg - 1 (host image [c_block][batch][img_rows][N]
/// at in_addr, `elem` bytes per value) into the UB input buffer whose first pixel row is `in_base`,
/// block cb at in_base + cb * images_per_tile * img_rows (UB rows: elem times the pixel rows);
/// resource r_in.
void emit_input_tile(Builder& b, const ConvPlan& p, uint64_t elem, uint64_t beat, uint64_t in_addr, uint64_t in_base,
                     uint64_t img0, uint64_t nimg, uint64_t cb_first, uint64_t cb_end, size_t r_in);

/// How a convolution program addresses its elements.
struct ConvEmit {
  const char* what = "compile_conv";  // names the function in errors
  uint64_t elem = 1;                  // bytes per value: 1 (int8), 2 (bf16: UB and WB addresses double)
  uint64_t beat = 0;                  // DMA beat bytes
  uint64_t param_bytes = 0;           // the ACC parameter rows, loaded once
  bool bf16 = false;                  // LOADW and MATMUL bf16
  const ConvWeightSource* wsrc = nullptr;  // compile_conv_bf16's
};

/// One strip after its MATMULs, for the caller's ACTIVATEs (rows count pixels; UB addresses are
/// elem times them). Resources: the strip's ACC buffer, its UB staging, the parameter rows.
struct ConvStrip {
  uint64_t ob = 0, nimg = 0, acc_base = 0, stage_base = 0, params_row = 0;
  size_t r_acc = 0, r_stage = 0, r_par = 0;
};

/// The program of both convolutions (sequential meaning: runtime/conv.cpp's header), without the
/// FENCE; `end_strip` emits what turns a strip's ACC rows into its UB staging rows.
ConvProgram emit_conv(const ConvPlan& p, const ConvEmit& e, uint64_t in_addr, uint64_t w_addr, uint64_t param_addr,
                      uint64_t out_addr, const std::function<void(Builder&, const ConvStrip&)>& end_strip);

/// The run of both convolutions from the packed images: allocate, write, mark the zero tiles, compile
/// (`compile(in, w, params, out)` with the buffers' addresses), submit, read back, unpack, counters.
template <class R, class E, class P, class Mark, class Compile, class Unpack>
void run_conv_program(Device& device, R& r, uint64_t batch, const std::vector<E>& xin, const std::vector<E>& wp,
                      const std::vector<P>& par, uint64_t min_bytes, Mark mark, Compile compile, Unpack unpack) {
  const ConvPlan& p = r.plan;
  HostBuffer ibuf = device.alloc(xin.size() * sizeof(E), 4096);
  HostBuffer wbuf = device.alloc(wp.size() * sizeof(E), 4096);
  HostBuffer pbuf = device.alloc(par.size() * sizeof(P), 4096);
  HostBuffer obuf = device.alloc(p.out_bytes() * sizeof(E), 4096);
  device.write(ibuf, 0, xin.data(), xin.size() * sizeof(E));
  device.write(wbuf, 0, wp.data(), wp.size() * sizeof(E));
  device.write(pbuf, 0, par.data(), par.size() * sizeof(P));
  mark(r.plan, std::span<const E>(wp));
  const ConvProgram prog = compile(ibuf.addr(), wbuf.addr(), pbuf.addr(), obuf.addr());
  r.instructions = prog.code.size() + 1;

  r.wall_s = submit_and_wait(device, prog.code);
  std::vector<E> packed(p.out_bytes());
  device.read(obuf, 0, packed.data(), packed.size() * sizeof(E));
  r.y = unpack(p, std::span<const E>(packed));
  r.perf = device.perf();
  r.cycles = r.perf.cycles;
  r.min_bytes = min_bytes;
  r.moved_bytes = r.perf.rd_bytes + r.perf.wr_bytes;
  const double peak = static_cast<double>(p.array_n) * static_cast<double>(p.array_n);
  r.utilization = r.cycles > 0 ? static_cast<double>(p.macs()) / (peak * static_cast<double>(r.cycles)) : 0.0;
  r.row_efficiency =
      static_cast<double>(batch * p.ho * p.wo * p.executed_tiles()) / static_cast<double>(p.mxu_rows());
}

/// The end of a whole CNN's run (run_cnn, run_cnn_bf16): the dense head's figures (zero without a
/// head) added to the layers', and the utilization macs / (N^2 * cycles).
template <class R>
void add_cnn_head(R& r, uint64_t array_n) {
  r.cycles += r.head.cycles;
  r.macs += r.head.macs;
  r.moved_bytes += r.head.rd_bytes + r.head.wr_bytes;
  r.min_bytes += r.head.min_bytes;
  const double peak = static_cast<double>(array_n) * static_cast<double>(array_n);
  r.utilization = r.cycles > 0 ? static_cast<double>(r.macs) / (peak * static_cast<double>(r.cycles)) : 0.0;
}

}  // namespace tpuw::runtime::detail
