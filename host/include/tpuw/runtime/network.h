// A quantized network (tpuw/nn/qnetwork.h) compiled into ONE device program and run.
//
//   tpuw::runtime::NetworkOptions opt;
//   NetworkRunResult r = run_network(dev, net, input_q /*[batch][k0] int8*/, batch, opt);
//   r.output_i32   // [batch][n_last]: acc + bias_q of the last (int32_output) layer
//
// What the program does (docs/network_compiler.md has the full layout):
//   - The batch is cut into M tiles of at most m_tile rows (bounded by the ACC, which holds two
//     output strips). Layers run in order; inside a layer, for each M tile, for each output column
//     block (strip), for each input k-block: LOAD weight tile -> WB ring, LOADW, MATMUL (swap) into
//     the strip's ACC buffer, as in gemm.cpp. The next tile (also the next layer's first tile)
//     shifts in while the current one computes; nothing drains between layers.
//   - After the last k-block of a strip: ACTIVATE (bias, per-column mult/shift, ReLU) from the ACC
//     strip into the UB, using a bias/mult/shift row triple LOADed into the ACC per strip.
//   - Activations are tensors of k-blocks [m_tile rows x ArrayN] int8. Each is either *resident*
//     (the whole batch in a UB region; regions ping-pong between even and odd tensors) or *spilled*
//     (ACTIVATE into a UB staging slot, STORE to host memory; the next layer LOADs it back into a
//     UB slot ring). The planner keeps as many tensors resident as the UB holds, largest spilled
//     first.
//   - The last layer (int32_output): the ACC strip is preloaded with the bias row (a LOAD with host
//     stride 0 replicates it), every MATMUL accumulates on top, and the ACC strip is STOREd.
//   - Tokens are derived from buffer hazards of the sequential meaning; every pop follows its push
//     in program order (race-free and deadlock-free by construction).
//
// Per-layer figures: the program has no FENCE between layers (a fence drains the pipeline and
// would stop the next layer's weights from streaming in). Whole-network cycles and counters are
// the PERF_* registers. Per-layer `cycles` are *attributed* (attribute_layers): each layer gets its
// exact MXU rows plus a share of the remaining PERF_CYCLES in proportion to the rest of its
// compute-engine occupancy computed from its instructions (weight-shift shortfall of short MATMULs,
// ACTIVATE rows + MXU drain + activation pipeline, NOPs). Per-layer mxu_active, rd_bytes and
// wr_bytes are exact (counted from the layer's instructions: MATMUL rows, LOAD/STORE bytes + 16
// bytes of fetch per instruction); weight_shift, weight_stall, dma_wait and act_busy are the
// measured totals split over the layers. Layer cycles add up to PERF_CYCLES and every counter's
// layer share is at most the layer's cycles, so the report's percentages are honest.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "tpuw/asm.h"
#include "tpuw/device.h"
#include "tpuw/device_configs.h"
#include "tpuw/nn/qnetwork.h"
#include "tpuw/runtime/trace.h"

