// The float interpreter of the IR (tpuw/compiler/quantize.h): the float reference the quantize
// pass calibrates with. One case per operator; a new operator (convolution, pooling) adds its own.
#include <fmt/format.h>

#include <algorithm>

#include "pass_util.h"
#include "tpuw/compiler/activations.h"
#include "tpuw/compiler/conv.h"
#include "tpuw/compiler/quantize.h"

namespace tpuw::compiler {
namespace {

using detail::attr_int;
using detail::features;

/// Elements per batch row of an activation value.
uint64_t row_size(const Graph& g, ValueId v) { return static_cast<uint64_t>(*checked_elements(features(*g.value(v).shape))); }

class Interpreter {
 public:
  Interpreter(const Graph& g, uint64_t batch) : g_(g), batch_(batch), t_(g.values.size()) {}

  std::vector<std::vector<float>> run(std::span<const float> x) {
    // Several graph inputs (a CNN with an image and a vector, or two images): each row of x is
    // every input's values side by side, in graph order.
    uint64_t row = 0;
    for (const GraphInput& gi : g_.inputs) {
      const Value& v = g_.value(gi.value);
      if (v.dtype != DType::kFloat32 || !v.shape) {
        g_.fail(ErrorKind::kUnsupported, fmt::format("graph input '{}' must be a float32 tensor of known shape", v.name));
      }
      row += row_size(g_, gi.value);
    }
    if (g_.inputs.empty()) g_.fail(ErrorKind::kUnsupported, "the float interpreter needs a graph input");
    if (x.size() != batch_ * row) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: input has {} values, expected batch {} x {} features",
                                                           g_.source, x.size(), batch_, row));
    }
    uint64_t off = 0;
    for (const GraphInput& gi : g_.inputs) {
      const uint64_t f = row_size(g_, gi.value);
      std::vector<float>& t = t_[static_cast<size_t>(gi.value)];
      t.resize(batch_ * f);
      for (uint64_t b = 0; b < batch_; ++b) {
        std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(b * row + off), f, t.begin() + static_cast<std::ptrdiff_t>(b * f));
      }
      off += f;
    }
    for (const Node& n : g_.nodes) node(n);
    return std::move(t_);
  }

 private:
  const Graph& g_;
  uint64_t batch_;
  std::vector<std::vector<float>> t_;

  const std::vector<float>& in(const Node& n, size_t i) const {
    const ValueId v = n.inputs[i];
    if (g_.is_constant(v)) g_.fail(ErrorKind::kUnsupported, n, "the float interpreter expects an activation input, not a constant");
    return t_[static_cast<size_t>(v)];
  }
  std::vector<float>& out(const Node& n) { return t_[static_cast<size_t>(n.outputs[0])]; }

  void node(const Node& n) {
    switch (n.op) {
      case Op::kDense: return dense(n);
      case Op::kConv:
      case Op::kAveragePool:
      case Op::kGlobalAveragePool:
      case Op::kMaxPool: out(n) = conv_float(g_, n, in(n, 0), batch_); return;
      case Op::kFlatten:
      case Op::kReshape: out(n) = in(n, 0); return;
      case Op::kSigmoid:
      case Op::kTanh:
      case Op::kLeakyRelu:
      case Op::kClip:
      case Op::kHardSigmoid:
      case Op::kHardSwish:
      case Op::kGelu:
      case Op::kErf: {  // a function after a CNN layer (its int8 lookup table's float definition)
        const nn::Activation a = activation_of(g_, n);
        std::vector<float> y = in(n, 0);
        for (float& v : y) v = static_cast<float>(nn::act_apply(a, static_cast<double>(v)));
        out(n) = std::move(y);
        return;
      }
      case Op::kRelu: {  // (a CNN's Relu after a residual Add or a Concat)
        std::vector<float> y = in(n, 0);
        for (float& v : y) v = std::max(v, 0.0f);
        out(n) = std::move(y);
        return;
      }
      case Op::kAdd: {  // two activations of one shape (a residual Add)
        if (g_.is_constant(n.inputs[0]) || g_.is_constant(n.inputs[1])) {
          g_.fail(ErrorKind::kUnsupported, n, "is not supported by the float interpreter (an Add of a constant)");
        }
        const std::vector<float>& a = in(n, 0);
        const std::vector<float>& b = in(n, 1);
        if (a.size() != b.size()) g_.fail(ErrorKind::kUnsupported, n, "the float interpreter adds activations of one shape");
        std::vector<float> y(a.size());
        for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(static_cast<double>(a[i]) + b[i]);
        out(n) = std::move(y);
        return;
      }
      case Op::kConcat: {  // activations along axis 1 (channels or features), row by row
        if (const int64_t axis = attr_int(g_, n, "axis", 0); axis != 1 && axis != -static_cast<int64_t>(g_.value(n.outputs[0]).shape->size()) + 1) {
          g_.fail(ErrorKind::kUnsupported, n, "the float interpreter concatenates along axis 1 only");
        }
        std::vector<float> y;
        y.reserve(batch_ * row_size(g_, n.outputs[0]));
        for (uint64_t r = 0; r < batch_; ++r) {
          for (size_t k = 0; k < n.inputs.size(); ++k) {
            const uint64_t f = row_size(g_, n.inputs[k]);
            const std::vector<float>& x = in(n, k);
            y.insert(y.end(), x.begin() + static_cast<std::ptrdiff_t>(r * f), x.begin() + static_cast<std::ptrdiff_t>((r + 1) * f));
          }
        }
        out(n) = std::move(y);
        return;
      }
      case Op::kSoftmax: {
        std::vector<float> y = in(n, 0);
        const Dims& d = *g_.value(n.inputs[0]).shape;
        const int64_t axis = attr_int(g_, n, "axis", -1);
        if (axis != -1 && axis != static_cast<int64_t>(d.size()) - 1) {
          g_.fail(ErrorKind::kUnsupported, n, "the float interpreter runs Softmax over the last axis only");
        }
        nn::softmax_rows(y, static_cast<uint32_t>(d.back()));
        out(n) = std::move(y);
        return;
      }
      default:
        if (is_activation_op(n.op)) {  // Sigmoid, Tanh, Clip, ... after a convolution (bf16 CNNs)
          const nn::Activation a = activation_of(g_, n);
          std::vector<float> y = in(n, 0);
          for (float& v : y) v = static_cast<float>(nn::act_apply(a, double{v}));
          out(n) = std::move(y);
          return;
        }
        g_.fail(ErrorKind::kUnsupported, n, "is not supported by the float interpreter");
    }
  }

  // Exactly nn::forward_float_layers: weights and bias as float32 (what lowering stores), double
  // accumulation, ReLU in double, float32 result.
  void dense(const Node& n) {
    const Value& wv = g_.value(n.inputs[1]);
    const Value& bv = g_.value(n.inputs[2]);
    const auto k = static_cast<uint32_t>((*wv.shape)[0]);
    const auto nn = static_cast<uint32_t>((*wv.shape)[1]);
    std::vector<float> w(wv.data->f.begin(), wv.data->f.end());
    std::vector<float> b(bv.data->f.begin(), bv.data->f.end());
    const bool relu = attr_int(g_, n, "relu", 0) != 0;
    const nn::Activation act = dense_activation(g_, n);
    const std::vector<float>& x = in(n, 0);
    std::vector<float> y(batch_ * nn);
    std::vector<double> acc(nn);
    for (uint64_t r = 0; r < batch_; ++r) {
      for (uint32_t j = 0; j < nn; ++j) acc[j] = b[j];
      for (uint32_t kk = 0; kk < k; ++kk) {
        const double xv = x[r * k + kk];
        const float* wrow = w.data() + size_t{kk} * nn;
        for (uint32_t j = 0; j < nn; ++j) acc[j] += xv * wrow[j];
      }
      for (uint32_t j = 0; j < nn; ++j) {
        const double v = relu ? std::max(acc[j], 0.0) : acc[j];
        y[r * nn + j] = static_cast<float>(act.none() ? v : nn::act_apply(act, v));
      }
    }
    out(n) = std::move(y);
  }
};

}  // namespace

std::vector<std::vector<float>> interpret_float(const Graph& g, std::span<const float> x, uint64_t batch) {
  return Interpreter(g, batch).run(x);
}

}  // namespace tpuw::compiler
