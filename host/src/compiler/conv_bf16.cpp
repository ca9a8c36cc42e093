// A CNN for bf16 inference (tpuw/compiler/conv_bf16.h): the int8 CNN compiler's chain without
// calibration; geometry, attribute rules and fusions are the int8 path's (conv_geometry, optimize).
#include "tpuw/compiler/conv_bf16.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "cnn_head.h"
#include "pass_util.h"
#include "pool_groups.h"
#include "tpuw/compiler/activations.h"
#include "tpuw/compiler/conv.h"
#include "tpuw/compiler/passes.h"
#include "tpuw/error.h"

namespace tpuw::compiler {
namespace {

using detail::attr_int;
using detail::input;

std::string layer_name(const Node& n) {
  std::string s = n.origin.empty() ? n.label() : n.origin.front();
  for (size_t i = 1; i < n.origin.size(); ++i) s += " + " + n.origin[i];
  return s;
}

Bf16ConvLayer lower_layer(const Graph& g, const Node& n) {
  Bf16ConvLayer l;
  l.name = layer_name(n);
  l.geom = conv_geometry(g, n);
  const uint64_t O = l.geom.out_c, C = l.geom.in_c, T = uint64_t{l.geom.kernel_h} * l.geom.kernel_w;
  if (n.op == Op::kMaxPool) {
    l.kind = Bf16ConvLayer::Kind::kMaxPool;
    return l;
  }
  l.bias.assign(O, 0.0f);
  if (n.op != Op::kConv) {
    // An average pool: 1/taps on the channel diagonal of every tap when every pixel divides by the
    // full window. Otherwise (count_include_pad=0 with pads, auto_pad SAME, ceil_mode's partial
    // windows, a Pad's constant border) the weight is 1 (the window's exact sum in fp32) and every
    // pixel belongs to a group by its divisor d (scale fp32(1/d)) and, for a Pad's constant c,
    // whether it lies in the border (bias c: its sum is +0, it reads the zero padding).
    l.kind = Bf16ConvLayer::Kind::kAvgPool;
    const detail::PoolCounts cnt = detail::avgpool_counts(g, n, l.geom);
    const float pv = detail::pool_pad_value(g, n);
    l.w.assign(O * C * T, 0.0f);
    if (cnt.uniform(T) && pv == 0.0f) {
      const float inv = static_cast<float>(1.0 / static_cast<double>(T));
      for (uint64_t o = 0; o < O; ++o) {
        for (uint64_t t = 0; t < T; ++t) l.w[(o * C + o) * T + t] = inv;
      }
      return l;
    }
    for (uint64_t o = 0; o < O; ++o) {
      for (uint64_t t = 0; t < T; ++t) l.w[(o * C + o) * T + t] = 1.0f;
    }
    const nn::ConvGeometry& geo = l.geom;
    if (pv != 0.0f && (T != 1 || geo.stride_h != 1 || geo.stride_w != 1)) {
      g.fail(ErrorKind::kInternal, n, "a pad_value pool must be 1x1 with stride 1");
    }
    const uint64_t ho = geo.out_h(), wo = geo.out_w();
    std::map<std::pair<uint64_t, bool>, uint16_t> group_of;  // (divisor, in a constant border) -> group
    l.pixel_group.assign(ho * wo, 0);
    for (uint64_t oy = 0; oy < ho; ++oy) {
      for (uint64_t ox = 0; ox < wo; ++ox) {
        const uint64_t d = uint64_t{cnt.rows[oy]} * cnt.cols[ox];
        const bool border = pv != 0.0f && !(oy >= geo.pad_top && oy < geo.pad_top + uint64_t{geo.in_h} &&
                                            ox >= geo.pad_left && ox < geo.pad_left + uint64_t{geo.in_w});
        auto it = group_of.find({d, border});
        if (it == group_of.end()) {
          if (group_of.size() >= 0xFFFF) g.fail(ErrorKind::kUnsupported, n, "more than 65535 pixel groups");
          it = group_of.emplace(std::pair{d, border}, static_cast<uint16_t>(group_of.size())).first;
          l.group_scale.push_back(static_cast<float>(1.0 / static_cast<double>(d)));
          l.group_bias.insert(l.group_bias.end(), O, border ? pv : 0.0f);
        }
        l.pixel_group[oy * wo + ox] = it->second;
      }
    }
    return l;
  }
  l.relu = attr_int(g, n, "relu", 0) != 0;
  // Dense weights: a grouped convolution (weight [O, C/group, KH, KW]) gets zeros outside its
  // groups (as the int8 compiler's; the device skips the all-zero weight tiles).
  const Value& wv = g.value(n.inputs[1]);
  const TensorData& wd = *wv.data;
  const uint64_t group = static_cast<uint64_t>(attr_int(g, n, "group", 1));
  const uint64_t cg = C / group, og = O / group;
  l.w.assign(O * C * T, 0.0f);
  for (uint64_t o = 0; o < O; ++o) {
    const uint64_t c0 = (o / og) * cg;
    for (uint64_t c = 0; c < cg; ++c) {
      for (uint64_t t = 0; t < T; ++t) {
        const auto v = static_cast<float>(wd.as_double((o * cg + c) * T + t));
        if (std::isnan(v)) {
          g.fail(ErrorKind::kUnsupported, n, fmt::format("weight '{}' element {} is NaN", wv.name, (o * cg + c) * T + t));
        }
        l.w[(o * C + c0 + c) * T + t] = v;
      }
    }
  }
  if (const ValueId b = input(n, 2); b != kNoValue) {
    for (uint64_t o = 0; o < O; ++o) l.bias[o] = static_cast<float>(g.value(b).data->as_double(o));
  }
  return l;
}

// A residual Add of two maps or a Concat of maps along the channels as a 1x1 convolution over the
// channel concatenation of its sources: Add y[o] = 1 * x_0[o] + 1 * x_1[o] (one fp32 addition of
// the exact bf16 values, then ACTIVATE's rounding), Concat the identity (exact).
Bf16ConvLayer lower_merge(const Graph& g, const Node& n, const std::vector<int32_t>& src) {
  const Dims& d0 = *g.value(n.inputs[0]).shape;
  std::vector<uint32_t> ch;
  for (const ValueId v : n.inputs) {
    const Dims& d = *g.value(v).shape;
    if (d.size() != 4 || d[2] != d0[2] || d[3] != d0[3] || (n.op == Op::kAdd && d != d0)) {
      g.fail(ErrorKind::kUnsupported, n,
             fmt::format("input '{}' has shape {}, input '{}' {}: {} maps of [batch, C, H, W] with the same {}",
                         g.value(n.inputs[0]).name, dims_string(d0), g.value(v).name, dims_string(d),
                         n.op == Op::kAdd ? "an Add adds two" : "a Concat joins",
                         n.op == Op::kAdd ? "shape" : "height and width"));
    }
    ch.push_back(static_cast<uint32_t>(d[1]));
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
  Bf16ConvLayer l;
  l.name = layer_name(n);
  l.sources = src;
  l.geom.in_h = static_cast<uint32_t>(d0[2]);
  l.geom.in_w = static_cast<uint32_t>(d0[3]);
  for (const uint32_t c : ch) l.geom.in_c += c;
  l.geom.out_c = n.op == Op::kAdd ? ch[0] : l.geom.in_c;
  const uint64_t O = l.geom.out_c, C = l.geom.in_c;
  l.w.assign(O * C, 0.0f);
  l.bias.assign(O, 0.0f);
  for (uint64_t o = 0; o < O; ++o) {
    l.w[o * C + o] = 1.0f;
    if (n.op == Op::kAdd) l.w[o * C + O + o] = 1.0f;
  }
  return l;
}

}  // namespace

void Bf16ConvLayer::check() const {
  geom.check(name);
  const uint64_t per = uint64_t{geom.in_c} * geom.kernel_h * geom.kernel_w;
  const auto bad = [&](const std::string& what) {
    return Error(ErrorKind::kInvalidArgument, fmt::format("bf16 layer '{}': {}", name, what));
  };
  if (indices && kind != Kind::kMaxPool) throw bad("only a max pool has Indices");
  if (kind == Kind::kMaxPool) {
    if (geom.in_c != geom.out_c) throw bad(fmt::format("a max pool has {} input and {} output channels", geom.in_c, geom.out_c));
    if (!w.empty() || !bias.empty() || relu) throw bad("a max pool has no weights, bias or ReLU");
    return;
  }
  if (w.size() != geom.out_c * per) throw bad(fmt::format("w has {} values, expected O*C*KH*KW = {}", w.size(), geom.out_c * per));
  if (bias.size() != geom.out_c) throw bad(fmt::format("bias has {} values, expected {}", bias.size(), geom.out_c));
  if (!pixel_group.empty() || !group_scale.empty() || !group_bias.empty()) {
    const uint64_t px = uint64_t{geom.out_h()} * geom.out_w();
    if (pixel_group.size() != px) throw bad(fmt::format("{} pixel groups for {} output pixels", pixel_group.size(), px));
    if (group_scale.empty() || group_bias.size() != groups() * geom.out_c) {
      throw bad(fmt::format("{} group scales and {} group biases, expected groups * out_c = {} * {}", group_scale.size(),
                            group_bias.size(), groups(), geom.out_c));
    }
    for (size_t i = 0; i < pixel_group.size(); ++i) {
      if (pixel_group[i] >= groups()) throw bad(fmt::format("pixel {} is in group {} of {}", i, pixel_group[i], groups()));
    }
  }
}

uint64_t Bf16Cnn::input_features(size_t k) const {
  if (inputs.empty()) return uint64_t{in_c} * in_h * in_w;
  return inputs.at(k).features();
}

uint64_t Bf16Cnn::input_offset(size_t k) const {
  uint64_t off = 0;
  for (size_t j = 0; j < k; ++j) off += input_features(j);
  return off;
}

uint64_t Bf16Cnn::input_row() const { return input_offset(inputs.empty() ? 1 : inputs.size()); }

void Bf16Cnn::check() const {
  uint64_t c = in_c, h = in_h, w = in_w;
  const auto n_in = static_cast<int32_t>(inputs.empty() ? 1 : inputs.size());
  if (!inputs.empty() && convs.size() > 0 && convs[0].sources.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "bf16 CNN with several inputs: the first layer must name its source");
  }
  for (size_t i = 0; i < convs.size(); ++i) {
    const Bf16ConvLayer& l = convs[i];
    l.check();
    if (!l.sources.empty()) {  // the channel concatenation of earlier layers' maps (or the input)
      c = 0;
      for (const int32_t s : l.sources) {
        if (s < -n_in || s >= static_cast<int32_t>(i) || (s < 0 && !inputs.empty() && !inputs[static_cast<size_t>(-1 - s)].image)) {
          throw Error(ErrorKind::kInvalidArgument,
                      fmt::format("bf16 CNN layer {} '{}': source {} is not an image input or an earlier layer", i, l.name, s));
        }
        const nn::ConvGeometry* sg = s < 0 ? nullptr : &convs[static_cast<size_t>(s)].geom;
        const nn::CnnGraphInput gin = s < 0 && !inputs.empty() ? inputs[static_cast<size_t>(-1 - s)]
                                                               : nn::CnnGraphInput{"", in_c, in_h, in_w, true, 1.0f};
        c += sg == nullptr ? gin.c : sg->out_c;
        h = sg == nullptr ? gin.h : sg->out_h();
        w = sg == nullptr ? gin.w : sg->out_w();
      }
    }
    if (l.geom.in_c != c || l.geom.in_h != h || l.geom.in_w != w) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("bf16 CNN layer {} '{}' reads {}x{}x{}, the previous layer gives {}x{}x{}", i, l.name,
                              l.geom.in_c, l.geom.in_h, l.geom.in_w, c, h, w));
    }
    c = l.geom.out_c;
    h = l.geom.out_h();
    w = l.geom.out_w();
  }
  uint64_t head_in = c * h * w;
  if (!head_sources.empty()) {
    head_in = 0;
    for (const int32_t s : head_sources) {
      if (s == static_cast<int32_t>(convs.size()) - 1) {
        head_in += c * h * w;
      } else if (s < 0 && s >= -n_in && !inputs.empty() && !inputs[static_cast<size_t>(-1 - s)].image) {
        head_in += inputs[static_cast<size_t>(-1 - s)].features();
      } else {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("bf16 CNN: the dense head reads source {}, neither the last layer nor a vector input", s));
      }
    }
    if (head.layers.empty()) throw Error(ErrorKind::kInvalidArgument, "bf16 CNN: head sources without a dense head");
  }
  if (head.input_features != head_in || (!head.layers.empty() && head.layers[0].k != head.input_features)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("bf16 CNN: the dense head reads {} features, the convolutions give {}x{}x{} = {}",
                            head.input_features, c, h, w, c * h * w));
  }
}

