// ONNX -> graph IR (tpuw/compiler/onnx_importer.h). The only file that includes ONNX's protobuf
// headers: everything after it works on the IR.
#include "tpuw/compiler/onnx_importer.h"

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <limits>
#include <map>

#include "tpuw/file_io.h"

namespace tpuw::compiler {
namespace {

namespace fs = std::filesystem;

// Protobuf refuses serialized messages above 2 GiB; larger files cannot be models.
constexpr uint64_t kMaxOnnxBytes = uint64_t{2} << 30;

class Importer {
 public:
  explicit Importer(std::string file) { g_.source = std::move(file); }

  Graph run(const onnx::ModelProto& model) {
    if (!model.has_graph()) bad("not an ONNX model (no graph; empty or not a ModelProto)");
    int64_t opset = 0;
    for (const auto& os : model.opset_import()) {
      if (os.domain().empty() || os.domain() == "ai.onnx") opset = os.version();
    }
    if (opset <= 0) bad("no opset_import for the default ONNX domain (truncated file?)");
    opset_ = opset;
    const onnx::GraphProto& pg = model.graph();
    for (const auto& t : pg.initializer()) {
      const std::string what = fmt::format("initializer '{}'", t.name());
      ConstTensor c = parse_tensor(t, what);
      define(t.name(), g_.add_constant(t.name(), c.dtype, std::move(c.dims), std::move(c.data)), what);
    }
    if (pg.sparse_initializer_size() > 0) unsupported_file("sparse initializers are not supported");
    for (const auto& vi : pg.input()) {
      if (!symbols_.contains(vi.name())) read_input(vi);
    }
    if (g_.inputs.empty()) bad("the graph has no input (besides initializers)");
    for (int i = 0; i < pg.node_size(); ++i) read_node(pg.node(i), i);
    if (pg.output_size() == 0) bad("the graph has 0 outputs; exactly one is supported");
    for (const auto& o : pg.output()) {
      const auto it = symbols_.find(o.name());
      if (it == symbols_.end()) bad(fmt::format("graph output '{}': no node produces it", o.name()));
      g_.outputs.push_back(GraphOutput{o.name(), it->second});
    }
    return std::move(g_);
  }

 private:
  Graph g_;
  int64_t opset_ = 1;
  std::map<std::string, ValueId> symbols_;  // ONNX value name -> IR value

  [[noreturn]] void bad(const std::string& what) const { g_.fail(ErrorKind::kBadFile, what); }
  [[noreturn]] void unsupported_file(const std::string& what) const { g_.fail(ErrorKind::kUnsupported, what); }

  void define(const std::string& name, ValueId id, const std::string& where) {
    if (!symbols_.emplace(name, id).second) bad(fmt::format("{}: defines '{}', which is already defined", where, name));
  }

  static std::optional<DType> dtype_of(int onnx_type) {
    switch (onnx_type) {
      case onnx::TensorProto_DataType_FLOAT: return DType::kFloat32;
      case onnx::TensorProto_DataType_DOUBLE: return DType::kFloat64;
      case onnx::TensorProto_DataType_INT64: return DType::kInt64;
      case onnx::TensorProto_DataType_INT32: return DType::kInt32;
      case onnx::TensorProto_DataType_INT8: return DType::kInt8;
      case onnx::TensorProto_DataType_BOOL: return DType::kBool;
      case onnx::TensorProto_DataType_BFLOAT16: return DType::kBFloat16;
      default: return std::nullopt;
    }
  }
  static std::string onnx_type_name(int t) {
    return onnx::TensorProto_DataType_IsValid(t) ? onnx::TensorProto_DataType_Name(t) : fmt::format("#{}", t);
  }

