// MaxPool with its second output, Indices (ONNX: the int64 flattened index into the input of the
// first maximum of each window), on a TPU Worker device, int8 and bf16 (docs/network_compiler.md,
// "MaxPool's Indices on the device").
//
// The values are the max pool of maxpool.h (identity-weight MATMUL per window tap over the
// convolution's shifted UB rows); the argmax runs beside them on the VECTOR unit, in fp32, with
// no new instruction. ACC regions per strip: R (running max), S (this tap), D (S - R) and I (the
// running index), and per output channel block a constant block loaded by DMA like weights: per tap
// t and output pixel, KP_t (what S starts from) and IDX_t (2^23 + the tap's input index as fp32:
// c*H*W + h*W + w, or c*H*W + w*H + h for storage_order=1). Per tap t and image:
//   VECTOR SCALE S = KP_t * 1;  MATMUL (identity, accumulate) -> S     [tap 0: into R, and I = IDX_0]
//   VECTOR SUB D = S - R;  VECTOR MAX R = max(R, S)
//   VECTOR SUB S = IDX_t - I;  VECTOR SELECT S = (D > 0 ? S : 0);  VECTOR ADD I = I + S
// i.e. the index moves only where the tap is strictly greater: the first maximum in window order
// (row-major taps), as ONNX's reference. Pads never win: int8 words are 2^23 + 256 + v as fp32
// (KP_t = 0x4B000100; a pad tap 0x4B0000FF, so a pad of -128 is below every input), bf16 pads start
// from -inf (KP_t = +0, a pad tap -inf). ACTIVATE then writes the values (int8: bias -0x4B000100)
// and STORE ACC writes the I words, 0x4B000000 + index as int32: the host subtracts 2^23, widens to
// int64 and adds the batch offset n*C*H*W (a layout step).
//
// Limits (docs/network_compiler.md): C*H*W < 2^23; bf16: a difference S - R below 2^-126 (inputs of
// magnitude below about 2^-125) flushes to 0 and keeps the earlier index; a window of pads only
// gives the value -128 (int8) / -inf (bf16) and an undefined index; NaN and infinite inputs as
// maxpool.h.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tpuw/device.h"
#include "tpuw/runtime/conv.h"
#include "tpuw/runtime/conv_bf16.h"

namespace tpuw::runtime {

/// plan_max_pool's (bf16: plan_max_pool_bf16's) layout with the ACC split for R, S, D, I and the
/// constant block. Throws Error(kUnsupported) when the constants of one channel block do not fit
/// the ACC or C*H*W >= 2^23, and as plan_conv.
ConvPlan plan_max_pool_indices(const DeviceParams& params, const ConvGeometry& geom, uint64_t batch, bool bf16);

/// The constant blocks, [o_blocks][taps][KP, IDX][acc_rows][array_n] 32-bit words.
std::vector<uint32_t> max_pool_index_constants(const ConvPlan& plan, bool bf16, bool column_major);

/// The program (without the FENCE). int8: in_addr pack_conv_input(plan, x, -128), w_addr the int8
/// identity tile, param_addr (bias -0x4B000100, mult 1, shift 0) rows; bf16: pack_conv_bf16_input(plan,
/// x, 0xFF7F), the bf16 identity tile, param_addr unused. const_addr: max_pool_index_constants;
/// idx_addr: [batch][o_blocks][ho][wo_stored][array_n] int32 words.
ConvProgram compile_max_pool_indices(const ConvPlan& plan, bool bf16, bool relu, uint64_t in_addr, uint64_t w_addr,
                                     uint64_t param_addr, uint64_t const_addr, uint64_t out_addr, uint64_t idx_addr);

/// ONNX's Indices on the CPU: per window the first maximum (strict >) of the input pixels (pads
/// excluded), flattened over [N, C, H, W] (column_major: h and w swapped, storage_order=1).
template <class T>
std::vector<int64_t> max_pool_indices_host(const ConvGeometry& geom, std::span<const T> x, uint64_t batch,
                                           bool column_major);

struct MaxPoolIndicesRun {
  ConvRunResult values;          // y and the counters of the whole program
  std::vector<int64_t> indices;  // NCHW [batch][C][ho][wo]
};
struct MaxPoolIndicesBf16Run {
  ConvBf16RunResult values;
  std::vector<int64_t> indices;
};

/// Runs the int8 max pool `layer` with Indices on `device`. Throws as run_max_pool and
/// plan_max_pool_indices.
MaxPoolIndicesRun run_max_pool_indices(Device& device, const QConv2d& layer, std::span<const int8_t> x,
                                       uint64_t batch, bool column_major);
/// The bf16 one (Bf16ConvLayer::Kind::kMaxPool).
MaxPoolIndicesBf16Run run_max_pool_bf16_indices(Device& device, const Bf16ConvLayer& layer, std::span<const float> x,
                                                uint64_t batch, bool column_major);

}  // namespace tpuw::runtime
