// Shape inference (tpuw/compiler/passes.h): dtype and shape of every node output, the batch kept
// as the symbol kBatch. All dimension products go through checked_elements (overflow-safe).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>

#include "pass_util.h"
#include "tpuw/compiler/conv.h"
#include "tpuw/compiler/passes.h"

namespace tpuw::compiler {
namespace {

using detail::attr_int;
using detail::batch_led;
using detail::features;
using detail::input;
using detail::output;

void input_shape(Graph& g, const GraphInput& in) {
  Value& v = g.value(in.value);
  const std::string where = fmt::format("graph input '{}'", v.name);
  if (!in.has_shape || in.declared.size() < 2) {
    g.fail(ErrorKind::kUnsupported, where + ": needs a declared shape [batch, features...] of rank >= 2");
  }
  Dims d{kBatch};
  for (size_t i = 1; i < in.declared.size(); ++i) {
    const int64_t x = in.declared[i];
    if (x <= 0) {
      g.fail(ErrorKind::kUnsupported,
             fmt::format("{}: dimension {} is {}; the non-batch dimensions must be fixed positive sizes", where, i,
                         in.dim_params[i].empty() ? std::to_string(x) : "'" + in.dim_params[i] + "'"));
    }
    d.push_back(x);
    const auto n = checked_elements(d);
    if (!n || *n > std::numeric_limits<uint32_t>::max()) {
      g.fail(ErrorKind::kUnsupported, where + ": has more than 2^32 features per row");
    }
  }
  v.shape = std::move(d);
}

class Inference {
 public:
  Inference(Graph& g, bool strict) : g_(g), strict_(strict) {}

