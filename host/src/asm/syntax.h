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

}  // namespace tpuw::isa::detail
