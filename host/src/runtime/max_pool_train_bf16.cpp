// MaxPool backward on the device (tpuw/runtime/conv_train_bf16.h; docs/numerics.md "MaxPool
// backward in bf16"): the routing as a VECTOR chain, the scatter as a layout or a one-hot
// transposed convolution.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "program_builder.h"
#include "train_programs.h"
#include "tpuw/error.h"
#include "tpuw/numerics.h"
#include "tpuw/runtime/conv_train_bf16.h"

namespace tpuw::runtime {
namespace {

void require_max_pool(const Bf16ConvLayer& l) {
  l.check();
  if (l.kind != Bf16ConvLayer::Kind::kMaxPool) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("max pool backward '{}': not a max pool", l.name));
  }
}

void check_len(std::span<const float> v, uint64_t want, const Bf16ConvLayer& l, const char* what) {
  if (v.size() != want) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("max pool backward '{}': {} has {} values, expected {}", l.name, what, v.size(), want));
  }
}

uint64_t pooled(const Bf16ConvLayer& l, uint64_t batch) {
  return batch * l.geom.in_c * l.geom.out_h() * l.geom.out_w();
}

// The input position of tap (ky, kx) of output (oy, ox), or -1 outside the image.
int64_t tap_at(const nn::ConvGeometry& g, uint64_t oy, uint64_t ox, uint64_t ky, uint64_t kx) {
  const int64_t iy = static_cast<int64_t>(oy * g.stride_h + ky * g.dilation_h) - g.pad_top;
  const int64_t ix = static_cast<int64_t>(ox * g.stride_w + kx * g.dilation_w) - g.pad_left;
  if (iy < 0 || iy >= static_cast<int64_t>(g.in_h) || ix < 0 || ix >= static_cast<int64_t>(g.in_w)) return -1;
  return iy * static_cast<int64_t>(g.in_w) + ix;
}

}  // namespace

namespace detail {

// The one-hot forward "convolution" whose input gradient is the scatter of the tap gradients:
// C*K output channels, channel c*K + k copying tap k of input channel c.
Bf16ConvLayer max_pool_one_hot_layer(const Bf16ConvLayer& pool) {
  const nn::ConvGeometry& g = pool.geom;
  const uint64_t C = g.in_c, K = uint64_t{g.kernel_h} * g.kernel_w;
  Bf16ConvLayer f;
  f.name = pool.name + ".scatter";
  f.kind = Bf16ConvLayer::Kind::kConv;
  f.geom = g;
  f.geom.out_c = static_cast<uint32_t>(C * K);
  f.w.assign(C * K * C * K, 0.0f);
  for (uint64_t c = 0; c < C; ++c) {
    for (uint64_t k = 0; k < K; ++k) f.w[((c * K + k) * C + c) * K + k] = 1.0f;
  }
  f.bias.assign(C * K, 0.0f);
  return f;
}

// Tap planes [K][P] -> NCHW [B][C*K][Ho][Wo] (the one-hot layer's output gradient).
std::vector<float> max_pool_taps_as_channels(const Bf16ConvLayer& l, std::span<const float> g, uint64_t batch) {
  const uint64_t C = l.geom.in_c, K = uint64_t{l.geom.kernel_h} * l.geom.kernel_w,
                 hw = uint64_t{l.geom.out_h()} * l.geom.out_w(), P = batch * C * hw;
  std::vector<float> d(P * K);
  for (uint64_t k = 0; k < K; ++k) {
    for (uint64_t bc = 0; bc < batch * C; ++bc) {
      std::copy_n(g.begin() + static_cast<ptrdiff_t>(k * P + bc * hw), hw,
                  d.begin() + static_cast<ptrdiff_t>(((bc / C) * C * K + (bc % C) * K + k) * hw));
    }
  }
  return d;
}

uint64_t max_pool_route_check(std::span<const float> m, std::span<const float> dy, std::span<const float> taps) {
  const uint64_t P = m.size();
  if (dy.size() != P || P == 0 || taps.size() % P != 0) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("max pool routing: {} maxima, {} gradients, {} tap values",
                                                         m.size(), dy.size(), taps.size()));
  }
  return taps.size() / P;
}

