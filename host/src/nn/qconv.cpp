// The quantized convolution layer's geometry and integer golden model (tpuw/nn/qconv.h).
#include "tpuw/nn/qconv.h"

#include <fmt/format.h>

#include <algorithm>

#include "tpuw/error.h"
#include "tpuw/nn/quantize.h"

namespace tpuw::nn {
namespace {

uint64_t out_dim(uint64_t in, uint64_t pad0, uint64_t pad1, uint64_t kernel, uint64_t stride, uint64_t dil) {
  const uint64_t padded = in + pad0 + pad1;
  const uint64_t span = dil * (kernel - 1) + 1;
  if (stride == 0 || kernel == 0 || span > padded) return 0;
  return (padded - span) / stride + 1;
}

}  // namespace

uint32_t ConvGeometry::out_h() const {
  return static_cast<uint32_t>(out_dim(in_h, pad_top, pad_bottom, kernel_h, stride_h, dilation_h));
}
uint32_t ConvGeometry::out_w() const {
  return static_cast<uint32_t>(out_dim(in_w, pad_left, pad_right, kernel_w, stride_w, dilation_w));
}

void ConvGeometry::check(const std::string& where) const {
  auto bad = [&](const std::string& what) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: {}", where, what));
  };
  if (in_c == 0 || in_h == 0 || in_w == 0) {
    bad(fmt::format("input channels/height/width {}x{}x{} must be >= 1", in_c, in_h, in_w));
  }
  if (out_c == 0) bad("output channels must be >= 1");
  if (kernel_h == 0 || kernel_w == 0) bad(fmt::format("kernel_shape {}x{} must be >= 1", kernel_h, kernel_w));
  if (stride_h == 0 || stride_w == 0) bad(fmt::format("strides {}x{} must be >= 1", stride_h, stride_w));
  if (dilation_h == 0 || dilation_w == 0) bad(fmt::format("dilations {}x{} must be >= 1", dilation_h, dilation_w));
  for (uint32_t v : {in_h, in_w, kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w, pad_top, pad_left,
                     pad_bottom, pad_right}) {
    if (v > (1u << 16)) bad(fmt::format("a size, kernel, stride, dilation or pad of {} is above 65536", v));
  }
  if (out_h() == 0) {
    bad(fmt::format("dilated kernel height {} is larger than the padded input height {}",
                    uint64_t{dilation_h} * (kernel_h - 1) + 1, uint64_t{in_h} + pad_top + pad_bottom));
  }
  if (out_w() == 0) {
    bad(fmt::format("dilated kernel width {} is larger than the padded input width {}",
                    uint64_t{dilation_w} * (kernel_w - 1) + 1, uint64_t{in_w} + pad_left + pad_right));
  }
}

void QConv2d::check() const {
  const std::string where = fmt::format("conv '{}'", name);
  geom.check(where);
  if (indices && !max_pool) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: only a max pool has Indices", where));
  }
  if (max_pool) {
    if (geom.in_c != geom.out_c || !w_q.empty() || !bias_q.empty() || !mult.empty() || !shift.empty()) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{}: a max pool has in_c == out_c ({} / {}), no weights, bias, mult or shift", where,
                              geom.in_c, geom.out_c));
    }
    return;
  }
  const uint64_t oc = geom.out_c;
  const uint64_t wn = oc * geom.in_c * uint64_t{geom.kernel_h} * geom.kernel_w;
  if (w_q.size() != wn || bias_q.size() != oc || mult.size() != oc || shift.size() != oc) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: weights/bias/mult/shift have {}/{}/{}/{} entries, expected {}/{}/{}/{}", where,
                            w_q.size(), bias_q.size(), mult.size(), shift.size(), wn, oc, oc, oc));
  }
  for (uint8_t s : shift) {
    if (s > 63) throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: shift {} is above 63", where, s));
  }
  if (!lut.empty() && lut.size() != 256) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: a lookup table has 256 entries, not {}", where, lut.size()));
  }
  const uint64_t groups = extra_groups();
  if (group_bias.size() != groups * oc || group_mult.size() != groups * oc || group_shift.size() != groups * oc) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: group bias/mult/shift have {}/{}/{} entries, expected {} groups x {} channels", where,
                            group_bias.size(), group_mult.size(), group_shift.size(), groups, oc));
  }
  for (uint8_t s : group_shift) {
    if (s > 63) throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: group shift {} is above 63", where, s));
  }
  if (!pixel_group.empty() || groups > 0) {
    const uint64_t px = uint64_t{geom.out_h()} * geom.out_w();
    if (pixel_group.size() != px) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{}: pixel_group has {} entries, expected out_h*out_w = {}", where, pixel_group.size(), px));
    }
    for (const uint16_t k : pixel_group) {
      if (k > groups) {
        throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: pixel group {} of {} extra groups", where, k, groups));
      }
    }
  }
}

