// The ACTIVATE requantize formula (docs/isa.md), computed in 128 bits so it cannot share an
// overflow with the RTL's 64-bit arithmetic: the RTL tests' reference for tpu_act_unit.
#pragma once

#include <cstdint>

namespace tpuw_rtl_test {

inline int8_t requant(uint32_t x, uint32_t bias, uint32_t mult, uint32_t shift, bool relu) {
  const auto xb = static_cast<int32_t>(x + bias);
  __int128 p = static_cast<__int128>(int64_t{xb} * int64_t{static_cast<int32_t>(mult)});
  const unsigned s = shift & 63u;
  if (s > 0) p = (p + (static_cast<__int128>(1) << (s - 1))) >> s;
  if (relu && p < 0) p = 0;
  if (p > 127) p = 127;
  if (p < -128) p = -128;
  return static_cast<int8_t>(p);
}

}  // namespace tpuw_rtl_test
