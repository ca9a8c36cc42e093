// Mirrored-variable training on the devices of a tpuw::worker::Worker (docs/scaling.md).
//
//   tpuw::worker::Worker w({.backend = "ref", .devices = 2, .max_attempts = 1});
//   tpuw::worker::MirroredTrainer t(w, model, /*batch=*/256, sgd, {.chunks = 4});
//   t.step(x, y, 256);          // runtime::Trainer: the CLI drives it like any other trainer
//
// Every device holds a replica of the variables (a runtime::DeviceTrainer in its resident cache:
// fp32 masters, bf16 copies, fp32 momentum). A step of `rows` rows is cut into chunks of
// chunk_rows = ceil(batch / chunks) rows (the last one may be shorter); device d of K computes the
// contiguous chunks [d·n/K, (d+1)·n/K) of the n chunks, each chunk as forward → host loss → backward
// layer by layer (DeviceTrainer's split step), and hands each layer's fp32 gradient (dW, db) to
// the host as soon as that layer's backward program is done. A reducer thread sums the chunk
// gradients of each layer in one fixed tree (pairs (0,1), (2,3), ... then pairs of those; an odd
// last node goes up unchanged), a node as soon as both children exist, so a layer's reduction
// runs while the devices compute earlier layers (the bucket is the layer). Then every replica
// writes the same reduced gradient and runs the same update program. The tree depends only on the
// chunk count, never on K: the weights are bit-identical for every K that runs the same chunks
// (K = 1 included). The loss gradient at the logits is (softmax − onehot) / rows of the whole step,
// the loss the mean over the step's rows summed in row order: both as on one device.
//
// Faults: a device whose program faults or times out during a step (the Worker resets or
// re-creates it, which clears its resident replica) is reloaded with the raw variable bytes of a
// healthy replica (during the compute phase every replica still holds the step's starting values;
// during the update phase the healthy replica has finished its update) and its part of the step is
// redone; the gradients it delivered are the same bits again. The weights stay bit-identical to a
// fault-free run; events() says what happened. With no other healthy replica (K = 1) the step
// fails with Error(kDeviceFault).
//
// Several processes (MirroredOptions::collective, e.g. MPI ranks, each with its own worker of K
// devices): replica g = rank·K + d of the P·K replicas takes chunks [g·n/(P·K), (g+1)·n/(P·K)).
// Each rank reduces what it can locally (the tree nodes all of whose chunks it computed), then the
// ranks exchange those maximal local nodes and the rows' losses in one allgather, and every rank
// completes the same tree: the weights are bit-identical for every P·K. An error on a rank during
// the compute phase travels in that exchange, so every rank stops with "rank r: ..." instead of
// waiting; a rank that never answers is the collective's timeout. Faults are recovered within a
// rank (from one of its own replicas).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tpuw/compiler/training.h"
#include "tpuw/runtime/trainer.h"
#include "tpuw/worker/collective.h"
#include "tpuw/worker/worker.h"

