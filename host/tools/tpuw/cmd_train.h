// tpuw train: trains an ONNX model (Dense/ReLU chains) with SGD and writes the same ONNX file with
// the trained initializer values (docs/training.md, "Using tpuw train"). --backend rtl|ref trains
// on the device (runtime::make_device_trainer), host in fp32 on the CPU (HostFloatTrainer).
#pragma once

#include <memory>

namespace CLI {
class App;
}

namespace tpuw::cli {

struct TrainOpts;

/// The `train` subcommand: registered on the app, executed by main() after parsing.
class TrainCommand {
 public:
  explicit TrainCommand(CLI::App& app);
  /// Whether `train` was given on the command line.
  bool selected() const;
  /// Runs the command and returns the exit code: 0 ok, 2 bad input (nothing written), 3 the loss
  /// became NaN or infinite (training stopped, the last checkpoint kept), 4 device fault, 1 other.
  int execute() const;

 private:
  std::shared_ptr<TrainOpts> opts_;
  CLI::App* sub_ = nullptr;
};

}  // namespace tpuw::cli
