// 2-D convolution as an implicit GEMM on the device (see tpuw/runtime/conv.h and
// docs/network_compiler.md, "Convolution").
//
// Sequential meaning of the program (program_builder.h derives the tokens):
//   LOAD ACC params <- (bias, mult, shift) rows of every output block, once
//   for tile t (images_per_tile images; UB input buffer t%2):
//     for channel block cb: LOAD UB input buffer <- the tile's images of block cb (one transfer)
//     for output block ob (strip s; ACC buffer s%2, UB staging s%2):
//       for tap, for cb (weight tile (ob, tap, cb)):
//         [LOAD WB slot <- tile, unless it is resident there]
//         LOADW slot
//         for image i: MATMUL UB rows (image i, cb) + tap_offset[tap] -> ACC rows of image i,
//                      swap = (i == 0), accumulate = not the first (tap, cb)
//       ACTIVATE ACC buffer -> UB staging (bias, per-channel requantization, ReLU)
//       for image i, for output row oy: STORE staging rows oy*wq .. + wo_stored -> host
#include "tpuw/runtime/conv.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <numeric>

#include "conv_emit.h"
#include "program_builder.h"
#include "tpuw/activate.h"
#include "tpuw/checked.h"
#include "tpuw/error.h"
#include "tpuw/nn/quantize.h"
#include "tpuw/runtime/maxpool.h"
#include "tpuw/runtime/maxpool_indices.h"

