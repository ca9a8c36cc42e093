// The backward pass of bf16 convolutions and pools (tpuw/runtime/conv_train_bf16.h).
#include "tpuw/runtime/conv_train_bf16.h"

#include <fmt/format.h>

#include <cmath>

#include "program_builder.h"
#include "train_programs.h"
#include "tpuw/error.h"
#include "tpuw/numerics.h"

namespace tpuw::runtime {
namespace {

void check_size(std::span<const float> v, uint64_t want, const Bf16ConvLayer& l, const char* what) {
  if (v.size() != want) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("conv backward '{}': {} has {} values, expected {}", l.name, what, v.size(), want));
  }
}

int64_t transposed_pad(uint32_t dil, uint32_t k, uint32_t pad, const Bf16ConvLayer& l, const char* side) {
  const int64_t p = int64_t{dil} * (int64_t{k} - 1) - pad;
  if (p < 0) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("conv backward '{}': padding {} {} is larger than the dilated kernel extent {}; the "
                            "transposed convolution would need a negative padding",
                            l.name, side, pad, int64_t{dil} * (int64_t{k} - 1)));
  }
  return p;
}

void require_conv(const Bf16ConvLayer& l, const char* what) {
  l.check();
  if (l.kind != Bf16ConvLayer::Kind::kConv) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{} '{}': not a convolution", what, l.name));
  }
}

// One dimension of the phase decomposition: the taps k of the transposed kernel (size K, dilation
// d, pad pt, stride s) that land on dy for output phase p, as (first, step) with the dy offset of
// the first (`base`, <= 0 needed) and the count.
struct PhaseDim {
  uint64_t first = 0, count = 0, dil = 1;
  int64_t base = 0;
};
PhaseDim phase_dim(uint64_t p, uint64_t s, uint64_t d, uint64_t K, int64_t pt) {
  PhaseDim r;
  int64_t prev = -1;
  for (uint64_t k = 0; k < K; ++k) {
    const int64_t a = static_cast<int64_t>(p) - pt + static_cast<int64_t>(k * d);
    if (((a % static_cast<int64_t>(s)) + static_cast<int64_t>(s)) % static_cast<int64_t>(s) != 0) continue;
    if (r.count == 0) {
      r.first = k;
      r.base = (a - (((a % static_cast<int64_t>(s)) + static_cast<int64_t>(s)) % static_cast<int64_t>(s))) /
               static_cast<int64_t>(s);
    } else if (r.count == 1) {
      r.dil = (k - static_cast<uint64_t>(prev)) * d / s;
    }
    prev = static_cast<int64_t>(k);
    ++r.count;
  }
  return r;
}

}  // namespace

