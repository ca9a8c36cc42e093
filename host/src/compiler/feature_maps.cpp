// Per-row affine operators as dense layers (tpuw/compiler/feature_maps.h).
#include "tpuw/compiler/feature_maps.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <vector>

#include "pass_util.h"

namespace tpuw::compiler {
namespace {

using detail::attr_float;
using detail::attr_int;
using detail::batch_led;
using detail::features;

// y[j] = x[src[j]] * s[j] + t[j] over the F features of a row (src empty: the identity).
struct FeatureMap {
  std::vector<int64_t> src;
  std::vector<double> s, t;
  bool relu = false;
};

Attribute int_attr(int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::kInt;
  a.i = v;
  return a;
}

// The values of constant `c` broadcast (numpy rules) to the feature shape `f` of an activation
// [batch, f...]: one value per feature. nullopt when c varies along the batch axis or does not
// broadcast.
std::optional<std::vector<double>> per_feature(const Graph& g, ValueId c, const Dims& f) {
  const Value& v = g.value(c);
  const Dims& d = *v.shape;
  const size_t r = f.size() + 1;
  if (d.size() > r) return std::nullopt;
  if (d.size() == r && d[0] != 1) return std::nullopt;
  // Right-align d to f.
  std::vector<int64_t> cd(f.size(), 1);
  for (size_t i = 0; i < d.size() && i < f.size(); ++i) cd[f.size() - 1 - i] = d[d.size() - 1 - i];
  for (size_t i = 0; i < f.size(); ++i) {
    if (cd[i] != 1 && cd[i] != f[i]) return std::nullopt;
  }
  const int64_t total = *checked_elements(f);
  std::vector<double> out(static_cast<size_t>(total));
  for (int64_t j = 0; j < total; ++j) {
    int64_t rem = j, idx = 0, stride = 1;
    for (size_t i = f.size(); i-- > 0;) {
      const int64_t coord = rem % f[i];
      rem /= f[i];
      if (cd[i] != 1) idx += coord * stride;
      stride *= cd[i];
    }
    out[static_cast<size_t>(j)] = v.data->as_double(static_cast<size_t>(idx));
  }
  return out;
}

class Lowering {
 public:
  explicit Lowering(Graph& g) : g_(g) {}

  size_t run() {
    size_t count = 0;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      Node& n = g_.nodes[i];
      std::optional<FeatureMap> m;
      ValueId x = kNoValue;
      switch (n.op) {
        case Op::kAdd:
        case Op::kSub:
        case Op::kMul:
        case Op::kDiv: m = elementwise(n, x); break;
        case Op::kBatchNormalization: m = batch_norm(n, x); break;
        case Op::kTranspose: m = transpose(n, x); break;
        case Op::kMatMul:
          if (g_.is_constant(n.inputs[1]) && shape(n.inputs[1]).size() >= 3) {
            batched_matmul(i);
            ++count;
          }
          break;
        case Op::kRelu:
          if (!g_.inputs.empty() && n.inputs[0] == g_.inputs[0].value) {
            x = n.inputs[0];
            m = FeatureMap{};
            m->relu = true;
          }
          break;
        default: break;
      }
      if (!m) continue;
      apply(i, x, *m);
      ++count;
    }
    remove_folded();
    return count;
  }

 private:
  Graph& g_;
  std::vector<size_t> folded_;  // nodes merged into the Dense before them

  const Dims& shape(ValueId v) const { return *g_.value(v).shape; }

  int64_t feature_count(const Node& n, ValueId x) const {
    const Dims& d = shape(x);
    if (!batch_led(d)) {
      g_.fail(ErrorKind::kUnsupported, n, fmt::format("input '{}' has shape {}; the batch dimension must be the first",
                                                      g_.value(x).name, dims_string(d)));
    }
    return *checked_elements(features(d));
  }

