// ONNX -> FloatNetwork (see tpuw/nn/onnx_import.h for what is supported).
//
// The importer walks the graph's nodes in order (ONNX requires topological order) and interprets
// them symbolically: every value is either a constant (initializer, Constant node) or the one
// running activation [batch, features...]. A node that reads the activation either creates a
// dense layer (Gemm, MatMul), amends the last one (Add = bias, Relu = fused ReLU), reshapes the
// features (Flatten, Reshape), aliases it (Identity, Dropout) or ends the chain on the host
// (Softmax). Anything else, or an activation read twice (a branch), is reported as unsupported.
#include "tpuw/nn/onnx_import.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "tpuw/error.h"

namespace tpuw::nn {
namespace {

namespace fs = std::filesystem;

// Upper bound on the elements of one tensor; the data must be in the file anyway, this only keeps
// a corrupt dims list from overflowing size arithmetic.
constexpr int64_t kMaxElements = int64_t{1} << 32;

struct Tensor {
  std::vector<int64_t> dims;
  std::vector<double> data;  // float, double and integer tensors alike (exact for int32 and shapes)
};

std::string dims_string(const std::vector<int64_t>& d) { return fmt::format("[{}]", fmt::join(d, ", ")); }

int64_t product(const std::vector<int64_t>& d) {
  int64_t p = 1;
  for (const int64_t v : d) p *= v;
  return p;
}

class Importer {
 public:
  explicit Importer(std::string file) : file_(std::move(file)) { net_.source = file_; }

  FloatNetwork run(const onnx::ModelProto& model) {
    if (!model.has_graph()) bad("not an ONNX model (no graph; empty or not a ModelProto)");
    opset_ = 0;
    for (const auto& os : model.opset_import()) {
      if (os.domain().empty() || os.domain() == "ai.onnx") opset_ = os.version();
    }
    if (opset_ <= 0) bad("no opset_import for the default ONNX domain (truncated file?)");
    const onnx::GraphProto& g = model.graph();
    for (const auto& t : g.initializer()) consts_[t.name()] = parse_tensor(t, fmt::format("initializer '{}'", t.name()));
    if (g.sparse_initializer_size() > 0) {
      throw Error(ErrorKind::kUnsupported, fmt::format("{}: sparse initializers are not supported", file_));
    }
    read_input(g);
    for (int i = 0; i < g.node_size(); ++i) node(g.node(i), i);
    read_output(g);
    if (!pending_.empty()) finish_layer();
    return std::move(net_);
  }

 private:
  enum class Stage { kInput, kLinear, kRelu, kSoftmax };

  std::string file_;
  FloatNetwork net_;
  int64_t opset_ = 1;
  std::map<std::string, Tensor> consts_;
  std::set<std::string> act_;    // names of the current activation (aliases through Identity)
  std::set<std::string> stale_;  // names of earlier activations
  std::vector<int64_t> feat_;    // the activation's non-batch dimensions
  Stage stage_ = Stage::kInput;
  std::vector<std::string> pending_;  // node labels of the layer being built
  std::string where_;                 // "node 'x' (Op)" of the node being imported

  [[noreturn]] void bad(const std::string& what) const {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: {}", file_, what));
  }
  [[noreturn]] void bad_node(const std::string& what) const {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: {}: {}", file_, where_, what));
  }
  [[noreturn]] void unsupported(const std::string& what) const {
    throw Error(ErrorKind::kUnsupported, fmt::format("{}: {}: {}", file_, where_, what));
  }

