// The graph IR of the compiler: typed tensors (values) and the operations between them (nodes).
//
// A Graph is what the ONNX importer (tpuw/compiler/onnx_importer.h) produces and every pass
// (tpuw/compiler/passes.h) reads and rewrites; docs/compiler.md describes the pipeline. Nothing
// here knows about ONNX's protobuf types: an operator is an Op (plus the name it was written
// with), attributes are plain values, initializers are constant values with their data.
//
//   values   a Value is one tensor: name, dtype, shape, layout, and for constants its data.
//            Shapes carry the batch as a symbol (kBatch) so one compiled graph serves any batch;
//            a shape is unknown (nullopt) until shape inference has run.
//   nodes    a Node reads input values and defines output values. Nodes are kept in
//            topological order; every value is defined once (by one node, or as a graph input,
//            or as a constant) before it is read.
//   graph    values, nodes, the graph inputs and the named graph outputs.
//
// Values are addressed by ValueId (an index into Graph::values) and never move; a pass that
// rewrites a node keeps the ids of the values it does not touch. Nodes are a plain vector.
// verify() checks the invariants; dump() prints the graph for humans and for tests.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tpuw/error.h"

namespace tpuw::compiler {

/// Element types. int8/int32/bf16/fp32 are what the device computes in; int64, bool and fp64 appear
/// in imported constants (shape tensors, Dropout's training_mode, double initializers).
enum class DType : uint8_t { kFloat32, kBFloat16, kInt8, kInt32, kInt64, kBool, kFloat64 };

/// "fp32", "bf16", "int8", "int32", "int64", "bool", "fp64".
std::string_view dtype_name(DType t);
/// True for fp32, bf16 and fp64 (their constant data lives in TensorData::f).
bool is_float(DType t);

/// Memory layout of a tensor. Today everything is row-major in the model's own dimension order
/// (ONNX's NCHW for images); device-preferred layouts arrive with convolutions.
enum class Layout : uint8_t { kRowMajor };

/// The symbolic batch dimension: in a shape, and as an element of an int64 shape tensor (what
/// `Shape` of an activation folds to). Never a real size.
constexpr int64_t kBatch = std::numeric_limits<int64_t>::min();

using Dims = std::vector<int64_t>;

/// "[batch, 64]".
std::string dims_string(std::span<const int64_t> dims);

/// Largest element count of one tensor (per batch row for batched tensors); also keeps every
/// dimension product well inside int64.
constexpr int64_t kMaxElements = int64_t{1} << 32;

/// Product of `dims` skipping kBatch entries; nullopt when a dimension is negative or the product
/// exceeds kMaxElements (overflow-safe: never computes a product above the limit).
std::optional<int64_t> checked_elements(std::span<const int64_t> dims);

/// Constant contents, row-major. Floating types keep their values in `f` (exact: fp32 and fp64
/// values are doubles), integer and bool types in `i` (int64 shape tensors may hold kBatch).
struct TensorData {
  std::vector<double> f;
  std::vector<int64_t> i;

  size_t size() const { return f.empty() ? i.size() : f.size(); }
  double as_double(size_t k) const { return f.empty() ? static_cast<double>(i[k]) : f[k]; }
};

using ValueId = int32_t;
constexpr ValueId kNoValue = -1;  // an omitted optional input or output

struct Value {
  std::string name;
  DType dtype = DType::kFloat32;
  std::optional<Dims> shape;        // unknown until shape inference (constants always know theirs)
  Layout layout = Layout::kRowMajor;
  std::optional<TensorData> data;   // set for constants (initializers, folded values)
  /// Quantization scale of an int8/int32 tensor (real = q * scale): one entry per tensor, or one
  /// per element of the last dimension (per column). Empty for unquantized tensors.
  std::vector<float> scale;

