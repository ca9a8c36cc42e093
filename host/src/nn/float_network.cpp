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

const char* host_op_name(HostOp op) {
  switch (op) {
    case HostOp::kSoftmax: return "softmax";
    case HostOp::kLogSoftmax: return "logsoftmax";
    case HostOp::kLayerNorm: return "layernorm";
    case HostOp::kNone: break;
  }
  return "none";
}

void apply_host_step(std::span<float> y, uint32_t cols, const HostStep& s) {
  if (cols != s.features() || cols == 0 || y.size() % cols != 0) {
    throw Error(ErrorKind::kInternal, fmt::format("host operator {}: rows of {} features, the operator expects {} "
                                                  "({} values)", s.name, cols, s.features(), y.size()));
  }
  const size_t len = s.len, inner = s.inner;
  for (size_t r = 0; r < y.size(); r += cols) {
    for (size_t o = 0; o < s.outer; ++o) {
      for (size_t i = 0; i < inner; ++i) {
        float* v = y.data() + r + o * len * inner + i;  // element l at v[l * inner]
        if (s.op == HostOp::kLayerNorm) {
          double mean = 0;
          for (size_t l = 0; l < len; ++l) mean += v[l * inner];
          mean /= static_cast<double>(len);
          double var = 0;
          for (size_t l = 0; l < len; ++l) var += (v[l * inner] - mean) * (v[l * inner] - mean);
          var /= static_cast<double>(len);
          const double inv = 1.0 / std::sqrt(var + static_cast<double>(s.epsilon));
          for (size_t l = 0; l < len; ++l) {
            const double b = s.bias.empty() ? 0.0 : s.bias[l];
            v[l * inner] = static_cast<float>((v[l * inner] - mean) * inv * s.scale[l] + b);
          }
          continue;
        }
        float mx = v[0];
        for (size_t l = 1; l < len; ++l) mx = std::max(mx, v[l * inner]);
        double sum = 0;
        if (s.op == HostOp::kSoftmax) {
          for (size_t l = 0; l < len; ++l) {
            v[l * inner] = std::exp(v[l * inner] - mx);
            sum += v[l * inner];
          }
          for (size_t l = 0; l < len; ++l) v[l * inner] = static_cast<float>(v[l * inner] / sum);
        } else {  // kLogSoftmax
          for (size_t l = 0; l < len; ++l) sum += std::exp(static_cast<double>(v[l * inner]) - mx);
          const double ls = std::log(sum);
          for (size_t l = 0; l < len; ++l) v[l * inner] = static_cast<float>(static_cast<double>(v[l * inner]) - mx - ls);
        }
      }
    }
  }
}

void apply_host_ops(std::span<float> y, uint32_t cols, HostOp op, std::span<const HostStep> steps) {
  if (op == HostOp::kSoftmax) softmax_rows(y, cols);
  for (const HostStep& s : steps) apply_host_step(y, cols, s);
}

std::vector<float> apply_input_steps(std::span<const HostStep> steps, std::span<const float> x, uint32_t cols) {
  std::vector<float> y(x.begin(), x.end());
  apply_host_ops(y, cols, HostOp::kNone, steps);
  return y;
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
  const std::vector<float> x_dev =
      net.input_steps.empty() ? std::vector<float>{} : apply_input_steps(net.input_steps, x, net.input_features);
  std::span<const float> in = net.input_steps.empty() ? x : std::span<const float>(x_dev);
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

std::vector<std::vector<float>> split_outputs(const FloatNetwork& net, std::span<const float> y, uint64_t rows) {
  const uint32_t f = net.output_features();
  if (y.size() != rows * f) {
    throw Error(ErrorKind::kInternal, fmt::format("split_outputs: {} values for {} rows of {} features", y.size(), rows, f));
  }
  std::vector<std::vector<float>> out;
  for (const NetOutput& o : net.outputs) {
    if (o.col + o.cols > f) {
      throw Error(ErrorKind::kInternal, fmt::format("output '{}': columns {}..{} of {}", o.name, o.col, o.col + o.cols, f));
    }
    std::vector<float> v(rows * o.cols);
    for (uint64_t r = 0; r < rows; ++r) {
      std::copy_n(y.begin() + static_cast<std::ptrdiff_t>(r * f + o.col), o.cols, v.begin() + static_cast<std::ptrdiff_t>(r * o.cols));
    }
    apply_host_ops(v, o.cols, HostOp::kNone, o.host_steps);
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<float> forward_float(const FloatNetwork& net, std::span<const float> x, uint64_t batch) {
  std::vector<std::vector<float>> outs = forward_float_layers(net, x, batch);
  std::vector<float> y =
      outs.empty() ? apply_input_steps(net.input_steps, x, net.input_features) : std::move(outs.back());
  apply_host_ops(y, net.output_features(), net.host_op, net.host_steps);
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
