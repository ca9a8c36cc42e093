// libFuzzer target: the assembler. Any source text assembles or gives tpuw::Error; the code of an
// accepted program disassembles to text that assembles back to the same bytes.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tpuw/asm.h"
#include "tpuw/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tpuw;
  const std::string_view src(reinterpret_cast<const char*>(data), size);
  isa::Program p;
  try {
    p = isa::assemble(src, "fuzz.s");
  } catch (const Error&) {
    return 0;
  }
  if (p.code.size() != p.lines.size() * spec::kInstrBytes) std::abort();
  const std::string text = isa::disassemble(p.code);
  const isa::Program q = isa::assemble(text, "disassembly");
  if (q.code != p.code) std::abort();
  return 0;
}
