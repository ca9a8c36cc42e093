// tpuw_bench_mxu: simulation rate of the bare 16x16 MXU (the baseline for the device model).
//   tpuw_bench_mxu [--cycles N] [--json]
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <cstdint>

#include "bare_mxu.h"

int main(int argc, char** argv) {
  CLI::App app{"Simulation rate of the bare verilated 16x16 MXU"};
  uint64_t cycles = 2'000'000;
  bool json = false;
  app.add_option("--cycles", cycles, "streaming cycles to simulate")->check(CLI::Range(1ull, 1ull << 40));
  app.add_flag("--json", json, "print one JSON object instead of the human line");
  CLI11_PARSE(app, argc, argv);

  const tpuw::bench::BareMxuRate r = tpuw::bench::run_bare_mxu(cycles);
  if (json) {
    fmt::print(
        "{{\"bench\":\"bare_mxu\",\"array_n\":16,\"cycles\":{},\"seconds\":{:.6f},"
        "\"cycles_per_s\":{:.1f},\"pe_cycles_per_s\":{:.1f}}}\n",
        r.cycles, r.seconds, r.cycles_per_s, r.pe_cycles_per_s);
  } else {
    fmt::print("bare MXU 16x16: {} cycles in {:.3f} s = {:.3f} M cycles/s ({:.2f}e8 PE-cycles/s)\n", r.cycles,
               r.seconds, r.cycles_per_s / 1e6, r.pe_cycles_per_s / 1e8);
  }
  return 0;
}
