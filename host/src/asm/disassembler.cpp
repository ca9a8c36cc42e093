// Disassembler: encoded instructions back to the syntax of firmware/README.md.
#include <fmt/format.h>

#include "syntax.h"
#include "tpuw/asm.h"
#include "tpuw/error.h"
#include "tpuw/numerics.h"

namespace tpuw::isa {

namespace {

std::string lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return r;
}

std::string raw_word(const Word& w) {
  std::string s = ".word";
  for (unsigned k = 0; k < 4; ++k) s += fmt::format(" 0x{:08x}", get_bits(w, 32 * k, 32));
  return s;
}

/// An fp32 bit pattern as a literal the assembler reads back to the same bits: the shortest
/// decimal that round-trips, inf/-inf, nan for the canonical NaN, hex bits for other NaNs and
/// subnormals.
std::string f32_literal(uint32_t b) {
  if (b == num::kF32Nan) return "nan";
  if (num::is_nan(b) || num::is_subnormal(b)) return fmt::format("{:#x}", b);
  if (b == num::kF32PosInf) return "inf";
  if (b == num::kF32NegInf) return "-inf";
  return fmt::format("{}", num::to_float(b));
}

}  // namespace

std::string disassemble_one(const Word& word) {
  const auto* inf = spec::find_instr(word[0]);
  if (inf == nullptr) {
    return raw_word(word) + fmt::format("  ; undefined opcode 0x{:02x}", word[0]);
  }
  if (const auto bit = first_reserved_bit(word)) {
    return raw_word(word) + fmt::format("  ; {} with reserved bit {} set", lower(inf->name), *bit);
  }
  const Instr in = decode(word);
  std::string s = lower(inf->name);
  for (unsigned i = 0; i < inf->num_fields; ++i) {
    const auto& f = inf->fields[i];
    const uint64_t v = in.fields[i];
    if (detail::is_mem_field(f.name) && v < detail::kMems.size()) {
      s += fmt::format(" {}={}", f.name, spec::to_string(static_cast<spec::Mem>(v)));
    } else if (detail::is_vecop_field(*inf, f.name) && v < detail::kVecOps.size()) {
      s += fmt::format(" {}={}", f.name, spec::to_string(detail::kVecOps[v]));
    } else if (detail::is_f32_field(*inf, f.name)) {
      s += fmt::format(" {}={}", f.name, f32_literal(static_cast<uint32_t>(v)));
    } else if (f.width == 1) {
      if (v != 0) s += fmt::format(" {}", f.name);
    } else if (detail::is_hex_field(f.name)) {
      s += fmt::format(" {}={:#x}", f.name, v);
    } else {
      s += fmt::format(" {}={}", f.name, v);
    }
  }
  const bool flags[4] = {in.pop_prev, in.pop_next, in.push_prev, in.push_next};
  for (size_t k = 0; k < detail::kFlags.size(); ++k) {
    if (flags[k]) s += fmt::format(" {}", detail::kFlags[k].name);
  }
  return s;
}

std::string disassemble(std::span<const uint8_t> words) {
  if (words.size() % spec::kInstrBytes != 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("disassemble: {} bytes is not a multiple of the {}-byte instruction size",
                            words.size(), spec::kInstrBytes));
  }
  std::string out;
  for (size_t off = 0; off < words.size(); off += spec::kInstrBytes) {
    out += disassemble_one(word_from(words.subspan(off, spec::kInstrBytes)));
    out += '\n';
  }
  return out;
}

}  // namespace tpuw::isa