std::vector<int8_t> conv2d_int(const QConv2d& l, std::span<const int8_t> x, uint64_t batch) {
  l.check();
  const ConvGeometry& g = l.geom;
  const uint64_t C = g.in_c, H = g.in_h, W = g.in_w, O = g.out_c, KH = g.kernel_h, KW = g.kernel_w;
  const uint64_t Ho = g.out_h(), Wo = g.out_w();
  if (x.size() != batch * C * H * W) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("conv '{}': input has {} elements, expected batch*C*H*W = {}",
                                                         l.name, x.size(), batch * C * H * W));
  }
  std::vector<int8_t> y(batch * O * Ho * Wo);
  if (l.max_pool) {
    for (uint64_t bc = 0; bc < batch * C; ++bc) {
      const int8_t* img = x.data() + bc * H * W;
      for (uint64_t oy = 0; oy < Ho; ++oy) {
        for (uint64_t ox = 0; ox < Wo; ++ox) {
          int8_t m = -128;
          for (uint64_t dy = 0; dy < KH; ++dy) {
            const int64_t iy = static_cast<int64_t>(oy * g.stride_h + dy * g.dilation_h) - g.pad_top;
            if (iy < 0 || iy >= static_cast<int64_t>(H)) continue;
            for (uint64_t dx = 0; dx < KW; ++dx) {
              const int64_t ix = static_cast<int64_t>(ox * g.stride_w + dx * g.dilation_w) - g.pad_left;
              if (ix >= 0 && ix < static_cast<int64_t>(W)) m = std::max(m, img[static_cast<uint64_t>(iy) * W + static_cast<uint64_t>(ix)]);
            }
          }
          y[(bc * Ho + oy) * Wo + ox] = l.relu ? std::max<int8_t>(m, 0) : m;
        }
      }
    }
    return y;
  }
  for (uint64_t b = 0; b < batch; ++b) {
    for (uint64_t o = 0; o < O; ++o) {
      for (uint64_t oy = 0; oy < Ho; ++oy) {
        for (uint64_t ox = 0; ox < Wo; ++ox) {
          uint32_t acc = 0;  // int32 with two's-complement wrap, like the ACC
          for (uint64_t c = 0; c < C; ++c) {
            for (uint64_t dy = 0; dy < KH; ++dy) {
              const int64_t iy = static_cast<int64_t>(oy * g.stride_h + dy * g.dilation_h) - g.pad_top;
              if (iy < 0 || iy >= static_cast<int64_t>(H)) continue;
              const int8_t* xrow = x.data() + ((b * C + c) * H + static_cast<uint64_t>(iy)) * W;
              const int8_t* wrow = l.w_q.data() + ((o * C + c) * KH + dy) * KW;
              for (uint64_t dx = 0; dx < KW; ++dx) {
                const int64_t ix = static_cast<int64_t>(ox * g.stride_w + dx * g.dilation_w) - g.pad_left;
                if (ix < 0 || ix >= static_cast<int64_t>(W)) continue;
                acc += static_cast<uint32_t>(int32_t{xrow[ix]} * int32_t{wrow[dx]});
              }
            }
          }
          const uint64_t k = l.pixel_group.empty() ? 0 : l.pixel_group[oy * Wo + ox];
          const uint64_t gi = k == 0 ? 0 : (k - 1) * O + o;
          const int8_t r =
              k == 0 ? requantize(static_cast<int32_t>(acc), l.bias_q[o], l.mult[o], l.shift[o], l.relu)
                     : requantize(static_cast<int32_t>(acc), l.group_bias[gi], l.group_mult[gi], l.group_shift[gi], l.relu);
          y[((b * O + o) * Ho + oy) * Wo + ox] = l.lut.empty() ? r : l.lut[static_cast<size_t>(r + 128)];
        }
      }
    }
  }
  return y;
}

std::vector<int32_t> QCnn::sources_of(size_t l) const {
  if (!convs[l].sources.empty()) return convs[l].sources;
  return {static_cast<int32_t>(l) - 1};
}

CnnGraphInput QCnn::input(size_t k) const {
  if (!inputs.empty()) return inputs.at(k);
  if (k != 0) throw Error(ErrorKind::kInvalidArgument, fmt::format("cnn: no graph input {} (the network has one)", k));
  CnnGraphInput in;
  in.c = in_c, in.h = in_h, in.w = in_w;
  in.scale = input_scale;
  return in;
}

uint64_t QCnn::input_row() const { return input_offset(input_count()); }

