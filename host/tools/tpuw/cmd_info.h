// tpuw info: the device configuration read from its registers (ID, version, array size, buffer
// depths, features, host memory); with --devices K, what each of K devices says about itself.
#pragma once

#include <memory>

namespace CLI {
class App;
}

namespace tpuw::cli {

struct InfoOpts;

/// The `info` subcommand: registered on the app, executed by main() after parsing.
class InfoCommand {
 public:
  explicit InfoCommand(CLI::App& app);
  /// Whether `info` was given on the command line.
  bool selected() const;
  /// Runs the command and returns the exit code (0 ok); errors are thrown (tpuw::Error)
  /// and reported by main().
  int execute() const;

 private:
  std::shared_ptr<InfoOpts> opts_;
  CLI::App* sub_ = nullptr;
};

}  // namespace tpuw::cli
