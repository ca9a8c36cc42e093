// Lowering to the dense-layer chain the back end consumes today (tpuw/compiler/passes.h).
//
// Walks the optimized graph in node order keeping "the activation" (the one value the chain
// carries) and the earlier activations: a node that reads an earlier one is a branch or skip
// connection, which the chain cannot express -- except host operators and layout changes reading a
// view of the last layer's output, which may branch (a model with several outputs: the logits and
// their Softmax). Every value the chain computes has a tap: after how many layers, and which host
// operators since; every graph output must be a tap of the last layer's output. Dense nodes become layers; a Reshape, Flatten, Squeeze
// or Unsqueeze only changes the feature shape; Softmax, LogSoftmax and LayerNormalization end the
// chain on the host (nn::HostStep), followed only by more of them and by layout changes -- unless
// they read the graph input before any device operator: then they run on the raw input rows before
// the device (nn::FloatNetwork::input_steps) and the chain goes on. An Add or
// Relu that fusion could not merge is handled like the old importer did (bias / ReLU of the last
// layer) or reported.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <limits>
#include <map>
#include <set>

#include "pass_util.h"
#include "tpuw/compiler/activations.h"
#include "tpuw/compiler/passes.h"

namespace tpuw::compiler {
namespace {

using detail::attr_float;
using detail::attr_int;
using detail::bias_from;
using detail::features;

std::string upper(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  return r;
}

constexpr uint32_t kMaxIdentityFeatures = 4096;

class Lowering {
 public:
  explicit Lowering(const Graph& g) : g_(g), consumers_(g.consumers()) { net_.source = g.source; }

  nn::FloatNetwork run() {
    input();
    for (const Node& n : g_.nodes) node(n);
    const std::vector<const Tap*> outs = outputs();
    finish_layer();
    if (net_.layers.empty()) identity_layer();
    net_.output_name = g_.outputs[0].name;
    if (outs.size() > 1) {
      // Several outputs: each is the last layer's output (or one head's columns of it), then its
      // own host operators.
      for (size_t i = 0; i < outs.size(); ++i) {
        const uint32_t cols = outs[i]->cols == 0 ? net_.output_features() : outs[i]->cols;
        net_.outputs.push_back({g_.outputs[i].name, outs[i]->col, cols, outs[i]->steps});
      }
      return std::move(net_);
    }
    net_.host_steps = outs[0]->steps;
    // One Softmax over every output feature is the form the rest of the back end has always known
    // (nn::HostOp on the network, as the CNN head has it): keep it that way.
    if (net_.host_steps.size() == 1 && net_.host_steps[0].op == nn::HostOp::kSoftmax &&
        net_.host_steps[0].outer == 1 && net_.host_steps[0].inner == 1) {
      net_.host_op = nn::HostOp::kSoftmax;
      net_.host_steps.clear();
    }
    return std::move(net_);
  }

 private:
  enum class Stage { kInput, kLinear, kRelu, kHost };

  // Where a value stands in the chain: the output of the first `layers` layers as they were at
  // `version` (a bias Add or Relu changes the last layer), then the host operators `steps`.
  struct Tap {
    size_t layers = 0;
    int version = 0;
    std::vector<nn::HostStep> steps;
    uint32_t col = 0, cols = 0;  // the columns of the layer's output it views (one head of several)
  };

  const Graph& g_;
  std::vector<std::vector<size_t>> consumers_;
  nn::FloatNetwork net_;
  std::set<ValueId> stale_;
  ValueId act_ = kNoValue;
  Stage stage_ = Stage::kInput;
  std::vector<std::string> pending_;  // labels of the layer being built
  const Node* n_ = nullptr;
  std::map<ValueId, Tap> taps_;       // every value of the chain
  int version_ = 0;                   // bumped when a node changes the last layer
  std::string last_host_;             // the last host operator, for messages
  ValueId last_dense_in_ = kNoValue;  // what the last layer reads: another Dense reading it is a second head
  std::string heads_;                 // the last layer's heads, when it has several ("fc1 (Gemm) | fc2 (Gemm)")

