// tpuw run for convolutional models: a model whose graph has a Conv or a pooling layer goes through
// compiler::compile_quantized_cnn (int8, calibrated) and runtime::run_cnn instead of the dense-layer
// path of cmd_run.cpp, with the same options and outputs (docs/network_compiler.md, "tpuw run and CNNs").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tpuw {
class OutputSet;
}  // namespace tpuw
#include "tpuw/runtime/energy.h"

namespace tpuw::cli {

/// The options of `tpuw run` the CNN path uses (filled by cmd_run.cpp from its RunOpts).
struct CnnRunOpts {
  std::string model, input, output, labels, calibrate;  // input, calibrate: as reports name them
  std::vector<std::string> inputs, calibrates;           // as given: FILE or NAME=FILE each
  std::string backend = "rtl";
  unsigned array_n = 16;
  uint64_t batch = 0;  // 0: all rows in one run (several devices: the micro-batch, 0 = automatic)
  bool multi = false;    // --devices / --strategy given: data-parallel over a Worker (cnn_report.h)
  unsigned devices = 1;  // --devices K
  std::string trace;     // --trace FILE (Chrome trace-event JSON, docs/tracing.md)
  std::string inject_fault;  // hidden, tests: "J": a memory fault on the device that runs micro-batch J, once
  double mpi_timeout = 120.0;    // under mpirun: seconds a rank waits for the others (cnn_report.h CnnRanks)
  std::string inject_rank_fail;  // hidden, tests: under mpirun, "R" (rank R's run fails) or "R:exit" (it exits)
  bool json = false;
  bool quiet = false;
  bool check = false;
  OutputSet* outputs = nullptr;  // where --output and --trace are staged (committed by tpuw run on success)
  runtime::EnergyTable table;  // --energy-table (the default table without it)
};

/// Whether the ONNX model at `path` is a CNN (its graph has a Conv, AveragePool,
/// GlobalAveragePool, MaxPool or Pad node); false for a file the graph importer refuses (the
/// dense-layer path then reports it).
bool is_cnn_model(const std::string& path);

/// "node 'NAME' (OP)" of the model's first convolution, pooling or Pad node (what makes it a CNN),
/// for refusals that must name the node; empty when there is none or the file does not import.
std::string cnn_node_label(const std::string& path);

/// Runs a CNN model: prints the report (or --json), writes --output; returns the exit code 0.
/// Throws tpuw::Error for bad input (before the device is opened), a --check mismatch and device
/// faults.
int run_cnn_model(const CnnRunOpts& o);

}  // namespace tpuw::cli