std::vector<float> max_pool_route_image(std::span<const float> m, std::span<const float> dy,
                                        std::span<const float> taps, uint32_t array_n) {
  const uint64_t K = max_pool_route_check(m, dy, taps), P = m.size(), plane = (P + array_n - 1) / array_n * array_n;
  std::vector<float> img((2 + K) * plane, 0.0f);
  std::copy(m.begin(), m.end(), img.begin());
  for (uint64_t p = 0; p < P; ++p) img[plane + p] = bf16::round(dy[p]);
  for (uint64_t k = 0; k < K; ++k) {
    std::copy_n(taps.begin() + static_cast<ptrdiff_t>(k * P), P, img.begin() + static_cast<ptrdiff_t>((2 + k) * plane));
  }
  return img;
}

std::vector<isa::Word> max_pool_route_program(const DeviceParams& dp, uint64_t P, uint64_t K, uint64_t in_addr,
                                              uint64_t out_addr) {
  const uint64_t an = dp.array_n, beat = dp.dma_data_w / 8, row = 4 * an;
  const uint64_t rows = (P + an - 1) / an, plane = rows * an;
  // ACC per buffer set: [m | r | s | x_0 .. x_{K-1} | g_0 .. g_{K-1}], chunk rows each; two sets,
  // double buffered over the chunks. Every x_k is turned into a_k = m - x_k in place.
  const uint64_t per_set = 3 + 2 * K;
  const uint64_t chunk = std::min<uint64_t>(rows, std::min<uint64_t>(dp.acc_depth / (2 * per_set), kMaxRowsField));
  if (chunk == 0) {
    throw Error(ErrorKind::kUnsupported, fmt::format("max pool routing: a {}-tap window needs {} ACC rows, the device "
                                                     "has {}",
                                                     K, 2 * per_set, dp.acc_depth));
  }
  auto vec = [](spec::VecOp op, uint64_t dst, uint64_t a, uint64_t b, uint64_t n) {
    isa::Instr v = isa::make_instr(spec::Opcode::kVector);
    v.set("op", static_cast<uint64_t>(op));
    v.set("dst_addr", dst);
    v.set("a_addr", a);
    v.set("b_addr", b);
    v.set("rows", n);
    return v;
  };
  Builder b(2);
  for (uint64_t c = 0, r0 = 0; r0 < rows; ++c, r0 += chunk) {
    const uint64_t n = std::min(chunk, rows - r0), set = c % 2, base = set * per_set * chunk;
    const uint64_t m_row = base, r_row = base + chunk, s_row = base + 2 * chunk;
    auto x_row = [&](uint64_t k) { return base + (3 + k) * chunk; };
    auto g_row = [&](uint64_t k) { return base + (3 + K + k) * chunk; };
    if (c >= 2) b.bridge({set});
    auto load = [&](uint64_t acc_row, uint64_t host_plane) {
      for (const Transfer& t : split_transfer(acc_row, in_addr + (host_plane * plane + r0 * an) * 4, n * row, row, beat)) {
        b.emit(kL, dma_instr(spec::Opcode::kLoad, spec::Mem::kAcc, t), {}, {set});
      }
    };
    load(m_row, 0);
    load(r_row, 1);
    for (uint64_t k = 0; k < K; ++k) load(x_row(k), 2 + k);
    for (uint64_t k = 0; k < K; ++k) {
      b.emit(kC, vec(spec::VecOp::kSub, x_row(k), m_row, x_row(k), n), {set}, {set});  // a = m - x_k
      b.emit(kC, vec(spec::VecOp::kSelect, s_row, x_row(k), r_row, n), {set}, {set});  // s = a <= 0 ? +0 : r
      b.emit(kC, vec(spec::VecOp::kSub, g_row(k), r_row, s_row, n), {set}, {set});    // g_k = r - s
      b.emit(kC, vec(spec::VecOp::kSub, r_row, r_row, g_row(k), n), {set}, {set});    // r = r - g_k
    }
    for (uint64_t k = 0; k < K; ++k) {
      for (const Transfer& t : split_transfer(g_row(k), out_addr + (k * plane + r0 * an) * 4, n * row, row, beat)) {
        b.emit(kS, dma_instr(spec::Opcode::kStore, spec::Mem::kAcc, t), {set}, {});
      }
    }
  }
  return merge_program(b, 16, 64).code;
}

}  // namespace detail

