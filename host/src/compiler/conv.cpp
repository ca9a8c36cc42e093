// ONNX Conv in the graph compiler (tpuw/compiler/conv.h).
#include "tpuw/compiler/conv.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cnn_head.h"
#include "pass_util.h"
#include "pool_groups.h"
#include "tpuw/compiler/activations.h"
#include "tpuw/compiler/passes.h"
#include "tpuw/compiler/quantize.h"
#include "tpuw/nn/quantize.h"

namespace tpuw::compiler {
namespace {

using detail::attr_int;
using detail::input;

/// An ints attribute with `len` values, or `def` when absent; kBadFile for another type or length.
std::vector<int64_t> attr_ints(const Graph& g, const Node& n, std::string_view key, size_t len, int64_t def) {
  const Attribute* a = n.attr(key);
  if (a == nullptr) return std::vector<int64_t>(len, def);
  if (a->kind != Attribute::Kind::kInts) g.fail(ErrorKind::kBadFile, n, fmt::format("attribute '{}' is not a list of ints", key));
  if (a->ints.size() != len) {
    g.fail(ErrorKind::kBadFile, n,
           fmt::format("attribute '{}' has {} values; a 2-D Conv needs {}{}", key, a->ints.size(), len,
                       key == "pads" ? " (top, left, bottom, right)" : " (height, width)"));
  }
  return a->ints;
}

std::string auto_pad(const Graph& g, const Node& n) {
  const Attribute* a = n.attr("auto_pad");
  if (a == nullptr) return "NOTSET";
  if (a->kind != Attribute::Kind::kString) g.fail(ErrorKind::kBadFile, n, "attribute 'auto_pad' is not a string");
  return a->s;
}

int32_t sat32(double v) {
  return static_cast<int32_t>(std::clamp(v, static_cast<double>(std::numeric_limits<int32_t>::min()),
                                         static_cast<double>(std::numeric_limits<int32_t>::max())));
}

/// The Conv's weights as a dense [O][C][KH][KW] tensor: a grouped convolution (weight
/// [O, C/group, KH, KW]) gets zeros outside its groups, so it runs as an ordinary convolution
/// (the device skips the all-zero tiles; a depthwise layer keeps one channel diagonal per tile).
std::vector<double> dense_weights(const Graph& g, const Node& n, const nn::ConvGeometry& geo) {
  const TensorData& wd = *g.value(n.inputs[1]).data;
  const uint64_t group = static_cast<uint64_t>(attr_int(g, n, "group", 1));
  const uint64_t O = geo.out_c, C = geo.in_c, T = uint64_t{geo.kernel_h} * geo.kernel_w;
  const uint64_t cg = C / group, og = O / group;
  std::vector<double> w(O * C * T, 0.0);
  for (uint64_t o = 0; o < O; ++o) {
    const uint64_t c0 = (o / og) * cg;
    for (uint64_t c = 0; c < cg; ++c) {
      for (uint64_t t = 0; t < T; ++t) w[(o * C + c0 + c) * T + t] = wd.as_double((o * cg + c) * T + t);
    }
  }
  return w;
}

}  // namespace

void check_conv_attributes(const Graph& g, const Node& n) {
  if (n.op == Op::kGlobalAveragePool) return;
  if (n.op == Op::kMaxPool) {
    if (n.attr("kernel_shape") == nullptr) g.fail(ErrorKind::kBadFile, n, "MaxPool needs attribute 'kernel_shape'");
    const int64_t ceil_mode = attr_int(g, n, "ceil_mode", 0);
    if (ceil_mode != 0 && ceil_mode != 1) g.fail(ErrorKind::kBadFile, n, fmt::format("ceil_mode {}: must be 0 or 1", ceil_mode));
    const int64_t storage_order = attr_int(g, n, "storage_order", 0);
    if (storage_order != 0 && storage_order != 1) {
      g.fail(ErrorKind::kBadFile, n, fmt::format("storage_order {}: must be 0 or 1", storage_order));
    }
    // The Indices output (second) runs on the device when it is a graph output
    // (runtime/maxpool_indices.h); compile_quantized_cnn refuses a node that reads it.
  }
  if (n.op == Op::kAveragePool) {
    if (n.attr("kernel_shape") == nullptr) g.fail(ErrorKind::kBadFile, n, "AveragePool needs attribute 'kernel_shape'");
    const int64_t ceil_mode = attr_int(g, n, "ceil_mode", 0);
    const int64_t cip = attr_int(g, n, "count_include_pad", 0);
    if ((ceil_mode != 0 && ceil_mode != 1) || (cip != 0 && cip != 1)) {
      g.fail(ErrorKind::kBadFile, n, fmt::format("ceil_mode {} / count_include_pad {}: each must be 0 or 1", ceil_mode, cip));
    }
  }
  const int64_t group = attr_int(g, n, "group", 1);
  if (group < 1) g.fail(ErrorKind::kBadFile, n, fmt::format("attribute 'group' is {}; it must be >= 1", group));
  if (const Attribute* k = n.attr("kernel_shape"); k != nullptr && k->kind == Attribute::Kind::kInts && k->ints.size() != 2) {
    g.fail(ErrorKind::kUnsupported, n,
           fmt::format("attribute 'kernel_shape' has {} values: a {}-D convolution; only 2-D Conv is supported",
                       k->ints.size(), k->ints.size()));
  }
  for (const int64_t v : attr_ints(g, n, "kernel_shape", 2, 1)) {
    if (v < 1) g.fail(ErrorKind::kBadFile, n, fmt::format("attribute 'kernel_shape' holds {}; kernel sizes are >= 1", v));
    if (v > 65536) g.fail(ErrorKind::kUnsupported, n, fmt::format("attribute 'kernel_shape' holds {}, above 65536", v));
  }
  for (const char* key : {"strides", "dilations"}) {
    for (const int64_t v : attr_ints(g, n, key, 2, 1)) {
      if (v < 1) g.fail(ErrorKind::kBadFile, n, fmt::format("attribute '{}' holds {}; it must be >= 1", key, v));
      if (v > 65536) g.fail(ErrorKind::kUnsupported, n, fmt::format("attribute '{}' holds {}, above 65536", key, v));
    }
  }
  for (const int64_t v : attr_ints(g, n, "pads", 4, 0)) {
    if (v < 0) g.fail(ErrorKind::kBadFile, n, fmt::format("attribute 'pads' holds {}; pads are >= 0", v));
    if (v > 65536) g.fail(ErrorKind::kUnsupported, n, fmt::format("attribute 'pads' holds {}, above 65536", v));
  }
  const std::string ap = auto_pad(g, n);
  if (ap != "NOTSET" && ap != "VALID" && ap != "SAME_UPPER" && ap != "SAME_LOWER") {
    g.fail(ErrorKind::kBadFile, n,
           fmt::format("attribute 'auto_pad' is '{}' (NOTSET, VALID, SAME_UPPER or SAME_LOWER)", ap));
  }
  if (ap != "NOTSET" && n.attr("pads") != nullptr) {
    g.fail(ErrorKind::kBadFile, n, fmt::format("has both auto_pad '{}' and explicit pads", ap));
  }
}

namespace {

// An average pool as a convolution: channels in = out, the kernel from kernel_shape (the whole
// image for GlobalAveragePool); the identity weights are implied.
nn::ConvGeometry pool_geometry(const Graph& g, const Node& n, const Dims& dx) {
  nn::ConvGeometry geo;
  geo.in_c = geo.out_c = static_cast<uint32_t>(dx[1]);
  geo.in_h = static_cast<uint32_t>(dx[2]);
  geo.in_w = static_cast<uint32_t>(dx[3]);
  if (n.op == Op::kGlobalAveragePool) {
    geo.kernel_h = geo.in_h;
    geo.kernel_w = geo.in_w;
    return geo;
  }
  const std::vector<int64_t> ks = attr_ints(g, n, "kernel_shape", 2, 1);
  const std::vector<int64_t> st = attr_ints(g, n, "strides", 2, 1);
  const std::vector<int64_t> dl = attr_ints(g, n, "dilations", 2, 1);
  std::vector<int64_t> pads = attr_ints(g, n, "pads", 4, 0);
  const std::string ap = auto_pad(g, n);
  for (size_t i = 0; i < 2 && (ap == "SAME_UPPER" || ap == "SAME_LOWER"); ++i) {
    const int64_t in = dx[2 + i];
    const int64_t out = (in + st[i] - 1) / st[i];
    const int64_t total = std::max<int64_t>((out - 1) * st[i] + (ks[i] - 1) * dl[i] + 1 - in, 0);
    pads[i] = ap == "SAME_UPPER" ? total / 2 : total - total / 2;
    pads[i + 2] = total - pads[i];
  }
  if (attr_int(g, n, "ceil_mode", 0) != 0) {
    // ceil_mode as PyTorch and ONNX's reference compute it: out = ceil((in + pads - span) / stride) + 1,
    // minus one when the last window would start in the end padding; the partial last window is
    // extra end padding, which a max ignores and an average does not count (pool_groups.h).
    for (size_t i = 0; i < 2; ++i) {
      const int64_t in = dx[2 + i], span = dl[i] * (ks[i] - 1) + 1, total = in + pads[i] + pads[i + 2];
      if (total < span) continue;  // conv_geometry reports the window larger than the input
      int64_t out = (total - span + st[i] - 1) / st[i] + 1;
      if ((out - 1) * st[i] >= in + pads[i]) --out;
      pads[i + 2] += std::max<int64_t>((out - 1) * st[i] + span - total, 0);
    }
  }
  // Pads hold no value for a max (they are skipped); an average's divisor per pixel (count_include_pad,
  // ceil_mode's partial windows) is detail::avgpool_counts'.
  geo.kernel_h = static_cast<uint32_t>(ks[0]);
  geo.kernel_w = static_cast<uint32_t>(ks[1]);
  geo.stride_h = static_cast<uint32_t>(st[0]);
  geo.stride_w = static_cast<uint32_t>(st[1]);
  geo.dilation_h = static_cast<uint32_t>(dl[0]);
  geo.dilation_w = static_cast<uint32_t>(dl[1]);
  geo.pad_top = static_cast<uint32_t>(pads[0]);
  geo.pad_left = static_cast<uint32_t>(pads[1]);
  geo.pad_bottom = static_cast<uint32_t>(pads[2]);
  geo.pad_right = static_cast<uint32_t>(pads[3]);
  return geo;
}

}  // namespace

nn::ConvGeometry conv_geometry(const Graph& g, const Node& n) {
  check_conv_attributes(g, n);
  const ValueId x = n.inputs[0], w = n.op == Op::kConv ? n.inputs[1] : n.inputs[0];
  const Value& xv = g.value(x);
  const Value& wv = g.value(w);
  if (g.is_constant(x)) {
    g.fail(ErrorKind::kUnsupported, n, fmt::format("input 0 '{}' must be the activation, not a constant", xv.name));
  }
  if (n.op != Op::kConv) {
    const Dims& dx = *xv.shape;
    if (dx.size() != 4 || !detail::batch_led(dx)) {
      g.fail(ErrorKind::kUnsupported, n, fmt::format("input '{}' has shape {}; 2-D pooling needs [batch, channels, "
                                                     "height, width]", xv.name, dims_string(dx)));
    }
    for (size_t i = 1; i < 4; ++i) {
      if (dx[i] > 65536) g.fail(ErrorKind::kUnsupported, n, fmt::format("input '{}' has shape {}", xv.name, dims_string(dx)));
    }
    const nn::ConvGeometry geo = pool_geometry(g, n, dx);
    if (geo.out_h() == 0 || geo.out_w() == 0) {
      g.fail(ErrorKind::kBadFile, n, fmt::format("the pooling window {}x{} is larger than the padded input", geo.kernel_h,
                                                 geo.kernel_w));
    }
    return geo;
  }
  if (!g.is_constant(w)) {
    g.fail(ErrorKind::kUnsupported, n,
           fmt::format("weight '{}' is computed from the input; it must be an initializer or Constant", wv.name));
  }
  const Dims& dx = *xv.shape;
  const Dims& dw = *wv.shape;
  if (dx.size() != 4 || !detail::batch_led(dx)) {
    g.fail(ErrorKind::kUnsupported, n,
           fmt::format("input '{}' has shape {}; a 2-D Conv needs [batch, channels, height, width]", xv.name,
                       dims_string(dx)));
  }
  if (dw.size() != 4) {
    g.fail(ErrorKind::kBadFile, n, fmt::format("weight '{}' has shape {}; a 2-D Conv needs [out_channels, "
                                               "in_channels, kernel_h, kernel_w]", wv.name, dims_string(dw)));
  }
  const int64_t group = attr_int(g, n, "group", 1);
  if (dw[1] * group != dx[1] || dw[0] % group != 0) {
    g.fail(ErrorKind::kBadFile, n,
           fmt::format("weight '{}' has shape {} ({} input channels{}) but the input '{}' has {} channels{}", wv.name,
                       dims_string(dw), dw[1], group == 1 ? "" : fmt::format(" per group x {} groups", group),
                       xv.name, dx[1],
                       dw[0] % group != 0 ? fmt::format(" (and {} output channels are not a multiple of {} groups)",
                                                        dw[0], group) : ""));
  }
  for (const int64_t d : dw) {
    if (d < 1 || d > 65536) g.fail(ErrorKind::kBadFile, n, fmt::format("weight '{}' has shape {}", wv.name, dims_string(dw)));
  }
  for (size_t i = 1; i < 4; ++i) {
    if (dx[i] > 65536) {
      g.fail(ErrorKind::kUnsupported, n, fmt::format("input '{}' has shape {}; sizes above 65536 are not supported",
                                                     xv.name, dims_string(dx)));
    }
  }
  const std::vector<int64_t> ks = attr_ints(g, n, "kernel_shape", 2, 0);
  if (n.attr("kernel_shape") != nullptr && (ks[0] != dw[2] || ks[1] != dw[3])) {
    g.fail(ErrorKind::kBadFile, n, fmt::format("attribute 'kernel_shape' is [{}, {}] but weight '{}' has shape {}",
                                               ks[0], ks[1], wv.name, dims_string(dw)));
  }
  const ValueId b = input(n, 2);
  if (b != kNoValue) {
    if (!g.is_constant(b)) {
      g.fail(ErrorKind::kUnsupported, n, fmt::format("bias '{}' must be an initializer or Constant", g.value(b).name));
    }
    const Dims& db = *g.value(b).shape;
    if (db.size() != 1 || db[0] != dw[0]) {
      g.fail(ErrorKind::kBadFile, n, fmt::format("bias '{}' has shape {}; it must be [{}] (one per output channel)",
                                                 g.value(b).name, dims_string(db), dw[0]));
    }
  }
  const std::vector<int64_t> st = attr_ints(g, n, "strides", 2, 1);
  const std::vector<int64_t> dl = attr_ints(g, n, "dilations", 2, 1);
  std::vector<int64_t> pads = attr_ints(g, n, "pads", 4, 0);
  const std::string ap = auto_pad(g, n);
  if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
    for (size_t i = 0; i < 2; ++i) {
      const int64_t in = dx[2 + i];
      const int64_t out = (in + st[i] - 1) / st[i];
      const int64_t total = std::max<int64_t>((out - 1) * st[i] + (dw[2 + i] - 1) * dl[i] + 1 - in, 0);
      const int64_t small = total / 2;
      pads[i] = ap == "SAME_UPPER" ? small : total - small;
      pads[i + 2] = total - pads[i];
    }
  }
  nn::ConvGeometry geo;
  geo.in_c = static_cast<uint32_t>(dx[1]);
  geo.in_h = static_cast<uint32_t>(dx[2]);
  geo.in_w = static_cast<uint32_t>(dx[3]);
  geo.out_c = static_cast<uint32_t>(dw[0]);
  geo.kernel_h = static_cast<uint32_t>(dw[2]);
  geo.kernel_w = static_cast<uint32_t>(dw[3]);
  geo.stride_h = static_cast<uint32_t>(st[0]);
  geo.stride_w = static_cast<uint32_t>(st[1]);
  geo.dilation_h = static_cast<uint32_t>(dl[0]);
  geo.dilation_w = static_cast<uint32_t>(dl[1]);
  geo.pad_top = static_cast<uint32_t>(pads[0]);
  geo.pad_left = static_cast<uint32_t>(pads[1]);
  geo.pad_bottom = static_cast<uint32_t>(pads[2]);
  geo.pad_right = static_cast<uint32_t>(pads[3]);
  if (geo.out_h() == 0 || geo.out_w() == 0) {
    const bool h = geo.out_h() == 0;
    g.fail(ErrorKind::kBadFile, n,
           fmt::format("the dilated kernel {} {} is larger than the padded input {} {}", h ? "height" : "width",
                       h ? uint64_t{geo.dilation_h} * (geo.kernel_h - 1) + 1 : uint64_t{geo.dilation_w} * (geo.kernel_w - 1) + 1,
                       h ? "height" : "width",
                       h ? uint64_t{geo.in_h} + geo.pad_top + geo.pad_bottom : uint64_t{geo.in_w} + geo.pad_left + geo.pad_right));
  }
  return geo;
}

