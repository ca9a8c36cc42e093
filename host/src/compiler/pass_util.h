// Helpers the passes share (internal to the compiler library).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "tpuw/compiler/ir.h"

namespace tpuw::compiler::detail {

/// An int attribute, or `def` when absent; Error(kBadFile) when it has another type.
inline int64_t attr_int(const Graph& g, const Node& n, std::string_view key, int64_t def) {
  const Attribute* a = n.attr(key);
  if (a == nullptr) return def;
  if (a->kind != Attribute::Kind::kInt) g.fail(ErrorKind::kBadFile, n, fmt::format("attribute '{}' is not an int", key));
  return a->i;
}

/// A float attribute, or `def` when absent; Error(kBadFile) when it has another type.
inline float attr_float(const Graph& g, const Node& n, std::string_view key, float def) {
  const Attribute* a = n.attr(key);
  if (a == nullptr) return def;
  if (a->kind != Attribute::Kind::kFloat) g.fail(ErrorKind::kBadFile, n, fmt::format("attribute '{}' is not a float", key));
  return a->f;
}

/// The input `i` of `n`, or kNoValue when the node has fewer inputs or it is omitted.
inline ValueId input(const Node& n, size_t i) { return i < n.inputs.size() ? n.inputs[i] : kNoValue; }
inline ValueId output(const Node& n, size_t i) { return i < n.outputs.size() ? n.outputs[i] : kNoValue; }

/// The non-batch dimensions of an activation shape [batch, ...].
inline Dims features(const Dims& d) { return d.empty() ? Dims{} : Dims(d.begin() + 1, d.end()); }

/// True when `d` is an activation shape: rank >= 1 with the batch symbol first and nowhere else.
inline bool batch_led(const Dims& d) {
  if (d.empty() || d[0] != kBatch) return false;
  for (size_t i = 1; i < d.size(); ++i) {
    if (d[i] == kBatch) return false;
  }
  return true;
}

/// A constant's value `k` as a size-like int64 (doubles beyond +-9e15 are clamped; kBatch kept).
inline int64_t as_int(const TensorData& d, size_t k) {
  if (d.f.empty()) return d.i[k];
  const double v = d.f[k];
  if (!(v == v)) return 0;
  return static_cast<int64_t>(std::clamp(v, -9.0e15, 9.0e15));
}

/// The batch a Reshape fixes: dimension 0 of its constant shape when that is a positive number
/// (ONNX's [2, 12] for a [2, 3, 4] input; allowzero = 0), else 0. Shape inference accepts such a
/// Reshape as keeping the batch, and the runtime checks the number of rows (FloatNetwork::fixed_batch).
inline int64_t reshape_fixed_batch(const Graph& g, const Node& n) {
  if (n.op != Op::kReshape || n.inputs.size() < 2 || !g.is_constant(n.inputs[1])) return 0;
  const TensorData& d = *g.value(n.inputs[1]).data;
  if (d.size() < 2) return 0;
  const int64_t b = as_int(d, 0);
  return b > 0 && b != kBatch ? b : 0;
}

/// The bias vector of `n` outputs from constant `c` broadcastable to [n] (shape [n], [1, n], [1],
/// a scalar): b[j] as float. Error(kUnsupported) naming `what` otherwise.
inline std::vector<float> bias_from(const Graph& g, const Node& node, ValueId c, uint32_t n, std::string_view what) {
  const Value& t = g.value(c);
  const Dims& d = *t.shape;
  const size_t cnt = t.data->size();
  bool ok = cnt == 1 || cnt == n;
  for (size_t i = 0; i + 1 < d.size(); ++i) ok = ok && d[i] == 1;
  if (!ok) {
    g.fail(ErrorKind::kUnsupported, node,
           fmt::format("{} has shape {}; it must broadcast to [{}] (one value per output feature)", what, dims_string(d), n));
  }
  std::vector<float> b(n);
  for (uint32_t j = 0; j < n; ++j) b[j] = static_cast<float>(t.data->as_double(cnt == 1 ? 0 : j));
  return b;
}

}  // namespace tpuw::compiler::detail
