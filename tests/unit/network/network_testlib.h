// Test helpers for the network compiler: an integer CPU forward pass written straight from the
// definition in tpuw/nn/qnetwork.h / docs/isa.md (ACTIVATE), random quantized networks, and the
// check that a device run equals the CPU pass and another backend's run.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tpuw/nn/qnetwork.h"
#include "tpuw/runtime/network.h"

namespace tpuw::nettest {

inline int8_t requant(int32_t x, int32_t mult, uint8_t shift, bool relu) {
  __int128 p = static_cast<__int128>(x) * mult;
  if (shift > 0) p = (p + (static_cast<__int128>(1) << (shift - 1))) >> shift;
  if (relu && p < 0) p = 0;
  return static_cast<int8_t>(std::clamp<__int128>(p, -128, 127));
}

/// acc + bias (int32 wrap-around) of one layer, [batch][n].
inline std::vector<int32_t> layer_acc(const nn::QLayer& l, const std::vector<int8_t>& x, uint64_t batch) {
  std::vector<int32_t> out(batch * l.n);
  std::vector<uint32_t> row(l.n);
  for (uint64_t b = 0; b < batch; ++b) {
    for (uint32_t j = 0; j < l.n; ++j) row[j] = static_cast<uint32_t>(l.bias_q[j]);
    for (uint32_t k = 0; k < l.k; ++k) {
      const auto xv = static_cast<uint32_t>(static_cast<int32_t>(x[b * l.k + k]));
      const int8_t* w = l.w_q.data() + uint64_t{k} * l.n;
      for (uint32_t j = 0; j < l.n; ++j) row[j] += xv * static_cast<uint32_t>(static_cast<int32_t>(w[j]));
    }
    for (uint32_t j = 0; j < l.n; ++j) out[b * l.n + j] = static_cast<int32_t>(row[j]);
  }
  return out;
}

struct CpuForward {
  std::vector<std::vector<int8_t>> int8_outputs;  // every layer without int32_output
  std::vector<int32_t> output_i32;                // last layer when int32_output
};

inline CpuForward forward(const nn::QNetwork& net, const std::vector<int8_t>& input, uint64_t batch) {
  CpuForward f;
  std::vector<int8_t> x = input;
  for (const nn::QLayer& l : net.layers) {
    const std::vector<int32_t> acc = layer_acc(l, x, batch);
    if (l.int32_output) {
      f.output_i32 = acc;
      break;
    }
    std::vector<int8_t> y(acc.size());
    for (size_t i = 0; i < acc.size(); ++i) {
      const size_t j = i % l.n;
      y[i] = requant(acc[i], l.mult[j], l.shift[j], l.relu);
      if (!l.lut.empty()) y[i] = l.lut[static_cast<size_t>(y[i] + 128)];  // ACTIVATE `lut`
    }
    f.int8_outputs.push_back(y);
    x = std::move(y);
  }
  return f;
}

inline std::vector<int8_t> random_int8(size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> d(-128, 127);
  std::vector<int8_t> v(n);
  for (auto& x : v) x = static_cast<int8_t>(d(rng));
  return v;
}

/// A random network with the given widths (dims[0] = input features); the last layer has
/// int32_output unless final_int8. Requantization keeps typical outputs inside int8.
/// With `luts`, every int8 layer gets a random 256-entry lookup table (ACTIVATE `lut`).
inline nn::QNetwork random_network(const std::vector<uint32_t>& dims, std::mt19937& rng, bool final_int8 = false,
                                   bool luts = false) {
  nn::QNetwork net;
  net.input_features = dims.at(0);
  std::uniform_int_distribution<int32_t> bias_d(-20000, 20000);
  std::uniform_int_distribution<int32_t> mult_d(1 << 30, 0x7FFFFFFF);
  std::uniform_int_distribution<int> jitter(-1, 1);
  std::bernoulli_distribution coin(0.5);
  for (size_t i = 1; i < dims.size(); ++i) {
    nn::QLayer l;
    l.name = "dense" + std::to_string(i - 1);
    l.k = dims[i - 1];
    l.n = dims[i];
    l.w_q = random_int8(uint64_t{l.k} * l.n, rng);
    l.bias_q.resize(l.n);
    for (auto& b : l.bias_q) b = bias_d(rng);
    const bool last = i + 1 == dims.size();
    l.int32_output = last && !final_int8;
    l.relu = !l.int32_output && coin(rng);
    if (!l.int32_output) {
      // acc spread ~ sqrt(k) * 127 * 73; aim the output spread at ~40.
      const double spread = std::sqrt(static_cast<double>(l.k)) * 127.0 * 73.0 / 40.0;
      const int base = 31 + static_cast<int>(std::ceil(std::log2(spread)));
      l.mult.resize(l.n);
      l.shift.resize(l.n);
      for (uint32_t j = 0; j < l.n; ++j) {
        l.mult[j] = mult_d(rng);
        l.shift[j] = static_cast<uint8_t>(std::clamp(base + jitter(rng), 1, 63));
      }
      l.out_scale = {0.1f};
      if (luts) l.lut = random_int8(256, rng);
    } else {
      l.out_scale.assign(l.n, 0.01f);
    }
    net.layers.push_back(std::move(l));
  }
  return net;
}

// Every intermediate int8 tensor (run with keep_intermediate) and the final output of `got` equal
// the CPU forward pass and `other` (the same network on another backend), bit for bit.
inline void expect_outputs_match(const runtime::NetworkRunResult& got, const runtime::NetworkRunResult& other,
                                 const CpuForward& cpu, const nn::QNetwork& net, bool final_int8) {
  ASSERT_EQ(got.layer_outputs.size(), net.layers.size() - 1);
  for (size_t l = 0; l < got.layer_outputs.size(); ++l) {
    EXPECT_EQ(got.layer_outputs[l], cpu.int8_outputs[l]) << "layer " << l;
    EXPECT_EQ(got.layer_outputs[l], other.layer_outputs[l]) << "layer " << l;
  }
  if (final_int8) {
    EXPECT_EQ(got.output_q, cpu.int8_outputs.back());
    EXPECT_EQ(got.output_q, other.output_q);
  } else {
    EXPECT_EQ(got.output_i32, cpu.output_i32);
    EXPECT_EQ(got.output_i32, other.output_i32);
  }
}

}  // namespace tpuw::nettest
