// Shared fixtures of the strategy tests: the digits example quantized, a random MLP, random GEMMs.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "tpuw/nn/onnx_import.h"
#include "tpuw/nn/qnetwork.h"
#include "tpuw/nn/quantize.h"
#include "tpuw/runtime/npy.h"

namespace tpuw::strategies_test {

inline std::vector<float> as_float(const npy::Array& a) {
  const auto v = a.view<uint8_t>();
  return {v.begin(), v.end()};
}

/// examples/digits: the MLP quantized with calib_x, the test split quantized.
struct Digits {
  nn::QNetwork q;
  std::vector<int8_t> x_q;
  uint64_t rows = 0;
  explicit Digits(const std::string& dir) {
    const nn::FloatNetwork net = nn::import_onnx(dir + "/digits_mlp.onnx");
    const npy::Array test_x = npy::load(dir + "/test_x.npy");
    const npy::Array calib_x = npy::load(dir + "/calib_x.npy");
    const std::vector<float> c = as_float(calib_x);
    q = nn::quantize(net, c, calib_x.shape[0]);
    x_q = nn::quantize_input(q, as_float(test_x));
    rows = test_x.shape[0];
  }
};

/// A random quantized MLP with the given widths; int32 output on the last layer unless int8_out.
inline nn::QNetwork random_mlp(const std::vector<uint32_t>& dims, uint64_t seed, bool int8_out = false) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> w(-127, 127), b(-2000, 2000), sh(14, 18);
  nn::QNetwork q;
  q.input_features = dims[0];
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    nn::QLayer l;
    l.name = "fc" + std::to_string(i);
    l.k = dims[i];
    l.n = dims[i + 1];
    for (uint64_t j = 0; j < uint64_t{l.k} * l.n; ++j) l.w_q.push_back(static_cast<int8_t>(w(rng)));
    for (uint32_t j = 0; j < l.n; ++j) l.bias_q.push_back(b(rng));
    const bool last = i + 2 == dims.size();
    l.relu = !last;
    l.int32_output = last && !int8_out;
    if (!l.int32_output) {
      for (uint32_t j = 0; j < l.n; ++j) {
        l.mult.push_back(1 << 30);
        l.shift.push_back(static_cast<uint8_t>(sh(rng)));
      }
    }
    l.out_scale = {1.0f};
    q.layers.push_back(std::move(l));
  }
  return q;
}

inline std::vector<int8_t> random_i8(uint64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> d(-128, 127);
  std::vector<int8_t> v(n);
  for (auto& x : v) x = static_cast<int8_t>(d(rng));
  return v;
}

}  // namespace tpuw::strategies_test
