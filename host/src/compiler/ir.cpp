// The graph IR (tpuw/compiler/ir.h): names, the Graph helpers, verify() and dump().
#include "tpuw/compiler/ir.h"

#include "tpuw/checked.h"

#include <fmt/format.h>

#include <array>

namespace tpuw::compiler {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "fp32";
    case DType::kBFloat16: return "bf16";
    case DType::kInt8: return "int8";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kBool: return "bool";
    case DType::kFloat64: return "fp64";
  }
  return "?";
}

bool is_float(DType t) { return t == DType::kFloat32 || t == DType::kBFloat16 || t == DType::kFloat64; }

std::string dims_string(std::span<const int64_t> dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) s += ", ";
    s += dims[i] == kBatch ? std::string("batch") : std::to_string(dims[i]);
  }
  return s + "]";
}

std::optional<int64_t> checked_elements(std::span<const int64_t> dims) {
  int64_t p = 1;
  for (const int64_t d : dims) {
    if (d == kBatch) continue;
    if (d < 0) return std::nullopt;
    const std::optional<int64_t> r = try_mul(p, d);
    if (!r || *r > kMaxElements) return std::nullopt;
    p = *r;
  }
  return p;
}

namespace {

constexpr std::array<std::pair<Op, std::string_view>, 46> kOpNames{{
    {Op::kConstant, "Constant"},
    {Op::kIdentity, "Identity"},
    {Op::kDropout, "Dropout"},
    {Op::kGemm, "Gemm"},
    {Op::kMatMul, "MatMul"},
    {Op::kAdd, "Add"},
    {Op::kRelu, "Relu"},
    {Op::kFlatten, "Flatten"},
    {Op::kReshape, "Reshape"},
    {Op::kSoftmax, "Softmax"},
    {Op::kShape, "Shape"},
    {Op::kGather, "Gather"},
    {Op::kUnsqueeze, "Unsqueeze"},
    {Op::kConcat, "Concat"},
    {Op::kConv, "Conv"},
    {Op::kAveragePool, "AveragePool"},
    {Op::kGlobalAveragePool, "GlobalAveragePool"},
    {Op::kPad, "Pad"},
    {Op::kMaxPool, "MaxPool"},
    {Op::kSub, "Sub"},
    {Op::kMul, "Mul"},
    {Op::kDiv, "Div"},
    {Op::kBatchNormalization, "BatchNormalization"},
    {Op::kTranspose, "Transpose"},
    {Op::kLogSoftmax, "LogSoftmax"},
    {Op::kLayerNormalization, "LayerNormalization"},
    {Op::kSqueeze, "Squeeze"},
    {Op::kSigmoid, "Sigmoid"},
    {Op::kTanh, "Tanh"},
    {Op::kLeakyRelu, "LeakyRelu"},
    {Op::kClip, "Clip"},
    {Op::kHardSigmoid, "HardSigmoid"},
    {Op::kHardSwish, "HardSwish"},
    {Op::kGelu, "Gelu"},
    {Op::kErf, "Erf"},
    {Op::kCast, "Cast"},
    {Op::kSlice, "Slice"},
    {Op::kRange, "Range"},
    {Op::kConstantOfShape, "ConstantOfShape"},
    {Op::kEqual, "Equal"},
    {Op::kWhere, "Where"},
    {Op::kReduceMean, "ReduceMean"},
    {Op::kDense, "Dense"},
    {Op::kQuantize, "Quantize"},
    {Op::kQDense, "QDense"},
    {Op::kDequantize, "Dequantize"},
}};

}  // namespace

Op op_from_name(std::string_view name) {
  for (const auto& [op, n] : kOpNames) {
    if (n == name) return op;
  }
  return Op::kUnknown;
}

std::string_view op_name(Op op) {
  for (const auto& [o, n] : kOpNames) {
    if (o == op) return n;
  }
  return "?";
}

const Attribute* Node::attr(std::string_view key) const {
  for (const auto& [k, a] : attrs) {
    if (k == key) return &a;
  }
  return nullptr;
}

void Node::set_attr(std::string key, Attribute a) {
  for (auto& [k, v] : attrs) {
    if (k == key) {
      v = std::move(a);
      return;
    }
  }
  attrs.emplace_back(std::move(key), std::move(a));
}

void Node::erase_attr(std::string_view key) {
  std::erase_if(attrs, [&](const auto& kv) { return kv.first == key; });
}

ValueId Graph::add_value(Value v) {
  values.push_back(std::move(v));
  return static_cast<ValueId>(values.size() - 1);
}

ValueId Graph::add_constant(std::string name, DType dtype, Dims dims, TensorData data) {
  Value v;
  v.name = std::move(name);
  v.dtype = dtype;
  v.shape = std::move(dims);
  v.data = std::move(data);
  return add_value(std::move(v));
}

bool Graph::is_graph_output(ValueId id) const {
  for (const auto& o : outputs) {
    if (o.value == id) return true;
  }
  return false;
}

std::vector<std::vector<size_t>> Graph::consumers() const {
  std::vector<std::vector<size_t>> c(values.size());
  for (size_t n = 0; n < nodes.size(); ++n) {
    for (const ValueId v : nodes[n].inputs) {
      if (v != kNoValue && (c[static_cast<size_t>(v)].empty() || c[static_cast<size_t>(v)].back() != n)) {
        c[static_cast<size_t>(v)].push_back(n);
      }
    }
  }
  return c;
}

void Graph::replace_uses(ValueId from, ValueId to) {
  for (Node& n : nodes) {
    for (ValueId& v : n.inputs) {
      if (v == from) v = to;
    }
  }
  for (GraphOutput& o : outputs) {
    if (o.value == from) o.value = to;
  }
}

