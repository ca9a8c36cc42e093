// tpuw run: an ONNX model on the device (import, int8 quantization, network compiler, run), on one
// device or on several (--devices K --strategy data|pipeline, tpuw/worker/strategies.h).
#pragma once

#include <memory>

namespace CLI {
class App;
}

namespace tpuw::cli {

struct RunOpts;

/// The `run` subcommand: registered on the app, executed by main() after parsing.
class RunCommand {
 public:
  explicit RunCommand(CLI::App& app);
  /// Whether `run` was given on the command line.
  bool selected() const;
  /// Runs the command; prints errors as "tpuw: error: ..." and returns the exit code: 0 ok, 2 bad
  /// input (unreadable/unsupported model or tensors, bad options), 3 --check mismatch, 4 device
  /// fault or timeout, 1 anything else.
  int execute() const;

 private:
  std::shared_ptr<RunOpts> opts_;
  CLI::App* sub_ = nullptr;
};

}  // namespace tpuw::cli