  // ---- tensors -------------------------------------------------------------------------------
  Tensor parse_tensor(const onnx::TensorProto& t, const std::string& what) const {
    if (t.data_location() == onnx::TensorProto_DataLocation_EXTERNAL || t.external_data_size() > 0) {
      throw Error(ErrorKind::kUnsupported,
                  fmt::format("{}: {} keeps its data in an external file, which is not supported", file_, what));
    }
    Tensor out;
    int64_t n = 1;
    for (const int64_t d : t.dims()) {
      if (d < 0) bad(fmt::format("{} has a negative dimension {}", what, d));
      if (d > 0 && n > kMaxElements / d) bad(fmt::format("{} has too many elements", what));
      n *= d;
      out.dims.push_back(d);
    }
    const auto count = static_cast<size_t>(n);
    const std::string& raw = t.raw_data();
    auto from_raw = [&]<typename T>(T /*tag*/) {
      if (raw.size() != count * sizeof(T)) {
        bad(fmt::format("{}: raw data has {} bytes, dims {} need {}", what, raw.size(), dims_string(out.dims),
                        count * sizeof(T)));
      }
      out.data.resize(count);
      for (size_t i = 0; i < count; ++i) {
        T v;
        std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
        out.data[i] = static_cast<double>(v);
      }
    };
    auto from_field = [&](const auto& field) {
      if (static_cast<size_t>(field.size()) != count) {
        bad(fmt::format("{}: {} values stored, dims {} need {}", what, field.size(), dims_string(out.dims), count));
      }
      out.data.assign(field.begin(), field.end());
    };
    switch (t.data_type()) {
      case onnx::TensorProto_DataType_FLOAT:
        if (t.has_raw_data()) from_raw(float{}); else from_field(t.float_data());
        break;
      case onnx::TensorProto_DataType_DOUBLE:
        if (t.has_raw_data()) from_raw(double{}); else from_field(t.double_data());
        break;
      case onnx::TensorProto_DataType_INT64:
        if (t.has_raw_data()) from_raw(int64_t{}); else from_field(t.int64_data());
        break;
      case onnx::TensorProto_DataType_INT32:
        if (t.has_raw_data()) from_raw(int32_t{}); else from_field(t.int32_data());
        break;
      default:
        throw Error(ErrorKind::kUnsupported,
                    fmt::format("{}: {} has data type {} ({}); supported: float, double, int64, int32", file_, what,
                                onnx::TensorProto_DataType_Name(t.data_type()), t.data_type()));
    }
    return out;
  }

  // ---- graph input / output ------------------------------------------------------------------
  void read_input(const onnx::GraphProto& g) {
    where_ = "graph input";
    std::vector<const onnx::ValueInfoProto*> inputs;
    for (const auto& vi : g.input()) {
      if (!consts_.contains(vi.name())) inputs.push_back(&vi);
    }
    if (inputs.empty()) bad("the graph has no input (besides initializers)");
    if (inputs.size() > 1) {
      std::vector<std::string> names;
      for (const auto* vi : inputs) names.push_back(vi->name());
      throw Error(ErrorKind::kUnsupported,
                  fmt::format("{}: the graph has {} inputs ({}); exactly one is supported", file_, inputs.size(),
                              fmt::join(names, ", ")));
    }
    const onnx::ValueInfoProto& in = *inputs[0];
    where_ = fmt::format("graph input '{}'", in.name());
    if (!in.type().has_tensor_type()) unsupported("is not a tensor");
    const auto& tt = in.type().tensor_type();
    if (tt.elem_type() != onnx::TensorProto_DataType_FLOAT) {
      unsupported(fmt::format("has element type {}; only float32 inputs are supported",
                              onnx::TensorProto_DataType_Name(tt.elem_type())));
    }
    if (!tt.has_shape() || tt.shape().dim_size() < 2) {
      unsupported("needs a declared shape [batch, features...] of rank >= 2");
    }
    for (int i = 0; i < tt.shape().dim_size(); ++i) {
      const auto& d = tt.shape().dim(i);
      const int64_t v = d.has_dim_value() ? d.dim_value() : -1;
      if (i > 0 && v <= 0) {
        unsupported(fmt::format("dimension {} is {}; the non-batch dimensions must be fixed positive sizes", i,
                                d.has_dim_param() ? "'" + d.dim_param() + "'" : std::to_string(v)));
      }
      net_.input_shape.push_back(v);
      if (i > 0) {
        if (v > std::numeric_limits<uint32_t>::max() || product(feat_) * v > std::numeric_limits<uint32_t>::max()) {
          unsupported("has more than 2^32 features per row");
        }
        feat_.push_back(v);
      }
    }
    const int64_t f = product(feat_);
    net_.input_features = static_cast<uint32_t>(f);
    net_.input_name = in.name();
    act_ = {in.name()};
  }