namespace detail {

std::vector<InputGradPhase> conv_input_grad_phases(const Bf16ConvLayer& fwd) {
  const nn::ConvGeometry& g = fwd.geom;
  if (g.stride_h == 1 && g.stride_w == 1) return {};
  const Bf16ConvLayer t = conv_input_grad_layer(fwd);
  const nn::ConvGeometry& tg = t.geom;
  const uint64_t ho = g.out_h(), wo = g.out_w(), C = g.in_c, O = g.out_c, KH = g.kernel_h, KW = g.kernel_w;
  std::vector<InputGradPhase> out;
  for (uint32_t py = 0; py < g.stride_h; ++py) {
    for (uint32_t px = 0; px < g.stride_w; ++px) {
      InputGradPhase ph;
      ph.py = py;
      ph.px = px;
      ph.rows = (g.in_h - py + g.stride_h - 1) / g.stride_h;
      ph.cols = (g.in_w - px + g.stride_w - 1) / g.stride_w;
      const PhaseDim dh = phase_dim(py, g.stride_h, g.dilation_h, KH, tg.pad_top);
      const PhaseDim dw = phase_dim(px, g.stride_w, g.dilation_w, KW, tg.pad_left);
      if (ph.rows == 0 || ph.cols == 0 || dh.count == 0 || dw.count == 0) {
        ph.empty = true;
        out.push_back(std::move(ph));
        continue;
      }
      if (dh.base > 0 || dw.base > 0) return {};
      Bf16ConvLayer& l = ph.layer;
      l.name = fmt::format("{}.phase{}{}", t.name, py, px);
      l.kind = Bf16ConvLayer::Kind::kConv;
      nn::ConvGeometry& pg = l.geom;
      pg.in_c = static_cast<uint32_t>(O);
      pg.out_c = static_cast<uint32_t>(C);
      pg.in_h = static_cast<uint32_t>(ho);
      pg.in_w = static_cast<uint32_t>(wo);
      pg.kernel_h = static_cast<uint32_t>(dh.count);
      pg.kernel_w = static_cast<uint32_t>(dw.count);
      pg.dilation_h = static_cast<uint32_t>(dh.dil);
      pg.dilation_w = static_cast<uint32_t>(dw.dil);
      pg.stride_h = pg.stride_w = 1;
      pg.pad_top = static_cast<uint32_t>(-dh.base);
      pg.pad_left = static_cast<uint32_t>(-dw.base);
      // Enough output rows / columns (extra ones are dropped), and a padded input the kernel fits.
      const int64_t eh = static_cast<int64_t>(ho) - dh.base - static_cast<int64_t>(dh.dil * (dh.count - 1));
      const int64_t ew = static_cast<int64_t>(wo) - dw.base - static_cast<int64_t>(dw.dil * (dw.count - 1));
      pg.pad_bottom = static_cast<uint32_t>(std::max<int64_t>(0, static_cast<int64_t>(ph.rows) - eh));
      pg.pad_right = static_cast<uint32_t>(std::max<int64_t>(0, static_cast<int64_t>(ph.cols) - ew));
      for (uint64_t a = 0; a < dh.count; ++a) {
        for (uint64_t b = 0; b < dw.count; ++b) {
          const uint64_t ky = dh.first + a * dh.dil * g.stride_h / g.dilation_h;
          const uint64_t kx = dw.first + b * dw.dil * g.stride_w / g.dilation_w;
          ph.fwd_tap.push_back((KH - 1 - ky) * KW + (KW - 1 - kx));  // the transposed kernel is flipped
        }
      }
      l.w.assign(C * O * dh.count * dw.count, 0.0f);
      for (uint64_t co = 0; co < C * O; ++co) {
        for (uint64_t a = 0; a < dh.count; ++a) {
          for (uint64_t b = 0; b < dw.count; ++b) {
            const uint64_t ky = dh.first + a * dh.dil * g.stride_h / g.dilation_h;
            const uint64_t kx = dw.first + b * dw.dil * g.stride_w / g.dilation_w;
            l.w[(co * dh.count + a) * dw.count + b] = t.w[(co * KH + ky) * KW + kx];
          }
        }
      }
      l.bias.assign(C, 0.0f);
      l.relu = false;
      l.check();
      out.push_back(std::move(ph));
    }
  }
  return out;
}

void place_input_grad_phase(const Bf16ConvLayer& fwd, const InputGradPhase& ph, std::span<const float> y,
                            uint64_t batch, std::span<float> dx) {
  const nn::ConvGeometry& g = fwd.geom;
  const uint64_t C = g.in_c, H = g.in_h, W = g.in_w;
  if (ph.empty) {
    for (uint64_t bc = 0; bc < batch * C; ++bc) {
      for (uint64_t j = 0; j < ph.rows; ++j) {
        for (uint64_t i = 0; i < ph.cols; ++i) dx[(bc * H + ph.py + j * g.stride_h) * W + ph.px + i * g.stride_w] = 0.0f;
      }
    }
    return;
  }
  const uint64_t yh = ph.layer.geom.out_h(), yw = ph.layer.geom.out_w();
  for (uint64_t bc = 0; bc < batch * C; ++bc) {
    for (uint64_t j = 0; j < ph.rows; ++j) {
      for (uint64_t i = 0; i < ph.cols; ++i) {
        dx[(bc * H + ph.py + j * g.stride_h) * W + ph.px + i * g.stride_w] = y[(bc * yh + j) * yw + i];
      }
    }
  }
}

Bf16GemmSpec conv_param_grad_spec(const Bf16ConvLayer& l, uint64_t batch) {
  const nn::ConvGeometry& g = l.geom;
  Bf16GemmSpec s;
  s.shape.m = uint64_t{g.in_c} * g.kernel_h * g.kernel_w + 1;
  s.shape.k = batch * g.out_h() * g.out_w();
  s.shape.n = g.out_c;
  s.trans_a = true;
  return s;
}

void split_conv_param_grads(const Bf16ConvLayer& l, std::span<const float> gm, ConvParamGradResult& r) {
  const nn::ConvGeometry& g = l.geom;
  const uint64_t O = g.out_c, CT = uint64_t{g.in_c} * g.kernel_h * g.kernel_w;
  r.dw.assign(O * CT, 0.0f);
  r.db.assign(O, 0.0f);
  for (uint64_t o = 0; o < O; ++o) {
    for (uint64_t ct = 0; ct < CT; ++ct) r.dw[o * CT + ct] = gm[ct * O + o];
    r.db[o] = gm[CT * O + o];
  }
}

Bf16ConvLayer conv_input_grad_geometry(const Bf16ConvLayer& fwd) {
  fwd.check();
  if (fwd.kind == Bf16ConvLayer::Kind::kMaxPool) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("conv backward '{}': a max pool's gradient is routed (max_pool_backward_bf16)", fwd.name));
  }
  const nn::ConvGeometry& g = fwd.geom;
  const uint32_t ho = g.out_h(), wo = g.out_w();
  Bf16ConvLayer t;
  t.name = fwd.name + ".dx";
  t.kind = Bf16ConvLayer::Kind::kConv;
  nn::ConvGeometry& tg = t.geom;
  tg.in_c = g.out_c;
  tg.in_h = (ho - 1) * g.stride_h + 1;
  tg.in_w = (wo - 1) * g.stride_w + 1;
  tg.out_c = g.in_c;
  tg.kernel_h = g.kernel_h;
  tg.kernel_w = g.kernel_w;
  tg.dilation_h = g.dilation_h;
  tg.dilation_w = g.dilation_w;
  tg.pad_top = static_cast<uint32_t>(transposed_pad(g.dilation_h, g.kernel_h, g.pad_top, fwd, "top"));
  tg.pad_left = static_cast<uint32_t>(transposed_pad(g.dilation_w, g.kernel_w, g.pad_left, fwd, "left"));
  // out = in + top + bottom - d*(k-1) must be H: bottom = H - 1 + pad_top - (Ho-1)*stride (>= 0 always,
  // since (Ho-1)*stride <= H + pads - d*(k-1) - 1 and top >= 0 above).
  const int64_t bottom = int64_t{g.in_h} - 1 + g.pad_top - int64_t{ho - 1} * g.stride_h;
  const int64_t right = int64_t{g.in_w} - 1 + g.pad_left - int64_t{wo - 1} * g.stride_w;
  if (bottom < 0 || right < 0) {
    throw Error(ErrorKind::kInternal, fmt::format("conv backward '{}': negative transposed padding", fwd.name));
  }
  tg.pad_bottom = static_cast<uint32_t>(bottom);
  tg.pad_right = static_cast<uint32_t>(right);
  t.bias.assign(g.in_c, 0.0f);
  t.relu = false;
  return t;
}

}  // namespace detail

