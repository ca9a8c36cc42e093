// bf16 convolution as an implicit GEMM on the device and whole bf16 CNNs (tpuw/runtime/conv_bf16.h).
//
// Sequential meaning of a layer's program (the int8 convolution's, runtime/conv.cpp, with bf16
// row pairs; program_builder.h derives the tokens). Rows below count pixels; UB and WB addresses
// are twice that (a bf16 pixel or weight row is a row pair):
//   LOAD ACC bias <- one fp32 row per output block (and pixel group), once
//   for tile t (images_per_tile images; UB input buffer t%2):
//     for channel block cb: LOAD UB input buffer <- the tile's images of block cb
//     for output block ob (strip s; ACC buffer s%2, UB staging s%2):
//       for tap, for cb (weight tile (ob, tap, cb), all-zero tiles skipped):
//         [LOAD WB slot <- tile, unless it is resident there]
//         LOADW bf16 slot
//         for image i: MATMUL bf16 UB pixels (image i, cb) + tap_offset[tap] -> ACC rows of image i,
//                      swap = (i == 0), accumulate = not the first executed tile
//       [pixel groups: VECTOR SCALE in place per run of ACC rows that share a group (activate_runs),
//        by the group's fp32 scale unless it is 1]
//       ACTIVATE bf16 ACC buffer -> UB staging (fp32 bias, ReLU, round to bf16); with groups whose
//       bias rows differ (a Pad's constant border) one ACTIVATE per run with its group's row
//       for image i, for output row oy: STORE staging pixels oy*wq .. + wo_stored -> host
#include "tpuw/runtime/conv_bf16.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "conv_emit.h"
#include "program_builder.h"
#include "tpuw/error.h"
#include "tpuw/numerics.h"
#include "tpuw/runtime/gemm_bf16.h"
#include "tpuw/runtime/maxpool.h"
#include "tpuw/runtime/maxpool_indices.h"
#include "tpuw/runtime/vector_functions.h"

namespace tpuw::runtime {
namespace {

using detail::Builder;
using detail::kC;

void require_bf16(const Device& device, const char* what) {
  if ((device.info().features & spec::reg::kFeaturesBf16) == 0) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("{}: the {} device has no bf16 mode (FEATURES.BF16 is 0: built without EnableBf16); use "
                            "int8",
                            what, device.info().backend));
  }
}

// The max pool of the contract: the max of the window's inputs inside the image; NaN if one is NaN.
std::vector<float> max_pool_host(const Bf16ConvLayer& l, std::span<const float> x, uint64_t batch) {
  const nn::ConvGeometry& g = l.geom;
  const uint64_t C = g.in_c, H = g.in_h, W = g.in_w, Ho = g.out_h(), Wo = g.out_w();
  if (x.size() != batch * C * H * W) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("bf16 max pool '{}': input has {} values, expected {}", l.name,
                                                         x.size(), batch * C * H * W));
  }
  std::vector<float> y(batch * C * Ho * Wo);
  for (uint64_t bc = 0; bc < batch * C; ++bc) {
    const float* img = x.data() + bc * H * W;
    for (uint64_t oy = 0; oy < Ho; ++oy) {
      for (uint64_t ox = 0; ox < Wo; ++ox) {
        float m = -std::numeric_limits<float>::infinity();
        bool nan = false;
        for (uint64_t dy = 0; dy < g.kernel_h; ++dy) {
          const int64_t iy = static_cast<int64_t>(oy * g.stride_h + dy * g.dilation_h) - g.pad_top;
          if (iy < 0 || iy >= static_cast<int64_t>(H)) continue;
          for (uint64_t dx = 0; dx < g.kernel_w; ++dx) {
            const int64_t ix = static_cast<int64_t>(ox * g.stride_w + dx * g.dilation_w) - g.pad_left;
            if (ix < 0 || ix >= static_cast<int64_t>(W)) continue;
            const float v = img[static_cast<uint64_t>(iy) * W + static_cast<uint64_t>(ix)];
            nan = nan || std::isnan(v);
            m = std::max(m, v);
          }
        }
        y[(bc * Ho + oy) * Wo + ox] = nan ? num::to_float(num::kF32Nan) : m;
      }
    }
  }
  return y;
}