  [[noreturn]] void unsupported(const std::string& what) const { g_.fail(ErrorKind::kUnsupported, *n_, what); }
  const std::string& name(ValueId v) const { return g_.value(v).name; }

  void input() {
    if (g_.inputs.empty()) g_.fail(ErrorKind::kBadFile, "the graph has no input (besides initializers)");
    if (g_.inputs.size() > 1) {
      std::vector<std::string> names;
      for (const auto& in : g_.inputs) names.push_back(name(in.value));
      g_.fail(ErrorKind::kUnsupported,
              fmt::format("graph input '{}': a second input (the graph has {} inputs: {}); models with one input "
                          "(the batch of rows) are supported", names[1], g_.inputs.size(), fmt::join(names, ", ")));
    }
    const GraphInput& in = g_.inputs[0];
    const Value& v = g_.value(in.value);
    if (v.dtype != DType::kFloat32) {
      g_.fail(ErrorKind::kUnsupported, fmt::format("graph input '{}': has element type {}; only float32 inputs are "
                                                   "supported", v.name, upper(dtype_name(v.dtype))));
    }
    net_.input_name = v.name;
    net_.input_shape = in.declared;
    net_.input_features = static_cast<uint32_t>(*checked_elements(features(*v.shape)));
    std::vector<std::string> part_names;
    for (const Graph::InputPart& p : g_.input_parts) {
      net_.input_parts.push_back(nn::InputPart{p.name, p.declared, static_cast<uint32_t>(p.features)});
      part_names.push_back(p.name);
    }
    if (!part_names.empty()) net_.input_name = fmt::format("{}", fmt::join(part_names, "+"));
    act_ = in.value;
    taps_[act_] = Tap{};
  }

  // The tap of every graph output, in order: each must be the last layer's output as the device
  // returns it (after its bias and ReLU), then host operators and layout changes.
  std::vector<const Tap*> outputs() const {
    if (g_.outputs.empty()) g_.fail(ErrorKind::kBadFile, "the graph has no output");
    std::vector<const Tap*> r;
    for (const GraphOutput& o : g_.outputs) {
      const std::string where = fmt::format("graph output '{}'", o.name);
      const auto it = taps_.find(o.value);
      if (it == taps_.end()) {
        if (g_.is_constant(o.value)) g_.fail(ErrorKind::kUnsupported, where + ": is a constant, not computed from the input");
        g_.fail(ErrorKind::kUnsupported, where + ": is not computed by the layer chain from the graph input");
      }
      const Tap& t = it->second;
      if (t.layers != net_.layers.size() || t.version != version_) {
        g_.fail(ErrorKind::kUnsupported,
                where + fmt::format(": is not the end of the layer chain (later nodes extend it: it is the output of "
                                    "{} of the {} layers{}); the device returns the last layer's output, every graph "
                                    "output must be it or host operators and layout changes after it",
                                    t.layers, net_.layers.size(), t.layers == net_.layers.size() ? " before its bias "
                                    "or ReLU" : ""));
      }
      r.push_back(&t);
    }
    if (r.size() == 1 && !heads_.empty()) {
      g_.fail(ErrorKind::kUnsupported, fmt::format("graph output '{}': the last layer has several heads ({}) but only "
                                                   "one of them is a graph output", g_.outputs[0].name, heads_));
    }
    // A feature shape of rank > 1 ([batch, 4, 5]) is output flattened row-major, like Flatten.
    return r;
  }

  // A model whose operators are all shape changes or host operators (a Flatten, a Softmax: input
  // steps then) still runs one device program: an identity layer (exact in int8: w_q = 127 on the diagonal and
  // requantization by 1/127; exact in bf16).
  void identity_layer() {
    if (net_.input_features > kMaxIdentityFeatures) {
      g_.fail(ErrorKind::kUnsupported,
              fmt::format("the model has no matrix operator, and an identity layer over {} features (more than {}) "
                          "is too large to run it on the device", net_.input_features, kMaxIdentityFeatures));
    }
    nn::DenseLayer l;
    l.name = "identity (the model has no matrix operator)";
    l.k = l.n = net_.input_features;
    l.w.assign(size_t{l.k} * l.n, 0.0f);
    for (uint32_t i = 0; i < l.k; ++i) l.w[size_t{i} * l.n + i] = 1.0f;
    l.b.assign(l.n, 0.0f);
    net_.layers.push_back(std::move(l));
  }

