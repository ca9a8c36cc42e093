// Random valid programs, and programs with one illegal instruction, on the verilated device and the
// reference model: host memory must end up bit-identical, and faults must be reported identically.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "random_program.h"
#include "tpuw/device.h"
#include "tpuw/error.h"

namespace tpuw::difftest {
namespace {

constexpr uint64_t kDataBytes = 16 * 1024;

struct Pair {
  Device rtl;
  Device ref;
  HostBuffer rtl_data;
  HostBuffer ref_data;
};

Pair open_pair(unsigned array_n) {
  BackendConfig cfg;
  cfg.array_n = array_n;
  Pair p{Device::open("rtl", cfg), Device::open("ref", cfg), {}, {}};
  p.rtl_data = p.rtl.alloc(kDataBytes, 4096);
  p.ref_data = p.ref.alloc(kDataBytes, 4096);
  // Both allocators are deterministic, so the program's host addresses mean the same data.
  EXPECT_EQ(p.rtl_data.addr(), p.ref_data.addr());
  return p;
}

std::vector<uint8_t> fill_random(Pair& p, std::mt19937_64& rng) {
  std::vector<uint8_t> bytes(kDataBytes);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  p.rtl.write(p.rtl_data, 0, bytes.data(), bytes.size());
  p.ref.write(p.ref_data, 0, bytes.data(), bytes.size());
  return bytes;
}

void expect_same_memory(Pair& p, const std::string& what) {
  std::vector<uint8_t> a(kDataBytes), b(kDataBytes);
  p.rtl.read(p.rtl_data, 0, a.data(), a.size());
  p.ref.read(p.ref_data, 0, b.data(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) {
      ADD_FAILURE() << what << ": host memory differs first at data offset " << i << " (rtl 0x" << std::hex
                    << int{a[i]} << ", ref 0x" << int{b[i]} << ")";
      return;
    }
  }
}

// What a test ran on a pair, so a failure can be replayed on a fresh pair.
struct Step {
  std::vector<uint8_t> fill;
  std::vector<isa::Word> program;
};

// Copies UB and ACC rows 0..63 (the random programs' windows) of both devices out through STOREs
// and returns the first index where they differ, or -1.
long compare_local_state(Pair& p) {
  const auto& params = p.rtl.info().params;
  const uint64_t ub_bytes = 64ull * params.array_n, acc_bytes = 64ull * 4 * params.array_n;
  std::vector<uint8_t> dumps[2];
  Device* devs[2] = {&p.rtl, &p.ref};
  for (int d = 0; d < 2; ++d) {
    HostBuffer scratch = devs[d]->alloc(ub_bytes + acc_bytes, 4096);
    isa::Instr ub = isa::make_instr(spec::Opcode::kStore);
    ub.set("mem", static_cast<uint64_t>(spec::Mem::kUb));
    ub.set("host_addr", scratch.addr());
    ub.set("rows", 1);
    ub.set("row_bytes", ub_bytes);
    ub.set("host_stride", 0);
    isa::Instr acc = ub;
    acc.set("mem", static_cast<uint64_t>(spec::Mem::kAcc));
    acc.set("host_addr", scratch.addr() + ub_bytes);
    acc.set("row_bytes", acc_bytes);
    devs[d]->run(std::vector<isa::Word>{isa::encode(ub), isa::encode(acc)});
    dumps[d].resize(ub_bytes + acc_bytes);
    devs[d]->read(scratch, 0, dumps[d].data(), dumps[d].size());
  }
  for (size_t i = 0; i < dumps[0].size(); ++i) {
    if (dumps[0][i] != dumps[1][i]) return static_cast<long>(i);
  }
  return -1;
}

// Replays `history` on a fresh pair, then the failing program instruction by instruction, and
// names the first instruction after which the devices' UB/ACC contents differ.
std::string locate_divergence(unsigned array_n, const std::vector<Step>& history, const Step& failing) {
  for (size_t len = 1; len <= failing.program.size(); ++len) {
    Pair p = open_pair(array_n);
    for (const Step& s : history) {
      p.rtl.write(p.rtl_data, 0, s.fill.data(), s.fill.size());
      p.ref.write(p.ref_data, 0, s.fill.data(), s.fill.size());
      p.rtl.run(s.program);
      p.ref.run(s.program);
    }
    p.rtl.write(p.rtl_data, 0, failing.fill.data(), failing.fill.size());
    p.ref.write(p.ref_data, 0, failing.fill.data(), failing.fill.size());
    const std::vector<isa::Word> prefix(failing.program.begin(), failing.program.begin() + static_cast<long>(len));
    p.rtl.run(prefix);
    p.ref.run(prefix);
    const long at = compare_local_state(p);
    if (at >= 0) {
      const uint64_t ub_bytes = 64ull * array_n;
      const std::string where = static_cast<uint64_t>(at) < ub_bytes
                                    ? "UB row " + std::to_string(at / array_n)
                                    : "ACC row " + std::to_string((at - static_cast<long>(ub_bytes)) / (4 * array_n));
      return "local state first differs after instruction " + std::to_string(len - 1) + " (" +
             isa::disassemble_one(failing.program[len - 1]) + "), at " + where;
    }
  }
  return "local state never differs: the difference is in host memory writes only";
}

std::string listing(const std::vector<isa::Word>& prog) {
  std::string s;
  for (size_t i = 0; i < prog.size(); ++i) s += std::to_string(i) + ": " + isa::disassemble_one(prog[i]) + "\n";
  return s;
}

// Fills the data buffer of both devices with fp values (NaN, inf, subnormals, overflowing and
// underflowing values) and returns them.
std::vector<uint8_t> fill_fp(Pair& p, std::mt19937_64& rng) {
  const std::vector<uint8_t> bytes = random_fp_data(kDataBytes, rng);
  p.rtl.write(p.rtl_data, 0, bytes.data(), bytes.size());
  p.ref.write(p.ref_data, 0, bytes.data(), bytes.size());
  return bytes;
}

class DiffPrograms : public ::testing::TestWithParam<unsigned> {};

// Runs `programs` random programs of 40 instructions (options `opt`) on a fresh rtl/ref pair of
// array `n`, each on freshly filled data (fp values with NaN/inf/subnormals when `fp_data`, random
// bytes otherwise), and expects identical memory after each; on the first difference, names the
// instruction where the devices' local state first diverged.
void expect_random_programs_identical(unsigned n, uint64_t seed, int programs, const RandomProgramOptions& opt,
                                      bool fp_data, const std::string& what) {
  Pair p = open_pair(n);
  std::mt19937_64 rng(seed);
  std::vector<Step> history;
  for (int i = 0; i < programs; ++i) {
    Step step{fp_data ? fill_fp(p, rng) : fill_random(p, rng), {}};
    RandomProgramSpec spec{p.rtl.info().params, p.rtl_data.addr(), kDataBytes, 40, opt};
    step.program = random_program(spec, rng);
    SCOPED_TRACE("program " + std::to_string(i) + ":\n" + listing(step.program));
    p.rtl.run(step.program);
    p.ref.run(step.program);
    expect_same_memory(p, what + " " + std::to_string(i));
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << locate_divergence(n, history, step);
      return;
    }
    history.push_back(std::move(step));
  }
}

// Runs `prog` on both devices of `p`, expecting each to throw and record a fault; returns the two
// fault reports (rtl, ref), or nothing (the test has failed) when a device did not fault.
std::optional<std::array<FaultReport, 2>> faults_of_both(Pair& p, const std::vector<isa::Word>& prog) {
  std::array<FaultReport, 2> faults;
  Device* devs[2] = {&p.rtl, &p.ref};
  for (int d = 0; d < 2; ++d) {
    try {
      devs[d]->run(prog);
      ADD_FAILURE() << (d == 0 ? "rtl" : "ref") << " ran the program without a fault";
      return std::nullopt;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kDeviceFault) << e.what();
    }
    const std::optional<FaultReport> f = devs[d]->fault();
    if (!f.has_value()) {
      ADD_FAILURE() << (d == 0 ? "rtl" : "ref") << " threw but recorded no fault";
      return std::nullopt;
    }
    faults[static_cast<size_t>(d)] = *f;
  }
  return faults;
}