  void node(Node& n) {
    n_ = &n;
    if (n.op == Op::kConcat && concat_of_activations(n)) return;  // a CNN's channel Concat
    switch (n.op) {
      case Op::kIdentity:
      case Op::kRelu:
      case Op::kSigmoid:
      case Op::kTanh:
      case Op::kLeakyRelu:
      case Op::kClip:
      case Op::kHardSigmoid:
      case Op::kHardSwish:
      case Op::kGelu:
      case Op::kErf:
      case Op::kSoftmax:
      case Op::kLogSoftmax: return same_as_input(n);
      case Op::kLayerNormalization: return layer_norm(n);
      case Op::kSqueeze: return squeeze(n);
      case Op::kDropout: {
        same_as_input(n);
        const ValueId mask = output(n, 1);
        if (mask != kNoValue && known(n.inputs[0])) set(mask, DType::kBool, *shape(n.inputs[0]));
        return;
      }
      case Op::kGemm:
      case Op::kMatMul: return matrix(n);
      case Op::kAdd:
      case Op::kSub:
      case Op::kMul:
      case Op::kDiv: return add(n);
      case Op::kBatchNormalization: {
        if (!known(n.inputs[0])) return;
        set(n.outputs[0], g_.value(n.inputs[0]).dtype, *shape(n.inputs[0]));
        return;
      }
      case Op::kTranspose: {
        if (!known(n.inputs[0])) return;
        const Dims& d = *shape(n.inputs[0]);
        const Attribute* a = n.attr("perm");
        Dims out;
        if (a == nullptr) {
          out.assign(d.rbegin(), d.rend());
        } else {
          if (a->ints.size() != d.size()) {
            fail(ErrorKind::kBadFile, fmt::format("perm has {} entries for a rank-{} input", a->ints.size(), d.size()));
          }
          for (const int64_t p : a->ints) {
            if (p < 0 || p >= static_cast<int64_t>(d.size())) fail(ErrorKind::kBadFile, fmt::format("perm {} is out of range", p));
            out.push_back(d[static_cast<size_t>(p)]);
          }
        }
        if (strict_ && (out.empty() || out[0] != kBatch)) {
          fail(ErrorKind::kUnsupported, fmt::format("permutation moves the batch axis ({} to {}); only permutations that "
                                                    "keep axis 0 first are supported", dims_string(d), dims_string(out)));
        }
        set(n.outputs[0], g_.value(n.inputs[0]).dtype, std::move(out));
        return;
      }
      case Op::kFlatten: return flatten(n);
      case Op::kReshape: return reshape(n);
      case Op::kShape: return shape_op(n);
      case Op::kPad: {
        if (!known(n.inputs[0])) return;
        const std::optional<std::vector<int64_t>> p = pad_amounts(g_, n, shape(n.inputs[0])->size(), strict_);
        if (!p) return;
        Dims out = *shape(n.inputs[0]);
        for (size_t i = 1; i < out.size(); ++i) out[i] += (*p)[i] + (*p)[i + out.size()];
        const auto e = checked_elements(out);
        if (!e || *e > std::numeric_limits<uint32_t>::max()) {
          fail(ErrorKind::kUnsupported, "the padded tensor has more than 2^32 elements per row");
        }
        set(n.outputs[0], g_.value(n.inputs[0]).dtype, std::move(out));
        return;
      }
      case Op::kAveragePool:
      case Op::kGlobalAveragePool:
      case Op::kMaxPool:
      case Op::kConv: {
        const ValueId x = n.inputs[0], w = n.op == Op::kConv ? n.inputs[1] : x;
        if (!known(x) || !known(w)) return;
        if (n.op == Op::kConv && !strict_ && (!g_.is_constant(w) || (input(n, 2) != kNoValue && !g_.is_constant(n.inputs[2])))) {
          return;  // a weight or bias still to fold (an Identity of a shared initializer): the next round
        }
        const nn::ConvGeometry geo = conv_geometry(g_, n);
        Dims out{kBatch, geo.out_c, geo.out_h(), geo.out_w()};
        const auto e = checked_elements(out);
        if (!e || *e > std::numeric_limits<uint32_t>::max()) {
          fail(ErrorKind::kUnsupported, "the output has more than 2^32 elements per row");
        }
        // Sizes from the shapes, before anything is allocated for them (the int8 calibration would
        // otherwise interpret the whole layer first; issue 29: pads=1000).
        const uint64_t padded = uint64_t{geo.in_c} * (uint64_t{geo.in_h} + geo.pad_top + geo.pad_bottom) *
                                (uint64_t{geo.in_w} + geo.pad_left + geo.pad_right);
        for (const auto& [what, count] : {std::pair<const char*, uint64_t>{"padded input", padded},
                                          std::pair<const char*, uint64_t>{"output", static_cast<uint64_t>(*e)}}) {
          if (count > static_cast<uint64_t>(kMaxMapElementsPerImage)) {
            fail(ErrorKind::kUnsupported,
                 fmt::format("one image's {} map has {} values ({}x{}x{} input, pads {} {} {} {}), above the {} any "
                             "device configuration holds on chip (spatial tiling is not implemented)",
                             what, count, geo.in_c, geo.in_h, geo.in_w, geo.pad_top, geo.pad_left, geo.pad_bottom,
                             geo.pad_right, kMaxMapElementsPerImage));
          }
        }
        if (n.op == Op::kMaxPool && n.outputs.size() > 1 && n.outputs[1] != kNoValue) {
          set(n.outputs[1], DType::kInt64, out);  // Indices
        }
        set(n.outputs[0], g_.value(x).dtype, std::move(out));
        return;
      }
      case Op::kDense: {
        if (!known(n.inputs[0]) || !known(n.inputs[1])) return;
        set(n.outputs[0], g_.value(n.inputs[0]).dtype, {shape(n.inputs[0])->at(0), shape(n.inputs[1])->at(1)});
        return;
      }
      case Op::kUnsqueeze:
        if (known(n.inputs[0]) && !g_.is_constant(n.inputs[0])) return unsqueeze(n);
        [[fallthrough]];
      case Op::kGather:
      case Op::kConcat:
        // Constant folding evaluates these on shape tensors; left over, they operate on an activation.
        if (strict_) {
          fail(ErrorKind::kUnsupported, fmt::format("{} of an activation is not supported (only of constant shape "
                                                    "tensors, as in x.view(x.size(0), -1))", n.op_type));
        }
        return;
      case Op::kSlice: return slice(n);
      case Op::kReduceMean: return reduce_mean(n);
      case Op::kCast:
      case Op::kRange:
      case Op::kConstantOfShape:
      case Op::kEqual:
      case Op::kWhere:
        // Shape arithmetic: constant folding evaluates it on constants; left over, it reads an
        // activation (or the batch in a way that is not exact, e.g. batch * 2).
        if (strict_) {
          if (all_constant(n)) batch_arithmetic(n);
          fail(ErrorKind::kUnsupported, fmt::format("{} of an activation is not supported (only shape arithmetic on "
                                                    "constants, which is evaluated at compile time)", n.op_type));
        }
        return;
      case Op::kConstant:
      case Op::kUnknown: return;  // folded / reported by legalize
      case Op::kQuantize:
      case Op::kQDense:
      case Op::kDequantize: return;  // the quantize pass creates them with their types and shapes
    }
  }

