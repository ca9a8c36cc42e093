// tpuw/quote.h: untrusted text escaped and shortened for messages.
#include "tpuw/quote.h"

#include <gtest/gtest.h>

#include <string>

namespace tpuw {
namespace {

using namespace std::string_literals;

TEST(Quote, PlainTextIsQuoted) {
  EXPECT_EQ(quote("matmul"), "\"matmul\"");
  EXPECT_EQ(quote(""), "\"\"");
  EXPECT_EQ(quote("it's", kQuoteMaxBytes, '\''), "'it\\'s'");
  EXPECT_EQ(quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
}

TEST(Quote, ControlAndBinaryBytesAreEscaped) {
  // Issue 14, class 10: a NUL byte truncated a message; binary bytes reached the terminal.
  EXPECT_EQ(quote("ab\0cd"s), "\"ab\\x00cd\"");
  EXPECT_EQ(quote("\x1b[2J\x7f\t\n\r"), "\"\\x1b[2J\\x7f\\t\\n\\r\"");
  // Bytes that are not UTF-8: a lone continuation byte, a truncated sequence, an overlong form,
  // a surrogate, a code point above U+10FFFF.
  EXPECT_EQ(quote("\x80"), "\"\\x80\"");
  EXPECT_EQ(quote("\xe2\x82"), "\"\\xe2\\x82\"");
  EXPECT_EQ(quote("\xc0\xaf"), "\"\\xc0\\xaf\"");
  EXPECT_EQ(quote("\xed\xa0\x80"), "\"\\xed\\xa0\\x80\"");
  EXPECT_EQ(quote("\xf4\x90\x80\x80"), "\"\\xf4\\x90\\x80\\x80\"");
  // A C1 control (CSI, U+009B) is valid UTF-8 but escaped.
  EXPECT_EQ(quote("\xc2\x9b"), "\"\\xc2\\x9b\"");
  // The .npy magic as it would appear in a header error.
  EXPECT_EQ(quote("\x93NUMPY\x01\x00"s), "\"\\x93NUMPY\\x01\\x00\"");
}

TEST(Quote, ValidUtf8IsKept) {
  EXPECT_EQ(quote("Gewichte_Schicht_1_\xc3\xa4\xe2\x82\xac\xf0\x9f\x98\x80"),
            "\"Gewichte_Schicht_1_\xc3\xa4\xe2\x82\xac\xf0\x9f\x98\x80\"");
}

TEST(Quote, LongTextIsCutWithAMarker) {
  // Issue 14, class 10: whole 90 KB headers were echoed.
  const std::string header(90000, 'x');
  const std::string q = quote(header);
  EXPECT_EQ(q, "\"" + std::string(kQuoteMaxBytes, 'x') + "\"... (90000 bytes)");
  EXPECT_EQ(quote("abcdef", 3), "\"abc\"... (6 bytes)");
  EXPECT_EQ(quote("abc", 3), "\"abc\"");
  // The cut never splits a UTF-8 character: the 2-byte "\xc3\xa4" does not fit after "ab" in 3.
  EXPECT_EQ(quote("ab\xc3\xa4", 3), "\"ab\"... (4 bytes)");
  // The limit counts input bytes; an escaped byte still counts once.
  EXPECT_EQ(quote("\x01\x02\x03\x04", 2), "\"\\x01\\x02\"... (4 bytes)");
}

}  // namespace
}  // namespace tpuw
