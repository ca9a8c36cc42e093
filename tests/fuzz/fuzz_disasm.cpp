// libFuzzer target: the disassembler and the instruction decoder. Any 16-byte words disassemble
// (undefined opcodes and reserved bits as .word lines), and the text assembles back to the same
// bytes; decode() of a defined opcode re-encodes to the word without its reserved bits.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "tpuw/asm.h"
#include "tpuw/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tpuw;
  const std::span<const uint8_t> words(data, size - size % spec::kInstrBytes);
  const std::string text = isa::disassemble(words);
  const isa::Program p = isa::assemble(text, "disassembly");  // must not throw
  if (!std::equal(p.code.begin(), p.code.end(), words.begin(), words.end())) std::abort();
  for (size_t off = 0; off < words.size(); off += spec::kInstrBytes) {
    const isa::Word w = isa::word_from(words.subspan(off, spec::kInstrBytes));
    if (spec::find_instr(w[0]) == nullptr) {
      try {
        (void)isa::decode(w);
        std::abort();  // an undefined opcode must be refused
      } catch (const Error&) {
      }
      continue;
    }
    const isa::Word e = isa::encode(isa::decode(w));
    if (!isa::first_reserved_bit(w) && e != w) std::abort();
  }
  return 0;
}