  bool is_act(ValueId v) const {
    if (v == act_) return true;
    if (stale_.contains(v)) {
      unsupported(fmt::format("reads '{}', an earlier activation; only a chain of layers is supported (no branches "
                              "or skip connections)", name(v)));
    }
    return false;
  }

  void require_activation_input(size_t i, bool after_host = false) const {
    const ValueId v = n_->inputs[i];
    if (!is_act(v)) {
      if (g_.is_constant(v)) {
        unsupported(fmt::format("input {} '{}' must be the activation computed from the graph input, not a constant", i,
                                name(v)));
      }
      unsupported(fmt::format("reads '{}', which is not computed by the layer chain", name(v)));
    }
    if (stage_ == Stage::kHost && !after_host) {
      unsupported(fmt::format("follows the host operator {}; host operators (Softmax, LogSoftmax, LayerNormalization) "
                              "run after the device program, so only host operators and layout changes (Reshape, "
                              "Flatten, Squeeze, Unsqueeze) may follow them",
                              last_host_));
    }
  }

  // The activation input of a node that may also follow the host operators (layout, host ops): the
  // activation, or an earlier value that is a view of the last layer's output (a branch of host
  // operators and layout changes, for several outputs). Its tap.
  const Tap& require_activation_anywhere(size_t i) const {
    const ValueId v = n_->inputs[i];
    if (v != act_ && stale_.contains(v)) {
      const Tap& t = taps_.at(v);
      if (t.layers == net_.layers.size() && t.version == version_) return t;
    }
    require_activation_input(i, /*after_host=*/true);
    return taps_.at(v);
  }

  // v is the new activation, at `steps` after the layers as they are now; a view of the same
  // columns as `from` (a layout change or host operator), else the whole last layer.
  void set_output(ValueId v, std::vector<nn::HostStep> steps = {}, const Tap* from = nullptr) {
    const uint32_t col = from != nullptr ? from->col : 0;
    const uint32_t cols = from != nullptr ? from->cols : (net_.layers.empty() ? 0 : net_.layers.back().n);
    stale_.insert(act_);
    act_ = v;
    taps_[v] = Tap{net_.layers.size(), version_, std::move(steps), col, cols};
  }

  void finish_layer() {
    if (!net_.layers.empty() && net_.layers.back().name.empty()) {
      net_.layers.back().name = fmt::format("{}", fmt::join(pending_, " + "));
    }
    pending_.clear();
  }

  void node(const Node& n) {
    n_ = &n;
    switch (n.op) {
      case Op::kDense: return dense(n);
      case Op::kAdd: return add(n);
      case Op::kRelu:
        require_activation_input(0);
        if (stage_ == Stage::kInput) unsupported("Relu on the graph input is not supported (it must follow MatMul/Gemm)");
        if (!net_.layers.back().act.none()) {
          unsupported(fmt::format("Relu after {} is not supported (the device applies ReLU before the function)",
                                  nn::act_name(net_.layers.back().act)));
        }
        if (!heads_.empty()) unsupported(fmt::format("follows a layer with several heads ({}); a ReLU must be fused into each head", heads_));
        net_.layers.back().relu = true;
        ++version_;
        stage_ = Stage::kRelu;
        pending_.push_back(n.label());
        return set_output(n.outputs[0]);
      case Op::kFlatten:
      case Op::kReshape:
      case Op::kSqueeze:
      case Op::kUnsqueeze:
        // Layout only: the rows stay row-major, the device never sees the change.
        {
          const Tap& in = require_activation_anywhere(0);
          fixed_batch(n);
          return set_output(n.outputs[0], in.steps, &in);
        }
      case Op::kSoftmax:
      case Op::kLogSoftmax:
      case Op::kLayerNormalization: return host_step(n);
      default:
        unsupported("is not supported by the dense-layer chain the device runs today");
    }
  }