  void read_output(const onnx::GraphProto& g) {
    where_ = "graph output";
    if (g.output_size() != 1) {
      throw Error(g.output_size() == 0 ? ErrorKind::kBadFile : ErrorKind::kUnsupported,
                  fmt::format("{}: the graph has {} outputs; exactly one is supported", file_, g.output_size()));
    }
    const std::string& name = g.output(0).name();
    where_ = fmt::format("graph output '{}'", name);
    if (!act_.contains(name)) {
      if (stale_.contains(name)) unsupported("is not the end of the layer chain (later nodes extend it)");
      if (consts_.contains(name)) unsupported("is a constant, not computed from the input");
      bad_node("no node produces it");
    }
    if (feat_.size() != 1) {
      unsupported(fmt::format("has feature shape {}; the output must be [batch, features]", dims_string(feat_)));
    }
    net_.output_name = name;
  }

  // ---- node helpers --------------------------------------------------------------------------
  static std::string label(const onnx::NodeProto& n, int index) {
    return n.name().empty() ? fmt::format("#{} ({})", index, n.op_type()) : fmt::format("{} ({})", n.name(), n.op_type());
  }

  void check_attributes(const onnx::NodeProto& n, std::initializer_list<std::string_view> allowed) const {
    for (const auto& a : n.attribute()) {
      bool ok = false;
      for (const auto s : allowed) ok = ok || a.name() == s;
      if (!ok) unsupported(fmt::format("attribute '{}' is not supported", a.name()));
    }
  }
  const onnx::AttributeProto* attribute(const onnx::NodeProto& n, std::string_view name) const {
    for (const auto& a : n.attribute()) {
      if (a.name() == name) return &a;
    }
    return nullptr;
  }
  int64_t attr_int(const onnx::NodeProto& n, std::string_view name, int64_t def) const {
    const auto* a = attribute(n, name);
    if (a == nullptr) return def;
    if (a->type() != onnx::AttributeProto_AttributeType_INT) bad_node(fmt::format("attribute '{}' is not an int", name));
    return a->i();
  }
  float attr_float(const onnx::NodeProto& n, std::string_view name, float def) const {
    const auto* a = attribute(n, name);
    if (a == nullptr) return def;
    if (a->type() != onnx::AttributeProto_AttributeType_FLOAT) bad_node(fmt::format("attribute '{}' is not a float", name));
    return a->f();
  }

  void need_inputs(const onnx::NodeProto& n, int lo, int hi) const {
    if (n.input_size() < lo || n.input_size() > hi) {
      bad_node(fmt::format("has {} inputs, expected {}", n.input_size(), lo == hi ? fmt::format("{}", lo)
                                                                                  : fmt::format("{} to {}", lo, hi)));
    }
    if (n.output_size() < 1 || n.output(0).empty()) bad_node("has no output");
  }

  bool is_act(const std::string& name) const {
    if (act_.contains(name)) return true;
    if (stale_.contains(name)) {
      unsupported(fmt::format("reads '{}', an earlier activation; only a chain of layers is supported (no branches "
                              "or skip connections)", name));
    }
    return false;
  }
  const Tensor& constant(const std::string& name, std::string_view role) const {
    const auto it = consts_.find(name);
    if (it != consts_.end()) return it->second;
    if (act_.contains(name) || stale_.contains(name)) {
      unsupported(fmt::format("{} '{}' is computed from the input; it must be an initializer or Constant", role, name));
    }
    bad_node(fmt::format("reads '{}', which no initializer or earlier node defines", name));
  }
  const Tensor* known_constant(const std::string& name) const {
    const auto it = consts_.find(name);
    return it == consts_.end() ? nullptr : &it->second;
  }

