// GEMM tiling on the ref backend: many shapes equal plain integer math; the program's structure.
#include <gtest/gtest.h>

#include <random>

#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/runtime/gemm.h"

namespace tpuw::runtime {
namespace {

std::vector<int8_t> random_int8(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-128, 127);
  std::vector<int8_t> v(n);
  for (auto& x : v) x = static_cast<int8_t>(d(rng));
  return v;
}

void check_shape_on(Device& dev, uint64_t m, uint64_t k, uint64_t n, uint32_t seed) {
  const GemmShape s{m, k, n};
  const auto a = random_int8(m * k, seed);
  const auto b = random_int8(k * n, seed + 1);
  const GemmResult r = gemm(dev, a, b, s);
  const auto want = gemm_cpu(a, b, s);
  ASSERT_EQ(r.c.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(r.c[i], want[i]) << "M=" << m << " K=" << k << " N=" << n << " element (" << i / n << ", "
                               << i % n << ")";
  }
  EXPECT_GT(r.cycles, 0u);
  EXPECT_EQ(r.min_bytes, m * k + k * n + 4 * m * n);
  EXPECT_EQ(r.perf.mxu_active, r.plan.folds * 0 + r.perf.mxu_active);  // present
  EXPECT_GE(r.perf.rd_bytes, r.plan.a_bytes() + r.plan.b_bytes() * r.plan.m_tiles);
  EXPECT_GE(r.perf.wr_bytes, r.plan.c_bytes());
}

TEST(GemmSizes, OverflowingShapesAreClearErrors) {
  const DeviceParams& p = *find_device_config(16);
  // The example: tpuw gemm --m 1152921504606846977 --k 16 --n 16 (M*K wraps to 16).
  for (const GemmShape s : {GemmShape{1152921504606846977ull, 16, 16}, GemmShape{16, ~uint64_t{0}, 16},
                            GemmShape{uint64_t{1} << 32, uint64_t{1} << 32, 1}, GemmShape{1, 16, ~uint64_t{0} - 3}}) {
    try {
      (void)plan_gemm(p, s);
      FAIL() << "M=" << s.m << " K=" << s.k << " N=" << s.n;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("overflows a 64-bit size"), std::string::npos) << e.what();
    }
  }
  // Spans that do not match the shape, including one where M*K wraps to the span's size.
  const std::vector<int8_t> a(16), b(256);
  EXPECT_THROW((void)gemm_cpu(a, b, GemmShape{1152921504606846977ull, 16, 16}), Error);
  EXPECT_THROW((void)gemm_cpu(a, b, GemmShape{2, 16, 16}), Error);
  const GemmPlan small = plan_gemm(p, GemmShape{4, 16, 16});
  EXPECT_THROW((void)pack_a(small, a), Error);
  EXPECT_THROW((void)pack_b(small, std::span<const int8_t>(b).first(255)), Error);
  EXPECT_THROW((void)unpack_c(small, std::vector<int32_t>(3)), Error);
  // Packed sizes that fit 64 bits but not the device's 4 GiB: a clear error from compile_gemm.
  const GemmPlan big = plan_gemm(p, GemmShape{uint64_t{1} << 20, uint64_t{1} << 20, 16});
  EXPECT_THROW((void)compile_gemm(big, 0, 0, 0), Error);
}

TEST(GemmCpu, KnownValues) {
  // [1 2; 3 4] . [5 6; 7 8] = [19 22; 43 50]
  const std::vector<int8_t> a = {1, 2, 3, 4}, b = {5, 6, 7, 8};
  EXPECT_EQ(gemm_cpu(a, b, {2, 2, 2}), (std::vector<int32_t>{19, 22, 43, 50}));
}

TEST(GemmRef, ShapesN16) {
  Device dev = Device::open("ref", BackendConfig{});
  const std::vector<std::array<uint64_t, 3>> shapes = {
      {1, 1, 1}, {2, 3, 5}, {7, 13, 11}, {16, 16, 16}, {17, 31, 19}, {33, 64, 47}, {100, 37, 129},
      {1, 300, 1}, {129, 1, 65}, {64, 128, 32}};
  uint32_t seed = 1;
  for (const auto& [m, k, n] : shapes) check_shape_on(dev, m, k, n, seed += 2);
}

