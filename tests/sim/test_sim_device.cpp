// SimDevice against the verilated tpu_top: registers over AXI4-Lite, hand-assembled programs run
// through ring + doorbell + irq, several devices in one process, DMA faults.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "device_program.h"
#include "tpuw/device_configs.h"
#include "tpuw/sim/sim_device.h"
#include "tpuw/spec.h"

namespace tpuw::sim {
namespace {

using namespace testing;  // NOLINT: test helpers
using testing::Instr;
namespace reg = spec::reg;

std::string param_name(const ::testing::TestParamInfo<unsigned>& info) {
  return fmt::format("N{}", info.param);
}

// ---------------------------------------------------------------------------------------------
// Construction

TEST(SimDevice, AvailableSizesAreTheBuiltConfigurations) {
  const std::vector<unsigned> sizes = SimDevice::available_array_sizes();
  ASSERT_EQ(sizes.size(), kDeviceConfigs.size());
  for (size_t i = 0; i < sizes.size(); ++i) EXPECT_EQ(sizes[i], kDeviceConfigs[i].array_n);
}

TEST(SimDevice, UnknownArraySizeIsRejectedWithTheAvailableList) {
  SimDeviceConfig c;
  c.array_n = 7;
  try {
    SimDevice d(c);
    FAIL() << "no exception";
  } catch (const SimError& e) {
    EXPECT_EQ(e.kind(), SimErrorKind::kInvalidArgument);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("7"), std::string::npos) << msg;
    for (unsigned n : SimDevice::available_array_sizes()) {
      EXPECT_NE(msg.find(std::to_string(n)), std::string::npos) << msg;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Registers

class SimDeviceRegs : public ::testing::TestWithParam<unsigned> {};

TEST_P(SimDeviceRegs, IdentificationRegistersMatchTheSpecAndConfiguration) {
  SimDevice d(config_for(GetParam()));
  const DeviceParams& p = d.params();
  EXPECT_EQ(p.array_n, GetParam());
  EXPECT_EQ(d.read_reg(reg::kId), spec::kDeviceId);
  EXPECT_EQ(d.read_reg(reg::kVersion), (spec::kVersionMajor << 16) | spec::kVersionMinor);
  EXPECT_EQ(d.read_reg(reg::kArrayN), p.array_n);
  EXPECT_EQ(d.read_reg(reg::kUbDepth), p.ub_depth);
  EXPECT_EQ(d.read_reg(reg::kWbDepth), p.wb_depth);
  EXPECT_EQ(d.read_reg(reg::kAccDepth), p.acc_depth);
  EXPECT_EQ(d.read_reg(reg::kDmaDataW), p.dma_data_w);
  EXPECT_EQ(d.read_reg(reg::kQueueDepth), p.queue_depth);
  EXPECT_EQ(d.read_reg(reg::kFeatures) & ~reg::kFeaturesBf16,
            reg::kFeaturesWeightDoubleBuffer | reg::kFeaturesBias | reg::kFeaturesRelu |
                reg::kFeaturesPerColumnQuant | reg::kFeaturesTranspose | reg::kFeaturesLut);
  // reset values
  EXPECT_EQ(d.read_reg(reg::kStatus), 0u);
  EXPECT_EQ(d.read_reg(reg::kIrqStatus), 0u);
  EXPECT_EQ(d.read_reg(reg::kDmaWinBase), 0u);
  EXPECT_EQ(d.read_reg(reg::kDmaWinLast), 0xFFFFFFFFu);
  EXPECT_FALSE(d.irq());
}

TEST_P(SimDeviceRegs, EveryDefinedRegisterAnswersOkayAndRwRegistersHoldValues) {
  SimDevice d(config_for(GetParam()));
  for (const spec::RegInfo& r : spec::kRegs) {
    if (r.access == "w1s" || r.access == "w1c") continue;  // reading is harmless, but keep it simple
    EXPECT_TRUE(d.try_read_reg(r.offset).ok()) << r.name;
  }
  d.write_reg(reg::kRingBase, kBase + 0x40);
  d.write_reg(reg::kRingSize, 17);
  d.write_reg(reg::kDmaWinBase, 0x1000);
  EXPECT_EQ(d.read_reg(reg::kRingBase), kBase + 0x40);
  EXPECT_EQ(d.read_reg(reg::kRingSize), 17u);
  EXPECT_EQ(d.read_reg(reg::kDmaWinBase), 0x1000u);
}

TEST_P(SimDeviceRegs, UndefinedOffsetsAnswerSlverr) {
  SimDevice d(config_for(GetParam()));
  for (uint32_t off : {0x060u, 0x07Cu, 0x0C8u, 0x100u, 0x800u, 0xFFCu, 0x002u}) {
    const AxilResult r = d.try_read_reg(off);
    EXPECT_EQ(r.resp, kAxiSlvErr) << "read " << off;
    EXPECT_EQ(r.data, 0u) << "read " << off;
    EXPECT_EQ(d.try_write_reg(off, 0xFFFFFFFF), kAxiSlvErr) << "write " << off;
  }
  try {
    d.read_reg(0x800);
    FAIL() << "no exception";
  } catch (const SimError& e) {
    EXPECT_EQ(e.kind(), SimErrorKind::kBusError);
    EXPECT_NE(std::string(e.what()).find("SLVERR"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("0x800"), std::string::npos) << e.what();
  }
  EXPECT_THROW(d.write_reg(0x800, 1), SimError);
  // the bus still works afterwards
  EXPECT_EQ(d.read_reg(reg::kId), spec::kDeviceId);
}

TEST_P(SimDeviceRegs, RegisterAccessTimesOut) {
  SimDeviceConfig c = config_for(GetParam());
  c.reg_timeout_cycles = 1;  // no AXI4-Lite access completes in one cycle
  SimDevice d(c);
  try {
    d.read_reg(reg::kId);
    FAIL() << "no exception";
  } catch (const SimError& e) {
    EXPECT_EQ(e.kind(), SimErrorKind::kTimeout);
    EXPECT_NE(std::string(e.what()).find("1 cycles"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, SimDeviceRegs, ::testing::ValuesIn(SimDevice::available_array_sizes()),
                         param_name);

// ---------------------------------------------------------------------------------------------
// Programs

class SimDeviceProgram : public ::testing::TestWithParam<unsigned> {};

TEST_P(SimDeviceProgram, SingleTileGemmEndToEnd) {
  SimDevice d(config_for(GetParam()));
  const unsigned n = GetParam();
  const Gemm g = make_gemm(n, 2 * n + 2, 1234 + n);
  const Layout l;
  const std::vector<Instr> prog = gemm_program(d, g, l, 0xC0FFEE01);
  testing::submit(d, l.ring, 16, prog);
  const uint64_t ran = d.run(200000);
  ASSERT_TRUE(d.irq()) << "no interrupt after " << ran << " cycles; " << fault_text(d);
  EXPECT_EQ(d.read_reg(reg::kIrqStatus), reg::kIrqStatusFence) << fault_text(d);
  EXPECT_EQ(d.read_reg(reg::kFaultCause), 0u) << fault_text(d);
  EXPECT_EQ(d.read_reg(reg::kFenceValue), 0xC0FFEE01u);
  EXPECT_EQ(d.read_reg(reg::kRingHead), prog.size());
  EXPECT_EQ(d.read_reg(reg::kStatus) & (reg::kStatusBusy | reg::kStatusFault), 0u);
  uint32_t fence_mem = 0;
  d.mem_read(l.fence, &fence_mem, 4);
  EXPECT_EQ(fence_mem, 0xC0FFEE01u);
  const std::vector<int32_t> c = read_result(d, g, l);
  for (size_t i = 0; i < c.size(); ++i) {
    ASSERT_EQ(c[i], g.expect[i]) << "C[" << i / n << "][" << i % n << "]";
  }
  EXPECT_EQ(d.axi_stats().read_errors + d.axi_stats().write_errors, 0u);
  // w1c clears the interrupt
  d.write_reg(reg::kIrqStatus, reg::kIrqStatusFence);
  EXPECT_FALSE(d.irq());
  std::printf("[ info ] N=%u single-tile GEMM M=%u: %llu cycles from doorbell to irq\n", n, g.m,
              static_cast<unsigned long long>(ran));
}

TEST_P(SimDeviceProgram, GemmUnderBackpressureAndNarrowBandwidth) {
  SimDeviceConfig c = config_for(GetParam());
  c.memory.backpressure = 0.3;
  c.memory.bytes_per_cycle = 3;
  c.memory.read_latency = 40;
  c.memory.write_latency = 25;
  c.memory.latency_jitter = 30;
  c.memory.seed = 77;
  SimDevice d(c);
  const unsigned n = GetParam();
  const Gemm g = make_gemm(n, 2 * n + 2, 99 + n);
  const Layout l;
  testing::submit(d, l.ring, 16, gemm_program(d, g, l, 7));
  d.run(1000000);
  ASSERT_TRUE(d.irq()) << fault_text(d);
  EXPECT_EQ(d.read_reg(reg::kIrqStatus), reg::kIrqStatusFence) << fault_text(d);
  EXPECT_EQ(read_result(d, g, l), g.expect);
}

TEST_P(SimDeviceProgram, LoadOutsideHostMemoryFaultsWithAxiError) {
  SimDevice d(config_for(GetParam()));
  const DeviceParams& p = d.params();
  const Layout l;
  const uint32_t rb = testing::host_row_bytes(p.array_n, p);
  const uint32_t bad = kBase + kSize;  // first byte past host memory (inside the DMA window)
  const std::vector<Instr> prog = {
      testing::load(spec::Mem::kUb, 0, bad, 1, rb, rb),
      testing::fence(5, l.fence, true),
  };
  testing::submit(d, l.ring, 16, prog);
  d.run(100000);
  ASSERT_TRUE(d.irq()) << fault_text(d);
  EXPECT_EQ(d.read_reg(reg::kIrqStatus) & reg::kIrqStatusFault, reg::kIrqStatusFault);
  EXPECT_NE(d.read_reg(reg::kStatus) & reg::kStatusFault, 0u);
  EXPECT_EQ(d.read_reg(reg::kFaultCause), static_cast<uint32_t>(spec::Fault::kAxiError)) << fault_text(d);
  EXPECT_EQ(d.read_reg(reg::kFaultPc), l.ring) << fault_text(d);
  EXPECT_EQ(d.read_reg(reg::kFaultInfo), bad) << fault_text(d);
  EXPECT_GE(d.axi_stats().read_errors, 1u);
  uint32_t fence_mem = 0;
  d.mem_read(l.fence, &fence_mem, 4);
  EXPECT_EQ(fence_mem, 0u) << "the FENCE after the fault must not run";
  // the device keeps answering
  EXPECT_EQ(d.read_reg(reg::kId), spec::kDeviceId);
}

TEST_P(SimDeviceProgram, StoreOutsideHostMemoryFaultsAndLeavesMemoryUntouched) {
  SimDevice d(config_for(GetParam()));
  const DeviceParams& p = d.params();
  const Layout l;
  const uint32_t rb = testing::host_row_bytes(p.array_n, p);
  const uint32_t bad = kBase - rb;  // the row just below host memory
  const std::vector<Instr> prog = {
      testing::store(spec::Mem::kUb, 0, bad, 2, rb, rb),  // second row would land at kBase
      testing::fence(5, l.fence, true),
  };
  testing::submit(d, l.ring, 16, prog);
  std::vector<uint8_t> before(kSize);
  d.mem_read(kBase, before.data(), kSize);
  d.run(100000);
  ASSERT_TRUE(d.irq()) << fault_text(d);
  EXPECT_EQ(d.read_reg(reg::kFaultCause), static_cast<uint32_t>(spec::Fault::kAxiError)) << fault_text(d);
  EXPECT_EQ(d.read_reg(reg::kFaultPc), l.ring) << fault_text(d);
  EXPECT_GE(d.axi_stats().write_errors, 1u);
  std::vector<uint8_t> after(kSize);
  d.mem_read(kBase, after.data(), kSize);
  // the store's own second row may legally have been written (zeros from a fresh UB); nothing else
  for (uint32_t i = rb; i < kSize; ++i) ASSERT_EQ(after[i], before[i]) << "host byte " << i;
}

TEST_P(SimDeviceProgram, DmaWindowViolationFaultsAtDecode) {
  SimDevice d(config_for(GetParam()));
  const DeviceParams& p = d.params();
  const Layout l;
  const uint32_t rb = testing::host_row_bytes(p.array_n, p);
  d.write_reg(reg::kDmaWinBase, kBase);
  d.write_reg(reg::kDmaWinLast, kBase + 0xFFFF);
  const uint32_t bad = kBase + 0x10000;
  const std::vector<Instr> prog = {
      testing::fence(1, l.fence, false),
      testing::load(spec::Mem::kUb, 0, bad, 1, rb, rb),
      testing::fence(2, l.fence, true),
  };
  testing::submit(d, l.ring, 16, prog);
  d.run(100000);
  ASSERT_TRUE(d.irq()) << fault_text(d);
  EXPECT_EQ(d.read_reg(reg::kFaultCause), static_cast<uint32_t>(spec::Fault::kDmaWindow)) << fault_text(d);
  EXPECT_EQ(d.read_reg(reg::kFaultPc), l.ring + 16) << fault_text(d);
  EXPECT_EQ(d.read_reg(reg::kFaultInfo), bad) << fault_text(d);
  EXPECT_EQ(d.read_reg(reg::kFenceValue), 1u);
  EXPECT_EQ(d.axi_stats().read_errors, 0u) << "a decode-time fault must not reach the bus";
}

INSTANTIATE_TEST_SUITE_P(Configs, SimDeviceProgram, ::testing::ValuesIn(SimDevice::available_array_sizes()),
                         param_name);

// ---------------------------------------------------------------------------------------------
// Several devices, waveforms

TEST(SimDevice, TwoDevicesInOneProcessRunInterleaved) {
  const std::vector<unsigned> sizes = SimDevice::available_array_sizes();
  const unsigned n1 = sizes.back(), n2 = sizes.front();
  SimDevice d1(config_for(n1));
  SimDevice d2(config_for(n2));
  const Layout l;
  const Gemm g1 = make_gemm(n1, 2 * n1 + 2, 1);
  const Gemm g2 = make_gemm(n2, 2 * n2 + 2, 2);
  testing::submit(d1, l.ring, 16, gemm_program(d1, g1, l, 0x11));
  testing::submit(d2, l.ring, 16, gemm_program(d2, g2, l, 0x22));
  const uint64_t c1 = d1.cycle(), c2 = d2.cycle();
  for (int i = 0; i < 20000 && !(d1.irq() && d2.irq()); ++i) {
    d1.run(7);
    d2.run(13);
  }
  ASSERT_TRUE(d1.irq()) << fault_text(d1);
  ASSERT_TRUE(d2.irq()) << fault_text(d2);
  EXPECT_NE(d1.cycle() - c1, d2.cycle() - c2);  // each keeps its own clock
  EXPECT_EQ(d1.read_reg(reg::kFenceValue), 0x11u);
  EXPECT_EQ(d2.read_reg(reg::kFenceValue), 0x22u);
  EXPECT_EQ(read_result(d1, g1, l), g1.expect);
  EXPECT_EQ(read_result(d2, g2, l), g2.expect);
}

TEST(SimDevice, WaveformWindowWritesAnFstOnlyInsideTheWindow) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("tpuw_sim_wave_" + std::to_string(::getpid()) + ".fst");
  std::filesystem::remove(path);
  SimDeviceConfig c = config_for(SimDevice::available_array_sizes().back());
  c.wave.path = path.string();
  c.wave.from = 100;
  c.wave.to = 300;
  {
    SimDevice d(c);
    EXPECT_FALSE(d.wave_active());
    EXPECT_FALSE(std::filesystem::exists(path));
    d.tick(100 - d.cycle());
    EXPECT_TRUE(d.wave_active());
    d.tick(150);
    EXPECT_TRUE(d.wave_active());
    d.tick(100);
    EXPECT_FALSE(d.wave_active());  // closed after cycle 300
    ASSERT_TRUE(std::filesystem::exists(path));
    EXPECT_GT(std::filesystem::file_size(path), 100u);
    // a second window at run time
    std::filesystem::remove(path);
    d.start_wave(path.string(), d.cycle() + 10, d.cycle() + 20);
    EXPECT_FALSE(d.wave_active());
    d.tick(15);
    EXPECT_TRUE(d.wave_active());
    d.stop_wave();
    EXPECT_FALSE(d.wave_active());
    EXPECT_TRUE(std::filesystem::exists(path));
  }
  std::filesystem::remove(path);
  c.wave.path = "/nonexistent-dir/x.fst";
  c.wave.from = 0;
  EXPECT_THROW(SimDevice{c}, SimError);
}

}  // namespace
}  // namespace tpuw::sim
