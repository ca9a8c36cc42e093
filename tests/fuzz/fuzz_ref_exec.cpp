// libFuzzer target: the instruction decoder and executor of the reference model. The input is a
// program of raw 16-byte instruction words (up to 64), run on a 4x4 ref device with 1 MiB of host
// memory: it completes or the device faults (illegal opcode or field, range, DMA window, ...) or
// the driver's timeout fires, and the device is reset for the next input; it never crashes the
// process. (The differential version against the RTL decode comes with the rtl fuzz build.)
#include <cstdint>
#include <memory>
#include <span>

#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/sim_control.h"

namespace {

tpuw::Device& device() {
  // One device for the whole fuzzing run (opening one per input would dominate the time).
  static const std::unique_ptr<tpuw::Device> dev = [] {
    tpuw::BackendConfig cfg;
    cfg.array_n = 4;
    cfg.memory.size = 1u << 20;
    tpuw::DeviceOptions opt;
    opt.ring_entries = 256;
    opt.timeout_cycles = 200'000;
    opt.timeout_seconds = 5.0;
    auto d = std::make_unique<tpuw::Device>(tpuw::Device::open("ref", cfg, opt));
    // Short simulated slices per wait, so a deadlocked program reaches the timeout quickly.
    if (tpuw::SimControl* sim = d->backend().sim_control()) sim->set_wait_slice(5000);
    return d;
  }();
  return *dev;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tpuw;
  constexpr size_t kMaxInstrs = 64;
  const size_t n = std::min(size / spec::kInstrBytes, kMaxInstrs);
  if (n == 0) return 0;
  Device& dev = device();
  try {
    dev.wait(dev.submit_code(std::span<const uint8_t>(data, n * spec::kInstrBytes)));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kDeviceFault && e.kind() != ErrorKind::kTimeout) throw;  // a bug: crash
    dev.reset();
  }
  return 0;
}