Bf16Cnn compile_bf16_cnn(Graph graph) {
  const Graph g = optimize(std::move(graph));
  // A max pool's Indices may be a graph output too; the other one is the network's.
  const auto is_indices = [&](ValueId v) {
    return std::any_of(g.nodes.begin(), g.nodes.end(), [&](const Node& n) {
      return n.op == Op::kMaxPool && n.outputs.size() > 1 && n.outputs[1] == v;
    });
  };
  std::vector<size_t> main;
  for (size_t j = 0; j < g.outputs.size(); ++j) {
    if (!is_indices(g.outputs[j].value)) main.push_back(j);
  }
  if (main.size() != 1) {
    g.fail(ErrorKind::kUnsupported, fmt::format("a CNN needs one output, not {}", g.outputs.size()));
  }
  const CnnInputs ins = cnn_inputs(g);
  const GraphOutput& out0 = g.outputs[main[0]];
  Bf16Cnn net;
  ValueId in = kNoValue;  // the first image input
  for (size_t k = 0; k < g.inputs.size(); ++k) {
    const Dims& d = *g.value(g.inputs[k].value).shape;
    nn::CnnGraphInput ci;
    ci.name = g.value(g.inputs[k].value).name;
    ci.image = ins.image[k];
    ci.c = static_cast<uint32_t>(d[1]);
    ci.h = ci.image ? static_cast<uint32_t>(d[2]) : 1;
    ci.w = ci.image ? static_cast<uint32_t>(d[3]) : 1;
    if (ci.image && in == kNoValue) {
      in = g.inputs[k].value;
      net.in_c = ci.c, net.in_h = ci.h, net.in_w = ci.w;
    }
    net.inputs.push_back(std::move(ci));
  }
  const bool several = g.inputs.size() > 1;
  if (!several) net.inputs.clear();

  ValueId act = in;
  size_t i = 0;
  auto is_conv_like = [](Op op) {
    return op == Op::kConv || op == Op::kAveragePool || op == Op::kGlobalAveragePool || op == Op::kMaxPool;
  };
  // The layers in graph order; a layer reads the previous layer's output, or (a residual Add or a
  // Concat) the outputs of earlier layers and the graph input (Bf16ConvLayer::sources).
  std::map<ValueId, int32_t> layer_of;
  for (size_t k = 0; k < g.inputs.size(); ++k) {
    if (ins.image[k]) layer_of[g.inputs[k].value] = -1 - static_cast<int32_t>(k);
  }
  const auto source_of = [&](const Node& n, ValueId v) {
    if (ins.vector_input(g, v) >= 0) {
      g.fail(ErrorKind::kUnsupported, n,
             fmt::format("reads the vector input '{}'; a CNN's [batch, features] input joins the dense head (a Concat "
                         "with the flattened last map along the features, right after the Flatten)",
                         g.value(v).name));
    }
    const auto it = layer_of.find(v);
    if (it == layer_of.end()) g.fail(ErrorKind::kUnsupported, n, "is not part of a chain of layers");
    return it->second;
  };
  for (; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const bool merge = (n.op == Op::kAdd || n.op == Op::kConcat) && !n.inputs.empty() &&
                       std::all_of(n.inputs.begin(), n.inputs.end(), [&](ValueId v) { return layer_of.count(v) > 0; });
    // A Relu or a function joins the last layer when it is the only reader of its output.
    const bool after_layer = !net.convs.empty() && !n.inputs.empty() && n.inputs[0] == act && !g.is_graph_output(act) &&
                             std::count_if(g.nodes.begin(), g.nodes.end(), [&](const Node& m) {
                               return std::find(m.inputs.begin(), m.inputs.end(), act) != m.inputs.end();
                             }) == 1;
    if (is_conv_like(n.op)) {
      const int32_t s = source_of(n, n.inputs[0]);
      net.convs.push_back(lower_layer(g, n));
      if (s != static_cast<int32_t>(net.convs.size()) - 2 || (several && s < 0)) net.convs.back().sources = {s};
      if (n.op == Op::kMaxPool && n.outputs.size() > 1 && n.outputs[1] != kNoValue) {
        const ValueId z = n.outputs[1];
        if (std::any_of(g.nodes.begin(), g.nodes.end(), [&](const Node& m) {
              return std::find(m.inputs.begin(), m.inputs.end(), z) != m.inputs.end();
            })) {
          g.fail(ErrorKind::kUnsupported, n, "its Indices output feeds another node (only as a graph output)");
        }
        if (g.is_graph_output(z)) {
          net.convs.back().indices = true;
          net.convs.back().indices_column_major = attr_int(g, n, "storage_order", 0) == 1;
          net.indices_outputs.push_back({g.value(z).name, static_cast<int32_t>(net.convs.size()) - 1});
        }
      }
    } else if (merge) {
      std::vector<int32_t> src;
      for (const ValueId v : n.inputs) src.push_back(source_of(n, v));
      net.convs.push_back(lower_merge(g, n, src));
    } else if (after_layer && n.op == Op::kRelu && !net.convs.back().relu && net.convs.back().act.none() &&
               net.convs.back().kind == Bf16ConvLayer::Kind::kConv) {
      net.convs.back().relu = true;  // a Relu after a residual Add or a Concat
      net.convs.back().name += " + " + n.label();
    } else if (after_layer && is_activation_op(n.op)) {  // a function after a layer: a VECTOR pass
      if (!net.convs.back().act.none()) {
        g.fail(ErrorKind::kUnsupported, n,
               fmt::format("follows another function ({}) on layer '{}'", net.convs.back().act.node, net.convs.back().name));
      }
      net.convs.back().act = activation_of(g, n);
      net.convs.back().act.node = n.label();
    } else {
      break;
    }
    act = n.outputs[0];
    layer_of[act] = static_cast<int32_t>(net.convs.size()) - 1;
  }
  if (net.convs.empty()) g.fail(ErrorKind::kUnsupported, "the model has no Conv (an MLP runs through the dense-layer path)");
  nn::FloatNetwork& head = net.head;
  head.source = g.source;
  head.output_name = out0.name;
  head.input_name = g.value(act).name;
  const nn::ConvGeometry& last = net.convs.back().geom;
  head.input_features = static_cast<uint32_t>(uint64_t{last.out_c} * last.out_h() * last.out_w());
  if (i < g.nodes.size() && (g.nodes[i].op == Op::kFlatten || g.nodes[i].op == Op::kReshape)) {
    const Node& flat = g.nodes[i++];
    if (flat.inputs[0] != act || g.value(flat.outputs[0]).shape->size() != 2) {
      g.fail(ErrorKind::kUnsupported, flat, "must flatten the last convolution's output to [batch, features]");
    }
    act = flat.outputs[0];
    head.input_name = g.value(act).name;
    // A Concat of the flattened map with vector inputs along the features: the head's row is the
    // parts side by side (Bf16Cnn::head_sources; no scales to reconcile in bf16).
    net.head_sources = detail::head_concat_sources(g, ins, i, act, static_cast<int32_t>(net.convs.size()) - 1);
    if (!net.head_sources.empty()) {
      const Node& cat = g.nodes[i - 1];
      uint64_t f = 0;
      for (const ValueId v : cat.inputs) f += static_cast<uint64_t>((*g.value(v).shape)[1]);
      head.input_features = static_cast<uint32_t>(f);
      act = cat.outputs[0];
      head.input_name = g.value(act).name;
    }
  } else if (i < g.nodes.size()) {
    g.fail(ErrorKind::kUnsupported, g.nodes[i],
           "follows the convolutions; a CNN runs Conv (+Relu), AveragePool, GlobalAveragePool and MaxPool layers, "
           "then Flatten/Reshape and dense layers");
  }
  for (; i < g.nodes.size(); ++i) {
    detail::add_head_node(g, ins, g.nodes[i], act, head);
    act = g.nodes[i].outputs[0];
  }
  if (act != out0.value) {
    g.fail(ErrorKind::kUnsupported, fmt::format("graph output '{}' is not the end of the chain of layers", out0.name));
  }
  // Every vector input joins the head (in that Concat), every image input feeds a layer (with one
  // input, the first layer reads it without naming a source).
  ins.check_used(
      g,
      [&](int32_t s) {
        return std::any_of(net.convs.begin(), net.convs.end(),
                           [&](const Bf16ConvLayer& l) {
                             return std::find(l.sources.begin(), l.sources.end(), s) != l.sources.end();
                           }) ||
               (!several && !net.convs.empty());
      },
      net.head_sources);
  if (net.indices_outputs.size() + 1 != g.outputs.size()) {
    g.fail(ErrorKind::kUnsupported, "a max pool's Indices output is not from a pool of the chain of layers");
  }
  const Dims& dout = *g.value(act).shape;
  net.output_dims.assign(dout.begin() + 1, dout.end());
  net.check();
  return net;
}

}  // namespace tpuw::compiler
