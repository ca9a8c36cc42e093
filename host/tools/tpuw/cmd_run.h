// tpuw run: an ONNX model on the device (import, int8 quantization, network compiler, run).
#pragma once

namespace CLI {
class App;
}

namespace tpuw::cli {

/// Adds the `run` subcommand to `app`. When the subcommand is given, its callback (invoked by
/// app.parse) runs the command, prints errors as "tpuw: error: ..." and ends the process with the
/// command's exit code: 0 ok, 2 bad input (unreadable/unsupported model or tensors, bad options),
/// 3 --check mismatch, 4 device fault or timeout, 1 anything else.
void register_run(CLI::App& app);

}  // namespace tpuw::cli
