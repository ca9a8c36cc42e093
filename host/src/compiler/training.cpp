// The training pass and its float reference (tpuw/compiler/training.h; docs/training.md).
#include "tpuw/compiler/training.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "pass_util.h"
#include "tpuw/compiler/passes.h"
#include "tpuw/error.h"

namespace tpuw::compiler {

using detail::attr_float;
using detail::attr_int;
using detail::batch_led;
using detail::input;
using detail::output;

uint64_t TrainModel::step_macs(int64_t rows) const {
  uint64_t macs = 0;
  for (size_t l = 0; l < layers.size(); ++l) {
    const auto per = static_cast<uint64_t>(rows) * static_cast<uint64_t>(layers[l].in) *
                     static_cast<uint64_t>(layers[l].out);
    macs += per * (l == 0 ? 2 : 3);  // forward, dW, and dX except into the input
  }
  return macs;
}

namespace {

std::vector<float> constant_floats(const Graph& g, ValueId id) {
  const Value& v = g.value(id);
  std::vector<float> out;
  out.reserve(v.data->size());
  for (size_t i = 0; i < v.data->size(); ++i) out.push_back(static_cast<float>(v.data->as_double(i)));
  return out;
}

int64_t elements_of(const Graph& g, ValueId id) {
  const Value& v = g.value(id);
  return static_cast<int64_t>(v.data->size());
}

}  // namespace

TrainModel build_training_model(Graph g) {
  verify(g);
  legalize(g);
  for (;;) {
    infer_shapes(g, /*strict=*/false);
    if (!fold_constants(g)) break;
    verify(g);
  }
  remove_identities(g);
  remove_dead_code(g);
  verify(g);
  infer_shapes(g, /*strict=*/true);

  TrainModel m;
  m.source = g.source;
  if (g.inputs.size() != 1 || g.outputs.size() != 1) {
    g.fail(ErrorKind::kUnsupported, fmt::format("training needs one graph input and one output, the model has {} and {}",
                                                g.inputs.size(), g.outputs.size()));
  }
  ValueId cur = g.inputs[0].value;
  {
    const Value& in = g.value(cur);
    if (!in.shape || !batch_led(*in.shape)) {
      g.fail(ErrorKind::kUnsupported, fmt::format("input '{}' must be [batch, ...]", in.name));
    }
    m.input_features = checked_elements(*in.shape).value_or(0);
  }
  int64_t feat = m.input_features;
  enum class After { kNone, kMatmul, kBias } after = After::kNone;
  const auto consumers = g.consumers();
  for (;;) {
    const auto& readers = consumers[static_cast<size_t>(cur)];
    if (readers.empty()) break;
    if (readers.size() != 1) {
      g.fail(ErrorKind::kUnsupported,
             fmt::format("value '{}' is read by {} nodes: training supports a chain of layers, not branches",
                         g.value(cur).name, readers.size()));
    }
    const Node& n = g.nodes[readers[0]];
    const ValueId out = output(n, 0);
    switch (n.op) {
      case Op::kFlatten:
      case Op::kReshape: {
        const Value& o = g.value(out);
        if (!o.shape || o.shape->size() != 2 || (*o.shape)[0] != kBatch || (*o.shape)[1] != feat) {
          g.fail(ErrorKind::kUnsupported, n, fmt::format("training needs a [batch, {}] result", feat));
        }
        after = After::kNone;
        break;
      }
      case Op::kGemm:
      case Op::kMatMul: {
        const ValueId w = input(n, 1);
        if (input(n, 0) != cur || !g.is_constant(w)) {
          g.fail(ErrorKind::kUnsupported, n, "cannot be trained: the weight must be a constant initializer read as "
                                             "the second input");
        }
        TrainLayer L;
        L.node = n.label();
        L.weight = g.value(w).name;
        const Dims& wd = *g.value(w).shape;
        if (wd.size() != 2) g.fail(ErrorKind::kUnsupported, n, "cannot be trained: the weight is not 2-D");
        if (n.op == Op::kGemm) {
          if (attr_int(g, n, "transA", 0) != 0 || attr_float(g, n, "alpha", 1.0f) != 1.0f ||
              attr_float(g, n, "beta", 1.0f) != 1.0f) {
            g.fail(ErrorKind::kUnsupported, n, "cannot be trained: transA, alpha or beta other than 0, 1, 1");
          }
          L.weight_out_in = attr_int(g, n, "transB", 0) == 1;
        }
        L.in = L.weight_out_in ? wd[1] : wd[0];
        L.out = L.weight_out_in ? wd[0] : wd[1];
        if (L.in != feat) {
          g.fail(ErrorKind::kUnsupported, n, fmt::format("weight '{}' expects {} inputs, the activation has {}",
                                                         L.weight, L.in, feat));
        }
        if (n.op == Op::kGemm && input(n, 2) != kNoValue) {
          const ValueId c = input(n, 2);
          if (!g.is_constant(c) || elements_of(g, c) != L.out) {
            g.fail(ErrorKind::kUnsupported, n, "cannot be trained: the bias C must be a constant of [out] elements");
          }
          L.bias = g.value(c).name;
          m.params[L.bias] = constant_floats(g, c);
        }
        m.params[L.weight] = constant_floats(g, w);
        m.layers.push_back(L);
        feat = L.out;
        after = L.bias.empty() ? After::kMatmul : After::kBias;
        break;
      }
      case Op::kAdd: {
        const ValueId other = input(n, 0) == cur ? input(n, 1) : input(n, 0);
        if (after != After::kMatmul || !g.is_constant(other) || elements_of(g, other) != feat) {
          g.fail(ErrorKind::kUnsupported, n, "cannot be trained: only the constant bias right after a MatMul");
        }
        m.layers.back().bias = g.value(other).name;
        m.params[g.value(other).name] = constant_floats(g, other);
        after = After::kBias;
        break;
      }
      case Op::kRelu:
        if (after == After::kNone) g.fail(ErrorKind::kUnsupported, n, "cannot be trained: ReLU not after a layer");
        m.layers.back().relu = true;
        after = After::kNone;
        break;
      case Op::kSoftmax:
        if (!g.is_graph_output(out)) g.fail(ErrorKind::kUnsupported, n, "cannot be trained: Softmax before the end");
        return m.layers.empty() ? (g.fail(ErrorKind::kUnsupported, "the model has no trainable layer"), m) : m;
      default:
        g.fail(ErrorKind::kUnsupported, n, "cannot be trained (training supports Gemm, MatMul + Add, Relu, "
                                           "Flatten and Reshape)");
    }
    cur = out;
  }
  if (m.layers.empty()) g.fail(ErrorKind::kUnsupported, "the model has no trainable layer");
  if (!g.is_graph_output(cur)) g.fail(ErrorKind::kUnsupported, "the chain of layers does not end at the graph output");
  return m;
}

namespace {

template <typename T>
double softmax_ce_t(std::span<const T> logits, std::span<const int64_t> labels, int64_t rows, int64_t classes,
                    std::vector<T>* grad) {
  if (grad != nullptr) grad->assign(static_cast<size_t>(rows * classes), T(0));
  double loss = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t y = labels[static_cast<size_t>(r)];
    if (y < 0 || y >= classes) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("label {} of row {} is not in [0, {})", y, r, classes));
    }
    const T* z = logits.data() + r * classes;
    double mx = z[0];
    for (int64_t c = 1; c < classes; ++c) mx = std::max(mx, static_cast<double>(z[c]));
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(z[c]) - mx);
    loss += std::log(sum) - (static_cast<double>(z[y]) - mx);
    if (grad != nullptr) {
      for (int64_t c = 0; c < classes; ++c) {
        const double p = std::exp(static_cast<double>(z[c]) - mx) / sum;
        (*grad)[static_cast<size_t>(r * classes + c)] =
            static_cast<T>((p - (c == y ? 1.0 : 0.0)) / static_cast<double>(rows));
      }
    }
  }
  return loss / static_cast<double>(rows);
}

}  // namespace

