// Activation functions and their int8 lookup tables (tpuw/nn/activation.h).
#include "tpuw/nn/activation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tpuw::nn {

std::string act_name(const Activation& a) {
  switch (a.fn) {
    case ActFn::kNone: return "none";
    case ActFn::kSigmoid: return "Sigmoid";
    case ActFn::kTanh: return "Tanh";
    case ActFn::kLeakyRelu: return fmt::format("LeakyRelu(alpha={:g})", a.alpha);
    case ActFn::kClip: return fmt::format("Clip(min={:g}, max={:g})", a.alpha, a.beta);
    case ActFn::kHardSigmoid: return fmt::format("HardSigmoid(alpha={:g}, beta={:g})", a.alpha, a.beta);
    case ActFn::kHardSwish: return "HardSwish";
    case ActFn::kGelu: return "Gelu";
    case ActFn::kGeluTanh: return "Gelu(approximate=tanh)";
    case ActFn::kErf: return "Erf";
  }
  return "?";
}

double act_apply(const Activation& a, double x) {
  switch (a.fn) {
    case ActFn::kNone: return x;
    case ActFn::kSigmoid: return 1.0 / (1.0 + std::exp(-x));
    case ActFn::kTanh: return std::tanh(x);
    case ActFn::kLeakyRelu: return x >= 0 ? x : a.alpha * x;
    case ActFn::kClip: return std::min(std::max(x, a.alpha), a.beta);
    case ActFn::kHardSigmoid: return std::max(0.0, std::min(1.0, a.alpha * x + a.beta));
    case ActFn::kHardSwish: return x * std::max(0.0, std::min(1.0, x / 6.0 + 0.5));
    case ActFn::kGelu: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case ActFn::kGeluTanh: {
      const double c = std::sqrt(2.0 / 3.14159265358979323846);
      return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
    }
    case ActFn::kErf: return std::erf(x);
  }
  return x;
}

std::vector<int8_t> act_table(const Activation& a, double s_in, double s_out) {
  std::vector<int8_t> t(256);
  for (int e = 0; e < 256; ++e) {
    const double y = act_apply(a, static_cast<double>(e - 128) * s_in) / s_out;
    t[static_cast<size_t>(e)] = static_cast<int8_t>(std::clamp(std::round(y), -128.0, 127.0));
  }
  return t;
}

}  // namespace tpuw::nn