  std::optional<FeatureMap> elementwise(const Node& n, ValueId& x) {
    const bool c0 = g_.is_constant(n.inputs[0]), c1 = g_.is_constant(n.inputs[1]);
    if (c0 == c1) return std::nullopt;  // two activations (or constants): lowering reports it
    x = c0 ? n.inputs[1] : n.inputs[0];
    const ValueId c = c0 ? n.inputs[0] : n.inputs[1];
    // An Add right after a Dense is its bias (fuse_dense, or lowering reports a bad one).
    if (n.op == Op::kAdd && foldable_dense(x, static_cast<size_t>(&n - g_.nodes.data())) != nullptr) return std::nullopt;
    const int64_t f = feature_count(n, x);
    const Dims fs = features(shape(x));
    const auto cv = per_feature(g_, c, fs);
    if (!cv) {
      g_.fail(ErrorKind::kUnsupported, n,
              fmt::format("constant '{}' of shape {} does not broadcast over the batch to {} (it must not vary along "
                          "the batch axis)", g_.value(c).name, dims_string(shape(c)), dims_string(shape(x))));
    }
    FeatureMap m;
    m.s.assign(static_cast<size_t>(f), 1.0);
    m.t.assign(static_cast<size_t>(f), 0.0);
    for (size_t j = 0; j < m.s.size(); ++j) {
      const double v = (*cv)[j];
      switch (n.op) {
        case Op::kAdd: m.t[j] = v; break;
        case Op::kSub:
          if (c0) m.s[j] = -1.0;
          m.t[j] = c0 ? v : -v;
          break;
        case Op::kMul: m.s[j] = v; break;
        default:  // kDiv
          if (c0) g_.fail(ErrorKind::kUnsupported, n, "division of a constant by the activation is not supported");
          if (v == 0.0) g_.fail(ErrorKind::kUnsupported, n, fmt::format("divisor '{}' has a zero", g_.value(c).name));
          m.s[j] = 1.0 / v;
          break;
      }
    }
    return m;
  }

  std::optional<FeatureMap> batch_norm(const Node& n, ValueId& x) {
    if (attr_int(g_, n, "training_mode", 0) != 0) {
      g_.fail(ErrorKind::kUnsupported, n, "training_mode=1 (statistics over the batch) is not supported");
    }
    for (size_t k = 1; k < n.outputs.size(); ++k) {
      if (n.outputs[k] != kNoValue) {
        g_.fail(ErrorKind::kUnsupported, n, "the running mean/variance outputs (training mode) are not supported");
      }
    }
    x = n.inputs[0];
    const int64_t f = feature_count(n, x);
    const Dims& d = shape(x);
    if (d.size() < 2) g_.fail(ErrorKind::kUnsupported, n, "the input needs a channel dimension [batch, C, ...]");
    const int64_t ch = d[1];
    const int64_t inner = f / ch;
    const char* names[] = {"scale", "B", "mean", "var"};
    std::vector<const TensorData*> p;
    for (size_t k = 1; k <= 4; ++k) {
      const ValueId v = n.inputs[k];
      if (!g_.is_constant(v)) {
        g_.fail(ErrorKind::kUnsupported, n, fmt::format("input '{}' ({}) must be an initializer or Constant",
                                                        g_.value(v).name, names[k - 1]));
      }
      if (g_.value(v).data->size() != static_cast<size_t>(ch)) {
        g_.fail(ErrorKind::kBadFile, n, fmt::format("input '{}' ({}) has shape {}; it must be [{}]", g_.value(v).name,
                                                    names[k - 1], dims_string(shape(v)), ch));
      }
      p.push_back(&*g_.value(v).data);
    }
    const double eps = attr_float(g_, n, "epsilon", 1e-5f);
    FeatureMap m;
    m.s.resize(static_cast<size_t>(f));
    m.t.resize(static_cast<size_t>(f));
    for (int64_t c = 0; c < ch; ++c) {
      const auto uc = static_cast<size_t>(c);
      const double var = p[3]->as_double(uc) + eps;
      if (!(var > 0)) g_.fail(ErrorKind::kUnsupported, n, fmt::format("channel {}: var + epsilon is not positive", c));
      const double s = p[0]->as_double(uc) / std::sqrt(var);
      const double t = p[1]->as_double(uc) - p[2]->as_double(uc) * s;
      for (int64_t k = 0; k < inner; ++k) {
        m.s[static_cast<size_t>(c * inner + k)] = s;
        m.t[static_cast<size_t>(c * inner + k)] = t;
      }
    }
    return m;
  }