namespace tpuw::runtime {
namespace {

using detail::Builder;
using detail::dma_instr;
using detail::kC;
using detail::kL;
using detail::kS;
using detail::round_up;
using detail::split_transfer;
using detail::Transfer;

constexpr uint32_t kMaxWSlots = 1024;  // WB tile slots (all of them when the weights fit)
constexpr uint64_t kRingSlots = 32;    // WB slots streaming the weights that are not pinned
// Loads are placed this many compute instructions ahead of their first use: one strip of a 3x3
// layer is 9 * c_blocks LOADWs + 9 * c_blocks * images MATMULs, and the next tile's input must
// stream in while the last strip of the current one computes.
constexpr uint64_t kLookahead = 96;

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

}  // namespace

uint64_t ConvPlan::macs() const {
  return batch * ho * wo * geom.out_c * uint64_t{geom.in_c} * taps;
}

uint64_t ConvPlan::min_bytes() const {
  const uint64_t in = batch * geom.in_c * uint64_t{geom.in_h} * geom.in_w;
  const uint64_t w = uint64_t{geom.out_c} * geom.in_c * taps;
  const uint64_t out = batch * geom.out_c * ho * wo;
  return in + w + 4 * uint64_t{geom.out_c} + out;
}

bool ConvPlan::skipped(uint64_t tile) const {
  if (zero_tile.empty() || !zero_tile[tile]) return false;
  const uint64_t per_ob = taps * c_blocks;
  const uint64_t first = tile / per_ob * per_ob;
  if (tile != first) return true;
  for (uint64_t t = first; t < first + per_ob; ++t) {
    if (!zero_tile[t]) return true;
  }
  return false;  // every tile of the block is zero: the first one still runs
}

uint64_t ConvPlan::executed_tiles() const {
  uint64_t n = 0;
  for (uint64_t t = 0; t < weight_tiles; ++t) n += skipped(t) ? 0 : 1;
  return n;
}

uint64_t ConvPlan::w_bytes_moved() const {
  uint64_t loads = 0;
  for (uint64_t t = 0; t < weight_tiles; ++t) {
    if (!skipped(t)) loads += t < pinned_tiles ? 1 : tiles;
  }
  return loads * array_n * array_n;
}

void mark_zero_tiles(ConvPlan& p, std::span<const int8_t> packed) {
  detail::mark_zero_conv_tiles(p, packed, [](int8_t v) { return v == 0; });
}

ConvPlan plan_conv(const DeviceParams& params, const ConvGeometry& g, uint64_t batch, uint64_t extra_groups, bool lut) {
  g.check("conv");
  if (batch == 0 || batch > (uint64_t{1} << 24)) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("conv: batch {} must be in 1 .. 2^24", batch));
  }
  ConvPlan p;
  p.geom = g;
  p.batch = batch;
  p.array_n = params.array_n;
  p.beat = params.dma_data_w / 8;
  p.extra_groups = extra_groups;
  p.lut_rows = lut ? lut_rows(params.array_n) : 0;
  const uint64_t an = p.array_n;
  if (an == 0 || p.beat == 0 || (an * an) % std::lcm<uint64_t>(an, p.beat) != 0) {
    throw Error(ErrorKind::kUnsupported, fmt::format("conv: array size {} with a {}-byte DMA beat", an, p.beat));
  }
  const uint64_t m_align = std::lcm<uint64_t>(an, p.beat) / an;  // UB rows per DMA unit
  p.hp = uint64_t{g.in_h} + g.pad_top + g.pad_bottom;
  p.wp = uint64_t{g.in_w} + g.pad_left + g.pad_right;
  p.hq = ceil_div(p.hp, g.stride_h);
  p.wq = ceil_div(p.wp, g.stride_w);
  p.phases = uint64_t{g.stride_h} * g.stride_w;
  p.ho = g.out_h();
  p.wo = g.out_w();
  p.wo_stored = round_up(p.wo, m_align);
  p.c_blocks = ceil_div(g.in_c, an);
  p.o_blocks = ceil_div(g.out_c, an);
  p.taps = uint64_t{g.kernel_h} * g.kernel_w;
  p.acc_rows = (p.ho - 1) * p.wq + p.wo_stored;
  uint64_t max_read = p.phases * p.hq * p.wq;
  p.tap_offset.resize(p.taps);
  for (uint64_t dy = 0; dy < g.kernel_h; ++dy) {
    for (uint64_t dx = 0; dx < g.kernel_w; ++dx) {
      const uint64_t ry = dy * g.dilation_h, rx = dx * g.dilation_w;
      const uint64_t phase = (ry % g.stride_h) * g.stride_w + rx % g.stride_w;
      const uint64_t off = phase * p.hq * p.wq + (ry / g.stride_h) * p.wq + rx / g.stride_w;
      p.tap_offset[dy * g.kernel_w + dx] = off;
      max_read = std::max(max_read, off + p.acc_rows);
    }
  }
  // A multiple of 8 DMA units keeps the input's host rows long (fewer, longer bursts).
  p.img_rows = round_up(max_read, 8 * m_align);

  // Images per tile: ACC strip buffers + the params; UB input buffers + staging buffers. Double
  // buffered (the next tile loads and the last strip stores while one computes) when one image
  // fits twice, single otherwise (correct either way: the tokens serialize the reuse).
  const uint64_t param_rows = p.param_rows_per_block() * p.o_blocks * (1 + p.extra_groups);
  const uint64_t acc_avail = params.acc_depth > param_rows ? params.acc_depth - param_rows : 0;
  const uint64_t by_rows = std::max<uint64_t>(detail::kMaxRowsField / (p.c_blocks * p.img_rows), 1);
  auto fit_with = [&](uint64_t bufs) {
    return std::min({acc_avail / (bufs * p.acc_rows), params.ub_depth / (bufs * (p.c_blocks * p.img_rows + p.acc_rows)),
                     by_rows});
  };
  p.buffers = fit_with(2) > 0 ? 2 : 1;
  const uint64_t fit = fit_with(p.buffers);
  if (fit == 0 || p.acc_rows > detail::kMaxRowsField) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("conv: one {}x{}x{} image does not fit on chip (needs {} ACC rows of {} and {} UB rows of "
                            "{}); spatial tiling is not implemented",
                            g.in_c, g.in_h, g.in_w, p.acc_rows + param_rows, params.acc_depth,
                            p.c_blocks * p.img_rows + p.acc_rows, params.ub_depth));
  }
  p.tiles = ceil_div(batch, fit);
  p.images_per_tile = ceil_div(batch, p.tiles);  // balanced
  p.weight_tiles = p.o_blocks * p.taps * p.c_blocks;
  p.w_slots = static_cast<uint32_t>(std::min<uint64_t>(params.wb_depth / an, kMaxWSlots));
  if (p.w_slots == 0) throw Error(ErrorKind::kUnsupported, fmt::format("conv: WB depth {} holds no tile", params.wb_depth));
  p.weights_resident = p.weight_tiles <= p.w_slots;
  // Otherwise the first tiles are pinned in the WB (loaded once) and the rest stream through a
  // ring of kRingSlots slots, once per tile of images.
  p.pinned_tiles = p.weights_resident ? p.weight_tiles : p.w_slots - std::min<uint64_t>(p.w_slots, kRingSlots);
  if (!p.weights_resident && p.pinned_tiles == p.w_slots) p.pinned_tiles = 0;
  const std::string what = "conv: packed image bytes";
  (void)checked_add(checked_add(checked_product({batch, p.c_blocks, p.img_rows, an}, what),
                                checked_product({batch, p.o_blocks, p.ho, p.wo_stored, an}, what), what),
                    checked_product({p.weight_tiles, an, an}, what), what);
  return p;
}

