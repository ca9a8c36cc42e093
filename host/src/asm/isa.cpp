// Encoding and decoding of single instructions, driven by spec::kInstrs.
#include <cstring>

#include <fmt/format.h>

#include "tpuw/asm.h"
#include "tpuw/error.h"

namespace tpuw::isa {

namespace {

void check_bit_range(unsigned lsb, unsigned width, const char* fn) {
  if (width == 0 || width > 64 || lsb >= 8 * spec::kInstrBytes || width > 8 * spec::kInstrBytes - lsb) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: bits [{}, +{}) are outside a {}-bit instruction or wider than 64", fn, lsb, width,
                            8 * spec::kInstrBytes));
  }
}

}  // namespace

uint64_t get_bits(const Word& w, unsigned lsb, unsigned width) {
  check_bit_range(lsb, width, "get_bits");
  uint64_t v = 0;
  for (unsigned i = 0; i < width; ++i) {
    const unsigned b = lsb + i;
    if ((w[b / 8] >> (b % 8)) & 1u) v |= uint64_t{1} << i;
  }
  return v;
}

void set_bits(Word& w, unsigned lsb, unsigned width, uint64_t value) {
  check_bit_range(lsb, width, "set_bits");
  for (unsigned i = 0; i < width; ++i) {
    const unsigned b = lsb + i;
    const auto mask = static_cast<uint8_t>(1u << (b % 8));
    if ((value >> i) & 1u) {
      w[b / 8] = static_cast<uint8_t>(w[b / 8] | mask);
    } else {
      w[b / 8] = static_cast<uint8_t>(w[b / 8] & ~mask);
    }
  }
}

namespace {

const spec::InstrInfo& info_or_throw(uint8_t opcode) {
  const auto* info = spec::find_instr(opcode);
  if (info == nullptr) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("undefined opcode 0x{:02x}", opcode));
  }
  return *info;
}

int field_index(const spec::InstrInfo& info, std::string_view field) {
  for (unsigned i = 0; i < info.num_fields; ++i) {
    if (info.fields[i].name == field) return static_cast<int>(i);
  }
  return -1;
}

uint64_t width_max(unsigned width) { return width >= 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1; }

}  // namespace

uint64_t Instr::get(std::string_view field) const {
  const auto& inf = info_or_throw(opcode);
  const int i = field_index(inf, field);
  if (i < 0) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{} has no field '{}'", inf.name, field));
  }
  return fields[static_cast<size_t>(i)];
}

void Instr::set(std::string_view field, uint64_t value) {
  const auto& inf = info_or_throw(opcode);
  const int i = field_index(inf, field);
  if (i < 0) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{} has no field '{}'", inf.name, field));
  }
  fields[static_cast<size_t>(i)] = value;
}

Instr make_instr(spec::Opcode op) {
  Instr in;
  in.opcode = static_cast<uint8_t>(op);
  (void)info_or_throw(in.opcode);
  return in;
}

Word encode(const Instr& instr) {
  const auto& inf = info_or_throw(instr.opcode);
  Word w{};
  set_bits(w, spec::header::kOpcode.lsb, spec::header::kOpcode.width, instr.opcode);
  set_bits(w, spec::header::kPopPrev.lsb, 1, instr.pop_prev ? 1 : 0);
  set_bits(w, spec::header::kPopNext.lsb, 1, instr.pop_next ? 1 : 0);
  set_bits(w, spec::header::kPushPrev.lsb, 1, instr.push_prev ? 1 : 0);
  set_bits(w, spec::header::kPushNext.lsb, 1, instr.push_next ? 1 : 0);
  for (unsigned i = 0; i < inf.num_fields; ++i) {
    const auto& f = inf.fields[i];
    const uint64_t v = instr.fields[i];
    if (v > width_max(f.width)) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{} field {} = {:#x} does not fit in {} bits (max {:#x})", inf.name, f.name, v,
                              f.width, width_max(f.width)));
    }
    set_bits(w, f.lsb, f.width, v);
  }
  for (unsigned i = inf.num_fields; i < kMaxFields; ++i) {
    if (instr.fields[i] != 0) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{} has {} fields but value slot {} is set", inf.name, inf.num_fields, i));
    }
  }
  return w;
}

Instr decode(const Word& word) {
  Instr in;
  in.opcode = static_cast<uint8_t>(get_bits(word, spec::header::kOpcode.lsb, spec::header::kOpcode.width));
  const auto& inf = info_or_throw(in.opcode);
  in.pop_prev = get_bits(word, spec::header::kPopPrev.lsb, 1) != 0;
  in.pop_next = get_bits(word, spec::header::kPopNext.lsb, 1) != 0;
  in.push_prev = get_bits(word, spec::header::kPushPrev.lsb, 1) != 0;
  in.push_next = get_bits(word, spec::header::kPushNext.lsb, 1) != 0;
  for (unsigned i = 0; i < inf.num_fields; ++i) {
    in.fields[i] = get_bits(word, inf.fields[i].lsb, inf.fields[i].width);
  }
  return in;
}

std::optional<unsigned> first_reserved_bit(const Word& word) {
  const auto* inf = spec::find_instr(word[0]);
  if (inf == nullptr) return std::nullopt;
  for (unsigned k = 0; k < 4; ++k) {
    const uint32_t v = static_cast<uint32_t>(get_bits(word, 32 * k, 32));
    const uint32_t set = v & inf->reserved_mask[k];
    if (set != 0) return 32 * k + static_cast<unsigned>(__builtin_ctz(set));
  }
  return std::nullopt;
}

Word word_from(std::span<const uint8_t> bytes) {
  if (bytes.size() < spec::kInstrBytes) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("an instruction needs {} bytes, got {}", spec::kInstrBytes, bytes.size()));
  }
  Word w{};
  std::memcpy(w.data(), bytes.data(), w.size());
  return w;
}

std::string_view to_string(ElemType t) {
  switch (t) {
    case ElemType::kInt8: return "int8";
    case ElemType::kUint8: return "uint8";
    case ElemType::kInt32: return "int32";
    case ElemType::kUint32: return "uint32";
    case ElemType::kHex8: return "hex8";
  }
  return "?";
}

size_t elem_size(ElemType t) {
  switch (t) {
    case ElemType::kInt32:
    case ElemType::kUint32: return 4;
    default: return 1;
  }
}

}  // namespace tpuw::isa
