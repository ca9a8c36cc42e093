// The backend registry: make_backend() picks a Backend implementation by name (and Device::open
// uses it, so that the driver itself links no backend). Which ones exist depends on what was
// built: `ref` needs tpuw_ref, `rtl` needs the verilated model (tpuw_sim). A name that is known
// but not built gives a clear error; there is never a silent fallback to another backend.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>

#include "tpuw/backend.h"
#include "tpuw/device.h"
#include "tpuw/device_configs.h"
#include "tpuw/error.h"
#include "tpuw/serial.h"

#if TPUW_HAVE_REF
#include "tpuw/ref/ref_device.h"
#endif
#if TPUW_HAVE_RTL
#include "rtl_backend.h"
#endif

namespace tpuw {
namespace {

std::vector<unsigned> configured_sizes() {
  std::vector<unsigned> sizes;
  for (const auto& p : kDeviceConfigs) sizes.push_back(p.array_n);
  return sizes;
}

[[noreturn, maybe_unused]] void not_built(std::string_view name, std::string_view what) {
  throw Error(ErrorKind::kUnsupported,
              fmt::format("backend '{}' is not available in this build ({})", name, what));
}

}  // namespace

std::vector<std::string> backend_names() { return {"rtl", "ref", "serial"}; }

std::vector<unsigned> backend_array_sizes(std::string_view name) {
  if (name == "ref") return configured_sizes();
  if (name == "serial") return {4};  // the board decides; 4 = rtl/fpga/tpu_icebreaker_top.sv
  if (name == "rtl") {
#if TPUW_HAVE_RTL
    return backends::rtl_array_sizes();
#else
    return {};
#endif
  }
  throw Error(ErrorKind::kInvalidArgument,
              fmt::format("unknown backend '{}' (known: {})", name, fmt::join(backend_names(), ", ")));
}

std::unique_ptr<Backend> make_backend(std::string_view name, [[maybe_unused]] const BackendConfig& config) {
  if (name == "serial") {
    // The board decides its configuration and memory (config.array_n and config.memory are not
    // used); port and rate come from TPUW_SERIAL_PORT / TPUW_SERIAL_BAUD (tpuw/serial.h).
    if (!config.wave_path.empty()) {
      throw Error(ErrorKind::kInvalidArgument,
                  "waveforms (--wave) need the rtl backend; the serial backend talks to a board");
    }
    return serial::make_serial_backend_from_env();
  }
  if (name != "ref" && name != "rtl") {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("unknown backend '{}' (known: {})", name, fmt::join(backend_names(), ", ")));
  }
  if (name == "rtl") {
#if TPUW_HAVE_RTL
    const auto sizes = backends::rtl_array_sizes();
    if (std::find(sizes.begin(), sizes.end(), config.array_n) == sizes.end()) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("backend 'rtl' has no configuration with array size {} (built: {})",
                              config.array_n, fmt::join(sizes, ", ")));
    }
    if (!config.enable_bf16) {
      throw Error(ErrorKind::kUnsupported,
                  "backend 'rtl': the verilated models are built with EnableBf16 = 1; a device without bf16 "
                  "(enable_bf16 = false) is modelled by the ref backend only");
    }
    if (!config.enable_lut) {
      throw Error(ErrorKind::kUnsupported,
                  "backend 'rtl': the verilated models are built with EnableLut = 1; a device without the "
                  "ACTIVATE lookup table (enable_lut = false) is modelled by the ref backend only");
    }
    return backends::make_rtl_backend(config);
#else
    not_built(name, "the verilated device (target tpuw_sim) was not built");
#endif
  }
#if TPUW_HAVE_REF
  const DeviceParams* params = find_device_config(config.array_n);
  if (params == nullptr) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("backend 'ref' has no configuration with array size {} (configured: {})",
                            config.array_n, fmt::join(configured_sizes(), ", ")));
  }
  if (!config.wave_path.empty()) {
    throw Error(ErrorKind::kInvalidArgument,
                "waveforms (--wave) need the rtl backend; the ref backend has no signals to trace");
  }
  ref::RefConfig rc;
  rc.enable_bf16 = config.enable_bf16;
  rc.enable_lut = config.enable_lut;
  return std::make_unique<ref::RefDevice>(*params, config.memory, ref::PerfModel{}, rc);
#else
  not_built(name, "the reference model (target tpuw_ref) was not built");
#endif
}

Device Device::open(std::string_view backend_name, const BackendConfig& config, const DeviceOptions& options) {
  return Device(make_backend(backend_name, config), options);
}

}  // namespace tpuw
