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

#include "owning_trainer.h"

namespace tpuw::runtime {
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
  return std::make_unique<OwningTrainer<DeviceTrainer>>(std::move(dev), [&](Device& d) {
    return DeviceTrainer(d, std::move(tm), options.batch, options.sgd);
  });
}

}  // namespace tpuw::runtime
