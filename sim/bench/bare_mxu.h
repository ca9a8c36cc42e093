// Simulation-rate baseline: the bare 16x16 weight-stationary array (tpu_mxu, verilated alone)
// streaming one random activation row per cycle with a weight tile loaded, tracing off.
#pragma once

#include <cstdint>

namespace tpuw::bench {

struct BareMxuRate {
  uint64_t cycles;         // clock cycles simulated (streaming phase only)
  double seconds;          // wall-clock time of those cycles
  double cycles_per_s;     // cycles / seconds
  double pe_cycles_per_s;  // cycles_per_s * 16 * 16
};

// Simulates `cycles` streaming cycles of a fresh model; the array is reset and a tile shifted in
// first (not timed).
// bf16: the rows are bf16 (the fp32 column sums), else int8.
BareMxuRate run_bare_mxu(uint64_t cycles, bool bf16 = false);

}  // namespace tpuw::bench
