// Conventions shared by the assembler and the disassembler (private to tpuw_asm).
#pragma once

#include <array>
#include <string_view>

#include "tpuw/spec.h"

namespace tpuw::isa::detail {

/// Fields whose values are local-memory names (UB, WB, ACC) rather than numbers.
constexpr bool is_mem_field(std::string_view name) { return name == "mem"; }

/// Fields printed in hex by the disassembler (host byte addresses and strides, fence values).
constexpr bool is_hex_field(std::string_view name) {
  return name.starts_with("host_") || name == "value";
}

/// The dependency flags of the header, in the order the disassembler prints them.
inline constexpr std::array<spec::Field, 4> kFlags{spec::header::kPopPrev, spec::header::kPopNext,
                                                   spec::header::kPushPrev, spec::header::kPushNext};

inline constexpr std::array<spec::Mem, 3> kMems{spec::Mem::kUb, spec::Mem::kWb, spec::Mem::kAcc};

/// VECTOR's `op`: written as a vector-op name (ADD, AXPY, ...) or a number.
constexpr bool is_vecop_field(const spec::InstrInfo& inf, std::string_view name) {
  return inf.opcode == spec::Opcode::kVector && name == "op";
}

/// Fields holding an fp32 bit pattern (VECTOR's `scalar`): written as a float literal (0.5,
/// -1e-3, 2, inf, -inf, nan) or as its bits in 0x hex / 0b binary.
constexpr bool is_f32_field(const spec::InstrInfo& inf, std::string_view name) {
  return inf.opcode == spec::Opcode::kVector && name == "scalar";
}

/// The vector ops in value order (spec::VecOp 0 .. 10).
inline constexpr std::array<spec::VecOp, 11> kVecOps{
    spec::VecOp::kAdd,  spec::VecOp::kSub,  spec::VecOp::kMul,    spec::VecOp::kAxpy,   spec::VecOp::kScale,
    spec::VecOp::kMax,  spec::VecOp::kMaxs, spec::VecOp::kSelect, spec::VecOp::kColsum, spec::VecOp::kRoundBf16, spec::VecOp::kImax};

}  // namespace tpuw::isa::detail
