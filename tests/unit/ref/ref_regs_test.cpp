// Register map of the reference model: readouts, access types, SLVERR on undefined offsets.
#include <string>

#include <fmt/format.h>

#include "ref_harness.h"
#include "tpuw/error.h"

namespace tpuw::ref::test {
namespace {

TEST(RefRegs, IdentityAndConfigurationReadouts) {
  for (const auto& p : kDeviceConfigs) {
    Dev d(p);
    EXPECT_EQ(d.reg(r::kId), 0x54505557u);
    EXPECT_EQ(d.reg(r::kVersion), spec::kVersionMajor << 16 | spec::kVersionMinor);
    EXPECT_EQ(d.reg(r::kArrayN), p.array_n);
    EXPECT_EQ(d.reg(r::kUbDepth), p.ub_depth);
    EXPECT_EQ(d.reg(r::kWbDepth), p.wb_depth);
    EXPECT_EQ(d.reg(r::kAccDepth), p.acc_depth);
    EXPECT_EQ(d.reg(r::kDmaDataW), p.dma_data_w);
    EXPECT_EQ(d.reg(r::kQueueDepth), p.queue_depth);
    EXPECT_EQ(d.reg(r::kFeatures), 0x7Fu);  // ISA 1.1: TRANSPOSE and BF16 too; ISA 1.2: LUT
    EXPECT_EQ(d.dev.name(), "ref");
  }
}

TEST(RefRegs, ResetValues) {
  RefDevice dev(small(), mem_cfg());
  EXPECT_EQ(dev.read_reg(r::kStatus), 0u);
  EXPECT_EQ(dev.read_reg(r::kIrqEnable), 0u);
  EXPECT_EQ(dev.read_reg(r::kIrqStatus), 0u);
  EXPECT_EQ(dev.read_reg(r::kDmaWinBase), 0u);
  EXPECT_EQ(dev.read_reg(r::kDmaWinLast), 0xFFFFFFFFu);
  EXPECT_EQ(dev.read_reg(r::kRingHead), 0u);
  EXPECT_EQ(dev.read_reg(r::kFaultCause), 0u);
  EXPECT_FALSE(dev.irq());
}

TEST(RefRegs, AnyArraySizeIsAccepted) {
  for (uint32_t n : {1u, 3u, 8u, 32u}) {
    RefDevice dev(DeviceParams{n, 64, 64, 64, 64, 2}, mem_cfg());
    EXPECT_EQ(dev.read_reg(r::kArrayN), n);
  }
  EXPECT_THROW(RefDevice(DeviceParams{0, 64, 64, 64, 64, 2}, mem_cfg()), Error);
  EXPECT_THROW(RefDevice(DeviceParams{4, 64, 64, 64, 48, 2}, mem_cfg()), Error);
}

TEST(RefRegs, UndefinedOffsetsAnswerLikeSlverr) {
  Dev d;
  for (uint32_t off : {0x060u, 0x07Cu, 0x0C8u, 0xFFCu, 0x002u, 0x1000u}) {
    try {
      (void)d.dev.read_reg(off);
      FAIL() << "read of " << off << " did not throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(fmt::format("{:#05x}", off)), std::string::npos) << e.what();
    }
    EXPECT_THROW(d.dev.write_reg(off, 1), Error);
  }
}

TEST(RefRegs, ReadOnlyWritesAreIgnoredAndRwRegistersHoldValues) {
  Dev d;
  d.dev.write_reg(r::kId, 0);
  d.dev.write_reg(r::kRingHead, 5);
  d.dev.write_reg(r::kFenceValue, 5);
  d.dev.write_reg(r::kPerfInstretLo, 5);
  EXPECT_EQ(d.reg(r::kId), spec::kDeviceId);
  EXPECT_EQ(d.reg(r::kRingHead), 0u);
  EXPECT_EQ(d.reg(r::kFenceValue), 0u);
  EXPECT_EQ(d.reg(r::kPerfInstretLo), 0u);
  d.dev.write_reg(r::kDmaWinBase, 0x1000);
  d.dev.write_reg(r::kDmaWinLast, 0x1FFF);
  EXPECT_EQ(d.reg(r::kDmaWinBase), 0x1000u);
  EXPECT_EQ(d.reg(r::kDmaWinLast), 0x1FFFu);
  d.dev.write_reg(r::kIrqEnable, 0xFFFFFFFF);
  EXPECT_EQ(d.reg(r::kIrqEnable), 3u);
}

TEST(RefRegs, IrqStatusIsWriteOneToClear) {
  Dev d;
  d.submit({fence(1, 0x4000, true)});
  d.run();
  EXPECT_TRUE(d.dev.irq());
  EXPECT_EQ(d.reg(r::kIrqStatus), r::kIrqStatusFence);
  d.dev.write_reg(r::kIrqStatus, r::kIrqStatusFault);  // other bit: no effect
  EXPECT_EQ(d.reg(r::kIrqStatus), r::kIrqStatusFence);
  d.dev.write_reg(r::kIrqStatus, r::kIrqStatusFence);
  EXPECT_EQ(d.reg(r::kIrqStatus), 0u);
  EXPECT_FALSE(d.dev.irq());
}

TEST(RefRegs, IrqLineFollowsEnable) {
  Dev d;
  d.dev.write_reg(r::kIrqEnable, 0);
  d.submit({fence(9, 0x4000, true)});
  EXPECT_EQ(d.run(5000), 5000u);  // no irq line: runs the whole budget
  EXPECT_EQ(d.reg(r::kIrqStatus), r::kIrqStatusFence);
  EXPECT_FALSE(d.dev.irq());
  d.dev.write_reg(r::kIrqEnable, r::kIrqEnableFence);
  EXPECT_TRUE(d.dev.irq());
  EXPECT_EQ(d.run(100), 0u);  // irq already high
}

TEST(RefRegs, PerfLoLatchesHi) {
  Dev d;
  std::vector<isa::Word> prog;
  for (int i = 0; i < 5; ++i) prog.push_back(nop());
  prog.push_back(fence(1, 0x4000));
  d.submit(prog);
  d.run();
  EXPECT_EQ(d.reg(r::kPerfInstretLo), 6u);
  EXPECT_EQ(d.reg(r::kPerfInstretHi), 0u);
  EXPECT_GT(d.perf(r::kPerfCyclesLo), 0u);
  EXPECT_EQ(d.perf(r::kPerfRdBytesLo), 6u * 16);
  EXPECT_EQ(d.perf(r::kPerfWrBytesLo), 4u);
  d.dev.write_reg(r::kPerfCtrl, r::kPerfCtrlClear);
  for (uint32_t off = r::kPerfCyclesLo; off <= r::kPerfWrBytesLo; off += 8) EXPECT_EQ(d.perf(off), 0u) << off;
}

TEST(RefRegs, HostMemoryBoundsAreChecked) {
  Dev d;
  uint8_t b[8] = {};
  EXPECT_THROW(d.dev.mem_write(kMemSize - 4, b, 8), Error);
  EXPECT_THROW(d.dev.mem_read(kMemSize, b, 1), Error);
  EXPECT_NO_THROW(d.dev.mem_write(kMemSize - 8, b, 8));
  EXPECT_EQ(d.dev.mem_base(), 0u);
  EXPECT_EQ(d.dev.mem_size(), kMemSize);
}

}  // namespace
}  // namespace tpuw::ref::test
