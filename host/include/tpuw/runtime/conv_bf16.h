// 2-D convolution in bf16 on a TPU Worker device as an implicit GEMM, and whole bf16 CNNs
// (`tpuw run --precision bf16`; docs/network_compiler.md "bf16 CNNs", docs/numerics.md
// "Convolutions in bf16").
//
// The scheme is the int8 convolution's (tpuw/runtime/conv.h, the same ConvPlan from plan_conv):
// the input feature map is read from host memory once per layer as the padded, stride-phase-split
// image, one pixel of ArrayN channels per bf16 UB row pair; every kernel tap (dy, dx) is a bf16
// MATMUL over a shifted UB row range, all taps of an output channel block accumulating in fp32
// into the same ACC rows; ACTIVATE bf16 adds the fp32 bias, applies ReLU and rounds to bf16.
//
// The numbers (what conv2d_bf16_host computes, bit for bit, and the device returns):
//   xb = bf16(x), wb = bf16(w) (round to nearest even, docs/numerics.md rule 7);
//   for each output pixel and output channel o, the weight tiles (tap, cb) in the order
//   tap = dy*KW + dx (0 .. KH*KW-1) outer, channel block cb (0 .. ceil(C/N)-1) inner, skipping a
//   tile whose N x N weights are all +-0 (except the first tile of an output block that has only
//   such tiles):
//     s(tap, cb) = (((+0 + p_0) + p_1) + ...) + p_{N-1},  p_k = xb[cb*N+k at the tap's pixel] * wb[o][cb*N+k][tap]
//                  (exact products, one fp32 RNE addition each; channels >= C and pixels in the
//                  pads are +0)
//     acc = s(first tile); acc = acc + s(next tile) ...           (fp32, in the order above)
//   y = bf16(relu(acc + bias[o]))   (one fp32 addition, ReLU: +0 unless > 0 or NaN, RNE to bf16)
// An average pool is the same with the weight bf16(1/(KH*KW)) on the channel diagonal (count_include_pad=1;
// not exact when KH*KW is not a power of two: 1/9 becomes 0.111328125, +0.2%). A layer with pixel
// groups (an average whose divisor d varies by pixel: weight 1, scale fp32(1/d); a Pad's constant
// border: bias c) computes y = bf16(relu(scale[g] * acc + group_bias[g][o])) for the pixel's group g
// (the product one fp32 RNE multiply, skipped when the scale is 1; then ACTIVATE as above); a max pool in
// conv2d_bf16_host / run_conv2d_bf16 is the max of the window's bf16 inputs inside the image, on the
// host (exact: no rounding; NaN if any input of the window is NaN, -inf for a window of pads only).
// run_cnn_bf16 runs max pools on the device instead (run_max_pool_bf16, tpuw/runtime/maxpool.h; its
// contract max_pool_bf16_host is what forward_cnn_bf16_host uses), the same values for finite
// inputs that are neither -0 nor subnormal.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tpuw/compiler/conv_bf16.h"
#include "tpuw/device.h"
#include "tpuw/runtime/conv.h"
#include "tpuw/runtime/network_bf16.h"
#include "tpuw/runtime/vector_functions.h"

