// Placeholder for make_device_trainer (tpuw/runtime/device_trainer_factory.h) until the device
// trainer is merged; deleted then (it defines the function itself).
#include <fmt/format.h>

#include "tpuw/error.h"
#include "tpuw/runtime/device_trainer_factory.h"

namespace tpuw::runtime {

std::unique_ptr<Trainer> make_device_trainer(const std::filesystem::path& model, const DeviceTrainerOptions& options) {
  throw Error(ErrorKind::kUnsupported,
              fmt::format("{}: device training (--backend {}) is not built yet; use --backend host (fp32 on the CPU)",
                          model.string(), options.backend));
}

}  // namespace tpuw::runtime