std::vector<float> bf16_values(std::span<const float> x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = bf16::round(x[i]);
  return r;
}

}  // namespace

ConvPlan plan_conv_bf16(const DeviceParams& params, const ConvGeometry& geom, uint64_t batch, uint64_t groups) {
  // In pixels: the UB and WB hold half as many bf16 rows; a DMA unit of lcm(2N, beat) bytes is
  // lcm(N, beat/2)/N pixels, which plan_conv computes from a beat of half the width.
  DeviceParams half = params;
  half.ub_depth = params.ub_depth / 2;
  half.wb_depth = params.wb_depth / 2;
  if (params.dma_data_w % 16 != 0) {
    throw Error(ErrorKind::kUnsupported, fmt::format("bf16 conv: a {}-bit DMA beat", params.dma_data_w));
  }
  half.dma_data_w = params.dma_data_w / 2;
  try {
    // plan_conv reserves 3 rows (int8: bias, mult, shift) per block and group; bf16 uses one.
    return plan_conv(half, geom, batch, groups > 1 ? groups - 1 : 0);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kUnsupported) throw;
    throw Error(ErrorKind::kUnsupported, fmt::format("bf16 {} (rows counted in bf16 pixels, a UB row pair each: half "
                                                     "the UB of int8)",
                                                     e.what()));
  }
}

uint64_t conv_bf16_in_bytes(const ConvPlan& p) { return 2 * p.in_bytes(); }
uint64_t conv_bf16_w_bytes(const ConvPlan& p) { return 2 * p.w_bytes(); }
uint64_t conv_bf16_param_bytes(const ConvPlan& p) { return (1 + p.extra_groups) * p.o_blocks * 4 * uint64_t{p.array_n}; }
uint64_t conv_bf16_out_bytes(const ConvPlan& p) { return 2 * p.out_bytes(); }
uint64_t conv_bf16_min_bytes(const ConvPlan& p) {
  const ConvGeometry& g = p.geom;
  const uint64_t in = p.batch * g.in_c * uint64_t{g.in_h} * g.in_w;
  const uint64_t w = uint64_t{g.out_c} * g.in_c * p.taps;
  const uint64_t out = p.batch * g.out_c * p.ho * p.wo;
  return 2 * in + 2 * w + 4 * uint64_t{g.out_c} + 2 * out;
}

std::vector<uint16_t> pack_conv_bf16_input(const ConvPlan& p, std::span<const float> x, uint16_t pad) {
  return detail::pack_conv_image(p, x, pad, "bf16 conv", [](float v) { return num::bf16_from_float(v); });
}

std::vector<uint16_t> pack_conv_bf16_weights(const ConvPlan& p, std::span<const float> w) {
  return detail::pack_conv_tiles<uint16_t>(p, w, "bf16 conv", [](float v) { return num::bf16_from_float(v); });
}

void mark_zero_tiles_bf16(ConvPlan& p, std::span<const uint16_t> packed) {
  detail::mark_zero_conv_tiles(p, packed, [](uint16_t v) { return (v & 0x7FFFu) == 0; });
}

std::vector<float> unpack_conv_bf16_output(const ConvPlan& p, std::span<const uint16_t> packed) {
  return detail::unpack_conv_image<float>(p, packed, "bf16 conv", "elements",
                                          [](uint16_t v) { return num::bf16_to_float(v); });
}

