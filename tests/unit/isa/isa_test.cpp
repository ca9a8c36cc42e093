// Encoding and decoding of every instruction and field, driven by the spec table.
#include <gtest/gtest.h>

#include "tpuw/asm.h"
#include "tpuw/error.h"

namespace tpuw::isa {
namespace {

uint64_t max_of(unsigned width) { return width >= 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1; }

bool reserved(const spec::InstrInfo& inf, unsigned bit) { return ((inf.reserved_mask[bit / 32] >> (bit % 32)) & 1u) != 0; }

TEST(Isa, BitHelpersRoundTripAcrossByteAndWordBoundaries) {
  Word w{};
  set_bits(w, 28, 40, 0xAB'CDEF'0123ull);
  EXPECT_EQ(get_bits(w, 28, 40), 0xAB'CDEF'0123ull);
  EXPECT_EQ(get_bits(w, 0, 28), 0u);
  EXPECT_EQ(get_bits(w, 68, 60), 0u);
  set_bits(w, 28, 40, 0);
  EXPECT_EQ(w, Word{});
}

TEST(Isa, EveryFieldRoundTripsAtZeroOneAndMax) {
  for (const auto& inf : spec::kInstrs) {
    for (unsigned i = 0; i < inf.num_fields; ++i) {
      for (const uint64_t v : {uint64_t{0}, uint64_t{1}, max_of(inf.fields[i].width), max_of(inf.fields[i].width) / 3}) {
        Instr in = make_instr(inf.opcode);
        in.fields[i] = v;
        const Word w = encode(in);
        EXPECT_EQ(get_bits(w, inf.fields[i].lsb, inf.fields[i].width), v) << inf.name << "." << inf.fields[i].name;
        EXPECT_EQ(decode(w), in) << inf.name << "." << inf.fields[i].name << " = " << v;
        EXPECT_EQ(in.get(inf.fields[i].name), v);
        EXPECT_FALSE(first_reserved_bit(w).has_value());
      }
    }
  }
}

TEST(Isa, AllFieldsAtMaxAndAllFlagsTogether) {
  for (const auto& inf : spec::kInstrs) {
    Instr in = make_instr(inf.opcode);
    in.pop_prev = in.pop_next = in.push_prev = in.push_next = true;
    for (unsigned i = 0; i < inf.num_fields; ++i) in.fields[i] = max_of(inf.fields[i].width);
    const Word w = encode(in);
    EXPECT_EQ(w[0], static_cast<uint8_t>(inf.opcode));
    EXPECT_EQ(get_bits(w, 8, 4), 0xFu);
    EXPECT_EQ(decode(w), in) << inf.name;
    // Every bit is either a header bit, a field bit or reserved: with all fields at max the
    // set bits of the word are exactly the complement of the reserved mask (beyond the opcode).
    for (unsigned b = 8; b < spec::kInstrBits; ++b) {
      EXPECT_NE(get_bits(w, b, 1) != 0, reserved(inf, b)) << inf.name << " bit " << b;
    }
  }
}

TEST(Isa, EveryReservedBitIsDetectedAndIsTheLowest) {
  for (const auto& inf : spec::kInstrs) {
    unsigned count = 0;
    for (unsigned b = 0; b < spec::kInstrBits; ++b) {
      if (!reserved(inf, b)) continue;
      ++count;
      Word w = encode(make_instr(inf.opcode));
      set_bits(w, b, 1, 1);
      ASSERT_TRUE(first_reserved_bit(w).has_value()) << inf.name << " bit " << b;
      EXPECT_EQ(*first_reserved_bit(w), b);
      set_bits(w, spec::kInstrBits - 1, 1, 1);  // a higher reserved bit does not change the answer
      if (reserved(inf, spec::kInstrBits - 1)) {
        EXPECT_EQ(*first_reserved_bit(w), b);
      }
    }
    EXPECT_GT(count, 0u) << inf.name;
  }
}

TEST(Isa, KnownEncodingOfLoad) {
  Instr in = make_instr(spec::Opcode::kLoad);
  in.set("mem", 1);
  in.set("local_addr", 5);
  in.set("host_addr", 0x2000);
  in.set("rows", 1);
  in.set("row_bytes", 16);
  in.set("host_stride", 16);
  in.push_next = true;
  const Word w = encode(in);
  // opcode 1, push_next (bit 11), mem=1 at bit 12 -> low 16 bits 0x1801
  EXPECT_EQ(w[0], 0x01);
  EXPECT_EQ(w[1], 0x18);
  EXPECT_EQ(get_bits(w, 16, 20), 5u);
  EXPECT_EQ(get_bits(w, 36, 32), 0x2000u);
  EXPECT_EQ(get_bits(w, 68, 16), 1u);
  EXPECT_EQ(get_bits(w, 84, 16), 16u);
  EXPECT_EQ(get_bits(w, 100, 24), 16u);
}

TEST(Isa, EncodeRejectsValuesWiderThanTheField) {
  Instr in = make_instr(spec::Opcode::kMatmul);
  in.set("rows", 0x10000);
  try {
    (void)encode(in);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("rows"), std::string::npos) << e.what();
  }
}

TEST(Isa, UndefinedOpcodes) {
  for (unsigned op : {0x00u, 0x0Au, 0x7Fu, 0xFFu}) {
    Word w{};
    w[0] = static_cast<uint8_t>(op);
    EXPECT_THROW((void)decode(w), Error);
    EXPECT_FALSE(first_reserved_bit(w).has_value());
    Instr in;
    in.opcode = static_cast<uint8_t>(op);
    EXPECT_THROW((void)encode(in), Error);
  }
}

TEST(Isa, UnknownFieldNameThrows) {
  Instr in = make_instr(spec::Opcode::kFence);
  EXPECT_THROW(in.set("rows", 1), Error);
  EXPECT_THROW((void)in.get("mem"), Error);
}

}  // namespace
}  // namespace tpuw::isa