// Random programs of 12 instructions (options `opt`, on fp data) each ending in a random illegal
// instruction: the same fault cause, FAULT_INFO and instruction index on rtl and ref, the same
// memory, and both usable after a reset.
void expect_illegal_faults_identical(unsigned n, uint64_t seed, int programs, const RandomProgramOptions& opt,
                                     const std::string& what) {
  Pair p = open_pair(n);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < programs; ++i) {
    fill_fp(p, rng);
    RandomProgramSpec spec{p.rtl.info().params, p.rtl_data.addr(), kDataBytes, 12, opt};
    auto prog = random_program(spec, rng);
    prog.push_back(random_illegal_instruction(spec, rng));
    SCOPED_TRACE("program " + std::to_string(i) + ":\n" + listing(prog));
    const auto faults = faults_of_both(p, prog);
    if (!faults) return;
    const auto& [rtl, ref] = *faults;
    EXPECT_EQ(rtl.cause, ref.cause) << rtl.message() << " vs " << ref.message();
    EXPECT_EQ(rtl.info, ref.info) << rtl.message() << " vs " << ref.message();
    EXPECT_EQ(rtl.program_index, ref.program_index);
    expect_same_memory(p, what + " " + std::to_string(i));
    p.rtl.reset();
    p.ref.reset();
    if (::testing::Test::HasFailure()) return;
  }
}

