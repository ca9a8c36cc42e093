// Driver tests on every built backend: open, data movement through the ring, faults with cause and
// instruction index, reset and run again, a deadlocked program times out, ring wrap-around,
// allocator, two devices in one process.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <numeric>

#include <fmt/format.h>

#include "tpuw/device.h"
#include "tpuw/sim_control.h"
#include "tpuw/error.h"

namespace tpuw {
namespace {

using isa::Instr;
using isa::Word;

Word nop(bool pop_prev = false, bool push_next = false) {
  Instr i = isa::make_instr(spec::Opcode::kNop);
  i.pop_prev = pop_prev;
  i.push_next = push_next;
  return isa::encode(i);
}

Word dma(spec::Opcode op, spec::Mem mem, uint64_t local, uint64_t host, uint64_t rows, uint64_t row_bytes) {
  Instr i = isa::make_instr(op);
  i.set("mem", static_cast<uint64_t>(mem));
  i.set("local_addr", local);
  i.set("host_addr", host);
  i.set("rows", rows);
  i.set("row_bytes", row_bytes);
  i.set("host_stride", row_bytes);
  return isa::encode(i);
}

// LOAD src -> UB, NOP (waits for the load, releases the store), STORE UB -> dst.
std::vector<Word> copy_program(uint64_t src, uint64_t dst, uint64_t bytes, unsigned n) {
  Instr ld = isa::decode(dma(spec::Opcode::kLoad, spec::Mem::kUb, 0, src, 1, bytes));
  ld.push_next = true;
  Instr st = isa::decode(dma(spec::Opcode::kStore, spec::Mem::kUb, 0, dst, 1, bytes));
  st.pop_prev = true;
  (void)n;
  return {isa::encode(ld), nop(true, true), isa::encode(st)};
}

class DeviceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (backend_array_sizes(GetParam()).empty()) GTEST_SKIP() << GetParam() << " backend not built";
  }
  // wait_slice: device cycles one Backend::wait_irq() simulates (SimControl), 0 = default.
  Device open(DeviceOptions opt = {}, unsigned n = 16, uint64_t wait_slice = 0) {
    BackendConfig cfg;
    cfg.array_n = n;
    cfg.memory.size = 4u << 20;
    auto b = make_backend(GetParam(), cfg);
    if (wait_slice != 0) b->sim_control()->set_wait_slice(wait_slice);
    return Device(std::move(b), opt);
  }
};

TEST_P(DeviceTest, OpenReadsConfiguration) {
  Device dev = open();
  const DeviceInfo& i = dev.info();
  EXPECT_EQ(i.backend, GetParam());
  EXPECT_EQ(i.id, spec::kDeviceId);
  EXPECT_EQ(i.version_major(), spec::kVersionMajor);
  const DeviceParams& want = kDeviceConfigs[0];
  EXPECT_EQ(i.params.array_n, want.array_n);
  EXPECT_EQ(i.params.ub_depth, want.ub_depth);
  EXPECT_EQ(i.params.wb_depth, want.wb_depth);
  EXPECT_EQ(i.params.acc_depth, want.acc_depth);
  EXPECT_EQ(i.params.dma_data_w, want.dma_data_w);
  EXPECT_EQ(i.params.queue_depth, want.queue_depth);
  EXPECT_EQ(i.mem_size, 4u << 20);
  EXPECT_EQ(dev.read_reg(spec::reg::kDmaWinBase), 0u);
  // The DMA window covers the arena and stops below the driver's command ring.
  EXPECT_EQ(dev.read_reg(spec::reg::kDmaWinLast), dev.window_end() - 1);
  EXPECT_LT(dev.window_end(), dev.ring_base());
  EXPECT_EQ(dev.ring_base(), (4u << 20) - 4096u * 16u);  // 4096 entries of 16 bytes at the top
  EXPECT_EQ(dev.read_reg(spec::reg::kIrqEnable), spec::reg::kIrqEnableFence | spec::reg::kIrqEnableFault);
}

