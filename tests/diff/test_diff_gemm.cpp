// Random GEMM shapes, compiled by the runtime, on the verilated device and the reference model:
// results must be bit-identical to each other and to a plain CPU product.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tpuw/device.h"
#include "tpuw/runtime/gemm.h"

namespace tpuw::difftest {
namespace {

using runtime::GemmShape;

std::vector<int8_t> random_int8(size_t count, std::mt19937_64& rng, bool extremes) {
  std::vector<int8_t> v(count);
  std::uniform_int_distribution<int> d(-128, 127);
  for (auto& x : v) x = static_cast<int8_t>(extremes && (rng() & 3) ? -128 : d(rng));
  return v;
}

void run_shapes(unsigned array_n, int count, uint64_t max_dim, uint64_t seed) {
  BackendConfig cfg;
  cfg.array_n = array_n;
  Device rtl = Device::open("rtl", cfg);
  Device ref = Device::open("ref", cfg);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < count; ++i) {
    // Mostly small odd shapes, now and then one that is larger than the buffers.
    const uint64_t lim = (i % 17 == 16) ? 4 * max_dim : max_dim;
    const GemmShape shape{1 + rng() % lim, 1 + rng() % lim, 1 + rng() % lim};
    const bool extremes = i % 5 == 0;  // mostly -128: sums near the int32 extremes of the fold
    const auto a = random_int8(shape.m * shape.k, rng, extremes);
    const auto b = random_int8(shape.k * shape.n, rng, extremes);
    SCOPED_TRACE("N=" + std::to_string(array_n) + " shape " + std::to_string(shape.m) + "x" +
                 std::to_string(shape.k) + "x" + std::to_string(shape.n));
    const auto cpu = runtime::gemm_cpu(a, b, shape);
    const auto r_rtl = runtime::gemm(rtl, a, b, shape);
    const auto r_ref = runtime::gemm(ref, a, b, shape);
    ASSERT_EQ(r_rtl.c.size(), cpu.size());
    ASSERT_EQ(r_ref.c.size(), cpu.size());
    for (size_t j = 0; j < cpu.size(); ++j) {
      ASSERT_EQ(r_rtl.c[j], cpu[j]) << "rtl differs from the CPU at element " << j;
      ASSERT_EQ(r_ref.c[j], cpu[j]) << "ref differs from the CPU at element " << j;
    }
    EXPECT_GT(r_rtl.cycles, 0u);
    EXPECT_EQ(r_rtl.perf.mxu_active, r_ref.perf.mxu_active) << "rows streamed through the MXU differ";
    EXPECT_EQ(r_rtl.perf.instret, r_ref.perf.instret);
  }
}

TEST(DiffGemm, RandomShapesN4) { run_shapes(4, 200, 40, 4242); }
TEST(DiffGemm, RandomShapesN16) { run_shapes(16, 30, 100, 1616); }

}  // namespace
}  // namespace tpuw::difftest
