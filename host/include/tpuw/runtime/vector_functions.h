// Activation functions in bf16 inference as fixed sequences of VECTOR operations (issue 13): what
// `tpuw run --precision bf16` runs for Clip/Relu6, LeakyRelu, HardSigmoid, HardSwish, Sigmoid,
// Tanh, Erf and Gelu (docs/numerics.md "Activation functions in bf16"). The ISA has no exp, tanh or
// erf: the functions are composed of the existing element-wise ops (ADD SUB MUL AXPY SCALE MAXS MAX
// SELECT) on fp32 ACC rows, so every step is bit-exact between rtl and ref by construction, and the
// CPU contract (vec_function_lane) runs the same sequence with tpuw/numerics.h.
//
//   VecFunction f = vec_function(layer.act, layer.relu);
//   uint32_t y = vec_function_lane(f, x_bits);   // what the device computes, bit for bit
//
// A function is a straight-line program over "registers": register 0 is the input strip (the
// layer's fp32 pre-activations in the ACC), registers 1 .. regs-1 scratch strips of the same rows;
// the result is register `out`. Piecewise-linear functions are exact up to the one rounding of a
// product or sum that their float definition also has; the smooth ones clamp the input to
// [-L, L], evaluate an odd Chebyshev expansion t * g(2t^2/L^2 - 1) by Clenshaw's recurrence and
// so saturate outside (coefficients: scripts/vector_function_coeffs.py; the errors below).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tpuw/device.h"

#include "tpuw/nn/activation.h"
#include "tpuw/spec.h"

namespace tpuw::runtime {

/// One VECTOR instruction of a function: register dst = op(register a, register b, scalar).
struct VecStep {
  spec::VecOp op = spec::VecOp::kAdd;
  uint8_t dst = 0, a = 0, b = 0;
  float scalar = 0.0f;
};

struct VecFunction {
  std::string name;            // "Relu + Tanh", ... (reports)
  std::vector<VecStep> steps;  // in order
  uint8_t regs = 1;            // register 0 = the input strip (it may be overwritten)
  uint8_t out = 0;             // the register holding the result

  bool empty() const { return steps.empty(); }
  /// ACC rows one strip of `rows` rows needs besides the input strip.
  uint64_t scratch_rows(uint64_t rows) const { return uint64_t{regs - 1u} * rows; }
};

/// The sequence for ReLU (if `relu`: MAXS 0, ACTIVATE's ReLU) followed by `act` (none: the ReLU
/// alone; neither: an empty function). Throws Error(kUnsupported) for a function it cannot build.
VecFunction vec_function(const nn::Activation& act, bool relu);

/// The contract: the function on one fp32 lane (bit pattern), op by op with tpuw/numerics.h.
uint32_t vec_function_lane(const VecFunction& f, uint32_t x);
float vec_function_apply(const VecFunction& f, float x);

/// The stated maximal error of the device's function against the exact one (in double), for
/// |x| anywhere: absolute for Tanh, Sigmoid, Erf; relative to max(1, |x|) for Gelu (both forms);
/// 2^-23 relative for the piecewise-linear ones (one fp32 rounding of alpha * x + beta or x / 6).
/// Measured by scripts/vector_function_coeffs.py (docs/numerics.md) and checked by the tests.
double vec_function_error_bound(const nn::Activation& act);

/// One device program that applies `f` to a flat array of values (a bf16 feature map after a
/// convolution or pool, any layout): LOAD the values as fp32 ACC rows of ArrayN lanes, the VECTOR
/// sequence, ACTIVATE bf16 (no bias, no ReLU) and STORE. y[i] = bf16(f(x[i])) (vec_function_host).
struct VecPassResult {
  std::vector<float> y;          // bf16 values widened, x.size() of them
  PerfCounters perf;
  uint64_t cycles = 0;           // PERF_CYCLES
  uint64_t vectors = 0;          // VECTOR instructions
  uint64_t vector_cycles = 0;    // their rows + 4 each: the VECTOR unit's busy cycles
  uint64_t instructions = 0;     // including the FENCE
  uint64_t moved_bytes = 0;      // PERF_RD_BYTES + PERF_WR_BYTES
  uint64_t min_bytes = 0;        // 2 bytes in + 2 bytes out per value
};

/// Throws Error(kUnsupported) without FEATURES.BF16, Error(kInvalidArgument) for an empty array.
VecPassResult run_vec_function_bf16(Device& device, const VecFunction& f, std::span<const float> x);

/// The contract of run_vec_function_bf16: bf16(f(x[i])) for each value.
std::vector<float> vec_function_host(const VecFunction& f, std::span<const float> x);

}  // namespace tpuw::runtime