  ConstTensor parse_tensor(const onnx::TensorProto& t, const std::string& what) const {
    if (t.data_location() == onnx::TensorProto_DataLocation_EXTERNAL || t.external_data_size() > 0) {
      unsupported_file(fmt::format("{} keeps its data in an external file, which is not supported", what));
    }
    ConstTensor out;
    for (const int64_t d : t.dims()) {
      if (d < 0) bad(fmt::format("{} has a negative dimension {}", what, d));
      out.dims.push_back(d);
      if (!checked_elements(out.dims)) bad(fmt::format("{} has too many elements", what));
    }
    const auto count = static_cast<size_t>(*checked_elements(out.dims));
    const std::string& raw = t.raw_data();
    auto from_raw = [&]<typename T>(T /*tag*/, auto& dst) {
      if (raw.size() != count * sizeof(T)) {
        bad(fmt::format("{}: raw data has {} bytes, dims {} need {}", what, raw.size(), dims_string(out.dims),
                        count * sizeof(T)));
      }
      dst.resize(count);
      for (size_t i = 0; i < count; ++i) {
        T v;
        std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
        dst[i] = static_cast<std::remove_reference_t<decltype(dst[0])>>(v);
      }
    };
    auto from_field = [&](const auto& field, auto& dst) {
      if (static_cast<size_t>(field.size()) != count) {
        bad(fmt::format("{}: {} values stored, dims {} need {}", what, field.size(), dims_string(out.dims), count));
      }
      dst.assign(field.begin(), field.end());
    };
    const std::optional<DType> dt = dtype_of(t.data_type());
    if (!dt || *dt == DType::kBFloat16) {
      unsupported_file(fmt::format("{} has data type {} ({}); supported: float, double, int64, int32, int8, bool", what,
                                   onnx_type_name(t.data_type()), t.data_type()));
    }
    out.dtype = *dt;
    const bool raw_data = t.has_raw_data();
    switch (*dt) {
      case DType::kFloat32:
        if (raw_data) from_raw(float{}, out.data.f); else from_field(t.float_data(), out.data.f);
        break;
      case DType::kFloat64:
        if (raw_data) from_raw(double{}, out.data.f); else from_field(t.double_data(), out.data.f);
        break;
      case DType::kInt64:
        if (raw_data) from_raw(int64_t{}, out.data.i); else from_field(t.int64_data(), out.data.i);
        break;
      case DType::kInt32:
        if (raw_data) from_raw(int32_t{}, out.data.i); else from_field(t.int32_data(), out.data.i);
        break;
      case DType::kInt8:
        if (raw_data) from_raw(int8_t{}, out.data.i); else from_field(t.int32_data(), out.data.i);
        break;
      case DType::kBool:
        if (raw_data) from_raw(uint8_t{}, out.data.i); else from_field(t.int32_data(), out.data.i);
        for (int64_t& v : out.data.i) v = v != 0;
        break;
      case DType::kBFloat16: break;
    }
    return out;
  }

  void read_input(const onnx::ValueInfoProto& vi) {
    const std::string where = fmt::format("graph input '{}'", vi.name());
    if (!vi.type().has_tensor_type()) unsupported_file(where + ": is not a tensor");
    const auto& tt = vi.type().tensor_type();
    const std::optional<DType> dt = dtype_of(tt.elem_type());
    if (!dt) {
      unsupported_file(fmt::format("{}: has element type {}; only float32 inputs are supported", where,
                                   onnx_type_name(tt.elem_type())));
    }
    GraphInput in;
    in.has_shape = tt.has_shape();
    for (int i = 0; i < tt.shape().dim_size(); ++i) {
      const auto& d = tt.shape().dim(i);
      in.declared.push_back(d.has_dim_value() ? d.dim_value() : -1);
      in.dim_params.push_back(d.has_dim_param() ? d.dim_param() : std::string());
    }
    Value v;
    v.name = vi.name();
    v.dtype = *dt;
    in.value = g_.add_value(std::move(v));
    define(vi.name(), in.value, where);
    g_.inputs.push_back(std::move(in));
  }

  Attribute read_attribute(const onnx::AttributeProto& a, const std::string& where) const {
    Attribute r;
    switch (a.type()) {
      case onnx::AttributeProto_AttributeType_INT:
        r.kind = Attribute::Kind::kInt;
        r.i = a.i();
        break;
      case onnx::AttributeProto_AttributeType_FLOAT:
        r.kind = Attribute::Kind::kFloat;
        r.f = a.f();
        break;
      case onnx::AttributeProto_AttributeType_STRING:
        r.kind = Attribute::Kind::kString;
        r.s = a.s();
        break;
      case onnx::AttributeProto_AttributeType_INTS:
        r.kind = Attribute::Kind::kInts;
        r.ints.assign(a.ints().begin(), a.ints().end());
        break;
      case onnx::AttributeProto_AttributeType_FLOATS:
        r.kind = Attribute::Kind::kFloats;
        r.floats.assign(a.floats().begin(), a.floats().end());
        break;
      case onnx::AttributeProto_AttributeType_TENSOR:
        r.kind = Attribute::Kind::kTensor;
        if (a.has_t()) r.t = parse_tensor(a.t(), where);
        break;
      default:
        r.kind = Attribute::Kind::kOther;
        break;
    }
    return r;
  }

