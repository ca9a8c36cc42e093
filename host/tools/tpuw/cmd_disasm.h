// tpuw disasm: disassemble raw 16-byte instructions, one per line with its index.
#pragma once

#include <memory>

namespace CLI {
class App;
}

namespace tpuw::cli {

struct DisasmOpts;

/// The `disasm` subcommand: registered on the app, executed by main() after parsing.
class DisasmCommand {
 public:
  explicit DisasmCommand(CLI::App& app);
  /// Whether `disasm` was given on the command line.
  bool selected() const;
  /// Runs the command and returns the exit code (0 ok); errors are thrown (tpuw::Error)
  /// and reported by main().
  int execute() const;

 private:
  std::shared_ptr<DisasmOpts> opts_;
  CLI::App* sub_ = nullptr;
};

}  // namespace tpuw::cli
