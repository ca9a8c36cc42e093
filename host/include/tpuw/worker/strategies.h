// Work split across the devices of a tpuw::worker::Worker (tpuw/worker/worker.h), with results
// bit-identical to one device.
//
//   tpuw::worker::Worker w({.backend = "rtl", .devices = 2});
//   NetworkStrategyResult r = run_network_parallel(w, qnet, x_q, rows, {.strategy = Strategy::kData});
//   r.output_i32                       // [rows][n_last], the same bits as run_network on one device
//   r.report.overlap                   // sum of device busy time / (devices * wall time)
//   GemmStrategyResult g = gemm_parallel(w, a, b, {m, k, n});     // columns of B split over devices
//
// Strategies:
//   data      (networks) The batch is cut into micro-batches of `micro_batch` rows (the last one is
//             zero-padded: rows are independent, so padding changes no bit of the real rows). Device
//             d runs a contiguous range of micro-batches in one task. The weights are mirrored: each
//             device uploads them once into its host memory and keeps them in its resident cache
//             (DeviceSlot::resident, keyed by a fingerprint of the network), together with two sets
//             of input/output buffers and a program compiled for each. Inside the task, micro-batch
//             i+1 is packed, written and submitted (Device::submit) before the task waits for
//             micro-batch i (Device::wait): the device's ring always holds the next batch, so the
//             device never drains between micro-batches. A different model replaces the entry.
//   pipeline  (networks) The layers are cut into S = min(devices, layers) contiguous stages
//             balanced by MACs (k*n per layer; the largest stage is as small as possible). Stage s
//             is one task pinned to device s that streams every micro-batch: it takes micro-batch j
//             from stage s-1 (stage 0: from the input), runs it double-buffered as above, and hands
//             its int8 output (ACTIVATE's requantized bytes, exactly the next layer's input) to
//             stage s+1 through host memory. All stages run at once: stage 0 works on micro-batch
//             j+1 while stage 1 works on j. Hand-over channels keep every item, so a stage that
//             fails and is retried by the Worker restarts from its first micro-batch and produces
//             the same items again (delivery is idempotent).
//   micro-batches (run_micro_batches: CNNs, whose runs compile their own programs) The data
//             strategy without resident weights: one unpinned task per micro-batch (a free device
//             takes the next), each one call of the caller's function on the slot's device.
//   columns   (GEMM) B's columns are cut into one block per device (multiples of ArrayN, balanced);
//             A goes to every device; each block is one runtime::gemm task; the C blocks are
//             assembled column-wise.
//
// Every task is re-runnable (the Worker's retry contract): it uploads what it needs (or finds it in
// the resident cache) and returns its result only through its future.
//
// Busy time of a device = wall time its thread spent writing a micro-batch's input and submitting
// it (runtime::submit_network) and inside Device::wait (for the simulated backends the only time
// the device advances); GEMM: runtime::gemm's submit + wait. Overlap = sum of busy
// times / (devices used * wall time of the whole call); 1.0 means every device was driven all the
// time. The pipeline also reports each stage's busy fraction in the steady state: from the moment
// the last stage starts its first micro-batch to the moment the first stage finishes its last one.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tpuw/device.h"
#include "tpuw/nn/qnetwork.h"
#include "tpuw/runtime/gemm.h"
#include "tpuw/runtime/network.h"
#include "tpuw/runtime/trace.h"
#include "tpuw/worker/worker.h"