uint64_t QCnn::input_offset(size_t k) const {
  uint64_t off = 0;
  for (size_t j = 0; j < k; ++j) off += input(j).features();
  return off;
}

void QCnn::check() const {
  uint32_t c = in_c, h = in_h, w = in_w;
  float scale = input_scale;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k].features() == 0 || (!inputs[k].image && (inputs[k].h != 1 || inputs[k].w != 1))) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("cnn: graph input '{}' has a bad shape", inputs[k].name));
    }
  }
  for (size_t li = 0; li < convs.size(); ++li) {
    const QConv2d& l = convs[li];
    l.check();
    // The input: the sources' channels, each of the same height and width.
    const std::vector<int32_t> src = sources_of(li);
    c = 0;
    for (const int32_t k : src) {
      if (k < -static_cast<int32_t>(input_count()) || k >= static_cast<int32_t>(li) ||
          (k < 0 && !input(static_cast<size_t>(-1 - k)).image)) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("cnn: conv '{}' reads layer {}, which is not an image input (-1 - k) or an earlier layer",
                                l.name, k));
      }
      const ConvGeometry* sg = k < 0 ? nullptr : &convs[static_cast<size_t>(k)].geom;
      const CnnGraphInput gin = k < 0 ? input(static_cast<size_t>(-1 - k)) : CnnGraphInput{};
      const uint32_t sc = sg ? sg->out_c : gin.c, sh = sg ? sg->out_h() : gin.h, sw = sg ? sg->out_w() : gin.w;
      if (c != 0 && (sh != h || sw != w)) {
        throw Error(ErrorKind::kInvalidArgument, fmt::format("cnn: conv '{}' concatenates maps of {}x{} and {}x{}", l.name,
                                                             h, w, sh, sw));
      }
      c += sc, h = sh, w = sw;
      scale = k < 0 ? gin.scale : convs[static_cast<size_t>(k)].out_scale;
    }
    if (l.geom.in_c != c || l.geom.in_h != h || l.geom.in_w != w) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("cnn: conv '{}' expects {}x{}x{} but its input is {}x{}x{}", l.name, l.geom.in_c,
                              l.geom.in_h, l.geom.in_w, c, h, w));
    }
    if (l.max_pool && (src.size() != 1 || l.out_scale != scale)) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("cnn: max pool '{}' has output scale {:g}, its input's is {:g}",
                                                           l.name, l.out_scale, scale));
    }
    c = l.geom.out_c, h = l.geom.out_h(), w = l.geom.out_w();
    scale = l.out_scale;
  }
  if (convs.empty()) throw Error(ErrorKind::kInvalidArgument, "cnn: no convolution or pooling layer");
  if (!has_head()) {  // the last map is the output
    if (!head_sources.empty()) throw Error(ErrorKind::kInvalidArgument, "cnn: head sources without a dense head");
    return;
  }
  if (!head_sources.empty()) {
    // The head's row: the last map and vector inputs, each part with its own scale.
    uint64_t f = 0;
    bool map_seen = false;
    if (head.input_part_scales.size() != head_sources.size() || head.input_part_features.size() != head_sources.size()) {
      throw Error(ErrorKind::kInvalidArgument, "cnn: the dense head's input parts do not match its sources");
    }
    for (size_t p = 0; p < head_sources.size(); ++p) {
      const int32_t k = head_sources[p];
      uint64_t pf = 0;
      float ps = 0;
      if (k == static_cast<int32_t>(convs.size()) - 1 && !map_seen) {
        map_seen = true;
        pf = uint64_t{c} * h * w, ps = scale;
      } else if (k < 0 && k >= -static_cast<int32_t>(input_count()) && !input(static_cast<size_t>(-1 - k)).image) {
        pf = input(static_cast<size_t>(-1 - k)).features(), ps = input(static_cast<size_t>(-1 - k)).scale;
      } else {
        throw Error(ErrorKind::kInvalidArgument, fmt::format("cnn: the dense head reads source {}, which is neither the "
                                                             "last layer nor a vector input", k));
      }
      if (head.input_part_features[p] != pf || head.input_part_scales[p] != ps) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("cnn: the dense head's input part {} has {} features and scale {:g}; its source {} has {} "
                                "and {:g}", p, head.input_part_features[p], head.input_part_scales[p], k, pf, ps));
      }
      f += pf;
    }
    if (!map_seen || f != head.input_features || head.layers[0].k != head.input_features) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("cnn: the dense head reads {} features from its sources, which give {}", head.input_features, f));
    }
    return;
  }
  if (uint64_t{head.input_features} != uint64_t{c} * h * w || head.layers[0].k != head.input_features) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("cnn: the dense head reads {} features, the last convolution gives {}x{}x{}",
                            head.input_features, c, h, w));
  }
  if (head.input_scale != scale) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("cnn: the dense head's input scale {:g} is not the last convolution's output scale {:g}",
                            head.input_scale, scale));
  }
}

