// Post-training int8 quantization of a FloatNetwork into a QNetwork (tpuw/nn/qnetwork.h), and the
// bit-exact integer forward pass of a QNetwork on the CPU (the golden model for the device).
//
//   FloatNetwork f = import_onnx("mlp.onnx");
//   QNetwork q = quantize(f, calib_x, calib_rows);          // calib_x: [rows, features] float
//   std::vector<float> y = forward_int(q, x, batch);        // what the device must produce
//
// The rules are the ones in qnetwork.h; docs/quantization.md gives the reasons:
//   input        in_scale = max|x| / 127 over the calibration rows (1 when they are all zero)
//   weights      w_scale[j] = max|W[:,j]| / 127 (1 for an all-zero column),
//                w_q = sat(round(W / w_scale[j]), -127, 127)
//   bias         bias_q[j] = sat32(round(b[j] / (in_scale * w_scale[j])))
//   activations  out_scale = max|y| / 127 of the layer's float output (after ReLU) over the
//                calibration rows, run through the float model; it is the next layer's in_scale
//   requant      mult[j] / 2^shift[j] ~= in_scale * w_scale[j] / out_scale, mult in [2^30, 2^31)
//   last layer   int32_output; out_scale[j] = in_scale * w_scale[j]; y = (acc + bias_q) * out_scale
//                (then ReLU on the host if the layer has one)
// round() is round-half-away-from-zero everywhere on the host (std::round, in double precision);
// the device's ACTIVATE rounds half up (docs/isa.md), which requantize() reproduces exactly.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tpuw/nn/float_network.h"
#include "tpuw/nn/qnetwork.h"

namespace tpuw::nn {

/// A requantization multiplier: value ~= mult / 2^shift.
struct Requant {
  int32_t mult = 0;
  uint8_t shift = 0;
};

/// mult / 2^shift closest to `real` (> 0, finite) with mult in [2^30, 2^31) and shift in 0..63.
/// For real < 2^-33 the shift is capped at 63 and mult = round(real * 2^63) (below 2^30, maybe 0).
/// Throws Error(kUnsupported) when real >= 2^31 - 0.5 (no shift >= 0 can express it) and
/// Error(kInvalidArgument) for real <= 0, NaN or infinity.
Requant quantize_multiplier(double real);

/// Symmetric int8 scale of a tensor: max|x| / 127, or 1 when max|x| is 0 (or x is empty).
float symmetric_scale(std::span<const float> x);

/// sat8(round(x / scale)): float -> int8 with a per-tensor scale (saturates to [-128, 127]).
int8_t quantize_value(float x, float scale);

/// The ACTIVATE instruction's arithmetic (docs/isa.md), exactly: x + bias (32-bit wrap), times
/// mult as a wide signed product, rounding shift (half up) when shift > 0, ReLU, saturate to int8.
int8_t requantize(int32_t acc, int32_t bias, int32_t mult, uint8_t shift, bool relu);

/// Quantizes `net` with calibration data `calib` ([rows, input_features] float32): the compiler's
/// quantize pass (tpuw/compiler/quantize.h) on the graph of `net`, lowered to a QNetwork. Throws
/// Error(kInvalidArgument) for rows == 0 or a size mismatch, Error(kUnsupported) for a network
/// without layers or a requantization factor the device cannot express (names the layer).
QNetwork quantize(const FloatNetwork& net, std::span<const float> calib, uint64_t rows);

/// Input quantization of a whole batch: x_q = sat8(round(x / net.input_scale)), after the input
/// host steps (net.input_steps, fp32) if any.
std::vector<int8_t> quantize_input(const QNetwork& net, std::span<const float> x);

/// The bit-exact integer forward pass of the device layers on the CPU: x_q is
/// [batch, input_features] int8; returns the last layer's int32 (acc + bias_q), [batch, n_last].
/// Every intermediate layer goes through requantize(); MATMUL sums wrap at 32 bits like the device.
std::vector<int32_t> forward_int_raw(const QNetwork& net, std::span<const int8_t> x_q, uint64_t batch);

/// Host side of the last layer: y = float(acc + bias_q) * out_scale[j], max(y, 0) when the layer
/// has ReLU (the int32 output skips ACTIVATE, so its ReLU runs here), then the host op (softmax).
std::vector<float> dequantize_output(const QNetwork& net, std::span<const int32_t> raw, uint64_t batch);

/// quantize_input + forward_int_raw + dequantize_output: the float32 result the device run must
/// reproduce bit for bit. x is [batch, input_features] float.
std::vector<float> forward_int(const QNetwork& net, std::span<const float> x, uint64_t batch);

}  // namespace tpuw::nn