  void require_activation_input(const onnx::NodeProto& n, int i) const {
    if (!is_act(n.input(i))) {
      if (consts_.contains(n.input(i))) {
        unsupported(fmt::format("input {} '{}' must be the activation computed from the graph input, not a constant", i,
                                n.input(i)));
      }
      bad_node(fmt::format("reads '{}', which no initializer or earlier node defines", n.input(i)));
    }
    if (stage_ == Stage::kSoftmax) {
      unsupported("follows Softmax; Softmax runs on the host and must be the last operator");
    }
  }

  void set_output(const std::string& name) {
    stale_.insert(act_.begin(), act_.end());
    act_ = {name};
  }

  void finish_layer() {
    if (!net_.layers.empty() && net_.layers.back().name.empty()) {
      net_.layers.back().name = fmt::format("{}", fmt::join(pending_, " + "));
    }
    pending_.clear();
  }

  // Bias vector of `n` from a constant broadcastable to [n] (shape [n], [1, n], [1], scalar).
  std::vector<float> bias_from(const Tensor& t, uint32_t n, std::string_view what) const {
    const int64_t cnt = product(t.dims);
    bool ok = cnt == 1 || cnt == n;
    for (size_t i = 0; i + 1 < t.dims.size(); ++i) ok = ok && t.dims[i] == 1;
    if (!ok) {
      unsupported(fmt::format("{} has shape {}; it must broadcast to [{}] (one value per output feature)", what,
                              dims_string(t.dims), n));
    }
    std::vector<float> b(n);
    for (uint32_t j = 0; j < n; ++j) b[j] = static_cast<float>(t.data[cnt == 1 ? 0 : j]);
    return b;
  }

  void begin_layer(const onnx::NodeProto& n, int index, const Tensor& w, bool trans_b, float alpha) {
    if (feat_.size() != 1) {
      unsupported(fmt::format("the activation has feature shape {}; a dense layer needs [batch, k] (add a Flatten)",
                              dims_string(feat_)));
    }
    if (w.dims.size() != 2) unsupported(fmt::format("weight '{}' has rank {}; it must be a matrix", n.input(1), w.dims.size()));
    const int64_t k = trans_b ? w.dims[1] : w.dims[0];
    const int64_t nn = trans_b ? w.dims[0] : w.dims[1];
    if (k != feat_[0]) {
      bad_node(fmt::format("weight '{}' has shape {} but the activation has {} features", n.input(1),
                           dims_string(w.dims), feat_[0]));
    }
    if (nn <= 0 || k <= 0 || nn > std::numeric_limits<uint32_t>::max()) {
      bad_node(fmt::format("weight '{}' has shape {}", n.input(1), dims_string(w.dims)));
    }
    if (!net_.layers.empty()) finish_layer();
    DenseLayer l;
    l.k = static_cast<uint32_t>(k);
    l.n = static_cast<uint32_t>(nn);
    l.w.resize(size_t{l.k} * l.n);
    for (uint32_t kk = 0; kk < l.k; ++kk) {
      for (uint32_t j = 0; j < l.n; ++j) {
        const double v = trans_b ? w.data[size_t{j} * l.k + kk] : w.data[size_t{kk} * l.n + j];
        l.w[size_t{kk} * l.n + j] = static_cast<float>(alpha * v);
      }
    }
    l.b.assign(l.n, 0.0f);
    net_.layers.push_back(std::move(l));
    pending_ = {label(n, index)};
    feat_ = {nn};
    stage_ = Stage::kLinear;
  }