Bf16ConvLayer conv_input_grad_layer(const Bf16ConvLayer& fwd) {
  Bf16ConvLayer t = detail::conv_input_grad_geometry(fwd);
  const nn::ConvGeometry& g = fwd.geom;
  const uint64_t C = g.in_c, O = g.out_c, KH = g.kernel_h, KW = g.kernel_w;
  t.w.assign(C * O * KH * KW, 0.0f);
  for (uint64_t o = 0; o < O; ++o) {
    for (uint64_t c = 0; c < C; ++c) {
      for (uint64_t ky = 0; ky < KH; ++ky) {
        for (uint64_t kx = 0; kx < KW; ++kx) {
          t.w[((c * O + o) * KH + ky) * KW + kx] = fwd.w[((o * C + c) * KH + (KH - 1 - ky)) * KW + (KW - 1 - kx)];
        }
      }
    }
  }
  return t;
}

std::vector<float> insert_grad_zeros(const Bf16ConvLayer& fwd, std::span<const float> dy, uint64_t batch) {
  const nn::ConvGeometry& g = fwd.geom;
  const uint64_t O = g.out_c, ho = g.out_h(), wo = g.out_w();
  check_size(dy, batch * O * ho * wo, fwd, "the output gradient");
  if (g.stride_h == 1 && g.stride_w == 1) return {dy.begin(), dy.end()};
  const uint64_t zh = (ho - 1) * g.stride_h + 1, zw = (wo - 1) * g.stride_w + 1;
  std::vector<float> z(batch * O * zh * zw, 0.0f);
  for (uint64_t bo = 0; bo < batch * O; ++bo) {
    for (uint64_t oy = 0; oy < ho; ++oy) {
      for (uint64_t ox = 0; ox < wo; ++ox) {
        z[(bo * zh + oy * g.stride_h) * zw + ox * g.stride_w] = dy[(bo * ho + oy) * wo + ox];
      }
    }
  }
  return z;
}

