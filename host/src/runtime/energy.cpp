// Energy from the performance counters: the activity model and the cost table (docs/energy.md).
#include "tpuw/runtime/energy.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>

#include "tpuw/error.h"
#include "tpuw/file_io.h"
#include "tpuw/quote.h"

namespace tpuw::runtime {

namespace {
constexpr uint64_t kMaxTableBytes = 1 << 16;

struct Key {
  const char* name;
  double EnergyTable::*field;
};
constexpr Key kKeys[] = {{"int8_mac_pj", &EnergyTable::int8_mac_pj}, {"bf16_mac_pj", &EnergyTable::bf16_mac_pj},
                         {"vector_op_pj", &EnergyTable::vector_op_pj}, {"sram_byte_pj", &EnergyTable::sram_byte_pj},
                         {"acc_byte_pj", &EnergyTable::acc_byte_pj},   {"dram_byte_pj", &EnergyTable::dram_byte_pj}};

double uj(double pj) { return pj * 1e-6; }
}  // namespace

EnergyTable EnergyTable::load(const std::filesystem::path& path) {
  const std::vector<uint8_t> bytes = read_file_bounded(path, kMaxTableBytes, "energy table");
  const std::string where = quote(path.string());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(bytes.begin(), bytes.end());
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(ErrorKind::kBadFile, fmt::format("energy table {}: not JSON: {}", where, e.what()));
  }
  if (!j.is_object()) throw Error(ErrorKind::kBadFile, fmt::format("energy table {}: expected a JSON object", where));
  EnergyTable t;
  t.source = fmt::format("{} (over the defaults)", path.filename().string());
  for (const auto& [k, v] : j.items()) {
    if (k == "source") {
      if (!v.is_string()) throw Error(ErrorKind::kBadFile, fmt::format("energy table {}: 'source' must be a string", where));
      t.source = v.get<std::string>();
      continue;
    }
    const Key* key = nullptr;
    for (const Key& c : kKeys) {
      if (k == c.name) key = &c;
    }
    if (key == nullptr) {
      throw Error(ErrorKind::kBadFile,
                  fmt::format("energy table {}: unknown key {} (known: int8_mac_pj, bf16_mac_pj, vector_op_pj, "
                              "sram_byte_pj, acc_byte_pj, dram_byte_pj, source)",
                              where, quote(k)));
    }
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0) {
      throw Error(ErrorKind::kBadFile,
                  fmt::format("energy table {}: {} must be a finite number >= 0 (picojoules), not {}", where, k,
                              quote(v.dump())));
    }
    t.*(key->field) = v.get<double>();
  }
  return t;
}

nlohmann::ordered_json EnergyTable::to_json() const {
  nlohmann::ordered_json j;
  for (const Key& c : kKeys) j[c.name] = this->*(c.field);
  j["source"] = source;
  return j;
}

Energy& Energy::operator+=(const Energy& b) {
  macs += b.macs;
  vector_ops += b.vector_ops;
  sram_bytes += b.sram_bytes;
  acc_bytes += b.acc_bytes;
  dram_bytes += b.dram_bytes;
  mac_pj += b.mac_pj;
  vector_pj += b.vector_pj;
  sram_pj += b.sram_pj;
  acc_pj += b.acc_pj;
  dram_pj += b.dram_pj;
  return *this;
}

nlohmann::ordered_json Energy::to_json() const {
  return {{"total_uj", uj(total_pj())}, {"compute_uj", uj(compute_pj())}, {"data_uj", uj(data_pj())},
          {"data_share", data_share()}, {"mac_uj", uj(mac_pj)},           {"vector_uj", uj(vector_pj)},
          {"sram_uj", uj(sram_pj)},     {"acc_uj", uj(acc_pj)},           {"dram_uj", uj(dram_pj)}};
}

Energy estimate_energy(const PerfCounters& p, uint32_t array_n, bool bf16, const EnergyTable& t) {
  const double n = array_n;
  const double operand_bytes = bf16 ? 2.0 : 1.0;
  Energy e;
  // Weight-stationary: every PE multiplies and adds once for every activation row that enters.
  e.macs = n * n * static_cast<double>(p.mxu_active);
  // The activation / vector unit processes one row of N lanes per busy cycle.
  e.vector_ops = n * static_cast<double>(p.act_busy);
  // UB reads of the MXU's operand rows, weight-buffer reads of the rows shifted into the array, and
  // the on-chip side of every DMA byte.
  e.sram_bytes = operand_bytes * n * static_cast<double>(p.mxu_active + p.weight_shift) +
                 static_cast<double>(p.rd_bytes + p.wr_bytes);
  // ACC: each MXU row's N 32-bit partial sums are read and written back (accumulate), and each
  // ACTIVATE / VECTOR row reads and writes N 32-bit lanes.
  e.acc_bytes = 8.0 * n * static_cast<double>(p.mxu_active + p.act_busy);
  e.dram_bytes = static_cast<double>(p.rd_bytes + p.wr_bytes);
  e.mac_pj = e.macs * (bf16 ? t.bf16_mac_pj : t.int8_mac_pj);
  e.vector_pj = e.vector_ops * t.vector_op_pj;
  e.sram_pj = e.sram_bytes * t.sram_byte_pj;
  e.acc_pj = e.acc_bytes * t.acc_byte_pj;
  e.dram_pj = e.dram_bytes * t.dram_byte_pj;
  return e;
}

double tops_per_watt(uint64_t useful_macs, const Energy& e) {
  const double joules = e.total_pj() * 1e-12;
  return joules > 0 ? 2.0 * static_cast<double>(useful_macs) / joules * 1e-12 : 0.0;
}

std::string energy_line(const Energy& e) {
  // One unit for the total and its parts: uJ, mJ or J.
  const double total = e.total_pj();
  const auto [scale, unit] = total < 1e9 ? std::pair{1e-6, "uJ"} : total < 1e12 ? std::pair{1e-9, "mJ"} : std::pair{1e-12, "J"};
  return fmt::format("{:.4g} {} (moving data {:.0f}%: DRAM {:.3g}, SRAM {:.3g}, ACC {:.3g}; computing: MAC {:.3g}, "
                     "vector {:.3g})",
                     total * scale, unit, 100.0 * e.data_share(), e.dram_pj * scale, e.sram_pj * scale,
                     e.acc_pj * scale, e.mac_pj * scale, e.vector_pj * scale);
}

}  // namespace tpuw::runtime