std::optional<std::vector<int64_t>> pad_amounts(const Graph& g, const Node& n, size_t rank, bool strict) {
  const Attribute* mode = n.attr("mode");
  if (mode != nullptr && (mode->kind != Attribute::Kind::kString || mode->s != "constant")) {
    g.fail(ErrorKind::kUnsupported, n, fmt::format("mode '{}' is not supported (only constant zero padding)",
                                                   mode->kind == Attribute::Kind::kString ? mode->s : "?"));
  }
  if (const Attribute* v = n.attr("value"); v != nullptr && v->kind != Attribute::Kind::kFloat) {
    g.fail(ErrorKind::kBadFile, n, "attribute 'value' is not a float");
  }
  if (input(n, 3) != kNoValue) g.fail(ErrorKind::kUnsupported, n, "the axes input is not supported");
  if (const ValueId cv = input(n, 2); cv != kNoValue && !g.is_constant(cv)) {
    if (!strict) return std::nullopt;
    g.fail(ErrorKind::kUnsupported, n, "the constant_value input must be a constant");
  }
  // A constant other than 0 (detail::pad_constant) keeps the Pad out of fold_pads: it becomes a
  // 1x1 AveragePool whose border carries the constant (attribute pad_value).
  std::vector<int64_t> p;
  if (const Attribute* a = n.attr("pads"); a != nullptr) {
    if (a->kind != Attribute::Kind::kInts) g.fail(ErrorKind::kBadFile, n, "attribute 'pads' is not a list of ints");
    p = a->ints;
  } else {
    const ValueId pv = input(n, 1);
    if (pv == kNoValue) g.fail(ErrorKind::kBadFile, n, "has no pads (attribute or input 1)");
    if (!g.is_constant(pv)) {
      if (!strict) return std::nullopt;
      g.fail(ErrorKind::kUnsupported, n, "pads computed from the input are not supported");
    }
    const TensorData& d = *g.value(pv).data;
    for (size_t i = 0; i < d.size(); ++i) p.push_back(detail::as_int(d, i));
  }
  if (p.size() != 2 * rank) {
    g.fail(ErrorKind::kBadFile, n, fmt::format("has {} pads for a rank-{} input (expected {})", p.size(), rank, 2 * rank));
  }
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] < 0 || p[i] > 65536) g.fail(ErrorKind::kUnsupported, n, fmt::format("pad {} is {}", i, p[i]));
    if (rank != 4 || i % rank < 2) {
      if (p[i] != 0) g.fail(ErrorKind::kUnsupported, n, "only the height and width of [batch, C, H, W] can be padded");
    }
  }
  return p;
}