namespace detail {

Bf16ConvLayer tap_lane_layer(const Bf16ConvLayer& l) {
  require_conv(l, "tap lanes");
  if (l.geom.in_c != 1) {
    throw Error(ErrorKind::kInternal, fmt::format("tap lanes of '{}': {} input channels, not 1", l.name, l.geom.in_c));
  }
  Bf16ConvLayer t;
  t.name = l.name;
  t.kind = Bf16ConvLayer::Kind::kConv;
  t.geom.in_c = l.geom.kernel_h * l.geom.kernel_w;
  t.geom.in_h = l.geom.out_h();
  t.geom.in_w = l.geom.out_w();
  t.geom.out_c = l.geom.out_c;
  t.geom.kernel_h = t.geom.kernel_w = 1;
  t.w = l.w;  // [O][1][KH][KW] is [O][taps][1][1]
  t.bias = l.bias;
  t.relu = l.relu;
  return t;
}
std::vector<float> tap_lane_input(const Bf16ConvLayer& l, std::span<const float> x, uint64_t rows) {
  const ConvGeometry& g = l.geom;
  const uint64_t H = g.in_h, W = g.in_w, ho = g.out_h(), wo = g.out_w(), KW = g.kernel_w,
                 T = uint64_t{g.kernel_h} * KW;
  check_size(x, rows * H * W, l, "the input");
  std::vector<float> o(rows * T * ho * wo, 0.0f);  // +0 outside the image, as the padding
  for (uint64_t b = 0; b < rows; ++b) {
    for (uint64_t t = 0; t < T; ++t) {
      float* dst = o.data() + (b * T + t) * ho * wo;
      for (uint64_t oy = 0; oy < ho; ++oy) {
        const int64_t iy = static_cast<int64_t>(oy * g.stride_h + (t / KW) * g.dilation_h) - g.pad_top;
        if (iy < 0 || iy >= static_cast<int64_t>(H)) continue;
        for (uint64_t ox = 0; ox < wo; ++ox) {
          const int64_t ix = static_cast<int64_t>(ox * g.stride_w + (t % KW) * g.dilation_w) - g.pad_left;
          if (ix < 0 || ix >= static_cast<int64_t>(W)) continue;
          dst[oy * wo + ox] = x[(b * H + static_cast<uint64_t>(iy)) * W + static_cast<uint64_t>(ix)];
        }
      }
    }
  }
  return o;
}


ConvInputGradResult conv_input_grad_cached(TrainProgramCache& cache, uint64_t slot, const Bf16ConvLayer& fwd,
                                           std::span<const float> dy, uint64_t batch, uint64_t* macs,
                                           uint64_t fwd_slot) {
  ConvInputGradResult r;
  if (const std::vector<InputGradPhase> phases = conv_input_grad_phases(fwd); !phases.empty()) {
    check_size(dy, batch * fwd.geom.out_c * fwd.geom.out_h() * fwd.geom.out_w(), fwd, "the output gradient");
    r.dx.assign(batch * fwd.geom.in_c * fwd.geom.in_h * fwd.geom.in_w, 0.0f);
    uint64_t cycles = 0, m = 0;
    for (size_t i = 0; i < phases.size(); ++i) {
      const InputGradPhase& ph = phases[i];
      if (!ph.empty) {
        // The phase's taps read from the forward's uploaded tiles where there is a forward program.
        const uint64_t ps = slot + ((uint64_t{i} + 1) << 40);
        if (fwd_slot != kNoSlot && cache.conv_input_grad(ps, fwd_slot, fwd, ph.layer, dy, batch, r.run, ph.fwd_tap)) {
          r.host_bytes += 2 * dy.size();
        } else {
          r.run = cache.conv(ps, ph.layer, dy, batch);
          r.host_bytes += 2 * (dy.size() + ph.layer.w.size());
        }
        cycles += r.run.cycles;
        m += r.run.plan.macs();
        place_input_grad_phase(fwd, ph, r.run.y, batch, r.dx);
      } else {
        place_input_grad_phase(fwd, ph, {}, batch, r.dx);
      }
    }
    r.host_bytes += 2 * r.dx.size();
    r.run.cycles = cycles;
    if (macs != nullptr) *macs = m;
    return r;
  }
  if (fwd_slot != kNoSlot) {
    const Bf16ConvLayer tg = conv_input_grad_geometry(fwd);
    const std::vector<float> z = insert_grad_zeros(fwd, dy, batch);
    if (cache.conv_input_grad(slot, fwd_slot, fwd, tg, z, batch, r.run)) {
      r.dx = r.run.y;
      r.host_bytes = 2 * z.size();  // no weights: the forward's, flipped and transposed by addressing
      if (macs != nullptr) *macs = r.run.plan.macs();
      return r;
    }
  }
  const Bf16ConvLayer t = conv_input_grad_layer(fwd);
  const std::vector<float> z = insert_grad_zeros(fwd, dy, batch);
  r.run = cache.conv(slot, t, z, batch);
  r.dx = r.run.y;
  r.host_bytes = 2 * (z.size() + t.w.size());
  if (macs != nullptr) *macs = r.run.plan.macs();
  return r;
}

}  // namespace detail