ConvProgram compile_conv_bf16(const ConvPlan& p, bool relu, uint64_t in_addr, uint64_t w_addr, uint64_t bias_addr,
                              uint64_t out_addr, std::span<const float> group_scale, bool group_bias,
                              const ConvWeightSource* wsrc) {
  if (wsrc != nullptr && wsrc->tile.size() != p.weight_tiles) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("compile_conv_bf16: {} weight tile sources for {} tiles",
                                                         wsrc->tile.size(), p.weight_tiles));
  }
  const bool grouped = !p.pixel_group.empty();
  if (grouped ? group_scale.size() != p.extra_groups + 1 : (!group_scale.empty() || group_bias)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("compile_conv_bf16: {} group scales for a plan with {} pixel groups", group_scale.size(),
                            grouped ? p.extra_groups + 1 : 0));
  }
  const detail::ConvEmit e{"compile_conv_bf16", 2, 2 * uint64_t{p.beat}, conv_bf16_param_bytes(p), true, wsrc};
  return detail::emit_conv(p, e, in_addr, w_addr, bias_addr, out_addr, [&](Builder& b, const detail::ConvStrip& s) {
    // Pixel groups: the runs of ACC rows that share a group, each scaled in place (VECTOR SCALE).
    const std::vector<ActivateRun> strip_run{ActivateRun{0, s.nimg * p.acc_rows, 0}};
    const std::vector<ActivateRun> runs = grouped ? activate_runs(p, s.nimg) : strip_run;
    for (const ActivateRun& run : runs) {
      const float sc = grouped ? group_scale[run.group] : 1.0f;
      if (num::to_bits(sc) == num::to_bits(1.0f)) continue;
      isa::Instr v = isa::make_instr(spec::Opcode::kVector);
      v.set("op", static_cast<uint64_t>(spec::VecOp::kScale));
      v.set("dst_addr", s.acc_base + run.row);
      v.set("a_addr", s.acc_base + run.row);
      v.set("b_addr", s.acc_base + run.row);
      v.set("rows", run.rows);
      v.set("scalar", num::to_bits(sc));
      b.emit(kC, std::move(v), {s.r_acc}, {s.r_acc});
    }
    for (const ActivateRun& run : group_bias ? runs : strip_run) {
      isa::Instr act = isa::make_instr(spec::Opcode::kActivate);
      act.set("bf16", 1);
      act.set("relu", relu ? 1 : 0);
      act.set("bias", 1);
      act.set("acc_addr", s.acc_base + run.row);
      act.set("ub_addr", 2 * (s.stage_base + run.row));
      act.set("rows", run.rows);
      act.set("bias_addr", s.params_row + run.group * p.o_blocks + s.ob);
      b.emit(kC, std::move(act), {s.r_acc, s.r_par}, {s.r_stage});
    }
  });
}

ConvBf16RunResult run_conv2d_bf16(Device& device, const Bf16ConvLayer& layer, std::span<const float> x,
                                  uint64_t batch) {
  layer.check();
  ConvBf16RunResult r;
  if (layer.kind == Bf16ConvLayer::Kind::kMaxPool) {
    r.host = true;
    r.plan.geom = layer.geom;
    r.plan.batch = batch;
    const auto t0 = std::chrono::steady_clock::now();
    r.y = max_pool_host(layer, x, batch);
    r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }
  require_bf16(device, "bf16 convolution");
  r.plan = plan_conv_bf16(device.info().params, layer.geom, batch, layer.groups());
  r.plan.pixel_group = layer.pixel_group;
  const ConvPlan& p = r.plan;
  const std::vector<uint16_t> xin = pack_conv_bf16_input(p, x);
  const std::vector<uint16_t> wp = pack_conv_bf16_weights(p, layer.w);
  // One bias row per output block, per group with pixel groups (group g, block ob: row g * o_blocks + ob).
  const uint64_t O = layer.geom.out_c, groups = std::max<uint64_t>(layer.groups(), 1);
  std::vector<float> bias(groups * p.o_blocks * p.array_n, 0.0f);
  for (uint64_t g = 0; g < groups; ++g) {
    const float* src = layer.pixel_group.empty() ? layer.bias.data() : layer.group_bias.data() + g * O;
    std::copy(src, src + O, bias.begin() + static_cast<ptrdiff_t>(g * p.o_blocks * p.array_n));
  }
  // A run-wise ACTIVATE only when the groups' bias rows differ (a Pad's constant border).
  bool group_bias = false;
  for (uint64_t i = 0; i < (groups - 1) * O && !layer.pixel_group.empty(); ++i) {
    group_bias = group_bias || num::to_bits(layer.group_bias[O + i]) != num::to_bits(layer.group_bias[i % O]);
  }
  detail::run_conv_program(
      device, r, batch, xin, wp, bias, conv_bf16_min_bytes(p), mark_zero_tiles_bf16,
      [&](uint64_t in, uint64_t w, uint64_t par, uint64_t out) {
        return compile_conv_bf16(p, layer.relu, in, w, par, out, layer.group_scale, group_bias);
      },
      unpack_conv_bf16_output);
  return r;
}