 private:
  Graph& g_;
  bool strict_;
  Node* n_ = nullptr;

  [[noreturn]] void fail(ErrorKind k, const std::string& what) const { g_.fail(k, *n_, what); }
  bool known(ValueId v) const { return v != kNoValue && g_.value(v).shape.has_value(); }
  const Dims* shape(ValueId v) const { return known(v) ? &*g_.value(v).shape : nullptr; }
  const std::string& name(ValueId v) const { return g_.value(v).name; }
  void set(ValueId v, DType t, Dims d) {
    if (v == kNoValue) return;
    g_.value(v).dtype = t;
    g_.value(v).shape = std::move(d);
  }

  // A Concat of activations along a non-batch axis (a CNN's Concat along the channels): every
  // input batch-led, of one rank, equal outside the axis. False when it is something else (a
  // Concat of shape tensors, which constant folding evaluates; the switch reports what is left).
  bool concat_of_activations(Node& n) {
    for (const ValueId v : n.inputs) {
      if (!known(v) || g_.is_constant(v)) return false;
    }
    const Dims& d0 = *shape(n.inputs[0]);
    const auto rank = static_cast<int64_t>(d0.size());
    int64_t axis = attr_int(g_, n, "axis", 0);
    if (axis < 0) axis += rank;
    if (rank < 2 || !batch_led(d0) || axis < 1 || axis >= rank) return false;
    Dims out = d0;
    out[static_cast<size_t>(axis)] = 0;
    for (const ValueId v : n.inputs) {
      const Dims& d = *shape(v);
      if (static_cast<int64_t>(d.size()) != rank) return false;
      for (int64_t i = 1; i < rank; ++i) {
        if (i != axis && d[static_cast<size_t>(i)] != d0[static_cast<size_t>(i)]) {
          fail(ErrorKind::kUnsupported, fmt::format("inputs '{}' {} and '{}' {} differ outside the Concat axis {}",
                                                    name(n.inputs[0]), dims_string(d0), name(v), dims_string(d), axis));
        }
      }
      out[static_cast<size_t>(axis)] += d[static_cast<size_t>(axis)];
    }
    set(n.outputs[0], g_.value(n.inputs[0]).dtype, std::move(out));
    return true;
  }

  void same_as_input(Node& n) {
    if (!known(n.inputs[0])) return;
    set(n.outputs[0], g_.value(n.inputs[0]).dtype, *shape(n.inputs[0]));
  }