  std::optional<FeatureMap> transpose(const Node& n, ValueId& x) {
    x = n.inputs[0];
    const Dims& d = shape(x);
    const int64_t f = feature_count(n, x);
    std::vector<int64_t> perm;
    if (const Attribute* a = n.attr("perm")) {
      perm = a->ints;
    } else {
      for (size_t i = d.size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
    }
    if (perm.size() != d.size()) {
      g_.fail(ErrorKind::kBadFile, n, fmt::format("perm has {} entries for a rank-{} input", perm.size(), d.size()));
    }
    std::vector<uint8_t> seen(d.size(), 0);
    for (const int64_t p : perm) {
      if (p < 0 || p >= static_cast<int64_t>(d.size()) || seen[static_cast<size_t>(p)]) {
        g_.fail(ErrorKind::kBadFile, n, fmt::format("perm {} is not a permutation", dims_string(perm)));
      }
      seen[static_cast<size_t>(p)] = 1;
    }
    if (perm[0] != 0) {
      g_.fail(ErrorKind::kUnsupported, n,
              fmt::format("perm {} moves the batch axis; only permutations that keep axis 0 first are supported",
                          dims_string(perm)));
    }
    // Output dims and strides of the input over the feature axes.
    const size_t r = d.size();
    std::vector<int64_t> in_stride(r, 1);
    for (size_t i = r - 1; i >= 1 && i - 1 >= 1; --i) in_stride[i - 1] = in_stride[i] * d[i];
    FeatureMap m;
    m.src.resize(static_cast<size_t>(f));
    m.s.assign(static_cast<size_t>(f), 1.0);
    m.t.assign(static_cast<size_t>(f), 0.0);
    for (int64_t j = 0; j < f; ++j) {
      int64_t rem = j, src = 0;
      for (size_t i = r - 1; i >= 1; --i) {
        const auto ax = static_cast<size_t>(perm[i]);
        const int64_t coord = rem % d[ax];
        rem /= d[ax];
        src += coord * in_stride[ax];
      }
      m.src[static_cast<size_t>(j)] = src;
    }
    return m;
  }

  // MatMul(A [batch, g..., M, K], constant B [1|g..., K, P]): each row's features (g, m, k) map
  // linearly to (g, m, p) = sum_k A[g][m][k] * B[g'][k][p] (g' = g broadcast into B): one Dense node
  // whose weight is block-diagonal over (g, m), F_in x F_out, at most kMaxFeatureMapFeatures^2 values.
  void batched_matmul(size_t i) {
    Node& n = g_.nodes[i];
    const ValueId x = n.inputs[0], b = n.inputs[1], y = n.outputs[0];
    const Dims& da = shape(x);
    const Dims& db = shape(b);
    const size_t r = da.size(), s = db.size();
    if (!batch_led(da) || r < 3) {
      g_.fail(ErrorKind::kUnsupported, n, fmt::format("a batched MatMul needs an activation [batch, ..., M, K], not {}",
                                                      dims_string(da)));
    }
    const int64_t M = da[r - 2], K = da[r - 1], P = db[s - 1];
    int64_t G = 1;
    for (size_t a = 1; a + 2 < r; ++a) G *= da[a];
    const int64_t fin = G * M * K, fout = G * M * P;
    if (fin * fout > kMaxFeatureMapFeatures * kMaxFeatureMapFeatures) {
      g_.fail(ErrorKind::kUnsupported, n,
              fmt::format("runs as a dense layer with a block-diagonal {} x {} weight here, more than {}^2 values",
                          fin, fout, kMaxFeatureMapFeatures));
    }
    // B's strides over A's middle axes (0 where B broadcasts).
    std::vector<int64_t> bstride(r, 0);
    int64_t st = K * P;
    for (size_t a = r - 2; a-- > 1;) {
      if (a + s < r) continue;      // B has no axis here: it broadcasts
      const size_t bi = a + s - r;  // B's axis aligned with A's axis a
      if (db[bi] != 1) bstride[a] = st;
      st *= db[bi];
    }
    const TensorData& bd = *g_.value(b).data;
    TensorData wd, bias;
    wd.f.assign(static_cast<size_t>(fin * fout), 0.0);
    bias.f.assign(static_cast<size_t>(fout), 0.0);
    for (int64_t gi = 0; gi < G; ++gi) {
      int64_t rem = gi, boff = 0;
      for (size_t a = r - 2; a-- > 1;) {
        boff += (rem % da[a]) * bstride[a];
        rem /= da[a];
      }
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t k = 0; k < K; ++k) {
          const int64_t row = (gi * M + m) * K + k;
          for (int64_t p = 0; p < P; ++p) {
            wd.f[static_cast<size_t>(row * fout + (gi * M + m) * P + p)] =
                static_cast<float>(bd.as_double(static_cast<size_t>(boff + k * P + p)));
          }
        }
      }
    }
    Node d;
    d.op = Op::kDense;
    d.op_type = "Dense";
    d.name = n.name;
    d.origin = {n.label()};
    d.inputs = {x, g_.add_constant(n.name + ".w", DType::kFloat32, {fin, fout}, std::move(wd)),
                g_.add_constant(n.name + ".b", DType::kFloat32, {fout}, std::move(bias))};
    d.outputs = {y};
    d.set_attr("relu", int_attr(0));
    g_.nodes[i] = std::move(d);
  }

