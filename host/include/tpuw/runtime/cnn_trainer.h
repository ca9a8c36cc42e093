// Training CNNs in bf16 (issue 13; docs/training.md "Training CNNs"): runtime::CnnTrainer over the
// CNN training pass (tpuw/compiler/cnn_training.h). One step on `rows` images:
//   forward   per layer: a Conv / AveragePool the bf16 convolution program (runtime/conv_bf16.h,
//             fused bias + ReLU, bf16 out), a MaxPool the inference max-pool program
//             (runtime/maxpool.h: identity-weight taps + VECTOR MAX), a residual Add (CnnResidual) a
//             VECTOR program (add_bf16); per dense layer one bf16 GEMM (bias preset, ReLU and bf16
//             rounding by ACTIVATE, the last layer's fp32 logits).
//   (host)    softmax cross-entropy at the logits: dZ = (softmax - onehot) / rows (fp32).
//   backward  per dense layer from the last: dZ = relu_backward_bf16(Y, dX) (VECTOR SELECT) when ReLU; [dW | db] =
//             [X | 1]^T . dZ (GEMM, A transposed on the device, fp32 out); dX = dZ . W^T (GEMM,
//             LOADW transpose); then per conv-part layer from the last: a residual's ReLU mask and
//             the fan-out of its gradient, the ReLU mask (SELECT), dW/db (conv_param_grads_bf16's GEMM,
//             its im2col made on the device by one-hot convolutions of the forward's input) and
//             dX (conv_input_grad_bf16: the transposed convolution; an average pool the same; a max
//             pool max_pool_backward_bf16's VECTOR routing and scatter), and at a residual's skip
//             input the two paths summed (add_bf16); runtime/conv_train_bf16.h.
//   update    torch.optim.SGD (momentum, weight decay) on the device: fp32 masters and momenta
//             resident in device memory, one VECTOR AXPY program (docs/numerics.md, "SGD with
//             momentum"); the masters are read back for the next step's weight layouts (the bf16
//             working copies are the masters rounded when the next program loads them).
// Every device program of a step is compiled once per row count, with its host buffers, and reused
// in later steps (a partial last batch gets its own set; logits() compiles per call). With `device`
// null the trainer runs the CPU contract of every program instead (conv2d_bf16_host,
// max_pool_bf16_host, gemm_bf16_host, ..., the update in num::axpy): bit for bit the device's numbers, which is how the
// tests check a whole step.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tpuw/compiler/cnn_training.h"
#include "tpuw/device.h"
#include "tpuw/runtime/device_trainer_factory.h"
#include "tpuw/runtime/host_float_trainer.h"
#include "tpuw/runtime/trainer.h"

namespace tpuw::runtime {

class CnnTrainer final : public Trainer {
 public:
  /// `device` (may be null: the CPU contract on an array of `array_n`) must outlive the trainer.
  /// Throws Error(kUnsupported) for a model without dense layers or a device without bf16 /
  /// TRANSPOSE, Error(kInvalidArgument) for a batch < 1 or a non-finite / non-positive learning rate.
  CnnTrainer(Device* device, compiler::CnnTrainModel model, int64_t batch, const SgdConfig& sgd,
             uint32_t array_n = 16);
  ~CnnTrainer() override;
  CnnTrainer(const CnnTrainer&) = delete;
  CnnTrainer& operator=(const CnnTrainer&) = delete;

  TrainStepReport step(std::span<const float> inputs, std::span<const int64_t> labels, int64_t rows) override;
  std::vector<float> logits(std::span<const float> inputs, int64_t rows) override;
  TrainState state() const override;
  void load_state(const TrainState& s) override;
  int64_t batch() const override;
  int64_t classes() const override;
  std::string name() const override;

  /// Bytes of the layouts the host prepared in the last step (zero insertion or dy per stride phase
  /// and the phases' dX, flipped weights, gradient rows; an im2col only where the device cannot make
  /// it; docs/training.md) and of the max-pool tap planes and scatter.
  uint64_t last_host_bytes() const;
  /// Device programs compiled so far: every program of a step is compiled in the first step of a
  /// row count (a partial last batch gets its own set) and reused after (0 without a device).
  uint64_t compiled_programs() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The CLI's view of a CNN for training (input shape and features, classes, every trained
/// initializer's dims and value; `layers` empty): what describe_trainable gives for an MLP.
/// Throws as build_cnn_training_model.
TrainableModel describe_trainable_cnn(compiler::Graph g);

/// `tpuw train` on a CNN: imports the model, runs the CNN training pass, opens the device.
std::unique_ptr<Trainer> make_cnn_trainer(const std::filesystem::path& model, const DeviceTrainerOptions& options);

}  // namespace tpuw::runtime