ConvInputGradResult conv_input_grad_bf16(Device& device, const Bf16ConvLayer& fwd, std::span<const float> dy,
                                         uint64_t batch) {
  detail::TrainProgramCache cache(device);
  return detail::conv_input_grad_cached(cache, 0, fwd, dy, batch, nullptr);
}

std::vector<float> conv_input_grad_bf16_host(const Bf16ConvLayer& fwd, std::span<const float> dy, uint64_t batch,
                                             uint32_t array_n) {
  const Bf16ConvLayer t = conv_input_grad_layer(fwd);
  return conv2d_bf16_host(t, insert_grad_zeros(fwd, dy, batch), batch, array_n);
}

std::vector<float> conv_im2col(const Bf16ConvLayer& fwd, std::span<const float> x, uint64_t batch) {
  require_conv(fwd, "conv backward");
  const nn::ConvGeometry& g = fwd.geom;
  const uint64_t C = g.in_c, H = g.in_h, W = g.in_w, ho = g.out_h(), wo = g.out_w();
  const uint64_t KH = g.kernel_h, KW = g.kernel_w, cols = C * KH * KW + 1;
  check_size(x, batch * C * H * W, fwd, "the input");
  std::vector<float> a(batch * ho * wo * cols, 0.0f);
  for (uint64_t b = 0; b < batch; ++b) {
    for (uint64_t oy = 0; oy < ho; ++oy) {
      for (uint64_t ox = 0; ox < wo; ++ox) {
        float* row = a.data() + ((b * ho + oy) * wo + ox) * cols;
        row[cols - 1] = 1.0f;
        for (uint64_t ky = 0; ky < KH; ++ky) {
          const int64_t iy = static_cast<int64_t>(oy * g.stride_h + ky * g.dilation_h) - g.pad_top;
          if (iy < 0 || iy >= static_cast<int64_t>(H)) continue;
          for (uint64_t kx = 0; kx < KW; ++kx) {
            const int64_t ix = static_cast<int64_t>(ox * g.stride_w + kx * g.dilation_w) - g.pad_left;
            if (ix < 0 || ix >= static_cast<int64_t>(W)) continue;
            for (uint64_t c = 0; c < C; ++c) {
              row[(c * KH + ky) * KW + kx] =
                  x[((b * C + c) * H + static_cast<uint64_t>(iy)) * W + static_cast<uint64_t>(ix)];
            }
          }
        }
      }
    }
  }
  return a;
}

std::vector<float> conv_grad_rows(const Bf16ConvLayer& fwd, std::span<const float> dy, uint64_t batch) {
  const nn::ConvGeometry& g = fwd.geom;
  const uint64_t O = g.out_c, hw = uint64_t{g.out_h()} * g.out_w();
  check_size(dy, batch * O * hw, fwd, "the output gradient");
  std::vector<float> d(batch * hw * O);
  for (uint64_t b = 0; b < batch; ++b) {
    for (uint64_t o = 0; o < O; ++o) {
      for (uint64_t p = 0; p < hw; ++p) d[(b * hw + p) * O + o] = dy[(b * O + o) * hw + p];
    }
  }
  return d;
}