TEST_P(DeviceTest, CopyThroughUbAndPerf) {
  Device dev = open();
  HostBuffer src = dev.alloc(256, 4096), dst = dev.alloc(256, 4096);
  std::vector<uint8_t> data(256);
  std::iota(data.begin(), data.end(), uint8_t{3});
  dev.write(src, 0, data.data(), data.size());
  dev.clear_perf();
  const auto prog = copy_program(src.addr(), dst.addr(), 256, 16);
  const uint32_t f = dev.submit(prog);
  dev.wait(f);
  std::vector<uint8_t> out(256);
  dev.read(dst, 0, out.data(), out.size());
  EXPECT_EQ(out, data);
  const PerfCounters p = dev.perf();
  EXPECT_EQ(p.instret, prog.size() + 1);  // + the driver's FENCE
  EXPECT_GE(p.rd_bytes, 256u + 16u * (prog.size() + 1));
  EXPECT_GE(p.wr_bytes, 256u + 4u);
  EXPECT_GT(p.cycles, 0u);
  EXPECT_EQ(dev.read_reg(spec::reg::kFenceValue), f);
  dev.clear_perf();
  EXPECT_EQ(dev.perf().instret, 0u);
}

// DeviceOptions::program_log: one line per submit(), the FNV-1a 64 hash of the program's bytes
// (without the driver's FENCE) and its length; an unwritable log is refused when the device opens.
TEST_P(DeviceTest, ProgramLogRecordsEverySubmit) {
  const std::string dir = ::testing::TempDir();
  const std::string log = dir + "/tpuw_program_log_" + GetParam() + ".txt";
  std::remove(log.c_str());
  DeviceOptions opt;
  opt.program_log = log;
  {
    Device dev = open(opt);
    HostBuffer src = dev.alloc(256, 4096), dst = dev.alloc(256, 4096);
    const auto prog = copy_program(src.addr(), dst.addr(), 256, 16);
    dev.run(prog);
    dev.run(prog);
    dev.run(std::span<const Word>(prog).first(1));
    uint64_t h = 0xcbf29ce484222325ull;
    for (const Word& w : prog) {
      for (uint8_t b : w) h = (h ^ b) * 0x100000001b3ull;
    }
    std::ifstream in(log);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    ASSERT_EQ(lines.size(), 3u);
    EXPECT_EQ(lines[0], fmt::format("{:016x} 3", h));
    EXPECT_EQ(lines[1], lines[0]);
    EXPECT_NE(lines[2].substr(0, 16), lines[0].substr(0, 16));
    EXPECT_EQ(lines[2].substr(16), " 1");
  }
  std::remove(log.c_str());
  opt.program_log = dir + "/no_such_dir/log.txt";
  try {
    (void)open(opt);
    FAIL() << "an unwritable program log was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("no_such_dir/log.txt"), std::string::npos) << e.what();
  }
}

TEST_P(DeviceTest, IllegalOpcodeNamesCauseAndInstruction) {
  Device dev = open();
  Word bad{};
  bad[0] = 0xEE;
  const std::vector<Word> prog = {nop(), nop(), bad, nop()};
  const uint32_t f = dev.submit(prog);
  try {
    dev.wait(f);
    FAIL() << "no fault";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDeviceFault);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("ILLEGAL_OPCODE"), std::string::npos) << msg;
    EXPECT_NE(msg.find("instruction 2 of the program"), std::string::npos) << msg;
    EXPECT_NE(msg.find("FAULT_INFO = 0xee"), std::string::npos) << msg;
  }
  const auto r = dev.fault();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->cause, spec::Fault::kIllegalOpcode);
  EXPECT_EQ(r->info, 0xEEu);
  ASSERT_TRUE(r->ring_index && r->program_index);
  EXPECT_EQ(*r->ring_index, 2u);
  EXPECT_EQ(*r->program_index, 2u);
  EXPECT_EQ(r->instruction, bad);
  // Submitting to a faulted device reports the fault again.
  EXPECT_THROW(dev.submit(std::vector<Word>{nop()}), Error);
}

TEST_P(DeviceTest, OutOfWindowDmaThenResetAndRunAgain) {
  Device dev = open();
  HostBuffer src = dev.alloc(64), dst = dev.alloc(64);
  const uint64_t outside = dev.info().mem_base + dev.info().mem_size;  // first byte past the window
  std::vector<Word> prog = {nop(), dma(spec::Opcode::kLoad, spec::Mem::kUb, 0, outside, 1, 16)};
  try {
    dev.run(prog);
    FAIL() << "no fault";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDeviceFault);
    EXPECT_NE(std::string(e.what()).find("DMA_WINDOW"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("instruction 1 of the program"), std::string::npos) << e.what();
  }
  auto r = dev.fault();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->cause, spec::Fault::kDmaWindow);
  EXPECT_EQ(r->info, outside);
  EXPECT_EQ(r->program_index, 1u);

  dev.reset();
  EXPECT_FALSE(dev.fault().has_value());
  EXPECT_EQ(dev.read_reg(spec::reg::kStatus) & spec::reg::kStatusFault, 0u);
  std::vector<uint8_t> data(64, 0x5A), out(64, 0);
  dev.write(src, 0, data.data(), 64);
  dev.run(copy_program(src.addr(), dst.addr(), 64, 16));
  dev.read(dst, 0, out.data(), 64);
  EXPECT_EQ(out, data);
}

