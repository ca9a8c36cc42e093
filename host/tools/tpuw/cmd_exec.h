// tpuw exec: run an assembly program on the device: load its .zero/.data regions, run it, print
// its .dump regions and check its .expect regions (and an expected fault).
#pragma once

#include <memory>

namespace CLI {
class App;
}

namespace tpuw::cli {

struct ExecOpts;

/// The `exec` subcommand: registered on the app, executed by main() after parsing.
class ExecCommand {
 public:
  explicit ExecCommand(CLI::App& app);
  /// Whether `exec` was given on the command line.
  bool selected() const;
  /// Runs the command and returns the exit code (0 ok, 3 an .expect or an expected fault not met, 4 an unexpected fault); errors are thrown (tpuw::Error)
  /// and reported by main().
  int execute() const;

 private:
  std::shared_ptr<ExecOpts> opts_;
  CLI::App* sub_ = nullptr;
};

}  // namespace tpuw::cli