  void matrix(Node& n) {
    const ValueId a = n.inputs[0], b = n.inputs[1];
    if (!known(a) || !known(b)) return;
    const bool gemm = n.op == Op::kGemm;
    if (!g_.is_constant(b) && !strict_) return;  // may still fold (an Identity of an initializer)
    if (!g_.is_constant(b)) {
      if (!gemm && g_.is_constant(a)) {
        fail(ErrorKind::kUnsupported, "the activation must be the first operand (x . W); W . x is not supported");
      }
      fail(ErrorKind::kUnsupported, fmt::format("{} '{}' is computed from the input; it must be an initializer or "
                                                "Constant", gemm ? "weight B" : "weight", name(b)));
    }
    const Dims& da = *shape(a);
    const Dims& db = *shape(b);
    if (da.size() != 2 && (gemm || da.size() < 2)) {
      fail(ErrorKind::kUnsupported, fmt::format("the activation has feature shape {}; a dense layer needs [batch, k] "
                                                "(add a Flatten)", dims_string(features(da))));
    }
    if (!gemm && db.size() >= 3) {
      // A batched MatMul whose constant B broadcasts over the batch axis (leading dims 1 or A's):
      // lower_feature_maps makes it a dense layer with a block-diagonal weight.
      const size_t r = da.size(), s = db.size();
      bool ok = s <= r && db[s - 2] == da[r - 1] && (s < r || db[0] == 1);
      for (size_t i = s < r ? 0 : 1; ok && i + 2 < s; ++i) {
        const int64_t av = da[r - s + i];
        ok = db[i] == 1 || db[i] == av;
      }
      if (!ok) {
        fail(ErrorKind::kUnsupported, fmt::format("weight '{}' of shape {} does not broadcast over the batch against "
                                                  "the activation {} (batched MatMul: B's leading dimensions must be 1 "
                                                  "or the activation's, never along the batch axis)",
                                                  name(b), dims_string(db), dims_string(da)));
      }
      Dims out(da.begin(), da.end() - 1);
      out.push_back(db[s - 1]);
      set(n.outputs[0], g_.value(a).dtype, std::move(out));
      return;
    }
    if (db.size() != 2) {
      fail(ErrorKind::kUnsupported, fmt::format("weight '{}' has rank {}; it must be a matrix", name(b), db.size()));
    }
    const bool tb = gemm && attr_int(g_, n, "transB", 0) == 1;
    const int64_t k = tb ? db[1] : db[0];
    const int64_t nn = tb ? db[0] : db[1];
    if (k != da.back()) {
      fail(ErrorKind::kBadFile, fmt::format("weight '{}' has shape {} but the activation has {} features", name(b),
                                            dims_string(db), da.back() == kBatch ? "batch" : std::to_string(da.back())));
    }
    Dims out(da.begin(), da.end() - 1);
    out.push_back(nn);
    set(n.outputs[0], g_.value(a).dtype, std::move(out));
  }

  static std::optional<Dims> broadcast(const Dims& a, const Dims& b) {
    const size_t r = std::max(a.size(), b.size());
    Dims out(r);
    for (size_t i = 0; i < r; ++i) {
      const int64_t x = i < r - a.size() ? 1 : a[i - (r - a.size())];
      const int64_t y = i < r - b.size() ? 1 : b[i - (r - b.size())];
      if (x == y || y == 1) out[i] = x;
      else if (x == 1) out[i] = y;
      else return std::nullopt;
    }
    return out;
  }

  bool all_constant(const Node& n) const {
    return std::all_of(n.inputs.begin(), n.inputs.end(), [&](ValueId v) { return v == kNoValue || g_.is_constant(v); });
  }

  // A node whose inputs are all constants that folding left alone: arithmetic on the symbolic
  // batch (batch * 2, Range(0, batch)) or an overflow, which has no value at compile time.
  [[noreturn]] void batch_arithmetic(const Node& n) const {
    std::vector<std::string> vals;
    for (const ValueId v : n.inputs) {
      if (v == kNoValue) continue;
      const TensorData& d = *g_.value(v).data;
      std::string s;
      for (size_t k = 0; k < d.size() && k < 8; ++k) {
        s += k ? ", " : "";
        s += d.f.empty() && d.i[k] == kBatch ? std::string("batch") : fmt::format("{}", d.as_double(k));
      }
      vals.push_back("[" + s + (d.size() > 8 ? ", ...]" : "]"));
    }
    fail(ErrorKind::kUnsupported, fmt::format("{} of {} has no value at compile time (the batch size is a symbol: only "
                                              "batch * 1, batch / 1, batch + 0 and copies of it are exact)",
                                              n.op_type, fmt::join(vals, " and ")));
  }

  void add(Node& n) {
    const ValueId a = n.inputs[0], b = n.inputs[1];
    if (!known(a) || !known(b)) return;
    const bool ca = g_.is_constant(a), cb = g_.is_constant(b);
    if (ca && cb && strict_) batch_arithmetic(n);  // folding would have evaluated it otherwise
    const ValueId act = ca && !cb ? b : a;
    if (auto d = broadcast(*shape(a), *shape(b))) {
      set(n.outputs[0], g_.value(act).dtype, std::move(*d));
    } else if (ca != cb) {
      // A bias that does not broadcast: lowering reports it against the layer it should belong to.
      set(n.outputs[0], g_.value(act).dtype, *shape(act));
    } else {
      fail(ErrorKind::kBadFile, fmt::format("shapes {} and {} do not broadcast", dims_string(*shape(a)),
                                            dims_string(*shape(b))));
    }
  }