std::vector<float> max_pool_tap_planes(const Bf16ConvLayer& fwd, std::span<const float> x, uint64_t batch) {
  require_max_pool(fwd);
  const nn::ConvGeometry& g = fwd.geom;
  const uint64_t C = g.in_c, HW = uint64_t{g.in_h} * g.in_w, ho = g.out_h(), wo = g.out_w();
  const uint64_t KH = g.kernel_h, KW = g.kernel_w, P = pooled(fwd, batch);
  check_len(x, batch * C * HW, fwd, "the input");
  std::vector<float> t(KH * KW * P, -std::numeric_limits<float>::infinity());
  for (uint64_t ky = 0; ky < KH; ++ky) {
    for (uint64_t kx = 0; kx < KW; ++kx) {
      float* plane = t.data() + (ky * KW + kx) * P;
      for (uint64_t bc = 0; bc < batch * C; ++bc) {
        for (uint64_t oy = 0; oy < ho; ++oy) {
          for (uint64_t ox = 0; ox < wo; ++ox) {
            const int64_t at = tap_at(g, oy, ox, ky, kx);
            if (at >= 0) plane[(bc * ho + oy) * wo + ox] = bf16::round(x[bc * HW + static_cast<uint64_t>(at)]);
          }
        }
      }
    }
  }
  return t;
}

std::vector<float> max_pool_route_host(std::span<const float> m, std::span<const float> dy,
                                       std::span<const float> taps) {
  const uint64_t K = detail::max_pool_route_check(m, dy, taps), P = m.size();
  std::vector<float> g(taps.size());
  for (uint64_t p = 0; p < P; ++p) {
    const uint32_t mp = num::to_bits(m[p]);
    uint32_t r = num::to_bits(dy[p]);
    for (uint64_t k = 0; k < K; ++k) {
      const uint32_t a = num::sub(mp, num::to_bits(taps[k * P + p]));
      const uint32_t s = num::select(a, r);
      const uint32_t gk = num::sub(r, s);
      r = num::sub(r, gk);
      g[k * P + p] = num::to_float(gk);
    }
  }
  return g;
}

MaxPoolRouteResult max_pool_route_bf16(Device& device, std::span<const float> m, std::span<const float> dy,
                                       std::span<const float> taps) {
  detail::TrainProgramCache cache(device);
  return cache.max_pool_route(0, m, dy, taps);
}

bool max_pool_windows_disjoint(const Bf16ConvLayer& fwd) {
  require_max_pool(fwd);
  const nn::ConvGeometry& g = fwd.geom;
  auto disjoint = [](uint64_t in, uint64_t out, uint64_t k, uint64_t s, uint64_t d, uint64_t pad) {
    std::vector<uint8_t> hit(in + 2 * pad + out * s + k * d, 0);  // padded coordinates
    for (uint64_t o = 0; o < out; ++o) {
      for (uint64_t t = 0; t < k; ++t) {
        if (hit[o * s + t * d]++ != 0) return false;
      }
    }
    return true;
  };
  return disjoint(g.in_h, g.out_h(), g.kernel_h, g.stride_h, g.dilation_h, g.pad_top) &&
         disjoint(g.in_w, g.out_w(), g.kernel_w, g.stride_w, g.dilation_w, g.pad_left);
}

std::vector<float> max_pool_scatter_layout(const Bf16ConvLayer& fwd, std::span<const float> g, uint64_t batch) {
  require_max_pool(fwd);
  if (!max_pool_windows_disjoint(fwd)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("max pool backward '{}': overlapping windows are scattered by a transposed convolution",
                            fwd.name));
  }
  const nn::ConvGeometry& gm = fwd.geom;
  const uint64_t C = gm.in_c, HW = uint64_t{gm.in_h} * gm.in_w, ho = gm.out_h(), wo = gm.out_w();
  const uint64_t KH = gm.kernel_h, KW = gm.kernel_w, P = pooled(fwd, batch);
  check_len(g, KH * KW * P, fwd, "the tap gradients");
  std::vector<float> dx(batch * C * HW, 0.0f);
  for (uint64_t ky = 0; ky < KH; ++ky) {
    for (uint64_t kx = 0; kx < KW; ++kx) {
      const float* plane = g.data() + (ky * KW + kx) * P;
      for (uint64_t bc = 0; bc < batch * C; ++bc) {
        for (uint64_t oy = 0; oy < ho; ++oy) {
          for (uint64_t ox = 0; ox < wo; ++ox) {
            const int64_t at = tap_at(gm, oy, ox, ky, kx);
            if (at >= 0) dx[bc * HW + static_cast<uint64_t>(at)] = plane[(bc * ho + oy) * wo + ox];
          }
        }
      }
    }
  }
  return dx;
}