namespace tpuw::worker {

enum class Strategy { kData, kPipeline };

/// "data" / "pipeline".
std::string_view to_string(Strategy s);
/// Parses "data" or "pipeline"; nullopt otherwise.
std::optional<Strategy> parse_strategy(std::string_view name);

/// What one device did during one strategy call.
struct DeviceUse {
  unsigned index = 0;
  std::string role;            // e.g. "rows 0-2047", "stage 1: layers 2-3", "columns 0-255"
  uint64_t items = 0;          // micro-batches (GEMM: 1 block)
  uint64_t rows = 0;           // batch rows it computed (padding included); GEMM: columns
  uint64_t macs = 0;           // useful multiply-accumulates (padding excluded)
  double busy_s = 0;           // driving the device (see the top of this header)
  double busy_fraction = 0;    // busy_s / wall_s of the call
  PerfCounters perf;           // PERF_* summed over its work (cycles = device busy cycles)
  bool uploaded = false;       // network weights were uploaded by this call (not resident before)
  // Pipeline steady state (see the top of this header); 0 when the window is empty.
  double steady_busy_fraction = 0;
};

struct StrategyReport {
  std::string strategy;        // "data", "pipeline", "columns"
  unsigned devices = 0;        // the worker's devices (pipeline: stages); overlap's K
  uint64_t micro_batch = 0;    // rows per micro-batch (networks)
  uint64_t micro_batches = 0;
  double wall_s = 0;           // the whole call, seen by the caller
  double overlap = 0;          // sum busy_s / (devices * wall_s)
  double steady_s = 0;         // pipeline: length of the steady-state window
  std::vector<std::pair<size_t, size_t>> stages;  // pipeline: [first, last] layer of each stage
  // By device index, devices that ran tasks only. Data and column tasks are not pinned (a failed
  // one is retried on another device), so a device that is free first may run several of them.
  std::vector<DeviceUse> per_device;
};

struct NetworkStrategyOptions {
  Strategy strategy = Strategy::kData;
  uint64_t micro_batch = 0;  // rows per device run; 0 = automatic (about 4 per device, at most 256)
  runtime::NetworkPlanOptions plan;
  /// --trace (docs/tracing.md): each device's driving thread gets a host track "device D driver"
  /// (upload + compile, and per micro-batch its submit and wait), and device D's process a program
  /// span per micro-batch in device cycles (the PERF counters read after its wait). Null: nothing.
  runtime::Trace* trace = nullptr;
};

struct NetworkStrategyResult {
  std::vector<int32_t> output_i32;  // final int32_output layer: [batch][n_last]
  std::vector<int8_t> output_q;     // final int8 layer: [batch][n_last]
  uint64_t macs = 0;                // batch * sum k*n
  StrategyReport report;
};

/// Runs `net` on `batch` rows of `input_q` ([batch][input_features] int8) across the worker's
/// devices. Throws Error(kInvalidArgument) for a bad network, batch 0 or an input of the wrong
/// size, and the first task's error otherwise (upstream stages first).
NetworkStrategyResult run_network_parallel(Worker& worker, const nn::QNetwork& net, std::span<const int8_t> input_q,
                                           uint64_t batch, const NetworkStrategyOptions& options = {});

struct GemmStrategyResult {
  std::vector<int32_t> c;           // [M][N]
  StrategyReport report;
};

/// C = A . B with B's columns split over the worker's devices. Throws like runtime::gemm.
/// `trace` (may be null): per block a host span on the track "device D driver" (compile + upload,
/// submit + wait) and a program span on device D.
GemmStrategyResult gemm_parallel(Worker& worker, std::span<const int8_t> a, std::span<const int8_t> b,
                                 const runtime::GemmShape& shape, runtime::Trace* trace = nullptr);

/// What one micro-batch of run_micro_batches did on its device (its callback's answer).
struct MicroBatchUse {
  PerfCounters perf;  // PERF_* of its programs (cycles = device busy cycles)
  uint64_t macs = 0;  // useful multiply-accumulates
};

/// Runs micro-batch j (rows [first_row, first_row + rows)) on the slot's device; called from that
/// device's thread. It keeps its result where the caller indexed it by j (each j is run by one task
/// at a time; a retried task runs its micro-batches again and overwrites what the failed run kept).
using MicroBatchFn = std::function<MicroBatchUse(DeviceSlot& slot, uint64_t j, uint64_t first_row, uint64_t rows)>;

/// Data parallelism for work whose rows are independent and that compiles its own programs per
/// call (CNNs: runtime::run_cnn / run_cnn_bf16 per micro-batch): `batch` rows cut into micro-batches
/// of `micro_batch` rows (0 = automatic, as run_network_parallel's; the last one is short, not
/// padded), one task per micro-batch in order, not pinned: a free device takes the next one, and
/// the Worker retries a faulted micro-batch on another device. Each
/// micro-batch is timed as busy time of the device that ran it; `trace` (may be null) gets a host
/// span per micro-batch on the track "device D driver" (the callback lays its programs on the
/// device). Returns the report (strategy "data"); throws the first task's error.
StrategyReport run_micro_batches(Worker& worker, uint64_t batch, uint64_t micro_batch, const MicroBatchFn& run,
                                 runtime::Trace* trace = nullptr);

/// The automatic micro-batch of `batch` rows on `devices` devices: about 4 per device, at most 256.
uint64_t auto_micro_batch(uint64_t batch, unsigned devices);

/// Contiguous stages [first, last] (inclusive) of `layer_macs` for min(stages, layers) stages that
/// minimise the largest stage sum (ties: earlier cuts). stages >= 1.
std::vector<std::pair<size_t, size_t>> partition_layers(std::span<const uint64_t> layer_macs, unsigned stages);

/// [begin, end) column ranges: n columns in at most `parts` blocks of whole `align`-column units,
/// as equal as possible (no empty block).
std::vector<std::pair<uint64_t, uint64_t>> split_columns(uint64_t n, unsigned parts, uint64_t align);

/// Fingerprint of a quantized network (every layer's shape, weights, bias, requantization, flags):
/// the resident-cache key of its weights.
std::string network_fingerprint(const nn::QNetwork& net);

}  // namespace tpuw::worker
