// The backward pass of bf16 convolutions and pools on a TPU Worker device (training CNNs, issue 13;
// docs/training.md "Convolutions and pools", docs/numerics.md "Convolution gradients in bf16").
//
// For a layer y = conv(x, w) + b (Bf16ConvLayer, NCHW, w [O][C][KH][KW]) and the gradient dy of its
// output (NCHW [B][O][Ho][Wo], the ReLU mask already applied):
//
// dX, the input gradient, is a transposed convolution run by the forward bf16 convolution program
// (runtime/conv_bf16.h, implicit GEMM, one MATMUL per tap over shifted UB rows):
//   dX = conv_{stride 1, dilation d}(Z, w'),  w'[c][o][ky][kx] = w[o][c][KH-1-ky][KW-1-kx],
//   Z = dy with (stride-1) zeros inserted between its pixels ("zero insertion", [B][O][(Ho-1)*sh+1][...]),
//   padded by d*(KH-1) - pad_top above and H - 1 + pad_top - (Ho-1)*sh below (left/right alike).
// Z and w' are layouts the host prepares once per step (the host never adds or multiplies: it
// moves values and inserts zeros); the convolution is the device's. The result is bf16 (ACTIVATE
// bf16 with a zero bias, no ReLU): what the layer before consumes. The numbers are therefore those
// of conv2d_bf16_host on that transposed layer, bit for bit.
// An average pool's dX is the same transposed convolution of its constant diagonal weights.
//
// dW and db, the parameter gradients, are one bf16 GEMM with fp32 output (runtime/gemm_bf16.h):
//   G = Aᵀ · D   with A = im2col(x) [B*Ho*Wo, C*KH*KW + 1] (the last column all ones) and
//                D = dy as rows [B*Ho*Wo, O] (pixel-major, b outer, then oy, ox),
// A transposed on the device (TRANSPOSE bf16), so G [C*KH*KW + 1, O] fp32:
//   dW[o][c][ky][kx] = G[c*KH*KW + ky*KW + kx][o],   db[o] = G[C*KH*KW][o] (the all-ones column:
//   the bias gradient is a MATMUL with ones). The reduction runs over the batch and the output
// pixels together: ArrayN-pixel blocks in increasing pixel order, each block a column sum from +0,
// the blocks added in fp32 in that order (gemm_bf16_host's contract). im2col is a host layout
// (KH*KW copies of x in bf16; counted in host_bytes).
//
// The ReLU mask is VECTOR SELECT on the device (relu_backward_bf16: d = +0 if y <= 0 else dy, y the
// layer's bf16 output, both LOADed as fp32 rows into the ACC); relu_backward_host is its contract.
// On the host, and why: MaxPool backward
// (max_pool_backward_host) routes each output gradient to the argmax of its window; the VECTOR unit
// has MAX and SELECT but no equality compare, so it cannot find the argmax position, and the routing
// is a scatter. Rule: the argmax is the first window position, in (ky, kx) row-major order, inside
// the image, whose input equals the pooled output (a NaN output: the first NaN input); gradients of
// overlapping windows are added in fp32 in output raster order, then rounded to bf16 once.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tpuw/compiler/conv_bf16.h"
#include "tpuw/device.h"
#include "tpuw/runtime/conv_bf16.h"
#include "tpuw/runtime/gemm_bf16.h"

namespace tpuw::runtime {

/// The transposed layer computing dX of `fwd` (kConv or kAvgPool; the bias zero, no ReLU).
/// Throws Error(kUnsupported) for padding larger than the dilated kernel (a negative transposed
/// padding) and Error(kInvalidArgument) for a max pool.
Bf16ConvLayer conv_input_grad_layer(const Bf16ConvLayer& fwd);

/// dy NCHW [batch][O][Ho][Wo] with (stride-1) zeros inserted: the transposed layer's input.
std::vector<float> insert_grad_zeros(const Bf16ConvLayer& fwd, std::span<const float> dy, uint64_t batch);

struct ConvInputGradResult {
  std::vector<float> dx;        // NCHW [batch][C][H][W], bf16 values
  ConvBf16RunResult run;        // the device program's figures
  uint64_t host_bytes = 0;      // bytes of the layouts the host prepared (Z, w') in bf16
};

/// dX on the device. Throws as conv_input_grad_layer and run_conv2d_bf16.
ConvInputGradResult conv_input_grad_bf16(Device& device, const Bf16ConvLayer& fwd, std::span<const float> dy,
                                         uint64_t batch);
/// The contract on the CPU, bit for bit what conv_input_grad_bf16 returns on an array of array_n.
std::vector<float> conv_input_grad_bf16_host(const Bf16ConvLayer& fwd, std::span<const float> dy, uint64_t batch,
                                             uint32_t array_n);

/// im2col of x with the ones column: [batch*Ho*Wo][C*KH*KW + 1], pads +0 (kConv only).
std::vector<float> conv_im2col(const Bf16ConvLayer& fwd, std::span<const float> x, uint64_t batch);
/// dy NCHW as pixel rows [batch*Ho*Wo][O].
std::vector<float> conv_grad_rows(const Bf16ConvLayer& fwd, std::span<const float> dy, uint64_t batch);

struct ConvParamGradResult {
  std::vector<float> dw;        // [O][C][KH][KW] fp32
  std::vector<float> db;        // [O] fp32
  Bf16GemmResult gemm;          // the device program's figures (empty for the host contract)
  uint64_t host_bytes = 0;      // bytes of the layouts the host prepared (im2col, dy rows) in bf16
};

/// dW and db on the device (one GEMM, fp32 out). Throws Error(kInvalidArgument) for a pool or
/// spans of the wrong size, and whatever gemm_bf16 throws.
ConvParamGradResult conv_param_grads_bf16(Device& device, const Bf16ConvLayer& fwd, std::span<const float> x,
                                          std::span<const float> dy, uint64_t batch);
/// The contract on the CPU (gemm_bf16_host), bit for bit.
ConvParamGradResult conv_param_grads_bf16_host(const Bf16ConvLayer& fwd, std::span<const float> x,
                                               std::span<const float> dy, uint64_t batch, uint32_t array_n);

/// The ReLU derivative as VECTOR SELECT defines it (num::select): +0 where y <= 0, else dy
/// (y NaN: dy; dy flushed and canonicalized as every VECTOR result).
std::vector<float> relu_backward_host(std::span<const float> y, std::span<const float> dy);

struct ReluBackwardResult {
  std::vector<float> d;  // relu_backward_host's values, bit for bit
  PerfCounters perf;
  uint64_t cycles = 0;
};

/// The same on the device: y and dy as fp32 rows of ArrayN lanes LOADed into the ACC, one VECTOR
/// SELECT per chunk of rows (two chunk buffers, double buffered), the result STOREd. Throws
/// Error(kUnsupported) without the VECTOR unit and Error(kInvalidArgument) for sizes that differ.
ReluBackwardResult relu_backward_bf16(Device& device, std::span<const float> y, std::span<const float> dy);

/// MaxPool backward on the host (header comment: the routing rule). x is the pool's input, dy the
/// gradient of its output; returns dX NCHW, bf16 values.
std::vector<float> max_pool_backward_host(const Bf16ConvLayer& fwd, std::span<const float> x,
                                          std::span<const float> dy, uint64_t batch);

}  // namespace tpuw::runtime
