// The random-program generator of the differential tests (tests/diff/random_program.h) with its
// ISA 1.1 options, run on the reference model alone: every generated program is legal (runs to
// its FENCE without a fault), uses every new instruction and mode, is deterministic, and every
// generated illegal instruction faults at decode time.
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "random_program.h"
#include "ref_harness.h"

namespace tpuw::ref::test {
namespace {

using difftest::RandomProgramOptions;
using difftest::RandomProgramSpec;

constexpr uint64_t kData = 0x10000, kDataBytes = 0x10000;

RandomProgramSpec make_spec(const DeviceParams& p, const RandomProgramOptions& o) {
  RandomProgramSpec s;
  s.params = p;
  s.data_addr = kData;
  s.data_bytes = kDataBytes;
  s.instructions = 40;
  s.options = o;
  return s;
}

std::vector<uint8_t> run_program(const DeviceParams& p, const std::vector<uint8_t>& data, std::vector<isa::Word> prog,
                                 const std::string& what) {
  Dev d(p);
  d.put(kData, data);
  prog.push_back(fence(5, 0x4000));
  d.submit(prog);
  d.run(100'000'000);
  EXPECT_EQ(d.reg(r::kFaultCause), 0u) << what << " info " << d.reg(r::kFaultInfo) << " pc index "
                                       << (d.reg(r::kFaultPc) - kRing) / 16;
  EXPECT_EQ(d.reg(r::kFenceValue), 5u) << what;
  return d.get<uint8_t>(kData, kDataBytes);
}

TEST(RefRandomPrograms, Isa11ProgramsAreLegalDeterministicAndCoverEverything) {
  const std::vector<std::pair<std::string, RandomProgramOptions>> variants = {
      {"all", RandomProgramOptions::all()},
      {"bf16", {false, true, false, false}},
      {"transpose", {false, false, true, false}},
      {"vector", {false, false, false, true}},
  };
  for (const auto& p : {small(), big()}) {
    for (const auto& [name, opts] : variants) {
      std::mt19937_64 rng(17 + p.array_n);
      const auto spec = make_spec(p, opts);
      std::map<std::string, int> seen;
      for (int i = 0; i < 12; ++i) {
        const auto data = difftest::random_fp_data(kDataBytes, rng);
        const auto prog = difftest::random_program(spec, rng);
        for (const auto& w : prog) {
          const auto in = isa::decode(w);
          std::string key(in.info()->name);
          for (const char* mode : {"bf16", "transpose"}) {
            for (unsigned f = 0; f < in.info()->num_fields; ++f) {
              if (in.info()->fields[f].name == mode && in.fields[f] != 0) key += std::string(".") + mode;
            }
          }
          ++seen[key];
        }
        const std::string what = fmt::format("n {} {} program {}", p.array_n, name, i);
        const auto a = run_program(p, data, prog, what);
        const auto b = run_program(p, data, prog, what);
        EXPECT_EQ(a, b) << what;
      }
      const std::string what = fmt::format("n {} {}", p.array_n, name);
      if (opts.use_bf16()) {
        EXPECT_GT(seen["MATMUL.bf16"], 0) << what;
        EXPECT_GT(seen["ACTIVATE.bf16"], 0) << what;
        EXPECT_GT(seen["LOADW.bf16"] + seen["LOADW.bf16.transpose"], 0) << what;
      } else {
        EXPECT_EQ(seen["MATMUL.bf16"], 0) << what;
      }
      if (opts.use_transpose()) {
        EXPECT_GT(seen["TRANSPOSE"] + seen["TRANSPOSE.bf16"], 0) << what;
        EXPECT_GT(seen["LOADW.transpose"] + seen["LOADW.bf16.transpose"], 0) << what;
      } else {
        EXPECT_EQ(seen["TRANSPOSE"], 0) << what;
      }
      EXPECT_EQ(seen["VECTOR"] > 0, opts.use_vector()) << what;
    }
  }
}

TEST(RefRandomPrograms, DefaultOptionsStayIsa10) {
  std::mt19937_64 rng(3);
  const auto spec = make_spec(big(), {});
  for (int i = 0; i < 20; ++i) {
    for (const auto& w : difftest::random_program(spec, rng)) {
      const auto in = isa::decode(w);
      EXPECT_LE(w[0], static_cast<uint8_t>(spec::Opcode::kFence));
      EXPECT_EQ(isa::get_bits(w, 14, 1), 0u) << in.info()->name;
      if (w[0] == static_cast<uint8_t>(spec::Opcode::kLoadw)) {
        EXPECT_EQ(isa::get_bits(w, 12, 1), 0u);
      }
    }
  }
}

TEST(RefRandomPrograms, Isa11IllegalInstructionsFaultAtDecode) {
  for (const auto& p : {small(), big()}) {
    std::mt19937_64 rng(99 + p.array_n);
    const auto spec = make_spec(p, RandomProgramOptions::all());
    for (int i = 0; i < 60; ++i) {
      const isa::Word bad = difftest::random_illegal_instruction(spec, rng);
      Dev d(p);
      d.submit({nop(), bad, fence(1, 0x4000)});
      d.run(1'000'000);
      const uint32_t cause = d.reg(r::kFaultCause);
      EXPECT_NE(cause, 0u) << "n " << p.array_n << " case " << i << " opcode " << int{bad[0]};
      // (The generator's DMA-window case is an AXI error here: this harness's window is everything.)
      if (cause != static_cast<uint32_t>(spec::Fault::kAxiError)) {
        EXPECT_EQ(d.reg(r::kRingHead), 1u) << i;
      }
    }
  }
}

}  // namespace
}  // namespace tpuw::ref::test