  // The Dense node defining `x` when the map can fold into it, or nullptr.
  Node* foldable_dense(ValueId x, size_t before) {
    if (g_.is_graph_output(x)) return nullptr;
    size_t readers = 0;
    Node* def = nullptr;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      Node& m = g_.nodes[i];
      for (const ValueId in : m.inputs) readers += in == x ? 1 : 0;
      if (i < before && !m.outputs.empty() && m.outputs[0] == x) def = &m;
    }
    if (def == nullptr || def->op != Op::kDense || readers != 1 || attr_int(g_, *def, "relu", 0) != 0) return nullptr;
    return def;
  }

  void apply(size_t i, ValueId x, const FeatureMap& m) {
    Node& n = g_.nodes[i];
    const auto f = static_cast<size_t>(*checked_elements(features(shape(x))));
    auto src = [&](size_t j) { return m.src.empty() ? j : static_cast<size_t>(m.src[j]); };
    auto sc = [&](size_t j) { return m.s.empty() ? 1.0 : m.s[j]; };
    auto tr = [&](size_t j) { return m.t.empty() ? 0.0 : m.t[j]; };
    const ValueId y = n.outputs[0];
    if (Node* d = foldable_dense(x, i)) {
      const TensorData& w = *g_.value(d->inputs[1]).data;
      const TensorData& b = *g_.value(d->inputs[2]).data;
      const auto k = static_cast<size_t>(shape(d->inputs[1])[0]);
      TensorData wd, bd;
      wd.f.resize(k * f);
      bd.f.resize(f);
      for (size_t kk = 0; kk < k; ++kk) {
        for (size_t j = 0; j < f; ++j) wd.f[kk * f + j] = static_cast<float>(w.f[kk * f + src(j)] * sc(j));
      }
      for (size_t j = 0; j < f; ++j) bd.f[j] = static_cast<float>(b.f[src(j)] * sc(j) + tr(j));
      d->inputs[1] = g_.add_constant(d->name + ".w." + n.name, DType::kFloat32, {static_cast<int64_t>(k), static_cast<int64_t>(f)}, std::move(wd));
      d->inputs[2] = g_.add_constant(d->name + ".b." + n.name, DType::kFloat32, {static_cast<int64_t>(f)}, std::move(bd));
      d->outputs[0] = y;
      d->origin.push_back(n.label());
      if (m.relu) d->set_attr("relu", int_attr(1));
      folded_.push_back(i);
      return;
    }
    if (static_cast<int64_t>(f) > kMaxFeatureMapFeatures) {
      g_.fail(ErrorKind::kUnsupported, n,
              fmt::format("runs as a dense layer over its {} features (F x F weights) here, more than {}; it is "
                          "supported right after a Gemm/MatMul (folded into it)", f, kMaxFeatureMapFeatures));
    }
    TensorData wd, bd;
    wd.f.assign(f * f, 0.0);
    bd.f.resize(f);
    for (size_t j = 0; j < f; ++j) {
      wd.f[src(j) * f + j] = static_cast<float>(sc(j));
      bd.f[j] = static_cast<float>(tr(j));
    }
    Node d;
    d.op = Op::kDense;
    d.op_type = "Dense";
    d.name = n.name;
    d.origin = {n.label()};
    const auto fi = static_cast<int64_t>(f);
    d.inputs = {x, g_.add_constant(n.name + ".w", DType::kFloat32, {fi, fi}, std::move(wd)),
                g_.add_constant(n.name + ".b", DType::kFloat32, {fi}, std::move(bd))};
    d.outputs = {y};
    d.set_attr("relu", int_attr(m.relu ? 1 : 0));
    g_.nodes[i] = std::move(d);
  }

  void remove_folded() {
    if (folded_.empty()) return;
    std::vector<Node> kept;
    size_t k = 0;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (k < folded_.size() && folded_[k] == i) {
        ++k;
        continue;
      }
      kept.push_back(std::move(g_.nodes[i]));
    }
    g_.nodes = std::move(kept);
  }
};

}  // namespace

size_t lower_feature_maps(Graph& g) { return Lowering(g).run(); }

}  // namespace tpuw::compiler
