// The one entry point the CLI (`tpuw train --backend rtl|ref`) uses to get a device trainer,
// declared here so the CLI does not depend on how the device trainer is built.
//
// The definition belongs to the device trainer (host/src/runtime/device_trainer*.cpp, helper
// "trainback"); until that is merged, host/src/runtime/device_trainer_stub.cpp defines it to throw
// Error(kUnsupported) "device training not built yet". Whoever adds the real definition deletes
// the stub (file and its line in host/src/runtime/CMakeLists.txt).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "tpuw/runtime/trainer.h"

namespace tpuw::runtime {

struct DeviceTrainerOptions {
  std::string backend = "ref";  // a tpuw::backend_names() entry: "rtl" or "ref"
  unsigned array_n = 16;        // device configuration (N x N MXU)
  int64_t batch = 64;           // most rows per step
  SgdConfig sgd;
};

/// A runtime::Trainer that trains `model` (an ONNX file) on the device. Errors as the host trainer:
/// kUnsupported naming the node for an untrainable model, kInvalidArgument for bad options.
std::unique_ptr<Trainer> make_device_trainer(const std::filesystem::path& model, const DeviceTrainerOptions& options);

}  // namespace tpuw::runtime