std::vector<int8_t> pack_conv_input(const ConvPlan& p, std::span<const int8_t> x, int8_t pad) {
  return detail::pack_conv_image(p, x, pad, "conv", [](int8_t v) { return v; });
}

std::vector<int8_t> pack_conv_weights(const ConvPlan& p, std::span<const int8_t> w_q) {
  return detail::pack_conv_tiles<int8_t>(p, w_q, "conv", [](int8_t v) { return v; });
}

std::vector<int32_t> pack_conv_params(const ConvPlan& p, const QConv2d& layer) {
  const uint64_t an = p.array_n;
  // Group k's rows for output block ob start at row (k * o_blocks + ob) * param_rows_per_block()
  // (group 0: the layer's): bias, mult, shift, then the lookup table if the layer has one.
  const uint64_t per = p.param_rows_per_block();
  std::vector<int32_t> out((1 + p.extra_groups) * p.o_blocks * per * an, 0);
  if ((p.lut_rows > 0) != !layer.lut.empty()) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("conv '{}': the plan and the layer disagree on the lookup table", layer.name));
  }
  std::vector<uint32_t> table_words;
  if (!layer.lut.empty()) {
    LutTable t{};
    std::copy(layer.lut.begin(), layer.lut.end(), t.begin());
    table_words = lut_acc_words(t, an);
  }
  const uint64_t oc = layer.geom.out_c;
  if (layer.extra_groups() != p.extra_groups) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("conv '{}': {} requantization groups, the plan has {}", layer.name,
                                                         layer.extra_groups(), p.extra_groups));
  }
  for (uint64_t k = 0; k <= p.extra_groups; ++k) {
    for (uint64_t o = 0; o < oc; ++o) {
      int32_t* rows = out.data() + (k * p.o_blocks + o / an) * per * an + o % an;
      const uint64_t gi = (k - 1) * oc + o;
      rows[0] = k == 0 ? layer.bias_q[o] : layer.group_bias[gi];
      rows[an] = k == 0 ? layer.mult[o] : layer.group_mult[gi];
      rows[2 * an] = k == 0 ? layer.shift[o] : layer.group_shift[gi];
    }
    for (uint64_t ob = 0; ob < p.o_blocks; ++ob) {
      int32_t* t = out.data() + ((k * p.o_blocks + ob) * per + 3) * an;
      for (size_t w = 0; w < table_words.size(); ++w) t[w] = static_cast<int32_t>(table_words[w]);
    }
  }
  return out;
}

std::vector<int8_t> unpack_conv_output(const ConvPlan& p, std::span<const int8_t> packed) {
  return detail::unpack_conv_image<int8_t>(p, packed, "conv", "bytes", [](int8_t v) { return v; });
}

void detail::check_host_addrs(const char* what, std::span<const uint64_t> addrs, uint64_t beat) {
  for (uint64_t addr : addrs) {
    if (addr % beat != 0 || addr >= (uint64_t{1} << 32)) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{}: host address 0x{:x} is not {}-byte aligned or above 4 GiB", what, addr, beat));
    }
  }
}

void detail::emit_input_tile(Builder& b, const ConvPlan& p, uint64_t elem, uint64_t beat, uint64_t in_addr,
                             uint64_t in_base, uint64_t img0, uint64_t nimg, uint64_t cb_first, uint64_t cb_end,
                             size_t r_in) {
  const uint64_t an = p.array_n, px = elem * an, kimg = p.images_per_tile;
  for (uint64_t cb = cb_first; cb < cb_end; ++cb) {
    const uint64_t host = in_addr + (cb * p.batch + img0) * p.img_rows * px;
    for (const Transfer& t :
         split_transfer(elem * (in_base + cb * kimg * p.img_rows), host, nimg * p.img_rows * px, an, beat)) {
      b.emit(kL, dma_instr(spec::Opcode::kLoad, spec::Mem::kUb, t), {}, {r_in});
    }
  }
}