TEST_P(DiffPrograms, RandomValidProgramsGiveIdenticalMemory) {
  const unsigned n = GetParam();
  expect_random_programs_identical(n, 1000 + n, n == 4 ? 150 : 40, {}, false, "program");
}

TEST_P(DiffPrograms, IllegalInstructionFaultsIdenticallyAndResetRecovers) {
  const unsigned n = GetParam();
  Pair p = open_pair(n);
  std::mt19937_64 rng(2000 + n);
  const int programs = n == 4 ? 60 : 20;
  for (int i = 0; i < programs; ++i) {
    fill_random(p, rng);
    RandomProgramSpec spec{p.rtl.info().params, p.rtl_data.addr(), kDataBytes, 12, {}};
    auto prog = random_program(spec, rng);
    const auto tail = random_program(spec, rng);
    prog.push_back(random_illegal_instruction(spec, rng));
    prog.insert(prog.end(), tail.begin(), tail.end());
    SCOPED_TRACE("program " + std::to_string(i) + ":\n" + listing(prog));

    const auto faults = faults_of_both(p, prog);
    ASSERT_TRUE(faults.has_value());
    const auto& [rtl, ref] = *faults;
    EXPECT_EQ(rtl.cause, ref.cause) << rtl.message() << " vs " << ref.message();
    EXPECT_EQ(rtl.info, ref.info) << rtl.message() << " vs " << ref.message();
    EXPECT_EQ(rtl.program_index, ref.program_index);
    EXPECT_NE(rtl.cause, spec::Fault::kNone);
    expect_same_memory(p, "faulted program " + std::to_string(i));
    p.rtl.reset();
    p.ref.reset();
    // Both work again after the reset: run a valid program and compare.
    const auto again = random_program(spec, rng);
    p.rtl.run(again);
    p.ref.run(again);
    expect_same_memory(p, "program after reset " + std::to_string(i));
    if (HasFailure()) return;
  }
}

// An instruction that pushes token counter `t`: LOAD / STORE of one row of the data buffer, or a
// compute NOP.
isa::Word token_pusher(spec::Token t, const DeviceParams& params, uint64_t data_addr) {
  const uint64_t row_bytes = std::max<uint64_t>(params.array_n, params.dma_data_w / 8);
  const auto dma = [&](spec::Opcode op) {
    isa::Instr i = isa::make_instr(op);
    i.set("mem", static_cast<uint64_t>(spec::Mem::kUb));
    i.set("local_addr", 0);
    i.set("host_addr", data_addr);
    i.set("rows", 1);
    i.set("row_bytes", row_bytes);
    i.set("host_stride", row_bytes);
    return i;
  };
  isa::Instr i = isa::make_instr(spec::Opcode::kNop);
  switch (t) {
    case spec::Token::kLd2cmp: i = dma(spec::Opcode::kLoad); i.push_next = true; break;
    case spec::Token::kCmp2ld: i.push_prev = true; break;
    case spec::Token::kCmp2st: i.push_next = true; break;
    case spec::Token::kSt2cmp: i = dma(spec::Opcode::kStore); i.push_prev = true; break;
  }
  return isa::encode(i);
}

