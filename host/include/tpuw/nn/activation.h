// Elementwise activation functions after a dense layer (issue 13): the float definition the
// float reference, the calibration and the compiler share, and their int8 lookup tables.
//
// On the device an int8 layer with a function f runs its requantization into the table's input
// scale s_in and then maps every int8 result q through a 256-entry table (ACTIVATE `lut`, ISA 1.2,
// docs/numerics.md "Lookup tables"):
//   table[q + 128] = sat8(round(f(q * s_in) / s_out))      (round half away from zero)
// s_in is calibrated on the function's input (the pre-activation), s_out on its output.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tpuw::nn {

/// The functions (ONNX operators; defaults are ONNX's):
///   Sigmoid      1 / (1 + e^-x)
///   Tanh         tanh(x)
///   LeakyRelu    x >= 0 ? x : alpha * x                      (alpha, default 0.01)
///   Clip         min(max(x, alpha), beta)                    (alpha = min, beta = max; Relu6: 0, 6)
///   HardSigmoid  max(0, min(1, alpha * x + beta))             (alpha 0.2, beta 0.5)
///   HardSwish    x * max(0, min(1, x / 6 + 1 / 2))
///   Gelu         x / 2 * (1 + erf(x / sqrt(2)))              (also PyTorch's Erf form)
///   GeluTanh     x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3)))   (approximate = "tanh")
///   Erf          erf(x)
enum class ActFn : uint8_t { kNone, kSigmoid, kTanh, kLeakyRelu, kClip, kHardSigmoid, kHardSwish, kGelu, kGeluTanh, kErf };

struct Activation {
  ActFn fn = ActFn::kNone;
  double alpha = 0;
  double beta = 0;
  std::string node;  // the model node it came from, "NAME (OP)" (messages only)

  bool none() const { return fn == ActFn::kNone; }
};

/// "Sigmoid", "LeakyRelu(alpha=0.1)", "Clip(min=0, max=6)", ...
std::string act_name(const Activation& a);

/// f(x) in double.
double act_apply(const Activation& a, double x);

/// The 256-entry table of `a` for input scale s_in and output scale s_out (both > 0):
/// entry e = sat8(round(f((e - 128) * s_in) / s_out)).
std::vector<int8_t> act_table(const Activation& a, double s_in, double s_out);

}  // namespace tpuw::nn