namespace tpuw::runtime {

/// The planner's goal for bytes moved / minimum bytes (issue 10); a plan above it says why in
/// NetworkPlan::traffic_note.
inline constexpr double kTrafficGoal = 1.5;

/// Knobs of the planner (defaults: best plan; tests use the others to force the rare paths).
struct NetworkPlanOptions {
  uint64_t max_m_tile = 0;     // 0 = as large as the ACC allows; else cap the M tile (rows)
  bool force_spill = false;    // spill every intermediate activation and stream the input
};

/// Where one activation tensor lives.
enum class TensorHome {
  kResident,  // whole batch in a UB region (input: loaded once; intermediate: written by ACTIVATE)
  kHost,      // host memory (input buffer, spill buffer, or the network output)
  kStreamed,  // never stored whole: layer i-1 and layer i are fused; each strip of layer i-1 is
              // ACTIVATEd into a UB staging chunk and immediately taken as k-block of layer i, whose
              // strips all stay in the ACC for the M tile (layer i narrow: a classifier head)
};

struct NetworkLayerPlan {
  uint64_t k = 0, n = 0;           // real sizes
  uint64_t k_blocks = 0, n_blocks = 0;
  uint64_t weight_offset = 0;      // byte offset of the layer's packed weight tiles in the weight image
  uint64_t param_offset = 0;       // byte offset of its bias/mult/shift rows in the param image
  uint64_t param_rows = 3;         // ACC rows per n-block: bias, mult, shift (+ the lookup table)
  bool final_int32 = false;        // int32 output (acc + bias) to host
  bool relu = false;
  bool lut = false;                // ACTIVATE `lut`: the table rows follow the shift row
  // What the schedule costs (filled by plan_network): how often the layer's weights and its input
  // tensor cross the host interface (input 0 = resident in the UB, written there by the previous
  // layer; 1 = loaded once; n_blocks = reloaded for every output strip because the UB slots cannot
  // hold an M tile's k-blocks).
  uint64_t weight_reads = 0;
  uint64_t input_reads = 0;
};

/// What a plan's program moves over the host interface, computed from the plan alone. Exact for the
/// program compile_network emits without keep_intermediate: a run's PERF_RD_BYTES / PERF_WR_BYTES /
/// PERF_INSTRET equal rd_bytes / wr_bytes / instructions (tests check it on the ref backend).
struct NetworkTraffic {
  uint64_t rd_bytes = 0;      // LOAD bytes + 16 bytes of fetch per instruction (the FENCE included)
  uint64_t wr_bytes = 0;      // STORE bytes + 4 (the FENCE's write)
  uint64_t instructions = 0;  // including the FENCE
  uint64_t min_bytes = 0;     // every weight, the input and the final output once (unpadded)
  uint64_t bytes() const { return rd_bytes + wr_bytes; }
  double ratio() const {
    return min_bytes == 0 ? 0.0 : static_cast<double>(bytes()) / static_cast<double>(min_bytes);
  }
};

struct NetworkPlan {
  uint32_t array_n = 0;
  uint32_t beat = 0;               // DMA beat bytes
  uint64_t batch = 0;
  uint64_t mp = 0;                 // batch padded to the row alignment
  uint64_t m_tile = 0, m_tiles = 0;
  // Loop order. false: layer by layer, each over all M tiles (a resident tensor holds the whole
  // batch). true: M tile by M tile, every layer on it (a resident tensor holds one M tile, so
  // bigger M tiles fit the UB; the weights are read once per M tile either way).
  bool tile_outer = false;
  std::vector<NetworkLayerPlan> layers;
  // Activation tensors: tensors[0] = network input, tensors[i] = output of layer i-1 (int8,
  // i = 1..L-1); the final layer's output is not a tensor (always host).
  std::vector<TensorHome> tensor_home;
  std::vector<uint64_t> tensor_ub_row;   // resident: first UB row of its region
  std::vector<uint64_t> tensor_host_offset;  // kHost intermediates: offset in the spill image
  uint64_t ub_region_rows[2] = {0, 0};   // ping-pong regions [0, r0) and [r0, r0 + r1)
  uint64_t ub_stage_row = 0;             // 2 staging chunks of m_tile rows (spilled outputs)
  uint64_t ub_in_row = 0;                // input slot ring for host-sourced layers
  uint32_t in_slots = 0;
  uint32_t w_slots = 0;                  // WB weight-tile ring
  uint64_t acc_param_row = 0;            // 2 slots x param_slot_rows after the strips
  uint64_t param_slot_rows = 3;          // bias, mult, shift (+ lut_rows(N) when a layer has a table)
  // The planner's choice: the cheapest of `candidates` schedules (M tile x residency) by `traffic`.
  NetworkTraffic traffic;
  uint32_t candidates = 0;
  // One line when traffic.ratio() > kTrafficGoal: why no schedule of this compiler moves less (the
  // largest excess over the minimum and its cause), e.g. a 4096-wide activation of the whole batch
  // that does not fit the UB, or instruction fetch against small weight tiles. Empty otherwise.
  std::string traffic_note;

