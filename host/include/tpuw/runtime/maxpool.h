// 2-D max pooling (int8) on a TPU Worker device (docs/network_compiler.md "MaxPool on the device").
//
// The address generation is the convolution's (tpuw/runtime/conv.h, the same ConvPlan): the
// input map is read from host memory once as the padded, stride-phase-split image, one pixel of
// ArrayN channels per UB row, and every window tap (dy, dx) is one shifted UB row range. The pads
// hold -128, so they never win a max (a window with no input pixel gives -128, as nn::conv2d_int).
// Per output channel block and tile of images:
//   tap 0:        MATMUL (identity weights) UB rows + tap_offset[0] -> ACC region R
//   tap t > 0:    MATMUL (identity weights) UB rows + tap_offset[t] -> ACC scratch S;
//                 VECTOR IMAX R, S -> R          (ISA 1.3: signed 32-bit max of the int32 words)
//   ACTIVATE R -> UB (bias 0, mult 1, shift 0: the int8 value itself; ReLU when the layer has it)
// One identity N x N weight tile serves every tap and block (one LOAD, one LOADW). The result is
// nn::conv2d_int's max pool bit for bit. VECTOR needs FEATURES.BF16: run_cnn keeps the host max
// pool for a device without it (max_pool_on_device).
//
// bf16 (run_max_pool_bf16): the same with bf16 MATMULs (identity 1.0), VECTOR MAX on the fp32 ACC
// copies and ACTIVATE bf16 (exact: every value is a bf16 value). The pads hold the lowest finite
// bf16 (-3.39e38; -inf would make inf * 0 = NaN in the identity's off-diagonal products). Equal to
// the host max pool for finite inputs that are not -0 or subnormal; otherwise (docs/numerics.md):
// -0 becomes +0 and subnormals +-0 (the MXU sums from +0 and flushes), a NaN or infinite input
// gives NaN in every channel of its pixel's channel block (x * 0), and a window of pads only gives
// the lowest bf16 instead of -inf.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tpuw/device.h"
#include "tpuw/runtime/conv.h"
#include "tpuw/runtime/conv_bf16.h"

namespace tpuw::runtime {

/// Whether `info`'s device can run a max pool (the VECTOR unit: FEATURES.BF16).
bool max_pool_on_device(const DeviceInfo& info);

/// The layout: plan_conv's for the pool geometry (in_c == out_c), with half the ACC left for the
/// scratch regions S. Throws as plan_conv.
ConvPlan plan_max_pool(const DeviceParams& params, const ConvGeometry& geom, uint64_t batch);

/// Input and output once (int8): the least any device can move.
uint64_t max_pool_min_bytes(const ConvPlan& plan);

/// The program (without the FENCE). in_addr: pack_conv_input(plan, x, -128); w_addr: the identity
/// tile (array_n x array_n int8); param_addr: the (bias 0, mult 1, shift 0) rows, 3 x array_n int32.
ConvProgram compile_max_pool(const ConvPlan& plan, bool relu, uint64_t in_addr, uint64_t w_addr, uint64_t param_addr,
                             uint64_t out_addr);

/// Runs the max pool `layer` (QConv2d::max_pool; its relu may be set) on `device`. Throws
/// Error(kUnsupported) when the device has no VECTOR unit, and as run_conv2d.
ConvRunResult run_max_pool(Device& device, const QConv2d& layer, std::span<const int8_t> x, uint64_t batch);

/// bf16: plan_conv_bf16's layout with half the ACC left for S (no param rows).
ConvPlan plan_max_pool_bf16(const DeviceParams& params, const ConvGeometry& geom, uint64_t batch);
/// Input and output once (bf16).
uint64_t max_pool_bf16_min_bytes(const ConvPlan& plan);
/// The bf16 program (without the FENCE). in_addr: pack_conv_bf16_input(plan, x, 0xFF7F); w_addr: the
/// identity tile (array_n x array_n bf16 1.0 on the diagonal).
ConvProgram compile_max_pool_bf16(const ConvPlan& plan, bool relu, uint64_t in_addr, uint64_t w_addr,
                                  uint64_t out_addr);
/// The bf16 device max pool on the CPU, bit for bit what run_max_pool_bf16 returns on an array of
/// `array_n` (the identity MATMUL's fp32 sums of each pixel's channel block, VECTOR MAX over the
/// taps in order, ACTIVATE bf16). forward_cnn_bf16_host uses it; conv2d_bf16_host keeps the plain
/// max (the host max pool of a device without the VECTOR unit and of the trainer).
std::vector<float> max_pool_bf16_host(const Bf16ConvLayer& layer, std::span<const float> x, uint64_t batch,
                                      uint32_t array_n);

/// Runs the bf16 max pool `layer` (Bf16ConvLayer::Kind::kMaxPool) on `device`. Throws
/// Error(kUnsupported) when the device has no bf16 mode / VECTOR unit, and as run_conv2d_bf16.
ConvBf16RunResult run_max_pool_bf16(Device& device, const Bf16ConvLayer& layer, std::span<const float> x,
                                    uint64_t batch);

}  // namespace tpuw::runtime
