// Activation functions on the int8 MLP path (tpuw/compiler/activations.h).
#include "tpuw/compiler/activations.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "pass_util.h"
#include "tpuw/compiler/feature_maps.h"

namespace tpuw::compiler {
namespace {

using detail::attr_float;
using detail::attr_int;
using detail::batch_led;
using detail::features;
using detail::input;

Attribute int_attr(int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::kInt;
  a.i = v;
  return a;
}

Attribute float_attr(double v) {
  Attribute a;
  a.kind = Attribute::Kind::kFloat;
  a.f = static_cast<float>(v);
  return a;
}

// The single value of constant `v`, or nullopt when it is not a one-element constant.
std::optional<double> scalar(const Graph& g, ValueId v) {
  if (v == kNoValue || !g.is_constant(v)) return std::nullopt;
  const TensorData& d = *g.value(v).data;
  if (d.size() != 1) return std::nullopt;
  return d.as_double(0);
}

bool near(std::optional<double> v, double want) { return v && std::fabs(*v - want) <= 1e-6 * std::fabs(want); }

// The node defining `v` (index), or nullopt.
std::optional<size_t> def_of(const Graph& g, ValueId v) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const ValueId o : g.nodes[i].outputs) {
      if (o == v) return i;
    }
  }
  return std::nullopt;
}

// The activation operand and the constant of a binary node with exactly one constant input.
bool split_const(const Graph& g, const Node& n, ValueId& x, std::optional<double>& c) {
  if (n.inputs.size() != 2) return false;
  const bool c0 = g.is_constant(n.inputs[0]), c1 = g.is_constant(n.inputs[1]);
  if (c0 == c1) return false;
  x = c0 ? n.inputs[1] : n.inputs[0];
  c = scalar(g, c0 ? n.inputs[0] : n.inputs[1]);
  return true;
}

}  // namespace

bool is_activation_op(Op op) {
  switch (op) {
    case Op::kSigmoid:
    case Op::kTanh:
    case Op::kLeakyRelu:
    case Op::kClip:
    case Op::kHardSigmoid:
    case Op::kHardSwish:
    case Op::kGelu:
    case Op::kErf: return true;
    default: return false;
  }
}

nn::Activation activation_of(const Graph& g, const Node& n) {
  nn::Activation a;
  switch (n.op) {
    case Op::kSigmoid: a.fn = nn::ActFn::kSigmoid; break;
    case Op::kTanh: a.fn = nn::ActFn::kTanh; break;
    case Op::kHardSwish: a.fn = nn::ActFn::kHardSwish; break;
    case Op::kErf: a.fn = nn::ActFn::kErf; break;
    case Op::kLeakyRelu:
      a.fn = nn::ActFn::kLeakyRelu;
      a.alpha = attr_float(g, n, "alpha", 0.01f);
      break;
    case Op::kHardSigmoid:
      a.fn = nn::ActFn::kHardSigmoid;
      a.alpha = attr_float(g, n, "alpha", 0.2f);
      a.beta = attr_float(g, n, "beta", 0.5f);
      break;
    case Op::kClip: {
      a.fn = nn::ActFn::kClip;
      a.alpha = -std::numeric_limits<double>::infinity();
      a.beta = std::numeric_limits<double>::infinity();
      // opset 6: attributes; opset 11+: optional constant inputs 1 (min) and 2 (max).
      if (n.attr("min") != nullptr) a.alpha = attr_float(g, n, "min", 0.0f);
      if (n.attr("max") != nullptr) a.beta = attr_float(g, n, "max", 0.0f);
      for (size_t i = 1; i <= 2; ++i) {
        const ValueId v = input(n, i);
        if (v == kNoValue) continue;
        const std::optional<double> c = scalar(g, v);
        if (!c) {
          g.fail(ErrorKind::kUnsupported, n,
                 fmt::format("input {} ({}) '{}' must be a one-element constant (an initializer or Constant)", i,
                             i == 1 ? "min" : "max", g.value(v).name));
        }
        (i == 1 ? a.alpha : a.beta) = *c;
      }
      if (std::isnan(a.alpha) || std::isnan(a.beta)) g.fail(ErrorKind::kBadFile, n, "min or max is NaN");
      break;
    }
    case Op::kGelu: {
      const Attribute* ap = n.attr("approximate");
      const std::string approx = ap == nullptr ? "none" : ap->s;
      if (approx == "none") {
        a.fn = nn::ActFn::kGelu;
      } else if (approx == "tanh") {
        a.fn = nn::ActFn::kGeluTanh;
      } else {
        g.fail(ErrorKind::kUnsupported, n, fmt::format("approximate='{}' is not supported (none or tanh)", approx));
      }
      break;
    }
    default: g.fail(ErrorKind::kInternal, n, "is not an activation function");
  }
  if (!std::isfinite(a.alpha) && a.fn != nn::ActFn::kClip) g.fail(ErrorKind::kBadFile, n, "attribute 'alpha' is not finite");
  if (!std::isfinite(a.beta) && a.fn != nn::ActFn::kClip) g.fail(ErrorKind::kBadFile, n, "attribute 'beta' is not finite");
  return a;
}

