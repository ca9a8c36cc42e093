// The firmware programs (firmware/programs/*.s) produce their documented outputs on the
// reference model: every .expect region and the .expect_fault.
#include <algorithm>
#include <filesystem>

#include "ref_harness.h"

namespace tpuw::ref::test {
namespace {

namespace fs = std::filesystem;

void run_and_check(const fs::path& path, const DeviceParams& params) {
  SCOPED_TRACE(path.filename().string() + " on N=" + std::to_string(params.array_n));
  isa::Program prog = isa::assemble_file(path);
  Dev d(params);
  for (const auto& z : prog.zeros) d.put(z.addr, std::vector<uint8_t>(z.bytes, 0));
  for (const auto& s : prog.data) d.put(s.addr, s.bytes);
  d.submit_bytes(prog.code);
  d.run();
  ASSERT_TRUE(d.dev.irq());
  if (prog.expect_fault) {
    EXPECT_EQ(d.reg(r::kFaultCause), static_cast<uint32_t>(prog.expect_fault->cause));
    EXPECT_EQ(d.reg(r::kFaultInfo), prog.expect_fault->info);
    EXPECT_EQ(d.reg(r::kFaultPc), kRing + 16 * prog.expect_fault->index);
  } else {
    EXPECT_EQ(d.reg(r::kFaultCause), 0u);
    EXPECT_EQ(d.reg(r::kStatus), 0u);
  }
  for (const auto& e : prog.expects) {
    EXPECT_EQ(d.get<uint8_t>(e.addr, e.bytes.size()), e.bytes) << ".expect " << e.name << " (line " << e.line << ")";
  }
}

std::vector<fs::path> programs() {
  std::vector<fs::path> v;
  for (const auto& e : fs::directory_iterator(TPUW_FIRMWARE_DIR)) {
    if (e.path().extension() == ".s") v.push_back(e.path());
  }
  std::sort(v.begin(), v.end());
  return v;
}

TEST(RefPrograms, FirmwareProgramsProduceTheirExpectedOutputs) {
  const auto progs = programs();
  ASSERT_GE(progs.size(), 5u);
  for (const auto& p : progs) {
    const auto prog = isa::assemble_file(p);
    EXPECT_TRUE(!prog.expects.empty() || prog.expect_fault) << p << " checks nothing";
    bool ran = false;
    for (const auto& cfg : kDeviceConfigs) {
      if (prog.array_n == 0 || prog.array_n == cfg.array_n) {
        run_and_check(p, cfg);
        ran = true;
      }
    }
    EXPECT_TRUE(ran) << p << " has no built configuration";
  }
}

TEST(RefPrograms, Gemm16DataMatchesIntegerMath) {
  // The .expect block of gemm_n16.s is C = A*W of its data files.
  const auto prog = isa::assemble_file(fs::path(TPUW_FIRMWARE_DIR) / "gemm_n16.s");
  ASSERT_EQ(prog.data.size(), 2u);
  const auto& a = prog.data[0].bytes;
  const auto& w = prog.data[1].bytes;
  ASSERT_EQ(a.size(), 256u);
  ASSERT_EQ(w.size(), 256u);
  std::vector<uint8_t> c;
  for (int i = 0; i < 16; ++i) {
    for (int n = 0; n < 16; ++n) {
      int32_t s = 0;
      for (int k = 0; k < 16; ++k) s += static_cast<int8_t>(a[i * 16 + k]) * static_cast<int8_t>(w[k * 16 + n]);
      for (int b = 0; b < 4; ++b) c.push_back(static_cast<uint8_t>(static_cast<uint32_t>(s) >> (8 * b)));
    }
  }
  ASSERT_FALSE(prog.expects.empty());
  EXPECT_EQ(prog.expects[0].bytes, c);
}

}  // namespace
}  // namespace tpuw::ref::test
