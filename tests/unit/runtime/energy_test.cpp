// The energy model (tpuw/runtime/energy.h, docs/energy.md): events from the counters, the default
// table, overrides from a file and the refusals of a bad one.
#include "tpuw/runtime/energy.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "tpuw/error.h"

namespace tpuw::runtime {
namespace {

PerfCounters counters() {
  PerfCounters p;
  p.cycles = 1000;
  p.mxu_active = 100;
  p.weight_shift = 20;
  p.act_busy = 10;
  p.rd_bytes = 4000;
  p.wr_bytes = 1000;
  return p;
}

TEST(Energy, EventsFromTheCountersAtTheDefaultCosts) {
  const EnergyTable t;
  const Energy e = estimate_energy(counters(), 16, false, t);
  EXPECT_DOUBLE_EQ(e.macs, 256.0 * 100);
  EXPECT_DOUBLE_EQ(e.vector_ops, 16.0 * 10);
  EXPECT_DOUBLE_EQ(e.sram_bytes, 16.0 * 120 + 5000);
  EXPECT_DOUBLE_EQ(e.acc_bytes, 8.0 * 16 * 110);
  EXPECT_DOUBLE_EQ(e.dram_bytes, 5000.0);
  EXPECT_DOUBLE_EQ(e.mac_pj, 25600 * 0.23);
  EXPECT_DOUBLE_EQ(e.vector_pj, 160 * 0.9);
  EXPECT_DOUBLE_EQ(e.sram_pj, 6920 * 1.25);
  EXPECT_DOUBLE_EQ(e.acc_pj, 14080 * 1.25);
  EXPECT_DOUBLE_EQ(e.dram_pj, 5000 * 162.5);
  EXPECT_DOUBLE_EQ(e.total_pj(), e.compute_pj() + e.data_pj());
  EXPECT_GT(e.data_share(), 0.9);
  EXPECT_LE(e.data_share(), 1.0);
  // bf16: twice the operand bytes, the bf16 MAC.
  const Energy b = estimate_energy(counters(), 16, true, t);
  EXPECT_DOUBLE_EQ(b.mac_pj, 25600 * 2.0);
  EXPECT_DOUBLE_EQ(b.sram_bytes, 2 * 16.0 * 120 + 5000);
  // TOPS/W: 2 ops per useful MAC per joule.
  EXPECT_DOUBLE_EQ(tops_per_watt(1000, e), 2000.0 / (e.total_pj() * 1e-12) * 1e-12);
  EXPECT_EQ(tops_per_watt(1000, Energy{}), 0.0);
  const nlohmann::ordered_json j = e.to_json();
  EXPECT_DOUBLE_EQ(j["total_uj"].get<double>(), e.total_pj() * 1e-6);
  EXPECT_DOUBLE_EQ(j["data_share"].get<double>(), e.data_share());
  Energy sum = e;
  sum += b;
  EXPECT_DOUBLE_EQ(sum.total_pj(), e.total_pj() + b.total_pj());
  EXPECT_NE(energy_line(e).find(" uJ (moving data "), std::string::npos) << energy_line(e);
}

std::string write_table(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/tpuw_energy_" + name + ".json";
  std::ofstream(path) << text;
  return path;
}

TEST(Energy, TableFromAFileOverridesTheDefaults) {
  const std::string path = write_table("ok", R"({"int8_mac_pj": 0.5, "dram_byte_pj": 40, "source": "mine"})");
  const EnergyTable t = EnergyTable::load(path);
  EXPECT_EQ(t.int8_mac_pj, 0.5);
  EXPECT_EQ(t.dram_byte_pj, 40);
  EXPECT_EQ(t.bf16_mac_pj, EnergyTable{}.bf16_mac_pj);
  EXPECT_EQ(t.source, "mine");
  EXPECT_EQ(t.to_json()["int8_mac_pj"].get<double>(), 0.5);
  std::remove(path.c_str());
}

TEST(Energy, BadTablesAreRefusedNamingTheKey) {
  const struct {
    const char* name;
    const char* text;
    const char* says;
  } cases[] = {
      {"unknown", R"({"int8_mac": 1})", "unknown key \"int8_mac\""},
      {"negative", R"({"sram_byte_pj": -1})", "sram_byte_pj must be a finite number >= 0"},
      {"string", R"({"acc_byte_pj": "1"})", "acc_byte_pj must be a finite number >= 0"},
      {"notjson", "int8_mac_pj = 1", "not JSON"},
      {"array", "[1, 2]", "expected a JSON object"},
      {"source", R"({"source": 3})", "'source' must be a string"},
  };
  for (const auto& c : cases) {
    const std::string path = write_table(c.name, c.text);
    try {
      (void)EnergyTable::load(path);
      ADD_FAILURE() << c.name << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadFile) << c.name;
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << c.name << ": " << e.what();
    }
    std::remove(path.c_str());
  }
  EXPECT_THROW((void)EnergyTable::load(::testing::TempDir() + "/no_such_energy_table.json"), Error);
}

}  // namespace
}  // namespace tpuw::runtime
