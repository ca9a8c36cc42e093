// Assembler and disassembler: syntax, every error message, round trips, firmware programs.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "tpuw/asm.h"
#include "tpuw/error.h"

namespace tpuw::isa {
namespace {

namespace fs = std::filesystem;

// Expects an assembly error at line:col whose message contains `needle`.
void expect_error(std::string_view src, unsigned line, unsigned col, std::string_view needle) {
  try {
    (void)assemble(src, "t.s");
    ADD_FAILURE() << "no error for: " << src;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kAsmSyntax);
    const std::string msg = e.what();
    const std::string where = "t.s:" + std::to_string(line) + ":" + std::to_string(col) + ": ";
    EXPECT_TRUE(msg.starts_with(where)) << msg << " (expected at " << where << ")";
    EXPECT_NE(msg.find(needle), std::string::npos) << msg << " (expected '" << needle << "')";
  }
}

TEST(Asm, AssemblesFieldsFlagsEnumsAndNumbers) {
  const Program p = assemble(
      "; comment\n"
      "  LOAD mem=wb, local_addr = 3 host_addr=0x2000 rows=0b10 row_bytes=16 host_stride=16 push_next ; tail\n"
      "  matmul ub_addr=0 acc_addr=4 rows=4 swap accumulate=0 pop_prev\n"
      "  fence value=0xFFFFFFFF host_addr=0x4000 irq=1\n",
      "t.s");
  ASSERT_EQ(p.num_instrs(), 3u);
  EXPECT_EQ(p.lines, (std::vector<unsigned>{2, 3, 4}));
  const Instr a = decode(word_from({p.code.data(), 16}));
  EXPECT_EQ(a.opcode, static_cast<uint8_t>(spec::Opcode::kLoad));
  EXPECT_EQ(a.get("mem"), 1u);
  EXPECT_EQ(a.get("local_addr"), 3u);
  EXPECT_EQ(a.get("host_addr"), 0x2000u);
  EXPECT_EQ(a.get("rows"), 2u);
  EXPECT_TRUE(a.push_next);
  EXPECT_FALSE(a.pop_prev);
  const Instr m = decode(word_from({p.code.data() + 16, 16}));
  EXPECT_EQ(m.get("swap"), 1u);
  EXPECT_EQ(m.get("accumulate"), 0u);
  EXPECT_TRUE(m.pop_prev);
  const Instr f = decode(word_from({p.code.data() + 32, 16}));
  EXPECT_EQ(f.get("value"), 0xFFFFFFFFu);
  EXPECT_EQ(f.get("irq"), 1u);
}

TEST(Asm, Directives) {
  const Program p = assemble(
      ".array_n 4\n"
      ".data a 0x1000 \"a file.bin\"\n"
      ".int8 b 0x2000 1 -1 255 \\\n"
      "        -128\n"
      ".int32 q 0x2100 -1 0x7fffffff\n"
      ".zero c 0x3000 64\n"
      ".dump c 0x3000 64 int32 4 out.bin\n"
      ".dump d 0x3000 16\n"
      ".expect c 0x3000 int8 1 2\n"
      ".expect_fault local_range 2048 1\n"
      ".word 0xff 0 0 0x80000000\n",
      "t.s");
  EXPECT_EQ(p.array_n, 4u);
  ASSERT_EQ(p.data.size(), 3u);
  EXPECT_EQ(p.data[0].file, "a file.bin");
  EXPECT_EQ(p.data[0].addr, 0x1000u);
  EXPECT_EQ(p.data[1].bytes, (std::vector<uint8_t>{1, 0xFF, 0xFF, 0x80}));
  EXPECT_EQ(p.data[2].bytes, (std::vector<uint8_t>{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F}));
  ASSERT_EQ(p.zeros.size(), 1u);
  EXPECT_EQ(p.zeros[0].bytes, 64u);
  ASSERT_EQ(p.dumps.size(), 2u);
  EXPECT_EQ(p.dumps[0].type, ElemType::kInt32);
  EXPECT_EQ(p.dumps[0].columns, 4u);
  EXPECT_EQ(p.dumps[0].file, "out.bin");
  EXPECT_EQ(p.dumps[1].type, ElemType::kHex8);
  ASSERT_EQ(p.expects.size(), 1u);
  EXPECT_EQ(p.expects[0].bytes, (std::vector<uint8_t>{1, 2}));
  ASSERT_TRUE(p.expect_fault.has_value());
  EXPECT_EQ(p.expect_fault->cause, spec::Fault::kLocalRange);
  EXPECT_EQ(p.expect_fault->info, 2048u);
  EXPECT_EQ(p.expect_fault->index, 1u);
  ASSERT_EQ(p.num_instrs(), 1u);
  EXPECT_EQ(p.code[0], 0xFF);
  EXPECT_EQ(p.code[15], 0x80);
}

TEST(Asm, ErrorMessagesSayWhereAndWhat) {
  expect_error("  lod mem=UB", 1, 3, "unknown mnemonic 'lod'");
  expect_error("nop\n.dta a 0 x", 2, 1, "unknown directive '.dta'");
  expect_error("loadw wb_addr=0 rows=3", 1, 17, "unknown field 'rows' for loadw (expected one of: transpose, bf16, wb_addr");
  expect_error("loadw wb_addr=0x100000", 1, 15, "out of range for loadw wb_addr (20 bits: 0..0xfffff)");
  expect_error("matmul ub_addr=0 acc_addr=0 rows=-1", 1, 34, "out of range");
  expect_error("matmul ub_addr=0 acc_addr=0", 1, 1, "missing required field 'rows' for matmul");
  expect_error("matmul ub_addr=0 acc_addr=0 rows=1 rows=2", 1, 36, "field 'rows' given twice");
  expect_error("matmul ub_addr=0 acc_addr=0 rows", 1, 29, "expected '=' and a value after 'rows'");
  expect_error("matmul ub_addr=0 acc_addr=0 rows=", 1, 33, "expected a value after 'rows='");
  expect_error("matmul ub_addr=0 acc_addr=0 rows=12z", 1, 34, "expected a number for rows");
  expect_error("load mem=XB local_addr=0 host_addr=0 rows=1 row_bytes=8 host_stride=8", 1, 10,
               "unknown memory 'XB'");
  expect_error("matmul =3", 1, 8, "expected a field name before '='");
  expect_error("nop swap", 1, 5, "unknown field 'swap' for nop");
  expect_error("matmul swap=2 ub_addr=0 acc_addr=0 rows=1", 1, 13, "out of range");
  expect_error(".zero c 0x3000", 1, 15, ".zero expects 3 arguments, got 2");
  expect_error(".zero c 0x3000 4 5", 1, 18, "too many arguments to .zero");
  expect_error(".zero c 0x100000000 4", 1, 9, "out of range");
  expect_error(".int8 a 0 1 300", 1, 13, "value 300 out of range for int8");
  expect_error(".dump c 0 6 int32", 1, 11, "not a whole number of int32");
  expect_error(".dump c 0 6 float", 1, 13, "unknown element type 'float'");
  expect_error(".expect_fault BAD 0 0", 1, 15, "unknown fault cause 'BAD'");
  expect_error(".word 1 2 3", 1, 12, ".word expects 4 arguments");
  expect_error(".data a 0 \"unterminated", 1, 11, "unterminated string");
  expect_error("nop \\ x", 1, 5, "must end the line");
  expect_error(".array_n 0", 1, 10, "must be >= 1");
}

TEST(Asm, DisassemblyFormat) {
  const Program p = assemble(
      "load mem=ACC local_addr=8 host_addr=0x2100 rows=1 row_bytes=48 host_stride=48 push_next\n"
      "activate acc_addr=0 ub_addr=8 rows=4 bias bias_addr=8 qparam_addr=9 relu push_next pop_prev\n"
      "fence value=2 host_addr=0x4000 irq\n",
      "t.s");
  EXPECT_EQ(disassemble(p.code),
            "load mem=ACC local_addr=8 host_addr=0x2100 rows=1 row_bytes=48 host_stride=0x30 push_next\n"
            "activate relu bias acc_addr=0 ub_addr=8 rows=4 bias_addr=8 qparam_addr=9 pop_prev push_next\n"
            "fence irq value=0x2 host_addr=0x4000\n");
  Word bad{};
  bad[0] = 0xEE;
  EXPECT_EQ(disassemble_one(bad), ".word 0x000000ee 0x00000000 0x00000000 0x00000000  ; undefined opcode 0xee");
  Word res = encode(make_instr(spec::Opcode::kNop));
  set_bits(res, 100, 1, 1);
  EXPECT_NE(disassemble_one(res).find("reserved bit 100"), std::string::npos);
  EXPECT_THROW((void)disassemble(std::vector<uint8_t>(17)), Error);
}

TEST(Asm, VectorOpNamesAndFloatScalars) {
  const auto scalar_of = [](const std::string& lit) {
    const Program p = assemble("vector op=AXPY dst_addr=0 a_addr=0 b_addr=0 rows=1 scalar=" + lit, "t.s");
    return static_cast<uint32_t>(decode(word_from(p.code)).get("scalar"));
  };
  EXPECT_EQ(scalar_of("0.5"), 0x3F000000u);
  EXPECT_EQ(scalar_of("-1e-3"), 0xBA83126Fu);  // -0.001 rounded to fp32
  EXPECT_EQ(scalar_of("2"), 0x40000000u);      // a decimal is a float value, not bits
  EXPECT_EQ(scalar_of("+1.5"), 0x3FC00000u);
  EXPECT_EQ(scalar_of("-0"), 0x80000000u);
  EXPECT_EQ(scalar_of("0.1"), 0x3DCCCCCDu);   // nearest even
  EXPECT_EQ(scalar_of("inf"), 0x7F800000u);
  EXPECT_EQ(scalar_of("-INF"), 0xFF800000u);
  EXPECT_EQ(scalar_of("nan"), 0x7FC00000u);
  EXPECT_EQ(scalar_of("NaN"), 0x7FC00000u);
  EXPECT_EQ(scalar_of("0x7fc12345"), 0x7FC12345u);  // bits
  EXPECT_EQ(scalar_of("0b1"), 1u);
  EXPECT_EQ(scalar_of("3.4028234e38"), 0x7F7FFFFFu);

  const Program p = assemble(
      "vector op=axpy dst_addr=4 a_addr=0 b_addr=4 rows=8 scalar=-0.05 pop_prev\n"
      "vector op=Maxs dst_addr=1 a_addr=1 b_addr=0 rows=2 scalar=0\n"
      "vector op=9 dst_addr=0 a_addr=0 b_addr=0 rows=1 scalar=0x00000001\n"
      "vector op=imax dst_addr=2 a_addr=2 b_addr=6 rows=4 scalar=0\n"
      "vector op=12 dst_addr=0 a_addr=0 b_addr=0 rows=1 scalar=1e30\n"
      "transpose src_addr=0 dst_addr=16 rows=4 bf16\n"
      "loadw wb_addr=2 transpose bf16\n"
      "matmul ub_addr=0 acc_addr=0 rows=2 bf16 swap\n"
      "activate acc_addr=0 ub_addr=0 rows=1 bias_addr=0 qparam_addr=0 bf16\n",
      "t.s");
  EXPECT_EQ(disassemble(p.code),
            "vector op=AXPY dst_addr=4 a_addr=0 b_addr=4 rows=8 scalar=-0.05 pop_prev\n"
            "vector op=MAXS dst_addr=1 a_addr=1 b_addr=0 rows=2 scalar=0\n"
            "vector op=ROUND_BF16 dst_addr=0 a_addr=0 b_addr=0 rows=1 scalar=0x1\n"
            "vector op=IMAX dst_addr=2 a_addr=2 b_addr=6 rows=4 scalar=0\n"
            "vector op=12 dst_addr=0 a_addr=0 b_addr=0 rows=1 scalar=1e+30\n"
            "transpose bf16 src_addr=0 dst_addr=16 rows=4\n"
            "loadw transpose bf16 wb_addr=2\n"
            "matmul swap bf16 ub_addr=0 acc_addr=0 rows=2\n"
            "activate bf16 acc_addr=0 ub_addr=0 rows=1 bias_addr=0 qparam_addr=0\n");
  EXPECT_EQ(assemble(disassemble(p.code), "again.s").code, p.code);

  expect_error("vector op=AXPZ dst_addr=0 a_addr=0 b_addr=0 rows=1 scalar=0", 1, 11,
               "unknown vector op 'AXPZ' for vector op (expected one of: ADD, SUB, MUL, AXPY, SCALE, MAX, MAXS, "
               "SELECT, COLSUM, ROUND_BF16, IMAX; or a number)");
  expect_error("vector op=16 dst_addr=0 a_addr=0 b_addr=0 rows=1 scalar=0", 1, 11, "out of range for vector op");
  expect_error("vector op=ADD dst_addr=0 a_addr=0 b_addr=0 rows=1 scalar=1e39", 1, 58,
               "1e39 is out of the fp32 range for vector scalar");
  expect_error("vector op=ADD dst_addr=0 a_addr=0 b_addr=0 rows=1 scalar=0.5x", 1, 58,
               "expected a float such as 0.5, -1e-3, inf or nan, or fp32 bits in 0x hex for vector scalar, got '0.5x'");
  expect_error("vector op=ADD dst_addr=0 a_addr=0 b_addr=0 rows=1 scalar=0x100000000", 1, 58,
               "out of range for vector scalar (32 bits");
  expect_error("vector op=ADD dst_addr=0 a_addr=0 b_addr=0 rows=1 scalar=\"1\"", 1, 58, "expected a float");
  expect_error("vector op=ADD dst_addr=0 a_addr=0 b_addr=0 rows=1", 1, 1, "missing required field 'scalar'");
}

TEST(Asm, EveryScalarBitPatternRoundTrips) {
  std::mt19937_64 rng(7);
  std::vector<uint8_t> code;
  std::vector<uint32_t> specials = {0u, 0x80000000u, 1u, 0x807FFFFFu, 0x00800000u, 0x7F7FFFFFu, 0xFF7FFFFFu,
                                    0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0x3F800000u,
                                    0x3DCCCCCDu, 0x4B7FFFFFu, 0x4B800001u};
  for (int i = 0; i < 5000; ++i) specials.push_back(static_cast<uint32_t>(rng()));
  for (const uint32_t b : specials) {
    Instr in = make_instr(spec::Opcode::kVector);
    in.set("op", static_cast<uint64_t>(rng() % 16));
    in.set("rows", 1);
    in.set("scalar", b);
    const Word w = encode(in);
    code.insert(code.end(), w.begin(), w.end());
  }
  const std::string text = disassemble(code);
  EXPECT_EQ(assemble(text, "round.s").code, code);
}

TEST(Asm, RandomInstructionsRoundTripThroughText) {
  std::mt19937_64 rng(42);
  std::vector<uint8_t> code;
  for (int i = 0; i < 2000; ++i) {
    Word w{};
    if (i % 10 == 9) {
      for (auto& b : w) b = static_cast<uint8_t>(rng());  // anything, including illegal encodings
    } else {
      const auto& inf = spec::kInstrs[rng() % spec::kInstrs.size()];
      Instr in = make_instr(inf.opcode);
      in.pop_prev = rng() & 1;
      in.pop_next = rng() & 1;
      in.push_prev = rng() & 1;
      in.push_next = rng() & 1;
      for (unsigned f = 0; f < inf.num_fields; ++f) {
        const unsigned wd = inf.fields[f].width;
        in.fields[f] = rng() & (wd >= 64 ? ~0ull : (1ull << wd) - 1);
      }
      w = encode(in);
    }
    code.insert(code.end(), w.begin(), w.end());
  }
  const std::string text = disassemble(code);
  const Program again = assemble(text, "round.s");
  EXPECT_EQ(again.code, code);
  EXPECT_EQ(disassemble(again.code), text);
}

TEST(Asm, FirmwareProgramsAssembleAndRoundTrip) {
  unsigned count = 0;
  for (const auto& e : fs::directory_iterator(TPUW_FIRMWARE_DIR)) {
    if (e.path().extension() != ".s") continue;
    ++count;
    const Program p = assemble_file(e.path());
    EXPECT_GT(p.num_instrs(), 0u) << e.path();
    for (const auto& d : p.data) EXPECT_FALSE(d.bytes.empty()) << e.path() << " " << d.name;
    const Program again = assemble(disassemble(p.code), "dis.s");
    EXPECT_EQ(again.code, p.code) << e.path();
  }
  EXPECT_GE(count, 5u);
}

TEST(Asm, MissingDataFileIsABadFile) {
  Program p = assemble(".data a 0 no_such_file.bin\n", "t.s");
  try {
    load_data_files(p, "/nonexistent-dir");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadFile);
    EXPECT_NE(std::string(e.what()).find("no_such_file.bin"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("t.s:1"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)assemble_file("/nonexistent-dir/x.s"), Error);
}

// Expects kBadFile with `needle` in the message.
template <typename F>
void expect_bad_file(F&& f, std::string_view needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadFile) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Asm, UntrustedTokensAreQuotedAndShortened) {
  // Issue 14, class 10: a NUL byte truncated the message; binary bytes reached the terminal.
  using namespace std::string_literals;
  expect_error("lo\0ad mem=UB"s, 1, 1, "unknown mnemonic 'lo\\x00ad'");
  expect_error("\x1b[2J\xff"s, 1, 1, "unknown mnemonic '\\x1b[2J\\xff'");
  expect_error("nop sw\x01" "ap", 1, 5, "unknown field 'sw\\x01ap' for nop");
  expect_error(".dump c 0 4 it's", 1, 13, "unknown element type 'it\\'s'");
  // A 100 KB token is cut to kQuoteMaxBytes with a marker.
  const std::string long_tok(100000, 'z');
  try {
    (void)assemble(long_tok + "\n", "t.s");
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_LT(msg.size(), 400u);
    EXPECT_NE(msg.find("'... (100000 bytes)"), std::string::npos) << msg;
  }
  // Numbers that parse but are out of range are shortened too (leading zeros).
  expect_error(".int8 a 0 " + std::string(200, '0') + "300", 1, 11, "value 0000");
}

TEST(Asm, BoundedReads) {
  // Issue 14, class 3: /dev/zero as a .data file (or as the source) was read until memory ran out.
  // The limit of a .data file is what fits from its address up to 4 GiB (and kMaxDataFileBytes).
  Program p = assemble(".data a 0xfffff000 /dev/zero\n", "t.s");
  expect_bad_file([&] { load_data_files(p, "/"); }, "larger than the limit of 4096 bytes");
  // A directory is an error, not an empty segment or source.
  Program d = assemble(".data a 0 .\n", "t.s");
  expect_bad_file([&] { load_data_files(d, fs::temp_directory_path()); }, "is a directory");
  expect_bad_file([] { (void)assemble_file(fs::temp_directory_path()); }, "is a directory, not the assembly source");
  // An endless source stops at kMaxSourceBytes.
  expect_bad_file([] { (void)assemble_file("/dev/zero"); }, "larger than the limit of 67108864 bytes");
  // A .data file that fits is read whole.
  const fs::path f = fs::temp_directory_path() / "tpuw_asm_data.bin";
  { std::ofstream(f, std::ios::binary) << "0123456789abcdef"; }
  Program ok = assemble(".data a 0xfffffff0 " + f.string() + "\n", "t.s");
  load_data_files(ok, "/");
  EXPECT_EQ(ok.data[0].bytes.size(), 16u);
  Program over = assemble(".data a 0xfffffff1 " + f.string() + "\n", "t.s");
  expect_bad_file([&] { load_data_files(over, "/"); }, "larger than the limit of 15 bytes");
  fs::remove(f);
}

}  // namespace
}  // namespace tpuw::isa
