// The ACTIVATE instruction's per-element arithmetic (docs/isa.md), the one definition the ref
// backend, the quantizer's integer forward pass and the RTL testbenches share:
//   x = acc + bias (32-bit wrap); p = x * mult (signed 64-bit product);
//   if shift > 0: p = (p + 2^(shift-1)) >> shift (arithmetic: round half up);
//   if relu: p = max(p, 0); result = saturate(p, -128, 127).
// Computed in 128 bits, so the rounding add can never overflow whatever the operands.
#pragma once

#include <cstdint>

namespace tpuw {

inline int8_t activate_element(uint32_t acc, uint32_t bias, uint32_t mult, uint32_t shift, bool relu) {
  const auto x = static_cast<int32_t>(acc + bias);
  __int128 p = static_cast<__int128>(int64_t{x} * int64_t{static_cast<int32_t>(mult)});
  const unsigned s = shift & 63u;  // the 6-bit field
  if (s > 0) p = (p + (static_cast<__int128>(1) << (s - 1))) >> s;
  if (relu && p < 0) p = 0;
  if (p > 127) p = 127;
  if (p < -128) p = -128;
  return static_cast<int8_t>(p);
}

}  // namespace tpuw
