// The quantizer as it was before it became a compiler pass (host/src/nn/quantize.cpp at the merge
// of the graph compiler, verbatim but for its name): the reference the pass must match bit for bit.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "tpuw/error.h"
#include "tpuw/nn/float_network.h"
#include "tpuw/nn/quantize.h"

namespace tpuw::nn::testing {

inline int32_t legacy_sat32(double v) {
  return static_cast<int32_t>(std::clamp(v, static_cast<double>(std::numeric_limits<int32_t>::min()),
                                         static_cast<double>(std::numeric_limits<int32_t>::max())));
}

inline QNetwork legacy_quantize(const FloatNetwork& net, std::span<const float> calib, uint64_t rows) {
  if (net.layers.empty()) {
    throw Error(ErrorKind::kUnsupported, fmt::format("{}: the network has no dense layer to run on the device", net.source));
  }
  if (rows == 0) throw Error(ErrorKind::kInvalidArgument, "calibration data has no rows");
  if (calib.size() != rows * net.input_features) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("calibration data has {} values, expected {} rows x {} features", calib.size(), rows,
                            net.input_features));
  }
  const std::vector<std::vector<float>> acts = forward_float_layers(net, calib, rows);

  QNetwork q;
  q.input_features = net.input_features;
  q.input_scale = symmetric_scale(calib);
  q.host_op = net.host_op;
  float in_scale = q.input_scale;
  for (size_t li = 0; li < net.layers.size(); ++li) {
    const DenseLayer& l = net.layers[li];
    const bool last = li + 1 == net.layers.size();
    QLayer ql;
    ql.name = l.name;
    ql.k = l.k;
    ql.n = l.n;
    ql.relu = l.relu;
    ql.int32_output = last;
    ql.w_q.resize(size_t{l.k} * l.n);
    ql.bias_q.resize(l.n);
    std::vector<float> w_scale(l.n);
    for (uint32_t j = 0; j < l.n; ++j) {
      float m = 0;
      for (uint32_t k = 0; k < l.k; ++k) m = std::max(m, std::fabs(l.w[size_t{k} * l.n + j]));
      if (!std::isfinite(m)) {
        throw Error(ErrorKind::kUnsupported,
                    fmt::format("{}: layer '{}' column {} has a non-finite weight", net.source, l.name, j));
      }
      w_scale[j] = m > 0 ? m / 127.0f : 1.0f;
      for (uint32_t k = 0; k < l.k; ++k) {
        const double v = std::round(static_cast<double>(l.w[size_t{k} * l.n + j]) / static_cast<double>(w_scale[j]));
        ql.w_q[size_t{k} * l.n + j] = static_cast<int8_t>(std::clamp(v, -127.0, 127.0));
      }
      const double acc_scale = static_cast<double>(in_scale) * static_cast<double>(w_scale[j]);
      const double bq = std::round(static_cast<double>(l.b[j]) / acc_scale);
      if (std::isnan(bq)) {
        throw Error(ErrorKind::kUnsupported, fmt::format("{}: layer '{}' bias {} is not finite", net.source, l.name, j));
      }
      ql.bias_q[j] = legacy_sat32(bq);
    }
    if (last) {
      ql.out_scale.resize(l.n);
      for (uint32_t j = 0; j < l.n; ++j) ql.out_scale[j] = in_scale * w_scale[j];
    } else {
      const float out_scale = symmetric_scale(acts[li]);
      ql.out_scale = {out_scale};
      ql.mult.resize(l.n);
      ql.shift.resize(l.n);
      for (uint32_t j = 0; j < l.n; ++j) {
        const double real = static_cast<double>(in_scale) * static_cast<double>(w_scale[j]) /
                            static_cast<double>(out_scale);
        try {
          const Requant r = quantize_multiplier(real);
          ql.mult[j] = r.mult;
          ql.shift[j] = r.shift;
        } catch (const Error& e) {
          throw Error(ErrorKind::kUnsupported,
                      fmt::format("{}: layer '{}' column {}: {}", net.source, l.name, j, e.what()));
        }
      }
      in_scale = out_scale;
    }
    q.layers.push_back(std::move(ql));
  }
  return q;
}

}  // namespace tpuw::nn::testing
