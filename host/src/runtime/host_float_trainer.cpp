// HostFloatTrainer (tpuw/runtime/host_float_trainer.h): fp32 training on the CPU.
#include "tpuw/runtime/host_float_trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tpuw/compiler/onnx_importer.h"
#include "tpuw/compiler/passes.h"
#include "tpuw/error.h"

namespace tpuw::runtime {
namespace {

using compiler::Graph;
using compiler::Node;
using compiler::Op;
using compiler::ValueId;

int64_t attr_int(const Node& n, std::string_view key, int64_t def) {
  const compiler::Attribute* a = n.attr(key);
  return a == nullptr ? def : a->i;
}

float attr_float(const Node& n, std::string_view key, float def) {
  const compiler::Attribute* a = n.attr(key);
  return a == nullptr ? def : a->f;
}

// What a Gemm/MatMul or an Add read before fusion, by node label.
struct PreFusion {
  std::string weight;
  bool transposed = false;
  float alpha = 1.0f;
  std::string c;      // Gemm's C ("" when none)
  float beta = 1.0f;
  Node node;  // a copy: fusion rebuilds the node list
};

std::vector<float> to_floats(const compiler::Value& v) {
  std::vector<float> out(v.data->size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(v.data->as_double(i));
  return out;
}

}  // namespace

void check_sgd_config(const SgdConfig& sgd) {
  if (!std::isfinite(sgd.lr) || sgd.lr <= 0.0f) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--lr {}: the learning rate must be finite and positive", sgd.lr));
  }
  if (!std::isfinite(sgd.momentum) || sgd.momentum < 0.0f) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--momentum {}: must be finite and >= 0", sgd.momentum));
  }
  if (!std::isfinite(sgd.weight_decay) || sgd.weight_decay < 0.0f) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--weight-decay {}: must be finite and >= 0", sgd.weight_decay));
  }
}

TrainableModel describe_trainable(const std::filesystem::path& model) {
  return describe_trainable(compiler::import_onnx_file(model));
}