nn::Activation dense_activation(const Graph& g, const Node& dense) {
  nn::Activation a;
  const int64_t fn = attr_int(g, dense, "act", 0);
  if (fn < 0 || fn > static_cast<int64_t>(nn::ActFn::kErf)) g.fail(ErrorKind::kInternal, dense, fmt::format("act={}", fn));
  a.fn = static_cast<nn::ActFn>(fn);
  a.alpha = attr_float(g, dense, "act_alpha", 0.0f);
  a.beta = attr_float(g, dense, "act_beta", 0.0f);
  if (const Attribute* s = dense.attr("act_node"); s != nullptr) a.node = s->s;
  return a;
}

void set_dense_activation(Node& dense, const nn::Activation& a) {
  if (a.none()) {
    dense.erase_attr("act");
    dense.erase_attr("act_alpha");
    dense.erase_attr("act_beta");
    dense.erase_attr("act_node");
    return;
  }
  dense.set_attr("act", int_attr(static_cast<int64_t>(a.fn)));
  dense.set_attr("act_alpha", float_attr(a.alpha));
  dense.set_attr("act_beta", float_attr(a.beta));
  Attribute s;
  s.kind = Attribute::Kind::kString;
  s.s = a.node;
  dense.set_attr("act_node", std::move(s));
}

size_t fuse_gelu(Graph& g) {
  size_t count = 0;
  for (;;) {
    const auto cons = g.consumers();
    auto sole_reader = [&](ValueId v) -> std::optional<size_t> {
      const auto& r = cons[static_cast<size_t>(v)];
      if (r.size() != 1 || g.is_graph_output(v)) return std::nullopt;
      return r[0];
    };
    bool changed = false;
    for (size_t ei = 0; ei < g.nodes.size() && !changed; ++ei) {
      const Node& e = g.nodes[ei];
      if (e.op != Op::kErf) continue;
      // x / sqrt 2 (or x * 1/sqrt 2), read by the Erf alone
      const auto di = def_of(g, e.inputs[0]);
      if (!di || !sole_reader(e.inputs[0])) continue;
      const Node& d = g.nodes[*di];
      ValueId x = kNoValue;
      std::optional<double> c;
      if (!split_const(g, d, x, c)) continue;
      const bool scaled = (d.op == Op::kDiv && !g.is_constant(d.inputs[0]) && near(c, std::sqrt(2.0))) ||
                          (d.op == Op::kMul && near(c, 1.0 / std::sqrt(2.0)));
      if (!scaled) continue;
      // 1 + erf
      const auto ai = sole_reader(e.outputs[0]);
      if (!ai || g.nodes[*ai].op != Op::kAdd) continue;
      ValueId ev = kNoValue;
      std::optional<double> one;
      if (!split_const(g, g.nodes[*ai], ev, one) || !near(one, 1.0)) continue;
      // times x (then times 0.5), or times (x * 0.5)
      const auto mi = sole_reader(g.nodes[*ai].outputs[0]);
      if (!mi || g.nodes[*mi].op != Op::kMul || g.nodes[*mi].inputs.size() != 2) continue;
      const Node& m = g.nodes[*mi];
      const ValueId other = m.inputs[0] == g.nodes[*ai].outputs[0] ? m.inputs[1] : m.inputs[0];
      std::vector<size_t> drop = {*di, ei, *ai};
      size_t last = *mi;
      if (other == x) {
        const auto hi = sole_reader(m.outputs[0]);
        ValueId mv = kNoValue;
        std::optional<double> half;
        if (!hi || g.nodes[*hi].op != Op::kMul || !split_const(g, g.nodes[*hi], mv, half) || !near(half, 0.5)) continue;
        drop.push_back(*mi);
        last = *hi;
      } else {
        const auto hi = def_of(g, other);
        if (!hi || !sole_reader(other)) continue;
        ValueId hx = kNoValue;
        std::optional<double> half;
        if (g.nodes[*hi].op != Op::kMul || !split_const(g, g.nodes[*hi], hx, half) || hx != x || !near(half, 0.5)) continue;
        drop.push_back(*hi);
      }
      Node gelu;
      gelu.op = Op::kGelu;
      gelu.op_type = "Gelu";
      gelu.name = g.nodes[last].name;
      for (const size_t i : drop) gelu.origin.push_back(g.nodes[i].label());
      gelu.origin.push_back(g.nodes[last].label());
      gelu.inputs = {x};
      gelu.outputs = {g.nodes[last].outputs[0]};
      g.nodes[last] = std::move(gelu);
      std::sort(drop.begin(), drop.end());
      for (size_t k = drop.size(); k-- > 0;) g.nodes.erase(g.nodes.begin() + static_cast<ptrdiff_t>(drop[k]));
      ++count;
      changed = true;
    }
    if (!changed) return count;
  }
}

