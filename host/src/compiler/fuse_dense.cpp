// Fusion into the matrix op (tpuw/compiler/passes.h): Gemm / MatMul [+ Add of a bias] [+ Relu]
// -> one Dense node with a [k, n] fp32 weight, an [n] fp32 bias and a relu flag.
//
// The arithmetic is exactly the old importer's, so the lowered network is bit-identical:
// w[k][n] = float(double(alpha) * B'), bias = beta * float(C) (float product), then each fused
// Add adds float(bias) in float.
#include <fmt/format.h>

#include <limits>

#include "pass_util.h"
#include "tpuw/compiler/passes.h"

namespace tpuw::compiler {
namespace {

using detail::attr_float;
using detail::attr_int;
using detail::bias_from;
using detail::input;

Attribute int_attr(int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::kInt;
  a.i = v;
  return a;
}

// Rewrites the Gemm/MatMul `m` into a Dense node.
Node make_dense(Graph& g, const Node& m) {
  const ValueId a = m.inputs[0], b = m.inputs[1];
  const bool gemm = m.op == Op::kGemm;
  if (g.is_constant(a)) {
    g.fail(ErrorKind::kUnsupported, m,
           fmt::format("input 0 '{}' must be the activation computed from the graph input, not a constant", g.value(a).name));
  }
  const Dims& da = *g.value(a).shape;
  if (da.size() != 2 || !detail::batch_led(da)) {
    g.fail(ErrorKind::kUnsupported, m, fmt::format("the activation has feature shape {}; a dense layer needs [batch, k] "
                                                   "(add a Flatten)", dims_string(detail::features(da))));
  }
  const Value& w = g.value(b);  // shape inference checked: a constant matrix matching the activation
  const bool tb = gemm && attr_int(g, m, "transB", 0) == 1;
  const float alpha = gemm ? attr_float(g, m, "alpha", 1.0f) : 1.0f;
  const int64_t k = tb ? (*w.shape)[1] : (*w.shape)[0];
  const int64_t n = tb ? (*w.shape)[0] : (*w.shape)[1];
  if (n <= 0 || k <= 0 || n > std::numeric_limits<uint32_t>::max()) {
    g.fail(ErrorKind::kBadFile, m, fmt::format("weight '{}' has shape {}", w.name, dims_string(*w.shape)));
  }
  const auto uk = static_cast<size_t>(k), un = static_cast<size_t>(n);
  TensorData wd;
  wd.f.resize(uk * un);
  for (size_t kk = 0; kk < uk; ++kk) {
    for (size_t j = 0; j < un; ++j) {
      const double v = tb ? w.data->as_double(j * uk + kk) : w.data->as_double(kk * un + j);
      wd.f[kk * un + j] = static_cast<float>(alpha * v);
    }
  }
  TensorData bd;
  bd.f.assign(un, 0.0f);
  const ValueId c = gemm ? input(m, 2) : kNoValue;
  if (c != kNoValue) {
    if (!g.is_constant(c)) {
      g.fail(ErrorKind::kUnsupported, m, fmt::format("bias C '{}' is computed from the input; it must be an initializer "
                                                     "or Constant", g.value(c).name));
    }
    const float beta = attr_float(g, m, "beta", 1.0f);
    const std::vector<float> cb = bias_from(g, m, c, static_cast<uint32_t>(n), fmt::format("bias C '{}'", g.value(c).name));
    for (size_t j = 0; j < un; ++j) bd.f[j] = beta * cb[j];
  }
  Node d;
  d.op = Op::kDense;
  d.op_type = "Dense";
  d.name = m.name;
  d.origin = m.origin;
  d.inputs = {a, g.add_constant(m.name + ".w", DType::kFloat32, {k, n}, std::move(wd)),
              g.add_constant(m.name + ".b", DType::kFloat32, {n}, std::move(bd))};
  d.outputs = {m.outputs[0]};
  d.set_attr("relu", int_attr(0));
  g.value(d.outputs[0]).shape = Dims{kBatch, n};
  return d;
}

}  // namespace

void fuse_dense(Graph& g) {
  const auto cons = g.consumers();
  std::vector<uint8_t> removed(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (removed[i] || (g.nodes[i].op != Op::kGemm && g.nodes[i].op != Op::kMatMul)) continue;
    // A batched MatMul (constant B of rank >= 3): lower_feature_maps (a block-diagonal dense layer).
    if (g.nodes[i].op == Op::kMatMul && g.value(g.nodes[i].inputs[1]).shape && g.value(g.nodes[i].inputs[1]).shape->size() >= 3) {
      continue;
    }
    Node d = make_dense(g, g.nodes[i]);
    const auto n = static_cast<uint32_t>((*g.value(d.inputs[1]).shape)[1]);
    bool relu = false;
    for (;;) {
      const ValueId v = d.outputs[0];
      const auto& readers = cons[static_cast<size_t>(v)];
      if (g.is_graph_output(v) || readers.size() != 1) break;
      Node& next = g.nodes[readers[0]];
      if (next.op == Op::kAdd && !relu) {
        const ValueId other = next.inputs[0] == v ? next.inputs[1] : next.inputs[0];
        if (!g.is_constant(other) || other == v) break;
        const std::vector<float> b = bias_from(g, next, other, n, fmt::format("bias '{}'", g.value(other).name));
        std::vector<double>& bias = g.value(d.inputs[2]).data->f;
        for (uint32_t j = 0; j < n; ++j) bias[j] = static_cast<float>(static_cast<float>(bias[j]) + b[j]);
      } else if (next.op == Op::kRelu) {
        relu = true;
        d.set_attr("relu", int_attr(1));
      } else {
        break;
      }
      d.origin.push_back(next.label());
      d.outputs = {next.outputs[0]};
      g.value(d.outputs[0]).shape = Dims{kBatch, static_cast<int64_t>(n)};
      removed[readers[0]] = 1;
    }
    g.nodes[i] = std::move(d);
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!removed[i]) kept.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(kept);
}

}  // namespace tpuw::compiler