TrainableModel describe_trainable(Graph g) {
  // The initializers are the constants of the graph as imported (folded values come later; the
  // passes free the data of constants they no longer read, so it is kept here).
  std::map<std::string, compiler::Value> initializers;
  for (const compiler::Value& v : g.values) {
    if (v.is_constant()) initializers.emplace(v.name, v);
  }
  // The pipeline of compiler::optimize() up to fusion (docs/compiler.md).
  compiler::verify(g);
  compiler::legalize(g);
  for (;;) {
    compiler::infer_shapes(g, false);
    if (!compiler::fold_constants(g)) break;
    compiler::verify(g);
  }
  compiler::remove_identities(g);
  compiler::verify(g);
  compiler::remove_dead_code(g);
  compiler::verify(g);
  compiler::infer_shapes(g, true);

  const std::string trainable_ops = "trainable: Gemm, MatMul, Add of a bias, Relu, Flatten, Reshape, a final Softmax";
  std::map<std::string, PreFusion> pre;  // by node label
  std::map<std::string, std::string> add_bias;  // Add label -> its constant input's name
  for (const Node& n : g.nodes) {
    if (n.op == Op::kGemm || n.op == Op::kMatMul) {
      PreFusion p;
      p.node = n;
      p.weight = g.value(n.inputs[1]).name;
      if (n.op == Op::kGemm) {
        p.transposed = attr_int(n, "transB", 0) == 1;
        p.alpha = attr_float(n, "alpha", 1.0f);
        p.beta = attr_float(n, "beta", 1.0f);
        if (n.inputs.size() > 2 && n.inputs[2] != compiler::kNoValue) p.c = g.value(n.inputs[2]).name;
      }
      if (!pre.emplace(n.label(), p).second) {
        g.fail(ErrorKind::kUnsupported, n, "two nodes have this name; training needs unique node names");
      }
    } else if (n.op == Op::kAdd) {
      for (const ValueId in : n.inputs) {
        if (g.is_constant(in)) add_bias[n.label()] = g.value(in).name;
      }
    }
  }
  compiler::fuse_dense(g);
  compiler::verify(g);
  compiler::remove_dead_code(g);
  compiler::verify(g);
  const nn::FloatNetwork net = compiler::lower_to_float_network(g);  // the chain checks
  if (!net.input_steps.empty()) {
    g.fail(ErrorKind::kUnsupported, fmt::format("node '{}' runs on the graph input on the host; training supports host "
                                                "operators only at the end (the loss)", net.input_steps[0].name));
  }
  if (!net.outputs.empty()) {
    g.fail(ErrorKind::kUnsupported, fmt::format("the graph has {} outputs ({} first); training needs one", net.outputs.size(),
                                                net.outputs[0].name));
  }

  TrainableModel m;
  m.source = g.source;
  m.input_name = net.input_name;
  m.input_shape = net.input_shape;
  m.input_features = net.input_features;
  std::map<std::string, std::string> owner;  // initializer -> the layer that trains it
  auto claim = [&](const Node& n, const std::string& name, std::string_view what) {
    if (!initializers.contains(name)) {
      g.fail(ErrorKind::kUnsupported, n, fmt::format("{} '{}' is computed, not an initializer: it cannot be trained",
                                                     what, name));
    }
    const auto [it, fresh] = owner.emplace(name, n.label());
    if (!fresh) {
      g.fail(ErrorKind::kUnsupported, n, fmt::format("{} '{}' is shared with {}: shared parameters cannot be trained",
                                                     what, name, it->second));
    }
  };
  auto param = [&](const std::string& name) { return &initializers.at(name); };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.op == Op::kReshape || n.op == Op::kFlatten) continue;
    if (n.op == Op::kSoftmax) {
      if (i + 1 != g.nodes.size()) {
        g.fail(ErrorKind::kUnsupported, n, fmt::format("operator cannot be trained here: only a final Softmax ({})",
                                                       trainable_ops));
      }
      continue;
    }
    if (n.op != Op::kDense) {
      g.fail(ErrorKind::kUnsupported, n, fmt::format("operator cannot be trained ({})", trainable_ops));
    }
    if (n.origin.empty() || !pre.contains(n.origin[0])) {
      g.fail(ErrorKind::kInternal, n, "dense layer without its matrix node");
    }
    const PreFusion& p = pre.at(n.origin[0]);
    TrainableDense d;
    d.label = n.name;
    for (size_t o = 0; o < n.origin.size(); ++o) d.label = o == 0 ? n.origin[0] : d.label + " + " + n.origin[o];
    const compiler::Dims& wd = *g.value(n.inputs[1]).shape;
    d.k = wd[0];
    d.n = wd[1];
    d.weight = p.weight;
    d.transposed = p.transposed;
    d.alpha = p.alpha;
    d.relu = attr_int(n, "relu", 0) != 0;
    claim(p.node, p.weight, "weight");
    if (!p.c.empty()) {
      claim(p.node, p.c, "bias C");
      d.biases.push_back({p.c, p.beta, param(p.c)->data->size() == 1 && d.n != 1});
    }
    for (size_t o = 1; o < n.origin.size(); ++o) {
      const auto it = add_bias.find(n.origin[o]);
      if (it == add_bias.end()) continue;  // the Relu
      claim(p.node, it->second, "bias");
      d.biases.push_back({it->second, 1.0f, param(it->second)->data->size() == 1 && d.n != 1});
    }
    m.layers.push_back(std::move(d));
  }
  if (m.layers.empty()) {
    throw Error(ErrorKind::kUnsupported, fmt::format("{}: the model has no dense layer to train", g.source));
  }
  if (m.layers.size() != net.layers.size()) {
    throw Error(ErrorKind::kInternal, fmt::format("{}: {} dense nodes but {} lowered layers", g.source,
                                                  m.layers.size(), net.layers.size()));
  }
  for (const auto& [name, layer] : owner) {
    const compiler::Value* v = param(name);
    if (v->dtype != compiler::DType::kFloat32) {
      throw Error(ErrorKind::kUnsupported, fmt::format("{}: initializer '{}' is {}; only float32 parameters can be "
                                                       "trained", g.source, name, compiler::dtype_name(v->dtype)));
    }
    m.param_dims[name] = *v->shape;
    m.initial_params[name] = to_floats(*v);
  }
  m.classes = m.layers.back().n;
  return m;
}

HostFloatTrainer::HostFloatTrainer(const std::filesystem::path& model, int64_t batch, SgdConfig sgd)
    : HostFloatTrainer(describe_trainable(model), batch, sgd) {}

HostFloatTrainer::HostFloatTrainer(TrainableModel model, int64_t batch, SgdConfig sgd)
    : model_(std::move(model)), batch_(batch), sgd_(sgd) {
  if (batch < 1) throw Error(ErrorKind::kInvalidArgument, fmt::format("--batch {}: must be at least 1", batch));
  check_sgd_config(sgd);
  params_ = model_.initial_params;
  for (const auto& [name, v] : params_) momentum_[name].assign(v.size(), 0.0f);
}