std::vector<float> conv2d_bf16_host(const Bf16ConvLayer& layer, std::span<const float> x, uint64_t batch,
                                    uint32_t array_n) {
  layer.check();
  if (layer.kind == Bf16ConvLayer::Kind::kMaxPool) return max_pool_host(layer, x, batch);
  const ConvGeometry& g = layer.geom;
  const uint64_t C = g.in_c, H = g.in_h, W = g.in_w, O = g.out_c, Ho = g.out_h(), Wo = g.out_w();
  const uint64_t an = array_n, T = uint64_t{g.kernel_h} * g.kernel_w;
  const uint64_t cbs = (C + an - 1) / an, obs = (O + an - 1) / an, cp = cbs * an;
  if (an == 0) throw Error(ErrorKind::kInvalidArgument, "bf16 conv: array_n 0");
  if (x.size() != batch * C * H * W) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("bf16 conv '{}': input has {} values, expected {}", layer.name,
                                                         x.size(), batch * C * H * W));
  }
  // Weights as the device holds them: bf16 bits [o][tap][c] with c padded to cb blocks (+0).
  std::vector<uint16_t> w(O * T * cp, 0);
  for (uint64_t o = 0; o < O; ++o) {
    for (uint64_t c = 0; c < C; ++c) {
      for (uint64_t t = 0; t < T; ++t) w[(o * T + t) * cp + c] = num::bf16_from_float(layer.w[(o * C + c) * T + t]);
    }
  }
  // The tiles the device runs (mark_zero_tiles_bf16 + ConvPlan::skipped).
  std::vector<uint8_t> run(obs * T * cbs, 0);
  for (uint64_t ob = 0; ob < obs; ++ob) {
    bool any = false;
    for (uint64_t t = 0; t < T; ++t) {
      for (uint64_t cb = 0; cb < cbs; ++cb) {
        bool zero = true;
        for (uint64_t o = ob * an; o < std::min(O, (ob + 1) * an) && zero; ++o) {
          for (uint64_t k = 0; k < an && zero; ++k) zero = (w[(o * T + t) * cp + cb * an + k] & 0x7FFFu) == 0;
        }
        run[(ob * T + t) * cbs + cb] = zero ? 0 : 1;
        any = any || !zero;
      }
    }
    if (!any) run[ob * T * cbs] = 1;  // an all-zero block still runs its first tile
  }
  const std::vector<uint16_t> xb = [&] {
    std::vector<uint16_t> v(x.size());
    for (size_t i = 0; i < x.size(); ++i) v[i] = num::bf16_from_float(x[i]);
    return v;
  }();
  std::vector<float> y(batch * O * Ho * Wo);
  std::vector<uint16_t> col(cp);  // the input pixel of one tap, channels padded with +0
  std::vector<uint32_t> acc(O);
  std::vector<uint8_t> started(O);
  for (uint64_t bi = 0; bi < batch; ++bi) {
    for (uint64_t oy = 0; oy < Ho; ++oy) {
      for (uint64_t ox = 0; ox < Wo; ++ox) {
        std::fill(started.begin(), started.end(), 0);
        for (uint64_t t = 0; t < T; ++t) {
          const uint64_t dy = t / g.kernel_w, dx = t % g.kernel_w;
          const int64_t iy = static_cast<int64_t>(oy * g.stride_h + dy * g.dilation_h) - g.pad_top;
          const int64_t ix = static_cast<int64_t>(ox * g.stride_w + dx * g.dilation_w) - g.pad_left;
          const bool inside = iy >= 0 && iy < static_cast<int64_t>(H) && ix >= 0 && ix < static_cast<int64_t>(W);
          std::fill(col.begin(), col.end(), uint16_t{0});
          if (inside) {
            for (uint64_t c = 0; c < C; ++c) {
              col[c] = xb[((bi * C + c) * H + static_cast<uint64_t>(iy)) * W + static_cast<uint64_t>(ix)];
            }
          }
          for (uint64_t o = 0; o < O; ++o) {
            const uint64_t ob = o / an;
            const uint16_t* wo = w.data() + (o * T + t) * cp;
            for (uint64_t cb = 0; cb < cbs; ++cb) {
              if (!run[(ob * T + t) * cbs + cb]) continue;
              uint32_t s = 0;  // +0
              for (uint64_t k = cb * an; k < (cb + 1) * an; ++k) s = num::mac_bf16(s, col[k], wo[k]);
              acc[o] = started[o] ? num::add(acc[o], s) : s;
              started[o] = 1;
            }
          }
        }
        // Pixel groups: one fp32 multiply by the group's scale (none when it is 1), its bias.
        const size_t grp = layer.pixel_group.empty() ? 0 : layer.pixel_group[oy * Wo + ox];
        const float* bias = layer.pixel_group.empty() ? layer.bias.data() : layer.group_bias.data() + grp * O;
        const uint32_t scale = layer.pixel_group.empty() ? num::to_bits(1.0f) : num::to_bits(layer.group_scale[grp]);
        for (uint64_t o = 0; o < O; ++o) {
          if (scale != num::to_bits(1.0f)) acc[o] = num::scale(acc[o], scale);
          const uint16_t v = num::activate_bf16(acc[o], num::to_bits(bias[o]), true, layer.relu);
          y[((bi * O + o) * Ho + oy) * Wo + ox] = num::bf16_to_float(v);
        }
      }
    }
  }
  return y;
}