namespace tpuw::runtime {

using compiler::Bf16Cnn;
using compiler::Bf16ConvLayer;

/// The layout of a bf16 convolution: plan_conv's, for a UB and WB of half the rows (a bf16 pixel
/// is a UB row pair, a bf16 weight tile 2N WB rows) and a DMA unit of pixels. Every row index of
/// the plan counts pixels; the program doubles the UB and WB addresses. Throws as plan_conv.
/// `groups`: the layer's pixel groups (Bf16ConvLayer::groups(); 0 or 1: none), whose bias rows the
/// ACC holds after the layer's.
ConvPlan plan_conv_bf16(const DeviceParams& params, const ConvGeometry& geom, uint64_t batch, uint64_t groups = 0);

/// Host bytes of the bf16 layout (2-byte elements; the bias one fp32 row per output block).
uint64_t conv_bf16_in_bytes(const ConvPlan& p);
uint64_t conv_bf16_w_bytes(const ConvPlan& p);
uint64_t conv_bf16_param_bytes(const ConvPlan& p);  // one fp32 bias row per output block and group
uint64_t conv_bf16_out_bytes(const ConvPlan& p);
/// Input, weights and output once in bf16, the bias in fp32: the least any device can move.
uint64_t conv_bf16_min_bytes(const ConvPlan& p);

/// The host images: x NCHW float [batch][in_c][in_h][in_w] rounded to bf16; w [O][C][KH][KW].
/// `pad` (bf16 bits) fills every position that is not an input pixel (+0; a max pool's lowest bf16).
std::vector<uint16_t> pack_conv_bf16_input(const ConvPlan& plan, std::span<const float> x, uint16_t pad = 0);
std::vector<uint16_t> pack_conv_bf16_weights(const ConvPlan& plan, std::span<const float> w);
/// Fills plan.zero_tile: a tile is zero when every weight is +0 or -0 (bf16 bits & 0x7FFF == 0).
void mark_zero_tiles_bf16(ConvPlan& plan, std::span<const uint16_t> packed_weights);
/// y NCHW [batch][out_c][ho][wo] (bf16 values widened to float) from the packed output.
std::vector<float> unpack_conv_bf16_output(const ConvPlan& plan, std::span<const uint16_t> packed);

/// The program (without the FENCE). With pixel groups (plan.pixel_group set, plan.extra_groups + 1
/// scales in `group_scale`): per strip, one VECTOR SCALE per run of ACC rows that share a group
/// (activate_runs) whose scale is not 1, then one ACTIVATE per strip, or with `group_bias` one per
/// run reading its group's bias row (group g, block ob: bias row g * o_blocks + ob).
/// With `wsrc`, the weight tiles are another program's packed weights (the input gradient of a
/// convolution reads the forward program's, conv_train_bf16.h): tile wt of `plan` is tile
/// wsrc->tile[wt] of the buffer at w_addr, and enters the array transposed when wsrc->transpose
/// is set (LOADW transpose: no transposed copy in memory).
struct ConvWeightSource {
  std::vector<uint64_t> tile;  // per weight tile of the plan: its index in the w_addr buffer
  bool transpose = false;
};
ConvProgram compile_conv_bf16(const ConvPlan& plan, bool relu, uint64_t in_addr, uint64_t w_addr, uint64_t bias_addr,
                              uint64_t out_addr, std::span<const float> group_scale = {}, bool group_bias = false,
                              const ConvWeightSource* wsrc = nullptr);

struct ConvBf16RunResult {
  std::vector<float> y;         // NCHW [batch][out_c][ho][wo], bf16 values
  ConvPlan plan;
  PerfCounters perf;
  uint64_t cycles = 0;
  double utilization = 0;       // macs / (N^2 * cycles)
  double row_efficiency = 0;    // as ConvRunResult
  uint64_t min_bytes = 0;       // conv_bf16_min_bytes
  uint64_t moved_bytes = 0;     // PERF_RD_BYTES + PERF_WR_BYTES
  uint64_t instructions = 0;    // including the FENCE
  std::vector<int64_t> indices;  // a max pool's Indices (Bf16ConvLayer::indices): NCHW int64, ONNX's
  double wall_s = 0;
  bool host = false;            // a max pool on the host: no device program, counters 0
};

/// Runs one layer (a max pool: run_max_pool_bf16, tpuw/runtime/maxpool.h; on the host for a device
/// without FEATURES.BF16). Throws Error(kUnsupported) when the device has no bf16
/// mode, Error(kInvalidArgument) for a bad layer or an input of the wrong size, and whatever
/// plan_conv_bf16 and the driver throw.
ConvBf16RunResult run_conv2d_bf16(Device& device, const Bf16ConvLayer& layer, std::span<const float> x, uint64_t batch);

/// The contract on the CPU (header comment), bit for bit what run_conv2d_bf16 returns on an array
/// of `array_n`.
std::vector<float> conv2d_bf16_host(const Bf16ConvLayer& layer, std::span<const float> x, uint64_t batch,
                                    uint32_t array_n);

struct CnnBf16RunResult {
  std::vector<float> output;          // [batch][n_last] fp32 (before the host op), as run_network_bf16's
  std::vector<ConvBf16RunResult> convs;
  Bf16NetworkRunResult head;
  uint64_t cycles = 0;                // sum of the programs' PERF_CYCLES
  uint64_t macs = 0;
  double utilization = 0;
  uint64_t moved_bytes = 0;
  uint64_t min_bytes = 0;
  std::vector<VecPassResult> functions;  // per conv: its activation function's program (empty: none)
  uint64_t vector_cycles = 0;            // the VECTOR unit's busy cycles of all function programs
};

/// Runs `net`: x is [batch][in_c][in_h][in_w] float (rounded to bf16 on the way in); one device
/// program per convolution / average pool / max pool (run_max_pool_bf16), the dense head in one more
/// program (run_network_bf16) on the flattened bf16 activations.
CnnBf16RunResult run_cnn_bf16(Device& device, const Bf16Cnn& net, std::span<const float> x, uint64_t batch);

/// The whole contract on the CPU (conv2d_bf16_host per layer, max_pool_bf16_host for a max pool,
/// forward_bf16_host for the head). `layer_inputs` (may be null) receives each convolution / pool
/// layer's input map, in layer order (what a max pool's Indices are taken over).
std::vector<float> forward_cnn_bf16_host(const Bf16Cnn& net, std::span<const float> x, uint64_t batch,
                                         uint32_t array_n, std::vector<std::vector<float>>* layer_inputs = nullptr);

}  // namespace tpuw::runtime