TEST(GemmRef, ShapesN4LargerThanBuffers) {
  // N=4 config: UB 2048 rows, WB 512, ACC 1024 (strips of at most 512 rows), 8-byte beat.
  BackendConfig cfg;
  cfg.array_n = 4;
  Device dev = Device::open("ref", cfg);
  uint32_t seed = 100;
  for (const auto& [m, k, n] : std::vector<std::array<uint64_t, 3>>{
           {1, 1, 1}, {3, 5, 7}, {13, 17, 19}, {1100, 9, 6}, {37, 300, 23}, {600, 70, 5}}) {
    check_shape_on(dev, m, k, n, seed += 2);
  }
  // K so large that an M tile's A blocks cannot stay resident: streamed through UB slots.
  const GemmPlan p = plan_gemm(dev.info().params, {9, 8200, 3});
  EXPECT_FALSE(p.a_resident);
  check_shape_on(dev, 9, 8200, 3, 7);
}

TEST(GemmRef, ExtremesAndWrapAround) {
  Device dev = Device::open("ref", BackendConfig{});
  for (const auto& [m, k, n] : std::vector<std::array<uint64_t, 3>>{{5, 40, 3}, {17, 515, 18}}) {
    const std::vector<int8_t> a(m * k, -128), b(k * n, -128);
    const GemmResult r = gemm(dev, a, b, {m, k, n});
    for (int32_t v : r.c) ASSERT_EQ(v, static_cast<int32_t>(16384 * k));
    std::vector<int8_t> bp(k * n, 127);
    const GemmResult r2 = gemm(dev, a, bp, {m, k, n});
    for (int32_t v : r2.c) ASSERT_EQ(v, static_cast<int32_t>(-128 * 127 * static_cast<int64_t>(k)));
  }
  // 131073 * 16384 overflows int32: the device wraps like two's complement.
  const uint64_t k = 131073;
  const std::vector<int8_t> a(k, -128), b(k, -128);
  const GemmResult r = gemm(dev, a, b, {1, k, 1});
  EXPECT_EQ(r.c[0], gemm_cpu(a, b, {1, k, 1})[0]);
  EXPECT_EQ(r.c[0], static_cast<int32_t>(static_cast<uint32_t>(16384u * k)));
}

TEST(GemmRef, SameResultUnderDifferentMemoryTiming) {
  const GemmShape s{70, 90, 50};
  const auto a = random_int8(s.m * s.k, 5), b = random_int8(s.k * s.n, 6);
  const auto want = gemm_cpu(a, b, s);
  for (const auto& [lat, bw] : std::vector<std::pair<unsigned, unsigned>>{{1, 64}, {200, 1}, {16, 16}}) {
    BackendConfig cfg;
    cfg.memory.read_latency = lat;
    cfg.memory.write_latency = lat;
    cfg.memory.bytes_per_cycle = bw;
    Device dev = Device::open("ref", cfg);
    EXPECT_EQ(gemm(dev, a, b, s).c, want) << "latency " << lat << " bandwidth " << bw;
  }
}

TEST(GemmPlan, Default512Cube) {
  const GemmPlan p = plan_gemm(kDeviceConfigs[0], {512, 512, 512});
  EXPECT_TRUE(p.a_resident);
  EXPECT_EQ(p.m_tiles, 1u);
  EXPECT_EQ(p.m_tile, 512u);
  EXPECT_EQ(p.k_blocks, 32u);
  EXPECT_EQ(p.n_blocks, 32u);
  EXPECT_EQ(p.folds, 1024u);
  EXPECT_EQ(p.a_slots, 32u);
}