void HostFloatTrainer::forward(std::span<const float> x, int64_t rows) {
  const size_t L = model_.layers.size();
  acts_.resize(L + 1);
  pre_.resize(L);
  acts_[0].assign(x.begin(), x.end());
  const auto ur = static_cast<size_t>(rows);
  std::vector<float> wkn;
  for (size_t l = 0; l < L; ++l) {
    const TrainableDense& d = model_.layers[l];
    const auto k = static_cast<size_t>(d.k), n = static_cast<size_t>(d.n);
    const std::vector<float>& w = params_.at(d.weight);
    const float* wp = w.data();
    if (d.transposed) {  // [n][k] -> [k][n], so the inner loop runs along a row
      wkn.resize(k * n);
      for (size_t j = 0; j < n; ++j) {
        for (size_t kk = 0; kk < k; ++kk) wkn[kk * n + j] = w[j * k + kk];
      }
      wp = wkn.data();
    }
    std::vector<float> bias(n, 0.0f);
    for (const TrainableBias& b : d.biases) {
      const std::vector<float>& bv = params_.at(b.name);
      for (size_t j = 0; j < n; ++j) bias[j] += b.scale * bv[b.scalar ? 0 : j];
    }
    std::vector<float>& z = pre_[l];
    z.assign(ur * n, 0.0f);
    const std::vector<float>& in = acts_[l];
    for (size_t r = 0; r < ur; ++r) {
      float* zr = z.data() + r * n;
      const float* xr = in.data() + r * k;
      for (size_t kk = 0; kk < k; ++kk) {
        const float a = xr[kk];
        const float* wr = wp + kk * n;
        for (size_t j = 0; j < n; ++j) zr[j] += a * wr[j];
      }
      for (size_t j = 0; j < n; ++j) zr[j] = (d.alpha == 1.0f ? zr[j] : d.alpha * zr[j]) + bias[j];
    }
    std::vector<float>& out = acts_[l + 1];
    out = z;
    if (d.relu) {
      for (float& v : out) v = v > 0.0f || std::isnan(v) ? v : 0.0f;
    }
  }
}

std::vector<float> HostFloatTrainer::logits(std::span<const float> inputs, int64_t rows) {
  if (rows < 0 || inputs.size() != static_cast<size_t>(rows) * static_cast<size_t>(model_.input_features)) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("logits: {} input values for {} rows of {} features",
                                                         inputs.size(), rows, model_.input_features));
  }
  forward(inputs, rows);
  return acts_.back();
}

