// tpuw asm: assemble a program (.s, tpuw/asm.h) into raw 16-byte instructions.
#pragma once

#include <memory>

namespace CLI {
class App;
}

namespace tpuw::cli {

struct AsmOpts;

/// The `asm` subcommand: registered on the app, executed by main() after parsing.
class AsmCommand {
 public:
  explicit AsmCommand(CLI::App& app);
  /// Whether `asm` was given on the command line.
  bool selected() const;
  /// Runs the command and returns the exit code (0 ok); errors are thrown (tpuw::Error)
  /// and reported by main().
  int execute() const;

 private:
  std::shared_ptr<AsmOpts> opts_;
  CLI::App* sub_ = nullptr;
};

}  // namespace tpuw::cli
