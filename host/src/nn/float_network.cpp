// Float reference forward pass of a FloatNetwork (see tpuw/nn/float_network.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tpuw/error.h"
#include "tpuw/nn/float_network.h"

namespace tpuw::nn {

void softmax_rows(std::span<float> y, uint32_t cols) {
  if (cols == 0) return;
  for (size_t r = 0; r + cols <= y.size(); r += cols) {
    const std::span<float> row = y.subspan(r, cols);
    const float mx = *std::max_element(row.begin(), row.end());
    double sum = 0;
    for (float& v : row) {
      v = std::exp(v - mx);
      sum += v;
    }
    for (float& v : row) v = static_cast<float>(v / sum);
  }
}

std::vector<std::vector<float>> forward_float_layers(const FloatNetwork& net, std::span<const float> x,
                                                     uint64_t batch) {
  if (x.size() != batch * net.input_features) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: input has {} values, expected batch {} x {} features", net.source, x.size(), batch,
                            net.input_features));
  }
  std::vector<std::vector<float>> outs;
  outs.reserve(net.layers.size());
  std::span<const float> in = x;
  for (const DenseLayer& l : net.layers) {
    std::vector<float> y(batch * l.n);
    std::vector<double> acc(l.n);
    for (uint64_t r = 0; r < batch; ++r) {
      for (uint32_t j = 0; j < l.n; ++j) acc[j] = l.b[j];
      for (uint32_t k = 0; k < l.k; ++k) {
        const double xv = in[r * l.k + k];
        const float* wrow = l.w.data() + size_t{k} * l.n;
        for (uint32_t j = 0; j < l.n; ++j) acc[j] += xv * wrow[j];
      }
      for (uint32_t j = 0; j < l.n; ++j) {
        const double v = l.relu ? std::max(acc[j], 0.0) : acc[j];
        y[r * l.n + j] = static_cast<float>(l.act.none() ? v : act_apply(l.act, v));
      }
    }
    outs.push_back(std::move(y));
    in = outs.back();
  }
  return outs;
}

std::vector<float> forward_float(const FloatNetwork& net, std::span<const float> x, uint64_t batch) {
  std::vector<std::vector<float>> outs = forward_float_layers(net, x, batch);
  std::vector<float> y = outs.empty() ? std::vector<float>(x.begin(), x.end()) : std::move(outs.back());
  if (net.host_op == HostOp::kSoftmax) softmax_rows(y, net.output_features());
  return y;
}

std::vector<uint32_t> argmax_rows(std::span<const float> y, uint32_t cols) {
  std::vector<uint32_t> out;
  if (cols == 0) return out;
  out.reserve(y.size() / cols);
  for (size_t r = 0; r + cols <= y.size(); r += cols) {
    const auto row = y.subspan(r, cols);
    out.push_back(static_cast<uint32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
  }
  return out;
}

}  // namespace tpuw::nn
