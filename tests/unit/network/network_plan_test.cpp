// The network planner (host/src/runtime/network_plan.cpp): for MLPs whose activations do not fit
// the UB it chooses the M tile and the residency that move the fewest bytes; its traffic estimate
// equals the ref backend's PERF counters exactly; spilling MLPs move at most kTrafficGoal (1.5x)
// the minimum bytes or the plan says in one line why not; outputs stay bit-identical to the
// integer CPU forward pass. And the per-layer attribution adds up: a 200-layer net's layer cycles
// sum to PERF_CYCLES and no share of a layer is above 100%.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>

#include "network_testlib.h"
#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/ref/ref_device.h"
#include "tpuw/runtime/network.h"

namespace tpuw::runtime {
namespace {

using nettest::forward;
using nettest::random_int8;
using nettest::random_network;

DeviceParams params_of(unsigned an) { return *find_device_config(an); }

Device open_ref(const DeviceParams& params) {
  HostMemoryConfig mem;
  mem.size = 512ull << 20;
  return Device(std::make_unique<ref::RefDevice>(params, mem));
}

// Runs `net` (no keep_intermediate: the plan's traffic is exact for that program), checks the
// output against the CPU forward pass and the PERF byte counters against the plan's estimate.
NetworkRunResult run_and_check(Device& dev, const nn::QNetwork& net, uint64_t batch, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<int8_t> x = random_int8(batch * net.input_features, rng);
  NetworkRunResult r = run_network(dev, net, x, batch);
  const nettest::CpuForward want = forward(net, x, batch);
  if (net.layers.back().int32_output) {
    EXPECT_EQ(r.output_i32, want.output_i32);
  } else {
    EXPECT_EQ(r.output_q, want.int8_outputs.back());
  }
  EXPECT_EQ(r.perf.rd_bytes, r.plan.traffic.rd_bytes);
  EXPECT_EQ(r.perf.wr_bytes, r.plan.traffic.wr_bytes);
  EXPECT_EQ(r.perf.instret, r.plan.traffic.instructions);
  EXPECT_EQ(r.min_bytes, r.plan.traffic.min_bytes);
  return r;
}

// The goal, or the one-line explanation.
void expect_goal_or_note(const NetworkPlan& p) {
  if (p.traffic.ratio() <= kTrafficGoal) {
    EXPECT_TRUE(p.traffic_note.empty()) << p.traffic_note;
  } else {
    EXPECT_FALSE(p.traffic_note.empty()) << "ratio " << p.traffic.ratio() << " without an explanation";
    EXPECT_EQ(p.traffic_note.find('\n'), std::string::npos);
  }
}

struct Case {
  std::vector<uint32_t> dims;
  uint64_t batch;
  DeviceParams params;
  bool final_int8 = false;
};

DeviceParams small_ub(unsigned an, uint32_t ub_depth) {
  DeviceParams p = params_of(an);
  p.ub_depth = ub_depth;
  return p;
}

// Spilling MLPs on the ref backend: bit-identical, bytes as estimated, <= 1.5x or explained.
TEST(NetworkPlanner, SpillingMlpsRunWithinGoalOrExplain) {
  const std::vector<Case> cases = {
      {{784, 4096, 4096, 10}, 64, params_of(16)},   // 4096-wide: fits in one M tile of 64 rows
      {{1024, 8192, 10}, 32, params_of(16)},        // the 8192-wide tensor does not fit: spilled once
      {{784, 1024, 1024, 10}, 1024, params_of(16)}, // large batch: M tiles vs spills
      {{784, 4096, 4096, 10}, 1, params_of(16)},    // batch 1
      {{64, 48, 48, 48, 48, 48, 48, 48, 48, 10}, 600, params_of(4)},  // narrow and deep, N=4
      {{200, 300, 300, 40}, 500, small_ub(16, 2048)},                 // small UB forces spilling
      {{100, 256, 100}, 300, small_ub(4, 512), true},                 // N=4, tiny UB, int8 output
  };
  uint32_t seed = 40;
  for (const Case& c : cases) {
    std::mt19937 rng(seed);
    const nn::QNetwork net = random_network(c.dims, rng, c.final_int8);
    SCOPED_TRACE(testing::Message() << "dims[1] " << c.dims[1] << " batch " << c.batch << " N " << c.params.array_n
                                    << " UB " << c.params.ub_depth);
    Device dev = open_ref(c.params);
    const NetworkRunResult r = run_and_check(dev, net, c.batch, ++seed);
    expect_goal_or_note(r.plan);
    std::printf("  %s: bytes %.3fx minimum (%llu candidates) %s\n", testing::PrintToString(c.dims).c_str(),
                r.plan.traffic.ratio(), static_cast<unsigned long long>(r.plan.candidates),
                r.plan.traffic_note.c_str());
  }
}

// Large plans are checked without running them: the estimate is exact (see above), so the
// planner's choice is what the device would move.
TEST(NetworkPlanner, LargeBatchPlans) {
  const std::vector<Case> cases = {
      {{784, 4096, 4096, 10}, 256, params_of(16)},
      {{1024, 8192, 10}, 256, params_of(16)},
      {{784, 1024, 1024, 10}, 4096, params_of(16)},
      {{784, 1024, 1024, 10}, 256, params_of(16)},
      {{784, 4096, 4096, 10}, 256, params_of(4)},
  };
  std::mt19937 rng(5);
  for (const Case& c : cases) {
    const nn::QNetwork net = random_network(c.dims, rng);
    const NetworkPlan p = plan_network(c.params, net, c.batch);
    SCOPED_TRACE(testing::Message() << "dims[1] " << c.dims[1] << " batch " << c.batch << " N " << c.params.array_n);
    expect_goal_or_note(p);
    std::printf("  %s batch %llu N=%u: bytes %.3fx minimum, m_tile %llu x %llu %s\n",
                testing::PrintToString(c.dims).c_str(), static_cast<unsigned long long>(c.batch), c.params.array_n,
                p.traffic.ratio(), static_cast<unsigned long long>(p.m_tile),
                static_cast<unsigned long long>(p.m_tiles), p.traffic_note.c_str());
  }
}

// The benchmark MLP keeps today's plan: one M tile, everything resident, within the goal.
TEST(NetworkPlanner, BenchmarkMlpUnchanged) {
  std::mt19937 rng(1);
  const nn::QNetwork net = random_network({784, 1024, 1024, 10}, rng);
  const NetworkPlan p = plan_network(params_of(16), net, 256);
  EXPECT_EQ(p.m_tile, 256u);
  EXPECT_EQ(p.m_tiles, 1u);
  for (TensorHome h : p.tensor_home) EXPECT_EQ(h, TensorHome::kResident);
  for (const NetworkLayerPlan& lp : p.layers) EXPECT_EQ(lp.weight_reads, 1u);
  EXPECT_LE(p.traffic.ratio(), 1.25);
  EXPECT_TRUE(p.traffic_note.empty());
}

// A small classifier like digits (64-32-10, int32 output, batch 359): nothing spills and every
// weight is read once, so the note names what really dominates the excess: the int32 layer's bias
// rows preloaded into the accumulators (one 4N-byte row per output row), not instruction fetch.
TEST(NetworkPlanner, SmallClassifierNoteNamesTheBiasPreload) {
  std::mt19937 rng(3);
  const nn::QNetwork net = random_network({64, 32, 10}, rng);
  const NetworkPlan p = plan_network(params_of(16), net, 359);
  for (const NetworkLayerPlan& lp : p.layers) EXPECT_EQ(lp.weight_reads, 1u);
  ASSERT_GT(p.traffic.ratio(), kTrafficGoal);
  EXPECT_NE(p.traffic_note.find("preloads its accumulators with the bias"), std::string::npos) << p.traffic_note;
}

// 200 layers: the per-layer cycles add up to PERF_CYCLES and every share is at most 100%.
TEST(NetworkAttribution, DeepNetSharesAddUp) {
  std::mt19937 rng(9);
  std::vector<uint32_t> dims(201, 16);
  dims.front() = 20;
  dims.back() = 10;
  const nn::QNetwork net = random_network(dims, rng);
  Device dev = open_ref(params_of(16));
  const NetworkRunResult r = run_and_check(dev, net, 8, 3);
  ASSERT_EQ(r.layers.size(), 200u);
  uint64_t cyc = 0, mxu = 0, shift = 0, stall = 0, wait = 0, busy = 0;
  for (const LayerReport& lr : r.layers) {
    cyc += lr.cycles;
    mxu += lr.mxu_active;
    shift += lr.weight_shift;
    stall += lr.weight_stall;
    wait += lr.dma_wait;
    busy += lr.act_busy;
    EXPECT_GT(lr.cycles, 0u);
    for (uint64_t part : {lr.mxu_active, lr.weight_shift, lr.weight_stall, lr.dma_wait, lr.act_busy}) {
      EXPECT_LE(part, lr.cycles) << lr.name;
    }
  }
  EXPECT_EQ(cyc, r.cycles);
  EXPECT_EQ(mxu, r.perf.mxu_active);
  EXPECT_EQ(shift, std::min(r.perf.weight_shift, r.cycles));
  EXPECT_EQ(stall, r.perf.weight_stall);
  EXPECT_EQ(wait, r.perf.dma_wait);
  EXPECT_EQ(busy, r.perf.act_busy);
}

// The attribution on made-up counters: shares add up, respect the caps, and follow the weights.
TEST(NetworkAttribution, SharesFollowOccupancyAndCaps) {
  std::mt19937 rng(2);
  const nn::QNetwork net = random_network({16, 16, 16, 16}, rng);
  const NetworkPlan p = plan_network(params_of(16), net, 4);
  std::vector<LayerProgramStats> s(3);
  s[0].matmul_rows = 100;
  s[0].occupancy = 300;
  s[0].loadws = 10;
  s[1].matmul_rows = 0;
  s[1].occupancy = 1;
  s[1].loadws = 0;
  s[2].matmul_rows = 50;
  s[2].occupancy = 100;
  s[2].loadws = 5;
  PerfCounters perf;
  perf.cycles = 1000;
  perf.mxu_active = 150;
  perf.weight_shift = 900;  // more than layers 0 and 2 can take in proportion
  perf.dma_wait = 7;
  const std::vector<LayerReport> r = attribute_layers(p, s, perf);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].cycles + r[1].cycles + r[2].cycles, 1000u);
  EXPECT_EQ(r[0].mxu_active, 100u);
  EXPECT_EQ(r[2].mxu_active, 50u);
  EXPECT_GE(r[0].cycles, 100u);
  EXPECT_GE(r[2].cycles, 50u);
  EXPECT_EQ(r[0].weight_shift + r[1].weight_shift + r[2].weight_shift, 900u);
  for (const LayerReport& lr : r) EXPECT_LE(lr.weight_shift, lr.cycles);
  EXPECT_EQ(r[0].dma_wait + r[1].dma_wait + r[2].dma_wait, 7u);
}

}  // namespace
}  // namespace tpuw::runtime
