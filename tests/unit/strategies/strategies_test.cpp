// Strategies on the ref backend: K = 1, 2, 4 devices, data-parallel and pipelined networks and the
// column-split GEMM give exactly the bits of one device; partitioning, resident weights, reports.
#include "tpuw/worker/strategies.h"

#include <gtest/gtest.h>

#include <atomic>
#include <numeric>

#include "strategies_test.h"
#include "tpuw/compiler/conv.h"
#include "tpuw/compiler/onnx_importer.h"
#include "tpuw/nn/qconv.h"
#include "tpuw/runtime/conv.h"
#include "tpuw/runtime/gemm.h"
#include "tpuw/runtime/network.h"
#include "tpuw/sim_control.h"

namespace tpuw::worker {
namespace {

using strategies_test::Digits;
using strategies_test::random_i8;
using strategies_test::random_mlp;

const std::string kDigits = std::string(TPUW_EXAMPLES_DIR) + "/digits";

WorkerOptions ref_options(unsigned devices) {
  WorkerOptions o;
  o.backend = "ref";
  o.devices = devices;
  return o;
}

runtime::NetworkRunResult one_device(const nn::QNetwork& q, const std::vector<int8_t>& x, uint64_t rows) {
  Device dev = Device::open("ref", {});
  return runtime::run_network(dev, q, x, rows);
}

TEST(Partition, BalancesMacsOverContiguousStages) {
  const std::vector<uint64_t> macs = {100, 100, 100, 100};
  EXPECT_EQ(partition_layers(macs, 2), (std::vector<std::pair<size_t, size_t>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(partition_layers(macs, 4), (std::vector<std::pair<size_t, size_t>>{{0, 0}, {1, 1}, {2, 2}, {3, 3}}));
  EXPECT_EQ(partition_layers(macs, 1), (std::vector<std::pair<size_t, size_t>>{{0, 3}}));
  // More stages than layers: one layer per stage.
  EXPECT_EQ(partition_layers(std::vector<uint64_t>{5, 7}, 4), (std::vector<std::pair<size_t, size_t>>{{0, 0}, {1, 1}}));
  // Uneven: 784x1024, 1024x1024, 1024x10 in two stages -> the big middle layer alone at the end.
  const std::vector<uint64_t> mlp = {784 * 1024, 1024 * 1024, 1024 * 10};
  EXPECT_EQ(partition_layers(mlp, 2), (std::vector<std::pair<size_t, size_t>>{{0, 0}, {1, 2}}));
  EXPECT_TRUE(partition_layers(std::vector<uint64_t>{}, 3).empty());
}

TEST(Partition, SplitColumnsInWholeArrayBlocks) {
  EXPECT_EQ(split_columns(200, 2, 16), (std::vector<std::pair<uint64_t, uint64_t>>{{0, 96}, {96, 200}}));
  EXPECT_EQ(split_columns(64, 4, 16), (std::vector<std::pair<uint64_t, uint64_t>>{{0, 16}, {16, 32}, {32, 48}, {48, 64}}));
  EXPECT_EQ(split_columns(20, 4, 16), (std::vector<std::pair<uint64_t, uint64_t>>{{0, 16}, {16, 20}}));
  EXPECT_EQ(split_columns(1, 3, 16), (std::vector<std::pair<uint64_t, uint64_t>>{{0, 1}}));
}

TEST(Partition, StrategyNames) {
  EXPECT_EQ(parse_strategy("data"), Strategy::kData);
  EXPECT_EQ(parse_strategy("pipeline"), Strategy::kPipeline);
  EXPECT_FALSE(parse_strategy("model").has_value());
  EXPECT_EQ(to_string(Strategy::kPipeline), "pipeline");
}

TEST(Fingerprint, ChangesWithAnyWeightBit) {
  const nn::QNetwork a = random_mlp({32, 16, 8}, 1);
  nn::QNetwork b = a;
  EXPECT_EQ(network_fingerprint(a), network_fingerprint(b));
  b.layers[1].w_q[5] = static_cast<int8_t>(b.layers[1].w_q[5] ^ 1);
  EXPECT_NE(network_fingerprint(a), network_fingerprint(b));
  nn::QNetwork c = a;
  c.layers[0].shift[0] = static_cast<uint8_t>(c.layers[0].shift[0] + 1);
  EXPECT_NE(network_fingerprint(a), network_fingerprint(c));
}

class GemmColumns : public ::testing::TestWithParam<unsigned> {};

TEST_P(GemmColumns, BitIdenticalToOneDeviceAndCpu) {
  const unsigned k_dev = GetParam();
  Worker w(ref_options(k_dev));
  for (const runtime::GemmShape s : {runtime::GemmShape{37, 70, 29}, runtime::GemmShape{64, 48, 200},
                                     runtime::GemmShape{5, 300, 3}, runtime::GemmShape{1, 1, 1}}) {
    const auto a = random_i8(s.m * s.k, s.m + 1), b = random_i8(s.k * s.n, s.n + 2);
    const GemmStrategyResult r = gemm_parallel(w, a, b, s);
    Device dev = Device::open("ref", {});
    EXPECT_EQ(r.c, runtime::gemm(dev, a, b, s).c) << s.m << "x" << s.k << "x" << s.n;
    EXPECT_EQ(r.c, runtime::gemm_cpu(a, b, s));
    const uint64_t blocks = std::min<uint64_t>(k_dev, (s.n + 15) / 16);
    EXPECT_EQ(r.report.micro_batches, blocks);
    uint64_t cols = 0, macs = 0;
    for (const DeviceUse& d : r.report.per_device) {
      cols += d.rows;
      macs += d.macs;
      EXPECT_GT(d.perf.cycles, 0u);
    }
    EXPECT_EQ(cols, s.n);
    EXPECT_EQ(macs, s.m * s.k * s.n);
    EXPECT_EQ(r.report.strategy, "columns");
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, GemmColumns, ::testing::Values(1u, 2u, 4u));

struct NetCase {
  unsigned devices;
  Strategy strategy;
};

class DigitsNetwork : public ::testing::TestWithParam<NetCase> {};

TEST_P(DigitsNetwork, BitIdenticalToOneDevice) {
  const auto [k_dev, strategy] = GetParam();
  const Digits d(kDigits);
  const std::vector<int32_t> want = one_device(d.q, d.x_q, d.rows).output_i32;
  ASSERT_EQ(want, nn::forward_int_raw(d.q, d.x_q, d.rows));
  Worker w(ref_options(k_dev));
  for (const uint64_t mb : {uint64_t{0}, uint64_t{1}, uint64_t{64}, uint64_t{100}, uint64_t{359}, uint64_t{1000}}) {
    NetworkStrategyOptions o;
    o.strategy = strategy;
    o.micro_batch = mb;
    const NetworkStrategyResult r = run_network_parallel(w, d.q, d.x_q, d.rows, o);
    EXPECT_EQ(r.output_i32, want) << "micro-batch " << mb;
    EXPECT_TRUE(r.output_q.empty());
    const uint64_t eff = mb == 0 ? r.report.micro_batch : std::min<uint64_t>(mb, d.rows);
    EXPECT_EQ(r.report.micro_batch, eff);
    EXPECT_EQ(r.report.micro_batches, (d.rows + eff - 1) / eff);
    EXPECT_EQ(r.macs, d.rows * (64 * 32 + 32 * 10));
    EXPECT_GT(r.report.wall_s, 0.0);
    EXPECT_GT(r.report.overlap, 0.0);
    EXPECT_LE(r.report.overlap, 1.0 + 1e-9);
    uint64_t items = 0;
    for (const DeviceUse& du : r.report.per_device) {
      EXPECT_LT(du.index, k_dev);
      EXPECT_GT(du.perf.cycles, 0u);
      EXPECT_GE(du.busy_s, 0.0);
      items += du.items;
    }
    if (strategy == Strategy::kPipeline) {
      const unsigned stages = std::min(k_dev, 2u);
      EXPECT_EQ(r.report.stages.size(), stages);
      ASSERT_EQ(r.report.per_device.size(), stages);
      EXPECT_EQ(items, stages * r.report.micro_batches);  // every stage sees every micro-batch
      if (stages == 2) {
        EXPECT_EQ(r.report.per_device[0].macs, d.rows * 64 * 32);
        EXPECT_EQ(r.report.per_device[1].macs, d.rows * 32 * 10);
      }
    } else {
      EXPECT_EQ(items, r.report.micro_batches);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, DigitsNetwork,
                         ::testing::Values(NetCase{1, Strategy::kData}, NetCase{2, Strategy::kData},
                                           NetCase{4, Strategy::kData}, NetCase{1, Strategy::kPipeline},
                                           NetCase{2, Strategy::kPipeline}, NetCase{4, Strategy::kPipeline}),
                         [](const ::testing::TestParamInfo<NetCase>& i) {
                           return std::string(to_string(i.param.strategy)) + "_k" + std::to_string(i.param.devices);
                         });

TEST(Pipeline, FourLayersInt8OutputAndSpilledPlans) {
  // A 4-layer MLP with an int8 last layer: every stage hand-over and the final output are int8.
  const nn::QNetwork q = random_mlp({40, 96, 64, 80, 24}, 7, /*int8_out=*/true);
  const uint64_t rows = 150;
  const auto x = random_i8(rows * 40, 3);
  const runtime::NetworkRunResult want = one_device(q, x, rows);
  ASSERT_FALSE(want.output_q.empty());
  for (const unsigned k_dev : {2u, 4u}) {
    Worker w(ref_options(k_dev));
    for (const Strategy s : {Strategy::kData, Strategy::kPipeline}) {
      NetworkStrategyOptions o;
      o.strategy = s;
      o.micro_batch = 32;
      o.plan.force_spill = true;  // the spill path inside every device program
      o.plan.max_m_tile = 16;
      const NetworkStrategyResult r = run_network_parallel(w, q, x, rows, o);
      EXPECT_EQ(r.output_q, want.output_q) << to_string(s) << " K=" << k_dev;
      EXPECT_TRUE(r.output_i32.empty());
      if (s == Strategy::kPipeline) {
        EXPECT_EQ(r.report.stages.size(), k_dev);
        EXPECT_EQ(r.report.per_device.size(), k_dev);
      }
    }
  }
}

TEST(Resident, WeightsUploadedOncePerDeviceWhileTheModelStays) {
  const nn::QNetwork a = random_mlp({64, 48, 10}, 11);
  const nn::QNetwork b = random_mlp({64, 48, 10}, 12);
  const auto x = random_i8(64 * 64, 5);
  Worker w(ref_options(2));
  NetworkStrategyOptions o;
  o.strategy = Strategy::kPipeline;  // pinned stages: device s always runs stage s
  o.micro_batch = 16;
  auto uploads = [](const NetworkStrategyResult& r) {
    unsigned n = 0;
    for (const DeviceUse& d : r.report.per_device) n += d.uploaded ? 1u : 0u;
    return n;
  };
  const NetworkStrategyResult r1 = run_network_parallel(w, a, x, 64, o);
  EXPECT_EQ(uploads(r1), 2u);
  const NetworkStrategyResult r2 = run_network_parallel(w, a, x, 64, o);
  EXPECT_EQ(uploads(r2), 0u);  // resident: nothing uploaded
  EXPECT_EQ(r2.output_i32, r1.output_i32);
  o.micro_batch = 8;  // new buffers and programs, same weights
  EXPECT_EQ(uploads(run_network_parallel(w, a, x, 64, o)), 0u);
  const NetworkStrategyResult r3 = run_network_parallel(w, b, x, 64, o);  // another model replaces it
  EXPECT_EQ(uploads(r3), 2u);
  EXPECT_EQ(r3.output_i32, one_device(b, x, 64).output_i32);
  EXPECT_EQ(uploads(run_network_parallel(w, a, x, 64, o)), 2u);
}

TEST(Errors, BadInputIsTheCallersError) {
  const nn::QNetwork a = random_mlp({16, 8}, 1);
  Worker w(ref_options(2));
  const auto x = random_i8(16 * 4, 1);
  EXPECT_THROW(run_network_parallel(w, a, x, 5), Error);                      // wrong size
  EXPECT_THROW(run_network_parallel(w, a, std::span<const int8_t>{}, 0), Error);  // batch 0
  nn::QNetwork bad = a;
  bad.layers[0].bias_q.pop_back();
  try {
    run_network_parallel(w, bad, x, 4);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("bias_q"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gemm_parallel(w, x, x, {0, 1, 1}), Error);
  EXPECT_THROW(gemm_parallel(w, x, x, {4, 16, 5}), Error);  // B has the wrong size
}

TEST(Runtime, SplitRunMatchesRunNetworkWithTwoBatchesInFlight) {
  // The network.h pieces the strategies use: weights once, two buffer sets, two batches queued.
  const nn::QNetwork q = random_mlp({70, 33, 12}, 21);
  Device dev = Device::open("ref", {});
  const auto x0 = random_i8(20 * 70, 1), x1 = random_i8(20 * 70, 2);
  const runtime::NetworkWeights w = runtime::upload_network_weights(dev, q);
  const runtime::NetworkPlan plan = runtime::plan_network(dev.info().params, q, 20);
  const runtime::NetworkBuffers b0 = runtime::alloc_network_buffers(dev, plan), b1 = runtime::alloc_network_buffers(dev, plan);
  const runtime::CompiledNetwork p0 = runtime::compile_network(plan, runtime::network_addresses(w, b0));
  const runtime::CompiledNetwork p1 = runtime::compile_network(plan, runtime::network_addresses(w, b1));
  const uint32_t f0 = runtime::submit_network(dev, p0, b0, x0);
  const uint32_t f1 = runtime::submit_network(dev, p1, b1, x1);
  dev.wait(f0);
  dev.wait(f1);
  runtime::NetworkRunResult r0, r1;
  runtime::read_network_output(dev, p0, b0, r0);
  runtime::read_network_output(dev, p1, b1, r1);
  EXPECT_EQ(r0.output_i32, nn::forward_int_raw(q, x0, 20));
  EXPECT_EQ(r1.output_i32, nn::forward_int_raw(q, x1, 20));
  // Buffers too small for a program are refused.
  const runtime::NetworkPlan big = runtime::plan_network(dev.info().params, q, 200);
  const runtime::CompiledNetwork pb = runtime::compile_network(big, runtime::network_addresses(w, b0));
  EXPECT_THROW(runtime::submit_network(dev, pb, b0, random_i8(200 * 70, 3)), Error);
}

// ---- run_micro_batches: a CNN's images over K devices --------------------------------------------
// examples/digits/digits_cnn.onnx quantized on its test split.
struct DigitsCnn {
  nn::QCnn q;
  std::vector<int8_t> x_q;
  uint64_t rows = 0;
  DigitsCnn() {
    const compiler::Graph g = compiler::import_onnx_file(kDigits + "/digits_cnn.onnx");
    const npy::Array test_x = npy::load(kDigits + "/test_x.npy");
    const std::vector<float> x = strategies_test::as_float(test_x);
    rows = test_x.shape[0];
    q = compiler::compile_quantized_cnn(g, x, rows);
    x_q = nn::quantize_cnn_input(q, x);
  }
};

// run_cnn per micro-batch through run_micro_batches (the way tpuw run drives a CNN on K devices):
// the micro-batches' outputs in order, and the report. `fault_at`: the device running that
// micro-batch first gets a memory fault just before it (once).
struct CnnOverDevices {
  std::vector<int32_t> out;
  StrategyReport report;
  uint64_t cycles = 0;  // sum of every micro-batch's programs
};
CnnOverDevices cnn_over_devices(Worker& w, const DigitsCnn& d, uint64_t mb, std::optional<uint64_t> fault_at = {}) {
  const uint64_t f = d.q.input_row();
  const uint64_t m = (d.rows + (mb == 0 ? auto_micro_batch(d.rows, w.size()) : mb) - 1) /
                     (mb == 0 ? auto_micro_batch(d.rows, w.size()) : mb);
  std::vector<runtime::CnnRunResult> res(m);
  std::atomic<bool> fired{false};
  CnnOverDevices r;
  r.report = run_micro_batches(w, d.rows, mb, [&](DeviceSlot& slot, uint64_t j, uint64_t r0, uint64_t n) {
    if (fault_at && j == *fault_at && !fired.exchange(true)) slot.device.backend().sim_control()->inject_memory_fault(true);
    res.at(j) = runtime::run_cnn(slot.device, d.q, std::span<const int8_t>(d.x_q).subspan(r0 * f, n * f), n);
    return MicroBatchUse{PerfCounters{.cycles = res[j].cycles}, res[j].macs};
  });
  for (const runtime::CnnRunResult& x : res) {
    r.out.insert(r.out.end(), x.output_i32.begin(), x.output_i32.end());
    r.cycles += x.cycles;
  }
  return r;
}

class CnnMicroBatches : public ::testing::TestWithParam<unsigned> {};

TEST_P(CnnMicroBatches, BitIdenticalToOneDeviceForAnyMicroBatch) {
  const unsigned k_dev = GetParam();
  const DigitsCnn d;
  Device dev = Device::open("ref", {});
  const std::vector<int32_t> want = runtime::run_cnn(dev, d.q, d.x_q, d.rows).output_i32;
  ASSERT_EQ(want, nn::forward_cnn_int_raw(d.q, d.x_q, d.rows));
  Worker w(ref_options(k_dev));
  for (const uint64_t mb : {uint64_t{0}, uint64_t{1}, uint64_t{7}, uint64_t{64}, d.rows}) {
    if (mb == 1 && k_dev != 2) continue;  // one image per run: slow on ref, once is enough
    const CnnOverDevices r = cnn_over_devices(w, d, mb);
    EXPECT_EQ(r.out, want) << "micro-batch " << mb;
    const StrategyReport& rep = r.report;
    const uint64_t eff = mb == 0 ? rep.micro_batch : std::min(mb, d.rows);
    EXPECT_EQ(rep.strategy, "data");
    EXPECT_EQ(rep.devices, k_dev);
    EXPECT_EQ(rep.micro_batch, eff);
    EXPECT_EQ(rep.micro_batches, (d.rows + eff - 1) / eff);
    uint64_t items = 0, rows = 0, cycles = 0;
    for (const DeviceUse& du : rep.per_device) {
      EXPECT_LT(du.index, k_dev);
      EXPECT_GT(du.busy_s, 0.0);
      EXPECT_FALSE(du.role.empty());
      items += du.items;
      rows += du.rows;
      cycles += du.perf.cycles;
    }
    EXPECT_EQ(items, rep.micro_batches);
    EXPECT_EQ(rows, d.rows);  // no padding: the last micro-batch is short
    EXPECT_EQ(cycles, r.cycles);
    EXPECT_GT(rep.overlap, 0.0);
    EXPECT_LE(rep.overlap, 1.0 + 1e-9);
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, CnnMicroBatches, ::testing::Values(1u, 2u, 3u));

TEST(CnnMicroBatches, FaultedDeviceRangeRunsAgainOnTheOther) {
  const DigitsCnn d;
  Worker w(ref_options(2));
  const std::vector<int32_t> want = cnn_over_devices(w, d, 50).out;
  const CnnOverDevices r = cnn_over_devices(w, d, 50, 1);
  EXPECT_EQ(r.out, want);
  uint64_t failures = 0, items = 0;
  for (const DeviceStats& s : w.stats()) failures += s.failures;
  for (const DeviceUse& du : r.report.per_device) items += du.items;
  EXPECT_EQ(failures, 1u);
  EXPECT_EQ(items, r.report.micro_batches);  // the failed run is not counted, its retry is
  EXPECT_EQ(w.healthy(), 2u);
}

TEST(CnnMicroBatches, BatchZeroAndTheCallersErrors) {
  Worker w(ref_options(2));
  const MicroBatchFn nothing = [](DeviceSlot&, uint64_t, uint64_t, uint64_t) { return MicroBatchUse{}; };
  EXPECT_THROW(run_micro_batches(w, 0, 4, nothing), Error);
  // A callback's own error (not a device fault) reaches the caller unchanged, not retried.
  std::atomic<int> runs{0};
  try {
    run_micro_batches(w, 8, 4, [&](DeviceSlot&, uint64_t j, uint64_t, uint64_t) -> MicroBatchUse {
      ++runs;
      if (j == 1) throw Error(ErrorKind::kInvalidArgument, "bad micro-batch");
      return {};
    });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("bad micro-batch"), std::string::npos);
  }
  EXPECT_EQ(runs.load(), 2);
}

}  // namespace
}  // namespace tpuw::worker