  // The data input of a shape operator must be an activation [batch, ...].
  void require_activation(const Node& n) {
    const ValueId x = n.inputs[0];
    if (g_.is_constant(x)) {
      fail(ErrorKind::kUnsupported, fmt::format("input 0 '{}' must be the activation computed from the graph input, "
                                                "not a constant", name(x)));
    }
    if (!batch_led(*shape(x))) {
      fail(ErrorKind::kUnsupported, fmt::format("input '{}' has shape {}; the batch dimension must be the first",
                                                name(x), dims_string(*shape(x))));
    }
  }

  void flatten(Node& n) {
    if (!known(n.inputs[0])) return;
    require_activation(n);
    const Dims& d = *shape(n.inputs[0]);
    const int64_t raw = attr_int(g_, n, "axis", 1);
    const int64_t axis = raw < 0 ? raw + static_cast<int64_t>(d.size()) : raw;
    if (axis != 1) {
      fail(ErrorKind::kUnsupported,
           fmt::format("axis={} is not supported (only axis=1, which keeps the batch dimension)", raw));
    }
    const auto f = checked_elements(features(d));
    if (!f) fail(ErrorKind::kUnsupported, "the flattened tensor has too many elements per row");
    set(n.outputs[0], g_.value(n.inputs[0]).dtype, {kBatch, *f});
  }

  void reshape(Node& n) {
    const ValueId x = n.inputs[0], s = n.inputs[1];
    if (!known(x)) return;
    if (!g_.is_constant(s)) {
      if (!strict_) return;  // maybe folded later
      fail(ErrorKind::kUnsupported, "a shape computed from the activation is not supported (use a constant shape)");
    }
    const Value& sv = g_.value(s);
    if (sv.shape->size() != 1) fail(ErrorKind::kBadFile, fmt::format("shape '{}' is not a 1-D tensor", sv.name));
    require_activation(n);
    Dims shape_in;
    for (size_t i = 0; i < sv.data->size(); ++i) shape_in.push_back(detail::as_int(*sv.data, i));
    const Dims feat = features(*shape(x));
    const int64_t total = *checked_elements(feat);  // bounded: every activation shape was checked
    const bool allowzero = attr_int(g_, n, "allowzero", 0) != 0;
    const std::string shape_str = dims_string(shape_in);
    if (shape_in.size() < 2) {
      fail(ErrorKind::kUnsupported,
           fmt::format("reshape to {} merges the batch dimension; the result must be [batch, features...]", shape_str));
    }
    const int64_t b = shape_in[0];
    // A positive dimension 0 keeps the batch only when the input has exactly that many rows: where
    // the consumer records and checks that (Graph::batch_may_be_fixed), the rest is resolved as if
    // it does (a -1 against the row's features); another number of rows is never reinterpreted.
    if ((b > 0 && !g_.batch_may_be_fixed) || (b == 0 && allowzero)) {
      fail(ErrorKind::kUnsupported,
           fmt::format("reshape to {}{} fixes the batch dimension to {}; only reshapes that keep it are supported "
                       "(export with x.view(x.size(0), -1) or torch.flatten(x, 1))",
                       shape_str, allowzero ? " with allowzero=1" : "", b));
    }
    if (b < -1 && b != kBatch) fail(ErrorKind::kBadFile, fmt::format("shape {}: dimension 0 is {}", shape_str, b));
    Dims out;
    int infer = -1;
    int64_t known_p = 1;
    for (size_t i = 1; i < shape_in.size(); ++i) {
      int64_t v = shape_in[i];
      if (v == kBatch) {
        fail(ErrorKind::kUnsupported, fmt::format("reshape to {} moves the batch dimension to position {}; only "
                                                  "reshapes that keep it first are supported", shape_str, i));
      }
      if (v == 0 && !allowzero) {
        if (i > feat.size()) {
          fail(ErrorKind::kBadFile, fmt::format("shape {}: 0 at position {} copies a dimension that does not exist",
                                                shape_str, i));
        }
        v = feat[i - 1];
      }
      if (v == -1) {
        if (infer >= 0 || b == -1) fail(ErrorKind::kUnsupported, fmt::format("reshape to {}: the batch dimension is ambiguous", shape_str));
        infer = static_cast<int>(out.size());
      } else if (v <= 0 || v > total) {
        fail(ErrorKind::kUnsupported,
             fmt::format("reshape of [batch, {} features] to {}: dimension {} is {}", total, shape_str, i, v));
      } else {
        if (known_p > total / v) {
          fail(ErrorKind::kUnsupported,
               fmt::format("reshape of [batch, {} features] to {} changes the batch dimension", total, shape_str));
        }
        known_p *= v;
      }
      out.push_back(v);
    }
    if (infer >= 0) {
      if (total % known_p != 0) fail(ErrorKind::kBadFile, fmt::format("reshape to {} does not divide {} features", shape_str, total));
      out[static_cast<size_t>(infer)] = total / known_p;
      known_p = total;
    }
    if (known_p != total) {
      fail(ErrorKind::kUnsupported, fmt::format("reshape of [batch, {} features] to {} changes the batch dimension; "
                                                "only reshapes that keep it are supported", total, shape_str));
    }
    out.insert(out.begin(), kBatch);
    set(n.outputs[0], g_.value(x).dtype, std::move(out));
  }