TEST_P(DeviceTest, DeadlockTimesOutQuicklyAndResetRecovers) {
  DeviceOptions opt;
  opt.timeout_cycles = 20000;
  opt.timeout_seconds = 20;
  Device dev = open(opt, 16, 2000);
  // A NOP that pops a token no LOAD ever pushes: the compute queue waits forever.
  const auto t0 = std::chrono::steady_clock::now();
  try {
    dev.run(std::vector<Word>{nop(true)});
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("no progress"), std::string::npos);
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  dev.reset();
  dev.run(std::vector<Word>{nop(), nop()});
  EXPECT_EQ(dev.instructions_consumed(), dev.instructions_submitted());
}

TEST_P(DeviceTest, RingWrapsWithoutOverwritingUnfetchedEntries) {
  DeviceOptions opt;
  opt.ring_entries = 8;
  Device dev = open(opt, 16, 16);
  HostBuffer src = dev.alloc(32), dst = dev.alloc(32 * 40);
  std::vector<uint8_t> data(32);
  std::iota(data.begin(), data.end(), uint8_t{1});
  dev.write(src, 0, data.data(), 32);
  std::vector<Word> prog;
  for (unsigned i = 0; i < 40; ++i) {
    for (const Word& w : copy_program(src.addr(), dst.addr() + 32 * i, 32, 16)) prog.push_back(w);
  }
  for (int rep = 0; rep < 3; ++rep) dev.run(prog);
  std::vector<uint8_t> out(32 * 40);
  dev.read(dst, 0, out.data(), out.size());
  for (unsigned i = 0; i < 40; ++i) {
    EXPECT_TRUE(std::equal(data.begin(), data.end(), out.begin() + 32 * i)) << "copy " << i;
  }
  EXPECT_EQ(dev.instructions_submitted(), 3u * (prog.size() + 1));
  EXPECT_EQ(dev.instructions_consumed(), dev.instructions_submitted());
  EXPECT_EQ(dev.perf().instret, 3u * (prog.size() + 1));
}

TEST_P(DeviceTest, AllocatorAlignsReusesAndReportsExhaustion) {
  Device dev = open();
  const uint64_t free0 = dev.mem_free();
  {
    HostBuffer a = dev.alloc(100, 4096);
    HostBuffer b = dev.alloc(1);
    EXPECT_EQ(a.addr() % 4096, 0u);
    EXPECT_EQ(b.addr() % dev.info().dma_beat_bytes(), 0u);
    EXPECT_TRUE(b.addr() >= a.addr() + a.size() || b.addr() + b.size() <= a.addr());
    EXPECT_LT(dev.mem_free(), free0);
    HostBuffer moved = std::move(a);
    EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): moved-from state is specified
    EXPECT_TRUE(moved.valid());
  }
  EXPECT_EQ(dev.mem_free(), free0);
  try {
    (void)dev.alloc(dev.info().mem_size);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("host memory exhausted"), std::string::npos);
  }
  HostBuffer big = dev.alloc(free0 - 4096, 64);  // everything fits again after the frees coalesced
  EXPECT_TRUE(big.valid());
  std::vector<uint8_t> x(16);
  EXPECT_THROW(dev.write(big, big.size() - 8, x.data(), 16), Error);
}

