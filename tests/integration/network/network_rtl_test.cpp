// The network compiler's programs on the verilated device: the output (final int32 and every
// intermediate int8 tensor) equals the integer CPU forward pass and the ref backend bit for bit,
// including the spill and fused (streamed) paths; the PERF counters agree with the program's own accounting.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "../../unit/network/network_testlib.h"
#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/runtime/network.h"
#include "tpuw/runtime/network_bf16.h"

namespace tpuw::runtime {
namespace {

struct Case {
  unsigned array_n;
  std::vector<uint32_t> dims;
  uint64_t batch;
  bool final_int8;
  TensorHome home1;  // where the planner keeps tensor 1
};

// Layers with lookup tables (Sigmoid, Tanh, ... as ACTIVATE `lut`): random tables on every int8
// layer, resident, spilled and streamed tensors, N = 4 (16 table rows) and N = 16 (4).
TEST(NetworkRtl, LookupTablesMatchCpuAndRef) {
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  const std::vector<Case> cases = {
      {16, {33, 47, 20}, 40, false, TensorHome::kResident},
      {16, {20, 30, 9}, 17, true, TensorHome::kResident},
      {4, {9, 7, 11}, 45, false, TensorHome::kResident},
      {4, {8, 256, 256, 256, 4}, 24, false, TensorHome::kHost},  // tensors 1, 2 spilled
      {4, {10, 64, 5}, 300, true, TensorHome::kStreamed},
  };
  std::mt19937 rng(1313);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(testing::Message() << "case " << i << " N=" << c.array_n);
    const nn::QNetwork net = nettest::random_network(c.dims, rng, c.final_int8, /*luts=*/true);
    const std::vector<int8_t> x = nettest::random_int8(c.batch * c.dims[0], rng);
    BackendConfig cfg;
    cfg.array_n = c.array_n;
    Device rtl = Device::open("rtl", cfg);
    Device ref = Device::open("ref", cfg);
    NetworkOptions opt;
    opt.keep_intermediate = true;
    const NetworkRunResult a = run_network(rtl, net, x, c.batch, opt);
    const NetworkRunResult b = run_network(ref, net, x, c.batch, opt);
    EXPECT_EQ(a.plan.tensor_home[1], c.home1);
    nettest::expect_outputs_match(a, b, nettest::forward(net, x, c.batch), net, c.final_int8);
  }
}

TEST(NetworkRtl, MatchesCpuAndRef) {
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  const std::vector<Case> cases = {
      {16, {33, 47, 20}, 40, false, TensorHome::kResident},
      {16, {100, 129, 17, 9}, 17, true, TensorHome::kResident},
      {4, {9, 7, 11}, 45, false, TensorHome::kResident},
      {4, {10, 64, 60, 5}, 300, false, TensorHome::kResident},  // tile_outer: one M tile's tensors fit
      {4, {8, 256, 256, 256, 4}, 24, false, TensorHome::kHost},  // tensors 1, 2 do not fit the UB: spilled
      // Tensor 1 does not fit the UB and layer 1 is narrow: fused into layer 0 (streamed).
      {4, {10, 64, 5}, 300, false, TensorHome::kStreamed},
      {4, {10, 64, 5}, 300, true, TensorHome::kStreamed},
      {16, {40, 3000, 12}, 300, false, TensorHome::kStreamed},
  };
  std::mt19937 rng(77);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(testing::Message() << "case " << i << " N=" << c.array_n);
    const nn::QNetwork net = nettest::random_network(c.dims, rng, c.final_int8);
    const std::vector<int8_t> x = nettest::random_int8(c.batch * c.dims[0], rng);
    BackendConfig cfg;
    cfg.array_n = c.array_n;
    Device rtl = Device::open("rtl", cfg);
    Device ref = Device::open("ref", cfg);
    NetworkOptions opt;
    opt.keep_intermediate = true;
    const NetworkRunResult a = run_network(rtl, net, x, c.batch, opt);
    const NetworkRunResult b = run_network(ref, net, x, c.batch, opt);
    const nettest::CpuForward want = nettest::forward(net, x, c.batch);
    ASSERT_GT(a.plan.tensor_home.size(), 1u);
    EXPECT_EQ(a.plan.tensor_home[1], c.home1);
    nettest::expect_outputs_match(a, b, want, net, c.final_int8);
    EXPECT_EQ(a.perf.mxu_active, b.perf.mxu_active);
    EXPECT_EQ(a.perf.instret, a.instructions);
    uint64_t rd = 16, wr = 4;
    for (const LayerReport& lr : a.layers) {
      rd += lr.rd_bytes;
      wr += lr.wr_bytes;
    }
    EXPECT_EQ(a.perf.rd_bytes, rd);
    EXPECT_EQ(a.perf.wr_bytes, wr);
    // The planner's estimate is exact on the device too (it does not count keep_intermediate's
    // debug STOREs: check the read side without them, the write side with them).
    EXPECT_EQ(a.perf.rd_bytes, a.plan.traffic.rd_bytes + (a.perf.instret - a.plan.traffic.instructions) * 16);
    EXPECT_GT(a.cycles, 0u);
  }
}

