// Constant folding (tpuw/compiler/passes.h): evaluates nodes whose inputs are constants, and Shape
// of a tensor whose shape is known (the batch stays the symbol kBatch inside the shape tensor).
#include <fmt/format.h>

#include <algorithm>

#include "pass_util.h"
#include "tpuw/compiler/passes.h"

namespace tpuw::compiler {
namespace {

using detail::attr_int;
using detail::input;
using detail::output;

struct Folded {
  DType dtype;
  Dims dims;
  TensorData data;
};

class Folder {
 public:
  explicit Folder(Graph& g) : g_(g) {}

  // The folded value of `n`'s first output, or nullopt when `n` cannot be folded (yet).
  std::optional<Folded> fold(const Node& n) {
    n_ = &n;
    switch (n.op) {
      case Op::kConstant: return constant(n);
      case Op::kIdentity: return all_constant(n) ? std::optional<Folded>(copy(n.inputs[0])) : std::nullopt;
      case Op::kDropout: {
        const ValueId mask = output(n, 1);
        if (mask != kNoValue && used_[static_cast<size_t>(mask)]) return std::nullopt;  // reported by remove_identities
        const ValueId tm = input(n, 2);
        if (tm != kNoValue && (!g_.is_constant(tm) || g_.value(tm).data->size() != 1 ||
                               g_.value(tm).data->as_double(0) != 0)) {
          return std::nullopt;  // reported by remove_identities
        }
        return g_.is_constant(n.inputs[0]) ? std::optional<Folded>(copy(n.inputs[0])) : std::nullopt;
      }
      case Op::kShape: return shape(n);
      case Op::kGather: return all_constant(n) ? gather(n) : std::nullopt;
      case Op::kUnsqueeze: return all_constant(n) ? unsqueeze(n) : std::nullopt;
      case Op::kConcat: return all_constant(n) ? concat(n) : std::nullopt;
      default: return std::nullopt;
    }
  }

  void mark_used() {
    used_.assign(g_.values.size(), 0);
    for (const Node& n : g_.nodes) {
      for (const ValueId v : n.inputs) {
        if (v != kNoValue) used_[static_cast<size_t>(v)] = 1;
      }
    }
    for (const GraphOutput& o : g_.outputs) used_[static_cast<size_t>(o.value)] = 1;
  }

 private:
  Graph& g_;
  const Node* n_ = nullptr;
  std::vector<uint8_t> used_;

  [[noreturn]] void fail(ErrorKind k, const std::string& what) const { g_.fail(k, *n_, what); }

  bool all_constant(const Node& n) const {
    return std::all_of(n.inputs.begin(), n.inputs.end(), [&](ValueId v) { return v == kNoValue || g_.is_constant(v); });
  }
  Folded copy(ValueId v) const {
    const Value& x = g_.value(v);
    return Folded{x.dtype, *x.shape, *x.data};
  }

  std::optional<Folded> constant(const Node& n) const {
    const auto& [key, a] = n.attrs.at(0);  // legalize checked: exactly one attribute of the right kind
    Folded f{DType::kFloat32, {}, {}};
    if (key == "value") {
      f.dtype = a.t->dtype;
      f.dims = a.t->dims;
      f.data = a.t->data;
    } else if (key == "value_float") {
      f.data.f = {a.f};
    } else if (key == "value_floats") {
      f.dims = {static_cast<int64_t>(a.floats.size())};
      f.data.f.assign(a.floats.begin(), a.floats.end());
    } else if (key == "value_int") {
      f.dtype = DType::kInt64;
      f.data.i = {a.i};
    } else {
      f.dtype = DType::kInt64;
      f.dims = {static_cast<int64_t>(a.ints.size())};
      f.data.i = a.ints;
    }
    return f;
  }

  std::optional<Folded> shape(const Node& n) const {
    const Value& x = g_.value(n.inputs[0]);
    if (!x.shape) return std::nullopt;
    const auto r = static_cast<int64_t>(x.shape->size());
    auto clampi = [&](int64_t v) { return std::clamp(v < 0 ? v + r : v, int64_t{0}, r); };
    const int64_t start = clampi(attr_int(g_, n, "start", 0));
    const int64_t end = std::max(start, clampi(attr_int(g_, n, "end", r)));
    Folded f{DType::kInt64, {end - start}, {}};
    f.data.i.assign(x.shape->begin() + start, x.shape->begin() + end);
    return f;
  }

  // Shape tensors are 1-D; folding handles exactly that (and scalars).
  const Value& vector_input(ValueId v, const char* what) const {
    const Value& x = g_.value(v);
    if (x.shape->size() > 1) {
      fail(ErrorKind::kUnsupported, fmt::format("{} '{}' has shape {}; only 1-D constants (shape tensors) are folded",
                                                what, x.name, dims_string(*x.shape)));
    }
    return x;
  }