bool add_int8_output_layer(Graph& g) {
  size_t last = g.nodes.size();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].op == Op::kDense) last = i;
  }
  if (last == g.nodes.size() || dense_activation(g, g.nodes[last]).none()) return false;
  const ValueId y = g.nodes[last].outputs[0];
  const Dims dy = *g.value(y).shape;
  const int64_t f = *checked_elements(features(dy));
  if (f > kMaxFeatureMapFeatures) {
    g.fail(ErrorKind::kUnsupported, g.nodes[last],
           fmt::format("the network's last layer ends in {} over {} features; the int8 output layer after it "
                       "(identity, F x F weights) is limited to {}", nn::act_name(dense_activation(g, g.nodes[last])), f,
                       kMaxFeatureMapFeatures));
  }
  const auto uf = static_cast<size_t>(f);
  TensorData wd, bd;
  wd.f.assign(uf * uf, 0.0);
  for (size_t j = 0; j < uf; ++j) wd.f[j * uf + j] = 1.0;
  bd.f.assign(uf, 0.0);
  Value v;
  v.name = g.value(y).name + ".table";
  v.dtype = g.value(y).dtype;
  v.shape = dy;
  const ValueId t = g.add_value(std::move(v));
  Node& ld = g.nodes[last];
  ld.outputs[0] = t;  // the Dense with the function now defines t; the identity defines y
  Node d;
  d.op = Op::kDense;
  d.op_type = "Dense";
  d.name = ld.name + ".output";
  d.origin = {"int32 output (identity) after " + ld.name};
  d.inputs = {t, g.add_constant(d.name + ".w", DType::kFloat32, {f, f}, std::move(wd)),
              g.add_constant(d.name + ".b", DType::kFloat32, {f}, std::move(bd))};
  d.outputs = {y};
  d.set_attr("relu", int_attr(0));
  g.nodes.insert(g.nodes.begin() + static_cast<ptrdiff_t>(last) + 1, std::move(d));
  return true;
}

size_t fuse_activations(Graph& g) {
  for (const Node& n : g.nodes) {
    if (n.op == Op::kConv || n.op == Op::kAveragePool || n.op == Op::kGlobalAveragePool || n.op == Op::kMaxPool) {
      return 0;  // a CNN compiler places the functions itself (conv layers, dense head)
    }
  }
  size_t count = 0;
  const auto cons = g.consumers();
  std::vector<uint8_t> removed(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (!is_activation_op(n.op)) continue;
    nn::Activation a = activation_of(g, n);
    a.node = n.label();
    const ValueId x = n.inputs[0];
    const auto di = def_of(g, x);
    if (di && !removed[*di] && g.nodes[*di].op == Op::kDense && cons[static_cast<size_t>(x)].size() == 1 &&
        !g.is_graph_output(x) && dense_activation(g, g.nodes[*di]).none()) {
      Node& d = g.nodes[*di];
      set_dense_activation(d, a);
      d.origin.push_back(n.label());
      d.outputs = {n.outputs[0]};
      g.value(d.outputs[0]).shape = g.value(x).shape;
      removed[i] = 1;
      ++count;
      continue;
    }
    // A standalone function: the identity as a dense layer, with the function.
    const Dims& dx = *g.value(x).shape;
    if (!batch_led(dx)) {
      g.fail(ErrorKind::kUnsupported, n, fmt::format("input '{}' has shape {}; the batch dimension must be the first",
                                                     g.value(x).name, dims_string(dx)));
    }
    const int64_t f = *checked_elements(features(dx));
    if (f > kMaxFeatureMapFeatures) {
      g.fail(ErrorKind::kUnsupported, n,
             fmt::format("runs as a dense layer over its {} features (F x F weights) here, more than {}; it is "
                         "supported right after a Gemm/MatMul (fused into it)", f, kMaxFeatureMapFeatures));
    }
    TensorData wd, bd;
    const auto uf = static_cast<size_t>(f);
    wd.f.assign(uf * uf, 0.0);
    for (size_t j = 0; j < uf; ++j) wd.f[j * uf + j] = 1.0;
    bd.f.assign(uf, 0.0);
    Node d;
    d.op = Op::kDense;
    d.op_type = "Dense";
    d.name = n.name;
    d.origin = {n.label()};
    d.inputs = {x, g.add_constant(n.name + ".w", DType::kFloat32, {f, f}, std::move(wd)),
                g.add_constant(n.name + ".b", DType::kFloat32, {f}, std::move(bd))};
    d.outputs = {n.outputs[0]};
    d.set_attr("relu", int_attr(0));
    set_dense_activation(d, a);
    g.nodes[i] = std::move(d);
    ++count;
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!removed[i]) kept.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(kept);
  return count;
}

}  // namespace tpuw::compiler
