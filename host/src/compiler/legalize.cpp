// Legalization (tpuw/compiler/passes.h): every node is an operator we implement, with the
// attributes, attribute values and arity we implement. Reports, changes nothing.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "pass_util.h"
#include "tpuw/compiler/conv.h"
#include "tpuw/compiler/passes.h"

namespace tpuw::compiler {
namespace {

using detail::attr_float;
using detail::attr_int;

constexpr int kMany = std::numeric_limits<int>::max();

struct OpRule {
  Op op;
  std::vector<std::string_view> attrs;
  int min_in, max_in;
};

const std::vector<OpRule>& rules() {
  static const std::vector<OpRule> r{
      {Op::kConstant, {"value", "value_float", "value_floats", "value_int", "value_ints"}, 0, 0},
      {Op::kIdentity, {}, 1, 1},
      {Op::kDropout, {"ratio", "seed", "is_test"}, 1, 3},
      {Op::kGemm, {"alpha", "beta", "transA", "transB", "broadcast"}, 2, 3},
      {Op::kMatMul, {}, 2, 2},
      {Op::kAdd, {"broadcast", "axis"}, 2, 2},
      {Op::kRelu, {}, 1, 1},
      {Op::kFlatten, {"axis"}, 1, 1},
      {Op::kReshape, {"allowzero"}, 2, 2},
      {Op::kSoftmax, {"axis", kCoerce2dAttr}, 1, 1},
      {Op::kShape, {"start", "end"}, 1, 1},
      {Op::kGather, {"axis"}, 2, 2},
      {Op::kUnsqueeze, {"axes"}, 1, 2},
      {Op::kConcat, {"axis"}, 1, kMany},
      {Op::kConv, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}, 2, 3},
      {Op::kAveragePool,
       {"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides"}, 1, 1},
      {Op::kGlobalAveragePool, {}, 1, 1},
      {Op::kMaxPool, {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"}, 1, 1},
      {Op::kPad, {"mode", "pads", "value"}, 1, 4},
      {Op::kSub, {"broadcast", "axis"}, 2, 2},
      {Op::kMul, {"broadcast", "axis"}, 2, 2},
      {Op::kDiv, {"broadcast", "axis"}, 2, 2},
      {Op::kBatchNormalization, {"epsilon", "momentum", "spatial", "training_mode"}, 5, 5},
      {Op::kTranspose, {"perm"}, 1, 1},
      {Op::kLogSoftmax, {"axis", kCoerce2dAttr}, 1, 1},
      {Op::kLayerNormalization, {"axis", "epsilon", "stash_type"}, 2, 3},
      {Op::kSqueeze, {"axes"}, 1, 2},
      {Op::kSigmoid, {}, 1, 1},
      {Op::kTanh, {}, 1, 1},
      {Op::kLeakyRelu, {"alpha"}, 1, 1},
      {Op::kClip, {"min", "max"}, 1, 3},
      {Op::kHardSigmoid, {"alpha", "beta"}, 1, 1},
      {Op::kHardSwish, {}, 1, 1},
      {Op::kGelu, {"approximate"}, 1, 1},
      {Op::kErf, {}, 1, 1},
      {Op::kCast, {"to"}, 1, 1},
      {Op::kSlice, {"starts", "ends", "axes"}, 1, 5},
      {Op::kRange, {}, 3, 3},
      {Op::kConstantOfShape, {"value"}, 1, 1},
      {Op::kEqual, {}, 2, 2},
      {Op::kWhere, {}, 3, 3},
      {Op::kReduceMean, {"axes", "keepdims"}, 1, 1},
      {Op::kDense, {"relu", "act", "act_alpha", "act_beta", "act_node"}, 3, 3},
  };
  return r;
}

void check_node(const Graph& g, const Node& n) {
  if (!n.domain.empty()) {
    g.fail(ErrorKind::kUnsupported, n,
           fmt::format("operator domain '{}' is not supported (only the default ONNX domain)", n.domain));
  }
  const auto& rs = rules();
  const auto rule = std::find_if(rs.begin(), rs.end(), [&](const OpRule& r) { return r.op == n.op; });
  if (n.op == Op::kUnknown || rule == rs.end()) {
    g.fail(ErrorKind::kUnsupported, n,
           "operator is not supported (supported: Conv, AveragePool, GlobalAveragePool, MaxPool, Pad, Gemm, MatMul, Add, Sub, Mul, Div, "
           "BatchNormalization, Transpose, Relu, Sigmoid, Tanh, LeakyRelu, Clip, HardSigmoid, HardSwish, Gelu, Erf, "
           "Flatten, Reshape, Squeeze, Unsqueeze, Softmax, LogSoftmax, LayerNormalization, Identity, "
           "Dropout, Constant, ReduceMean over H and W, Slice of a CNN's channels, and Shape, Gather, Unsqueeze, "
           "Squeeze, Concat, Slice, Cast, Range, ConstantOfShape, Equal, Where, Add, Sub, Mul, Div where they fold to "
           "constants)");
  }
  for (const auto& [key, a] : n.attrs) {
    if (std::find(rule->attrs.begin(), rule->attrs.end(), key) == rule->attrs.end()) {
      g.fail(ErrorKind::kUnsupported, n, fmt::format("attribute '{}' is not supported", key));
    }
  }
  const auto nin = static_cast<int>(n.inputs.size());
  if (n.op == Op::kConstant) {
    if (nin != 0 || n.outputs.size() != 1 || n.attrs.size() != 1) {
      g.fail(ErrorKind::kBadFile, n, "a Constant has no inputs, one output and one attribute");
    }
    const auto& [key, a] = n.attrs[0];
    const Attribute::Kind want = key == "value"          ? Attribute::Kind::kTensor
                                 : key == "value_float"  ? Attribute::Kind::kFloat
                                 : key == "value_floats" ? Attribute::Kind::kFloats
                                 : key == "value_int"    ? Attribute::Kind::kInt
                                                         : Attribute::Kind::kInts;
    if (a.kind != want || (want == Attribute::Kind::kTensor && !a.t)) {
      g.fail(ErrorKind::kBadFile, n, fmt::format("attribute '{}' holds no {}", key,
                                                 want == Attribute::Kind::kTensor ? "tensor" : "value of its type"));
    }
  } else {
    if (nin < rule->min_in || nin > rule->max_in) {
      g.fail(ErrorKind::kBadFile, n,
             fmt::format("has {} inputs, expected {}", nin,
                         rule->min_in == rule->max_in ? fmt::format("{}", rule->min_in)
                         : rule->max_in == kMany     ? fmt::format("at least {}", rule->min_in)
                                                     : fmt::format("{} to {}", rule->min_in, rule->max_in)));
    }
    if (n.outputs.empty() || n.outputs[0] == kNoValue) g.fail(ErrorKind::kBadFile, n, "has no output");
    const size_t max_out = n.op == Op::kDropout || n.op == Op::kMaxPool ? 2  // MaxPool: Indices
                           : n.op == Op::kBatchNormalization               ? 3
                           : n.op == Op::kLayerNormalization               ? 3  // Mean, InvStdDev
                                                                            : 1;
    if (n.outputs.size() > max_out) {
      g.fail(ErrorKind::kBadFile, n, fmt::format("has {} outputs; {} defines at most {}", n.outputs.size(), n.op_type, max_out));
    }
    for (int i = 0; i < std::min(nin, rule->min_in); ++i) {
      if (n.inputs[static_cast<size_t>(i)] == kNoValue) g.fail(ErrorKind::kBadFile, n, fmt::format("input {} is empty", i));
    }
  }
  switch (n.op) {
    case Op::kIdentity:
      if (n.outputs.size() != 1) g.fail(ErrorKind::kBadFile, n, "Identity has one output");
      break;
    case Op::kDropout:
      if (attr_int(g, n, "is_test", 1) == 0) g.fail(ErrorKind::kUnsupported, n, "is_test=0 (training mode) is not supported");
      break;
    case Op::kGemm: {
      if (attr_int(g, n, "transA", 0) != 0) {
        g.fail(ErrorKind::kUnsupported, n, "transA=1 is not supported (A must be the activation [batch, k])");
      }
      const int64_t tb = attr_int(g, n, "transB", 0);
      if (tb != 0 && tb != 1) g.fail(ErrorKind::kBadFile, n, fmt::format("transB={}", tb));
      // alpha and beta are folded into the weight and bias: a NaN or infinite one would only be
      // noticed as a "non-finite weight", naming a tensor the model does not have.
      for (const char* name : {"alpha", "beta"}) {
        const float v = attr_float(g, n, name, 1.0f);
        if (!std::isfinite(v)) {
          g.fail(ErrorKind::kBadFile, n, fmt::format("attribute '{}' is {} (must be a finite number)", name, v));
        }
      }
      break;
    }
    case Op::kLayerNormalization:
      (void)attr_int(g, n, "axis", -1);
      (void)attr_int(g, n, "stash_type", 1);
      if (!std::isfinite(attr_float(g, n, "epsilon", 1e-5f)) || attr_float(g, n, "epsilon", 1e-5f) < 0) {
        g.fail(ErrorKind::kBadFile, n, "attribute 'epsilon' must be a finite number >= 0");
      }
      break;
    case Op::kSqueeze: {
      const Attribute* a = n.attr("axes");
      if (a != nullptr && a->kind != Attribute::Kind::kInts) g.fail(ErrorKind::kBadFile, n, "attribute 'axes' is not a list of ints");
      if (a != nullptr && n.inputs.size() >= 2 && n.inputs[1] != kNoValue) {
        g.fail(ErrorKind::kBadFile, n, "has its axes both as the attribute (opset < 13) and as input 1 (opset >= 13)");
      }
      break;
    }
    case Op::kFlatten:
    case Op::kLogSoftmax:
    case Op::kSoftmax:
    case Op::kGather:
    case Op::kConcat: (void)attr_int(g, n, "axis", 0); break;
    case Op::kReshape: (void)attr_int(g, n, "allowzero", 0); break;
    case Op::kCast:
      if (n.attr("to") == nullptr) g.fail(ErrorKind::kBadFile, n, "Cast needs attribute 'to'");
      (void)attr_int(g, n, "to", 0);
      break;
    case Op::kReduceMean: {
      const Attribute* a = n.attr("axes");
      if (a != nullptr && a->kind != Attribute::Kind::kInts) g.fail(ErrorKind::kBadFile, n, "attribute 'axes' is not a list of ints");
      (void)attr_int(g, n, "keepdims", 1);
      break;
    }
    case Op::kSlice:
      for (const char* key : {"starts", "ends", "axes"}) {
        const Attribute* a = n.attr(key);
        if (a != nullptr && a->kind != Attribute::Kind::kInts) {
          g.fail(ErrorKind::kBadFile, n, fmt::format("attribute '{}' is not a list of ints", key));
        }
      }
      if ((n.attr("starts") == nullptr) != (n.inputs.size() >= 3)) {
        g.fail(ErrorKind::kBadFile, n, "needs starts and ends either as attributes (opset < 10) or as inputs 1 and 2");
      }
      if (n.attr("starts") != nullptr && n.attr("ends") == nullptr) g.fail(ErrorKind::kBadFile, n, "has 'starts' but no 'ends'");
      break;
    case Op::kConstantOfShape:
      if (const Attribute* a = n.attr("value"); a != nullptr && (a->kind != Attribute::Kind::kTensor || !a->t)) {
        g.fail(ErrorKind::kBadFile, n, "attribute 'value' is not a tensor");
      }
      break;
    case Op::kBatchNormalization:
      if (attr_int(g, n, "training_mode", 0) != 0) {
        g.fail(ErrorKind::kUnsupported, n, "training_mode=1 (statistics over the batch) is not supported");
      }
      (void)attr_float(g, n, "epsilon", 1e-5f);
      break;
    case Op::kTranspose: {
      const Attribute* a = n.attr("perm");
      if (a != nullptr && a->kind != Attribute::Kind::kInts) g.fail(ErrorKind::kBadFile, n, "attribute 'perm' is not a list of ints");
      break;
    }
    case Op::kConv:
    case Op::kAveragePool:
    case Op::kMaxPool: check_conv_attributes(g, n); break;
    case Op::kShape:
      (void)attr_int(g, n, "start", 0);
      (void)attr_int(g, n, "end", 0);
      break;
    case Op::kUnsqueeze: {
      const Attribute* a = n.attr("axes");
      if (a != nullptr && a->kind != Attribute::Kind::kInts) g.fail(ErrorKind::kBadFile, n, "attribute 'axes' is not a list of ints");
      if ((a == nullptr) == (n.inputs.size() < 2 || n.inputs[1] == kNoValue)) {
        g.fail(ErrorKind::kBadFile, n, "needs its axes either as the attribute (opset < 13) or as input 1 (opset >= 13)");
      }
      break;
    }
    default: break;
  }
}

}  // namespace

void legalize(const Graph& g) {
  for (const Node& n : g.nodes) check_node(g, n);
}

}  // namespace tpuw::compiler