  // ---- the operators -------------------------------------------------------------------------
  void node(const onnx::NodeProto& n, int index) {
    where_ = fmt::format("node '{}' ({})", n.name().empty() ? fmt::format("#{}", index) : n.name(), n.op_type());
    if (!n.domain().empty() && n.domain() != "ai.onnx") {
      unsupported(fmt::format("operator domain '{}' is not supported (only the default ONNX domain)", n.domain()));
    }
    const std::string& op = n.op_type();
    if (op == "Constant") return op_constant(n);
    if (op == "Identity" || op == "Dropout") return op_identity(n);
    if (op == "Gemm") return op_gemm(n, index);
    if (op == "MatMul") return op_matmul(n, index);
    if (op == "Add") return op_add(n, index);
    if (op == "Relu") return op_relu(n, index);
    if (op == "Flatten") return op_flatten(n);
    if (op == "Reshape") return op_reshape(n);
    if (op == "Softmax") return op_softmax(n);
    unsupported("operator is not supported (supported: Gemm, MatMul, Add, Relu, Flatten, Reshape, Softmax, Identity, "
                "Dropout, Constant)");
  }

  void op_constant(const onnx::NodeProto& n) {
    check_attributes(n, {"value", "value_float", "value_floats", "value_int", "value_ints"});
    if (n.input_size() != 0 || n.output_size() != 1 || n.attribute_size() != 1) {
      bad_node("a Constant has no inputs, one output and one attribute");
    }
    const onnx::AttributeProto& a = n.attribute(0);
    Tensor t;
    if (a.name() == "value") {
      if (!a.has_t()) bad_node("attribute 'value' holds no tensor");
      t = parse_tensor(a.t(), where_);
    } else if (a.name() == "value_float") {
      t.data = {a.f()};
    } else if (a.name() == "value_int") {
      t.data = {static_cast<double>(a.i())};
    } else if (a.name() == "value_floats") {
      t.dims = {a.floats_size()};
      t.data.assign(a.floats().begin(), a.floats().end());
    } else {
      t.dims = {a.ints_size()};
      for (const int64_t v : a.ints()) t.data.push_back(static_cast<double>(v));
    }
    consts_[n.output(0)] = std::move(t);
  }

  void op_identity(const onnx::NodeProto& n) {
    if (n.op_type() == "Dropout") {
      check_attributes(n, {"ratio", "seed", "is_test"});
      need_inputs(n, 1, 3);
      if (n.output_size() > 1 && !n.output(1).empty()) unsupported("the mask output is not supported (inference only)");
      if (n.input_size() == 3 && !n.input(2).empty()) {
        const Tensor& tm = constant(n.input(2), "training_mode");
        if (tm.data.size() != 1 || tm.data[0] != 0) unsupported("training_mode must be false (inference only)");
      }
      if (attr_int(n, "is_test", 1) == 0) unsupported("is_test=0 (training mode) is not supported");
    } else {
      check_attributes(n, {});
      need_inputs(n, 1, 1);
      if (n.output_size() != 1) bad_node("Identity has one output");
    }
    if (const Tensor* c = known_constant(n.input(0))) {
      consts_[n.output(0)] = *c;
      return;
    }
    if (!is_act(n.input(0))) bad_node(fmt::format("reads '{}', which no initializer or earlier node defines", n.input(0)));
    act_.insert(n.output(0));
  }

  void op_gemm(const onnx::NodeProto& n, int index) {
    check_attributes(n, {"alpha", "beta", "transA", "transB", "broadcast"});
    need_inputs(n, 2, 3);
    require_activation_input(n, 0);
    if (attr_int(n, "transA", 0) != 0) unsupported("transA=1 is not supported (A must be the activation [batch, k])");
    const int64_t tb = attr_int(n, "transB", 0);
    if (tb != 0 && tb != 1) bad_node(fmt::format("transB={}", tb));
    const float alpha = attr_float(n, "alpha", 1.0f);
    const float beta = attr_float(n, "beta", 1.0f);
    const Tensor& w = constant(n.input(1), "weight B");
    begin_layer(n, index, w, tb == 1, alpha);
    if (n.input_size() == 3 && !n.input(2).empty()) {
      const Tensor& c = constant(n.input(2), "bias C");
      DenseLayer& l = net_.layers.back();
      const std::vector<float> b = bias_from(c, l.n, fmt::format("bias C '{}'", n.input(2)));
      for (uint32_t j = 0; j < l.n; ++j) l.b[j] = beta * b[j];
    }
    set_output(n.output(0));
  }