TrainStepReport HostFloatTrainer::step(std::span<const float> inputs, std::span<const int64_t> labels, int64_t rows) {
  if (rows < 1 || rows > batch_) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("step: {} rows; a step takes 1 to {} rows", rows, batch_));
  }
  const auto ur = static_cast<size_t>(rows);
  if (inputs.size() != ur * static_cast<size_t>(model_.input_features) || labels.size() != ur) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("step: {} input values and {} labels for {} rows of {} features",
                                                         inputs.size(), labels.size(), rows, model_.input_features));
  }
  const auto C = static_cast<size_t>(model_.classes);
  for (size_t r = 0; r < ur; ++r) {
    if (labels[r] < 0 || static_cast<size_t>(labels[r]) >= C) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("step: label {} of row {} is not one of the {} classes",
                                                           labels[r], r, C));
    }
  }
  forward(inputs, rows);
  TrainStepReport rep;
  rep.rows = rows;

  // Softmax cross-entropy and its gradient at the logits.
  const std::vector<float>& z = acts_.back();
  std::vector<float> dz(ur * C);
  double loss = 0.0;
  for (size_t r = 0; r < ur; ++r) {
    const float* zr = z.data() + r * C;
    double mx = zr[0];
    for (size_t j = 1; j < C; ++j) mx = std::max<double>(mx, zr[j]);
    double s = 0.0;
    for (size_t j = 0; j < C; ++j) s += std::exp(static_cast<double>(zr[j]) - mx);
    const double lse = mx + std::log(s);
    const auto y = static_cast<size_t>(labels[r]);
    loss += lse - static_cast<double>(zr[y]);
    for (size_t j = 0; j < C; ++j) {
      const double p = std::exp(static_cast<double>(zr[j]) - lse);
      dz[r * C + j] = static_cast<float>((p - (j == y ? 1.0 : 0.0)) / static_cast<double>(rows));
    }
  }
  rep.loss = loss / static_cast<double>(rows);

  // Backward, last layer first; gradients by initializer name.
  std::map<std::string, std::vector<float>> grads;
  for (size_t l = model_.layers.size(); l-- > 0;) {
    const TrainableDense& d = model_.layers[l];
    const auto k = static_cast<size_t>(d.k), n = static_cast<size_t>(d.n);
    if (d.relu) {
      const std::vector<float>& pz = pre_[l];
      for (size_t i = 0; i < dz.size(); ++i) dz[i] = pz[i] <= 0.0f ? 0.0f : dz[i];
    }
    const std::vector<float>& x = acts_[l];
    std::vector<float>& gw = grads[d.weight];
    gw.assign(k * n, 0.0f);
    for (size_t r = 0; r < ur; ++r) {
      const float* xr = x.data() + r * k;
      const float* dr = dz.data() + r * n;
      if (d.transposed) {  // gw [n][k]
        for (size_t j = 0; j < n; ++j) {
          const float c = dr[j];
          float* g = gw.data() + j * k;
          for (size_t kk = 0; kk < k; ++kk) g[kk] += c * xr[kk];
        }
      } else {  // gw [k][n]
        for (size_t kk = 0; kk < k; ++kk) {
          const float a = xr[kk];
          float* g = gw.data() + kk * n;
          for (size_t j = 0; j < n; ++j) g[j] += a * dr[j];
        }
      }
    }
    if (d.alpha != 1.0f) {
      for (float& v : gw) v *= d.alpha;
    }
    std::vector<float> colsum(n, 0.0f);
    for (size_t r = 0; r < ur; ++r) {
      for (size_t j = 0; j < n; ++j) colsum[j] += dz[r * n + j];
    }
    for (const TrainableBias& b : d.biases) {
      std::vector<float>& gb = grads[b.name];
      if (b.scalar) {
        float s = 0.0f;
        for (size_t j = 0; j < n; ++j) s += colsum[j];
        gb.assign(1, b.scale * s);
      } else {
        gb.resize(n);
        for (size_t j = 0; j < n; ++j) gb[j] = b.scale * colsum[j];
      }
    }
    if (l == 0) break;
    // dX = alpha * dZ . W'^T, W' = [k][n]: dx[r][kk] = sum_j dz[r][j] * W'[kk][j].
    const std::vector<float>& w = params_.at(d.weight);
    std::vector<float> wnk;
    const float* wp = w.data();
    if (!d.transposed) {  // [k][n] -> [n][k]
      wnk.resize(k * n);
      for (size_t kk = 0; kk < k; ++kk) {
        for (size_t j = 0; j < n; ++j) wnk[j * k + kk] = w[kk * n + j];
      }
      wp = wnk.data();
    }
    std::vector<float> dx(ur * k, 0.0f);
    for (size_t r = 0; r < ur; ++r) {
      float* o = dx.data() + r * k;
      for (size_t j = 0; j < n; ++j) {
        const float c = dz[r * n + j];
        const float* wr = wp + j * k;
        for (size_t kk = 0; kk < k; ++kk) o[kk] += c * wr[kk];
      }
      if (d.alpha != 1.0f) {
        for (size_t kk = 0; kk < k; ++kk) o[kk] *= d.alpha;
      }
    }
    dz = std::move(dx);
  }

  // torch.optim.SGD.
  const float lr = sgd_.lr, mom = sgd_.momentum, wd = sgd_.weight_decay;
  for (auto& [name, w] : params_) {
    const std::vector<float>& g = grads.at(name);
    std::vector<float>& v = momentum_.at(name);
    for (size_t i = 0; i < w.size(); ++i) {
      float d = g[i];
      if (wd != 0.0f) {
        const float t = wd * w[i];
        d = d + t;
      }
      if (mom != 0.0f) {
        if (steps_ == 0) {
          v[i] = d;
        } else {
          const float t = mom * v[i];
          v[i] = t + d;
        }
        d = v[i];
      }
      const float u = -lr * d;
      w[i] = w[i] + u;
    }
  }
  ++steps_;
  return rep;
}

TrainState HostFloatTrainer::state() const {
  TrainState s;
  s.params = params_;
  s.momentum = momentum_;
  s.steps = steps_;
  return s;
}

void HostFloatTrainer::load_state(const TrainState& s) {
  auto check = [&](const std::map<std::string, std::vector<float>>& m, std::string_view what, bool optional) {
    if (optional && m.empty()) return;
    for (const auto& [name, v] : params_) {
      const auto it = m.find(name);
      if (it == m.end()) {
        throw Error(ErrorKind::kInvalidArgument, fmt::format("training state: no {} for parameter '{}'", what, name));
      }
      if (it->second.size() != v.size()) {
        throw Error(ErrorKind::kInvalidArgument, fmt::format("training state: {} of '{}' has {} values, the model {}",
                                                             what, name, it->second.size(), v.size()));
      }
    }
    for (const auto& [name, v] : m) {
      if (!params_.contains(name)) {
        throw Error(ErrorKind::kInvalidArgument, fmt::format("training state: '{}' is not a parameter of the model", name));
      }
    }
  };
  check(s.params, "values", false);
  check(s.momentum, "momentum buffer", true);
  if (s.steps < 0) throw Error(ErrorKind::kInvalidArgument, "training state: negative step count");
  params_ = s.params;
  if (s.momentum.empty()) {
    for (auto& [name, v] : momentum_) std::fill(v.begin(), v.end(), 0.0f);
  } else {
    momentum_ = s.momentum;
  }
  steps_ = s.steps;
}

}  // namespace tpuw::runtime