uint64_t QCnn::output_features() const {
  if (has_head()) return head.layers.back().n;
  if (convs.empty()) return uint64_t{in_c} * in_h * in_w;
  const ConvGeometry& g = convs.back().geom;
  return uint64_t{g.out_c} * g.out_h() * g.out_w();
}

std::vector<int8_t> cnn_input_part(const QCnn& net, size_t k, std::span<const int8_t> x, uint64_t batch) {
  const uint64_t row = net.input_row(), off = net.input_offset(k), f = net.input(k).features();
  if (x.size() != batch * row) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("cnn: input has {} values, expected batch {} x {}", x.size(), batch, row));
  }
  if (row == f) return std::vector<int8_t>(x.begin(), x.end());
  return row_columns(x, batch, row, off, f);
}

std::vector<int8_t> quantize_cnn_input(const QCnn& net, std::span<const float> x) {
  std::vector<float> scale;
  for (size_t k = 0; k < net.input_count(); ++k) scale.insert(scale.end(), net.input(k).features(), net.input(k).scale);
  if (scale.empty() || x.size() % scale.size() != 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("cnn: input has {} values, not a multiple of the {} per image", x.size(), scale.size()));
  }
  std::vector<int8_t> q(x.size());
  for (size_t i = 0; i < x.size(); ++i) q[i] = quantize_value(x[i], scale[i % scale.size()]);
  return q;
}

std::vector<int8_t> cnn_head_input(const QCnn& net, std::span<const int8_t> x, const std::vector<int8_t>& last,
                                   uint64_t batch) {
  if (net.head_sources.empty()) return last;
  std::vector<std::vector<int8_t>> parts;
  for (const int32_t k : net.head_sources) parts.push_back(k < 0 ? cnn_input_part(net, static_cast<size_t>(-1 - k), x, batch) : last);
  return rows_side_by_side(parts, batch);
}

std::vector<int8_t> cnn_layer_input(const QCnn& net, size_t l, std::span<const int8_t> x,
                                    const std::function<const std::vector<int8_t>&(size_t)>& out, uint64_t batch) {
  const std::vector<int32_t> src = net.sources_of(l);
  const ConvGeometry& g = net.convs[l].geom;
  const uint64_t hw = uint64_t{g.in_h} * g.in_w;
  // The image inputs' parts of the rows (one input: the rows themselves).
  std::vector<std::vector<int8_t>> in_parts(net.input_count());
  auto source = [&](int32_t k) -> std::span<const int8_t> {
    if (k >= 0) return out(static_cast<size_t>(k));
    const auto idx = static_cast<size_t>(-1 - k);
    if (net.input_count() == 1) return x;
    if (in_parts[idx].empty()) in_parts[idx] = cnn_input_part(net, idx, x, batch);
    return in_parts[idx];
  };
  if (src.size() == 1) {
    const std::span<const int8_t> s = source(src[0]);
    return std::vector<int8_t>(s.begin(), s.end());
  }
  std::vector<int8_t> a(batch * g.in_c * hw);
  int8_t* dst = a.data();
  for (uint64_t b = 0; b < batch; ++b) {
    for (const int32_t k : src) {
      const std::span<const int8_t> s = source(k);
      const uint64_t per = s.size() / batch;  // C_k * H * W
      std::copy_n(s.data() + b * per, per, dst);
      dst += per;
    }
  }
  return a;
}

std::vector<std::vector<int8_t>> forward_cnn_int_maps(const QCnn& net, std::span<const int8_t> x_q, uint64_t batch) {
  net.check();
  std::vector<std::vector<int8_t>> outs;
  auto out = [&](size_t k) -> const std::vector<int8_t>& { return outs[k]; };
  for (size_t l = 0; l < net.convs.size(); ++l) {
    outs.push_back(conv2d_int(net.convs[l], cnn_layer_input(net, l, x_q, out, batch), batch));
  }
  return outs;
}

std::vector<int32_t> forward_cnn_int_raw(const QCnn& net, std::span<const int8_t> x_q, uint64_t batch) {
  const std::vector<std::vector<int8_t>> outs = forward_cnn_int_maps(net, x_q, batch);
  const std::vector<int8_t>& a = outs.back();
  if (!net.has_head()) return std::vector<int32_t>(a.begin(), a.end());
  return forward_int_raw(net.head, cnn_head_input(net, x_q, a, batch), batch);
}

}  // namespace tpuw::nn
