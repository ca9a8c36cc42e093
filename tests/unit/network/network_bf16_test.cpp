// bf16 inference (tpuw/runtime/network_bf16.h) on the ref backend: the device equals the bf16
// contract on the host bit for bit, stays within a stated bf16 tolerance of a double-precision
// float forward pass, its per-layer figures add up to the PERF counters, and a device without
// bf16 (FEATURES.BF16 = 0) is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/runtime/network_bf16.h"

namespace tpuw::runtime {
namespace {

nn::FloatNetwork random_net(const std::vector<uint32_t>& dims, std::mt19937& rng, bool last_relu = false) {
  nn::FloatNetwork net;
  net.source = "random";
  net.input_features = dims[0];
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    nn::DenseLayer l;
    l.name = "fc" + std::to_string(i);
    l.k = dims[i];
    l.n = dims[i + 1];
    const float scale = 1.0f / std::sqrt(static_cast<float>(l.k));  // keeps activations O(1)
    for (uint64_t j = 0; j < uint64_t{l.k} * l.n; ++j) l.w.push_back(g(rng) * scale);
    for (uint32_t j = 0; j < l.n; ++j) l.b.push_back(0.1f * g(rng));
    l.relu = i + 2 < dims.size() || last_relu;
    net.layers.push_back(std::move(l));
  }
  return net;
}

std::vector<float> random_input(uint64_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = g(rng);
  return x;
}

// The model in double precision (no rounding anywhere): the float reference.
std::vector<double> forward_double(const nn::FloatNetwork& net, const std::vector<float>& x, uint64_t batch) {
  std::vector<double> a(x.begin(), x.end());
  for (const nn::DenseLayer& l : net.layers) {
    std::vector<double> y(batch * l.n);
    for (uint64_t r = 0; r < batch; ++r) {
      for (uint32_t j = 0; j < l.n; ++j) {
        double s = l.b[j];
        for (uint32_t k = 0; k < l.k; ++k) s += a[r * l.k + k] * double{l.w[uint64_t{k} * l.n + j]};
        y[r * l.n + j] = l.relu ? std::max(s, 0.0) : s;
      }
    }
    a = std::move(y);
  }
  return a;
}

Device open_ref(unsigned array_n, bool bf16 = true) {
  BackendConfig bc;
  bc.array_n = array_n;
  bc.enable_bf16 = bf16;
  return Device::open("ref", bc);
}

struct Case {
  unsigned array_n;
  std::vector<uint32_t> dims;
  uint64_t batch;
  bool last_relu = false;
};

TEST(NetworkBf16, EqualsContractAndFloatWithinTolerance) {
  const std::vector<Case> cases = {
      {16, {64, 32, 10}, 37},
      {16, {100, 129, 17, 9}, 17, true},
      {4, {9, 7, 11}, 45},
      {4, {10, 64, 60, 5}, 300},
      {16, {784, 256, 10}, 64},
  };
  std::mt19937 rng(5);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(testing::Message() << "case " << i << " N=" << c.array_n);
    const nn::FloatNetwork net = random_net(c.dims, rng, c.last_relu);
    const std::vector<float> x = random_input(c.batch * c.dims[0], rng);
    Device dev = open_ref(c.array_n);
    const Bf16NetworkRunResult r = run_network_bf16(dev, net, x, c.batch);
    const uint32_t n_out = c.dims.back();
    ASSERT_EQ(r.output.size(), c.batch * n_out);
    // Bit for bit the host contract.
    const std::vector<float> golden = forward_bf16_host(net, x, c.batch, c.array_n);
    ASSERT_EQ(golden.size(), r.output.size());
    for (size_t j = 0; j < golden.size(); ++j) {
      ASSERT_EQ(std::memcmp(&golden[j], &r.output[j], 4), 0) << "output " << j << ": " << r.output[j] << " vs " << golden[j];
    }
    // The stated bf16 tolerance against the unrounded model: relative L2 error of the outputs at
    // most 2^-5 (bf16 keeps 8 significant bits: each rounding of inputs, weights and activations
    // is at most 2^-9 relative; a few layers of them stay well inside 2^-5), and every element
    // within 2^-4 of the output's largest magnitude.
    const std::vector<double> ref = forward_double(net, x, c.batch);
    double num = 0, den = 0, maxabs = 0;
    for (size_t j = 0; j < ref.size(); ++j) {
      num += (r.output[j] - ref[j]) * (r.output[j] - ref[j]);
      den += ref[j] * ref[j];
      maxabs = std::max(maxabs, std::abs(ref[j]));
    }
    EXPECT_LE(std::sqrt(num / den), 1.0 / 32) << "relative L2 error";
    for (size_t j = 0; j < ref.size(); ++j) EXPECT_LE(std::abs(r.output[j] - ref[j]), maxabs / 16) << "element " << j;
    // Per-layer figures: attributed cycles add up to PERF_CYCLES, bytes are exact (the FENCE is
    // 16 bytes of fetch and a 4-byte write of its own), MACs and utilization follow.
    ASSERT_EQ(r.layers.size(), net.layers.size());
    uint64_t cycles = 0, rd = 0, wr = 0, mxu = 0, instr = 0;
    for (size_t l = 0; l < r.layers.size(); ++l) {
      const LayerReport& lr = r.layers[l];
      EXPECT_EQ(lr.name, net.layers[l].name);
      EXPECT_EQ(lr.m, c.batch);
      EXPECT_EQ(lr.k, net.layers[l].k);
      EXPECT_EQ(lr.n, net.layers[l].n);
      EXPECT_GT(lr.cycles, 0u);
      EXPECT_LE(lr.mxu_active, lr.cycles);
      const uint64_t out_elem = l + 1 == r.layers.size() ? 4 : 2;
      EXPECT_EQ(lr.min_bytes, 2 * lr.k * lr.n + 2 * lr.m * lr.k + out_elem * lr.m * lr.n);
      cycles += lr.cycles;
      rd += lr.rd_bytes;
      wr += lr.wr_bytes;
      mxu += lr.mxu_active;
      instr += lr.program.instructions;
    }
    EXPECT_EQ(cycles, r.perf.cycles);
    EXPECT_EQ(rd + 16, r.perf.rd_bytes);
    EXPECT_EQ(wr + 4, r.perf.wr_bytes);
    EXPECT_EQ(mxu, r.perf.mxu_active);
    EXPECT_EQ(instr + 1, r.instructions);
    EXPECT_EQ(r.perf.instret, r.instructions);
    EXPECT_GT(r.utilization, 0.0);
    EXPECT_LE(r.utilization, 1.0);
  }
}

