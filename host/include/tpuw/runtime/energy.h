// Energy from the performance counters (docs/energy.md).
//
//   runtime::EnergyTable table;                                   // Horowitz, ISSCC 2014, 45 nm
//   runtime::Energy e = runtime::estimate_energy(perf, array_n, bf16, table);
//   e.total_pj(); e.data_share(); e.to_json();
//
// The model counts what the PERF counters say the device did, at a cost per event from a cited
// table (defaults: M. Horowitz, "Computing's energy problem (and what we can do about it)", ISSCC
// 2014, 45 nm, 0.9 V), overridable from a JSON file (EnergyTable::load). What each counter stands
// for, and what the model leaves out (leakage, clock tree, control, instruction fetch logic), is in
// docs/energy.md. The same counters give the same energy on rtl and ref whenever their counters
// agree; ref's cycle counters are its analytic estimate.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "tpuw/device.h"

namespace tpuw::runtime {

/// Picojoules per event.
struct EnergyTable {
  double int8_mac_pj = 0.23;   // 8-bit multiply 0.2 + 8-bit add 0.03
  double bf16_mac_pj = 2.0;    // 16-bit fp multiply 1.1 + 32-bit fp add 0.9 (fp32 accumulate)
  double vector_op_pj = 0.9;   // one 32-bit fp operation of the activation / vector unit lanes
  double sram_byte_pj = 1.25;  // unified and weight buffer: 8 KB SRAM, 10 pJ per 64-bit access
  double acc_byte_pj = 1.25;   // accumulators: 8 KB SRAM, 10 pJ per 64-bit access
  double dram_byte_pj = 162.5; // host memory over AXI: DRAM 1.3 nJ per 64 bits (the low end of 1.3-2.6)
  std::string source = "Horowitz, ISSCC 2014, 45 nm (tpuw default)";

  /// The table with the keys of a JSON object file overriding the defaults: any of
  /// int8_mac_pj, bf16_mac_pj, vector_op_pj, sram_byte_pj, acc_byte_pj, dram_byte_pj (finite,
  /// >= 0) and source (a string). Throws Error(kBadFile) naming the file and the key for anything
  /// else (an unknown key, a negative or non-numeric value, malformed JSON).
  static EnergyTable load(const std::filesystem::path& path);
  nlohmann::ordered_json to_json() const;
};

/// The activity the counters stand for and its energy, in picojoules.
struct Energy {
  // Events (from the counters).
  double macs = 0;         // N^2 per row entering the array (every PE works on every row)
  double vector_ops = 0;   // N lanes per activation / vector unit busy cycle
  double sram_bytes = 0;   // MXU operand rows, weight shifts, and every DMA byte landing on chip
  double acc_bytes = 0;    // partial-sum read-modify-write per MXU row, ACC rows read and written by ACT/VECTOR
  double dram_bytes = 0;   // RD_BYTES + WR_BYTES (instruction fetch included)
  // Energy of each.
  double mac_pj = 0, vector_pj = 0, sram_pj = 0, acc_pj = 0, dram_pj = 0;

  double total_pj() const { return mac_pj + vector_pj + sram_pj + acc_pj + dram_pj; }
  double compute_pj() const { return mac_pj + vector_pj; }
  double data_pj() const { return sram_pj + acc_pj + dram_pj; }
  /// Share of the energy spent moving data (on-chip SRAM and host memory), 0 when nothing ran.
  double data_share() const { return total_pj() > 0 ? data_pj() / total_pj() : 0.0; }
  Energy& operator+=(const Energy& b);

  /// {"total_uj", "compute_uj", "data_uj", "data_share", "mac_uj", "vector_uj", "sram_uj",
  ///  "acc_uj", "dram_uj"} in microjoules.
  nlohmann::ordered_json to_json() const;
};

/// Energy of what `perf` counted on an N x N device; `bf16` selects the MAC cost of the rows
/// (a run is one precision).
Energy estimate_energy(const PerfCounters& perf, uint32_t array_n, bool bf16, const EnergyTable& table);

/// Useful operations per joule as TOPS/W: 2 * macs (the model's multiply-accumulates) over the
/// energy; 0 when nothing ran.
double tops_per_watt(uint64_t useful_macs, const Energy& e);

/// "82.22 uJ (moving data 95%: DRAM 66, SRAM 1.91, ACC 10.5; computing: MAC 3.86, vector 0)": the
/// total and its parts in one unit (uJ below 1 mJ, mJ below 1 J, else J).
std::string energy_line(const Energy& e);

}  // namespace tpuw::runtime
