// The training pass for CNNs (tpuw/compiler/cnn_training.h).
#include "tpuw/compiler/cnn_training.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pass_util.h"
#include "tpuw/compiler/passes.h"
#include "tpuw/error.h"

namespace tpuw::compiler {

using detail::attr_float;
using detail::attr_int;
using detail::input;
using detail::output;

int64_t CnnTrainModel::classes() const {
  if (!net.head.layers.empty()) return net.head.layers.back().n;
  return static_cast<int64_t>(net.head.input_features);
}

bool has_conv(const Graph& g) {
  for (const Node& n : g.nodes) {
    if (n.op == Op::kConv) return true;
  }
  return false;
}

CnnTrainModel build_cnn_training_model(Graph g) {
  if (g.inputs.size() > 1) {  // inference runs several inputs (compile_bf16_cnn); training does not yet
    std::vector<std::string> names;
    for (const GraphInput& in : g.inputs) names.push_back("'" + g.value(in.value).name + "'");
    throw Error(ErrorKind::kUnsupported, fmt::format("{}: a CNN with several inputs ({}) cannot be trained yet (tpuw run "
                                                     "runs it)", g.source, fmt::join(names, ", ")));
  }
  // The names, from the graph before fusion (the passes build_training_model runs first).
  Graph raw = g;
  verify(raw);
  legalize(raw);
  for (;;) {
    infer_shapes(raw, /*strict=*/false);
    if (!fold_constants(raw)) break;
    verify(raw);
  }
  remove_identities(raw);
  remove_dead_code(raw);
  verify(raw);
  infer_shapes(raw, /*strict=*/true);
  CnnTrainModel m;
  std::vector<std::string> convs;
  struct Pending {
    std::string add_out, branch, skip, node;
  };
  std::vector<Pending> pending;
  // Per Conv node in graph order: its input and output value names (residual endpoints).
  std::vector<std::string> conv_in, conv_out;
  for (const Node& n : raw.nodes) {
    if (n.op != Op::kConv) continue;
    conv_in.push_back(raw.value(input(n, 0)).name);
    conv_out.push_back(raw.value(output(n, 0)).name);
  }
  const auto consumers = raw.consumers();
  for (const Node& n : raw.nodes) {
    switch (n.op) {
      case Op::kConv: {
        if (attr_int(raw, n, "group", 1) != 1) {
          raw.fail(ErrorKind::kUnsupported, n, "cannot be trained: a grouped or depthwise Conv (group != 1)");
        }
        if (!raw.is_constant(input(n, 1))) {
          raw.fail(ErrorKind::kUnsupported, n, "cannot be trained: the weight must be a constant initializer");
        }
        m.conv_weight.push_back(raw.value(input(n, 1)).name);
        const ValueId b = input(n, 2);
        m.conv_bias.push_back(b == kNoValue ? std::string() : raw.value(b).name);
        break;
      }
      case Op::kGemm:
      case Op::kMatMul: {
        if (!raw.is_constant(input(n, 1))) {
          raw.fail(ErrorKind::kUnsupported, n, "cannot be trained: the weight must be a constant initializer read as "
                                               "the second input");
        }
        bool out_in = false;
        std::string bias;
        if (n.op == Op::kGemm) {
          if (attr_int(raw, n, "transA", 0) != 0 || attr_float(raw, n, "alpha", 1.0f) != 1.0f ||
              attr_float(raw, n, "beta", 1.0f) != 1.0f) {
            raw.fail(ErrorKind::kUnsupported, n, "cannot be trained: transA, alpha or beta other than 0, 1, 1");
          }
          out_in = attr_int(raw, n, "transB", 0) == 1;
          if (input(n, 2) != kNoValue) bias = raw.value(input(n, 2)).name;
        } else {
          const auto& readers = consumers[static_cast<size_t>(output(n, 0))];
          if (readers.size() == 1 && raw.nodes[readers[0]].op == Op::kAdd) {
            const Node& add = raw.nodes[readers[0]];
            const ValueId other = input(add, 0) == output(n, 0) ? input(add, 1) : input(add, 0);
            if (raw.is_constant(other)) bias = raw.value(other).name;
          }
        }
        m.dense_weight.push_back(raw.value(input(n, 1)).name);
        m.dense_bias.push_back(bias);
        m.dense_out_in.push_back(out_in ? 1 : 0);
        break;
      }
      case Op::kRelu:
      case Op::kMaxPool:
      case Op::kAveragePool:
      case Op::kGlobalAveragePool:
      case Op::kFlatten:
      case Op::kReshape:
      case Op::kSoftmax:
      case Op::kAdd: {  // a dense bias (checked by compile_bf16_cnn's fusion), or a residual Add
        const ValueId a = input(n, 0), b = input(n, 1);
        if (a == kNoValue || b == kNoValue || raw.is_constant(a) || raw.is_constant(b)) break;
        // Residual: one input a Conv's output, the other the input of an earlier Conv.
        auto producer = [&](ValueId v) -> const Node* {
          for (const Node& p : raw.nodes) {
            if (!p.outputs.empty() && p.outputs[0] == v) return &p;
          }
          return nullptr;
        };
        ValueId branch = kNoValue, skip = kNoValue;
        for (const auto& [x, y] : {std::pair{a, b}, std::pair{b, a}}) {
          const Node* p = producer(x);
          if (p != nullptr && p->op == Op::kConv && branch == kNoValue) branch = x, skip = y;
        }
        if (branch == kNoValue) {
          raw.fail(ErrorKind::kUnsupported, n, "cannot be trained: a residual Add needs one input straight from a Conv");
        }
        Pending r;
        r.add_out = raw.value(output(n, 0)).name;
        r.branch = raw.value(branch).name;
        r.skip = raw.value(skip).name;
        r.node = n.label();
        pending.push_back(std::move(r));
        break;
      }
      case Op::kPad:
        break;
      default:
        raw.fail(ErrorKind::kUnsupported, n,
                 "cannot be trained: CNN training supports Conv, Relu, MaxPool, AveragePool, GlobalAveragePool, "
                 "Flatten/Reshape, Gemm, MatMul (+Add) and a trailing Softmax");
    }
  }
  // Residual Adds: the Add's readers read the branch instead (so the chain compiles, and a Relu
  // after the Add fuses into the branch's Conv; it is moved back to the residual below).
  std::vector<std::pair<size_t, size_t>> res_convs;  // (Conv index of the skip's reader, of the branch)
  for (const Pending& r : pending) {
    auto find = [&](const std::vector<std::string>& names, const std::string& v) {
      for (size_t i = 0; i < names.size(); ++i) {
        if (names[i] == v) return i;
      }
      return names.size();
    };
    const size_t to = find(conv_out, r.branch), from = find(conv_in, r.skip);
    if (from >= conv_in.size() || from > to) {
      throw Error(ErrorKind::kUnsupported,
                  fmt::format("{}: node '{}': cannot be trained: a residual Add's skip input must be the input of an "
                              "earlier Conv of the chain",
                              raw.source, r.node));
    }
    ValueId add_out = kNoValue, branch = kNoValue;
    for (size_t v = 0; v < g.values.size(); ++v) {
      if (g.values[v].name == r.add_out) add_out = static_cast<ValueId>(v);
      if (g.values[v].name == r.branch) branch = static_cast<ValueId>(v);
    }
    if (add_out == kNoValue || branch == kNoValue) {
      throw Error(ErrorKind::kInternal, fmt::format("{}: residual Add '{}': value not found", raw.source, r.node));
    }
    g.replace_uses(add_out, branch);
    res_convs.emplace_back(from, to);
  }
  if (!pending.empty()) remove_dead_code(g);
  m.net = compile_bf16_cnn(std::move(g));
  for (const Bf16ConvLayer& l : m.net.convs) {  // inference joins branches; training does not yet
    if (!l.sources.empty() || !l.act.none()) {
      throw Error(ErrorKind::kUnsupported,
                  fmt::format("{}: layer '{}' cannot be trained: CNN training supports a chain of layers with residual "
                              "Adds around Convs (no Concat, other branch or activation function)",
                              m.net.head.source, l.name));
    }
    if (!l.pixel_group.empty()) {  // bf16 inference runs them (pixel groups); the backward does not
      throw Error(ErrorKind::kUnsupported,
                  fmt::format("{}: layer '{}' cannot be trained: an average whose divisor varies by pixel "
                              "(count_include_pad=0 with pads, auto_pad SAME, ceil_mode) or a Pad with a constant",
                              m.net.head.source, l.name));
    }
  }
  for (const nn::DenseLayer& l : m.net.head.layers) {
    if (!l.act.none()) {
      throw Error(ErrorKind::kUnsupported,
                  fmt::format("{}: dense layer '{}' cannot be trained: an activation function after it ({})",
                              m.net.head.source, l.name, l.act.node));
    }
  }
  // Pools carry no names; the Convs come in graph order.
  std::vector<std::string> w, b;
  size_t next = 0;
  for (const Bf16ConvLayer& l : m.net.convs) {
    if (l.kind != Bf16ConvLayer::Kind::kConv) {
      w.emplace_back();
      b.emplace_back();
      continue;
    }
    if (next >= m.conv_weight.size()) {
      throw Error(ErrorKind::kInternal, fmt::format("{}: more convolution layers than Conv nodes", m.net.head.source));
    }
    w.push_back(m.conv_weight[next]);
    b.push_back(m.conv_bias[next]);
    ++next;
  }
  if (next != m.conv_weight.size() || m.dense_weight.size() != m.net.head.layers.size()) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("{}: {} Conv and {} Gemm/MatMul nodes became {} convolutions and {} dense layers; training "
                            "needs them one to one (no folding)",
                            m.net.head.source, m.conv_weight.size(), m.dense_weight.size(), next,
                            m.net.head.layers.size()));
  }
  // Conv index -> layer index.
  std::vector<size_t> layer_of;
  for (size_t l = 0; l < m.net.convs.size(); ++l) {
    if (m.net.convs[l].kind == Bf16ConvLayer::Kind::kConv) layer_of.push_back(l);
  }
  for (const auto& [from_conv, to_conv] : res_convs) {
    CnnResidual r;
    r.from = layer_of[from_conv];
    r.to = layer_of[to_conv];
    Bf16ConvLayer& to = m.net.convs[r.to];
    r.relu = to.relu;
    to.relu = false;
    const Bf16ConvLayer& from = m.net.convs[r.from];
    if (from.geom.in_c != to.geom.out_c || from.geom.in_h != to.geom.out_h() || from.geom.in_w != to.geom.out_w()) {
      throw Error(ErrorKind::kUnsupported,
                  fmt::format("{}: a residual Add of [{}, {}, {}] and [{}, {}, {}]: the shapes must be equal",
                              m.net.head.source, from.geom.in_c, from.geom.in_h, from.geom.in_w, to.geom.out_c,
                              to.geom.out_h(), to.geom.out_w()));
    }
    for (const CnnResidual& o : m.residuals) {
      if (o.to == r.to) {
        throw Error(ErrorKind::kUnsupported, fmt::format("{}: two residual Adds after one Conv", m.net.head.source));
      }
    }
    m.residuals.push_back(r);
  }
  m.conv_weight = std::move(w);
  m.conv_bias = std::move(b);
  return m;
}

}  // namespace tpuw::compiler
