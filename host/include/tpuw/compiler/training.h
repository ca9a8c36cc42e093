// The compiler's training pass (docs/training.md): from an imported forward graph of trainable
// operators (Gemm, MatMul + Add, Relu, Flatten/Reshape) it extracts the chain of dense layers
// with their initializer names and stored weight layouts, and defines the backward graph and the
// SGD update that the device trainer lowers to device programs:
//
//   forward   per layer l: Z_l = X_l . op(W_l) + b_l (op = transpose for a weight stored [out, in],
//             PyTorch's Linear / Gemm transB=1), X_{l+1} = ReLU(Z_l) or Z_l; logits = Z_L
//   loss      mean softmax cross-entropy over the batch rows, on the host:
//             dZ_L = (softmax(Z_L) - onehot(labels)) / rows
//   backward  per layer from the last: dZ_l = SELECT(Z_l, dX_{l+1}) when ReLU (the derivative:
//             0 where Z <= 0); dW_l = dZ_l^T . X_l for a weight stored [out, in] (X_l^T . dZ_l for
//             [in, out]), so the gradient has the stored layout; db_l = COLSUM(dZ_l);
//             dX_l = dZ_l . W_l ([out, in]) or dZ_l . W_l^T ([in, out]) (not for the first layer)
//   update    per parameter, docs/numerics.md "SGD with momentum": three AXPY passes
//
// The float functions below evaluate exactly these formulas in fp32 or fp64 on the host: the
// reference that the device trainer and the finite-difference tests compare with.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "tpuw/compiler/ir.h"

namespace tpuw::compiler {

struct TrainLayer {
  std::string node;               ///< "name (Gemm)" of the model node, for messages
  std::string weight;             ///< initializer name of the weight
  std::string bias;               ///< initializer name of the bias, "" when the layer has none
  bool weight_out_in = false;     ///< stored [out, in] (Gemm transB=1), else [in, out]
  int64_t in = 0, out = 0;
  bool relu = false;
};

struct TrainModel {
  std::string source;
  int64_t input_features = 0;
  std::vector<TrainLayer> layers;
  /// Initial parameter values by initializer name, row-major in the model's own shapes.
  std::map<std::string, std::vector<float>> params;

  int64_t classes() const { return layers.empty() ? 0 : layers.back().out; }
  /// Multiply-accumulates of one step on `rows` rows: forward, dW, and dX of every layer but the first.
  uint64_t step_macs(int64_t rows) const;
};

/// The training pass on an imported graph: legalize, shape inference and folding, identity and
/// dead-code removal (as compile_float), then the chain from the input to the logits. A trailing
/// Softmax is dropped (the loss applies it). Throws Error(kUnsupported) naming the first operator
/// that cannot be trained (a non-constant weight, alpha/beta != 1, transA, a branch, any other op).
TrainModel build_training_model(Graph g);

/// Per-step results of the float reference.
template <typename T>
struct FloatGrad {
  double loss = 0;
  std::vector<T> logits;                            ///< rows x classes
  std::map<std::string, std::vector<T>> grads;      ///< by initializer name, stored layout
};

/// Forward + host loss + backward in precision T (float or double) with parameters `params`.
template <typename T>
FloatGrad<T> float_gradients(const TrainModel& m, const std::map<std::string, std::vector<T>>& params,
                             std::span<const T> x, std::span<const int64_t> labels, int64_t rows);

/// Mean softmax cross-entropy of logits [rows, classes] (double accumulation) and, when `grad` is
/// non-null, its gradient (softmax - onehot) / rows in fp32. Throws Error(kInvalidArgument) for a
/// label out of range.
double softmax_cross_entropy(std::span<const float> logits, std::span<const int64_t> labels, int64_t rows,
                             int64_t classes, std::vector<float>* grad);

}  // namespace tpuw::compiler
