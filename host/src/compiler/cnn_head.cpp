// The dense head of a CNN (cnn_head.h).
#include "cnn_head.h"

#include <fmt/format.h>

#include <algorithm>

#include "pass_util.h"
#include "tpuw/compiler/activations.h"

namespace tpuw::compiler::detail {

std::vector<int32_t> head_concat_sources(const Graph& g, const CnnInputs& ins, size_t& i, ValueId act,
                                         int32_t map_source) {
  if (i >= g.nodes.size()) return {};
  const Node& cat = g.nodes[i];
  const auto is_vector = [&](ValueId v) { return ins.vector_input(g, v) >= 0; };
  if (cat.op != Op::kConcat || std::find(cat.inputs.begin(), cat.inputs.end(), act) == cat.inputs.end() ||
      std::none_of(cat.inputs.begin(), cat.inputs.end(), is_vector)) {
    return {};
  }
  int64_t axis = attr_int(g, cat, "axis", 0);
  if (axis < 0) axis += 2;
  if (axis != 1) {
    g.fail(ErrorKind::kUnsupported, cat,
           "joins the flattened map and a vector input along the batch axis; they join along the features (axis 1)");
  }
  const std::vector<std::vector<size_t>> readers = g.consumers();
  std::vector<int32_t> sources;
  for (const ValueId v : cat.inputs) {
    const int k = ins.vector_input(g, v);
    const int32_t s = v == act ? map_source : -1 - k;
    if ((v != act && k < 0) || std::find(sources.begin(), sources.end(), s) != sources.end()) {
      g.fail(ErrorKind::kUnsupported, cat,
             fmt::format("concatenates '{}' with the flattened map; the dense head's Concat joins the flattened last "
                         "map and vector graph inputs (each once), not a hidden activation",
                         g.value(v).name));
    }
    if (readers[static_cast<size_t>(v)].size() != 1) {
      g.fail(ErrorKind::kUnsupported, cat,
             fmt::format("'{}' is also read elsewhere; the flattened map and a vector input join the dense head in "
                         "this Concat only",
                         g.value(v).name));
    }
    sources.push_back(s);
  }
  ++i;
  return sources;
}

void add_head_node(const Graph& g, const CnnInputs& ins, const Node& n, ValueId act, nn::FloatNetwork& head) {
  for (const ValueId v : n.inputs) {
    if (ins.vector_input(g, v) >= 0) {
      g.fail(ErrorKind::kUnsupported, n,
             fmt::format("reads the vector input '{}' inside the dense head; a vector input joins the head only in a "
                         "Concat with the flattened map right after the Flatten (a Concat of an input with a hidden "
                         "activation is not supported)",
                         g.value(v).name));
    }
  }
  if (n.inputs.empty() || n.inputs[0] != act || head.host_op != nn::HostOp::kNone) {
    g.fail(ErrorKind::kUnsupported, n, "is not part of the dense head's chain");
  }
  if (n.op == Op::kDense) {
    nn::DenseLayer l;
    l.name = n.origin.empty() ? n.label() : n.origin.front();
    for (size_t k = 1; k < n.origin.size(); ++k) l.name += " + " + n.origin[k];
    const Value& w = g.value(n.inputs[1]);
    l.k = static_cast<uint32_t>((*w.shape)[0]);
    l.n = static_cast<uint32_t>((*w.shape)[1]);
    l.w.assign(w.data->f.begin(), w.data->f.end());
    const Value& b = g.value(n.inputs[2]);
    l.b.assign(b.data->f.begin(), b.data->f.end());
    l.relu = attr_int(g, n, "relu", 0) != 0;
    head.layers.push_back(std::move(l));
  } else if (is_activation_op(n.op) && !head.layers.empty() && head.layers.back().act.none()) {
    // A function after a dense layer (after its fused Relu, if any; elementwise, so a Reshape
    // between them changes nothing): the layer's int8 lookup table or bf16 VECTOR ops.
    nn::DenseLayer& l = head.layers.back();
    l.act = activation_of(g, n);
    l.act.node = n.label();
    l.name += " + " + n.label();
  } else if (n.op == Op::kSoftmax && g.value(act).shape->size() == 2) {
    head.host_op = nn::HostOp::kSoftmax;
  } else if (n.op != Op::kFlatten && n.op != Op::kReshape) {
    g.fail(ErrorKind::kUnsupported, n,
           head.layers.empty() || !is_activation_op(n.op)
               ? "is not supported in a CNN's dense head (Gemm/MatMul, Add, Relu, one function after each, Softmax)"
               : fmt::format("follows another function ({}) on dense layer '{}'", head.layers.back().act.node,
                             head.layers.back().name));
  }
}

}  // namespace tpuw::compiler::detail
