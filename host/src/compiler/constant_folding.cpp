// Constant folding (tpuw/compiler/passes.h): evaluates nodes whose inputs are constants, and Shape
// of a tensor whose shape is known (the batch stays the symbol kBatch inside the shape tensor).
//
// Shape arithmetic as PyTorch exports it (x.view(b, g, c // g, h, w), chunk, masked_fill, ...):
// Shape, Gather, Unsqueeze, Squeeze, Concat, Slice, Cast, Add/Sub/Mul/Div, Equal, Where, Range and
// ConstantOfShape are evaluated here on constants of any rank with numpy broadcasting. The batch
// symbol survives only what keeps it exact: copies (Gather, Slice, Concat, ...), an integer Cast,
// batch * 1, batch / 1, batch + 0, batch - 0, and Equal against a size <= 0 (false) or the batch
// (true); any other arithmetic on it leaves the node unfolded, and strict shape inference reports it.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

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

// Folding never builds a constant above this many elements: a computed shape that asks for more
// (ConstantOfShape([1e9]), Range(0, 1e12, 1)) is refused before anything is allocated.
constexpr int64_t kMaxFoldedElements = int64_t{1} << 24;

// Thrown inside an evaluation when a value cannot be computed exactly (arithmetic on the batch
// symbol): the node stays unfolded.
struct NotFoldable {};

// The numpy broadcast of shapes; nullopt when they do not broadcast.
std::optional<Dims> broadcast_dims(const std::vector<const Dims*>& shapes) {
  size_t r = 0;
  for (const Dims* d : shapes) r = std::max(r, d->size());
  Dims out(r, 1);
  for (const Dims* d : shapes) {
    for (size_t i = 0; i < d->size(); ++i) {
      const size_t o = r - d->size() + i;
      const int64_t v = (*d)[i];
      if (out[o] == 1) out[o] = v;
      else if (v != 1 && v != out[o]) return std::nullopt;
    }
  }
  return out;
}

// Row-major strides of `in` seen through the broadcast to `out` (0 along broadcast axes).
std::vector<int64_t> broadcast_strides(const Dims& in, const Dims& out) {
  std::vector<int64_t> st(out.size(), 0);
  int64_t s = 1;
  for (size_t i = in.size(); i-- > 0;) {
    const size_t o = out.size() - in.size() + i;
    st[o] = in[i] == 1 ? 0 : s;
    s *= in[i];
  }
  return st;
}

// The flat index into an input with strides `st` of output element `flat` (shape `out`).
int64_t source_index(int64_t flat, const Dims& out, const std::vector<int64_t>& st) {
  int64_t idx = 0;
  for (size_t i = out.size(); i-- > 0;) {
    const int64_t c = flat % out[i];
    flat /= out[i];
    idx += c * st[i];
  }
  return idx;
}