TEST_P(DeviceTest, TwoDevicesInOneProcess) {
  Device d1 = open();
  Device d2 = open();
  HostBuffer s1 = d1.alloc(64), t1 = d1.alloc(64);
  HostBuffer s2 = d2.alloc(64), t2 = d2.alloc(64);
  std::vector<uint8_t> v1(64, 0x11), v2(64, 0x22), o1(64), o2(64);
  d1.write(s1, 0, v1.data(), 64);
  d2.write(s2, 0, v2.data(), 64);
  const uint32_t f1 = d1.submit(copy_program(s1.addr(), t1.addr(), 64, 16));
  const uint32_t f2 = d2.submit(copy_program(s2.addr(), t2.addr(), 64, 16));
  d2.wait(f2);
  d1.wait(f1);
  d1.read(t1, 0, o1.data(), 64);
  d2.read(t2, 0, o2.data(), 64);
  EXPECT_EQ(o1, v1);
  EXPECT_EQ(o2, v2);
  // A fault on one leaves the other working.
  Word bad{};
  bad[0] = 0x7F;
  EXPECT_THROW(d1.run(std::vector<Word>{bad}), Error);
  d2.run(copy_program(s2.addr(), t2.addr(), 64, 16));
  EXPECT_FALSE(d2.fault().has_value());
}

// Issue 14, class 7: the device cannot forge the driver's bookkeeping. The command ring lies
// outside the DMA window, so a program that writes it faults DMA_WINDOW; and a program FENCE that
// carries the value the driver waits for does not end the run early.
Word fence_instr(uint32_t value, uint64_t host_addr, bool irq) {
  Instr f = isa::make_instr(spec::Opcode::kFence);
  f.set("irq", irq ? 1 : 0);
  f.set("value", value);
  f.set("host_addr", host_addr);
  return isa::encode(f);
}

void expect_dma_window_fault(Device& dev, const std::vector<Word>& prog, uint64_t info, uint64_t index) {
  try {
    dev.run(prog);
    FAIL() << "the program was not stopped";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDeviceFault) << e.what();
  }
  const auto r = dev.fault();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->cause, spec::Fault::kDmaWindow);
  EXPECT_EQ(r->info, info);
  EXPECT_EQ(r->program_index, index);
}

// The example: the program writes the next fence value over the driver's completion
// record (in this driver's layout, the command ring's top, where the fence word used to live).
TEST_P(DeviceTest, ProgramFenceIntoDriverMemoryFaultsDmaWindow) {
  Device dev = open();
  const uint32_t f = dev.submit(std::vector<Word>{nop()});
  dev.wait(f);
  const uint64_t top = dev.info().mem_base + dev.info().mem_size - 4;
  expect_dma_window_fault(dev, {fence_instr(f + 1, top, true), nop()}, top, 0);
  dev.reset();
  // Variant: any word of the ring itself.
  expect_dma_window_fault(dev, {nop(), fence_instr(f + 5, dev.ring_base() + 16, false)}, dev.ring_base() + 16, 1);
  dev.reset();
  dev.run(std::vector<Word>{nop()});  // the device is healthy again
}

// Variant: a STORE over the command ring (it would overwrite instructions not yet fetched).
TEST_P(DeviceTest, ProgramStoreIntoTheRingFaultsDmaWindow) {
  Device dev = open();
  std::vector<Word> prog = {nop(false, false), dma(spec::Opcode::kStore, spec::Mem::kUb, 0, dev.ring_base(), 1, 16)};
  expect_dma_window_fault(dev, prog, dev.ring_base(), 1);
  dev.reset();
  EXPECT_FALSE(dev.fault().has_value());
  // The window ends below the ring: its last word is still refused, the byte below the window
  // end is accepted.
  HostBuffer b = dev.alloc(64);
  dev.run(std::vector<Word>{dma(spec::Opcode::kLoad, spec::Mem::kUb, 0, b.addr(), 1, 16)});
  expect_dma_window_fault(dev, {dma(spec::Opcode::kLoad, spec::Mem::kUb, 0, dev.window_end(), 1, 16)},
                          dev.window_end(), 0);
}

// Variant: the forged value goes to FENCE_VALUE (an in-window FENCE with the values the driver is
// about to use), followed by a copy: wait() returns only after the copy, whatever FENCE_VALUE said.
TEST_P(DeviceTest, ForgedFenceValueDoesNotEndARunEarly) {
  Device dev = open();
  const uint32_t f0 = dev.submit(std::vector<Word>{nop()});
  dev.wait(f0);
  HostBuffer scratch = dev.alloc(64), src = dev.alloc(4096), dst = dev.alloc(4096);
  std::vector<uint8_t> data(4096);
  std::iota(data.begin(), data.end(), uint8_t{7});
  dev.write(src, 0, data.data(), data.size());
  std::vector<Word> prog;
  for (uint32_t v = f0 + 1; v < f0 + 5; ++v) prog.push_back(fence_instr(v, scratch.addr(), true));
  for (unsigned rep = 0; rep < 4; ++rep) {
    for (unsigned i = 0; i < 16; ++i) {
      for (const Word& w : copy_program(src.addr() + 256 * i, dst.addr() + 256 * i, 256, 16)) prog.push_back(w);
    }
  }
  const uint32_t f = dev.submit(prog);
  EXPECT_GE(f, f0 + 5);  // never one of the program's values
  dev.wait(f);
  EXPECT_EQ(dev.instructions_consumed(), dev.instructions_submitted());
  EXPECT_EQ(dev.read_reg(spec::reg::kStatus) & spec::reg::kStatusBusy, 0u);
  std::vector<uint8_t> out(4096);
  dev.read(dst, 0, out.data(), out.size());
  EXPECT_EQ(out, data);
}

