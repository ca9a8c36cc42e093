// Training on the device (docs/training.md): runtime::Trainer over the compiler's training pass
// (tpuw/compiler/training.h), lowered to three device programs compiled once and resubmitted every
// step:
//   forward   per layer one bf16 GEMM: X . op(W_bf16) with the fp32 bias preloaded in the ACC,
//             ReLU and bf16 rounding by ACTIVATE (the next layer's input), the fp32 pre-activation
//             Z kept for the ReLU derivative; the last layer's fp32 logits.
//   (host)    softmax cross-entropy and its gradient dZ at the logits, [rows, classes] fp32.
//   backward  per layer from the last: dZ = SELECT(Z, dX) (VECTOR), db = COLSUM(dZ), dZ -> bf16
//             (ACTIVATE), dW = dZ^T X or X^T dZ (GEMM with A transposed by TRANSPOSE, fp32 out),
//             dX = dZ . W or dZ . W^T (GEMM, LOADW transpose for a weight stored [in, out]).
//   update    per parameter three VECTOR AXPY passes (torch.optim.SGD, docs/numerics.md), the new
//             bf16 working copy of each weight by ACTIVATE bf16; by default fused into the
//             backward program (the dW GEMM's epilogue, the bias update next to its COLSUM).
// Parameters live in device memory between steps: fp32 masters, bf16 copies, fp32 momentum, fp32
// gradients. Per step only the batch (bf16, [batch, features]) goes in, the logits come out and dZ
// goes back in. The device must have FEATURES.BF16 and FEATURES.TRANSPOSE.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tpuw/compiler/training.h"
#include "tpuw/device.h"
#include "tpuw/runtime/trainer.h"

namespace tpuw::runtime {

struct DeviceTrainerSchedule {
  /// Fuse the SGD update into the dW GEMMs' epilogue (the gradient never leaves the ACC; the
  /// update overlaps the backward products). The step's backward/update split is then attributed:
  /// backward = the cycles of the unfused backward program, measured once on the first step (the
  /// device's timing does not depend on the data), update = the rest. Off: a separate update
  /// program, both measured. Results are bit-identical either way.
  bool fuse_update = true;
};

class DeviceTrainer final : public Trainer {
 public:
  /// Compiles the three programs for `model` at most `batch` rows per step and copies the model's
  /// initial parameters into device memory. `device` must outlive the trainer. Throws
  /// Error(kUnsupported) when the device lacks bf16/transpose or its memories cannot hold the
  /// tiles, Error(kInvalidArgument) for a batch < 1 or a non-finite / non-positive learning rate.
  DeviceTrainer(Device& device, compiler::TrainModel model, int64_t batch, const SgdConfig& sgd,
                const DeviceTrainerSchedule& options = {});
  ~DeviceTrainer() override;
  DeviceTrainer(const DeviceTrainer&) = delete;
  DeviceTrainer& operator=(const DeviceTrainer&) = delete;

  /// Device-visible memory the trainer allocates for `model` at `batch` on an ArrayN array
  /// (without the command ring): what BackendConfig::memory.size must leave room for.
  static uint64_t memory_bytes(const compiler::TrainModel& model, int64_t batch, uint32_t array_n);

  TrainStepReport step(std::span<const float> inputs, std::span<const int64_t> labels, int64_t rows) override;
  std::vector<float> logits(std::span<const float> inputs, int64_t rows) override;
  TrainState state() const override;
  void load_state(const TrainState& s) override;
  int64_t batch() const override;
  int64_t classes() const override;
  std::string name() const override;

  /// Instructions of the forward, backward-only, update-only and fused backward+update programs.
  std::array<uint64_t, 4> program_sizes() const;
  /// PERF counters of the forward, backward-only, update-only and fused programs, each from its
  /// last run (zero if it never ran).
  const std::array<PerfCounters, 4>& last_perf() const;

  // --- The step split for mirrored training (tpuw/worker/mirrored_trainer.h, docs/scaling.md) ---
  // The fused step above never lets the gradient leave the device. These entry points run the same
  // computation in pieces so that each layer's gradient can be read out, summed with the other
  // chunks' on the host, and written back before the update: forward_chunk(), set_logit_grad(),
  // backward_layer(l) for l = layers()-1 .. 0 (the unfused backward program cut per layer) with
  // read_gradient(l) after each, then per layer write_gradient(l) of the reduced gradient and
  // apply_update(l) (the unfused update program cut per layer). Compiled on first use; per layer
  // the same instructions as the unfused step, so the same bits for the same rows.