namespace detail {

MaxPoolBackwardResult max_pool_backward_cached(TrainProgramCache& cache, uint64_t slot, const Bf16ConvLayer& fwd,
                                               std::span<const float> x, std::span<const float> y,
                                               std::span<const float> dy, uint64_t batch) {
  const std::vector<float> taps = max_pool_tap_planes(fwd, x, batch);
  const uint64_t P = pooled(fwd, batch);
  check_len(y, P, fwd, "the pooled output");
  check_len(dy, P, fwd, "the output gradient");
  MaxPoolBackwardResult r;
  MaxPoolRouteResult route = cache.max_pool_route(slot, y, dy, taps);
  r.cycles = route.cycles;
  r.host_bytes = route.host_bytes;
  if (max_pool_windows_disjoint(fwd)) {
    r.dx = max_pool_scatter_layout(fwd, route.g, batch);
    r.host_bytes += 4 * r.dx.size();
  } else {
    // The transposed one-hot convolution, by stride phases where it applies (no inserted zeros).
    ConvInputGradResult s = conv_input_grad_cached(cache, slot + 1, max_pool_one_hot_layer(fwd),
                                                   max_pool_taps_as_channels(fwd, route.g, batch), batch, &r.macs);
    r.cycles += s.run.cycles;
    r.host_bytes += s.host_bytes;
    r.dx = std::move(s.dx);
  }
  return r;
}

}  // namespace detail

MaxPoolBackwardResult max_pool_backward_bf16(Device& device, const Bf16ConvLayer& fwd, std::span<const float> x,
                                             std::span<const float> y, std::span<const float> dy, uint64_t batch) {
  detail::TrainProgramCache cache(device);
  return detail::max_pool_backward_cached(cache, 0, fwd, x, y, dy, batch);
}

std::vector<float> max_pool_backward_bf16_host(const Bf16ConvLayer& fwd, std::span<const float> x,
                                               std::span<const float> y, std::span<const float> dy, uint64_t batch,
                                               uint32_t array_n) {
  const std::vector<float> taps = max_pool_tap_planes(fwd, x, batch);
  const uint64_t P = pooled(fwd, batch);
  check_len(y, P, fwd, "the pooled output");
  check_len(dy, P, fwd, "the output gradient");
  std::vector<float> dyb(dy.size());
  for (size_t i = 0; i < dy.size(); ++i) dyb[i] = bf16::round(dy[i]);
  const std::vector<float> g = max_pool_route_host(y, dyb, taps);
  if (max_pool_windows_disjoint(fwd)) return max_pool_scatter_layout(fwd, g, batch);
  return conv_input_grad_bf16_host(detail::max_pool_one_hot_layer(fwd), detail::max_pool_taps_as_channels(fwd, g, batch), batch, array_n);
}

std::vector<float> max_pool_backward_host(const Bf16ConvLayer& fwd, std::span<const float> x,
                                          std::span<const float> dy, uint64_t batch, uint32_t array_n) {
  require_max_pool(fwd);
  check_len(x, batch * fwd.geom.in_c * fwd.geom.in_h * fwd.geom.in_w, fwd, "the input");
  std::vector<float> xb(x.size());
  for (size_t i = 0; i < x.size(); ++i) xb[i] = bf16::round(x[i]);
  const std::vector<float> y = conv2d_bf16_host(fwd, xb, batch, array_n);  // the pooled maxima (exact)
  return max_pool_backward_bf16_host(fwd, x, y, dy, batch, array_n);
}

}  // namespace tpuw::runtime
