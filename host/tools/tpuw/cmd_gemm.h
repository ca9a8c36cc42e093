// tpuw gemm: C[M,N] int32 = A[M,K] int8 . B[K,N] int8 on the device (tpuw/runtime/gemm.h), from
// .npy operands or random ones; --check compares with the other backend and the CPU; with
// --devices K, B's columns split over K devices (tpuw/worker/strategies.h).
#pragma once

#include <memory>

namespace CLI {
class App;
}

namespace tpuw::cli {

struct GemmArgs;

/// The `gemm` subcommand: registered on the app, executed by main() after parsing.
class GemmCommand {
 public:
  explicit GemmCommand(CLI::App& app);
  /// Whether `gemm` was given on the command line.
  bool selected() const;
  /// Runs the command and returns the exit code (0 ok, 3 --check mismatch); errors are thrown (tpuw::Error)
  /// and reported by main().
  int execute() const;

 private:
  std::shared_ptr<GemmArgs> opts_;
  CLI::App* sub_ = nullptr;
};

}  // namespace tpuw::cli