TEST(NetworkBf16, BatchesAreIndependentRows) {
  // The contract is row by row: running the input in two parts gives the same bits as one run.
  std::mt19937 rng(11);
  const nn::FloatNetwork net = random_net({30, 40, 7}, rng);
  const std::vector<float> x = random_input(50 * 30, rng);
  Device dev = open_ref(16);
  const Bf16NetworkRunResult all = run_network_bf16(dev, net, x, 50);
  const Bf16NetworkRunResult a = run_network_bf16(dev, net, std::span<const float>(x).first(20 * 30), 20);
  const Bf16NetworkRunResult b = run_network_bf16(dev, net, std::span<const float>(x).subspan(20 * 30), 30);
  std::vector<float> parts = a.output;
  parts.insert(parts.end(), b.output.begin(), b.output.end());
  ASSERT_EQ(parts.size(), all.output.size());
  EXPECT_EQ(std::memcmp(parts.data(), all.output.data(), 4 * parts.size()), 0);
}

TEST(NetworkBf16, DeviceWithoutBf16IsRefused) {
  std::mt19937 rng(3);
  const nn::FloatNetwork net = random_net({8, 8, 4}, rng);
  const std::vector<float> x = random_input(2 * 8, rng);
  Device dev = open_ref(16, /*bf16=*/false);
  EXPECT_EQ(dev.info().features & spec::reg::kFeaturesBf16, 0u);  // BackendConfig reached the ref model
  try {
    run_network_bf16(dev, net, x, 2);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("FEATURES.BF16 is 0"), std::string::npos) << e.what();
  }
  Device with = open_ref(16);
  EXPECT_NE(with.info().features & spec::reg::kFeaturesBf16, 0u);
}

TEST(NetworkBf16, BadArguments) {
  std::mt19937 rng(4);
  const nn::FloatNetwork net = random_net({8, 8, 4}, rng);
  Device dev = open_ref(4);
  const std::vector<float> x = random_input(3 * 8, rng);
  EXPECT_THROW(run_network_bf16(dev, net, x, 0), Error);
  EXPECT_THROW(run_network_bf16(dev, net, x, 2), Error);  // 24 values are not 2 rows of 8
  nn::FloatNetwork empty;
  EXPECT_THROW(run_network_bf16(dev, empty, x, 3), Error);
}

}  // namespace
}  // namespace tpuw::runtime