void fold_pads(Graph& g) {
  const std::vector<std::vector<size_t>> readers = g.consumers();
  std::vector<bool> drop(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& pad = g.nodes[i];
    if (pad.op != Op::kPad) continue;
    const std::vector<int64_t> p = *pad_amounts(g, pad, g.value(pad.inputs[0]).shape->size(), true);
    const ValueId y = pad.outputs[0];
    const auto& rd = readers[static_cast<size_t>(y)];
    Node* next = rd.size() == 1 && !g.is_graph_output(y) ? &g.nodes[rd[0]] : nullptr;
    const double value = detail::pad_constant(g, pad);
    if (!std::isfinite(value)) g.fail(ErrorKind::kUnsupported, pad, fmt::format("the padding value {} is not finite", value));
    if (next == nullptr || value != 0.0 || (next->op != Op::kConv && next->op != Op::kAveragePool) || next->inputs[0] != y ||
        auto_pad(g, *next) != "NOTSET") {
      // Not foldable: the Pad runs as a 1x1 average pool with those pads (the identity with a
      // zero border, count_include_pad=1), a layer of its own.
      Node& pn = g.nodes[i];  // its origin already names the Pad
      pn.op = Op::kAveragePool;
      pn.inputs.resize(1);
      pn.attrs.clear();
      Attribute ks;
      ks.kind = Attribute::Kind::kInts;
      ks.ints = {1, 1};
      pn.set_attr("kernel_shape", ks);
      Attribute pa;
      pa.kind = Attribute::Kind::kInts;
      pa.ints = {p[2], p[3], p[6], p[7]};
      pn.set_attr("pads", pa);
      Attribute ci;
      ci.kind = Attribute::Kind::kInt;
      ci.i = 1;
      pn.set_attr("count_include_pad", ci);
      if (value != 0.0) {
        Attribute pv;
        pv.kind = Attribute::Kind::kFloat;
        pv.f = static_cast<float>(value);
        pn.set_attr("pad_value", pv);
      }
      continue;
    }
    std::vector<int64_t> q = attr_ints(g, *next, "pads", 4, 0);
    const std::vector<int64_t> add = {p[2], p[3], p[6], p[7]};  // top, left, bottom, right
    const bool grows = std::any_of(add.begin(), add.end(), [](int64_t v) { return v != 0; });
    if (next->op == Op::kAveragePool && grows && attr_int(g, *next, "count_include_pad", 0) == 0) {
      // Explicitly padded zeros are counted by the pool: the same as count_include_pad=1 only
      // when the pool has no pads of its own.
      if (std::any_of(q.begin(), q.end(), [](int64_t v) { return v != 0; })) {
        g.fail(ErrorKind::kUnsupported, *next, "a Pad before an AveragePool with its own pads and count_include_pad=0");
      }
      Attribute c;
      c.kind = Attribute::Kind::kInt;
      c.i = 1;
      next->set_attr("count_include_pad", c);
    }
    for (size_t k = 0; k < 4; ++k) q[k] += add[k];
    Attribute a;
    a.kind = Attribute::Kind::kInts;
    a.ints = q;
    next->set_attr("pads", a);
    next->inputs[0] = pad.inputs[0];
    next->origin.insert(next->origin.begin(), pad.label());
    drop[i] = true;
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!drop[i]) kept.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(kept);
}

