// Training: one interface, two implementations.
//
//   - DeviceTrainer (tpuw/runtime/device_trainer.h): the compiler's training pass turns the
//     forward graph into forward + backward + SGD update, lowered to one device program per step;
//     parameters (fp32 masters, bf16 working copies, momentum) live in device memory between
//     steps. bf16 x bf16 -> fp32 on the MXU, everything else on the vector unit, except the
//     softmax cross-entropy at the logits, which runs on the host (docs/training.md).
//   - HostFloatTrainer (tpuw/runtime/host_float_trainer.h): the same training in plain fp32 on
//     the host CPU, the baseline every device figure is reported next to.
//
// The CLI (`tpuw train`) drives either through this interface and never knows which it has.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace tpuw::runtime {

/// torch.optim.SGD(lr, momentum, weight_decay), dampening 0, no Nesterov: per element
/// d = g + wd * w; v = momentum * v + d (v starts as the first d); w = w - lr * v.
struct SgdConfig {
  float lr = 0.01f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
};

/// What one training step did. Cycle fields are 0 on the host trainer.
struct TrainStepReport {
  double loss = 0.0;               ///< mean softmax cross-entropy over the step's rows
  int64_t rows = 0;                ///< batch rows in this step (the last batch may be partial)
  uint64_t cycles = 0;             ///< device cycles of the whole step (PERF_CYCLES)
  uint64_t forward_cycles = 0;     ///< of which forward pass
  uint64_t backward_cycles = 0;    ///< of which backward pass
  uint64_t update_cycles = 0;      ///< of which SGD update (the exposed part: see below)
  /// The update's own VECTOR/ACTIVATE cycles on the compute queue (ACT_BUSY), exposed or not. With
  /// the update fused into the backward program, update_cycles is what the update adds to the step
  /// (the fused program's cycles minus the backward pass alone); its loads and stores overlap the
  /// matrix products, these compute cycles cannot (docs/training.md).
  uint64_t update_busy_cycles = 0;
  double host_loss_seconds = 0.0;  ///< host time in the softmax cross-entropy at the logits
  uint64_t host_loss_bytes = 0;    ///< bytes moved between device memory and host for the loss
  /// Bytes the host lays out or copies for the device programs besides the loss (the CNN trainer's
  /// last_host_bytes(): inputs, gradients and weights it packs; 0 where every operand is resident).
  uint64_t host_layout_bytes = 0;
  uint64_t macs = 0;               ///< multiply-accumulates the step needs (forward + backward)
  double utilization = 0.0;        ///< macs / (ArrayN^2 * cycles) over the whole step
};

/// Everything needed to resume bit for bit: parameters and momentum buffers by initializer name
/// (row-major, the model's own shapes), and the number of steps taken.
struct TrainState {
  std::map<std::string, std::vector<float>> params;
  std::map<std::string, std::vector<float>> momentum;
  int64_t steps = 0;
};

class Trainer {
 public:
  virtual ~Trainer() = default;

  /// One SGD step on `rows` rows (1 <= rows <= batch): `inputs` holds rows x (model input
  /// elements) float32, `labels` rows class indices in [0, classes).
  virtual TrainStepReport step(std::span<const float> inputs, std::span<const int64_t> labels,
                               int64_t rows) = 0;

  /// Forward pass only (for validation accuracy): rows x classes logits, fp32.
  virtual std::vector<float> logits(std::span<const float> inputs, int64_t rows) = 0;

  virtual TrainState state() const = 0;
  virtual void load_state(const TrainState& s) = 0;

  virtual int64_t batch() const = 0;    ///< most rows per step
  virtual int64_t classes() const = 0;  ///< logits per row
  virtual std::string name() const = 0; ///< "rtl", "ref", "host-fp32"
};

}  // namespace tpuw::runtime