  // A Reshape by a shape with a positive dimension 0: the number of rows the model needs.
  void fixed_batch(const Node& n) {
    const int64_t b = detail::reshape_fixed_batch(g_, n);
    if (b == 0) return;
    Dims shape;
    const TensorData& d = *g_.value(n.inputs[1]).data;
    for (size_t i = 0; i < d.size(); ++i) shape.push_back(detail::as_int(d, i));
    const std::string by = fmt::format("node '{}' ({}): reshape to {}", n.name, n.op_type, dims_string(shape));
    if (net_.fixed_batch != 0 && net_.fixed_batch != static_cast<uint64_t>(b)) {
      unsupported(fmt::format("reshape to {} fixes the batch to {} rows, but {} fixes it to {}", dims_string(shape), b,
                              net_.fixed_batch_by, net_.fixed_batch));
    }
    if (net_.fixed_batch == 0) {
      net_.fixed_batch = static_cast<uint64_t>(b);
      net_.fixed_batch_by = by;
    }
  }

  // Softmax / LogSoftmax / LayerNormalization: a host operator (fp32) after the device program, or
  // before it when no device operator precedes it (nn::FloatNetwork::input_steps).
  void host_step(const Node& n) {
    const Tap& in = require_activation_anywhere(0);
    std::vector<nn::HostStep> steps = in.steps;
    const Dims& d = *g_.value(n.inputs[0]).shape;
    const auto r = static_cast<int64_t>(d.size());
    const int64_t raw = attr_int(g_, n, "axis", -1);
    const int64_t axis = raw < 0 ? raw + r : raw;
    if (axis < 0 || axis >= r) {
      g_.fail(ErrorKind::kBadFile, n, fmt::format("axis {} is out of range for the rank-{} input {}", raw, r, dims_string(d)));
    }
    if (axis == 0) {
      unsupported(fmt::format("axis {} of the input {} is the batch axis: the rows are not independent; only the "
                              "feature axes (>= 1) are supported", raw, dims_string(d)));
    }
    nn::HostStep st;
    st.name = n.label();
    const auto ax = static_cast<size_t>(axis);
    const auto prod = [&](size_t a, size_t b) {
      int64_t p = 1;
      for (size_t i = a; i < b; ++i) p *= d[i];
      return static_cast<uint32_t>(p);
    };
    st.outer = prod(1, ax);
    const bool coerce = n.op == Op::kLayerNormalization || attr_int(g_, n, kCoerce2dAttr, 0) != 0;
    st.len = coerce ? prod(ax, d.size()) : prod(ax, ax + 1);
    st.inner = coerce ? 1 : prod(ax + 1, d.size());
    if (n.op == Op::kLayerNormalization) {
      st.op = nn::HostOp::kLayerNorm;
      st.epsilon = attr_float(g_, n, "epsilon", 1e-5f);
      const Dims norm(d.begin() + axis, d.end());
      st.scale = normalized_param(n, 1, "Scale", norm);
      if (detail::input(n, 2) != kNoValue) st.bias = normalized_param(n, 2, "B", norm);
      for (size_t k = 1; k < n.outputs.size(); ++k) {
        const ValueId v = n.outputs[k];
        if (v != kNoValue && (g_.is_graph_output(v) || !consumers_[static_cast<size_t>(v)].empty())) {
          unsupported(fmt::format("output {} '{}' ({}) is read; only the normalized output Y is supported", k, name(v),
                                  k == 1 ? "Mean" : "InvStdDev"));
        }
      }
    } else {
      st.op = n.op == Op::kSoftmax ? nn::HostOp::kSoftmax : nn::HostOp::kLogSoftmax;
    }
    if (stage_ == Stage::kInput && net_.layers.empty() && in.steps.empty() && net_.input_parts.empty()) {
      // Before any device operator (it reads the graph input, or a layout change of it): it runs
      // on the raw input rows in fp32 before the device program (and before int8 quantization),
      // and the chain goes on from its output as if that were the graph input.
      net_.input_steps.push_back(std::move(st));
      set_output(n.outputs[0], {}, &in);
      return;
    }
    last_host_ = st.name;
    steps.push_back(std::move(st));
    stage_ = Stage::kHost;
    set_output(n.outputs[0], std::move(steps), &in);
  }