  /// Number of dense layers.
  size_t layers() const;
  /// Forward program on `rows` (<= batch) rows: the fp32 logits, [rows, classes].
  std::vector<float> forward_chunk(std::span<const float> inputs, int64_t rows);
  /// Writes the loss gradient at the logits, [rows, classes] fp32 (rows of the last forward_chunk).
  void set_logit_grad(std::span<const float> dz, int64_t rows);
  /// Backward program of layer l (dZ, db, dX for l > 0, dW into device memory); returns its cycles.
  uint64_t backward_layer(size_t l);
  /// Elements of layer l's gradient as read_gradient returns it: the padded stored-layout dW, then
  /// the padded db (if the layer has a bias).
  uint64_t gradient_elems(size_t l) const;
  /// Layer l's gradient from device memory (gradient_elems(l) fp32 values).
  std::vector<float> read_gradient(size_t l) const;
  /// Writes `grad` (gradient_elems(l) values) as layer l's gradient.
  void write_gradient(size_t l, std::span<const float> grad);
  /// Runs layer l's SGD update program on the gradient in device memory (masters, momentum, bf16
  /// copy); returns its cycles.
  uint64_t apply_update(size_t l);
  /// The update sharded over `shards` replicas (ZeRO-1 style, docs/scaling.md): shard s of layer l
  /// is the flat rows [s·R/shards, (s+1)·R/shards) of each of its padded fp32 arrays (R rows of
  /// ArrayN values; weight and bias cut alike), the bf16 copy alongside. The update is elementwise,
  /// so every shard's values are the bits the whole update gives. apply_update_shard runs the
  /// update program restricted to that shard (shards == 1: apply_update) and returns its cycles;
  /// write_gradient_shard writes that shard's part of `grad` (all gradient_elems(l) values);
  /// shard_bytes / load_shard_bytes move that shard's masters, bf16 copy and momentum as raw bytes.
  uint64_t apply_update_shard(size_t l, size_t shard, size_t shards);
  void write_gradient_shard(size_t l, size_t shard, size_t shards, std::span<const float> grad);
  /// Gradient values write_gradient_shard writes.
  uint64_t gradient_shard_elems(size_t l, size_t shard, size_t shards) const;
  std::vector<uint8_t> shard_bytes(size_t l, size_t shard, size_t shards) const;
  void load_shard_bytes(size_t l, size_t shard, size_t shards, std::span<const uint8_t> bytes);
  /// The replica's variables as raw device bytes (every layer's fp32 masters, bf16 copies, fp32
  /// momentum, padding included), and the way back: what a reset replica reloads from a healthy one.
  std::vector<uint8_t> replica_bytes() const;
  void load_replica_bytes(std::span<const uint8_t> bytes);

  // --- The stage split for pipeline training (tpuw/worker/pipeline_trainer.h, docs/scaling.md) ---
  // A pipeline stage holds a whole DeviceTrainer (the same buffer layout on every stage) but runs
  // only its own layers, one micro-batch at a time: write_input() (first stage), forward_layer(l)
  // for its layers (the forward program cut per layer: each layer the same GEMM, so the same bits),
  // read_logits() (last stage) or read_activation() of its last layer to hand on; backward_layer()
  // as in the split step above, with write_input_grad() of the layer above from the next stage and
  // read_input_grad() of its first layer for the previous one. The boundary buffers travel as raw
  // device bytes, padding included: exactly the bytes one device would have had there. The forward
  // buffers a stage's backward reads are overwritten by the next micro-batch: stash_activations()
  // after a micro-batch's forward and restore_activations() before its backward keep them per
  // micro-batch (GPipe without recomputation).

  /// Writes `rows` (<= batch) rows of model input (as forward_chunk does, without running anything).
  void write_input(std::span<const float> inputs, int64_t rows);
  /// The forward program of layer l alone (reads its input buffer, writes its output); its cycles.
  uint64_t forward_layer(size_t l);
  /// The last layer's fp32 logits, [rows, classes], of the last forward pass.
  std::vector<float> read_logits(int64_t rows) const;
  /// Layer l's bf16 output (layer l+1's input) as raw device bytes; l < layers() - 1.
  std::vector<uint8_t> read_activation(size_t l) const;
  void write_activation(size_t l, std::span<const uint8_t> bytes);
  /// Layer l's fp32 input gradient dX as raw device bytes (what backward_layer(l - 1) reads); l > 0.
  std::vector<uint8_t> read_input_grad(size_t l) const;
  void write_input_grad(size_t l, std::span<const uint8_t> bytes);
  /// The forward buffers the backward of layers [l0, l1) reads: the input of l0, the outputs of
  /// l0 .. l1-2, the pre-activations of l0 .. l1-1.
  std::vector<uint8_t> stash_activations(size_t l0, size_t l1) const;
  void restore_activations(size_t l0, size_t l1, std::span<const uint8_t> bytes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpuw::runtime