  uint64_t rows_of_tile(uint64_t mt) const { return std::min(m_tile, mp - mt * m_tile); }
  // Host images (bytes), all beat-aligned:
  uint64_t input_bytes = 0;        // tensor 0 packed: per M tile, per k-block [rows x N]
  uint64_t weight_bytes = 0;       // every layer's N x N tiles in consumption order
  uint64_t param_bytes = 0;        // per layer, per n-block: param_rows ACC rows (bias, mult, shift, table)
  uint64_t spill_bytes = 0;        // spilled intermediates, packed like the input
  uint64_t output_bytes = 0;       // final: per M tile, per n-block strip [rows x N] int32 (or int8)
  uint64_t debug_bytes = 0;        // keep_intermediate: every intermediate tensor, packed like input
  std::vector<uint64_t> debug_offset;  // per tensor i >= 1 (index i), offset in the debug image
};

/// Checks the network (sizes, vector lengths, chain) and chooses the plan. Throws
/// Error(kInvalidArgument) naming the layer for a malformed network or batch 0,
/// Error(kUnsupported) when the device configuration cannot hold a minimal tile.
NetworkPlan plan_network(const DeviceParams& params, const nn::QNetwork& net, uint64_t batch,
                         const NetworkPlanOptions& options = {});

/// Host addresses of the images (beat-aligned; 4 KiB-aligned is fastest). `debug` is used only
/// when keep_intermediate is set.
struct NetworkAddresses {
  uint64_t input = 0, weights = 0, params = 0, spill = 0, output = 0, debug = 0;
};

/// Instruction counts and exact DMA bytes of one layer's part of the program.
struct LayerProgramStats {
  uint64_t loads = 0, loadws = 0, matmuls = 0, activates = 0, stores = 0, nops = 0;
  uint64_t instructions = 0;
  uint64_t matmul_rows = 0;       // = MXU_ACTIVE of the layer
  uint64_t activate_rows = 0;     // rows of its ACTIVATEs
  uint64_t vectors = 0;           // VECTOR instructions (bf16 activation functions)
  uint64_t vector_rows = 0;       // their rows: the VECTOR unit's busy cycles less its pipeline (4 each)
  uint64_t load_bytes = 0, store_bytes = 0;
  uint64_t occupancy = 0;         // compute-engine cycle estimate used to attribute PERF_CYCLES
};

/// A compiled network program (without the final FENCE: the driver appends it).
struct CompiledNetwork {
  NetworkPlan plan;
  std::vector<isa::Word> code;
  std::vector<LayerProgramStats> layer_stats;
  std::vector<uint64_t> fold_index;   // program index of every MATMUL, increasing (progress)
  bool keep_intermediate = false;
};

/// Compiles the program for the plan. keep_intermediate additionally STOREs every intermediate
/// int8 tensor into the debug image.
CompiledNetwork compile_network(const DeviceParams& params, const nn::QNetwork& net, uint64_t batch,
                                const NetworkAddresses& addresses, bool keep_intermediate = false,
                                const NetworkPlanOptions& options = {});
CompiledNetwork compile_network(const NetworkPlan& plan, const NetworkAddresses& addresses,
                                bool keep_intermediate = false);

/// Host images.
std::vector<int8_t> pack_network_input(const NetworkPlan& plan, std::span<const int8_t> input_q);
std::vector<int8_t> pack_network_weights(const NetworkPlan& plan, const nn::QNetwork& net);
std::vector<int32_t> pack_network_params(const NetworkPlan& plan, const nn::QNetwork& net);
/// Unpacks an int8 tensor image (input layout) of `features` columns into [batch][features].
std::vector<int8_t> unpack_network_tensor(const NetworkPlan& plan, std::span<const int8_t> image, uint64_t features);
/// Unpacks the final int32 output image into [batch][n_last].
std::vector<int32_t> unpack_network_output(const NetworkPlan& plan, std::span<const int32_t> image);

struct NetworkOptions {
  bool keep_intermediate = false;  // return every non-final layer's int8 output (extra STOREs)
  NetworkPlanOptions plan;
  std::function<void(double)> progress;  // fraction of MATMULs dispatched (0..1)
  TraceHook trace;                       // --trace: compile/upload/submit/wait and the device program
};

struct LayerReport {
  std::string name;
  uint64_t m = 0, k = 0, n = 0;
  uint64_t cycles = 0;          // attributed (see the top of this header)
  double utilization = 0;       // m*k*n / (N^2 * cycles)
  uint64_t rd_bytes = 0;        // exact: LOAD bytes + 16 per instruction of the layer
  uint64_t wr_bytes = 0;        // exact: STORE bytes
  uint64_t min_bytes = 0;       // k*n + m*k + m*n*(4 if int32 output else 1)
  uint64_t mxu_active = 0;      // exact (MATMUL rows)
  uint64_t weight_stall = 0, weight_shift = 0, dma_wait = 0, act_busy = 0;  // attributed
  LayerProgramStats program;
};

/// Splits whole-network counters over the layers (run_network's per-layer figures): exact
/// mxu_active, rd_bytes, wr_bytes; `cycles` = the layer's MXU rows + a share of the remaining
/// PERF_CYCLES in proportion to its other compute occupancy; weight_shift split by LOADWs, act_busy
/// by ACTIVATE rows, weight_stall and dma_wait by occupancy. Integer shares by largest remainder:
/// the layers' cycles (and each counter) add up to the whole, and no counter's share of a layer is
/// above that layer's cycles (every percentage of the report is at most 100%). `name` is left empty.
std::vector<LayerReport> attribute_layers(const NetworkPlan& plan, const std::vector<LayerProgramStats>& stats,
                                          const PerfCounters& perf);

struct NetworkRunResult {
  std::vector<std::vector<int8_t>> layer_outputs;  // keep_intermediate: [layer][batch][n] (non-final)
  std::vector<int32_t> output_i32;   // final int32_output layer: [batch][n_last]
  std::vector<int8_t> output_q;      // final layer without int32_output: [batch][n_last]
  std::vector<LayerReport> layers;
  NetworkPlan plan;
  PerfCounters perf;                 // whole network (cleared before the run)
  uint64_t cycles = 0;               // PERF_CYCLES
  double utilization = 0;            // sum m*k*n / (N^2 * cycles)
  uint64_t macs = 0;                 // sum m*k*n
  uint64_t min_bytes = 0;            // all weights + input + final output, each once
  uint64_t rd_bytes = 0, wr_bytes = 0;  // PERF_RD_BYTES, PERF_WR_BYTES
  uint64_t instructions = 0;         // including the FENCE
  uint64_t sim_cycles = 0;           // backend cycles that passed
  double wall_s = 0;                 // submit + wait
  double sim_cycles_per_s = 0;
};

/// Packs, compiles, runs and unpacks. Throws Error(kInvalidArgument) for a bad network or an
/// input of the wrong size (batch * input_features), and whatever the driver throws.
/// It is the steps below with one set of buffers, uploading the weights on every call.
NetworkRunResult run_network(Device& device, const nn::QNetwork& net, std::span<const int8_t> input_q,
                             uint64_t batch, const NetworkOptions& options = {});

// ---- Many batches of one network on one device ---------------------------------------------------
// run_network() uploads the weights on every call. A server (tpuw/worker/strategies.h) splits it so
// the weights stay in the device's host memory and batch i+1 is uploaded and queued while batch i
// runs (two sets of NetworkBuffers, asynchronous submission):
//
//   NetworkWeights w = upload_network_weights(dev, net);           // once per device and model
//   NetworkPlan plan = plan_network(dev.info().params, net, rows);
//   NetworkBuffers b[2] = {alloc_network_buffers(dev, plan), alloc_network_buffers(dev, plan)};
//   CompiledNetwork prog[2] = {compile_network(plan, network_addresses(w, b[0])), ...[1]};
//   uint32_t f0 = submit_network(dev, prog[0], b[0], x0);          // pack + write input, submit
//   uint32_t f1 = submit_network(dev, prog[1], b[1], x1);          // queued behind batch 0
//   dev.wait(f0);  read_network_output(dev, prog[0], b[0], r0);    // b[0] is free again
//
// The weight and param images depend only on the layers and ArrayN, never on the batch, so one
// upload serves programs of any batch size. Programs are separated by their FENCEs (a fence drains
// the device), so batches in flight may share the spill and debug images but not input/output.

/// A network's weight and param images in one device's host memory (4 KiB-aligned). The buffers
/// must not outlive the Device.
struct NetworkWeights {
  uint32_t array_n = 0;
  uint64_t weight_bytes = 0, param_bytes = 0;
  HostBuffer weights, params;
};

/// Checks the network, packs and writes its weights and params. Throws like plan_network.
NetworkWeights upload_network_weights(Device& device, const nn::QNetwork& net);

/// The per-batch images of one plan: input, spill, output (and debug when keep_intermediate).
struct NetworkBuffers {
  uint64_t input_bytes = 0, spill_bytes = 0, output_bytes = 0, debug_bytes = 0;  // capacities
  HostBuffer input, spill, output, debug;
};

/// Allocates the buffers `plan` needs (4 KiB-aligned; at least 1 byte each).
NetworkBuffers alloc_network_buffers(Device& device, const NetworkPlan& plan, bool keep_intermediate = false);

/// The addresses compile_network needs for these weights and buffers.
NetworkAddresses network_addresses(const NetworkWeights& weights, const NetworkBuffers& buffers);

/// Packs `input_q` ([plan.batch][k0] int8) into buffers.input and submits `program` (compiled for
/// these buffers): returns the fence to Device::wait for. Does not wait and does not touch the PERF
/// counters. Throws Error(kInvalidArgument) for an input of the wrong size or buffers smaller than
/// the program's plan, and whatever Device::submit throws.
uint32_t submit_network(Device& device, const CompiledNetwork& program, const NetworkBuffers& buffers,
                        std::span<const int8_t> input_q, const ProgressFn& progress = {});

/// After the program's fence: reads and unpacks the output into result.output_i32 / output_q (and
/// result.layer_outputs when the program keeps the intermediates); sets result.plan.
void read_network_output(Device& device, const CompiledNetwork& program, const NetworkBuffers& buffers,
                         NetworkRunResult& result);

}  // namespace tpuw::runtime