namespace {

// A layer's input from its sources (Bf16ConvLayer::sources): the channel concatenation, per image,
// of the graph input (-1) or earlier layers' NCHW outputs. Host layout only: no arithmetic.
std::vector<float> gather_sources(const Bf16Cnn& net, const Bf16ConvLayer& l, const std::vector<float>& x0,
                                  const std::vector<std::vector<float>>& outs, uint64_t batch) {
  std::vector<float> in;
  in.reserve(batch * uint64_t{l.geom.in_c} * l.geom.in_h * l.geom.in_w);
  for (uint64_t b = 0; b < batch; ++b) {
    for (const int32_t s : l.sources) {
      const std::vector<float>& src = s < 0 ? x0 : outs.at(static_cast<size_t>(s));
      // Image input k: its part of the input row (the whole row for one input).
      const uint64_t row = s < 0 ? net.input_row() : src.size() / batch;
      const uint64_t off = s < 0 ? net.input_offset(static_cast<size_t>(-1 - s)) : 0;
      const uint64_t per = s < 0 ? net.input_features(static_cast<size_t>(-1 - s)) : row;
      in.insert(in.end(), src.begin() + static_cast<ptrdiff_t>(b * row + off),
                src.begin() + static_cast<ptrdiff_t>(b * row + off + per));
    }
  }
  return in;
}

// The dense head's input: the last map, or (Bf16Cnn::head_sources) the last map and vector inputs'
// parts of the input rows side by side. Host layout only.
std::vector<float> head_input(const Bf16Cnn& net, const std::vector<float>& x0, const std::vector<float>& last,
                              uint64_t batch) {
  if (net.head_sources.empty()) return last;
  std::vector<std::vector<float>> parts;
  for (const int32_t s : net.head_sources) {
    if (s >= 0) {
      parts.push_back(last);
    } else {
      const auto k = static_cast<size_t>(-1 - s);
      parts.push_back(nn::row_columns<float>(x0, batch, net.input_row(), net.input_offset(k), net.input_features(k)));
    }
  }
  return nn::rows_side_by_side(parts, batch);
}

void check_cnn_input(const Bf16Cnn& net, std::span<const float> x, uint64_t batch) {
  if (x.size() != batch * net.input_row()) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("bf16 CNN: input has {} values, expected batch {} x {}", x.size(),
                                                         batch, net.input_row()));
  }
}

}  // namespace