  // LayerNormalization's Scale or B: a constant that broadcasts (numpy rules) to the normalized
  // dimensions `norm`, one value per normalized feature.
  std::vector<float> normalized_param(const Node& n, size_t i, const char* what, const Dims& norm) const {
    const ValueId c = n.inputs[i];
    if (!g_.is_constant(c)) {
      unsupported(fmt::format("input {} '{}' ({}) must be an initializer or Constant", i, name(c), what));
    }
    const Value& v = g_.value(c);
    const Dims& cd = *v.shape;
    bool ok = cd.size() <= norm.size();
    for (size_t k = 0; ok && k < cd.size(); ++k) {
      const int64_t want = norm[norm.size() - cd.size() + k];
      ok = cd[k] == 1 || cd[k] == want;
    }
    if (!ok) {
      g_.fail(ErrorKind::kUnsupported, n, fmt::format("input {} '{}' ({}) has shape {}; it must broadcast to the "
                                                      "normalized dimensions {}", i, name(c), what, dims_string(cd),
                                                      dims_string(norm)));
    }
    const int64_t total = *checked_elements(norm);
    std::vector<float> out(static_cast<size_t>(total));
    for (int64_t j = 0; j < total; ++j) {
      // Coordinates of j in norm, mapped to the (right-aligned, broadcast) constant.
      int64_t rem = j, idx = 0, stride = 1;
      for (size_t k = norm.size(); k-- > 0;) {
        const int64_t coord = rem % norm[k];
        rem /= norm[k];
        const size_t off = norm.size() - k;  // 1 = last axis
        if (off <= cd.size()) {
          const int64_t cdim = cd[cd.size() - off];
          if (cdim != 1) idx += coord * stride;
          stride *= cdim;
        }
      }
      out[static_cast<size_t>(j)] = static_cast<float>(v.data->as_double(static_cast<size_t>(idx)));
    }
    return out;
  }

  // A second head on the last layer's input (two Gemms reading one trunk): its columns are appended
  // to the last layer, so the device computes both in one layer and each output is its columns.
  bool try_head(const Node& n) {
    if (n.inputs[0] == act_ || n.inputs[0] != last_dense_in_ || net_.layers.empty()) return false;
    nn::DenseLayer& l = net_.layers.back();
    const Value& w = g_.value(n.inputs[1]);
    const Value& b = g_.value(n.inputs[2]);
    const auto k = static_cast<uint32_t>((*w.shape)[0]), n2 = static_cast<uint32_t>((*w.shape)[1]);
    const bool relu = attr_int(g_, n, "relu", 0) != 0;
    if (taps_.at(act_).layers != net_.layers.size()) return false;
    const std::string first = heads_.empty() ? fmt::format("{}", fmt::join(pending_, " + ")) : heads_;
    if (relu != l.relu) {
      unsupported(fmt::format("is a second head on '{}' {} a ReLU, but {} {}: the heads of one layer must agree", name(n.inputs[0]),
                              relu ? "with" : "without", first, l.relu ? "has one" : "has none"));
    }
    if (k != l.k) throw Error(ErrorKind::kInternal, fmt::format("{}: node '{}': head does not match", g_.source, n.name));
    std::vector<float> wn(size_t{k} * (l.n + n2));
    for (uint32_t i = 0; i < k; ++i) {
      std::copy_n(l.w.begin() + static_cast<std::ptrdiff_t>(size_t{i} * l.n), l.n, wn.begin() + static_cast<std::ptrdiff_t>(size_t{i} * (l.n + n2)));
      std::copy_n(w.data->f.begin() + static_cast<std::ptrdiff_t>(size_t{i} * n2), n2,
                  wn.begin() + static_cast<std::ptrdiff_t>(size_t{i} * (l.n + n2) + l.n));
    }
    const uint32_t col = l.n;
    l.w = std::move(wn);
    l.b.insert(l.b.end(), b.data->f.begin(), b.data->f.end());
    l.n += n2;
    const std::string second = n.origin.empty() ? n.label() : fmt::format("{}", fmt::join(n.origin, " + "));
    heads_ = fmt::format("{} | {}", first, second);
    pending_ = {heads_};
    const Tap head{net_.layers.size(), version_, {}, col, n2};
    stale_.insert(act_);
    act_ = n.outputs[0];
    taps_[act_] = head;
    stage_ = l.relu ? Stage::kRelu : Stage::kLinear;
    return true;
  }