  std::optional<Folded> gather(const Node& n) const {
    const Value& data = vector_input(n.inputs[0], "data");
    const Value& idx = vector_input(n.inputs[1], "indices");
    if (data.shape->size() != 1) fail(ErrorKind::kUnsupported, "Gather of a scalar");
    const int64_t axis = attr_int(g_, n, "axis", 0);
    if (axis != 0 && axis != -1) fail(ErrorKind::kBadFile, fmt::format("axis {} is out of range for a 1-D tensor", axis));
    if (is_float(idx.dtype)) fail(ErrorKind::kBadFile, fmt::format("indices '{}' are not integers", idx.name));
    const auto len = static_cast<int64_t>(data.data->size());
    Folded f{data.dtype, *idx.shape, {}};
    for (size_t k = 0; k < idx.data->size(); ++k) {
      int64_t i = idx.data->i[k];
      if (i < 0) i += len;
      if (i < 0 || i >= len) {
        fail(ErrorKind::kBadFile, fmt::format("index {} is out of range for {} elements", idx.data->i[k], len));
      }
      if (data.data->f.empty()) {
        f.data.i.push_back(data.data->i[static_cast<size_t>(i)]);
      } else {
        f.data.f.push_back(data.data->f[static_cast<size_t>(i)]);
      }
    }
    return f;
  }

  std::optional<Folded> unsqueeze(const Node& n) const {
    const Value& data = g_.value(n.inputs[0]);
    std::vector<int64_t> axes;
    if (const Attribute* a = n.attr("axes")) {
      axes = a->ints;
    } else {
      const Value& av = vector_input(n.inputs[1], "axes");
      for (size_t k = 0; k < av.data->size(); ++k) axes.push_back(detail::as_int(*av.data, k));
    }
    const auto r = static_cast<int64_t>(data.shape->size() + axes.size());
    Dims out(static_cast<size_t>(r), -1);
    for (int64_t a : axes) {
      if (a < 0) a += r;
      if (a < 0 || a >= r || out[static_cast<size_t>(a)] == 1) {
        fail(ErrorKind::kBadFile, fmt::format("axes {} are invalid for a rank-{} result", dims_string(axes), r));
      }
      out[static_cast<size_t>(a)] = 1;
    }
    size_t k = 0;
    for (int64_t& d : out) {
      if (d == -1) d = (*data.shape)[k++];
    }
    return Folded{data.dtype, std::move(out), *data.data};
  }

  std::optional<Folded> concat(const Node& n) const {
    const int64_t axis = attr_int(g_, n, "axis", 0);
    if (axis != 0 && axis != -1) {
      fail(ErrorKind::kUnsupported, fmt::format("axis {}: only 1-D constants (shape tensors) are folded", axis));
    }
    bool any_float = false;
    for (const ValueId v : n.inputs) {
      if (v == kNoValue) fail(ErrorKind::kBadFile, "an input is empty");
      const Value& x = vector_input(v, "input");
      if (x.shape->size() != 1) fail(ErrorKind::kBadFile, fmt::format("input '{}' is a scalar", x.name));
      any_float = any_float || !x.data->f.empty() || is_float(x.dtype);
    }
    Folded f{g_.value(n.inputs[0]).dtype, {0}, {}};
    for (const ValueId v : n.inputs) {
      const TensorData& d = *g_.value(v).data;
      for (size_t k = 0; k < d.size(); ++k) {
        if (any_float) f.data.f.push_back(d.as_double(k)); else f.data.i.push_back(d.i[k]);
      }
    }
    f.dims[0] = static_cast<int64_t>(f.data.size());
    if (!checked_elements(f.dims)) fail(ErrorKind::kBadFile, "the result has too many elements");
    return f;
  }
};

}  // namespace

bool fold_constants(Graph& g) {
  Folder folder(g);
  folder.mark_used();
  bool changed = false;
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    std::optional<Folded> f = folder.fold(n);
    if (!f) {
      kept.push_back(std::move(n));
      continue;
    }
    Value& out = g.value(n.outputs[0]);
    out.dtype = f->dtype;
    out.shape = std::move(f->dims);
    out.data = std::move(f->data);
    if (n.op == Op::kDropout && detail::output(n, 1) != kNoValue) {
      // The (unread) mask of a folded Dropout: all true, like the inference-mode operator.
      const ValueId mask = n.outputs[1];
      Value& m = g.value(mask);
      m.dtype = DType::kBool;
      m.shape = out.shape;
      m.data = TensorData{};
      m.data->i.assign(out.data->size(), 1);
    }
    for (size_t k = 1; k < n.outputs.size(); ++k) {
      if (n.outputs[k] != kNoValue && !g.value(n.outputs[k]).data) {
        g.fail(ErrorKind::kBadFile, n, "has more outputs than the operator defines");
      }
    }
    changed = true;
  }
  g.nodes = std::move(kept);
  return changed;
}

}  // namespace tpuw::compiler
