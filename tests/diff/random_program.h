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

/// Which ISA 1.1 features random programs use. All off by default, so a device that does not
/// implement them yet still passes; RTL tests switch on what their build implements.
struct RandomProgramOptions {
  bool isa_1_1 = false;    // everything below
  bool bf16 = false;       // LOADW bf16, MATMUL bf16, ACTIVATE bf16 (the bf16 MXU and fp32 activation)
  bool transpose = false;  // LOADW transpose, TRANSPOSE int8 (and bf16 when bf16 is on too)
  bool vector = false;     // VECTOR, every op, scalars with NaN / inf / subnormal / huge values
  bool lut = false;        // ISA 1.2 ACTIVATE `lut`: random tables (whatever the ACC rows hold)

  bool use_bf16() const { return isa_1_1 || bf16; }
  bool use_transpose() const { return isa_1_1 || transpose; }
  bool use_vector() const { return isa_1_1 || vector; }
  bool use_lut() const { return isa_1_1 || lut; }
  bool any() const { return use_bf16() || use_transpose() || use_vector() || use_lut(); }
  static RandomProgramOptions all() { return {true, false, false, false, false}; }
};

struct RandomProgramSpec {
  DeviceParams params;
  uint64_t data_addr = 0;   // host buffer the program reads and writes (beat-aligned)
  uint64_t data_bytes = 0;
  unsigned instructions = 40;  // random instructions (NOPs for token routing come on top)
  RandomProgramOptions options;  // ISA 1.1 features (off by default)
};

/// A race-free random program (without the final FENCE).
std::vector<isa::Word> random_program(const RandomProgramSpec& spec, std::mt19937_64& rng);

/// One random instruction that the device must reject at decode time (with ISA 1.1 options on,
/// also odd bf16 addresses, TRANSPOSE rows > N, undefined VECTOR ops, overlapping VECTOR ranges).
isa::Word random_illegal_instruction(const RandomProgramSpec& spec, std::mt19937_64& rng);

/// Host data for the programs, `bytes` long: every 16-bit word a bf16 pattern (so every 32-bit word
/// an fp32 one with a random-ish low half), mostly moderate magnitudes (2^-8 .. 2^8) so sums round,
/// with about 4% each of +-0, subnormals, +-inf, NaNs (any payload), huge values whose products
/// overflow and tiny normals whose products underflow. Any byte is also a fine int8 value.
std::vector<uint8_t> random_fp_data(size_t bytes, std::mt19937_64& rng);

/// A random fp32 bit pattern with the same mix (VECTOR scalars).
uint32_t random_fp32(std::mt19937_64& rng);

}  // namespace tpuw::difftest
