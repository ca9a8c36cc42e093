// Models the training benchmarks share (tpuw_bench_train, _mirrored, _pipeline): one definition,
// so their figures are for the same weights.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "tpuw/compiler/training.h"

namespace tpuw::bench {

/// An MLP dims[0]-dims[1]-...-dims.back() as PyTorch's nn.Linear layers ([out, in] weights, ReLU
/// after every layer but the last), weights N(0, 1/in) and biases 0.1·N(0, 1/in) from `seed`.
inline compiler::TrainModel make_mlp(const std::vector<int64_t>& dims, uint64_t seed) {
  std::mt19937_64 rng(seed);
  compiler::TrainModel m;
  m.source = "bench_mlp";
  m.input_features = dims[0];
  for (size_t i = 1; i < dims.size(); ++i) {
    compiler::TrainLayer L;
    L.node = fmt::format("fc{} (Gemm)", i);
    L.weight = fmt::format("fc{}.weight", i);
    L.bias = fmt::format("fc{}.bias", i);
    L.weight_out_in = true;
    L.in = dims[i - 1];
    L.out = dims[i];
    L.relu = i + 1 < dims.size();
    std::normal_distribution<float> d(0.0f, 1.0f / std::sqrt(static_cast<float>(L.in)));
    std::vector<float> w(static_cast<size_t>(L.in * L.out)), b(static_cast<size_t>(L.out));
    for (auto& x : w) x = d(rng);
    for (auto& x : b) x = 0.1f * d(rng);
    m.params[L.weight] = std::move(w);
    m.params[L.bias] = std::move(b);
    m.layers.push_back(std::move(L));
  }
  return m;
}

}  // namespace tpuw::bench