  void dense(const Node& n) {
    if (try_head(n)) return;
    require_activation_input(0);
    finish_layer();
    last_dense_in_ = n.inputs[0];
    heads_.clear();
    const Value& w = g_.value(n.inputs[1]);
    const Value& b = g_.value(n.inputs[2]);
    nn::DenseLayer l;
    l.k = static_cast<uint32_t>((*w.shape)[0]);
    l.n = static_cast<uint32_t>((*w.shape)[1]);
    if (checked_elements(features(*g_.value(n.inputs[0]).shape)) != int64_t{l.k}) {
      throw Error(ErrorKind::kInternal, fmt::format("{}: node '{}': Dense input does not match its weight", g_.source, n.name));
    }
    l.w.assign(w.data->f.begin(), w.data->f.end());
    l.b.assign(b.data->f.begin(), b.data->f.end());
    l.relu = attr_int(g_, n, "relu", 0) != 0;
    l.act = dense_activation(g_, n);
    net_.layers.push_back(std::move(l));
    pending_ = n.origin;
    stage_ = net_.layers.back().relu || !net_.layers.back().act.none() ? Stage::kRelu : Stage::kLinear;
    set_output(n.outputs[0]);
  }

  void add(const Node& n) {
    const bool a0 = is_act(n.inputs[0]), a1 = is_act(n.inputs[1]);
    if (a0 && a1) unsupported("adding two activations is not supported (only a constant bias after MatMul/Gemm)");
    if (!a0 && !a1) {
      if (g_.is_constant(n.inputs[0]) && g_.is_constant(n.inputs[1])) unsupported("Add of two constants is not supported");
      unsupported(fmt::format("reads '{}', which is not computed by the layer chain",
                              name(g_.is_constant(n.inputs[0]) ? n.inputs[1] : n.inputs[0])));
    }
    require_activation_input(a0 ? 0 : 1);
    if (!heads_.empty()) unsupported(fmt::format("follows a layer with several heads ({}); a bias must be fused into each head", heads_));
    if (stage_ != Stage::kLinear) {
      unsupported(stage_ == Stage::kInput
                      ? "Add is supported only as the bias of a preceding MatMul/Gemm, not on the graph input"
                      : "Add is supported only as the bias right after MatMul/Gemm, not after Relu");
    }
    const ValueId c = n.inputs[a0 ? 1 : 0];
    if (!g_.is_constant(c)) unsupported(fmt::format("bias '{}' is computed from the input; it must be an initializer or Constant", name(c)));
    nn::DenseLayer& l = net_.layers.back();
    const std::vector<float> b = bias_from(g_, n, c, l.n, fmt::format("bias '{}'", name(c)));
    for (uint32_t j = 0; j < l.n; ++j) l.b[j] += b[j];
    ++version_;
    pending_.push_back(n.label());
    set_output(n.outputs[0]);
  }
};

}  // namespace

nn::FloatNetwork lower_to_float_network(const Graph& g) { return Lowering(g).run(); }

}  // namespace tpuw::compiler
