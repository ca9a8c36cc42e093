// tpuw/checked.h: exact overflow detection for unsigned sizes and signed dimensions.
#include "tpuw/checked.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

namespace tpuw {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

std::string message_of(auto&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Checked, TryMulAndAddAreExact) {
  EXPECT_EQ(try_mul<uint64_t>(uint64_t{1} << 32, (uint64_t{1} << 32) - 1), (uint64_t{1} << 32) * ((uint64_t{1} << 32) - 1));
  EXPECT_FALSE(try_mul<uint64_t>(uint64_t{1} << 32, uint64_t{1} << 32));
  EXPECT_EQ(try_mul<uint64_t>(kMax, 1), kMax);
  EXPECT_EQ(try_mul<uint64_t>(kMax, 0), 0u);
  EXPECT_FALSE(try_mul<uint64_t>(kMax, 2));
  EXPECT_EQ(try_add<uint64_t>(kMax - 1, 1), kMax);
  EXPECT_FALSE(try_add<uint64_t>(kMax, 1));
  // Signed: the overflow the importer's dimension products had (undefined behaviour in plain C++).
  EXPECT_FALSE(try_mul<int64_t>(int64_t{1} << 62, 2));
  EXPECT_EQ(try_mul<int64_t>(-(int64_t{1} << 62), 2), std::numeric_limits<int64_t>::min());
  EXPECT_FALSE(try_mul<int64_t>(-1, std::numeric_limits<int64_t>::min()));
  EXPECT_FALSE(try_add<int64_t>(std::numeric_limits<int64_t>::max(), 1));
}

TEST(Checked, ThrowsWithTheQuantityNamed) {
  // The example: M = 2^60 + 1 rows of K = 16.
  const std::string msg = message_of([] { (void)checked_mul<uint64_t>(1152921504606846977ull, 16, "--m * --k"); });
  EXPECT_EQ(msg, "--m * --k: 1152921504606846977 * 16 overflows a 64-bit size");
  try {
    (void)checked_add<uint64_t>(kMax, 2, "header + data", ErrorKind::kBadFile);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadFile);
    EXPECT_STREQ(e.what(), "header + data: 18446744073709551615 + 2 overflows a 64-bit size");
  }
  try {
    (void)checked_mul<int64_t>(int64_t{3} << 61, 2, "dims");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("overflows a 64-bit integer"), std::string::npos) << e.what();
  }
  EXPECT_EQ(checked_mul<uint64_t>(6, 7, "x"), 42u);
}

TEST(Checked, ProductOfDimensions) {
  EXPECT_EQ(checked_product<uint64_t>({}, "scalar"), 1u);
  EXPECT_EQ(checked_product<uint64_t>({2, 3, 4}, "t"), 24u);
  // A zero anywhere is an empty tensor, even after a product that would overflow.
  EXPECT_EQ(checked_product<uint64_t>({kMax, kMax, 0}, "t"), 0u);
  EXPECT_EQ(message_of([] { (void)checked_product<uint64_t>({1u << 20, 1u << 20, 1u << 20, 1u << 20}, "w"); }),
            "w: the product of [1048576, 1048576, 1048576, 1048576] overflows a 64-bit size");
  const std::vector<int64_t> dims = {int64_t{1} << 40, int64_t{1} << 30};
  EXPECT_THROW((void)checked_product(std::span<const int64_t>(dims), "onnx"), Error);
  EXPECT_EQ(checked_size(123, "n"), size_t{123});
}

}  // namespace
}  // namespace tpuw