ConvParamGradResult conv_param_grads_bf16(Device& device, const Bf16ConvLayer& fwd, std::span<const float> x,
                                          std::span<const float> dy, uint64_t batch) {
  const std::vector<float> a = conv_im2col(fwd, x, batch);
  const std::vector<float> d = conv_grad_rows(fwd, dy, batch);
  ConvParamGradResult r;
  r.gemm = gemm_bf16(device, detail::conv_param_grad_spec(fwd, batch), a, d);
  detail::split_conv_param_grads(fwd, r.gemm.c, r);
  r.host_bytes = 2 * (a.size() + d.size());
  return r;
}

ConvParamGradResult conv_param_grads_bf16_host(const Bf16ConvLayer& fwd, std::span<const float> x,
                                               std::span<const float> dy, uint64_t batch, uint32_t array_n) {
  std::vector<float> a = conv_im2col(fwd, x, batch);
  std::vector<float> d = conv_grad_rows(fwd, dy, batch);
  for (float& v : a) v = bf16::round(v);
  for (float& v : d) v = bf16::round(v);
  ConvParamGradResult r;
  detail::split_conv_param_grads(fwd, gemm_bf16_host(detail::conv_param_grad_spec(fwd, batch), array_n, a, d), r);
  return r;
}

std::vector<float> relu_backward_host(std::span<const float> y, std::span<const float> dy) {
  if (y.size() != dy.size()) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("relu backward: {} activations but {} gradients", y.size(), dy.size()));
  }
  std::vector<float> d(y.size());
  for (size_t i = 0; i < y.size(); ++i) d[i] = num::to_float(num::select(num::to_bits(y[i]), num::to_bits(dy[i])));
  return d;
}