ConvProgram detail::emit_conv(const ConvPlan& p, const ConvEmit& e, uint64_t in_addr, uint64_t w_addr,
                              uint64_t param_addr, uint64_t out_addr,
                              const std::function<void(Builder&, const ConvStrip&)>& end_strip) {
  const uint64_t an = p.array_n, beat = e.beat, kimg = p.images_per_tile;
  check_host_addrs(e.what, std::array{in_addr, w_addr, param_addr, out_addr}, beat);
  // In pixels: UB [input buffer 0 | input buffer 1 | staging 0 | staging 1]; ACC [strip 0 | strip 1 |
  // params] (one of each when plan.buffers == 1). UB and WB addresses are e.elem times the rows.
  const uint64_t in_buf_rows = p.c_blocks * kimg * p.img_rows;
  const uint64_t stage_rows = kimg * p.acc_rows;
  const uint64_t params_row = p.buffers * stage_rows;
  const uint64_t px = e.elem * an;  // bytes of a pixel (N channels) and of a weight tile row
  // Resources: WB slots, input buffers (2), staging (2), ACC strips (2), params.
  const size_t r_w = 0, r_in = p.w_slots, r_stage = r_in + 2, r_acc = r_stage + 2, r_par = r_acc + 2;
  Builder b(r_par + 1);

  for (const Transfer& t : split_transfer(params_row, param_addr, e.param_bytes, 4 * an, beat)) {
    b.emit(kL, dma_instr(spec::Opcode::kLoad, spec::Mem::kAcc, t), {}, {r_par});
  }
  std::vector<int64_t> slot_holds(p.w_slots, -1);
  uint64_t ring = 0, strip = 0;
  for (uint64_t tile = 0; tile < p.tiles; ++tile) {
    const uint64_t img0 = tile * kimg;
    const uint64_t nimg = std::min(kimg, p.batch - img0);
    const uint64_t ib = tile % p.buffers;
    const uint64_t in_base = ib * in_buf_rows;
    emit_input_tile(b, p, e.elem, beat, in_addr, in_base, img0, nimg, 0, p.c_blocks, r_in + ib);
    for (uint64_t ob = 0; ob < p.o_blocks; ++ob, ++strip) {
      const uint64_t sb = strip % p.buffers;
      const uint64_t acc_base = sb * stage_rows;
      const uint64_t stage_base = p.buffers * in_buf_rows + sb * stage_rows;
      bool first = true;
      for (uint64_t tap = 0; tap < p.taps; ++tap) {
        for (uint64_t cb = 0; cb < p.c_blocks; ++cb) {
          const uint64_t wt = (ob * p.taps + tap) * p.c_blocks + cb;
          if (p.skipped(wt)) continue;
          const uint64_t slot =
              wt < p.pinned_tiles ? wt : p.pinned_tiles + ring++ % (p.w_slots - p.pinned_tiles);
          if (slot_holds[slot] != static_cast<int64_t>(wt)) {
            const uint64_t src = e.wsrc != nullptr ? e.wsrc->tile[wt] : wt;
            for (const Transfer& t : split_transfer(slot * px, w_addr + src * an * px, an * px, an, beat)) {
              b.emit(kL, dma_instr(spec::Opcode::kLoad, spec::Mem::kWb, t), {}, {r_w + slot});
            }
            slot_holds[slot] = static_cast<int64_t>(wt);
          }
          isa::Instr lw = isa::make_instr(spec::Opcode::kLoadw);
          lw.set("wb_addr", slot * px);
          if (e.bf16) lw.set("bf16", 1);
          if (e.wsrc != nullptr && e.wsrc->transpose) lw.set("transpose", 1);
          b.emit(kC, std::move(lw), {r_w + slot}, {});
          for (uint64_t i = 0; i < nimg; ++i) {
            isa::Instr mm = isa::make_instr(spec::Opcode::kMatmul);
            if (e.bf16) mm.set("bf16", 1);
            mm.set("accumulate", first ? 0 : 1);
            mm.set("swap", i == 0 ? 1 : 0);
            mm.set("ub_addr", e.elem * (in_base + (cb * kimg + i) * p.img_rows + p.tap_offset[tap]));
            mm.set("acc_addr", acc_base + i * p.acc_rows);
            mm.set("rows", p.acc_rows);
            b.emit(kC, std::move(mm), {r_in + ib}, {r_acc + sb}, /*is_matmul=*/true);
          }
          first = false;
        }
      }
      end_strip(b, ConvStrip{ob, nimg, acc_base, stage_base, params_row, r_acc + sb, r_stage + sb, r_par});
      for (uint64_t i = 0; i < nimg; ++i) {
        const uint64_t host_img = out_addr + ((img0 + i) * p.o_blocks + ob) * p.ho * p.wo_stored * px;
        for (uint64_t oy = 0; oy < p.ho; ++oy) {
          for (const Transfer& t : split_transfer(e.elem * (stage_base + i * p.acc_rows + oy * p.wq),
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

ConvProgram compile_conv(const ConvPlan& p, bool relu, uint64_t in_addr, uint64_t w_addr, uint64_t param_addr,
                         uint64_t out_addr) {
  uint64_t activates = 0;
  const detail::ConvEmit e{"compile_conv", 1, p.beat, p.param_bytes(), false, nullptr};
  // A strip ends in one ACTIVATE per run of ACC rows that share a requantization group.
  const auto end_strip = [&](Builder& b, const detail::ConvStrip& s) {
    for (const ActivateRun& run : activate_runs(p, s.nimg)) {
      const uint64_t par = s.params_row + (run.group * p.o_blocks + s.ob) * p.param_rows_per_block();
      isa::Instr act = isa::make_instr(spec::Opcode::kActivate);
      act.set("relu", relu ? 1 : 0);
      act.set("bias", 1);
      if (p.lut_rows > 0) act.set("lut", 1);
      act.set("acc_addr", s.acc_base + run.row);
      act.set("ub_addr", s.stage_base + run.row);
      act.set("rows", run.rows);
      act.set("bias_addr", par);
      act.set("qparam_addr", par + 1);
      b.emit(kC, std::move(act), {s.r_acc, s.r_par}, {s.r_stage});
      ++activates;
    }
  };
  ConvProgram prog = detail::emit_conv(p, e, in_addr, w_addr, param_addr, out_addr, end_strip);
  prog.activates = activates;
  return prog;
}

ConvRunResult run_conv2d(Device& device, const QConv2d& layer, std::span<const int8_t> x, uint64_t batch) {
  layer.check();
  ConvRunResult r;
  r.plan = plan_conv(device.info().params, layer.geom, batch, layer.extra_groups(), !layer.lut.empty());
  set_pixel_groups(r.plan, layer);
  const ConvPlan& p = r.plan;
  const std::vector<int8_t> xin = pack_conv_input(p, x);
  const std::vector<int8_t> wp = pack_conv_weights(p, layer.w_q);
  const std::vector<int32_t> pp = pack_conv_params(p, layer);
  detail::run_conv_program(
      device, r, batch, xin, wp, pp, p.min_bytes(), mark_zero_tiles,
      [&](uint64_t in, uint64_t w, uint64_t par, uint64_t out) { return compile_conv(p, layer.relu, in, w, par, out); },
      unpack_conv_output);
  return r;
}

CnnRunResult run_cnn(Device& device, const nn::QCnn& net, std::span<const int8_t> x_q, uint64_t batch) {
  net.check();
  if (x_q.size() != batch * net.input_row()) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("cnn: input has {} values, expected batch {} x {}", x_q.size(), batch, net.input_row()));
  }
  CnnRunResult r;
  auto out = [&](size_t k) -> const std::vector<int8_t>& { return r.convs[k].y; };
  std::vector<int8_t> a;
  for (size_t li = 0; li < net.convs.size(); ++li) {
    const QConv2d& l = net.convs[li];
    // Its input in host memory: the previous map, or its sources' maps side by side (a residual
    // Add or a Concat reads the channel concatenation).
    a = nn::cnn_layer_input(net, li, x_q, out, batch);
    if (l.max_pool && !max_pool_on_device(device.info())) {
      // No VECTOR unit (FEATURES.BF16): the max pool runs on the host, exact.
      ConvRunResult h;
      h.host = true;
      h.plan.geom = l.geom;
      h.plan.batch = batch;
      const auto t0 = std::chrono::steady_clock::now();
      h.y = nn::conv2d_int(l, a, batch);
      if (l.indices) h.indices = max_pool_indices_host<int8_t>(l.geom, a, batch, l.indices_column_major);
      h.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      r.convs.push_back(std::move(h));
      continue;
    }
    if (l.indices) {
      MaxPoolIndicesRun ri = run_max_pool_indices(device, l, a, batch, l.indices_column_major);
      ri.values.indices = std::move(ri.indices);
      r.convs.push_back(std::move(ri.values));
    } else {
      r.convs.push_back(l.max_pool ? run_max_pool(device, l, a, batch) : run_conv2d(device, l, a, batch));
    }
    const ConvRunResult& c = r.convs.back();
    r.cycles += c.cycles;
    r.macs += l.max_pool ? 0 : conv_weight_macs(l.geom, batch, std::span<const int8_t>(l.w_q));  // a max pool: none
    r.moved_bytes += c.moved_bytes;
    r.min_bytes += c.min_bytes;
  }
  const std::vector<int8_t>& last = r.convs.back().y;
  if (!net.has_head()) {
    r.output_i32.assign(last.begin(), last.end());  // the last feature map is the output
  } else {
    r.head = run_network(device, net.head, nn::cnn_head_input(net, x_q, last, batch), batch);
    r.output_i32 = r.head.output_i32;
  }
  detail::add_cnn_head(r, device.info().params.array_n);
  return r;
}

}  // namespace tpuw::runtime
