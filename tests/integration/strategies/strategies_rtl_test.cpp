// Strategies on the rtl backend: K = 1, 2, 4 verilated devices give exactly the bits of one device
// (and of the ref backend) for the digits MLP (data and pipeline) and a column-split GEMM.
#include <gtest/gtest.h>

#include "strategies_test.h"
#include "tpuw/runtime/gemm.h"
#include "tpuw/runtime/network.h"
#include "tpuw/worker/strategies.h"

namespace tpuw::worker {
namespace {

using strategies_test::Digits;
using strategies_test::random_i8;

WorkerOptions rtl_options(unsigned devices) {
  WorkerOptions o;
  o.backend = "rtl";
  o.devices = devices;
  return o;
}

class RtlStrategies : public ::testing::TestWithParam<unsigned> {};

TEST_P(RtlStrategies, DigitsDataAndPipelineBitIdentical) {
  const unsigned k_dev = GetParam();
  const Digits d(std::string(TPUW_EXAMPLES_DIR) + "/digits");
  const uint64_t rows = 96;  // small: the first rows of the test split
  const std::vector<int8_t> x(d.x_q.begin(), d.x_q.begin() + static_cast<ptrdiff_t>(rows * 64));
  Device one = Device::open("rtl", {});
  const std::vector<int32_t> want = runtime::run_network(one, d.q, x, rows).output_i32;
  ASSERT_EQ(want, nn::forward_int_raw(d.q, x, rows));
  Worker w(rtl_options(k_dev));
  for (const Strategy s : {Strategy::kData, Strategy::kPipeline}) {
    NetworkStrategyOptions o;
    o.strategy = s;
    o.micro_batch = 20;  // 5 micro-batches, the last one padded
    const NetworkStrategyResult r = run_network_parallel(w, d.q, x, rows, o);
    EXPECT_EQ(r.output_i32, want) << to_string(s);
    EXPECT_EQ(r.report.micro_batches, 5u);
    uint64_t cycles = 0;
    for (const DeviceUse& du : r.report.per_device) cycles += du.perf.cycles;
    EXPECT_GT(cycles, 0u);
    EXPECT_GT(r.report.overlap, 0.0);
  }
}

TEST_P(RtlStrategies, GemmColumnSplitBitIdentical) {
  const unsigned k_dev = GetParam();
  const runtime::GemmShape s{48, 40, 72};
  const auto a = random_i8(s.m * s.k, 1), b = random_i8(s.k * s.n, 2);
  Worker w(rtl_options(k_dev));
  const GemmStrategyResult r = gemm_parallel(w, a, b, s);
  Device ref = Device::open("ref", {});
  EXPECT_EQ(r.c, runtime::gemm(ref, a, b, s).c);
  EXPECT_EQ(r.c, runtime::gemm_cpu(a, b, s));
  EXPECT_EQ(r.report.micro_batches, std::min(k_dev, 5u));
}

INSTANTIATE_TEST_SUITE_P(Devices, RtlStrategies, ::testing::Values(1u, 2u, 4u));

}  // namespace
}  // namespace tpuw::worker