  bool is_constant() const { return data.has_value(); }
};

/// Operator kinds. The ONNX operators the importer knows by name, plus the compiler's own
/// (kDense: a matrix product with its bias and activation fused). Anything else imports as
/// kUnknown with its name kept in Node::op_type, for a pass to report.
enum class Op : uint8_t {
  kUnknown,
  kConstant,
  kIdentity,
  kDropout,
  kGemm,
  kMatMul,
  kAdd,
  kRelu,
  kFlatten,
  kReshape,
  kSoftmax,
  kShape,
  kGather,
  kUnsqueeze,
  kConcat,
  kConv,   // 2-D convolution (tpuw/compiler/conv.h); after fusion attribute relu = 1 when a Relu
           // followed it
  kAveragePool,        // run as a convolution with identity weights / window size (conv.h)
  kGlobalAveragePool,
  kPad,                // constant zero padding of H and W: folded into the Conv / AveragePool after it
  kMaxPool,            // 2-D max pooling: int8 max on the host between device programs (conv.h)
  kSub,                // Sub/Mul/Div/BatchNormalization/Transpose: per-row affine maps, run as or
  kMul,                // folded into dense layers (tpuw/compiler/feature_maps.h)
  kDiv,
  kBatchNormalization,
  kTranspose,
  kLogSoftmax,          // Softmax/LogSoftmax/LayerNormalization: host operators after the device
  kLayerNormalization,  // program (fp32, per row; nn::HostStep in tpuw/nn/float_network.h)
  kSqueeze,             // Squeeze/Unsqueeze/Reshape/Flatten of an activation: layout only
  kSigmoid,            // Sigmoid .. Erf: elementwise functions, fused into the Dense before them
  kTanh,               // (tpuw/compiler/activations.h) and run as ACTIVATE's int8 lookup table
  kLeakyRelu,
  kClip,
  kHardSigmoid,
  kHardSwish,
  kGelu,               // also PyTorch's Erf form x * 0.5 * (1 + Erf(x / sqrt 2)), matched by fuse_gelu
  kErf,
  kCast,              // Cast .. Where: shape arithmetic, evaluated by constant folding (PyTorch's
  kSlice,             // x.view(b, g, c // g, h, w), chunk, ...); left over on an activation they are
  kRange,             // reported, except a Slice along a CNN's channels (channel_moves.h)
  kConstantOfShape,
  kEqual,
  kWhere,
  kReduceMean,        // over H and W of [batch, C, H, W]: a GlobalAveragePool (channel_moves.h)
  kDense,  // inputs: x [batch, k], w [k, n] fp32 constant, b [n] fp32 constant; attribute relu;
           // attributes act, act_alpha, act_beta: a function after it (activations.h)
  // The compiler's quantized operators (the quantize pass, tpuw/compiler/quantize.h):
  kQuantize,    // x fp32 -> int8 with the output's per-tensor scale: sat8(round(x / scale))
  kQDense,      // inputs: x int8 [batch, k], w_q int8 [k, n], bias_q int32 [n], and unless
                // int32_output: mult int32 [n], shift int32 [n] (and, for a function, lut int8 [256]);
                // attributes relu, int32_output.
                // Output int8 (per-tensor scale) or, with int32_output, int32 acc + bias_q
                // (per-column scale; the ReLU then runs in the Dequantize after it)
  kDequantize,  // x int32 -> fp32: float(x) * scale[j], then max(., 0) when attribute relu
};

/// True for the compiler's own operators (Dense and the quantized ones): never imported from ONNX.
inline bool is_compiler_op(Op op) { return op >= Op::kDense; }

/// The Op of an operator name ("Gemm" -> kGemm); kUnknown for any other name.
Op op_from_name(std::string_view name);
/// The canonical name of an Op ("Gemm"); "?" for kUnknown.
std::string_view op_name(Op op);

struct ConstTensor {
  DType dtype = DType::kFloat32;
  Dims dims;
  TensorData data;
};

struct Attribute {
  enum class Kind : uint8_t { kInt, kFloat, kString, kInts, kFloats, kTensor, kOther };
  Kind kind = Kind::kOther;
  int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::optional<ConstTensor> t;
};

struct Node {
  Op op = Op::kUnknown;
  std::string op_type;  // the operator's name as written (ONNX op_type; "Dense" for kDense)
  std::string domain;   // "" for the default operator set
  std::string name;     // the model's node name, or "#index" when it has none
  std::vector<std::pair<std::string, Attribute>> attrs;  // in file order
  std::vector<ValueId> inputs;   // kNoValue for an omitted optional input
  std::vector<ValueId> outputs;  // kNoValue for an omitted optional output
  std::vector<std::string> origin;  // "name (Op)" of each model node merged into this one, in order

