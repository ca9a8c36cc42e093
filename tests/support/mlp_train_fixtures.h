// Small training fixtures shared by the trainer tests (tests/unit/training, tests/unit/worker): a
// seeded MLP in PyTorch's layouts and seeded batches for it, so the single-device, mirrored and
// pipeline tests train the same models on the same data.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "tpuw/compiler/training.h"
#include "tpuw/device.h"
#include "tpuw/spec.h"

namespace tpuw::test {

/// Layers (in, out, weight stored [out, in], ReLU after it).
using MlpDims = std::vector<std::tuple<int64_t, int64_t, bool, bool>>;

/// 20 -> 24 (ReLU, [out, in]) -> 12 (ReLU, [in, out]) -> 10 logits ([out, in]).
inline const MlpDims kSmallMlp = {{20, 24, true, true}, {24, 12, false, true}, {12, 10, true, false}};

/// An MLP with `dims` (the first layer's `in` is the input's features), weights N(0, 1/in) and
/// biases 0.1·N(0, 1/in) from `seed`; layer i is node "fc<i> (Gemm)" with "fc<i>.weight/.bias".
inline compiler::TrainModel small_mlp(uint32_t seed, const MlpDims& dims = kSmallMlp,
                                      const std::string& source = "small_mlp") {
  compiler::TrainModel m;
  m.source = source;
  m.input_features = std::get<0>(dims.front());
  std::mt19937 rng(seed);
  int i = 0;
  for (const auto& [in, out, out_in, relu] : dims) {
    compiler::TrainLayer L;
    L.node = fmt::format("fc{} (Gemm)", i);
    L.weight = fmt::format("fc{}.weight", i);
    L.bias = fmt::format("fc{}.bias", i);
    L.weight_out_in = out_in;
    L.in = in;
    L.out = out;
    L.relu = relu;
    std::normal_distribution<float> d(0.0f, 1.0f / std::sqrt(static_cast<float>(in)));
    std::vector<float> w(static_cast<size_t>(in * out)), b(static_cast<size_t>(out));
    for (auto& x : w) x = d(rng);
    for (auto& x : b) x = 0.1f * d(rng);
    m.params[L.weight] = w;
    m.params[L.bias] = b;
    m.layers.push_back(L);
    ++i;
  }
  return m;
}

struct Batch {
  std::vector<float> x;
  std::vector<int64_t> y;
};

/// `rows` rows of `features` inputs uniform in [-1, 1) and labels uniform in [0, classes).
inline Batch make_batch(int64_t rows, uint32_t seed, int64_t features = 20, int64_t classes = 10) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::uniform_int_distribution<int64_t> c(0, classes - 1);
  Batch b;
  b.x.resize(static_cast<size_t>(rows * features));
  for (auto& v : b.x) v = d(rng);
  b.y.resize(static_cast<size_t>(rows));
  for (auto& v : b.y) v = c(rng);
  return b;
}

/// Whether `dev` has what the device trainer needs (FEATURES.BF16 and TRANSPOSE).
inline bool has_training_features(const Device& dev) {
  const uint32_t need = spec::reg::kFeaturesBf16 | spec::reg::kFeaturesTranspose;
  return (dev.info().features & need) == need;
}

}  // namespace tpuw::test