namespace {

// BatchNormalization (inference) as a per-channel y = x * s[c] + t[c]; nullopt when it is not a
// plain inference BN over [batch, C, H, W] with constant parameters (lower_feature_maps reports it).
struct ChannelAffine {
  std::vector<double> s, t;
};

std::optional<ChannelAffine> bn_affine(const Graph& g, const Node& n) {
  if (attr_int(g, n, "training_mode", 0) != 0) return std::nullopt;
  for (size_t k = 1; k < n.outputs.size(); ++k) {
    if (n.outputs[k] != kNoValue) return std::nullopt;
  }
  const Value& xv = g.value(n.inputs[0]);
  if (!xv.shape || xv.shape->size() != 4 || !detail::batch_led(*xv.shape)) return std::nullopt;
  const auto ch = static_cast<size_t>((*xv.shape)[1]);
  for (size_t k = 1; k <= 4; ++k) {
    if (!g.is_constant(n.inputs[k]) || g.value(n.inputs[k]).data->size() != ch) return std::nullopt;
  }
  const double eps = detail::attr_float(g, n, "epsilon", 1e-5f);
  ChannelAffine a;
  for (size_t c = 0; c < ch; ++c) {
    const double var = g.value(n.inputs[4]).data->as_double(c) + eps;
    if (!(var > 0)) g.fail(ErrorKind::kUnsupported, n, fmt::format("channel {}: var + epsilon is not positive", c));
    const double sc = g.value(n.inputs[1]).data->as_double(c) / std::sqrt(var);
    a.s.push_back(sc);
    a.t.push_back(g.value(n.inputs[2]).data->as_double(c) - g.value(n.inputs[3]).data->as_double(c) * sc);
  }
  return a;
}

bool conv_like(Op op) {
  return op == Op::kConv || op == Op::kAveragePool || op == Op::kGlobalAveragePool || op == Op::kMaxPool ||
         op == Op::kPad;
}

}  // namespace

size_t fold_conv_batchnorm(Graph& g) {
  const std::vector<std::vector<size_t>> readers = g.consumers();
  std::vector<int64_t> producer(g.values.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const ValueId o : g.nodes[i].outputs) {
      if (o != kNoValue) producer[static_cast<size_t>(o)] = static_cast<int64_t>(i);
    }
  }
  std::vector<bool> drop(g.nodes.size(), false);
  size_t count = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& bn = g.nodes[i];
    if (bn.op != Op::kBatchNormalization) continue;
    const std::optional<ChannelAffine> a = bn_affine(g, bn);
    if (!a) continue;
    const ValueId x = bn.inputs[0];
    const int64_t pi = producer[static_cast<size_t>(x)];
    Node* prev = pi >= 0 ? &g.nodes[static_cast<size_t>(pi)] : nullptr;
    const bool sole_reader = readers[static_cast<size_t>(x)].size() == 1 && !g.is_graph_output(x);
    if (prev != nullptr && prev->op == Op::kConv && sole_reader && attr_int(g, *prev, "relu", 0) == 0 &&
        g.is_constant(prev->inputs[1]) && (input(*prev, 2) == kNoValue || g.is_constant(input(*prev, 2)))) {
      // Into the Conv: W'[o] = W[o] * s[o], b'[o] = b[o] * s[o] + t[o] (float32, like the model's).
      const Value& wv = g.value(prev->inputs[1]);
      const Dims wd = *wv.shape;
      const auto O = static_cast<size_t>(wd[0]);
      if (O != a->s.size()) continue;
      TensorData w = *wv.data;
      const size_t per = w.size() / O;
      std::vector<double> wf(w.size());
      for (size_t k = 0; k < w.size(); ++k) wf[k] = static_cast<float>(w.as_double(k) * a->s[k / per]);
      std::vector<double> bf(O);
      const ValueId bid = input(*prev, 2);
      for (size_t o = 0; o < O; ++o) {
        const double b0 = bid == kNoValue ? 0.0 : g.value(bid).data->as_double(o);
        bf[o] = static_cast<float>(b0 * a->s[o] + a->t[o]);
      }
      const std::string base = prev->name + "." + bn.name;
      const ValueId nw = g.add_constant(base + ".w_folded", DType::kFloat32, wd, TensorData{wf, {}});
      const ValueId nb = g.add_constant(base + ".b_folded", DType::kFloat32, Dims{static_cast<int64_t>(O)}, TensorData{bf, {}});
      prev = &g.nodes[static_cast<size_t>(pi)];  // add_constant does not touch nodes; keep the pointer honest
      prev->inputs.resize(3);
      prev->inputs[1] = nw;
      prev->inputs[2] = nb;
      prev->origin.push_back(bn.label());
      g.replace_uses(bn.outputs[0], x);  // graph outputs keep their names
      drop[i] = true;
      ++count;
      continue;
    }
    // Standalone inside a CNN (after a pool, a Relu of a conv, or right before a conv): a 1x1
    // depthwise Conv with weight s[c] and bias t[c] (the device runs only its diagonal tiles).
    bool in_cnn = prev != nullptr && (conv_like(prev->op) || (prev->op == Op::kRelu && [&] {
                    const int64_t pp = producer[static_cast<size_t>(prev->inputs[0])];
                    return pp >= 0 && conv_like(g.nodes[static_cast<size_t>(pp)].op);
                  }()));
    for (const size_t r : readers[static_cast<size_t>(bn.outputs[0])]) in_cnn = in_cnn || conv_like(g.nodes[r].op);
    if (!in_cnn) continue;  // lower_feature_maps runs it as a per-feature map
    const auto C = static_cast<int64_t>(a->s.size());
    std::vector<double> wf(a->s.size()), bf(a->s.size());
    for (size_t c = 0; c < a->s.size(); ++c) {
      wf[c] = static_cast<float>(a->s[c]);
      bf[c] = static_cast<float>(a->t[c]);
    }
    const ValueId nw = g.add_constant(bn.name + ".scale_dw", DType::kFloat32, Dims{C, 1, 1, 1}, TensorData{wf, {}});
    const ValueId nb = g.add_constant(bn.name + ".shift_dw", DType::kFloat32, Dims{C}, TensorData{bf, {}});
    Node& n = g.nodes[i];  // its origin already names the BatchNormalization
    n.op = Op::kConv;
    n.inputs = {x, nw, nb};
    n.outputs.resize(1);
    n.attrs.clear();
    Attribute gr;
    gr.kind = Attribute::Kind::kInt;
    gr.i = C;
    n.set_attr("group", gr);
    ++count;
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!drop[i]) kept.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(kept);
  return count;
}

size_t fuse_conv_relu(Graph& g) {
  const std::vector<std::vector<size_t>> readers = g.consumers();
  std::vector<bool> drop(g.nodes.size(), false);
  size_t fused = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& c = g.nodes[i];
    if ((c.op != Op::kConv && c.op != Op::kAveragePool && c.op != Op::kGlobalAveragePool) ||
        attr_int(g, c, "relu", 0) != 0) {
      continue;
    }
    const ValueId y = c.outputs[0];
    const auto& rd = readers[static_cast<size_t>(y)];
    if (rd.size() != 1 || g.is_graph_output(y)) continue;
    Node& r = g.nodes[rd[0]];
    if (r.op != Op::kRelu) continue;
    Attribute a;
    a.kind = Attribute::Kind::kInt;
    a.i = 1;
    c.set_attr("relu", a);
    c.origin.push_back(r.label());
    g.replace_uses(r.outputs[0], y);  // graph outputs keep their names
    drop[rd[0]] = true;
    ++fused;
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!drop[i]) kept.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(kept);
  return fused;
}