namespace detail {

std::vector<isa::Word> elementwise_program(const DeviceParams& dp, uint64_t elems, uint64_t a_addr, uint64_t b_addr,
                                           uint64_t out_addr, std::span<const VecStep> steps) {
  const uint64_t an = dp.array_n, beat = dp.dma_data_w / 8, row = 4 * an;
  const uint64_t rows = (elems + an - 1) / an;
  // ACC: two buffer sets of [a: chunk rows | b: chunk rows], double buffered over the chunks.
  const uint64_t chunk = std::min<uint64_t>(rows, std::min<uint64_t>(dp.acc_depth / 4, kMaxRowsField));
  Builder b(2);
  for (uint64_t c = 0, r0 = 0; r0 < rows; ++c, r0 += chunk) {
    const uint64_t n = std::min(chunk, rows - r0), set = c % 2, a_row = set * 2 * chunk, b_row = a_row + chunk;
    if (c >= 2) b.bridge({set});
    for (const Transfer& t : split_transfer(a_row, a_addr + r0 * row, n * row, row, beat)) {
      b.emit(kL, dma_instr(spec::Opcode::kLoad, spec::Mem::kAcc, t), {}, {set});
    }
    for (const Transfer& t : split_transfer(b_row, b_addr + r0 * row, n * row, row, beat)) {
      b.emit(kL, dma_instr(spec::Opcode::kLoad, spec::Mem::kAcc, t), {}, {set});
    }
    for (size_t i = 0; i < steps.size(); ++i) {
      isa::Instr v = isa::make_instr(spec::Opcode::kVector);
      v.set("op", static_cast<uint64_t>(steps[i].op));
      v.set("dst_addr", b_row);
      v.set("a_addr", i == 0 ? a_row : b_row);
      v.set("b_addr", b_row);
      v.set("rows", n);
      if (steps[i].scalar != 0) v.set("scalar", steps[i].scalar);
      b.emit(kC, std::move(v), {set}, {set});
    }
    for (const Transfer& t : split_transfer(b_row, out_addr + r0 * row, n * row, row, beat)) {
      b.emit(kS, dma_instr(spec::Opcode::kStore, spec::Mem::kAcc, t), {set}, {});
    }
  }
  return merge_program(b, 16, 64).code;
}

std::vector<isa::Word> sgd_program(const DeviceParams& dp, uint64_t elems, uint64_t w_addr, uint64_t v_addr,
                                   uint64_t g_addr, float lr, float momentum, float weight_decay) {
  const uint64_t an = dp.array_n, beat = dp.dma_data_w / 8, row = 4 * an;
  const uint64_t rows = (elems + an - 1) / an;
  // ACC: two buffer sets of [w | v | g], chunk rows each, double buffered over the chunks.
  const uint64_t chunk = std::min<uint64_t>(rows, std::min<uint64_t>(dp.acc_depth / 6, kMaxRowsField));
  const bool mom = momentum != 0.0f, wd = weight_decay != 0.0f;
  auto axpy = [](uint64_t dst, uint64_t a, uint64_t b_, float s, uint64_t n) {
    isa::Instr v = isa::make_instr(spec::Opcode::kVector);
    v.set("op", static_cast<uint64_t>(spec::VecOp::kAxpy));
    v.set("dst_addr", dst);
    v.set("a_addr", a);
    v.set("b_addr", b_);
    v.set("rows", n);
    v.set("scalar", num::to_bits(s));
    return v;
  };
  Builder b(2);
  for (uint64_t c = 0, r0 = 0; r0 < rows; ++c, r0 += chunk) {
    const uint64_t n = std::min(chunk, rows - r0), set = c % 2, w_row = set * 3 * chunk, v_row = w_row + chunk,
                   g_row = v_row + chunk;
    if (c >= 2) b.bridge({set});
    auto load = [&](uint64_t acc_row, uint64_t addr) {
      for (const Transfer& t : split_transfer(acc_row, addr + r0 * row, n * row, row, beat)) {
        b.emit(kL, dma_instr(spec::Opcode::kLoad, spec::Mem::kAcc, t), {}, {set});
      }
    };
    load(w_row, w_addr);
    if (mom) load(v_row, v_addr);
    load(g_row, g_addr);
    if (wd) b.emit(kC, axpy(g_row, w_row, g_row, weight_decay, n), {set}, {set});
    if (mom) {
      b.emit(kC, axpy(v_row, v_row, g_row, momentum, n), {set}, {set});
      b.emit(kC, axpy(w_row, v_row, w_row, -lr, n), {set}, {set});
    } else {
      b.emit(kC, axpy(w_row, g_row, w_row, -lr, n), {set}, {set});
    }
    auto store = [&](uint64_t acc_row, uint64_t addr) {
      for (const Transfer& t : split_transfer(acc_row, addr + r0 * row, n * row, row, beat)) {
        b.emit(kS, dma_instr(spec::Opcode::kStore, spec::Mem::kAcc, t), {set}, {});
      }
    };
    store(w_row, w_addr);
    if (mom) store(v_row, v_addr);
  }
  return merge_program(b, 16, 64).code;
}

std::vector<isa::Word> relu_backward_program(const DeviceParams& dp, uint64_t elems, uint64_t y_addr,
                                             uint64_t dy_addr, uint64_t out_addr) {
  const VecStep steps[] = {{spec::VecOp::kSelect, 0}};
  return elementwise_program(dp, elems, y_addr, dy_addr, out_addr, steps);
}

}  // namespace detail

ReluBackwardResult relu_backward_bf16(Device& device, std::span<const float> y, std::span<const float> dy) {
  if (y.size() != dy.size()) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("relu backward: {} activations but {} gradients", y.size(), dy.size()));
  }
  if ((device.info().features & spec::reg::kFeaturesBf16) == 0) {
    throw Error(ErrorKind::kUnsupported, fmt::format("relu backward: the {} device has no VECTOR unit (FEATURES.BF16 "
                                                     "is 0)",
                                                     device.info().backend));
  }
  ReluBackwardResult r;
  if (y.empty()) return r;
  detail::TrainProgramCache cache(device);
  return cache.relu_backward(0, y, dy);
}

std::vector<float> add_bf16_host(std::span<const float> a, std::span<const float> b, bool relu) {
  if (a.size() != b.size()) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("bf16 add: {} and {} values", a.size(), b.size()));
  }
  std::vector<float> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t v = num::add(num::to_bits(a[i]), num::to_bits(b[i]));
    if (relu) v = num::vmaxs(v, 0);
    d[i] = num::to_float(num::round_bf16(v));
  }
  return d;
}

ReluBackwardResult add_bf16(Device& device, std::span<const float> a, std::span<const float> b, bool relu) {
  detail::TrainProgramCache cache(device);
  return cache.add(0, a, b, relu);
}

}  // namespace tpuw::runtime