// Device-visible memory grows while the device is open: a backend created with little memory
// mapped gets more pages as buffers are allocated, and the DMA window follows.
TEST_P(DeviceTest, MemoryGrowsWhileOpen) {
  BackendConfig cfg;
  cfg.memory.size = 64u << 20;
  cfg.memory.mapped = 0;
  Device dev(make_backend(GetParam(), cfg));
  const uint64_t end0 = dev.window_end();
  EXPECT_LE(dev.backend().mem_mapped(), (1u << 20) + 65536u);  // first step + the ring
  HostBuffer small = dev.alloc(4096);
  HostBuffer big = dev.alloc(8u << 20);
  EXPECT_GT(dev.window_end(), end0);
  EXPECT_GE(dev.window_end(), big.addr() + big.size());
  EXPECT_EQ(dev.read_reg(spec::reg::kDmaWinLast), dev.window_end() - 1);
  EXPECT_LT(dev.backend().mem_mapped(), 32u << 20);  // grown, not sized at open
  std::vector<uint8_t> data(64, 0x3C), out(64, 0);
  dev.write(small, 0, data.data(), 64);
  dev.run(copy_program(small.addr(), big.addr() + big.size() - 64, 64, 16));
  dev.read(big, big.size() - 64, out.data(), 64);
  EXPECT_EQ(out, data);
}

// Backend::reset: the device's own reset brings a faulted device back to its power-on register
// values (the driver's soft reset keeps the DMA window and IRQ_ENABLE); memory is kept.
TEST_P(DeviceTest, BackendResetRestoresPowerOnState) {
  Device dev = open();
  HostBuffer buf = dev.alloc(64);
  std::vector<uint8_t> data(64, 0x6B), out(64, 0);
  dev.write(buf, 0, data.data(), 64);
  Word bad{};
  bad[0] = 0xFF;
  EXPECT_THROW(dev.run(std::vector<Word>{bad}), Error);
  ASSERT_TRUE(dev.fault().has_value());
  dev.backend().reset();
  EXPECT_EQ(dev.read_reg(spec::reg::kStatus), 0u);
  EXPECT_EQ(dev.read_reg(spec::reg::kIrqEnable), 0u);
  EXPECT_EQ(dev.read_reg(spec::reg::kDmaWinBase), 0u);
  EXPECT_EQ(dev.read_reg(spec::reg::kDmaWinLast), 0xFFFFFFFFu);
  EXPECT_EQ(dev.read_reg(spec::reg::kRingSize), 0u);
  dev.read(buf, 0, out.data(), 64);
  EXPECT_EQ(out, data);
  dev.reset();  // the driver programs ring, window and interrupts again
  dev.run(std::vector<Word>{nop()});
  EXPECT_EQ(dev.read_reg(spec::reg::kDmaWinLast), dev.window_end() - 1);
}

TEST(BackendFactory, NamesAndErrors) {
  EXPECT_EQ(backend_names(), (std::vector<std::string>{"rtl", "ref", "serial"}));
  try {
    (void)make_backend("fpga", {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("unknown backend 'fpga'"), std::string::npos);
  }
  BackendConfig cfg;
  cfg.array_n = 5;
  try {
    (void)make_backend("ref", cfg);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("array size 5"), std::string::npos) << e.what();
  }
  if (backend_array_sizes("rtl").empty()) {
    try {
      (void)make_backend("rtl", {});
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
      EXPECT_NE(std::string(e.what()).find("not available in this build"), std::string::npos);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, DeviceTest, ::testing::Values("ref", "rtl"),
                         [](const auto& p) { return p.param; });

}  // namespace
}  // namespace tpuw
