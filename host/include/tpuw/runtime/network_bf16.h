// bf16 inference of a float network (tpuw/nn/float_network.h) in ONE device program: what
// `tpuw run --precision bf16` runs (docs/network_compiler.md "bf16 inference"). No calibration:
//
//   Bf16NetworkRunResult r = run_network_bf16(dev, net, x /*[batch][k0] float32*/, batch);
//   r.output   // [batch][n_last] fp32 logits (before the model's host op, softmax)
//
// The program is the training forward pass without its training buffers (docs/training.md): per
// layer one bf16 GEMM of the runtime's GEMM emitter (tpuw/runtime/gemm_bf16.h), chained through
// device memory by the step builder's hazard tracking:
//   - the input (after the host operators on it, net.input_steps, in fp32) is rounded to bf16 on
//     the host (round-to-nearest-even, like `tpuw gemm --dtype bf16`) and stored as a padded
//     [batch, k0] bf16 matrix; the weights likewise ([k, n], bf16), the biases as fp32 rows;
//   - a layer's ACC strip starts as its fp32 bias (LOAD, host stride 0), the MXU adds the bf16 x
//     bf16 products in fp32 (docs/numerics.md), ACTIVATE bf16 applies ReLU and rounds to bf16
//     (RNE) into the next layer's input; the last layer's fp32 ACC is STOREd as the logits (a
//     ReLU on the last layer runs on the host, as for int8, where it is exact in fp32).
// Per-layer figures are attributed like run_network's (attribute_layers in tpuw/runtime/network.h)
// from the layer's instructions and the program's PERF counters; min_bytes counts 2-byte weights
// and activations and 4-byte logits.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "tpuw/device.h"
#include "tpuw/nn/float_network.h"
#include "tpuw/runtime/network.h"
#include "tpuw/runtime/trace.h"

namespace tpuw::runtime {

struct Bf16NetworkOptions {
  std::function<void(double)> progress;  // fraction of MATMULs dispatched (0..1)
  TraceHook trace;                       // --trace: compile/upload/submit/wait and the device program
};

struct Bf16NetworkRunResult {
  std::vector<float> output;         // [batch][n_last] fp32, the last layer's ReLU applied
  std::vector<LayerReport> layers;   // as NetworkRunResult::layers
  PerfCounters perf;                 // whole program (cleared before the run)
  uint64_t cycles = 0;               // PERF_CYCLES
  double utilization = 0;            // sum m*k*n / (N^2 * cycles)
  uint64_t macs = 0;
  uint64_t min_bytes = 0;            // bf16 weights + bf16 input + fp32 output, each once
  uint64_t rd_bytes = 0, wr_bytes = 0;
  uint64_t instructions = 0;         // including the FENCE
  uint64_t sim_cycles = 0;
  double upload_s = 0;               // host: writing weights and input into device memory
  double compile_s = 0;              // host: building the program
  double wall_s = 0;                 // submit + wait
  double sim_cycles_per_s = 0;
};

/// Compiles and runs the network in bf16. Throws Error(kUnsupported) when the device has no bf16
/// mode (FEATURES.BF16 = 0) or its memories cannot hold a tile, Error(kInvalidArgument) for a
/// network without layers, batch 0 or an input of the wrong size, and whatever the driver throws.
Bf16NetworkRunResult run_network_bf16(Device& device, const nn::FloatNetwork& net, std::span<const float> input,
                                      uint64_t batch, const Bf16NetworkOptions& options = {});

/// Device-visible bytes run_network_bf16 allocates for `net` at `batch` rows (page-rounded buffers).
uint64_t network_bf16_memory_bytes(const DeviceParams& params, const nn::FloatNetwork& net, uint64_t batch);

/// What `tpuw run --precision bf16` checks before it runs, as the int8 quantizer does (issue 29):
/// every weight and bias finite (compiler::require_finite_weights, its message, READER "the bf16
/// compiler"; a Gemm alpha/beta that made one infinite included), and every input value (after the
/// network's host steps on the input) inside the bf16 range: Error(kBadFile) "INPUT: row r feature
/// f is X, beyond the largest bf16 (3.3895314e+38): rounding it to bf16 gives inf" otherwise.
void check_bf16_network(const nn::FloatNetwork& net, std::span<const float> input, std::string_view input_name);

/// The device's (or the contract's) fp32 outputs all finite: Error(kUnsupported) naming the first
/// one that is not ("row r column c is +inf: ... overflow the fp32 range") otherwise. A finite
/// model and finite inputs can still overflow: products and sums past 3.4e38.
void check_bf16_outputs(std::span<const float> y, uint64_t cols);

/// The exact contract on the host (gemm_bf16_host per layer): what run_network_bf16 returns on an
/// array of `array_n`, bit for bit. `--check` and the tests compare the device against it.
std::vector<float> forward_bf16_host(const nn::FloatNetwork& net, std::span<const float> input, uint64_t batch,
                                     uint32_t array_n);

}  // namespace tpuw::runtime
