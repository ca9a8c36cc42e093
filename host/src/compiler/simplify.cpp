// Identity/Dropout removal and dead-code removal (tpuw/compiler/passes.h).
#include <fmt/format.h>

#include "pass_util.h"
#include "tpuw/compiler/passes.h"

namespace tpuw::compiler {
namespace {

using detail::input;
using detail::output;

bool read_anywhere(const Graph& g, const std::vector<std::vector<size_t>>& cons, ValueId v) {
  return v != kNoValue && (!cons[static_cast<size_t>(v)].empty() || g.is_graph_output(v));
}

// Whether `n` computes its first input unchanged (and may be removed); reports a Dropout that
// would not be the identity.
bool is_identity(const Graph& g, const Node& n, const std::vector<std::vector<size_t>>& cons) {
  switch (n.op) {
    case Op::kIdentity: return true;
    case Op::kDropout: {
      if (read_anywhere(g, cons, output(n, 1))) g.fail(ErrorKind::kUnsupported, n, "the mask output is not supported (inference only)");
      const ValueId tm = input(n, 2);
      if (tm != kNoValue) {
        const Value& t = g.value(tm);
        if (!t.is_constant()) {
          g.fail(ErrorKind::kUnsupported, n,
                 fmt::format("training_mode '{}' is computed from the input; it must be an initializer or Constant", t.name));
        }
        if (t.data->size() != 1 || t.data->as_double(0) != 0) {
          g.fail(ErrorKind::kUnsupported, n, "training_mode must be false (inference only)");
        }
      }
      for (size_t k = 2; k < n.outputs.size(); ++k) {
        if (n.outputs[k] != kNoValue) g.fail(ErrorKind::kBadFile, n, "Dropout has at most two outputs");
      }
      return true;
    }
    case Op::kReshape:
    case Op::kFlatten: {
      const Value& x = g.value(n.inputs[0]);
      const Value& y = g.value(n.outputs[0]);
      // A Reshape that fixes the batch stays: lowering records the number of rows it needs.
      return x.shape && y.shape && *x.shape == *y.shape && !x.is_constant() && n.outputs.size() == 1 &&
             detail::reshape_fixed_batch(g, n) == 0;
    }
    default: return false;
  }
}

}  // namespace

void remove_identities(Graph& g) {
  const auto cons = g.consumers();
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  std::vector<std::pair<ValueId, ValueId>> renames;  // (removed output, its input)
  for (Node& n : g.nodes) {
    if (is_identity(g, n, cons)) {
      renames.emplace_back(n.outputs[0], n.inputs[0]);
    } else {
      kept.push_back(std::move(n));
    }
  }
  g.nodes = std::move(kept);
  // Last first, so a chain of identities collapses onto its first input.
  for (auto it = renames.rbegin(); it != renames.rend(); ++it) g.replace_uses(it->first, it->second);
}

void remove_dead_code(Graph& g) {
  std::vector<uint8_t> live(g.values.size(), 0);
  for (const GraphOutput& o : g.outputs) live[static_cast<size_t>(o.value)] = 1;
  std::vector<uint8_t> keep(g.nodes.size(), 0);
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    for (const ValueId v : n.outputs) {
      if (v != kNoValue && live[static_cast<size_t>(v)]) keep[i] = 1;
    }
    if (!keep[i]) continue;
    for (const ValueId v : n.inputs) {
      if (v != kNoValue) live[static_cast<size_t>(v)] = 1;
    }
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (keep[i]) kept.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(kept);
  // Constants nothing reads any more (a weight fusion has copied, a folded shape) free their data:
  // they are no longer part of the graph.
  for (size_t v = 0; v < g.values.size(); ++v) {
    if (!live[v] && g.values[v].is_constant()) g.values[v].data.reset();
  }
}

}  // namespace tpuw::compiler
