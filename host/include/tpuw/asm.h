// Instruction encoding, assembler and disassembler for TPU Worker device programs.
//
// Everything here is table-driven from tpuw::spec::kInstrs (generated from
// firmware/spec/tpuw.toml): a new instruction or field in the spec needs no change in this
// layer. The assembly syntax is documented in firmware/README.md.
//
//   Word    : one encoded 128-bit instruction, 16 bytes, little-endian
//   Instr   : opcode + the four dependency flags + the instruction's field values
//   Program : the encoded instructions plus the directives (data, zero, dump, expect)
//
// Errors: encode/decode misuse throws tpuw::Error(kInvalidArgument); source errors throw
// tpuw::Error(kAsmSyntax) with "file:line:column: what was wrong, what was expected".
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tpuw/spec.h"

namespace tpuw::isa {

/// One encoded instruction (spec::kInstrBytes bytes, bit 0 = lowest bit of byte 0).
using Word = std::array<uint8_t, spec::kInstrBytes>;

/// Reads `width` (1..64) bits at `lsb` of an encoded instruction. get_bits and set_bits throw
/// Error(kInvalidArgument) when the bits do not lie inside the 128-bit word.
uint64_t get_bits(const Word& w, unsigned lsb, unsigned width);
/// Writes the low `width` bits of `value` at `lsb` (other bits of `value` are ignored).
void set_bits(Word& w, unsigned lsb, unsigned width, uint64_t value);

/// Largest field count of any instruction in the spec.
inline constexpr unsigned kMaxFields = [] {
  unsigned m = 0;
  for (const auto& i : spec::kInstrs) m = i.num_fields > m ? i.num_fields : m;
  return m;
}();

/// A decoded instruction. `fields[i]` is the value of info()->fields[i].
struct Instr {
  uint8_t opcode = 0;
  bool pop_prev = false;
  bool pop_next = false;
  bool push_prev = false;
  bool push_next = false;
  std::array<uint64_t, kMaxFields> fields{};

  /// The spec entry for this opcode, or nullptr when the opcode is undefined.
  const spec::InstrInfo* info() const { return spec::find_instr(opcode); }
  /// Field value by name; throws Error(kInvalidArgument) when the instruction has no such field.
  uint64_t get(std::string_view field) const;
  void set(std::string_view field, uint64_t value);

  friend bool operator==(const Instr&, const Instr&) = default;
};

/// An Instr with this opcode and all fields zero; throws for an undefined opcode.
Instr make_instr(spec::Opcode op);

/// Encodes; throws Error(kInvalidArgument) for an undefined opcode or a value wider than its field.
Word encode(const Instr& instr);

/// Decodes the opcode, flags and fields; reserved bits are ignored (see first_reserved_bit).
/// Throws Error(kInvalidArgument) for an undefined opcode.
Instr decode(const Word& word);

/// The lowest reserved bit that is set in an instruction of a defined opcode, if any.
/// Returns nullopt for an undefined opcode (nothing is known to be reserved).
std::optional<unsigned> first_reserved_bit(const Word& word);

/// Copies 16 bytes from `bytes` (which must hold at least 16) into a Word.
Word word_from(std::span<const uint8_t> bytes);

// ---------------------------------------------------------------------------------------------
// Programs
// ---------------------------------------------------------------------------------------------

/// Element type of a dumped or expected region.
enum class ElemType { kInt8, kUint8, kInt32, kUint32, kHex8 };
std::string_view to_string(ElemType t);
size_t elem_size(ElemType t);

/// `.data` / `.int8` / `.int32` / `.bytes`: bytes to place in host memory before running.
/// For `.data`, `file` is the path as written (relative to the source file's directory) and
/// `bytes` is empty until load_data_files() (or assemble_file) fills it.
struct DataSegment {
  std::string name;
  uint64_t addr = 0;
  std::string file;
  std::vector<uint8_t> bytes;
  unsigned line = 0;
};

/// `.zero`: a region cleared before running.
struct ZeroRegion {
  std::string name;
  uint64_t addr = 0;
  uint64_t bytes = 0;
  unsigned line = 0;
};

/// `.dump`: a region shown (or written to `file`, raw bytes) after running.
struct Dump {
  std::string name;
  uint64_t addr = 0;
  uint64_t bytes = 0;
  ElemType type = ElemType::kHex8;
  unsigned columns = 16;
  std::string file;  // empty: print to the terminal
  unsigned line = 0;
};

/// `.expect`: the region must hold these bytes after running (the program's self-check).
struct Expect {
  std::string name;
  uint64_t addr = 0;
  ElemType type = ElemType::kInt32;
  std::vector<uint8_t> bytes;  // values encoded little-endian in `type`
  unsigned line = 0;
};

/// `.expect_fault`: the program must stop on this fault, at instruction `index` (0-based, so
/// FAULT_PC = ring address of the first instruction + 16 * index).
struct ExpectFault {
  spec::Fault cause = spec::Fault::kNone;
  uint32_t info = 0;
  uint32_t index = 0;
  unsigned line = 0;
};

struct Program {
  std::string filename;
  unsigned array_n = 0;            // `.array_n N`: the MXU size the program is written for (0 = any)
  std::vector<uint8_t> code;       // encoded instructions, 16 bytes each, in program order
  std::vector<unsigned> lines;     // source line of each instruction
  std::vector<DataSegment> data;
  std::vector<ZeroRegion> zeros;
  std::vector<Dump> dumps;
  std::vector<Expect> expects;
  std::optional<ExpectFault> expect_fault;

  size_t num_instrs() const { return code.size() / spec::kInstrBytes; }
};

/// Assembles source text. `filename` is used in error messages only. `.data` files are not
/// read (see load_data_files). Throws Error(kAsmSyntax).
Program assemble(std::string_view source, std::string_view filename);

/// Largest assembly source assemble_file() reads (about a million instructions).
inline constexpr uint64_t kMaxSourceBytes = uint64_t{64} << 20;
/// Largest `.data` file: at most this, and at most what fits from its address up to 4 GiB.
inline constexpr uint64_t kMaxDataFileBytes = uint64_t{1} << 30;

/// Reads the files named by `.data` directives, relative to `dir`; throws Error(kBadFile) when one
/// cannot be read, is a directory or is larger than its limit (above); a device such as /dev/zero
/// or an endless pipe is read only up to the limit.
void load_data_files(Program& program, const std::filesystem::path& dir);

/// Reads (at most kMaxSourceBytes), assembles and loads data files relative to the source's
/// directory. Throws Error(kBadFile) when a file cannot be read, Error(kAsmSyntax) on a source error.
Program assemble_file(const std::filesystem::path& path);

/// One instruction as assembly text (no newline), e.g.
/// "matmul ub_addr=0 acc_addr=0 rows=4 swap". Undefined opcodes and instructions with reserved
/// bits set come out as ".word 0x... 0x... 0x... 0x..." so the bytes survive a round trip.
std::string disassemble_one(const Word& word);

/// Every instruction in `words` (a multiple of 16 bytes, else Error(kInvalidArgument)),
/// one per line.
std::string disassemble(std::span<const uint8_t> words);

}  // namespace tpuw::isa
