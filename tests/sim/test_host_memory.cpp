#include <gtest/gtest.h>

#include <array>
#include <cstdint>

#include "tpuw/sim/error.h"
#include "tpuw/sim/host_memory.h"

namespace tpuw::sim {
namespace {

TEST(HostMemory, ReadsBackWhatWasWrittenAndStartsZeroed) {
  HostMemory m(0x1000, 256);
  EXPECT_EQ(m.base(), 0x1000u);
  EXPECT_EQ(m.size(), 256u);
  std::array<uint8_t, 4> z{1, 1, 1, 1};
  m.read(0x10FC, z.data(), 4);
  EXPECT_EQ(z, (std::array<uint8_t, 4>{0, 0, 0, 0}));
  const std::array<uint8_t, 4> v{1, 2, 3, 4};
  m.write(0x10FC, v.data(), 4);  // last four bytes
  std::array<uint8_t, 4> r{};
  m.read(0x10FC, r.data(), 4);
  EXPECT_EQ(r, v);
  m.fill(0x1000, 0xAB, 2);
  EXPECT_EQ(*m.at(0x1001), 0xAB);
}

TEST(HostMemory, ContainsHandlesEdgesAndOverflow) {
  HostMemory m(0x1000, 0x100);
  EXPECT_TRUE(m.contains(0x1000, 0x100));
  EXPECT_TRUE(m.contains(0x10FF, 1));
  EXPECT_FALSE(m.contains(0x10FF, 2));
  EXPECT_FALSE(m.contains(0x0FFF, 1));
  EXPECT_FALSE(m.contains(0x1100, 0));
  EXPECT_FALSE(m.contains(0x1080, UINT64_MAX));
}

TEST(HostMemory, OutOfWindowAccessThrowsWithTheRange) {
  HostMemory m(0x1000, 0x100);
  uint8_t b[8] = {};
  try {
    m.write(0x10FC, b, 8);
    FAIL() << "no exception";
  } catch (const SimError& e) {
    EXPECT_EQ(e.kind(), SimErrorKind::kOutOfRange);
    EXPECT_NE(std::string(e.what()).find("0x10fc"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("0x1100"), std::string::npos) << e.what();
  }
  EXPECT_THROW(m.read(0xFFF, b, 1), SimError);
  EXPECT_EQ(*m.at(0x10FC), 0);  // nothing written
}

TEST(HostMemory, RejectsBadWindows) {
  EXPECT_THROW(HostMemory(0, 0), SimError);
  EXPECT_THROW(HostMemory(UINT64_MAX - 10, 100), SimError);
}

}  // namespace
}  // namespace tpuw::sim