std::vector<float> conv_float(const Graph& g, const Node& n, std::span<const float> x, uint64_t batch) {
  const nn::ConvGeometry geo = conv_geometry(g, n);
  const uint64_t C = geo.in_c, H = geo.in_h, W = geo.in_w, O = geo.out_c, KH = geo.kernel_h, KW = geo.kernel_w;
  const uint64_t Ho = geo.out_h(), Wo = geo.out_w();
  if (x.size() != batch * C * H * W) {
    g.fail(ErrorKind::kInvalidArgument, n, fmt::format("input has {} values, expected {}", x.size(), batch * C * H * W));
  }
  if (n.op == Op::kMaxPool) {
    // Max over the window's pixels inside the image (pads are skipped).
    std::vector<float> y(batch * O * Ho * Wo);
    for (uint64_t bc = 0; bc < batch * C; ++bc) {
      const float* img = x.data() + bc * H * W;
      for (uint64_t oy = 0; oy < Ho; ++oy) {
        for (uint64_t ox = 0; ox < Wo; ++ox) {
          float m = -std::numeric_limits<float>::infinity();
          for (uint64_t dy = 0; dy < KH; ++dy) {
            const int64_t iy = static_cast<int64_t>(oy * geo.stride_h + dy * geo.dilation_h) - geo.pad_top;
            if (iy < 0 || iy >= static_cast<int64_t>(H)) continue;
            for (uint64_t dx = 0; dx < KW; ++dx) {
              const int64_t ix = static_cast<int64_t>(ox * geo.stride_w + dx * geo.dilation_w) - geo.pad_left;
              if (ix >= 0 && ix < static_cast<int64_t>(W)) m = std::max(m, img[static_cast<uint64_t>(iy) * W + static_cast<uint64_t>(ix)]);
            }
          }
          y[(bc * Ho + oy) * Wo + ox] = m;
        }
      }
    }
    return y;
  }
  const bool relu = attr_int(g, n, "relu", 0) != 0;
  if (n.op != Op::kConv) {
    // Average over the window in double: the sum of the positions inside the image (plus a Pad's
    // constant on its border) over the pixel's divisor (count_include_pad, ceil_mode: pool_groups.h).
    std::vector<float> y(batch * O * Ho * Wo);
    const detail::PoolCounts counts = detail::avgpool_counts(g, n, geo);
    const double pv = detail::pool_pad_value(g, n);
    for (uint64_t bc = 0; bc < batch * C; ++bc) {
      const float* img = x.data() + bc * H * W;
      for (uint64_t oy = 0; oy < Ho; ++oy) {
        for (uint64_t ox = 0; ox < Wo; ++ox) {
          double s = 0;
          for (uint64_t dy = 0; dy < KH; ++dy) {
            const int64_t iy = static_cast<int64_t>(oy * geo.stride_h + dy * geo.dilation_h) - geo.pad_top;
            if (iy < 0 || iy >= static_cast<int64_t>(H)) {
              s += pv * static_cast<double>(KW);
              continue;
            }
            for (uint64_t dx = 0; dx < KW; ++dx) {
              const int64_t ix = static_cast<int64_t>(ox * geo.stride_w + dx * geo.dilation_w) - geo.pad_left;
              if (ix >= 0 && ix < static_cast<int64_t>(W)) {
                s += img[static_cast<uint64_t>(iy) * W + static_cast<uint64_t>(ix)];
              } else {
                s += pv;
              }
            }
          }
          const double avg = s / detail::avgpool_divisor(counts, oy, ox);
          y[(bc * Ho + oy) * Wo + ox] = static_cast<float>(relu ? std::max(avg, 0.0) : avg);
        }
      }
    }
    return y;
  }
  const std::vector<double> wd = dense_weights(g, n, geo);
  std::vector<float> w(wd.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(wd[i]);
  std::vector<float> bias(O, 0.0f);
  if (const ValueId b = input(n, 2); b != kNoValue) {
    for (size_t o = 0; o < O; ++o) bias[o] = static_cast<float>(g.value(b).data->as_double(o));
  }
  std::vector<float> y(batch * O * Ho * Wo);
  for (uint64_t bi = 0; bi < batch; ++bi) {
    for (uint64_t o = 0; o < O; ++o) {
      for (uint64_t oy = 0; oy < Ho; ++oy) {
        for (uint64_t ox = 0; ox < Wo; ++ox) {
          double acc = bias[o];
          for (uint64_t c = 0; c < C; ++c) {
            for (uint64_t dy = 0; dy < KH; ++dy) {
              const int64_t iy = static_cast<int64_t>(oy * geo.stride_h + dy * geo.dilation_h) - geo.pad_top;
              if (iy < 0 || iy >= static_cast<int64_t>(H)) continue;
              for (uint64_t dx = 0; dx < KW; ++dx) {
                const int64_t ix = static_cast<int64_t>(ox * geo.stride_w + dx * geo.dilation_w) - geo.pad_left;
                if (ix < 0 || ix >= static_cast<int64_t>(W)) continue;
                acc += static_cast<double>(x[((bi * C + c) * H + static_cast<uint64_t>(iy)) * W + static_cast<uint64_t>(ix)]) *
                       w[((o * C + c) * KH + dy) * KW + dx];
              }
            }
          }
          y[((bi * O + o) * Ho + oy) * Wo + ox] = static_cast<float>(relu ? std::max(acc, 0.0) : acc);
        }
      }
    }
  }
  return y;
}

nn::QConv2d quantize_conv(const Graph& g, const Node& n, float in_scale, float out_scale) {
  nn::QConv2d q;
  q.geom = conv_geometry(g, n);
  q.name = n.origin.empty() ? n.label() : fmt::format("{}", n.origin.front());
  for (size_t i = 1; i < n.origin.size(); ++i) q.name += " + " + n.origin[i];
  q.relu = attr_int(g, n, "relu", 0) != 0;
  q.out_scale = out_scale;
  const uint64_t O = q.geom.out_c;
  if (n.op == Op::kMaxPool) {
    // int8 max of the input as it is: requantization is monotonic, so the max of the quantized
    // values is the quantized max (in and out scales are equal; compile_quantized_cnn sees to it).
    if (in_scale != out_scale) {
      g.fail(ErrorKind::kInternal, n, fmt::format("a max pool keeps its scale ({:g} in, {:g} out)", in_scale, out_scale));
    }
    q.max_pool = true;
    q.indices = n.outputs.size() > 1 && n.outputs[1] != kNoValue && g.is_graph_output(n.outputs[1]);
    q.indices_column_major = attr_int(g, n, "storage_order", 0) == 1;
    return q;
  }
  if (n.op != Op::kConv) {
    // Identity weights (1 on the channel diagonal of every tap) and the window size in the
    // requantization: y = round(sum * in_scale / (KH * KW * out_scale)).
    const uint64_t taps = uint64_t{q.geom.kernel_h} * q.geom.kernel_w;
    q.w_q.assign(O * O * taps, 0);
    for (uint64_t o = 0; o < O; ++o) {
      for (uint64_t t = 0; t < taps; ++t) q.w_q[(o * O + o) * taps + t] = 1;
    }
    const double real = static_cast<double>(in_scale) / (static_cast<double>(taps) * static_cast<double>(out_scale));
    try {
      const nn::Requant rq = nn::quantize_multiplier(real);
      q.bias_q.assign(O, 0);
      q.mult.assign(O, rq.mult);
      q.shift.assign(O, rq.shift);
    } catch (const Error& e) {
      g.fail(ErrorKind::kUnsupported, n, e.what());
    }
    detail::add_pool_groups(g, n, q, in_scale, out_scale);  // a divisor that varies by pixel, a Pad's constant
    return q;
  }
  const uint64_t per = uint64_t{q.geom.in_c} * q.geom.kernel_h * q.geom.kernel_w;
  const std::vector<double> wd = dense_weights(g, n, q.geom);
  q.w_q.resize(O * per);
  const ValueId b = input(n, 2);
  for (uint64_t o = 0; o < O; ++o) {
    float m = 0;
    for (uint64_t k = 0; k < per; ++k) {
      const auto v = static_cast<float>(wd[o * per + k]);
      if (!std::isfinite(v)) {
        g.fail(ErrorKind::kUnsupported, n, fmt::format("weight '{}' element {} is not finite", g.value(n.inputs[1]).name,
                                                       o * per + k));
      }
      m = std::max(m, std::fabs(v));
    }
    const float ws = m > 0 ? m / 127.0f : 1.0f;
    for (uint64_t k = 0; k < per; ++k) {
      const double v = std::round(static_cast<double>(static_cast<float>(wd[o * per + k])) / ws);
      q.w_q[o * per + k] = static_cast<int8_t>(std::clamp(v, -127.0, 127.0));
    }
    const double bf = b == kNoValue ? 0.0 : static_cast<double>(static_cast<float>(g.value(b).data->as_double(o)));
    if (!std::isfinite(bf)) g.fail(ErrorKind::kUnsupported, n, fmt::format("bias element {} is not finite", o));
    q.bias_q.push_back(sat32(std::round(bf / (static_cast<double>(in_scale) * ws))));
    const double real = static_cast<double>(in_scale) * ws / static_cast<double>(out_scale);
    try {
      const nn::Requant rq = nn::quantize_multiplier(real);
      q.mult.push_back(rq.mult);
      q.shift.push_back(rq.shift);
    } catch (const Error& e) {
      g.fail(ErrorKind::kUnsupported, n, fmt::format("output channel {}: {}", o, e.what()));
    }
  }
  return q;
}

namespace {

// An Add or Concat of activations in a CNN: [batch, C, H, W] maps of one height and width; an Add
// of two maps of the same shape, a Concat along the channels (axis 1).
void check_merge(const Graph& g, const Node& n) {
  const Dims& d0 = *g.value(n.inputs[0]).shape;
  for (const ValueId v : n.inputs) {
    const Dims& d = *g.value(v).shape;
    if (d.size() != 4 || d[2] != d0[2] || d[3] != d0[3] || (n.op == Op::kAdd && d != d0)) {
      g.fail(ErrorKind::kUnsupported, n,
             fmt::format("input '{}' has shape {}, input '{}' {}: {} maps of [batch, C, H, W] with the same {}",
                         g.value(n.inputs[0]).name, dims_string(d0), g.value(v).name, dims_string(d),
                         n.op == Op::kAdd ? "an Add adds two" : "a Concat joins",
                         n.op == Op::kAdd ? "shape" : "height and width"));
    }
  }
  if (n.op == Op::kAdd && n.inputs.size() != 2) g.fail(ErrorKind::kUnsupported, n, "an Add has two inputs");
  if (n.op == Op::kConcat) {
    int64_t axis = attr_int(g, n, "axis", 0);
    if (axis < 0) axis += 4;
    if (axis != 1) {
      g.fail(ErrorKind::kUnsupported, n, fmt::format("axis {}: a Concat of feature maps joins the channels (axis 1)",
                                                     attr_int(g, n, "axis", 0)));
    }
  }
}

}  // namespace

nn::QConv2d quantize_merge(const Graph& g, const Node& n, std::span<const float> in_scales, float out_scale, bool relu) {
  // A 1x1 convolution over the channel concatenation of the inputs [x_0; x_1; ...].
  //   Add:    y[o] = (s_0 x_0[o] + s_1 x_1[o]) / s_out: weights w_k = round(127 s_k / max s) on the
  //           diagonal of block k, one multiplier max s / (127 s_out) for every channel.
  //   Concat: y[o] = s_k x_k[c] / s_out for the channel o = offset_k + c: weight 127 on the
  //           diagonal, the multiplier s_k / (127 s_out) per output channel.
  nn::QConv2d q;
  q.name = n.origin.empty() ? n.label() : fmt::format("{}", n.origin.front());
  for (size_t i = 1; i < n.origin.size(); ++i) q.name += " + " + n.origin[i];
  q.relu = relu;
  q.out_scale = out_scale;
  std::vector<uint32_t> ch;
  for (const ValueId v : n.inputs) ch.push_back(static_cast<uint32_t>((*g.value(v).shape)[1]));
  const Dims& d0 = *g.value(n.inputs[0]).shape;
  q.geom.in_h = static_cast<uint32_t>(d0[2]);
  q.geom.in_w = static_cast<uint32_t>(d0[3]);
  for (const uint32_t c : ch) q.geom.in_c += c;
  q.geom.out_c = n.op == Op::kAdd ? ch[0] : q.geom.in_c;
  const uint64_t O = q.geom.out_c, C = q.geom.in_c;
  q.w_q.assign(O * C, 0);
  q.bias_q.assign(O, 0);
  std::vector<double> real(O);
  if (n.op == Op::kAdd) {
    const double m = std::max(in_scales[0], in_scales[1]);
    for (uint64_t o = 0; o < O; ++o) {
      for (size_t k = 0; k < 2; ++k) {
        const double w = std::round(127.0 * in_scales[k] / m);
        q.w_q[o * C + k * O + o] = static_cast<int8_t>(w);
      }
      real[o] = m / (127.0 * out_scale);
    }
  } else {
    uint64_t off = 0;
    for (size_t k = 0; k < ch.size(); ++k) {
      for (uint64_t c = 0; c < ch[k]; ++c) {
        q.w_q[(off + c) * C + off + c] = 127;
        real[off + c] = in_scales[k] / (127.0 * out_scale);
      }
      off += ch[k];
    }
  }
  for (uint64_t o = 0; o < O; ++o) {
    try {
      const nn::Requant rq = nn::quantize_multiplier(real[o]);
      q.mult.push_back(rq.mult);
      q.shift.push_back(rq.shift);
    } catch (const Error& e) {
      g.fail(ErrorKind::kUnsupported, n, e.what());
    }
  }
  return q;
}

int CnnInputs::vector_input(const Graph& g, ValueId v) const {
  for (size_t k = 0; k < g.inputs.size(); ++k) {
    if (g.inputs[k].value == v && !image[k]) return static_cast<int>(k);
  }
  return -1;
}

void CnnInputs::check_used(const Graph& g, const std::function<bool(int32_t source)>& image_read,
                           std::span<const int32_t> head_sources) const {
  for (size_t k = 0; k < g.inputs.size(); ++k) {
    const int32_t s = -1 - static_cast<int32_t>(k);
    const bool used =
        image[k] ? image_read(s) : std::find(head_sources.begin(), head_sources.end(), s) != head_sources.end();
    if (!used) {
      g.fail(ErrorKind::kUnsupported,
             fmt::format("graph input '{}' {}", g.value(g.inputs[k].value).name,
                         image[k] ? "is not read by a convolution or pooling layer"
                                  : "does not join the dense head in a Concat with the flattened map along the features "
                                    "(a vector input of a CNN runs only there)"));
    }
  }
}

CnnInputs cnn_inputs(const Graph& g) {
  if (g.inputs.empty()) g.fail(ErrorKind::kUnsupported, "a CNN needs an input");
  CnnInputs r;
  std::vector<std::string> names;
  for (const GraphInput& gi : g.inputs) names.push_back("'" + g.value(gi.value).name + "'");
  for (const GraphInput& gi : g.inputs) {
    const Value& v = g.value(gi.value);
    const bool several = g.inputs.size() > 1;
    if (v.dtype != DType::kFloat32 || !v.shape || (v.shape->size() != 4 && !(several && v.shape->size() == 2))) {
      g.fail(ErrorKind::kUnsupported,
             several ? fmt::format("graph input '{}' has shape {}; a CNN's inputs ({}) are float32 images [batch, "
                                   "channels, height, width] or vectors [batch, features] that join the dense head",
                                   v.name, v.shape ? dims_string(*v.shape) : "unknown", fmt::join(names, ", "))
                     : fmt::format("graph input '{}' has shape {}; a CNN's input is [batch, channels, height, width]",
                                   v.name, v.shape ? dims_string(*v.shape) : "unknown"));
    }
    r.image.push_back(v.shape->size() == 4);
    r.offset.push_back(r.row);
    r.features.push_back(static_cast<uint64_t>(*checked_elements(detail::features(*v.shape))));
    r.row += r.features.back();
  }
  if (std::find(r.image.begin(), r.image.end(), true) == r.image.end()) {
    g.fail(ErrorKind::kUnsupported, fmt::format("a CNN needs an image input [batch, channels, height, width]; its inputs "
                                                "({}) are all vectors", fmt::join(names, ", ")));
  }
  return r;
}

nn::QCnn compile_quantized_cnn(Graph graph, std::span<const float> calib, uint64_t rows) {
  const Graph g = optimize(std::move(graph));
  const CnnInputs ins = cnn_inputs(g);
  if (rows == 0) throw Error(ErrorKind::kInvalidArgument, "calibration data has no rows");
  if (calib.size() != rows * ins.row) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: calibration data has {} values, expected {} rows x {}",
                                                         g.source, calib.size(), rows, ins.row));
  }
  nn::QCnn net;
  // Every image input's scale calibrated on its own columns; a vector input's comes from the head's
  // quantization (its part of the head's first layer).
  std::vector<float> in_scale(g.inputs.size(), 1.0f);
  for (size_t k = 0; k < g.inputs.size(); ++k) {
    const Dims& d = *g.value(g.inputs[k].value).shape;
    nn::CnnGraphInput ci;
    ci.name = g.value(g.inputs[k].value).name;
    ci.image = d.size() == 4;
    ci.c = static_cast<uint32_t>(d[1]);
    ci.h = ci.image ? static_cast<uint32_t>(d[2]) : 1;
    ci.w = ci.image ? static_cast<uint32_t>(d[3]) : 1;
    if (ci.image) {
      in_scale[k] = nn::symmetric_scale(nn::row_columns(calib, rows, ins.row, ins.offset[k], ci.features()));
      ci.scale = in_scale[k];
    }
    net.inputs.push_back(std::move(ci));
  }
  for (const nn::CnnGraphInput& ci : net.inputs) {
    if (!ci.image) continue;
    net.in_c = ci.c, net.in_h = ci.h, net.in_w = ci.w;
    net.input_scale = ci.scale;
    break;
  }
  if (g.inputs.size() == 1) net.inputs.clear();  // one input: in_c/in_h/in_w/input_scale, as always

  // The layers, in node order: conv/pool nodes reading the input or an earlier layer's output,
  // residual Adds and channel Concats of such outputs (1x1 convolutions over the channel
  // concatenation, quantize_merge), a Relu fused into the layer it follows; then one
  // Flatten/Reshape and the head, or nothing (a feature-map output).
  struct Layer {
    const Node* node = nullptr;
    std::vector<int32_t> src;  // -1: the input
    bool relu = false;         // a Relu fused here (Add/Concat; a Conv's is its attribute)
    std::string relu_label;
    ValueId value = kNoValue;  // the layer's output (after the fused Relu)
    nn::Activation act;        // a function fused after it (int8 lookup table, cnn_activations)
    ValueId act_in = kNoValue; // the function's input (the table's input scale is calibrated on it)
  };
  std::vector<Layer> layers;
  std::vector<int32_t> layer_of(g.values.size(), std::numeric_limits<int32_t>::min());
  for (size_t k = 0; k < g.inputs.size(); ++k) {
    if (ins.image[k]) layer_of[static_cast<size_t>(g.inputs[k].value)] = -1 - static_cast<int32_t>(k);
  }
  const std::vector<std::vector<size_t>> readers = g.consumers();
  auto is_conv_like = [](Op op) {
    return op == Op::kConv || op == Op::kAveragePool || op == Op::kGlobalAveragePool || op == Op::kMaxPool;
  };
  auto is_layer_value = [&](ValueId v) { return layer_of[static_cast<size_t>(v)] != std::numeric_limits<int32_t>::min(); };
  size_t i = 0;
  for (; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.op == Op::kRelu && is_layer_value(n.inputs[0]) && layer_of[static_cast<size_t>(n.inputs[0])] >= 0) {
      Layer& l = layers[static_cast<size_t>(layer_of[static_cast<size_t>(n.inputs[0])])];
      const ValueId v = n.inputs[0];
      // After a MaxPool the Relu moves to the layer before the pool (max commutes with ReLU), or,
      // when that layer cannot take it, into the pool's own ACTIVATE.
      Layer* host = &l;
      const bool pool_indices = l.node->outputs.size() > 1 && l.node->outputs[1] != kNoValue;
      if (l.node->op == Op::kMaxPool && l.src[0] >= 0 && !pool_indices) {  // Indices: of the input before the Relu
        Layer& p = layers[static_cast<size_t>(l.src[0])];
        if (p.node->op != Op::kMaxPool && readers[static_cast<size_t>(p.value)].size() == 1 && !g.is_graph_output(p.value)) {
          host = &p;
        }
      }
      if (l.value != v || host->relu || !host->act.none() || attr_int(g, *host->node, "relu", 0) != 0 ||
          readers[static_cast<size_t>(v)].size() != 1 || g.is_graph_output(v)) {
        g.fail(ErrorKind::kUnsupported, n, "a Relu in a CNN must be the only reader of a Conv, pool, Add or Concat output");
      }
      host->relu = true;
      host->relu_label = n.label();
      l.value = n.outputs[0];
      layer_of[static_cast<size_t>(n.outputs[0])] = layer_of[static_cast<size_t>(v)];
      continue;
    }
    if (is_activation_op(n.op) && is_layer_value(n.inputs[0]) && layer_of[static_cast<size_t>(n.inputs[0])] >= 0) {
      // Sigmoid, Tanh, HardSwish, ... after a conv/pool/merge layer: its lookup table joins the
      // layer's ACTIVATE (like a fused Relu), the requantization targets the table's input scale.
      Layer& l = layers[static_cast<size_t>(layer_of[static_cast<size_t>(n.inputs[0])])];
      const ValueId v = n.inputs[0];
      if (l.value != v || !l.act.none() || l.node->op == Op::kMaxPool || readers[static_cast<size_t>(v)].size() != 1 ||
          g.is_graph_output(v)) {
        g.fail(ErrorKind::kUnsupported, n,
               "an activation function in a CNN must be the only reader of a Conv, average pool, Add or Concat output "
               "(one function per layer, not after a MaxPool)");
      }
      l.act = activation_of(g, n);
      l.act.node = n.label();
      l.act_in = v;
      l.value = n.outputs[0];
      layer_of[static_cast<size_t>(n.outputs[0])] = layer_of[static_cast<size_t>(v)];
      continue;
    }
    const bool merge = (n.op == Op::kAdd || n.op == Op::kConcat) && !n.inputs.empty() &&
                       std::all_of(n.inputs.begin(), n.inputs.end(), [&](ValueId v) { return is_layer_value(v); });
    if (!is_conv_like(n.op) && !merge) break;
    for (const ValueId v : n.inputs) {
      if (const int k = ins.vector_input(g, v); k >= 0) {
        g.fail(ErrorKind::kUnsupported, n,
               fmt::format("reads the vector input '{}'; a CNN's [batch, features] input joins the dense head (a Concat "
                           "with the flattened last map along the features, right after the Flatten)",
                           g.value(v).name));
      }
    }
    if (!merge && !is_layer_value(n.inputs[0])) g.fail(ErrorKind::kUnsupported, n, "is not part of a chain of layers");
    Layer l;
    l.node = &n;
    for (size_t k = 0; k < (merge ? n.inputs.size() : 1); ++k) l.src.push_back(layer_of[static_cast<size_t>(n.inputs[k])]);
    l.value = n.outputs[0];
    if (merge) check_merge(g, n);
    if (n.op == Op::kMaxPool && n.outputs.size() > 1 && n.outputs[1] != kNoValue &&
        !readers[static_cast<size_t>(n.outputs[1])].empty()) {
      g.fail(ErrorKind::kUnsupported, n, "its Indices output feeds another node (only as a graph output)");
    }
    layer_of[static_cast<size_t>(l.value)] = static_cast<int32_t>(layers.size());
    layers.push_back(std::move(l));
  }
  if (layers.empty()) g.fail(ErrorKind::kUnsupported, "the model has no Conv (an MLP runs through compile_quantized)");
  const std::vector<std::vector<float>> acts = interpret_float(g, calib, rows);
  ValueId act = layers.back().value;
  // Output scales, last layer first: calibrated (the last one is the head's input scale), except
  // that a MaxPool's input takes its output's scale (int8 max is then exact).
  auto quantize_convs = [&](float last_scale) {
    const size_t L = layers.size();
    std::vector<float> out_scales(L);
    for (size_t c = 0; c < L; ++c) {
      out_scales[c] = c + 1 == L ? last_scale : nn::symmetric_scale(acts[static_cast<size_t>(layers[c].value)]);
    }
    for (size_t c = L; c-- > 0;) {
      if (layers[c].node->op != Op::kMaxPool) continue;
      const int32_t s = layers[c].src[0];
      (s < 0 ? in_scale[static_cast<size_t>(-1 - s)] : out_scales[static_cast<size_t>(s)]) = out_scales[c];
    }
    for (size_t c = 0; c < L; ++c) {
      const Layer& l = layers[c];
      std::vector<float> in_scales;
      for (const int32_t s : l.src) in_scales.push_back(s < 0 ? in_scale[static_cast<size_t>(-1 - s)] : out_scales[static_cast<size_t>(s)]);
      // With a function the layer requantizes into the table's input scale (calibrated on the
      // function's input); the table maps it to the layer's output scale.
      const float req_scale = l.act.none() ? out_scales[c] : nn::symmetric_scale(acts[static_cast<size_t>(l.act_in)]);
      nn::QConv2d q = l.src.size() > 1 || l.node->op == Op::kAdd || l.node->op == Op::kConcat
                          ? quantize_merge(g, *l.node, in_scales, req_scale, l.relu)
                          : quantize_conv(g, *l.node, in_scales[0], req_scale);
      if (l.relu) q.relu = true;
      if (!l.relu_label.empty()) q.name += " + " + l.relu_label;
      if (!l.act.none()) {
        q.lut = nn::act_table(l.act, req_scale, out_scales[c]);
        q.out_scale = out_scales[c];
        q.name += " + " + l.act.node;
      }
      if (l.src != std::vector<int32_t>{static_cast<int32_t>(c) - 1}) q.sources = l.src;
      net.convs.push_back(std::move(q));
    }
    // A MaxPool reading an image input set that input's scale: the inputs keep theirs.
    bool first = true;
    for (size_t k = 0; k < g.inputs.size(); ++k) {
      if (!ins.image[k]) continue;
      if (!net.inputs.empty()) net.inputs[k].scale = in_scale[k];
      if (first) net.input_scale = in_scale[k];
      first = false;
    }
  };
  // The graph outputs: the network's own (`final_value`: the head's output, or the last map or its
  // Flatten) and, with several outputs, layer maps (a hidden layer's output after its fused Relu or
  // function: nn::CnnOutput).
  auto assign_outputs = [&](ValueId final_value) {
    bool has_final = false;
    for (const GraphOutput& o : g.outputs) {
      nn::CnnOutput c;
      c.name = o.name;
      const auto pool = std::find_if(layers.begin(), layers.end(), [&](const Layer& l) {
        return l.node->op == Op::kMaxPool && l.node->outputs.size() > 1 && l.node->outputs[1] == o.value;
      });
      if (pool != layers.end()) {  // a max pool's Indices
        c.layer = static_cast<int32_t>(pool - layers.begin());
        c.indices = true;
      } else if (o.value != final_value) {
        const int32_t k = layer_of[static_cast<size_t>(o.value)];
        if (k < 0 || layers[static_cast<size_t>(k)].value != o.value) {
          g.fail(ErrorKind::kUnsupported,
                 fmt::format("graph output '{}' is neither the network's output nor a conv/pool layer's output (after "
                             "its Relu or function)", o.name));
        }
        c.layer = k;
      } else {
        has_final = true;
      }
      net.outputs.push_back(std::move(c));
    }
    if (!has_final) {
      g.fail(ErrorKind::kUnsupported, *layers.back().node,
             fmt::format("ends the network but no graph output is its result ({} outputs)", g.outputs.size()));
    }
    if (g.outputs.size() == 1) net.outputs.clear();  // one output: the network's (the usual form)
  };
  // Every vector input joins the head (in a Concat with the Flatten's output), every image input
  // feeds a layer.
  auto check_inputs_used = [&](const std::vector<int32_t>& head_src) {
    ins.check_used(
        g,
        [&](int32_t s) {
          return std::any_of(layers.begin(), layers.end(),
                             [&](const Layer& l) { return std::find(l.src.begin(), l.src.end(), s) != l.src.end(); });
        },
        head_src);
  };
  // A feature-map output: the model ends in the last layer, or in a Flatten/Reshape of it (the
  // map in NCHW order is the flattened row).
  const bool ends_in_map = i == g.nodes.size();
  const bool ends_in_flatten = i + 1 == g.nodes.size() && (g.nodes[i].op == Op::kFlatten || g.nodes[i].op == Op::kReshape) &&
                               g.nodes[i].inputs[0] == act;
  if (ends_in_map || ends_in_flatten) {
    check_inputs_used({});
    quantize_convs(nn::symmetric_scale(acts[static_cast<size_t>(act)]));
    assign_outputs(ends_in_map ? act : g.nodes[i].outputs[0]);
    net.check();
    return net;
  }
  if (g.nodes[i].op != Op::kFlatten && g.nodes[i].op != Op::kReshape) {
    g.fail(ErrorKind::kUnsupported, g.nodes[i],
           "follows the convolutions; a CNN runs Conv (+Relu), AveragePool, GlobalAveragePool and MaxPool layers, "
           "residual Adds and channel Concats of their outputs, then Flatten/Reshape and dense layers (or ends in a "
           "feature map)");
  }
  const Node& flat = g.nodes[i++];
  if (flat.inputs[0] != act || g.value(flat.outputs[0]).shape->size() != 2) {
    g.fail(ErrorKind::kUnsupported, flat, "must flatten the last convolution's output to [batch, features]");
  }
  act = flat.outputs[0];
  nn::FloatNetwork head;
  head.source = g.source;
  // A Concat of the flattened map with vector inputs along the features: the head's row is the
  // parts side by side, each quantized with its own scale (QCnn::head_sources).
  const int32_t map_source = static_cast<int32_t>(layers.size()) - 1;
  const std::vector<int32_t> head_src = detail::head_concat_sources(g, ins, i, act, map_source);
  if (!head_src.empty()) {
    const Node& cat = g.nodes[i - 1];
    for (size_t p = 0; p < head_src.size(); ++p) {
      const Value& vv = g.value(cat.inputs[p]);
      const std::vector<int64_t>& declared = head_src[p] == map_source || g.inputs[static_cast<size_t>(-1 - head_src[p])].declared.empty()
                                  ? *vv.shape
                                  : g.inputs[static_cast<size_t>(-1 - head_src[p])].declared;
      head.input_parts.push_back(nn::InputPart{vv.name, declared, static_cast<uint32_t>((*vv.shape)[1])});
    }
    act = cat.outputs[0];
  }
  const ValueId head_in = act;
  head.input_name = g.value(act).name;
  head.output_name = g.outputs[0].name;
  for (const GraphOutput& o : g.outputs) {
    if (layer_of[static_cast<size_t>(o.value)] == std::numeric_limits<int32_t>::min()) head.output_name = o.name;
  }
  head.input_features = static_cast<uint32_t>((*g.value(act).shape)[1]);
  for (; i < g.nodes.size(); ++i) {
    detail::add_head_node(g, ins, g.nodes[i], act, head);
    act = g.nodes[i].outputs[0];
  }
  if (head.layers.empty()) g.fail(ErrorKind::kUnsupported, "a CNN needs at least one dense layer after the Flatten");
  check_inputs_used(head_src);
  const std::vector<float>& flat_calib = acts[static_cast<size_t>(head_in)];
  Graph hg = graph_of_float_network(head);
  quantize(hg, flat_calib, rows);
  net.head = lower_to_qnetwork(hg);

  float map_scale = net.head.input_scale;
  if (!head_src.empty()) {
    net.head_sources = head_src;
    for (size_t p = 0; p < head_src.size(); ++p) {
      const float s = net.head.input_part_scales.at(p);
      if (head_src[p] >= 0) {
        map_scale = s;
      } else {
        const auto k = static_cast<size_t>(-1 - head_src[p]);
        in_scale[k] = s;
        net.inputs.at(k).scale = s;
      }
    }
  }
  quantize_convs(map_scale);
  assign_outputs(act);
  net.check();
  return net;
}

}  // namespace tpuw::compiler
