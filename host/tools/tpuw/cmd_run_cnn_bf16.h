// tpuw run MODEL.onnx --precision bf16 for a CNN: compiler::compile_bf16_cnn and runtime::run_cnn_bf16
// (docs/network_compiler.md, "bf16 CNNs"), with the options and the report of the int8 CNN path
// (cmd_run_cnn.h).
#pragma once

#include "cmd_run_cnn.h"

namespace tpuw::cli {

/// Runs a CNN in bf16: prints the report (or --json), writes --output; returns the exit code 0.
/// o.calibrate must be empty (bf16 needs no calibration). Throws tpuw::Error for bad input (before
/// the device is opened), a --check mismatch (kMismatch: the device output differs from the CPU
/// bf16 contract, forward_cnn_bf16_host) and device faults.
int run_cnn_bf16_model(const CnnRunOpts& o);

}  // namespace tpuw::cli