  void op_matmul(const onnx::NodeProto& n, int index) {
    check_attributes(n, {});
    need_inputs(n, 2, 2);
    if (!act_.contains(n.input(0)) && act_.contains(n.input(1))) {
      unsupported("the activation must be the first operand (x . W); W . x is not supported");
    }
    require_activation_input(n, 0);
    begin_layer(n, index, constant(n.input(1), "weight"), false, 1.0f);
    set_output(n.output(0));
  }

  void op_add(const onnx::NodeProto& n, int index) {
    check_attributes(n, {"broadcast", "axis"});
    need_inputs(n, 2, 2);
    const bool a0 = is_act(n.input(0)), a1 = is_act(n.input(1));
    if (a0 && a1) unsupported("adding two activations is not supported (only a constant bias after MatMul/Gemm)");
    if (!a0 && !a1) {
      if (known_constant(n.input(0)) && known_constant(n.input(1))) unsupported("Add of two constants is not supported");
      bad_node(fmt::format("reads '{}', which no initializer or earlier node defines",
                           known_constant(n.input(0)) ? n.input(1) : n.input(0)));
    }
    require_activation_input(n, a0 ? 0 : 1);
    if (stage_ != Stage::kLinear) {
      unsupported(stage_ == Stage::kInput
                      ? "Add is supported only as the bias of a preceding MatMul/Gemm, not on the graph input"
                      : "Add is supported only as the bias right after MatMul/Gemm, not after Relu");
    }
    const std::string& cname = n.input(a0 ? 1 : 0);
    DenseLayer& l = net_.layers.back();
    const std::vector<float> b = bias_from(constant(cname, "bias"), l.n, fmt::format("bias '{}'", cname));
    for (uint32_t j = 0; j < l.n; ++j) l.b[j] += b[j];
    pending_.push_back(label(n, index));
    set_output(n.output(0));
  }

  void op_relu(const onnx::NodeProto& n, int index) {
    check_attributes(n, {});
    need_inputs(n, 1, 1);
    require_activation_input(n, 0);
    if (stage_ == Stage::kInput) unsupported("Relu on the graph input is not supported (it must follow MatMul/Gemm)");
    net_.layers.back().relu = true;
    stage_ = Stage::kRelu;
    pending_.push_back(label(n, index));
    set_output(n.output(0));
  }

  void op_flatten(const onnx::NodeProto& n) {
    check_attributes(n, {"axis"});
    need_inputs(n, 1, 1);
    require_activation_input(n, 0);
    const auto rank = static_cast<int64_t>(feat_.size() + 1);
    int64_t axis = attr_int(n, "axis", 1);
    if (axis < 0) axis += rank;
    if (axis != 1) {
      unsupported(fmt::format("axis={} is not supported (only axis=1, which keeps the batch dimension)",
                              attr_int(n, "axis", 1)));
    }
    feat_ = {product(feat_)};
    set_output(n.output(0));
  }

