// Each validation rule of docs/architecture.md -> its FAULT_CAUSE and FAULT_INFO, and the
// runtime AXI errors. Configuration: N=4 (UB 2048, WB 512, ACC 1024 rows, 8-byte beat).
#include <string>
#include <vector>

#include "ref_harness.h"

namespace tpuw::ref::test {
namespace {

using spec::Fault;
using spec::Mem;

struct Case {
  const char* what;
  isa::Word word;
  Fault cause;
  uint32_t info;
};

isa::Word with_bit(isa::Word w, unsigned bit) {
  isa::set_bits(w, bit, 1, 1);
  return w;
}

isa::Word raw(uint8_t opcode) {
  isa::Word w{};
  w[0] = opcode;
  return w;
}

// Decode-time faults leave RING_HEAD on the faulting instruction; runtime (AXI) faults happen
// after the instruction was dispatched, so HEAD has moved on (decode_time = false).
void expect_fault(Dev& d, Fault cause, uint32_t info, uint32_t index, const char* what, bool decode_time = true) {
  d.run(1'000'000);
  EXPECT_TRUE(d.dev.irq()) << what;
  EXPECT_EQ(d.reg(r::kStatus) & r::kStatusFault, r::kStatusFault) << what;
  EXPECT_EQ(d.reg(r::kFaultCause), static_cast<uint32_t>(cause)) << what;
  EXPECT_EQ(d.reg(r::kFaultInfo), info) << what;
  EXPECT_EQ(d.reg(r::kFaultPc), kRing + 16 * index) << what;
  EXPECT_EQ(d.reg(r::kIrqStatus), r::kIrqStatusFault) << what;
  if (decode_time) {
    EXPECT_EQ(d.reg(r::kRingHead), index) << what;
  }
}

TEST(RefValidation, EachRuleGivesItsCauseAndInfo) {
  const std::vector<Case> cases = {
      // 1. opcode
      {"opcode 0", raw(0x00), Fault::kIllegalOpcode, 0x00},
      {"opcode 0x0a", raw(0x0A), Fault::kIllegalOpcode, 0x0A},
      {"opcode 0xff", raw(0xFF), Fault::kIllegalOpcode, 0xFF},
      // 2. reserved bits (lowest set)
      {"load bit 14", with_bit(load(Mem::kUb, 0, 0, 1, 8, 8), 14), Fault::kIllegalField, 14},
      {"load bits 127, 15", with_bit(with_bit(load(Mem::kUb, 0, 0, 1, 8, 8), 127), 15), Fault::kIllegalField, 15},
      {"loadw bit 36", with_bit(loadw(0), 36), Fault::kIllegalField, 36},
      {"nop bit 12", with_bit(nop(), 12), Fault::kIllegalField, 12},
      {"fence bit 13", with_bit(fence(0, 0), 13), Fault::kIllegalField, 13},
      {"reserved before rows=0", with_bit(load(Mem::kUb, 0, 0, 0, 8, 8), 14), Fault::kIllegalField, 14},
      // 3. dependency flags
      {"load pop_prev", with_bit(load(Mem::kUb, 0, 0, 1, 8, 8), 8), Fault::kIllegalField, 8},
      {"load push_prev", with_bit(load(Mem::kUb, 0, 0, 1, 8, 8), 10), Fault::kIllegalField, 10},
      {"store pop_next", with_bit(store(Mem::kUb, 0, 0, 1, 8, 8), 9), Fault::kIllegalField, 9},
      {"store push_next", with_bit(store(Mem::kUb, 0, 0, 1, 8, 8), 11), Fault::kIllegalField, 11},
      {"fence push_next", with_bit(fence(0, 0), 11), Fault::kIllegalField, 11},
      {"fence pop_next+push_prev", with_bit(with_bit(fence(0, 0), 10), 9), Fault::kIllegalField, 9},
      {"flag before bad mem", with_bit(load(static_cast<Mem>(3), 0, 0, 1, 8, 8), 8), Fault::kIllegalField, 8},
      // 4. fields
      {"load mem=3", load(static_cast<Mem>(3), 0, 0, 1, 8, 8), Fault::kIllegalField, 12},
      {"store mem=WB", store(Mem::kWb, 0, 0, 1, 8, 8), Fault::kIllegalField, 12},
      {"load rows=0", load(Mem::kUb, 0, 0, 0, 8, 8), Fault::kIllegalField, 68},
      {"store rows=0", store(Mem::kAcc, 0, 0, 0, 16, 16), Fault::kIllegalField, 68},
      {"row_bytes=0", load(Mem::kUb, 0, 0, 1, 0, 8), Fault::kIllegalField, 84},
      {"row_bytes not a beat", load(Mem::kUb, 0, 0, 1, 4, 8), Fault::kIllegalField, 84},
      {"row_bytes not an ACC row", load(Mem::kAcc, 0, 0, 1, 8, 8), Fault::kIllegalField, 84},
      {"host_addr unaligned", load(Mem::kUb, 0, 0x1004, 1, 8, 8), Fault::kIllegalField, 36},
      {"host_stride unaligned", load(Mem::kUb, 0, 0x1000, 2, 8, 12), Fault::kIllegalField, 100},
      {"matmul rows=0", matmul(0, 0, 0, false), Fault::kIllegalField, 56},
      {"activate rows=0", activate(0, 0, 0, false, 0, 0, false), Fault::kIllegalField, 56},
      {"fence unaligned", fence(0, 0x4002), Fault::kIllegalField, 64},
      // 5. local range
      {"load UB past end", load(Mem::kUb, 2047, 0, 1, 16, 16), Fault::kLocalRange, 2048},
      {"load UB start past end", load(Mem::kUb, 3000, 0, 1, 8, 8), Fault::kLocalRange, 3000},
      {"load WB rows*row_bytes", load(Mem::kWb, 500, 0, 4, 16, 16), Fault::kLocalRange, 512},
      {"store ACC past end", store(Mem::kAcc, 1020, 0, 5, 16, 16), Fault::kLocalRange, 1024},
      {"loadw past end", loadw(510), Fault::kLocalRange, 512},
      {"matmul UB", matmul(2040, 0, 9, false), Fault::kLocalRange, 2048},
      {"matmul ACC", matmul(0, 1023, 2, false), Fault::kLocalRange, 1024},
      {"activate ACC", activate(1000, 0, 30, false, 0, 0, false), Fault::kLocalRange, 1024},
      {"activate UB", activate(0, 2047, 2, false, 0, 0, false), Fault::kLocalRange, 2048},
      {"activate bias", activate(0, 0, 1, true, 1024, 0, false), Fault::kLocalRange, 1024},
      {"activate qparam", activate(0, 0, 1, false, 0, 1023, false), Fault::kLocalRange, 1024},
      {"activate qparam far", activate(0, 0, 1, false, 0, 5000, false), Fault::kLocalRange, 5000},
      // 6. DMA window (default window = everything; 32-bit overflow still faults)
      {"window overflow", load(Mem::kUb, 0, 0xFFFFFFF0, 2, 16, 16), Fault::kDmaWindow, 0xFFFFFFF0},
  };
  for (const auto& c : cases) {
    Dev d;
    d.submit({nop(), c.word, fence(1, 0x4000)});
    expect_fault(d, c.cause, c.info, 1, c.what);
  }
}

TEST(RefValidation, BiasAddrIsOnlyCheckedWithBias) {
  Dev d;
  d.submit({activate(0, 0, 1, false, 0xFFFFF, 0, false), fence(1, 0x4000)});
  d.run();
  EXPECT_EQ(d.reg(r::kFaultCause), 0u);
  EXPECT_EQ(d.reg(r::kFenceValue), 1u);
}

TEST(RefValidation, DmaWindow) {
  struct W {
    const char* what;
    isa::Word word;
    bool fault;
    uint32_t info;
  };
  const std::vector<W> cases = {
      {"exactly the window", load(Mem::kUb, 0, 0x1000, 2, 0x800, 0x800), false, 0},
      {"one row past", load(Mem::kUb, 0, 0x1000, 3, 0x800, 0x800), true, 0x1000},
      {"below", load(Mem::kUb, 0, 0xFF8, 1, 8, 8), true, 0xFF8},
      {"store past", store(Mem::kUb, 0, 0x1FF8, 1, 16, 16), true, 0x1FF8},
      {"fence inside", fence(1, 0x1FFC, false), false, 0},
      {"fence outside", fence(1, 0x2000, false), true, 0x2000},
  };
  for (const auto& c : cases) {
    Dev d;
    d.dev.write_reg(r::kDmaWinBase, 0x1000);
    d.dev.write_reg(r::kDmaWinLast, 0x1FFF);
    d.submit({c.word, fence(1, 0x1000)});
    if (c.fault) {
      expect_fault(d, Fault::kDmaWindow, c.info, 0, c.what);
    } else {
      d.run();
      EXPECT_EQ(d.reg(r::kFaultCause), 0u) << c.what;
      EXPECT_EQ(d.reg(r::kFenceValue), 1u) << c.what;
    }
  }
}

TEST(RefValidation, RingConfig) {
  {
    Dev d;
    d.dev.write_reg(r::kRingSize, 0);
    d.dev.write_reg(r::kRingTail, 3);
    d.run();
    EXPECT_EQ(d.reg(r::kFaultCause), static_cast<uint32_t>(Fault::kRingConfig));
    EXPECT_EQ(d.reg(r::kFaultInfo), 3u);
    EXPECT_TRUE(d.dev.irq());
  }
  {
    Dev d;
    d.dev.write_reg(r::kRingBase, kRing + 8);
    d.dev.write_reg(r::kRingTail, 1);
    d.run();
    EXPECT_EQ(d.reg(r::kFaultCause), static_cast<uint32_t>(Fault::kRingConfig));
    EXPECT_EQ(d.reg(r::kFaultInfo), 1u);
  }
  {
    Dev d;
    d.dev.write_reg(r::kRingTail, kRingEntries);
    d.run();
    EXPECT_EQ(d.reg(r::kFaultCause), static_cast<uint32_t>(Fault::kRingConfig));
    EXPECT_EQ(d.reg(r::kFaultInfo), kRingEntries);
  }
}

TEST(RefValidation, AxiErrorOnLoadNamesTheFirstFailingRow) {
  Dev d;
  // Rows at 4MiB-32, 4MiB-16 are inside, the third row (4MiB) is outside host memory.
  d.submit({nop(), load(Mem::kUb, 0, kMemSize - 32, 3, 16, 16, true), nop(true), fence(1, 0x4000)});
  expect_fault(d, Fault::kAxiError, static_cast<uint32_t>(kMemSize), 1, "load", false);
}

TEST(RefValidation, AxiErrorOnStoreAndFenceAndFetch) {
  {
    Dev d;
    d.submit({store(Mem::kUb, 0, 0x500000, 1, 8, 8), fence(1, 0x4000)});
    expect_fault(d, Fault::kAxiError, 0x500000, 0, "store", false);
  }
  {
    Dev d;
    d.submit({nop(), nop(), fence(1, 0x600000)});
    expect_fault(d, Fault::kAxiError, 0x600000, 2, "fence");
  }
  {
    Dev d;
    d.dev.write_reg(r::kRingBase, 0x800000);  // ring outside host memory
    d.dev.write_reg(r::kRingTail, 1);
    d.run();
    EXPECT_EQ(d.reg(r::kFaultCause), static_cast<uint32_t>(Fault::kAxiError));
    EXPECT_EQ(d.reg(r::kFaultInfo), 0x800000u);
    EXPECT_EQ(d.reg(r::kFaultPc), 0x800000u);
  }
}

TEST(RefValidation, DecodeFaultDrainsEarlierWorkAndDispatchesNothingAfter) {
  Dev d;
  d.put<int8_t>(0x1000, {1, 2, 3, 4, 5, 6, 7, 8});
  d.submit({load(Mem::kUb, 0, 0x1000, 1, 8, 8, true), nop(true, true), store(Mem::kUb, 0, 0x2000, 1, 8, 8, true),
            raw(0x42), fence(5, 0x4000), store(Mem::kUb, 0, 0x3000, 1, 8, 8)});
  expect_fault(d, Fault::kIllegalOpcode, 0x42, 3, "drain");
  EXPECT_EQ(d.get<int8_t>(0x2000, 8), (std::vector<int8_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(d.get<int8_t>(0x3000, 8), std::vector<int8_t>(8, 0));
  EXPECT_EQ(d.reg(r::kFenceValue), 0u);
  EXPECT_EQ(d.reg(r::kPerfInstretLo), 3u);
}

TEST(RefValidation, FaultedDeviceIgnoresDoorbellUntilSoftReset) {
  Dev d;
  d.submit({raw(0)});
  d.run();
  ASSERT_EQ(d.reg(r::kFaultCause), 1u);
  d.dev.write_reg(r::kIrqStatus, 3);
  d.submit({fence(3, 0x4000)});
  d.run(10000);
  EXPECT_EQ(d.reg(r::kFenceValue), 0u);
  d.dev.write_reg(r::kCtrl, r::kCtrlSoftReset);
  EXPECT_EQ(d.reg(r::kCtrl), 0u);
  EXPECT_EQ(d.reg(r::kStatus), 0u);
  EXPECT_EQ(d.reg(r::kFaultCause), 0u);
  EXPECT_EQ(d.reg(r::kRingBase), 0u);
  EXPECT_EQ(d.reg(r::kIrqEnable), 3u);  // kept across soft reset
  d.dev.write_reg(r::kRingBase, kRing);
  d.dev.write_reg(r::kRingSize, kRingEntries);
  d.submit({fence(4, 0x4000)});
  d.run();
  EXPECT_EQ(d.reg(r::kFenceValue), 4u);
}

// ---- TOKEN_OVERFLOW (docs/architecture.md, "Tokens") ----
// An instruction that pushes token counter `t` (N=4: 8-byte rows for LOAD/STORE).
isa::Word pusher(spec::Token t) {
  switch (t) {
    case spec::Token::kLd2cmp: return load(Mem::kUb, 0, 0x1000, 1, 8, 8, /*push_next=*/true);
    case spec::Token::kCmp2ld: return nop(false, false, false, /*push_prev=*/true);
    case spec::Token::kCmp2st: return nop(false, /*push_next=*/true);
    case spec::Token::kSt2cmp: return store(Mem::kUb, 0, 0x1000, 1, 8, 8, false, /*push_prev=*/true);
  }
  return nop();
}

TEST(RefTokens, EachCounterHoldsTokenMaxAndFaultsOnTheNextPush) {
  for (auto t : {spec::Token::kLd2cmp, spec::Token::kCmp2ld, spec::Token::kCmp2st, spec::Token::kSt2cmp}) {
    const std::string what(spec::to_string(t));
    {
      Dev d;  // exactly TOKEN_MAX outstanding tokens: legal
      std::vector<isa::Word> prog(spec::kTokenMax, pusher(t));
      prog.push_back(fence(7, 0x4000));
      d.submit(prog);
      d.run();
      EXPECT_EQ(d.reg(r::kFaultCause), 0u) << what;
      EXPECT_EQ(d.reg(r::kFenceValue), 7u) << what;
    }
    Dev d;  // one more: decode-time fault on that instruction, FAULT_INFO = the counter
    std::vector<isa::Word> prog(spec::kTokenMax + 1, pusher(t));
    prog.push_back(fence(7, 0x4000));
    d.submit(prog);
    expect_fault(d, Fault::kTokenOverflow, static_cast<uint32_t>(t), spec::kTokenMax, what.c_str());
    EXPECT_EQ(d.perf(r::kPerfInstretLo), uint64_t{spec::kTokenMax}) << what;  // everything before it ran
  }
}

TEST(RefTokens, PopsInProgramOrderMakeRoom) {
  // 127 pushes, a STORE that pops one, then one more push is legal; the next one is not.
  std::vector<isa::Word> prog(spec::kTokenMax, nop(false, /*push_next=*/true));
  prog.push_back(store(Mem::kUb, 0, 0x1000, 1, 8, 8, /*pop_prev=*/true));
  prog.push_back(nop(false, true));
  prog.push_back(nop(false, true));
  prog.push_back(fence(1, 0x4000));
  Dev d;
  d.submit(prog);
  expect_fault(d, Fault::kTokenOverflow, static_cast<uint32_t>(spec::Token::kCmp2st), spec::kTokenMax + 2,
               "pop then two pushes");
}

TEST(RefTokens, OtherFaultsOfTheSameInstructionComeFirst) {
  std::vector<isa::Word> prog(spec::kTokenMax, nop(false, true));
  prog.push_back(with_bit(nop(false, true), 12));  // reserved bit and an overflowing push
  Dev d;
  d.submit(prog);
  expect_fault(d, Fault::kIllegalField, 12, spec::kTokenMax, "reserved bit first");
}

TEST(RefTokens, SoftResetClearsTheCount) {
  Dev d;
  std::vector<isa::Word> prog(spec::kTokenMax, nop(false, true));
  prog.push_back(fence(1, 0x4000));
  d.submit(prog);
  d.run();
  ASSERT_EQ(d.reg(r::kFenceValue), 1u);
  d.dev.write_reg(r::kCtrl, r::kCtrlSoftReset);
  d.dev.write_reg(r::kRingBase, kRing);
  d.dev.write_reg(r::kRingSize, kRingEntries);
  d.submit({nop(false, true), fence(2, 0x4000)});
  d.run();
  EXPECT_EQ(d.reg(r::kFaultCause), 0u);
  EXPECT_EQ(d.reg(r::kFenceValue), 2u);
}

}  // namespace
}  // namespace tpuw::ref::test