  const Attribute* attr(std::string_view key) const;
  void set_attr(std::string key, Attribute a);
  void erase_attr(std::string_view key);
  /// "name (Op)": how reports and layer names refer to the node.
  std::string label() const { return name + " (" + op_type + ")"; }
};

/// The importer's attribute on a Softmax/LogSoftmax of opset < 13 (value 1): the axes from `axis`
/// on are normalized together, the input coerced to 2-D (opset 13 normalizes over `axis` alone).
constexpr std::string_view kCoerce2dAttr = "tpuw.coerce_2d";

struct GraphInput {
  ValueId value = kNoValue;
  bool has_shape = false;                // the model declares a shape
  std::vector<int64_t> declared;         // declared dims; -1 where not a fixed size
  std::vector<std::string> dim_params;   // the symbolic names ("" for fixed sizes)
};

struct GraphOutput {
  std::string name;  // the model's output name (kept when passes replace the value behind it)
  ValueId value = kNoValue;
};

class Graph {
 public:
  std::string source;  // the file (or name) the graph came from; prefixes every error message
  std::vector<Value> values;
  std::vector<Node> nodes;  // topological order
  std::vector<GraphInput> inputs;
  std::vector<GraphOutput> outputs;
  /// A Reshape whose constant shape fixes dimension 0 (ONNX's [2, 12] for a [2, 3, 4] input) keeps
  /// the batch only for exactly that many rows. Shape inference accepts it when this is set, by a
  /// consumer that records the row count and checks it at run time (compile_float:
  /// nn::FloatNetwork::fixed_batch); otherwise it refuses it (the CNN and training paths).
  bool batch_may_be_fixed = false;
  /// Several graph inputs merged into the one input row (merge_graph_inputs): each input's name,
  /// declared shape and features, in row order. Empty for a graph with its own one input.
  struct InputPart {
    std::string name;
    std::vector<int64_t> declared;
    int64_t features = 0;
  };
  std::vector<InputPart> input_parts;

  ValueId add_value(Value v);
  ValueId add_constant(std::string name, DType dtype, Dims dims, TensorData data);

  Value& value(ValueId id) { return values.at(static_cast<size_t>(id)); }
  const Value& value(ValueId id) const { return values.at(static_cast<size_t>(id)); }
  bool is_constant(ValueId id) const { return id != kNoValue && value(id).is_constant(); }
  bool is_graph_output(ValueId id) const;

  /// For every value, the indices of the nodes that read it (in node order).
  std::vector<std::vector<size_t>> consumers() const;
  /// Every read of `from` (node inputs and graph outputs) reads `to` instead.
  void replace_uses(ValueId from, ValueId to);

  /// "SOURCE: node 'NAME' (OP): what", as Error(kind).
  [[noreturn]] void fail(ErrorKind kind, const Node& n, std::string_view what) const;
  /// "SOURCE: what", as Error(kind).
  [[noreturn]] void fail(ErrorKind kind, std::string_view what) const;
};

/// Checks the invariants: value ids in range, every value defined at most once (by one node
/// output, a graph input or as a constant), every node input defined before the node reads it
/// (topological order), constants' data matching their shapes, every graph output defined.
/// Throws Error(kInternal) naming the violation: a pass that breaks them has a bug.
void verify(const Graph& g);

/// A readable listing: inputs, constants (name, dtype, shape), nodes with their attributes and
/// typed inputs/outputs, outputs. Deterministic, so tests can compare it.
std::string dump(const Graph& g);

}  // namespace tpuw::compiler
