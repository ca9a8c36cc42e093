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
// the blocks added in fp32 in that order (gemm_bf16_host's contract). conv_param_grads_bf16 lays
// im2col out on the host (KH*KW copies of x in bf16; counted in host_bytes); the CNN trainer makes
// it on the device instead (one-hot convolutions, train_programs.h), with the same values.
//
// The ReLU mask is VECTOR SELECT on the device (relu_backward_bf16: d = +0 if y <= 0 else dy, y the
// layer's bf16 output, both LOADed as fp32 rows into the ACC); relu_backward_host is its contract.
// MaxPool backward (docs/numerics.md "MaxPool backward in bf16") runs on the device in two parts:
//   routing  a VECTOR chain per output pixel p, over the window's taps k in (ky, kx) row-major order,
//            with m the pooled output, x_k the tap's input (-inf for a tap in the padding), r = dy
//            rounded to bf16:  a = m - x_k (SUB);  s = SELECT(a, r);  g_k = r - s (SUB);  r = r - g_k.
//            SELECT gives +0 where a <= 0 (x_k == m) and r elsewhere, so g_k = r at the FIRST tap equal
//            to the max and +0 elsewhere; r becomes +0 after it, so later ties get nothing (PyTorch's
//            first-argmax rule). Edge cases: a difference m - x_k below 2^-126 flushes to zero and counts
//            as a tie; a NaN or infinite max (a = NaN) routes nowhere; a non-finite dy turns the window's
//            tap gradients into NaN (inf - inf). max_pool_route_host is the lane-for-lane contract.
//            The host lays out m, dy and the K tap planes (a strided copy of x: one stride phase per tap
//            for non-overlapping windows) as fp32 ACC rows; host_bytes counts them.
//   scatter  dX = sum over taps of g_k at the tap's input position. Non-overlapping windows (every
//            input position in at most one window: stride >= the dilated kernel, the usual 2x2 stride 2)
//            make it a pure layout (the inverse of the tap planes; no additions, values unchanged).
//            Overlapping windows: a transposed convolution on the device of the tap gradients as
//            C*KH*KW channels with one-hot weights (conv_input_grad_bf16 of a 1-hot forward layer),
//            the overlaps summed in fp32 by the MXU and rounded to bf16 once.
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
  ConvBf16RunResult run;        // the device program's figures (stride phases: cycles summed, the rest the last's)
  uint64_t host_bytes = 0;      // bytes of the layouts the host prepared (Z or dy per phase, w', the phases' dX) in bf16
};

/// dX on the device: a stride > 1 as stride_h * stride_w phase sub-convolutions of dy (no inserted
/// zeros; docs/training.md "Strided dX by phases"), else the transposed convolution of Z. The same
/// values as conv_input_grad_bf16_host bit for bit. Throws as conv_input_grad_layer and run_conv2d_bf16.
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

/// A residual Add (forward, relu = the ReLU after it) and the sum of a gradient's two paths (relu
/// false): d = bf16(relu?(a + b)) lane by lane in the VECTOR unit's fp32 arithmetic (ADD, MAXS 0,
/// ROUND_BF16). add_bf16 runs it on the device (the result in `d`; a program like
/// relu_backward_bf16's). Throws Error(kInvalidArgument) for sizes that differ.
std::vector<float> add_bf16_host(std::span<const float> a, std::span<const float> b, bool relu);
ReluBackwardResult add_bf16(Device& device, std::span<const float> a, std::span<const float> b, bool relu);

/// The K tap planes of a max pool's input: [K][batch*C*Ho*Wo], tap k = ky*KW + kx, bf16 values, -inf
/// for a tap in the padding. Throws Error(kInvalidArgument) for a layer that is not a max pool or x of
/// the wrong size.
std::vector<float> max_pool_tap_planes(const Bf16ConvLayer& fwd, std::span<const float> x, uint64_t batch);

/// The routing on the CPU (header comment), lane for lane the device's VECTOR chain: m and dy [P]
/// (dy already bf16), taps [K][P]; returns the tap gradients g [K][P].
std::vector<float> max_pool_route_host(std::span<const float> m, std::span<const float> dy,
                                       std::span<const float> taps);

struct MaxPoolRouteResult {
  std::vector<float> g;     // [K][P], max_pool_route_host's values (dy rounded to bf16), bit for bit
  PerfCounters perf;
  uint64_t cycles = 0;
  uint64_t host_bytes = 0;  // the fp32 images of m, dy, the taps and g
};

/// The routing on the device: one program, ACC chunks double buffered, four VECTOR ops per tap.
/// dy is rounded to bf16 on the way in. Throws Error(kUnsupported) without the VECTOR unit.
MaxPoolRouteResult max_pool_route_bf16(Device& device, std::span<const float> m, std::span<const float> dy,
                                       std::span<const float> taps);

/// Whether every input position lies in at most one window (the scatter is then a layout).
bool max_pool_windows_disjoint(const Bf16ConvLayer& fwd);
/// The scatter of tap gradients [K][P] into dX NCHW for disjoint windows (+0 where no window reads).
/// Throws Error(kInvalidArgument) for overlapping windows.
std::vector<float> max_pool_scatter_layout(const Bf16ConvLayer& fwd, std::span<const float> g, uint64_t batch);

struct MaxPoolBackwardResult {
  std::vector<float> dx;    // NCHW [batch][C][H][W], bf16 values
  uint64_t cycles = 0;      // the routing program plus (overlapping windows) the scatter convolution
  uint64_t macs = 0;        // the scatter convolution's
  uint64_t host_bytes = 0;  // layouts the host prepared (tap planes, m, dy, scatter)
};

/// MaxPool backward on the device: x the pool's input, y its output (the forward's, exact maxima),
/// dy the output gradient. Throws as max_pool_tap_planes, max_pool_route_bf16 and conv_input_grad_bf16.
MaxPoolBackwardResult max_pool_backward_bf16(Device& device, const Bf16ConvLayer& fwd, std::span<const float> x,
                                             std::span<const float> y, std::span<const float> dy, uint64_t batch);
/// Its contract on the CPU, bit for bit (array_n: the scatter convolution's array, overlapping windows).
std::vector<float> max_pool_backward_bf16_host(const Bf16ConvLayer& fwd, std::span<const float> x,
                                               std::span<const float> y, std::span<const float> dy, uint64_t batch,
                                               uint32_t array_n);
/// The same with y computed from x (the forward max pool of conv2d_bf16_host).
std::vector<float> max_pool_backward_host(const Bf16ConvLayer& fwd, std::span<const float> x,
                                          std::span<const float> dy, uint64_t batch, uint32_t array_n = 16);

}  // namespace tpuw::runtime