  void read_node(const onnx::NodeProto& pn, int index) {
    Node n;
    n.op_type = pn.op_type();
    n.domain = pn.domain() == "ai.onnx" ? std::string() : pn.domain();
    n.op = n.domain.empty() ? op_from_name(n.op_type) : Op::kUnknown;
    if (is_compiler_op(n.op)) n.op = Op::kUnknown;  // the compiler's own operators are not ONNX ones
    n.name = pn.name().empty() ? fmt::format("#{}", index) : pn.name();
    n.origin = {n.label()};
    const std::string where = fmt::format("node '{}' ({})", n.name, n.op_type);
    for (const auto& a : pn.attribute()) {
      // The ONNX checker's rule: an attribute name appears once per node. Two values would make
      // every later reader pick one of them silently (Node::attr returns the first).
      if (n.attr(a.name()) != nullptr) {
        bad(fmt::format("{}: attribute '{}' is given more than once; a node names each attribute at most once (ONNX "
                        "checker rule)", where, a.name()));
      }
      if (a.name().empty()) bad(fmt::format("{}: has an attribute without a name", where));
      n.attrs.emplace_back(a.name(), read_attribute(a, where));
    }
    for (const auto& in : pn.input()) {
      if (in.empty()) {
        n.inputs.push_back(kNoValue);
        continue;
      }
      const auto it = symbols_.find(in);
      if (it == symbols_.end()) bad(fmt::format("{}: reads '{}', which no initializer or earlier node defines", where, in));
      n.inputs.push_back(it->second);
    }
    normalize(n, where);
    for (const auto& out : pn.output()) {
      if (out.empty()) {
        n.outputs.push_back(kNoValue);
        continue;
      }
      Value v;
      v.name = out;
      const ValueId id = g_.add_value(std::move(v));
      define(out, id, where);
      n.outputs.push_back(id);
    }
    g_.nodes.push_back(std::move(n));
  }

  // What the opset changes but the meaning does not, made explicit for the passes.
  void normalize(Node& n, const std::string& where) {
    if ((n.op == Op::kSoftmax || n.op == Op::kLogSoftmax) && n.attr("axis") == nullptr) {
      Attribute a;
      a.kind = Attribute::Kind::kInt;
      a.i = opset_ < 13 ? 1 : -1;
      n.set_attr("axis", a);
    }
    if ((n.op == Op::kSoftmax || n.op == Op::kLogSoftmax) && opset_ < 13) {
      // Before opset 13 the input is coerced to 2-D at `axis`: the operator normalizes over all
      // the axes from `axis` on together (13 and later: over `axis` alone). Same for rank 2.
      Attribute a;
      a.kind = Attribute::Kind::kInt;
      a.i = 1;
      n.set_attr(std::string(kCoerce2dAttr), a);
    }
    if (n.op == Op::kReshape) {
      if (const Attribute* a = n.attr("shape")) {  // opset < 5: the shape is an attribute
        if (n.inputs.size() != 1) bad(fmt::format("{}: has {} inputs, expected 1", where, n.inputs.size()));
        if (a->kind != Attribute::Kind::kInts) bad(fmt::format("{}: attribute 'shape' is not a list of ints", where));
        TensorData d;
        d.i = a->ints;
        const auto len = static_cast<int64_t>(d.i.size());
        n.inputs.push_back(g_.add_constant(n.name + ".shape", DType::kInt64, {len}, std::move(d)));
        n.erase_attr("shape");
      }
    }
  }
};

}  // namespace

Graph import_onnx_graph(std::span<const uint8_t> bytes, std::string_view name) {
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

Graph import_onnx_file(const fs::path& path) {
  // Bounded like every reader of outside data (tpuw/file_io.h): protobuf cannot parse a message
  // above 2 GiB anyway, so /dev/zero or an endless pipe is refused instead of filling memory.
  const std::vector<uint8_t> bytes = read_file_bounded(path, kMaxOnnxBytes, "an ONNX model");
  return import_onnx_graph(bytes, path.string());
}

}  // namespace tpuw::compiler
