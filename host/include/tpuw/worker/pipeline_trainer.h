// Pipeline training on the devices of a tpuw::worker::Worker (docs/scaling.md "Pipeline training").
//
//   tpuw::worker::Worker w({.backend = "ref", .devices = 2, .max_attempts = 1});
//   tpuw::worker::PipelineTrainer t(w, model, /*batch=*/256, sgd, {.micro_batches = 8});
//   t.step(x, y, 256);          // runtime::Trainer: the CLI drives it like any other trainer
//
// The layers are split into K contiguous stages, one per device, balanced by the multiply-accumulates
// of a training step (partition_layers). Every device holds a whole runtime::DeviceTrainer (the same
// buffer layout everywhere) but owns and runs only its stage's layers. A step of `rows` rows is cut
// into micro-batches of micro_rows = ceil(batch / micro_batches) rows (the last one may be shorter),
// exactly the chunks of MirroredTrainer with chunks = micro_batches, and runs on the GPipe schedule:
// every stage runs the forward pass of micro-batches 0 .. n-1 through its layers, then the backward
// pass of n-1 .. 0; then every stage sums the micro-batches' gradients of its layers in
// MirroredTrainer's fixed tree (tree_sum) and applies the same per-layer update program. One thread
// per stage (the worker's device thread), so the stages overlap in time; a stage waits only for the
// micro-batch it needs from its neighbour.
//
// At a stage boundary the bf16 activations (forward) and the fp32 input gradients (backward) travel
// device -> host -> device as the raw device bytes one device would have had in that buffer; the
// forward buffers a stage's backward needs are stashed on the host per micro-batch between its
// forward and its backward. So every layer computes, per micro-batch, the very instructions on the
// very bytes of the one-device split step: the weights are bit-identical to MirroredTrainer with the
// same chunk count on any K (K = 1 included), and to this trainer with any number of stages.
//
// Cycles: each program's PERF cycles are measured on its device; the step's cycles are the
// makespan of the GPipe dependency graph over those (a stage's programs in order, the forward of
// micro-batch m after the stage before it finished m, the backward of m after the stage after it
// finished m; host copies and the host's loss and sums take no device cycles). A device's busy
// fraction is its cycles over the step's cycles; the bubble is one minus their mean.
//
// Faults: no recovery. A device that faults or times out ends the step with Error(kDeviceFault)
// naming the stage (its variables exist nowhere else; resume from a checkpoint).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tpuw/compiler/training.h"
#include "tpuw/runtime/trainer.h"
#include "tpuw/worker/worker.h"

namespace tpuw::worker {

struct PipelineOptions {
  /// Micro-batches per full batch (>= 1, <= batch): the chunks of the fixed gradient sum.
  int64_t micro_batches = 4;
};

/// One stage: layers [first_layer, first_layer + layers) on device `device`.
struct PipelineStage {
  unsigned device = 0;
  size_t first_layer = 0;
  size_t layers = 0;
  uint64_t macs_per_row = 0;  ///< training MACs of one row through these layers (forward, dW, dX)
};

/// Per-step figures, summed over steps.
struct PipelineStats {
  int64_t steps = 0;
  uint64_t step_cycles = 0;           ///< makespans of the steps' cycle schedules
  std::vector<uint64_t> busy_cycles;  ///< per device: its programs' cycles
  uint64_t boundary_bytes = 0;        ///< activations and input gradients across stage boundaries
  uint64_t stash_bytes = 0;           ///< forward buffers stashed on the host (read once, written once)
  uint64_t gather_bytes = 0;          ///< micro-batch gradients read from the devices (padded fp32)
  double busy_fraction(size_t d) const {
    return d < busy_cycles.size() && step_cycles > 0
               ? static_cast<double>(busy_cycles[d]) / static_cast<double>(step_cycles)
               : 0.0;
  }
  /// One minus the mean busy fraction: the share of device time idle in the pipeline's bubbles.
  double bubble_fraction() const {
    if (busy_cycles.empty() || step_cycles == 0) return 0.0;
    double s = 0;
    for (size_t d = 0; d < busy_cycles.size(); ++d) s += busy_fraction(d);
    return 1.0 - s / static_cast<double>(busy_cycles.size());
  }
};

/// The contiguous split of `model`'s layers into `stages` non-empty stages that minimises the
/// largest stage's training MACs (the first such split). Throws Error(kInvalidArgument) when
/// stages < 1 or stages > layers.
std::vector<PipelineStage> partition_layers(const compiler::TrainModel& model, unsigned stages);

class PipelineTrainer final : public runtime::Trainer {
 public:
  /// One stage per device of `worker`, each a DeviceTrainer of `model` for micro_rows rows. `worker`
  /// must outlive the trainer. Throws Error(kInvalidArgument) for batch < 1, micro-batches outside
  /// [1, batch] or more devices than layers, and the stages' errors (e.g. a device without bf16).
  PipelineTrainer(Worker& worker, compiler::TrainModel model, int64_t batch, const runtime::SgdConfig& sgd,
                  const PipelineOptions& options = {});
  ~PipelineTrainer() override;
  PipelineTrainer(const PipelineTrainer&) = delete;
  PipelineTrainer& operator=(const PipelineTrainer&) = delete;

  /// Device memory one stage needs (BackendConfig::memory.size must leave room for it).
  static uint64_t memory_bytes(const compiler::TrainModel& model, int64_t batch, int64_t micro_batches,
                               uint32_t array_n);

  /// One step. cycles is the schedule's makespan; forward/backward/update are the busiest stage's;
  /// utilization is over all K arrays.
  runtime::TrainStepReport step(std::span<const float> inputs, std::span<const int64_t> labels,
                                int64_t rows) override;
  /// Forward through the stages, micro_rows rows at a time.
  std::vector<float> logits(std::span<const float> inputs, int64_t rows) override;
  /// Every layer's variables from the stage that owns it.
  runtime::TrainState state() const override;
  void load_state(const runtime::TrainState& s) override;
  int64_t batch() const override;
  int64_t classes() const override;
  std::string name() const override;

  int64_t micro_rows() const;
  int64_t micro_batches() const;
  const std::vector<PipelineStage>& stages() const;
  const PipelineStats& last_step() const;
  /// The most recent step with a full batch (the pipeline's steady state; a short last batch has
  /// fewer micro-batches and a relatively larger bubble).
  const PipelineStats& last_full_step() const;
  const PipelineStats& totals() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpuw::worker