CnnBf16RunResult run_cnn_bf16(Device& device, const Bf16Cnn& net, std::span<const float> x, uint64_t batch) {
  net.check();
  check_cnn_input(net, x, batch);
  require_bf16(device, "bf16 CNN");
  CnnBf16RunResult r;
  const std::vector<float> x0 = bf16_values(x);
  std::vector<float> a = x0;
  std::vector<std::vector<float>> outs;  // every layer's output (a residual Add or Concat reads earlier ones)
  for (const Bf16ConvLayer& l : net.convs) {
    if (!l.sources.empty()) a = gather_sources(net, l, x0, outs, batch);
    // A max pool runs on the device (VECTOR MAX; run_cnn_bf16 already required FEATURES.BF16).
    if (l.indices) {
      MaxPoolIndicesBf16Run ri = run_max_pool_bf16_indices(device, l, a, batch, l.indices_column_major);
      ri.values.indices = std::move(ri.indices);
      r.convs.push_back(std::move(ri.values));
    } else {
      r.convs.push_back(l.kind == Bf16ConvLayer::Kind::kMaxPool ? run_max_pool_bf16(device, l, a, batch)
                                                                 : run_conv2d_bf16(device, l, a, batch));
    }
    const ConvBf16RunResult& c = r.convs.back();
    a = c.y;
    if (!l.act.none()) {  // the function: one more program, VECTOR ops (vector_functions.h)
      VecPassResult v = run_vec_function_bf16(device, vec_function(l.act, false), a);
      a = v.y;
      r.cycles += v.cycles;
      r.moved_bytes += v.moved_bytes;
      r.min_bytes += v.min_bytes;
      r.vector_cycles += v.vector_cycles;
      r.functions.push_back(std::move(v));
    } else {
      r.functions.emplace_back();
    }
    outs.push_back(a);
    if (c.host) continue;
    r.cycles += c.cycles;
    r.macs += l.kind == Bf16ConvLayer::Kind::kMaxPool ? 0 : conv_weight_macs(l.geom, batch, std::span<const float>(l.w));
    r.moved_bytes += c.moved_bytes;
    r.min_bytes += c.min_bytes;
  }
  if (net.head.layers.empty()) {  // the feature map is the output
    r.output = std::move(a);
  } else {
    r.head = run_network_bf16(device, net.head, head_input(net, x0, a, batch), batch);
    r.output = r.head.output;
  }
  detail::add_cnn_head(r, device.info().params.array_n);
  return r;
}

std::vector<float> forward_cnn_bf16_host(const Bf16Cnn& net, std::span<const float> x, uint64_t batch,
                                         uint32_t array_n, std::vector<std::vector<float>>* layer_inputs) {
  net.check();
  check_cnn_input(net, x, batch);
  const std::vector<float> x0 = bf16_values(x);
  std::vector<float> a = x0;
  std::vector<std::vector<float>> outs;
  for (const Bf16ConvLayer& l : net.convs) {
    if (!l.sources.empty()) a = gather_sources(net, l, x0, outs, batch);
    if (layer_inputs != nullptr) layer_inputs->push_back(a);
    a = l.kind == Bf16ConvLayer::Kind::kMaxPool ? max_pool_bf16_host(l, a, batch, array_n)
                                                : conv2d_bf16_host(l, a, batch, array_n);
    if (!l.act.none()) a = vec_function_host(vec_function(l.act, false), a);
    outs.push_back(a);
  }
  return net.head.layers.empty() ? a : forward_bf16_host(net.head, head_input(net, x0, a, batch), batch, array_n);
}

}  // namespace tpuw::runtime
