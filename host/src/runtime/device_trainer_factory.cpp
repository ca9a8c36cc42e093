// make_device_trainer (tpuw/runtime/device_trainer_factory.h): the CLI's way to a device trainer.
// Imports the ONNX model, runs the training pass, opens the device with enough memory for the
// trainer's buffers and keeps it next to the DeviceTrainer that drives it.
//
// Merge note: this is the real definition the factory header announces; host/src/runtime/
// device_trainer_stub.cpp (helper "trainfront") must go when both are merged.
#include <fmt/format.h>

#include "tpuw/compiler/onnx_importer.h"
#include "tpuw/compiler/training.h"
#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/runtime/device_trainer.h"
#include "tpuw/runtime/device_trainer_factory.h"

namespace tpuw::runtime {
namespace {

/// A DeviceTrainer that owns its device.
class OwningDeviceTrainer final : public Trainer {
 public:
  OwningDeviceTrainer(Device device, compiler::TrainModel model, int64_t batch, const SgdConfig& sgd)
      : device_(std::move(device)), trainer_(device_, std::move(model), batch, sgd) {}

  TrainStepReport step(std::span<const float> inputs, std::span<const int64_t> labels, int64_t rows) override {
    return trainer_.step(inputs, labels, rows);
  }
  std::vector<float> logits(std::span<const float> inputs, int64_t rows) override {
    return trainer_.logits(inputs, rows);
  }
  TrainState state() const override { return trainer_.state(); }
  void load_state(const TrainState& s) override { trainer_.load_state(s); }
  int64_t batch() const override { return trainer_.batch(); }
  int64_t classes() const override { return trainer_.classes(); }
  std::string name() const override { return trainer_.name(); }

 private:
  Device device_;
  DeviceTrainer trainer_;
};

}  // namespace

std::unique_ptr<Trainer> make_device_trainer(const std::filesystem::path& model, const DeviceTrainerOptions& options) {
  if (options.batch < 1) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--batch {}: must be >= 1", options.batch));
  }
  compiler::TrainModel tm = compiler::build_training_model(compiler::import_onnx_file(model));
  BackendConfig cfg;
  cfg.array_n = options.array_n;
  const uint64_t need = DeviceTrainer::memory_bytes(tm, options.batch, options.array_n) + (16ull << 20);
  const uint64_t size = std::max<uint64_t>(cfg.memory.size, (need + (1 << 20) - 1) & ~uint64_t{(1 << 20) - 1});
  if (size > (4ull << 30)) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("{}: training at batch {} needs {} MiB of device memory; the device addresses at most "
                            "4 GiB",
                            model.string(), options.batch, need >> 20));
  }
  cfg.memory.size = size;
  Device dev = Device::open(options.backend, cfg);
  return std::make_unique<OwningDeviceTrainer>(std::move(dev), std::move(tm), options.batch, options.sgd);
}

}  // namespace tpuw::runtime
