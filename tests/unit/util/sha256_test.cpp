// SHA-256 (tpuw/sha256.h) against the FIPS 180-4 examples and Python's hashlib, whole and in pieces.
#include "tpuw/sha256.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace tpuw {
namespace {

TEST(Sha256, FipsExamples) {
  EXPECT_EQ(sha256_hex(std::string_view("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex(std::string_view("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(std::string_view("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PiecesGiveTheWholeDigest) {
  std::vector<uint8_t> b;
  for (int r = 0; r < 3; ++r) {
    for (int i = 0; i < 256; ++i) b.push_back(static_cast<uint8_t>(i));
  }
  const std::string whole = sha256_hex(b);  // hashlib.sha256(bytes(range(256)) * 3)
  EXPECT_EQ(whole, "f3a25aa93aa2fbba28d79260535bbd6a5eb0fc1c24a8b0f04e12b484c1dfe363");
  for (const size_t piece : {1u, 7u, 55u, 56u, 63u, 64u, 65u, 300u}) {
    Sha256 h;
    for (size_t i = 0; i < b.size(); i += piece) h.update(std::span<const uint8_t>(b.data() + i, std::min(piece, b.size() - i)));
    EXPECT_EQ(h.hex(), whole) << "pieces of " << piece;
  }
}

}  // namespace
}  // namespace tpuw