  void op_reshape(const onnx::NodeProto& n) {
    check_attributes(n, {"shape", "allowzero"});
    std::vector<int64_t> shape;
    if (const auto* a = attribute(n, "shape")) {  // opset < 5
      need_inputs(n, 1, 1);
      shape.assign(a->ints().begin(), a->ints().end());
    } else {
      need_inputs(n, 2, 2);
      if (is_act(n.input(1))) unsupported("a shape computed from the activation is not supported (use a constant shape)");
      const Tensor& s = constant(n.input(1), "shape");
      if (s.dims.size() != 1) bad_node(fmt::format("shape '{}' is not a 1-D tensor", n.input(1)));
      for (const double v : s.data) {
        // Shape entries beyond +-2^53 cannot be a valid size here; clamp before converting.
        shape.push_back(static_cast<int64_t>(std::clamp(v, -9.0e15, 9.0e15)));
      }
    }
    require_activation_input(n, 0);
    const bool allowzero = attr_int(n, "allowzero", 0) != 0;
    const int64_t total = product(feat_);
    std::vector<int64_t> in_dims{-1};  // batch, then features
    in_dims.insert(in_dims.end(), feat_.begin(), feat_.end());
    const std::string shape_str = dims_string(shape);
    if (shape.size() < 2) {
      unsupported(fmt::format("reshape to {} merges the batch dimension; the result must be [batch, features...]",
                              shape_str));
    }
    std::vector<int64_t> out;
    int infer = -1;
    int64_t known = 1;
    for (size_t i = 1; i < shape.size(); ++i) {
      int64_t v = shape[i];
      if (v == 0 && !allowzero) {
        if (i >= in_dims.size()) bad_node(fmt::format("shape {}: 0 at position {} copies a dimension that does not exist", shape_str, i));
        v = in_dims[i];
      }
      if (v == -1) {
        if (infer >= 0 || shape[0] == -1) {
          unsupported(fmt::format("reshape to {}: the batch dimension is ambiguous", shape_str));
        }
        infer = static_cast<int>(out.size());
      } else if (v <= 0 || v > total) {
        unsupported(fmt::format("reshape of [batch, {} features] to {}: dimension {} is {}", total, shape_str, i, v));
      } else {
        if (known > total / v) {
          unsupported(fmt::format("reshape of [batch, {} features] to {} changes the batch dimension", total, shape_str));
        }
        known *= v;
      }
      out.push_back(v);
    }
    if (infer >= 0) {
      if (total % known != 0) bad_node(fmt::format("reshape to {} does not divide {} features", shape_str, total));
      out[static_cast<size_t>(infer)] = total / known;
      known = total;
    }
    if (known != total) {
      unsupported(fmt::format("reshape of [batch, {} features] to {} changes the batch dimension; only reshapes "
                              "that keep it are supported", total, shape_str));
    }
    feat_ = out;
    set_output(n.output(0));
  }

  void op_softmax(const onnx::NodeProto& n) {
    check_attributes(n, {"axis"});
    need_inputs(n, 1, 1);
    require_activation_input(n, 0);
    const int64_t def = opset_ < 13 ? 1 : -1;
    const int64_t axis = attr_int(n, "axis", def);
    if (feat_.size() != 1 || (axis != 1 && axis != -1)) {
      unsupported(fmt::format("softmax over axis {} of a [batch, {}] tensor; only the feature axis of [batch, "
                              "features] is supported", axis, fmt::join(feat_, ", ")));
    }
    net_.host_op = HostOp::kSoftmax;
    stage_ = Stage::kSoftmax;
    set_output(n.output(0));
  }
};

}  // namespace

FloatNetwork import_onnx_bytes(std::span<const uint8_t> bytes, std::string_view name) {
  const std::string file(name);
  if (bytes.empty()) throw Error(ErrorKind::kBadFile, fmt::format("{}: file is empty, not an ONNX model", file));
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: {} bytes is larger than protobuf's 2 GiB limit", file, bytes.size()));
  }
  onnx::ModelProto model;
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    throw Error(ErrorKind::kBadFile,
                fmt::format("{}: not a valid ONNX model (protobuf parse failed: truncated or not a ModelProto)", file));
  }
  return Importer(file).run(model);
}

FloatNetwork import_onnx(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw Error(ErrorKind::kBadFile, fmt::format("{}: is a directory", path.string()));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::kBadFile, fmt::format("{}: cannot open file", path.string()));
  const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw Error(ErrorKind::kBadFile, fmt::format("{}: read error", path.string()));
  return import_onnx_bytes(bytes, path.string());
}

}  // namespace tpuw::nn