// bf16 inference (tpuw run --precision bf16): the verilated device equals the ref backend and the
// host contract bit for bit, with the same per-layer byte accounting.
TEST(NetworkBf16Rtl, MatchesRefAndContract) {
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  struct Bf16Case {
    unsigned array_n;
    std::vector<uint32_t> dims;
    uint64_t batch;
  };
  const std::vector<Bf16Case> cases = {{16, {64, 32, 10}, 37}, {4, {9, 7, 11}, 45}, {16, {100, 129, 17, 9}, 20}};
  std::mt19937 rng(91);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Bf16Case& c = cases[i];
    SCOPED_TRACE(testing::Message() << "case " << i << " N=" << c.array_n);
    nn::FloatNetwork net;
    net.input_features = c.dims[0];
    for (size_t l = 0; l + 1 < c.dims.size(); ++l) {
      nn::DenseLayer d;
      d.name = "fc" + std::to_string(l);
      d.k = c.dims[l];
      d.n = c.dims[l + 1];
      for (uint64_t j = 0; j < uint64_t{d.k} * d.n; ++j) d.w.push_back(g(rng) / std::sqrt(static_cast<float>(d.k)));
      for (uint32_t j = 0; j < d.n; ++j) d.b.push_back(0.1f * g(rng));
      d.relu = l + 2 < c.dims.size();
      net.layers.push_back(std::move(d));
    }
    std::vector<float> x(c.batch * c.dims[0]);
    for (float& v : x) v = g(rng);
    BackendConfig cfg;
    cfg.array_n = c.array_n;
    Device rtl = Device::open("rtl", cfg);
    Device ref = Device::open("ref", cfg);
    const Bf16NetworkRunResult a = run_network_bf16(rtl, net, x, c.batch);
    const Bf16NetworkRunResult b = run_network_bf16(ref, net, x, c.batch);
    const std::vector<float> want = forward_bf16_host(net, x, c.batch, c.array_n);
    ASSERT_EQ(a.output.size(), want.size());
    ASSERT_EQ(b.output.size(), want.size());
    EXPECT_EQ(std::memcmp(a.output.data(), b.output.data(), 4 * want.size()), 0) << "rtl != ref";
    EXPECT_EQ(std::memcmp(a.output.data(), want.data(), 4 * want.size()), 0) << "rtl != host contract";
    EXPECT_EQ(a.perf.mxu_active, b.perf.mxu_active);
    EXPECT_EQ(a.perf.instret, a.instructions);
    uint64_t rd = 16, wr = 4, cycles = 0;
    for (const LayerReport& lr : a.layers) {
      rd += lr.rd_bytes;
      wr += lr.wr_bytes;
      cycles += lr.cycles;
    }
    EXPECT_EQ(a.perf.rd_bytes, rd);
    EXPECT_EQ(a.perf.wr_bytes, wr);
    EXPECT_EQ(a.perf.cycles, cycles);
  }
}

TEST(NetworkBf16Rtl, ActivationFunctionsMatchRef) {
  // One program with every bf16 activation function (VECTOR op sequences, vector_functions.h),
  // one per layer, the last one on the fp32 output: rtl == ref == the host contract, bit for bit.
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<nn::ActFn, std::pair<double, double>>> fns = {
      {nn::ActFn::kClip, {0, 6}},           {nn::ActFn::kLeakyRelu, {0.01, 0}}, {nn::ActFn::kLeakyRelu, {-0.5, 0}},
      {nn::ActFn::kHardSigmoid, {0.2, 0.5}}, {nn::ActFn::kHardSwish, {0, 0}},   {nn::ActFn::kSigmoid, {0, 0}},
      {nn::ActFn::kTanh, {0, 0}},           {nn::ActFn::kErf, {0, 0}},          {nn::ActFn::kGelu, {0, 0}},
      {nn::ActFn::kClip, {-inf, 0.5}},      {nn::ActFn::kGeluTanh, {0, 0}}};
  std::mt19937 rng(17);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const uint32_t width = 20;
  nn::FloatNetwork net;
  net.input_features = width;
  for (size_t l = 0; l < fns.size(); ++l) {
    nn::DenseLayer d;
    d.name = "fc" + std::to_string(l);
    d.k = width;
    d.n = width;
    for (uint64_t j = 0; j < uint64_t{d.k} * d.n; ++j) d.w.push_back(2.0f * g(rng) / std::sqrt(static_cast<float>(d.k)));
    for (uint32_t j = 0; j < d.n; ++j) d.b.push_back(0.5f * g(rng));
    d.relu = l % 3 == 1;
    d.act.fn = fns[l].first;
    d.act.alpha = fns[l].second.first;
    d.act.beta = fns[l].second.second;
    net.layers.push_back(std::move(d));
  }
  const uint64_t batch = 21;
  std::vector<float> x(batch * width);
  for (float& v : x) v = 2.0f * g(rng);
  BackendConfig cfg;
  cfg.array_n = 16;
  Device rtl = Device::open("rtl", cfg);
  Device ref = Device::open("ref", cfg);
  const Bf16NetworkRunResult a = run_network_bf16(rtl, net, x, batch);
  const Bf16NetworkRunResult b = run_network_bf16(ref, net, x, batch);
  const std::vector<float> want = forward_bf16_host(net, x, batch, cfg.array_n);
  ASSERT_EQ(a.output.size(), want.size());
  ASSERT_EQ(b.output.size(), want.size());
  EXPECT_EQ(std::memcmp(a.output.data(), b.output.data(), 4 * want.size()), 0) << "rtl != ref";
  EXPECT_EQ(std::memcmp(a.output.data(), want.data(), 4 * want.size()), 0) << "rtl != host contract";
  EXPECT_EQ(a.perf.mxu_active, b.perf.mxu_active);
  uint64_t vectors = 0;
  for (const LayerReport& lr : a.layers) vectors += lr.program.vectors;
  EXPECT_GT(vectors, 200u);
}

TEST(NetworkBf16Rtl, RtlWithoutBf16IsRefused) {
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  BackendConfig cfg;
  cfg.enable_bf16 = false;  // only the ref backend models a build without bf16
  try {
    Device::open("rtl", cfg);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("ref backend only"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tpuw::runtime
