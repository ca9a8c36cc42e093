// Network compiler on the ref backend: random quantized networks equal the integer CPU forward
// pass bit for bit (final int32 and every intermediate int8 tensor); the plan takes the spill and
// tiling paths when it must; the reports add up to the PERF counters; bad networks are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "network_testlib.h"
#include "tpuw/activate.h"
#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/runtime/network.h"

namespace tpuw::runtime {
namespace {

using nettest::forward;
using nettest::random_int8;
using nettest::random_network;

Device open_ref(unsigned an) {
  BackendConfig cfg;
  cfg.array_n = an;
  cfg.memory.size = 256ull << 20;
  return Device::open("ref", cfg);
}

// Runs `net` on `dev` with keep_intermediate and checks everything against the CPU.
NetworkRunResult check_network(Device& dev, const nn::QNetwork& net, uint64_t batch, uint32_t seed,
                               const NetworkPlanOptions& plan = {}) {
  std::mt19937 rng(seed);
  const std::vector<int8_t> x = random_int8(batch * net.input_features, rng);
  NetworkOptions opt;
  opt.keep_intermediate = true;
  opt.plan = plan;
  NetworkRunResult r = run_network(dev, net, x, batch, opt);
  const nettest::CpuForward want = forward(net, x, batch);
  const bool final_int8 = !net.layers.back().int32_output;
  const size_t inter = net.layers.size() - 1;
  EXPECT_EQ(r.layer_outputs.size(), inter);
  for (size_t l = 0; l < inter && l < r.layer_outputs.size(); ++l) {
    EXPECT_EQ(r.layer_outputs[l], want.int8_outputs[l]) << "layer " << l << " batch " << batch;
    // The random requantization keeps most values off the saturation limits (a meaningful check).
    const auto inside = std::count_if(want.int8_outputs[l].begin(), want.int8_outputs[l].end(),
                                      [](int8_t v) { return v > -128 && v < 127; });
    EXPECT_GT(static_cast<size_t>(inside) * 4, want.int8_outputs[l].size() * 3) << "layer " << l;
  }
  if (final_int8) {
    EXPECT_EQ(r.output_q, want.int8_outputs.back()) << "final int8 output, batch " << batch;
  } else {
    EXPECT_EQ(r.output_i32, want.output_i32) << "final int32 output, batch " << batch;
  }
  // Reports add up to the counters (exact on every backend).
  uint64_t cyc = 0, mxu = 0, rd = 0, wr = 0;
  for (const LayerReport& lr : r.layers) {
    cyc += lr.cycles;
    mxu += lr.mxu_active;
    rd += lr.rd_bytes;
    wr += lr.wr_bytes;
    EXPECT_EQ(lr.m, batch);
  }
  EXPECT_EQ(cyc, r.cycles);
  EXPECT_EQ(mxu, r.perf.mxu_active);
  EXPECT_EQ(rd + 16, r.perf.rd_bytes);  // + the FENCE's fetch
  EXPECT_EQ(wr + 4, r.perf.wr_bytes);   // + the FENCE's write
  EXPECT_EQ(r.instructions, r.perf.instret);
  return r;
}

TEST(NetworkCpu, RequantRoundsHalfUpAndSaturates) {
  EXPECT_EQ(nettest::requant(3, 1, 1, false), 2);     // 1.5 -> 2
  EXPECT_EQ(nettest::requant(-3, 1, 1, false), -1);   // -1.5 -> -1 (half up)
  EXPECT_EQ(nettest::requant(1000, 1, 0, false), 127);
  EXPECT_EQ(nettest::requant(-1000, 1, 0, false), -128);
  EXPECT_EQ(nettest::requant(-50, 1, 0, true), 0);
  EXPECT_EQ(nettest::requant(100, 1 << 30, 31, false), 50);
}

TEST(NetworkRef, RandomNetworksN16) {
  Device dev = open_ref(16);
  std::mt19937 rng(7);
  const std::vector<std::vector<uint32_t>> shapes = {
      {5, 3}, {17, 33, 9}, {64, 16, 16, 1}, {31, 47, 29, 13, 7}, {100, 129, 40}, {16, 16}};
  const std::vector<uint64_t> batches = {1, 3, 17, 64, 200, 33};
  for (size_t i = 0; i < shapes.size(); ++i) {
    const nn::QNetwork net = random_network(shapes[i], rng, /*final_int8=*/i == 2);
    SCOPED_TRACE(testing::Message() << "network " << i);
    const NetworkRunResult r = check_network(dev, net, batches[i], static_cast<uint32_t>(100 + i));
    EXPECT_EQ(r.plan.m_tiles, 1u);
    for (TensorHome h : r.plan.tensor_home) EXPECT_EQ(h, TensorHome::kResident);
  }
}

TEST(NetworkRef, RandomNetworksN4) {
  Device dev = open_ref(4);
  std::mt19937 rng(11);
  const std::vector<std::vector<uint32_t>> shapes = {{3, 5}, {9, 7, 11}, {13, 4, 21, 6}, {30, 3, 3, 3, 2}};
  const std::vector<uint64_t> batches = {1, 2, 45, 130};
  for (size_t i = 0; i < shapes.size(); ++i) {
    const nn::QNetwork net = random_network(shapes[i], rng, /*final_int8=*/i == 1);
    SCOPED_TRACE(testing::Message() << "network " << i);
    check_network(dev, net, batches[i], static_cast<uint32_t>(200 + i));
  }
}

// Layers with lookup tables (ACTIVATE `lut`; the compiler's Sigmoid, Tanh, ...): the table rows
// travel with each strip's params; outputs, traffic accounting and counters exact on both sizes,
// resident and spilled; a device without the table (FEATURES.LUT = 0) refuses the network.
TEST(NetworkRef, LookupTables) {
  std::mt19937 rng(31);
  for (const unsigned an : {16u, 4u}) {
    Device dev = open_ref(an);
    const std::vector<std::vector<uint32_t>> shapes = {{17, 33, 9}, {9, 7, 11}, {31, 47, 29, 13, 7}};
    for (size_t i = 0; i < shapes.size(); ++i) {
      const nn::QNetwork net = random_network(shapes[i], rng, /*final_int8=*/i == 1, /*luts=*/true);
      SCOPED_TRACE(testing::Message() << "N " << an << " network " << i);
      const NetworkRunResult r = check_network(dev, net, 3 + 20 * i, static_cast<uint32_t>(300 + i));
      EXPECT_EQ(r.plan.param_slot_rows, 3 + lut_rows(an));
    }
    NetworkPlanOptions po;
    po.force_spill = true;
    check_network(dev, random_network({40, 50, 33, 20}, rng, false, true), 70, 8, po);
  }
  BackendConfig cfg;
  cfg.enable_lut = false;
  Device no = Device::open("ref", cfg);
  const nn::QNetwork net = random_network({8, 8, 4}, rng, false, true);
  const std::vector<int8_t> x = random_int8(8, rng);
  try {
    run_network(no, net, x, 1, {});
    ADD_FAILURE() << "a device without FEATURES.LUT ran a network with tables";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("dense0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("FEATURES.LUT = 0"), std::string::npos) << e.what();
  }
}

// The UB of the N=4 configuration (2048 rows) cannot hold two 256-wide tensors of a batch of 24
// (64 blocks x 24 rows each) at once: the planner spills tensors 1 and 2 to host memory and streams
// them back through one slot ring (cheaper than halving the M tile, which reads the 256x256
// weights twice).
TEST(NetworkRef, SpillWhenTheBatchDoesNotFit) {
  Device dev = open_ref(4);
  std::mt19937 rng(21);
  const nn::QNetwork net = random_network({8, 256, 256, 256, 4}, rng);
  const NetworkRunResult r = check_network(dev, net, 24, 5);
  EXPECT_EQ(r.plan.m_tiles, 1u);
  EXPECT_EQ(r.plan.tensor_home[1], TensorHome::kHost);
  EXPECT_GT(r.plan.spill_bytes, 0u);
  EXPECT_GT(r.layers[0].program.stores, 0u);  // layer 0 STOREs its spilled output
  EXPECT_GT(r.layers[1].program.nops, 0u);    // layer 1 bridges STORE -> LOAD through COMPUTE
  // The same network with a batch that fits keeps everything resident.
  const NetworkRunResult small = check_network(dev, net, 4, 6);
  for (TensorHome h : small.plan.tensor_home) EXPECT_EQ(h, TensorHome::kResident);
  EXPECT_EQ(small.plan.spill_bytes, 0u);
}

TEST(NetworkRef, ForcedSpillEveryTensorN16) {
  Device dev = open_ref(16);
  std::mt19937 rng(23);
  const nn::QNetwork net = random_network({40, 50, 33, 20}, rng);
  NetworkPlanOptions po;
  po.force_spill = true;
  const NetworkRunResult r = check_network(dev, net, 70, 7, po);
  for (TensorHome h : r.plan.tensor_home) EXPECT_EQ(h, TensorHome::kHost);
}

// Layers larger than the buffers: a batch above the ACC's M tile (N=4: 508 rows) runs in several
// M tiles; an input of 8200 features (2050 k-blocks) does not fit the UB slots and streams
// through a ring; both with a wide output that is spilled.
TEST(NetworkRef, LayerTiling) {
  Device dev = open_ref(4);
  std::mt19937 rng(31);
  {
    const nn::QNetwork net = random_network({7, 9, 6}, rng);
    const NetworkRunResult r = check_network(dev, net, 1100, 8);
    EXPECT_GE(r.plan.m_tiles, 3u);  // 3 is the fewest the ACC allows; the planner may take more
  }
  {
    const nn::QNetwork net = random_network({8200, 3, 5}, rng);
    const NetworkRunResult r = check_network(dev, net, 9, 9);
    EXPECT_EQ(r.plan.tensor_home[0], TensorHome::kHost);
    EXPECT_LT(r.plan.in_slots, r.plan.layers[0].k_blocks);
  }
  {
    NetworkPlanOptions po;
    po.max_m_tile = 6;
    const nn::QNetwork net = random_network({21, 30, 17}, rng);
    const NetworkRunResult r = check_network(dev, net, 40, 10, po);
    EXPECT_EQ(r.plan.m_tiles, 7u);
  }
}

// 64-wide activations of a batch of 300 do not fit the N=4 UB (2048 rows) whole, but one M tile
// of them does: the planner runs every layer on one M tile before the next (tile_outer) and keeps
// everything resident instead of spilling; the weights are read once per M tile either way.
TEST(NetworkRef, TileOuterKeepsActivationsOnChip) {
  Device dev = open_ref(4);
  std::mt19937 rng(22);
  const nn::QNetwork net = random_network({10, 64, 60, 5}, rng);
  const NetworkRunResult r = check_network(dev, net, 300, 5);
  EXPECT_TRUE(r.plan.tile_outer);
  EXPECT_GT(r.plan.m_tiles, 1u);
  for (TensorHome h : r.plan.tensor_home) EXPECT_NE(h, TensorHome::kHost);
  EXPECT_EQ(r.plan.spill_bytes, 0u);
  EXPECT_EQ(r.perf.rd_bytes, r.plan.traffic.rd_bytes + (r.perf.instret - r.plan.traffic.instructions) * 16);
}

// The benchmark MLP's plan: everything resident in one M tile, one MATMUL per fold, no bridge.
TEST(NetworkPlan, MlpBenchmarkShape) {
  std::mt19937 rng(1);
  const nn::QNetwork net = random_network({784, 1024, 1024, 10}, rng);
  const DeviceParams& dp = *find_device_config(16);
  const NetworkPlan p = plan_network(dp, net, 256);
  EXPECT_EQ(p.m_tile, 256u);
  EXPECT_EQ(p.m_tiles, 1u);
  for (TensorHome h : p.tensor_home) EXPECT_EQ(h, TensorHome::kResident);
  EXPECT_LE(p.ub_region_rows[0] + p.ub_region_rows[1], dp.ub_depth);
  const CompiledNetwork c = compile_network(p, NetworkAddresses{0x1000, 0x200000, 0x400000, 0x500000, 0x600000, 0x700000});
  ASSERT_EQ(c.layer_stats.size(), 3u);
  EXPECT_EQ(c.layer_stats[0].matmuls, 49u * 64u);
  EXPECT_EQ(c.layer_stats[1].matmuls, 64u * 64u);
  EXPECT_EQ(c.layer_stats[2].matmuls, 64u);
  EXPECT_EQ(c.layer_stats[0].activates, 64u);
  EXPECT_EQ(c.layer_stats[2].activates, 0u);
  EXPECT_EQ(c.layer_stats[2].stores, 1u);
  uint64_t nops = 0;
  for (const LayerProgramStats& s : c.layer_stats) nops += s.nops;
  EXPECT_EQ(nops, 0u);
  // Every weight byte loaded exactly once.
  uint64_t wb = 0;
  for (const LayerProgramStats& s : c.layer_stats) wb += s.load_bytes;
  EXPECT_GE(wb, p.weight_bytes);
  EXPECT_LT(wb, p.weight_bytes + p.input_bytes + p.param_bytes + 256 * 64 + 1);
}

TEST(NetworkPlan, RefusesMalformedNetworks) {
  std::mt19937 rng(3);
  const DeviceParams& dp = *find_device_config(16);
  nn::QNetwork net = random_network({8, 6, 4}, rng);
  EXPECT_THROW(plan_network(dp, net, 0), Error);
  nn::QNetwork bad = net;
  bad.layers[1].k = 5;
  EXPECT_THROW(plan_network(dp, bad, 1), Error);
  bad = net;
  bad.layers[0].w_q.pop_back();
  EXPECT_THROW(plan_network(dp, bad, 1), Error);
  bad = net;
  bad.layers[0].int32_output = true;
  EXPECT_THROW(plan_network(dp, bad, 1), Error);
  bad = net;
  bad.layers[0].shift[0] = 64;
  EXPECT_THROW(plan_network(dp, bad, 1), Error);
  try {
    bad = net;
    bad.layers[0].mult.clear();
    plan_network(dp, bad, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("dense0"), std::string::npos) << e.what();
  }
  Device dev = open_ref(16);
  const std::vector<int8_t> x(7, 0);
  EXPECT_THROW(run_network(dev, net, x, 1), Error);  // 7 != 1 * 8
}

}  // namespace
}  // namespace tpuw::runtime