double softmax_cross_entropy(std::span<const float> logits, std::span<const int64_t> labels, int64_t rows,
                             int64_t classes, std::vector<float>* grad) {
  return softmax_ce_t<float>(logits, labels, rows, classes, grad);
}

template <typename T>
FloatGrad<T> float_gradients(const TrainModel& m, const std::map<std::string, std::vector<T>>& params,
                             std::span<const T> x, std::span<const int64_t> labels, int64_t rows) {
  const size_t L = m.layers.size();
  std::vector<std::vector<T>> xs(L + 1), zs(L);
  xs[0].assign(x.begin(), x.end());
  for (size_t l = 0; l < L; ++l) {
    const TrainLayer& ly = m.layers[l];
    const std::vector<T>& w = params.at(ly.weight);
    const std::vector<T>* b = ly.bias.empty() ? nullptr : &params.at(ly.bias);
    std::vector<T>& z = zs[l];
    z.assign(static_cast<size_t>(rows * ly.out), T(0));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < ly.out; ++o) {
        T acc = 0;
        for (int64_t i = 0; i < ly.in; ++i) {
          const T wv = ly.weight_out_in ? w[static_cast<size_t>(o * ly.in + i)] : w[static_cast<size_t>(i * ly.out + o)];
          acc += xs[l][static_cast<size_t>(r * ly.in + i)] * wv;
        }
        if (b != nullptr) acc += (*b)[static_cast<size_t>(o)];
        z[static_cast<size_t>(r * ly.out + o)] = acc;
      }
    }
    xs[l + 1] = z;
    if (ly.relu) {
      for (T& v : xs[l + 1]) v = v > T(0) ? v : T(0);
    }
  }
  FloatGrad<T> out;
  out.logits = xs[L];
  std::vector<T> dz;
  out.loss = softmax_ce_t<T>(out.logits, labels, rows, m.classes(), &dz);
  for (size_t l = L; l-- > 0;) {
    const TrainLayer& ly = m.layers[l];
    if (ly.relu) {
      for (size_t i = 0; i < dz.size(); ++i) {
        if (!(zs[l][i] > T(0))) dz[i] = T(0);
      }
    }
    const std::vector<T>& xin = xs[l];
    std::vector<T> dw(static_cast<size_t>(ly.in * ly.out), T(0));
    for (int64_t o = 0; o < ly.out; ++o) {
      for (int64_t i = 0; i < ly.in; ++i) {
        T acc = 0;
        for (int64_t r = 0; r < rows; ++r) {
          acc += dz[static_cast<size_t>(r * ly.out + o)] * xin[static_cast<size_t>(r * ly.in + i)];
        }
        dw[static_cast<size_t>(ly.weight_out_in ? o * ly.in + i : i * ly.out + o)] = acc;
      }
    }
    out.grads[ly.weight] = std::move(dw);
    if (!ly.bias.empty()) {
      std::vector<T> db(static_cast<size_t>(ly.out), T(0));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t o = 0; o < ly.out; ++o) db[static_cast<size_t>(o)] += dz[static_cast<size_t>(r * ly.out + o)];
      }
      out.grads[ly.bias] = std::move(db);
    }
    if (l == 0) break;
    const std::vector<T>& w = params.at(ly.weight);
    std::vector<T> dx(static_cast<size_t>(rows * ly.in), T(0));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < ly.in; ++i) {
        T acc = 0;
        for (int64_t o = 0; o < ly.out; ++o) {
          const T wv = ly.weight_out_in ? w[static_cast<size_t>(o * ly.in + i)] : w[static_cast<size_t>(i * ly.out + o)];
          acc += dz[static_cast<size_t>(r * ly.out + o)] * wv;
        }
        dx[static_cast<size_t>(r * ly.in + i)] = acc;
      }
    }
    dz = std::move(dx);
  }
  return out;
}

template FloatGrad<float> float_gradients<float>(const TrainModel&, const std::map<std::string, std::vector<float>>&,
                                                 std::span<const float>, std::span<const int64_t>, int64_t);
template FloatGrad<double> float_gradients<double>(const TrainModel&,
                                                   const std::map<std::string, std::vector<double>>&,
                                                   std::span<const double>, std::span<const int64_t>, int64_t);

}  // namespace tpuw::compiler
