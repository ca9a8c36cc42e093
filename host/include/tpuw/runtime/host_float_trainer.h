// HostFloatTrainer: runtime::Trainer in plain fp32 on the host CPU, the baseline every device
// training figure is reported next to (`tpuw train --backend host`), and a reference for tests.
//
// The model goes through the compiler's pipeline (import, legalize, folding, identity removal,
// strict shape inference, fuse_dense): what is left must be a chain of Dense layers (Gemm / MatMul
// + bias Add + Relu), Flatten/Reshape between them, and at most a Softmax at the end. The
// parameters are the model's own fp32 initializers, under their own names and in their own
// layouts (PyTorch's Linear exports Gemm transB=1 with W stored [out, in]; a Gemm's alpha/beta are
// kept as constant factors). The loss is computed on the last Dense layer's output (the logits):
// a final Softmax is the inference head and is skipped, as PyTorch's CrossEntropyLoss expects
// logits.
//
// Arithmetic (deterministic: one thread, fixed summation order, so two runs and a resumed run
// give the same bits):
//   forward   z = alpha * (x . W') + sum(scale_i * b_i), fp32 sums over k in increasing k; ReLU
//   loss      mean softmax cross-entropy over the step's rows, per row log-sum-exp with the max
//             subtracted, in double; dZ = (softmax - onehot) / rows, rounded to fp32
//   backward  dW = alpha * X^T dZ (stored layout), db = scale * column sums, dX = alpha * dZ W'^T,
//             ReLU backward passes the gradient where z > 0 (and where z is NaN, as PyTorch);
//             fp32 sums over rows in row order
//   update    torch.optim.SGD(lr, momentum, weight_decay), dampening 0, no Nesterov:
//             d = g + wd*w; v = d on the first step, else momentum*v + d; w = w + (-lr)*v
//             (each product and sum rounded to fp32 on its own)
// Errors: a model that cannot be trained is Error(kUnsupported) "FILE: node 'NAME' (OP): ..."
// naming the node and operator; bad step arguments are Error(kInvalidArgument).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "tpuw/compiler/ir.h"
#include "tpuw/runtime/trainer.h"

namespace tpuw::runtime {

/// One bias term added to a Dense layer's output: an fp32 initializer of n values (or one value
/// broadcast to all n), times `scale` (a Gemm's beta; 1 for a fused Add).
struct TrainableBias {
  std::string name;
  float scale = 1.0f;
  bool scalar = false;  // one value broadcast to every output feature
};

/// One Dense layer in the model's own terms.
struct TrainableDense {
  std::string label;              // "fc1 (Gemm) + relu1 (Relu)"
  int64_t k = 0, n = 0;           // input and output features
  std::string weight;             // the initializer name
  bool transposed = false;        // stored [n, k] (Gemm transB=1) instead of [k, n]
  float alpha = 1.0f;             // Gemm alpha
  std::vector<TrainableBias> biases;
  bool relu = false;
};

/// The trainable view of a model: its Dense chain and its parameters (initial values and dims).
struct TrainableModel {
  std::string source;
  std::string input_name;
  std::vector<int64_t> input_shape;  // as declared; -1 for the batch / symbolic dimensions
  int64_t input_features = 0;
  int64_t classes = 0;
  std::vector<TrainableDense> layers;
  std::map<std::string, compiler::Dims> param_dims;          // every trained initializer
  std::map<std::string, std::vector<float>> initial_params;  // their values in the model
};

/// Runs the compiler pipeline on an imported graph and describes it for training; throws
/// Error(kUnsupported) naming the node for anything that cannot be trained (an operator other
/// than Gemm/MatMul/Add/Relu/Flatten/Reshape/Identity/Dropout and a final Softmax, a weight or
/// bias that is not an initializer, an initializer shared by two layers).
TrainableModel describe_trainable(compiler::Graph g);
/// Reads the ONNX file and describes it (describe_trainable).
TrainableModel describe_trainable(const std::filesystem::path& model);

class HostFloatTrainer final : public Trainer {
 public:
  /// `batch` >= 1 (most rows per step); the SGD hyper-parameters are checked: lr finite and > 0,
  /// momentum and weight decay finite and >= 0 (Error(kInvalidArgument) otherwise).
  HostFloatTrainer(TrainableModel model, int64_t batch, SgdConfig sgd);
  HostFloatTrainer(const std::filesystem::path& model, int64_t batch, SgdConfig sgd);

  TrainStepReport step(std::span<const float> inputs, std::span<const int64_t> labels, int64_t rows) override;
  std::vector<float> logits(std::span<const float> inputs, int64_t rows) override;
  TrainState state() const override;
  void load_state(const TrainState& s) override;
  int64_t batch() const override { return batch_; }
  int64_t classes() const override { return model_.classes; }
  std::string name() const override { return "host-fp32"; }

  const TrainableModel& model() const { return model_; }

 private:
  // Forward pass over `rows` rows; keeps each layer's input and pre-activation for backward.
  void forward(std::span<const float> x, int64_t rows);

  TrainableModel model_;
  int64_t batch_ = 1;
  SgdConfig sgd_;
  std::map<std::string, std::vector<float>> params_;
  std::map<std::string, std::vector<float>> momentum_;
  int64_t steps_ = 0;
  // Work buffers of the last forward pass: acts_[i] is layer i's input, pre_[i] its output before
  // ReLU; acts_.back() the logits.
  std::vector<std::vector<float>> acts_, pre_;
};

/// Validates SGD hyper-parameters (shared by the trainers and the CLI): lr finite and > 0,
/// momentum and weight_decay finite and >= 0; Error(kInvalidArgument) naming the option.
void check_sgd_config(const SgdConfig& sgd);

}  // namespace tpuw::runtime