bool is_int_type(DType t) { return !is_float(t); }

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
      default: break;
    }
    if (!all_constant(n)) return std::nullopt;
    try {
      switch (n.op) {
        case Op::kGather: return checked(gather(n));
        case Op::kUnsqueeze: return checked(unsqueeze(n));
        case Op::kSqueeze: return checked(squeeze(n));
        case Op::kConcat: return checked(concat(n));
        case Op::kSlice: return checked(slice(n));
        case Op::kCast: return checked(cast(n));
        case Op::kAdd:
        case Op::kSub:
        case Op::kMul:
        case Op::kDiv:
        case Op::kEqual: return checked(binary(n));
        case Op::kWhere: return checked(where(n));
        case Op::kRange: return checked(range(n));
        case Op::kConstantOfShape: return checked(constant_of_shape(n));
        default: return std::nullopt;
      }
    } catch (const NotFoldable&) {
      return std::nullopt;
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

  // A folded constant within the folding limit (kMaxFoldedElements), else kUnsupported.
  std::optional<Folded> checked(std::optional<Folded> f) const {
    if (!f) return f;
    const std::optional<int64_t> e = checked_elements(f->dims);
    if (!e || *e > kMaxFoldedElements) {
      fail(ErrorKind::kUnsupported, fmt::format("the computed constant has shape {}, above the {} elements the compiler "
                                                "folds", dims_string(f->dims), kMaxFoldedElements));
    }
    if (f->data.size() != static_cast<size_t>(*e)) {
      fail(ErrorKind::kInternal, fmt::format("folded {} values for shape {}", f->data.size(), dims_string(f->dims)));
    }
    return f;
  }

  const Value& in(size_t k) const { return g_.value(n_->inputs[k]); }
  std::optional<const Value*> opt_in(size_t k) const {
    const ValueId v = input(*n_, k);
    if (v == kNoValue) return std::nullopt;
    return &g_.value(v);
  }

  // The integer contents of a 1-D (or scalar) constant: axes, starts, indices.
  std::vector<int64_t> ints_of(const Value& v, const char* what) const {
    if (v.shape->size() > 1) fail(ErrorKind::kBadFile, fmt::format("{} '{}' has shape {}; it must be 1-D", what, v.name, dims_string(*v.shape)));
    if (is_float(v.dtype)) fail(ErrorKind::kBadFile, fmt::format("{} '{}' are not integers", what, v.name));
    return v.data->i;
  }

  static int64_t norm_axis(int64_t a, int64_t rank) { return a < 0 ? a + rank : a; }
  int64_t axis_in_range(int64_t a, int64_t rank) const {
    const int64_t x = norm_axis(a, rank);
    if (x < 0 || x >= rank) fail(ErrorKind::kBadFile, fmt::format("axis {} is out of range for rank {}", a, rank));
    return x;
  }

  // Element k of `d` appended to `out` (same storage kind as `d`).
  static void push(TensorData& out, const TensorData& d, size_t k) {
    if (d.f.empty()) out.i.push_back(d.i[k]); else out.f.push_back(d.f[k]);
  }

  std::optional<Folded> gather(const Node& n) const {
    const Value& data = in(0);
    const Value& idx = in(1);
    const Dims& dd = *data.shape;
    if (dd.empty()) fail(ErrorKind::kBadFile, "Gather of a scalar");
    if (is_float(idx.dtype)) fail(ErrorKind::kBadFile, fmt::format("indices '{}' are not integers", idx.name));
    const auto r = static_cast<int64_t>(dd.size());
    const int64_t axis = axis_in_range(attr_int(g_, n, "axis", 0), r);
    const auto ax = static_cast<size_t>(axis);
    const int64_t len = dd[ax];
    int64_t outer = 1, inner = 1;
    for (size_t i = 0; i < ax; ++i) outer *= dd[i];
    for (size_t i = ax + 1; i < dd.size(); ++i) inner *= dd[i];
    Dims out(dd.begin(), dd.begin() + axis);
    out.insert(out.end(), idx.shape->begin(), idx.shape->end());
    out.insert(out.end(), dd.begin() + axis + 1, dd.end());
    const std::optional<int64_t> e = checked_elements(out);
    if (!e || *e > kMaxFoldedElements) return checked(Folded{data.dtype, out, {}});  // refused before allocating
    Folded f{data.dtype, std::move(out), {}};
    for (int64_t o = 0; o < outer; ++o) {
      for (size_t k = 0; k < idx.data->size(); ++k) {
        int64_t i = idx.data->i[k];
        if (i < 0) i += len;
        if (i < 0 || i >= len) {
          fail(ErrorKind::kBadFile, fmt::format("index {} is out of range for {} elements", idx.data->i[k], len));
        }
        for (int64_t j = 0; j < inner; ++j) push(f.data, *data.data, static_cast<size_t>((o * len + i) * inner + j));
      }
    }
    return f;
  }

  // The axes of an Unsqueeze/Squeeze: attribute (opset < 13) or input 1; nullopt: none given.
  std::optional<std::vector<int64_t>> axes(const Node& n) const {
    if (const Attribute* a = n.attr("axes")) return a->ints;
    if (const auto v = opt_in(1)) return ints_of(**v, "axes");
    return std::nullopt;
  }

  std::optional<Folded> unsqueeze(const Node& n) const {
    const Value& data = in(0);
    const std::vector<int64_t> ax = axes(n).value_or(std::vector<int64_t>{});
    const auto r = static_cast<int64_t>(data.shape->size() + ax.size());
    Dims out(static_cast<size_t>(r), -1);
    for (int64_t a : ax) {
      a = norm_axis(a, r);
      if (a < 0 || a >= r || out[static_cast<size_t>(a)] == 1) {
        fail(ErrorKind::kBadFile, fmt::format("axes {} are invalid for a rank-{} result", dims_string(ax), r));
      }
      out[static_cast<size_t>(a)] = 1;
    }
    size_t k = 0;
    for (int64_t& d : out) {
      if (d == -1) d = (*data.shape)[k++];
    }
    return Folded{data.dtype, std::move(out), *data.data};
  }

  std::optional<Folded> squeeze(const Node& n) const {
    const Value& data = in(0);
    const Dims& d = *data.shape;
    const auto r = static_cast<int64_t>(d.size());
    const std::optional<std::vector<int64_t>> ax = axes(n);
    std::vector<bool> drop(d.size(), false);
    if (!ax) {
      for (size_t i = 0; i < d.size(); ++i) drop[i] = d[i] == 1;
    } else {
      for (const int64_t a : *ax) {
        const auto x = static_cast<size_t>(axis_in_range(a, r));
        if (d[x] != 1) fail(ErrorKind::kBadFile, fmt::format("axis {} of {} has size {}, not 1", a, dims_string(d), d[x]));
        drop[x] = true;
      }
    }
    Dims out;
    for (size_t i = 0; i < d.size(); ++i) {
      if (!drop[i]) out.push_back(d[i]);
    }
    return Folded{data.dtype, std::move(out), *data.data};
  }

  std::optional<Folded> concat(const Node& n) const {
    for (const ValueId v : n.inputs) {
      if (v == kNoValue) fail(ErrorKind::kBadFile, "an input is empty");
    }
    const Dims& d0 = *in(0).shape;
    const auto r = static_cast<int64_t>(d0.size());
    if (r == 0) fail(ErrorKind::kBadFile, fmt::format("input '{}' is a scalar", in(0).name));
    const auto ax = static_cast<size_t>(axis_in_range(attr_int(g_, n, "axis", 0), r));
    bool any_float = false;
    Dims out = d0;
    out[ax] = 0;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const Value& x = in(k);
      const Dims& d = *x.shape;
      bool ok = d.size() == d0.size();
      for (size_t i = 0; ok && i < d.size(); ++i) ok = i == ax || d[i] == d0[i];
      if (!ok) fail(ErrorKind::kBadFile, fmt::format("input '{}' {} does not match {} outside axis {}", x.name,
                                                     dims_string(d), dims_string(d0), ax));
      out[ax] += d[ax];
      any_float = any_float || !x.data->f.empty() || is_float(x.dtype);
    }
    const std::optional<int64_t> e = checked_elements(out);
    if (!e || *e > kMaxFoldedElements) return checked(Folded{in(0).dtype, out, {}});
    int64_t outer = 1;
    for (size_t i = 0; i < ax; ++i) outer *= d0[i];
    Folded f{in(0).dtype, out, {}};
    for (int64_t o = 0; o < outer; ++o) {
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const Value& x = in(k);
        int64_t chunk = 1;
        for (size_t i = ax; i < x.shape->size(); ++i) chunk *= (*x.shape)[i];
        for (int64_t j = 0; j < chunk; ++j) {
          const auto at = static_cast<size_t>(o * chunk + j);
          if (any_float) f.data.f.push_back(x.data->as_double(at)); else f.data.i.push_back(x.data->i[at]);
        }
      }
    }
    return f;
  }

  std::optional<Folded> slice(const Node& n) const {
    const Value& data = in(0);
    const Dims& d = *data.shape;
    const auto r = static_cast<int64_t>(d.size());
    std::vector<int64_t> starts, ends, ax, steps;
    if (n.attr("starts") != nullptr) {  // opset < 10
      starts = n.attr("starts")->ints;
      ends = n.attr("ends") != nullptr ? n.attr("ends")->ints : std::vector<int64_t>{};
      if (n.attr("axes") != nullptr) ax = n.attr("axes")->ints;
    } else {
      starts = ints_of(in(1), "starts");
      ends = ints_of(in(2), "ends");
      if (const auto v = opt_in(3)) ax = ints_of(**v, "axes");
      if (const auto v = opt_in(4)) steps = ints_of(**v, "steps");
    }
    if (ax.empty()) {
      for (size_t i = 0; i < starts.size(); ++i) ax.push_back(static_cast<int64_t>(i));
    }
    if (steps.empty()) steps.assign(starts.size(), 1);
    if (ends.size() != starts.size() || ax.size() != starts.size() || steps.size() != starts.size()) {
      fail(ErrorKind::kBadFile, fmt::format("starts, ends, axes and steps have {}, {}, {} and {} entries", starts.size(),
                                            ends.size(), ax.size(), steps.size()));
    }
    // Per axis: first index, step, count (ONNX's clamping rules).
    std::vector<int64_t> first(d.size(), 0), step(d.size(), 1);
    Dims out = d;
    std::vector<bool> seen(d.size(), false);
    for (size_t k = 0; k < starts.size(); ++k) {
      const auto a = static_cast<size_t>(axis_in_range(ax[k], r));
      if (seen[a]) fail(ErrorKind::kBadFile, fmt::format("axis {} is repeated", ax[k]));
      seen[a] = true;
      const int64_t len = d[a], st = steps[k];
      if (st == 0) fail(ErrorKind::kBadFile, "a step is 0");
      if (starts[k] == kBatch || ends[k] == kBatch) throw NotFoldable{};
      int64_t s0 = starts[k] < 0 ? starts[k] + len : starts[k];
      int64_t e0 = ends[k] < 0 ? ends[k] + len : ends[k];
      if (st > 0) {
        s0 = std::clamp<int64_t>(s0, 0, len);
        e0 = std::clamp<int64_t>(e0, 0, len);
        out[a] = e0 > s0 ? (e0 - s0 + st - 1) / st : 0;
      } else {
        s0 = std::clamp<int64_t>(s0, 0, len - 1);
        e0 = std::clamp<int64_t>(e0, -1, len - 1);
        out[a] = s0 > e0 ? (s0 - e0 - st - 1) / -st : 0;
      }
      first[a] = s0;
      step[a] = st;
    }
    const std::optional<int64_t> e = checked_elements(out);
    if (!e || *e > kMaxFoldedElements) return checked(Folded{data.dtype, out, {}});
    Folded f{data.dtype, out, {}};
    for (int64_t o = 0; o < *e; ++o) {
      int64_t rem = o, src = 0, stride = 1;
      for (size_t i = d.size(); i-- > 0;) {
        const int64_t c = rem % out[i];
        rem /= out[i];
        src += (first[i] + c * step[i]) * stride;
        stride *= d[i];
      }
      push(f.data, *data.data, static_cast<size_t>(src));
    }
    return f;
  }

  // ONNX TensorProto element types the IR holds.
  std::optional<DType> onnx_dtype(int64_t t) const {
    switch (t) {
      case 1: return DType::kFloat32;
      case 3: return DType::kInt8;
      case 6: return DType::kInt32;
      case 7: return DType::kInt64;
      case 9: return DType::kBool;
      case 11: return DType::kFloat64;
      case 16: return DType::kBFloat16;
      default: return std::nullopt;
    }
  }

  static double round_to(DType t, double v) {
    if (t == DType::kFloat32) return static_cast<double>(static_cast<float>(v));
    return v;  // fp64; bf16 keeps the double (no bf16 constant reaches the device through folding)
  }

  static int64_t wrap_to(DType t, int64_t v) {
    switch (t) {
      case DType::kInt8: return static_cast<int8_t>(v);
      case DType::kInt32: return static_cast<int32_t>(v);
      case DType::kBool: return v != 0;
      default: return v;
    }
  }

  std::optional<Folded> cast(const Node& n) const {
    const Value& x = in(0);
    const int64_t to = attr_int(g_, n, "to", 0);
    const std::optional<DType> t = onnx_dtype(to);
    if (!t) return std::nullopt;  // an element type the IR does not hold: strict inference reports it
    Folded f{*t, *x.shape, {}};
    const TensorData& d = *x.data;
    for (size_t k = 0; k < d.size(); ++k) {
      const bool batch = d.f.empty() && d.i[k] == kBatch;
      if (is_float(*t)) {
        if (batch) throw NotFoldable{};
        f.data.f.push_back(round_to(*t, d.as_double(k)));
      } else if (batch) {
        if (*t != DType::kInt64) throw NotFoldable{};
        f.data.i.push_back(kBatch);
      } else if (d.f.empty()) {
        f.data.i.push_back(wrap_to(*t, d.i[k]));
      } else {
        const double v = d.f[k];
        if (*t == DType::kBool) {
          f.data.i.push_back(v != 0);
          continue;
        }
        if (!std::isfinite(v) || std::fabs(v) >= 9.2e18) {
          fail(ErrorKind::kBadFile, fmt::format("element {} ({}) has no {} value", k, v, dtype_name(*t)));
        }
        f.data.i.push_back(wrap_to(*t, static_cast<int64_t>(std::trunc(v))));
      }
    }
    return f;
  }

  // Integer arithmetic on shape values, exact or NotFoldable (the batch symbol, overflow).
  int64_t int_op(Op op, int64_t a, int64_t b) const {
    const bool ba = a == kBatch, bb = b == kBatch;
    if (ba || bb) {
      switch (op) {
        case Op::kAdd: if (ba && b == 0) return a; if (bb && a == 0) return b; break;
        case Op::kSub: if (ba && b == 0) return a; break;
        case Op::kMul: if (ba && b == 1) return a; if (bb && a == 1) return b; break;
        case Op::kDiv: if (ba && b == 1) return a; break;
        case Op::kEqual:
          if (ba && bb) return 1;
          if ((ba && b <= 0) || (bb && a <= 0)) return 0;  // the batch is a positive size
          break;
        default: break;
      }
      throw NotFoldable{};
    }
    int64_t r = 0;
    switch (op) {
      case Op::kAdd: if (__builtin_add_overflow(a, b, &r)) throw NotFoldable{}; return r;
      case Op::kSub: if (__builtin_sub_overflow(a, b, &r)) throw NotFoldable{}; return r;
      case Op::kMul: if (__builtin_mul_overflow(a, b, &r)) throw NotFoldable{}; return r;
      case Op::kDiv:
        if (b == 0) fail(ErrorKind::kBadFile, "integer division by zero");
        if (a == std::numeric_limits<int64_t>::min() && b == -1) throw NotFoldable{};
        return a / b;  // truncation toward zero, as ONNX's reference (numpy divide, then astype)
      case Op::kEqual: return a == b;
      default: throw NotFoldable{};
    }
  }

  static double float_op(Op op, double a, double b) {
    switch (op) {
      case Op::kAdd: return a + b;
      case Op::kSub: return a - b;
      case Op::kMul: return a * b;
      case Op::kDiv: return a / b;
      default: return a == b;
    }
  }

  std::optional<Folded> binary(const Node& n) const {
    const Value& a = in(0);
    const Value& b = in(1);
    const std::optional<Dims> out = broadcast_dims({&*a.shape, &*b.shape});
    if (!out) {
      fail(ErrorKind::kBadFile, fmt::format("shapes {} and {} do not broadcast", dims_string(*a.shape), dims_string(*b.shape)));
    }
    const std::optional<int64_t> e = checked_elements(*out);
    const DType t = n.op == Op::kEqual ? DType::kBool : a.dtype;
    if (!e || *e > kMaxFoldedElements) return checked(Folded{t, *out, {}});
    const bool ints = a.data->f.empty() && b.data->f.empty() && is_int_type(a.dtype) && is_int_type(b.dtype);
    const std::vector<int64_t> sa = broadcast_strides(*a.shape, *out), sb = broadcast_strides(*b.shape, *out);
    Folded f{t, *out, {}};
    for (int64_t k = 0; k < *e; ++k) {
      const auto ia = static_cast<size_t>(source_index(k, *out, sa)), ib = static_cast<size_t>(source_index(k, *out, sb));
      if (ints) {
        const int64_t v = int_op(n.op, a.data->i[ia], b.data->i[ib]);
        f.data.i.push_back(n.op == Op::kEqual ? v : wrap_to(t, v));
      } else {
        if ((a.data->f.empty() && a.data->i[ia] == kBatch) || (b.data->f.empty() && b.data->i[ib] == kBatch)) throw NotFoldable{};
        const double v = float_op(n.op, a.data->as_double(ia), b.data->as_double(ib));
        if (n.op == Op::kEqual) f.data.i.push_back(v != 0); else f.data.f.push_back(round_to(t, v));
      }
    }
    return f;
  }

  std::optional<Folded> where(const Node&) const {
    const Value& c = in(0);
    const Value& x = in(1);
    const Value& y = in(2);
    const std::optional<Dims> out = broadcast_dims({&*c.shape, &*x.shape, &*y.shape});
    if (!out) fail(ErrorKind::kBadFile, "the condition and the two values do not broadcast");
    const std::optional<int64_t> e = checked_elements(*out);
    if (!e || *e > kMaxFoldedElements) return checked(Folded{x.dtype, *out, {}});
    const bool any_float = !x.data->f.empty() || !y.data->f.empty();
    const std::vector<int64_t> sc = broadcast_strides(*c.shape, *out), sx = broadcast_strides(*x.shape, *out),
                               sy = broadcast_strides(*y.shape, *out);
    Folded f{x.dtype, *out, {}};
    for (int64_t k = 0; k < *e; ++k) {
      const bool pick_x = c.data->as_double(static_cast<size_t>(source_index(k, *out, sc))) != 0;
      const Value& v = pick_x ? x : y;
      const auto at = static_cast<size_t>(source_index(k, *out, pick_x ? sx : sy));
      if (any_float) f.data.f.push_back(v.data->as_double(at)); else f.data.i.push_back(v.data->i[at]);
    }
    return f;
  }

  std::optional<Folded> range(const Node&) const {
    const Value& s = in(0);
    const Value& l = in(1);
    const Value& d = in(2);
    for (const Value* v : {&s, &l, &d}) {
      if (v->data->size() != 1) fail(ErrorKind::kBadFile, fmt::format("'{}' is not a scalar", v->name));
      if (v->data->f.empty() && v->data->i[0] == kBatch) throw NotFoldable{};
    }
    const double start = s.data->as_double(0), limit = l.data->as_double(0), delta = d.data->as_double(0);
    if (delta == 0 || !std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta)) {
      fail(ErrorKind::kBadFile, fmt::format("Range({}, {}, {}) has no finite length", start, limit, delta));
    }
    const double count = std::max(std::ceil((limit - start) / delta), 0.0);
    if (count > static_cast<double>(kMaxFoldedElements)) return checked(Folded{s.dtype, {kMaxFoldedElements + 1}, {}});
    const auto cnt = static_cast<int64_t>(count);
    Folded f{s.dtype, {cnt}, {}};
    for (int64_t k = 0; k < cnt; ++k) {
      if (is_float(s.dtype)) {
        f.data.f.push_back(round_to(s.dtype, start + static_cast<double>(k) * delta));
      } else {
        f.data.i.push_back(s.data->i[0] + k * d.data->i[0]);
      }
    }
    return f;
  }

  std::optional<Folded> constant_of_shape(const Node& n) const {
    const std::vector<int64_t> dims = ints_of(in(0), "shape");
    for (const int64_t v : dims) {
      if (v == kBatch) throw NotFoldable{};  // a batch-sized tensor is an activation, not a constant
      if (v < 0) fail(ErrorKind::kBadFile, fmt::format("shape {} has a negative dimension", dims_string(dims)));
    }
    const std::optional<int64_t> e = checked_elements(dims);
    Folded f{DType::kFloat32, dims, {}};
    double fv = 0;
    int64_t iv = 0;
    if (const Attribute* a = n.attr("value")) {
      if (a->kind != Attribute::Kind::kTensor || !a->t || a->t->data.size() != 1) {
        fail(ErrorKind::kBadFile, "attribute 'value' must be a one-element tensor");
      }
      f.dtype = a->t->dtype;
      fv = a->t->data.as_double(0);
      iv = a->t->data.f.empty() ? a->t->data.i[0] : 0;
    }
    if (!e || *e > kMaxFoldedElements) return checked(f);
    if (is_float(f.dtype)) f.data.f.assign(static_cast<size_t>(*e), fv); else f.data.i.assign(static_cast<size_t>(*e), iv);
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