TEST(GemmPlan, RejectsZeroDimensions) {
  EXPECT_THROW(plan_gemm(kDeviceConfigs[0], {0, 1, 1}), Error);
  EXPECT_THROW(plan_gemm(kDeviceConfigs[0], {1, 0, 1}), Error);
  EXPECT_THROW(plan_gemm(kDeviceConfigs[0], {1, 1, 0}), Error);
}

// Structure of the compiled program: LOADW(t+1) right after MATMUL(t), swap on every MATMUL,
// accumulate for k > 0, and every token channel balanced (as many pushes as pops).
TEST(GemmProgram, StructureAndTokenBalance) {
  const GemmPlan p = plan_gemm(kDeviceConfigs[0], {512, 512, 512});
  const GemmProgram prog = compile_gemm(p, 0x100000, 0x200000, 0x300000);
  EXPECT_EQ(prog.matmuls, p.folds);
  EXPECT_EQ(prog.loadws, p.folds);
  EXPECT_EQ(prog.stores, p.n_blocks);
  EXPECT_EQ(prog.loads, p.folds + p.k_blocks);  // one per weight tile, A loaded once
  int ld2cmp = 0, cmp2ld = 0, cmp2st = 0, st2cmp = 0;
  int max_ld2cmp = 0;
  std::vector<isa::Instr> compute;
  for (const auto& w : prog.code) {
    const isa::Instr in = isa::decode(w);
    const auto op = static_cast<spec::Opcode>(in.opcode);
    if (op == spec::Opcode::kLoad) {
      ld2cmp += in.push_next;
      cmp2ld -= in.pop_next;
    } else if (op == spec::Opcode::kStore) {
      cmp2st -= in.pop_prev;
      st2cmp += in.push_prev;
    } else {
      ld2cmp -= in.pop_prev;
      cmp2ld += in.push_prev;
      st2cmp -= in.pop_next;
      cmp2st += in.push_next;
      compute.push_back(in);
    }
    max_ld2cmp = std::max(max_ld2cmp, ld2cmp);
    // In program order a pop never runs ahead of its push.
    ASSERT_GE(ld2cmp, 0);
    ASSERT_GE(cmp2ld, 0);
    ASSERT_GE(cmp2st, 0);
    ASSERT_GE(st2cmp, 0);
  }
  EXPECT_EQ(ld2cmp, 0);
  EXPECT_EQ(cmp2st, 0);
  EXPECT_LT(max_ld2cmp, 255);
  ASSERT_EQ(compute.size(), 2 * p.folds);
  for (size_t f = 0; f < p.folds; ++f) {
    EXPECT_EQ(compute[2 * f].opcode, static_cast<uint8_t>(spec::Opcode::kLoadw));
    const isa::Instr& mm = compute[2 * f + 1];
    ASSERT_EQ(mm.opcode, static_cast<uint8_t>(spec::Opcode::kMatmul));
    EXPECT_EQ(mm.get("swap"), 1u);
    EXPECT_EQ(mm.get("accumulate"), f % p.k_blocks == 0 ? 0u : 1u);
    EXPECT_EQ(mm.get("rows"), 512u);
    EXPECT_EQ(mm.get("acc_addr"), (f / p.k_blocks) % 2 * 512);
  }
}

}  // namespace
}  // namespace tpuw::runtime

namespace tpuw::runtime {
namespace {

// The same compiler against the verilated device (small shapes; skipped when rtl is not built).
TEST(GemmRtl, ShapesMatchCpu) {
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  for (unsigned an : {16u, 4u}) {
    BackendConfig cfg;
    cfg.array_n = an;
    Device dev = Device::open("rtl", cfg);
    const std::vector<std::array<uint64_t, 3>> shapes =
        an == 16 ? std::vector<std::array<uint64_t, 3>>{{1, 1, 1}, {33, 64, 47}, {17, 31, 19}}
                 : std::vector<std::array<uint64_t, 3>>{{3, 5, 7}, {600, 70, 5}, {9, 8200, 3}};
    uint32_t seed = 40;
    for (const auto& [m, k, n] : shapes) check_shape_on(dev, m, k, n, seed += 2);
  }
}

}  // namespace
}  // namespace tpuw::runtime
