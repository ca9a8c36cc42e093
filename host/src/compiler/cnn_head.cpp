// The dense head of a CNN (cnn_head.h).
#include "cnn_head.h"

#include <fmt/format.h>

#include "pass_util.h"
#include "tpuw/compiler/activations.h"

namespace tpuw::compiler::detail {

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
