// Lowering to the dense-layer chain the back end consumes today (tpuw/compiler/passes.h).
//
// Walks the optimized graph in node order keeping "the activation" (the one value the chain
// carries) and the earlier activations: a node that reads an earlier one is a branch or skip
// connection, which the chain cannot express. Dense nodes become layers; a Reshape/Flatten only
// changes the feature shape; Softmax ends the chain on the host. An Add or Relu that fusion could
// not merge is handled like the old importer did (bias / ReLU of the last layer) or reported.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <limits>
#include <set>

#include "pass_util.h"
#include "tpuw/compiler/activations.h"
#include "tpuw/compiler/passes.h"

namespace tpuw::compiler {
namespace {

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
  explicit Lowering(const Graph& g) : g_(g) { net_.source = g.source; }

  nn::FloatNetwork run() {
    input();
    for (const Node& n : g_.nodes) node(n);
    output();
    finish_layer();
    if (net_.layers.empty()) identity_layer();
    return std::move(net_);
  }

 private:
  enum class Stage { kInput, kLinear, kRelu, kSoftmax };

  const Graph& g_;
  nn::FloatNetwork net_;
  std::set<ValueId> stale_;
  ValueId act_ = kNoValue;
  Stage stage_ = Stage::kInput;
  std::vector<std::string> pending_;  // labels of the layer being built
  const Node* n_ = nullptr;

  [[noreturn]] void unsupported(const std::string& what) const { g_.fail(ErrorKind::kUnsupported, *n_, what); }
  const std::string& name(ValueId v) const { return g_.value(v).name; }

  void input() {
    if (g_.inputs.empty()) g_.fail(ErrorKind::kBadFile, "the graph has no input (besides initializers)");
    if (g_.inputs.size() > 1) {
      std::vector<std::string> names;
      for (const auto& in : g_.inputs) names.push_back(name(in.value));
      g_.fail(ErrorKind::kUnsupported, fmt::format("the graph has {} inputs ({}); exactly one is supported",
                                                   g_.inputs.size(), fmt::join(names, ", ")));
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
    act_ = in.value;
  }

  void output() {
    if (g_.outputs.size() != 1) {
      g_.fail(ErrorKind::kUnsupported, fmt::format("the graph has {} outputs; exactly one is supported", g_.outputs.size()));
    }
    const GraphOutput& o = g_.outputs[0];
    const std::string where = fmt::format("graph output '{}'", o.name);
    if (o.value != act_) {
      if (stale_.contains(o.value)) g_.fail(ErrorKind::kUnsupported, where + ": is not the end of the layer chain (later nodes extend it)");
      if (g_.is_constant(o.value)) g_.fail(ErrorKind::kUnsupported, where + ": is a constant, not computed from the input");
      g_.fail(ErrorKind::kUnsupported, where + ": is not computed by the layer chain from the graph input");
    }
    // A feature shape of rank > 1 ([batch, 4, 5]) is output flattened row-major, like Flatten.
    net_.output_name = o.name;
  }

  // A model whose operators are all shape changes or host operators (a Flatten, a Softmax) still
  // runs one device program: an identity layer (exact in int8: w_q = 127 on the diagonal and
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

  void require_activation_input(size_t i) const {
    const ValueId v = n_->inputs[i];
    if (!is_act(v)) {
      if (g_.is_constant(v)) {
        unsupported(fmt::format("input {} '{}' must be the activation computed from the graph input, not a constant", i,
                                name(v)));
      }
      unsupported(fmt::format("reads '{}', which is not computed by the layer chain", name(v)));
    }
    if (stage_ == Stage::kSoftmax) unsupported("follows Softmax; Softmax runs on the host and must be the last operator");
  }

  void set_output(ValueId v) {
    stale_.insert(act_);
    act_ = v;
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
        net_.layers.back().relu = true;
        stage_ = Stage::kRelu;
        pending_.push_back(n.label());
        return set_output(n.outputs[0]);
      case Op::kFlatten:
      case Op::kReshape:
        require_activation_input(0);
        return set_output(n.outputs[0]);
      case Op::kSoftmax: {
        require_activation_input(0);
        const Dims f = features(*g_.value(n.inputs[0]).shape);
        const int64_t axis = attr_int(g_, n, "axis", -1);
        if (f.size() != 1 || (axis != 1 && axis != -1)) {
          unsupported(fmt::format("softmax over axis {} of a [batch, {}] tensor; only the feature axis of [batch, "
                                  "features] is supported", axis, fmt::join(f, ", ")));
        }
        net_.host_op = nn::HostOp::kSoftmax;
        stage_ = Stage::kSoftmax;
        return set_output(n.outputs[0]);
      }
      default:
        unsupported("is not supported by the dense-layer chain the device runs today");
    }
  }

  void dense(const Node& n) {
    require_activation_input(0);
    finish_layer();
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
    pending_.push_back(n.label());
    set_output(n.outputs[0]);
  }
};

}  // namespace

nn::FloatNetwork lower_to_float_network(const Graph& g) { return Lowering(g).run(); }

}  // namespace tpuw::compiler