void Graph::fail(ErrorKind kind, const Node& n, std::string_view what) const {
  throw Error(kind, fmt::format("{}: node '{}' ({}): {}", source, n.name, n.op_type, what));
}

void Graph::fail(ErrorKind kind, std::string_view what) const {
  throw Error(kind, fmt::format("{}: {}", source, what));
}

void verify(const Graph& g) {
  auto broken = [&](const std::string& what) {
    throw Error(ErrorKind::kInternal, fmt::format("{}: graph invariant broken: {}", g.source, what));
  };
  const size_t nv = g.values.size();
  // 0 = not defined yet, 1 = defined.
  std::vector<uint8_t> defined(nv, 0);
  auto in_range = [&](ValueId v) { return v >= 0 && static_cast<size_t>(v) < nv; };
  for (size_t i = 0; i < nv; ++i) {
    const Value& v = g.values[i];
    if (!v.is_constant()) continue;
    defined[i] = 1;
    if (!v.shape) broken(fmt::format("constant '{}' has no shape", v.name));
    const auto n = checked_elements(*v.shape);
    if (!n || static_cast<size_t>(*n) != v.data->size()) {
      broken(fmt::format("constant '{}' has {} values for shape {}", v.name, v.data->size(), dims_string(*v.shape)));
    }
    if (!v.data->f.empty() && !v.data->i.empty()) broken(fmt::format("constant '{}' holds two kinds of data", v.name));
  }
  for (const GraphInput& in : g.inputs) {
    if (!in_range(in.value)) broken("graph input with an invalid value id");
    if (defined[static_cast<size_t>(in.value)]) broken(fmt::format("graph input '{}' defined twice", g.value(in.value).name));
    defined[static_cast<size_t>(in.value)] = 1;
  }
  for (const Node& n : g.nodes) {
    for (const ValueId v : n.inputs) {
      if (v == kNoValue) continue;
      if (!in_range(v)) broken(fmt::format("node '{}' reads an invalid value id {}", n.name, v));
      if (!defined[static_cast<size_t>(v)]) {
        broken(fmt::format("node '{}' reads '{}' before it is defined", n.name, g.value(v).name));
      }
    }
    for (const ValueId v : n.outputs) {
      if (v == kNoValue) continue;
      if (!in_range(v)) broken(fmt::format("node '{}' defines an invalid value id {}", n.name, v));
      if (defined[static_cast<size_t>(v)]) broken(fmt::format("node '{}' redefines '{}'", n.name, g.value(v).name));
      defined[static_cast<size_t>(v)] = 1;
    }
  }
  for (const GraphOutput& o : g.outputs) {
    if (!in_range(o.value) || !defined[static_cast<size_t>(o.value)]) {
      broken(fmt::format("graph output '{}' is not defined", o.name));
    }
  }
}

namespace {

std::string value_string(const Graph& g, ValueId id) {
  if (id == kNoValue) return "-";
  const Value& v = g.value(id);
  std::string scale;  // quantized tensors: "@0.25" (per tensor) or "@[n scales]" (per column)
  if (v.scale.size() == 1) scale = fmt::format("@{}", v.scale[0]);
  if (v.scale.size() > 1) scale = fmt::format("@[{} scales]", v.scale.size());
  return fmt::format("%{}:{}{}{}", v.name, dtype_name(v.dtype), v.shape ? dims_string(*v.shape) : std::string("[?]"),
                     scale);
}

std::string attr_string(const Attribute& a) {
  switch (a.kind) {
    case Attribute::Kind::kInt: return std::to_string(a.i);
    case Attribute::Kind::kFloat: return fmt::format("{}", a.f);
    case Attribute::Kind::kString: return fmt::format("\"{}\"", a.s);
    case Attribute::Kind::kInts: return dims_string(a.ints);
    case Attribute::Kind::kFloats: {
      std::string s = "[";
      for (size_t i = 0; i < a.floats.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", a.floats[i]);
      return s + "]";
    }
    case Attribute::Kind::kTensor:
      return a.t ? fmt::format("tensor {}{}", dtype_name(a.t->dtype), dims_string(a.t->dims)) : "tensor";
    case Attribute::Kind::kOther: break;
  }
  return "?";
}

}  // namespace

std::string dump(const Graph& g) {
  std::string s = fmt::format("graph {}\n", g.source);
  for (const GraphInput& in : g.inputs) s += fmt::format("  input  {}\n", value_string(g, in.value));
  std::vector<uint8_t> used(g.values.size(), 0);
  for (const Node& n : g.nodes) {
    for (const ValueId v : n.inputs) {
      if (v != kNoValue) used[static_cast<size_t>(v)] = 1;
    }
  }
  for (const GraphOutput& o : g.outputs) used[static_cast<size_t>(o.value)] = 1;
  for (size_t i = 0; i < g.values.size(); ++i) {
    if (used[i] && g.values[i].is_constant()) {
      s += fmt::format("  const  {}\n", value_string(g, static_cast<ValueId>(i)));
    }
  }
  for (const Node& n : g.nodes) {
    std::string outs, ins, attrs;
    for (const ValueId v : n.outputs) outs += (outs.empty() ? "" : ", ") + value_string(g, v);
    for (const ValueId v : n.inputs) ins += (ins.empty() ? "" : ", ") + value_string(g, v);
    for (const auto& [k, a] : n.attrs) attrs += fmt::format("{}{}={}", attrs.empty() ? " {" : ", ", k, attr_string(a));
    if (!attrs.empty()) attrs += "}";
    s += fmt::format("  {} = {}({}){}  # {}\n", outs, n.op_type, ins, attrs, n.name);
  }
  for (const GraphOutput& o : g.outputs) s += fmt::format("  output '{}' = {}\n", o.name, value_string(g, o.value));
  return s;
}

}  // namespace tpuw::compiler