  // Y as X; Mean and InvStdDev (optional outputs) keep the axes before `axis` and are 1 from it on.
  void layer_norm(Node& n) {
    if (!known(n.inputs[0])) return;
    const Dims& d = *shape(n.inputs[0]);
    set(n.outputs[0], g_.value(n.inputs[0]).dtype, d);
    const auto r = static_cast<int64_t>(d.size());
    const int64_t raw = attr_int(g_, n, "axis", -1);
    const int64_t axis = raw < 0 ? raw + r : raw;
    if (axis < 0 || axis >= r) {
      fail(ErrorKind::kBadFile, fmt::format("axis {} is out of range for the rank-{} input {}", raw, r, dims_string(d)));
    }
    Dims stat = d;
    for (size_t i = static_cast<size_t>(axis); i < stat.size(); ++i) stat[i] = 1;
    for (size_t k = 1; k < n.outputs.size(); ++k) set(n.outputs[k], DType::kFloat32, stat);
  }

  // The axes of a Squeeze/Unsqueeze: the attribute (opset < 13) or the constant input 1 (13 on).
  // nullopt while input 1 is not folded yet (lenient mode).
  std::optional<std::vector<int64_t>> axes_of(const Node& n) {
    if (const Attribute* a = n.attr("axes")) return a->ints;
    const ValueId v = detail::input(n, 1);
    if (v == kNoValue) return std::vector<int64_t>{};
    if (!g_.is_constant(v)) {
      if (!strict_) return std::nullopt;
      fail(ErrorKind::kUnsupported, fmt::format("axes '{}' are computed from the input; they must be an initializer or "
                                                "Constant", name(v)));
    }
    const Value& av = g_.value(v);
    if (av.shape->size() > 1) fail(ErrorKind::kBadFile, fmt::format("axes '{}' is not a 1-D tensor", av.name));
    std::vector<int64_t> axes;
    for (size_t i = 0; i < av.data->size(); ++i) axes.push_back(detail::as_int(*av.data, i));
    return axes;
  }

