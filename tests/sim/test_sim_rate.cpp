// Simulation rate of the whole device (tracing off) on the default configuration.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "device_program.h"
#include "tpuw/sim/sim_device.h"
#include "tpuw/spec.h"

namespace tpuw::sim {
namespace {

using namespace testing;  // NOLINT: test helpers
namespace reg = spec::reg;

// Simulation rate of the whole device (tracing off) on the default configuration: a long run of
// back-to-back MATMULs. Prints the figure (wall-clock rates are measured, not asserted: they belong
// to bench/tpuw_bench, which compares them as a ratio in one run) and asserts what is
// deterministic: the result and the cycle count of the streamed MATMULs (rows back to back).
TEST(SimDeviceRate, WholeDeviceCyclesPerSecond) {
  const unsigned n = SimDevice::available_array_sizes().front();
  SimDevice d(config_for(n));
  const DeviceParams& p = d.params();
  const unsigned m = 256;  // C (m x 16 int32) must fit below Layout::fence
  const Gemm g = make_gemm(n, m, 5);
  const Layout l;
  std::vector<Instr> prog = gemm_program(d, g, l, 1);
  // replace MATMUL + STORE + FENCE by many accumulating MATMULs, then STORE + FENCE
  Instr st = prog[4], fe = prog[5];
  prog.resize(3);
  const unsigned reps = 200;
  for (unsigned r = 0; r < reps; ++r) {
    Instr mm = testing::matmul(0, 0, m, r == 0, r != 0);
    if (r == 0) mm.pop_prev();
    if (r + 1 == reps) mm.push_next();
    prog.push_back(mm);
  }
  prog.push_back(st);
  prog.push_back(fe);
  (void)p;
  ASSERT_LE(prog.size(), 256u);
  testing::submit(d, l.ring, 256, prog);  // 256 entries end exactly at Layout::a
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t busy = d.run(10000000);
  const double busy_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(d.irq()) << fault_text(d);
  ASSERT_EQ(d.read_reg(reg::kIrqStatus), reg::kIrqStatusFence) << fault_text(d);
  const std::vector<int32_t> c = read_result(d, g, l);
  for (size_t i = 0; i < c.size(); ++i) {
    ASSERT_EQ(c[i], static_cast<int32_t>(static_cast<uint32_t>(g.expect[i]) * reps)) << i;
  }
  d.write_reg(reg::kIrqStatus, reg::kIrqStatusFence);
  const auto t1 = std::chrono::steady_clock::now();
  d.tick(200000);
  const double idle_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  const double busy_rate = static_cast<double>(busy) / busy_s;
  const double idle_rate = 200000.0 / idle_s;
  std::printf("[ rate ] N=%u whole device, tracing off: busy %.3f Mcycles/s (%llu cycles, %.0f%% MXU "
              "rows), idle %.3f Mcycles/s\n",
              n, busy_rate / 1e6, static_cast<unsigned long long>(busy),
              100.0 * m * reps / static_cast<double>(busy), idle_rate / 1e6);
  RecordProperty("busy_cycles_per_s", std::to_string(busy_rate));
  RecordProperty("idle_cycles_per_s", std::to_string(idle_rate));
  // 51,200 MXU rows; fetch, loads, pipeline fill and the store cost about 1,400 cycles more
  // (52,635 when written). A bubble between MATMULs would add at least one cycle per MATMUL.
  EXPECT_LE(busy, uint64_t{m} * reps + 1600) << "MATMULs no longer stream back to back";
}

}  // namespace
}  // namespace tpuw::sim
