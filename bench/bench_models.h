// Models the training benchmarks share (tpuw_bench_train, _mirrored, _pipeline): one definition,
// so their figures are for the same weights.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "tpuw/backend.h"
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

/// Device memory for a benchmark that needs `need` bytes: 16 MiB of headroom (programs, staging),
/// rounded up to MiB, never below the backend's default.
inline uint64_t memory_size(uint64_t need) {
  BackendConfig cfg;
  need += 16ull << 20;
  return std::max<uint64_t>(cfg.memory.size, (need + (1 << 20) - 1) & ~uint64_t{(1 << 20) - 1});
}

/// `count` batches of `batch` rows: inputs uniform in [0, 1) over `features`, labels uniform in
/// [0, classes), from a fixed seed so every benchmark run trains on the same data.
struct RandomBatches {
  std::vector<std::vector<float>> xs;
  std::vector<std::vector<int64_t>> ys;
};
inline RandomBatches random_batches(size_t count, int64_t batch, int64_t features, int64_t classes) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> ux(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> uy(0, classes - 1);
  RandomBatches b{std::vector<std::vector<float>>(count), std::vector<std::vector<int64_t>>(count)};
  for (size_t s = 0; s < count; ++s) {
    b.xs[s].resize(static_cast<size_t>(batch * features));
    for (float& v : b.xs[s]) v = ux(rng);
    b.ys[s].resize(static_cast<size_t>(batch));
    for (int64_t& v : b.ys[s]) v = uy(rng);
  }
  return b;
}

}  // namespace tpuw::bench