namespace tpuw::worker {

struct MirroredOptions {
  /// Gradient chunks per full batch (>= 1): the unit of the fixed reduction order. K should divide
  /// it for an even load; results never depend on K.
  int64_t chunks = 4;
  /// Redo a device's part of a step at most this many times per step before giving up.
  unsigned max_recoveries = 3;
  /// Test hook, called on the device's thread before each of its programs with the step number
  /// (from 1) and a phase name: "forward chunk C", "backward chunk C layer L", "update layer L".
  /// Tests inject faults here (SimControl).
  std::function<void(DeviceSlot& slot, int64_t step, const std::string& phase)> fault_hook;
  /// Shard the update over the K devices (ZeRO-1 style, docs/scaling.md): device d updates 1/K of
  /// every layer's variables, then the updated shards are copied into every other replica, so each
  /// device again holds a whole replica. The bits are those of the whole update on every device
  /// (false), which costs every device the whole update program.
  bool shard_update = true;
  /// Other processes training the same model on the same data (nullptr: this process alone). Must
  /// outlive the trainer.
  Collective* collective = nullptr;
  /// Timeline hook for a trace writer (e.g. Chrome trace events): called with a track ("device D",
  /// "reducer", "rank R"), a span name ("forward chunk C", "backward chunk C layer L", "gather
  /// chunk C layer L", "sum layer L level K node I", "broadcast layer L", "update layer L",
  /// "exchange") and its host-time interval. Called from the device threads and the reducer thread
  /// at once: must be thread-safe. Empty: no spans.
  std::function<void(const std::string& track, const std::string& name, std::chrono::steady_clock::time_point begin,
                     std::chrono::steady_clock::time_point end)>
      trace;
};

/// Communication and fault figures, per step and summed over the trainer's life.
struct MirroredStats {
  int64_t steps = 0;
  uint64_t gather_bytes = 0;     ///< chunk gradients read from the devices (padded fp32)
  uint64_t broadcast_bytes = 0;  ///< reduced gradients written to every replica
  double gather_seconds = 0;     ///< device threads reading gradients (summed over devices)
  double reduce_seconds = 0;     ///< reducer thread adding (the tree)
  double broadcast_seconds = 0;  ///< writing the reduced gradient (summed over devices)
  double hidden_seconds = 0;     ///< reduction time that overlapped a device still computing
  double compute_seconds = 0;    ///< wall time of the compute phases (forward + backward)
  double update_seconds = 0;     ///< wall time of the update phases
  uint64_t recoveries = 0;       ///< device parts redone after a fault
  uint64_t exchange_bytes = 0;   ///< bytes received from other ranks (tree nodes, losses)
  double exchange_seconds = 0;   ///< in the ranks' allgather (packing and unpacking included)
  /// The last step's device cycles of each device of this process: its own forward, backward and
  /// update programs (PERF_CYCLES), for --trace's per-device tracks. Empty in totals().
  struct DeviceCycles {
    uint64_t forward = 0, backward = 0, update = 0;
  };
  std::vector<DeviceCycles> device_cycles;
  uint64_t shard_bytes = 0;      ///< sharded update: updated variables copied between replicas
  double shard_seconds = 0;      ///< sharded update: reading and writing those (summed over devices)
  /// gather + reduce + broadcast + exchange + shard.
  double comm_seconds() const {
    return gather_seconds + reduce_seconds + broadcast_seconds + exchange_seconds + shard_seconds;
  }
  /// hidden / comm (0 without communication), at most 1.
  double hidden_fraction() const { return fraction(hidden_seconds, comm_seconds()); }
  /// hidden / reduce: how much of the host reduction itself ran behind the devices' compute, at
  /// most 1.
  double reduce_hidden_fraction() const { return fraction(hidden_seconds, reduce_seconds); }

 private:
  // hidden_seconds is a sum of interval overlaps and reduce_seconds a sum of the same intervals'
  // lengths, added in another order: when everything is hidden the two differ in the last bits,
  // and the ratio can come out a few ulps above 1. Clamp, so a report never says "100.0000000003%".
  static double fraction(double part, double whole) { return whole > 0 ? std::min(1.0, part / whole) : 0.0; }
};

/// The fixed reduction: sums `parts` (equal sizes) elementwise in the tree described at the top of
/// this header, fp32 round to nearest even. Exposed for tests and the MPI path.
std::vector<float> tree_sum(std::vector<std::vector<float>> parts);

/// The softmax cross-entropy of one row of logits `z` (`classes` values) with label `label`, and
/// its gradient into `grad` divided by the step's rows: per row exactly what
/// compiler::softmax_cross_entropy computes over the whole step. Shared with pipeline training.
double softmax_cross_entropy_row(const float* z, int64_t label, int64_t classes, int64_t step_rows, float* grad);

class MirroredTrainer final : public runtime::Trainer {
 public:
  /// Creates a replica of `model` (its initial parameters) on every device of `worker`, each for
  /// chunk_rows rows. `worker` must outlive the trainer. Throws Error(kInvalidArgument) for
  /// batch < 1 or chunks < 1, and the replicas' errors (e.g. a device without bf16).
  MirroredTrainer(Worker& worker, compiler::TrainModel model, int64_t batch, const runtime::SgdConfig& sgd,
                  const MirroredOptions& options = {});
  ~MirroredTrainer() override;
  MirroredTrainer(const MirroredTrainer&) = delete;
  MirroredTrainer& operator=(const MirroredTrainer&) = delete;

  /// Device memory one replica needs (BackendConfig::memory.size must leave room for it).
  static uint64_t memory_bytes(const compiler::TrainModel& model, int64_t batch, int64_t chunks, uint32_t array_n);

  /// One step. The report's cycle fields are the slowest device's; utilization is over all K arrays.
  runtime::TrainStepReport step(std::span<const float> inputs, std::span<const int64_t> labels,
                                int64_t rows) override;
  std::vector<float> logits(std::span<const float> inputs, int64_t rows) override;
  runtime::TrainState state() const override;
  void load_state(const runtime::TrainState& s) override;
  int64_t batch() const override;
  int64_t classes() const override;
  std::string name() const override;

  int64_t chunk_rows() const;
  unsigned devices() const;
  const MirroredStats& last_step() const;
  const MirroredStats& totals() const;
  /// What happened (faults, reloads, redone parts), one line each, oldest first.
  const std::vector<std::string>& events() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpuw::worker