// A program that leaves more than TOKEN_MAX tokens on one counter faults TOKEN_OVERFLOW on the
// same instruction, with the same FAULT_INFO, on both devices; a random prefix moves the point.
TEST_P(DiffPrograms, TokenOverflowFaultsIdentically) {
  const unsigned n = GetParam();
  Pair p = open_pair(n);
  std::mt19937_64 rng(3000 + n);
  for (auto t : {spec::Token::kLd2cmp, spec::Token::kCmp2ld, spec::Token::kCmp2st, spec::Token::kSt2cmp}) {
    fill_random(p, rng);
    RandomProgramSpec spec{p.rtl.info().params, p.rtl_data.addr(), kDataBytes, 8, {}};
    auto prog = random_program(spec, rng);
    const size_t first_push = prog.size();
    // The prefix may leave tokens of its own: the fault comes on or before the last pusher.
    prog.insert(prog.end(), spec::kTokenMax + 1, token_pusher(t, spec.params, spec.data_addr));
    const auto tail = random_program(spec, rng);
    prog.insert(prog.end(), tail.begin(), tail.end());
    SCOPED_TRACE(std::string("counter ") + std::string(spec::to_string(t)));

    const auto faults = faults_of_both(p, prog);
    ASSERT_TRUE(faults.has_value());
    const auto& [rtl, ref] = *faults;
    EXPECT_EQ(rtl.cause, spec::Fault::kTokenOverflow) << rtl.message();
    EXPECT_EQ(ref.cause, spec::Fault::kTokenOverflow) << ref.message();
    EXPECT_EQ(rtl.info, static_cast<uint32_t>(t)) << rtl.message();
    EXPECT_EQ(ref.info, static_cast<uint32_t>(t)) << ref.message();
    EXPECT_EQ(rtl.program_index, ref.program_index);
    ASSERT_TRUE(rtl.program_index.has_value());
    EXPECT_GE(*rtl.program_index, first_push);
    EXPECT_LE(*rtl.program_index, first_push + spec::kTokenMax);
    expect_same_memory(p, "token overflow program");
    p.rtl.reset();
    p.ref.reset();
    const auto again = random_program(spec, rng);
    p.rtl.run(again);
    p.ref.run(again);
    expect_same_memory(p, "program after reset");
    if (HasFailure()) return;
  }
}

// ISA 1.1 bf16 modes (the bf16 MXU and the fp32 activation: LOADW/MATMUL/ACTIVATE bf16, int8
// instructions mixed in) on fp data with NaN, inf, subnormal, overflowing and underflowing values:
// rtl and ref bit-identical. (RandomProgramOptions::transpose also emits the TRANSPOSE
// instruction; it is switched on where the rtl has that unit.)
TEST_P(DiffPrograms, RandomBf16ProgramsGiveIdenticalMemory) {
  const unsigned n = GetParam();
  RandomProgramOptions opt;
  opt.bf16 = true;
  expect_random_programs_identical(n, 4000 + n, n == 4 ? 120 : 30, opt, true, "bf16 program");
}

TEST_P(DiffPrograms, IllegalBf16InstructionFaultsIdentically) {
  const unsigned n = GetParam();
  RandomProgramOptions opt;
  opt.bf16 = true;
  expect_illegal_faults_identical(n, 5000 + n, n == 4 ? 60 : 20, opt, "faulted bf16 program");
}

// ISA 1.2 ACTIVATE `lut` on int8 data: random tables (the ACC rows after the shift row hold random
// bytes), with and without ReLU and bias, on random requantization parameters, mixed with the
// other int8 instructions: rtl and ref bit-identical.
TEST_P(DiffPrograms, RandomLutProgramsGiveIdenticalMemory) {
  const unsigned n = GetParam();
  RandomProgramOptions opt;
  opt.lut = true;
  expect_random_programs_identical(n, 8000 + n, n == 4 ? 100 : 30, opt, false, "LUT program");
}

// Every ISA 1.1 feature at once (RandomProgramOptions::all(): bf16 modes, LOADW transpose,
// TRANSPOSE int8/bf16, VECTOR with every op and special scalars) on fp data with NaN, inf,
// subnormal, overflowing and underflowing values, mixed with the int8 instructions: rtl and ref
// bit-identical, and the ISA 1.1 decode faults (odd bf16 addresses, TRANSPOSE rows > N, undefined
// VECTOR ops, overlapping VECTOR ranges, ...) reported identically.
TEST_P(DiffPrograms, RandomIsa11ProgramsGiveIdenticalMemory) {
  const unsigned n = GetParam();
  expect_random_programs_identical(n, 6000 + n, n == 4 ? 150 : 40, RandomProgramOptions::all(), true,
                                   "ISA 1.1 program");
}

TEST_P(DiffPrograms, IllegalIsa11InstructionFaultsIdentically) {
  const unsigned n = GetParam();
  expect_illegal_faults_identical(n, 7000 + n, n == 4 ? 100 : 30, RandomProgramOptions::all(),
                                  "faulted ISA 1.1 program");
}

INSTANTIATE_TEST_SUITE_P(ArraySizes, DiffPrograms, ::testing::Values(4u, 16u),
                         [](const auto& param_info) {
                           // Not "N" + std::to_string(...): GCC 12 reports a false -Wrestrict there (PR 105329).
                           std::string name = std::to_string(param_info.param);
                           name.insert(name.begin(), 'N');
                           return name;
                         });

}  // namespace
}  // namespace tpuw::difftest
