// Random valid device programs for differential testing (rtl vs ref).
//
// Every program is race-free by construction: consecutive instructions that sit in different
// queues are chained with dependency tokens (through a compute NOP between LOAD and STORE), so any
// legal timing gives the result of executing the instructions one at a time. Field values are
// random within the device's legal ranges, so the programs exercise every instruction, every
// memory, 2-D strides, partial accumulate/swap patterns and the activation arithmetic on random
// data — which the hand-written and compiled programs do not.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "tpuw/asm.h"
#include "tpuw/device_configs.h"

namespace tpuw::difftest {

struct RandomProgramSpec {
  DeviceParams params;
  uint64_t data_addr = 0;   // host buffer the program reads and writes (beat-aligned)
  uint64_t data_bytes = 0;
  unsigned instructions = 40;  // random instructions (NOPs for token routing come on top)
};

/// A race-free random program (without the final FENCE).
std::vector<isa::Word> random_program(const RandomProgramSpec& spec, std::mt19937_64& rng);

/// One random instruction that the device must reject at decode time.
isa::Word random_illegal_instruction(const RandomProgramSpec& spec, std::mt19937_64& rng);

}  // namespace tpuw::difftest
