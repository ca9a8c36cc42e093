// The quantization arithmetic (scales, multipliers, requantize) and the bit-exact integer forward
// pass (tpuw/nn/quantize.h); docs/quantization.md explains the rules. quantize() itself is the
// compiler's quantize pass (quantize_network.cpp).
#include "tpuw/nn/quantize.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "tpuw/activate.h"
#include "tpuw/error.h"

namespace tpuw::nn {
namespace {

int8_t sat8(double v) { return static_cast<int8_t>(std::clamp(v, -128.0, 127.0)); }

float max_abs(std::span<const float> x) {
  float m = 0;
  for (const float v : x) m = std::max(m, std::fabs(v));
  return m;
}

}  // namespace

Requant quantize_multiplier(double real) {
  if (!(real > 0) || !std::isfinite(real)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("requantization factor {} is not a positive finite number", real));
  }
  int e = 0;
  const double f = std::frexp(real, &e);  // real = f * 2^e, f in [0.5, 1)
  auto mult = static_cast<int64_t>(std::llround(std::ldexp(f, 31)));
  if (mult == (int64_t{1} << 31)) {  // f rounded up to 1.0
    mult = int64_t{1} << 30;
    ++e;
  }
  int shift = 31 - e;
  if (shift < 0) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("requantization factor {} is too large for a 32-bit multiplier with shift >= 0", real));
  }
  if (shift > 63) {
    shift = 63;
    mult = static_cast<int64_t>(std::llround(std::ldexp(real, 63)));
  }
  return Requant{static_cast<int32_t>(mult), static_cast<uint8_t>(shift)};
}

float symmetric_scale(std::span<const float> x) {
  const float m = max_abs(x);
  return m > 0 && std::isfinite(m) ? m / 127.0f : 1.0f;
}

int8_t quantize_value(float x, float scale) {
  const double q = std::round(static_cast<double>(x) / static_cast<double>(scale));
  if (std::isnan(q)) return 0;
  return sat8(q);
}

int8_t requantize(int32_t acc, int32_t bias, int32_t mult, uint8_t shift, bool relu) {
  return activate_element(static_cast<uint32_t>(acc), static_cast<uint32_t>(bias), static_cast<uint32_t>(mult), shift,
                          relu);
}

std::vector<int8_t> quantize_input(const QNetwork& net, std::span<const float> x_raw) {
  const std::vector<float> x_dev =
      net.input_steps.empty() ? std::vector<float>{} : apply_input_steps(net.input_steps, x_raw, net.input_features);
  const std::span<const float> x = net.input_steps.empty() ? x_raw : std::span<const float>(x_dev);
  std::vector<int8_t> q(x.size());
  if (net.input_part_scales.size() > 1) {
    // Several graph inputs side by side in each row: every part with its own scale.
    std::vector<float> scale;
    for (size_t p = 0; p < net.input_part_scales.size(); ++p) {
      scale.insert(scale.end(), net.input_part_features.at(p), net.input_part_scales[p]);
    }
    if (scale.size() != net.input_features) {
      throw Error(ErrorKind::kInternal, "the input parts do not cover the network's input features");
    }
    for (size_t i = 0; i < x.size(); ++i) q[i] = quantize_value(x[i], scale[i % scale.size()]);
    return q;
  }
  for (size_t i = 0; i < x.size(); ++i) q[i] = quantize_value(x[i], net.input_scale);
  return q;
}

std::vector<int32_t> forward_int_raw(const QNetwork& net, std::span<const int8_t> x_q, uint64_t batch) {
  if (x_q.size() != batch * net.input_features) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("input has {} values, expected batch {} x {} features",
                                                         x_q.size(), batch, net.input_features));
  }
  std::vector<int8_t> in(x_q.begin(), x_q.end());
  std::vector<int32_t> raw;
  for (size_t li = 0; li < net.layers.size(); ++li) {
    const QLayer& l = net.layers[li];
    const bool last = li + 1 == net.layers.size();
    std::vector<uint32_t> acc(l.n);  // unsigned: the device's 32-bit wrap-around
    std::vector<int8_t> out(last ? 0 : batch * l.n);
    if (last) raw.assign(batch * l.n, 0);
    for (uint64_t r = 0; r < batch; ++r) {
      std::fill(acc.begin(), acc.end(), 0u);
      for (uint32_t k = 0; k < l.k; ++k) {
        const int32_t xv = in[r * l.k + k];
        const int8_t* wrow = l.w_q.data() + size_t{k} * l.n;
        for (uint32_t j = 0; j < l.n; ++j) acc[j] += static_cast<uint32_t>(xv * int32_t{wrow[j]});
      }
      for (uint32_t j = 0; j < l.n; ++j) {
        if (last) {
          raw[r * l.n + j] = static_cast<int32_t>(acc[j] + static_cast<uint32_t>(l.bias_q[j]));
        } else {
          const int8_t q = requantize(static_cast<int32_t>(acc[j]), l.bias_q[j], l.mult[j], l.shift[j], l.relu);
          out[r * l.n + j] = l.lut.empty() ? q : l.lut[static_cast<size_t>(q + 128)];  // ACTIVATE `lut`
        }
      }
    }
    if (!last) in = std::move(out);
  }
  return raw;
}

std::vector<float> dequantize_output(const QNetwork& net, std::span<const int32_t> raw, uint64_t batch) {
  if (net.layers.empty()) throw Error(ErrorKind::kInvalidArgument, "the network has no layers");
  const QLayer& l = net.layers.back();
  if (raw.size() != batch * l.n) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("output has {} values, expected batch {} x {}", raw.size(), batch, l.n));
  }
  std::vector<float> y(raw.size());
  for (uint64_t r = 0; r < batch; ++r) {
    for (uint32_t j = 0; j < l.n; ++j) {
      const float v = static_cast<float>(raw[r * l.n + j]) * l.out_scale[j];
      y[r * l.n + j] = l.relu ? std::max(v, 0.0f) : v;  // the int32 path skips ACTIVATE: ReLU here
    }
  }
  apply_host_ops(y, l.n, net.host_op, net.host_steps);
  return y;
}

std::vector<float> forward_int(const QNetwork& net, std::span<const float> x, uint64_t batch) {
  return dequantize_output(net, forward_int_raw(net, quantize_input(net, x), batch), batch);
}

}  // namespace tpuw::nn