  // Normalizes `axes` against `rank` (negative counts from the end); refuses a repeated or
  // out-of-range axis (kBadFile) and axis 0, the batch (kUnsupported).
  std::vector<int64_t> normalized_axes(const std::vector<int64_t>& axes, int64_t rank, const std::string& what) {
    std::vector<int64_t> out;
    for (const int64_t a : axes) {
      const int64_t x = a < 0 ? a + rank : a;
      if (x < 0 || x >= rank) fail(ErrorKind::kBadFile, fmt::format("axis {} is out of range for {}", a, what));
      if (std::find(out.begin(), out.end(), x) != out.end()) fail(ErrorKind::kBadFile, fmt::format("axis {} is repeated", a));
      if (x == 0) {
        fail(ErrorKind::kUnsupported, fmt::format("axis {} is the batch axis ({}); only the feature axes (>= 1) may be "
                                                  "squeezed or inserted", a, what));
      }
      out.push_back(x);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  void squeeze(Node& n) {
    if (!known(n.inputs[0])) return;
    const std::optional<std::vector<int64_t>> axes = axes_of(n);
    if (!axes) return;
    require_activation(n);
    const Dims& d = *shape(n.inputs[0]);
    if (axes->empty()) {
      fail(ErrorKind::kUnsupported, fmt::format("Squeeze without axes removes every dimension of size 1 of {}, the batch "
                                                "too when it is 1; give the axes (torch: x.squeeze(dim))", dims_string(d)));
    }
    const std::vector<int64_t> ax = normalized_axes(*axes, static_cast<int64_t>(d.size()), "the input " + dims_string(d));
    Dims out;
    for (size_t i = 0; i < d.size(); ++i) {
      if (std::find(ax.begin(), ax.end(), static_cast<int64_t>(i)) == ax.end()) {
        out.push_back(d[i]);
      } else if (d[i] != 1) {
        fail(ErrorKind::kBadFile, fmt::format("axis {} of the input {} has size {}, not 1", i, dims_string(d), d[i]));
      }
    }
    set(n.outputs[0], g_.value(n.inputs[0]).dtype, std::move(out));
  }

  void unsqueeze(Node& n) {
    const std::optional<std::vector<int64_t>> axes = axes_of(n);
    if (!axes) return;
    require_activation(n);
    const Dims& d = *shape(n.inputs[0]);
    if (axes->empty()) fail(ErrorKind::kBadFile, "has no axes");
    const auto rank = static_cast<int64_t>(d.size() + axes->size());
    const std::vector<int64_t> ax = normalized_axes(*axes, rank, fmt::format("the rank-{} output", rank));
    Dims out;
    size_t k = 0;
    for (int64_t i = 0; i < rank; ++i) {
      if (std::find(ax.begin(), ax.end(), i) != ax.end()) {
        out.push_back(1);
      } else {
        out.push_back(d[k++]);
      }
    }
    set(n.outputs[0], g_.value(n.inputs[0]).dtype, std::move(out));
  }

  // Slice of an activation with constant starts/ends/axes/steps (a channel split, x.chunk(2, 1));
  // the batch axis is never sliced. A Slice of constants is folded before this.
  void slice(Node& n) {
    const ValueId x = n.inputs[0];
    if (!known(x) || g_.is_constant(x)) return;
    for (size_t k = 1; k < n.inputs.size(); ++k) {
      if (n.inputs[k] != kNoValue && !g_.is_constant(n.inputs[k])) {
        if (!strict_) return;
        fail(ErrorKind::kUnsupported, fmt::format("input {} '{}' is computed from the activation; a Slice needs constant "
                                                  "starts, ends, axes and steps", k, name(n.inputs[k])));
      }
    }
    require_activation(n);
    const Dims& d = *shape(x);
    const auto r = static_cast<int64_t>(d.size());
    auto ints = [&](size_t k) {
      std::vector<int64_t> v;
      const ValueId id = input(n, k);
      if (id == kNoValue) return v;
      const Value& c = g_.value(id);
      if (c.shape->size() > 1 || is_float(c.dtype)) fail(ErrorKind::kBadFile, fmt::format("'{}' is not a 1-D integer tensor", c.name));
      for (size_t i = 0; i < c.data->size(); ++i) v.push_back(c.data->i[i]);
      return v;
    };
    std::vector<int64_t> starts, ends, axes, steps;
    if (n.attr("starts") != nullptr) {
      starts = n.attr("starts")->ints;
      if (n.attr("ends") != nullptr) ends = n.attr("ends")->ints;
      if (n.attr("axes") != nullptr) axes = n.attr("axes")->ints;
    } else {
      starts = ints(1), ends = ints(2), axes = ints(3), steps = ints(4);
    }
    if (axes.empty()) {
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    }
    if (steps.empty()) steps.assign(starts.size(), 1);
    if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
      fail(ErrorKind::kBadFile, "starts, ends, axes and steps differ in length");
    }
    Dims out = d;
    for (size_t k = 0; k < starts.size(); ++k) {
      const int64_t a = axes[k] < 0 ? axes[k] + r : axes[k];
      if (a < 0 || a >= r) fail(ErrorKind::kBadFile, fmt::format("axis {} is out of range for {}", axes[k], dims_string(d)));
      const int64_t len = d[static_cast<size_t>(a)], st = steps[k];
      if (st == 0) fail(ErrorKind::kBadFile, "a step is 0");
      if (a == 0) {
        fail(ErrorKind::kUnsupported, fmt::format("slices the batch axis of {}; only the feature axes may be sliced",
                                                  dims_string(d)));
      }
      int64_t s0 = starts[k] < 0 ? starts[k] + len : starts[k], e0 = ends[k] < 0 ? ends[k] + len : ends[k];
      int64_t cnt = 0;
      if (st > 0) {
        s0 = std::clamp<int64_t>(s0, 0, len), e0 = std::clamp<int64_t>(e0, 0, len);
        cnt = e0 > s0 ? (e0 - s0 + st - 1) / st : 0;
      } else {
        s0 = std::clamp<int64_t>(s0, 0, len - 1), e0 = std::clamp<int64_t>(e0, -1, len - 1);
        cnt = s0 > e0 ? (s0 - e0 - st - 1) / -st : 0;
      }
      if (cnt == 0) fail(ErrorKind::kUnsupported, fmt::format("the slice of axis {} of {} is empty", a, dims_string(d)));
      out[static_cast<size_t>(a)] = cnt;
    }
    set(n.outputs[0], g_.value(x).dtype, std::move(out));
  }

  // ReduceMean of an activation over feature axes (attribute axes, opset < 18; keepdims).
  void reduce_mean(Node& n) {
    const ValueId x = n.inputs[0];
    if (!known(x)) return;
    if (g_.is_constant(x)) {
      if (strict_) fail(ErrorKind::kUnsupported, "ReduceMean of a constant is not supported");
      return;
    }
    require_activation(n);
    const Dims& d = *shape(x);
    const auto r = static_cast<int64_t>(d.size());
    std::vector<int64_t> axes;
    if (const Attribute* a = n.attr("axes")) {
      axes = a->ints;
    } else if (input(n, 1) != kNoValue) {
      fail(ErrorKind::kUnsupported, "axes as an input (opset 18) are not supported");
    } else {
      for (int64_t i = 0; i < r; ++i) axes.push_back(i);
    }
    const std::vector<int64_t> ax = normalized_axes(axes, r, "the input " + dims_string(d));
    const bool keep = attr_int(g_, n, "keepdims", 1) != 0;
    Dims out;
    for (int64_t i = 0; i < r; ++i) {
      const bool reduced = std::find(ax.begin(), ax.end(), i) != ax.end();
      if (!reduced) out.push_back(d[static_cast<size_t>(i)]);
      else if (keep) out.push_back(1);
    }
    set(n.outputs[0], g_.value(x).dtype, std::move(out));
  }

  void shape_op(Node& n) {
    if (!known(n.inputs[0])) return;
    const auto r = static_cast<int64_t>(shape(n.inputs[0])->size());
    auto clampi = [&](int64_t v) { return std::clamp(v < 0 ? v + r : v, int64_t{0}, r); };
    const int64_t start = clampi(attr_int(g_, n, "start", 0));
    const int64_t end = clampi(attr_int(g_, n, "end", r));
    set(n.outputs[0], DType::kInt64, {std::max<int64_t>(end - start, 0)});
  }
};

}  // namespace

void infer_shapes(Graph& g, bool strict) {
  for (const GraphInput& in : g.inputs) input_shape(g, in);
  Inference inf(g, strict);
  for (Node& n : g.nodes) inf.node(n);
  if (!strict) return;
  for (const Node& n : g.nodes) {
    for (const ValueId v : n.outputs) {
      if (v != kNoValue && !g.value(v).shape) {
        throw Error(ErrorKind::kInternal, fmt::format("{}: node '{}' ({}): shape inference left '{}' unknown\n{}", g.source,
                                                      n.name, n.op_type, g.value(v).name, dump(g)));
      }
    }
  }
}

}  // namespace tpuw::compiler
