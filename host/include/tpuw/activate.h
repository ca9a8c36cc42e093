// The ACTIVATE instruction's per-element arithmetic (docs/isa.md), the one definition the ref
// backend, the quantizer's integer forward pass and the RTL testbenches share:
//   x = acc + bias (32-bit wrap); p = x * mult (signed 64-bit product);
//   if shift > 0: p = (p + 2^(shift-1)) >> shift (arithmetic: round half up);
//   if relu: p = max(p, 0); result = saturate(p, -128, 127).
// Computed in 128 bits, so the rounding add can never overflow whatever the operands.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

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

/// ISA 1.2 ACTIVATE `lut`: a 256-entry int8 -> int8 table; entry r + 128 replaces result r.
using LutTable = std::array<int8_t, 256>;

inline int8_t lut_apply(const LutTable& table, int8_t r) { return table[static_cast<size_t>(r + 128)]; }

/// ACC rows the table occupies after the shift row (qparam_addr + 2 on): 256 bytes, 4*array_n
/// bytes per row, so ceil(64 / array_n) rows (4 at N = 16).
inline constexpr uint64_t lut_rows(uint64_t array_n) { return (64 + array_n - 1) / array_n; }

/// The table as the ACC words of those rows: entry e is byte e % 4 (little-endian) of word e / 4;
/// words past the table are 0.
inline std::vector<uint32_t> lut_acc_words(const LutTable& table, uint64_t array_n) {
  std::vector<uint32_t> words(lut_rows(array_n) * array_n, 0u);
  for (size_t e = 0; e < table.size(); ++e) {
    words[e / 4] |= static_cast<uint32_t>(static_cast<uint8_t>(table[e])) << (8 * (e % 4));
  }
  return words;
}

/// The table read back from those ACC words (what the device does).
inline LutTable lut_from_acc_words(const uint32_t* words) {
  LutTable t{};
  for (size_t e = 0; e < t.size(); ++e) t[e] = static_cast<int8_t>(static_cast<uint8_t>(words[e / 4] >> (8 * (e % 4))));
  return t;
}

}  // namespace tpuw
