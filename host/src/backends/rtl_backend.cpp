// The `rtl` backend: tpuw::sim::SimDevice (the verilated tpu_top with its emulated host) behind
// the Backend interface. Every SimError is translated into a tpuw::Error here, the only place
// where the host stack touches the simulation layer.
#include "rtl_backend.h"

#include <fmt/format.h>

#include <utility>

#include "tpuw/error.h"
#include "tpuw/sim_control.h"
#include "tpuw/sim/sim_device.h"

namespace tpuw::backends {
namespace {

ErrorKind map_kind(sim::SimErrorKind kind) {
  switch (kind) {
    case sim::SimErrorKind::kInvalidArgument: return ErrorKind::kInvalidArgument;
    case sim::SimErrorKind::kOutOfRange: return ErrorKind::kInvalidArgument;
    case sim::SimErrorKind::kBusError: return ErrorKind::kInvalidArgument;
    case sim::SimErrorKind::kTimeout: return ErrorKind::kTimeout;
    case sim::SimErrorKind::kIo: return ErrorKind::kResource;  // a waveform write failed (disk full)
    case sim::SimErrorKind::kAssertion: return ErrorKind::kInternal;  // an RTL bug, not the user's
    case sim::SimErrorKind::kOutOfMemory: return ErrorKind::kResource;
  }
  return ErrorKind::kInternal;
}

// Runs `f`, rethrowing a SimError as the matching tpuw::Error with an "rtl: " prefix.
template <typename F>
auto translate(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const sim::SimError& e) {
    throw Error(map_kind(e.kind()), fmt::format("rtl: {}", e.what()));
  }
}

sim::SimDeviceConfig to_sim_config(const BackendConfig& config) {
  sim::SimDeviceConfig c;
  c.array_n = config.array_n;
  c.memory.base = config.memory.base;
  c.memory.size = config.memory.size;
  c.memory.mapped = config.memory.mapped;
  c.memory.read_latency = config.memory.read_latency;
  c.memory.write_latency = config.memory.write_latency;
  c.memory.bytes_per_cycle = config.memory.bytes_per_cycle;
  c.memory.backpressure = config.memory.backpressure;
  c.memory.seed = config.memory.seed;
  c.wave.path = config.wave_path;
  c.wave.from = config.wave_from;
  c.wave.to = config.wave_to;
  return c;
}

class RtlBackend final : public Backend, public SimControl {
 public:
  explicit RtlBackend(const BackendConfig& config)
      : sim_(translate([&] { return sim::SimDevice(to_sim_config(config)); })) {}

  std::string_view name() const override { return "rtl"; }

  uint32_t read_reg(uint32_t offset) override {
    return translate([&] { return sim_.read_reg(offset); });
  }
  void write_reg(uint32_t offset, uint32_t value) override {
    translate([&] { sim_.write_reg(offset, value); });
  }

  uint64_t mem_base() const override { return sim_.memory().base(); }
  uint64_t mem_size() const override { return sim_.memory().size(); }
  void mem_map(uint64_t addr, uint64_t bytes) override {
    translate([&] { sim_.memory().map(addr, bytes); });
  }
  uint64_t mem_mapped() const override { return sim_.memory().mapped_bytes(); }
  void mem_write(uint64_t addr, const void* src, size_t bytes) override {
    translate([&] { sim_.mem_write(addr, src, bytes); });
  }
  void mem_read(uint64_t addr, void* dst, size_t bytes) override {
    translate([&] { sim_.mem_read(addr, dst, bytes); });
  }

  // The simulated device runs one slice of its own time per call (a real device runs while the
  // host sleeps); the slice is short enough (~10 ms of simulation) to keep the wall-clock bound.
  bool wait_irq(double timeout_s) override {
    if (sim_.irq()) return true;
    if (timeout_s <= 0) return false;
    translate([&] { return sim_.run(wait_slice_); });
    return sim_.irq();
  }

  void reset() override {
    translate([&] { sim_.reset(); });
  }

  SimControl* sim_control() override { return this; }

  // SimControl
  uint64_t run(uint64_t max_cycles) override {
    return translate([&] { return sim_.run(max_cycles); });
  }
  uint64_t cycles() const override { return sim_.cycle(); }
  void set_wait_slice(uint64_t cycles) override { wait_slice_ = cycles == 0 ? 1 : cycles; }
  void start_wave(const std::string& path, uint64_t from, uint64_t to) override {
    translate([&] { sim_.start_wave(path, from, to); });
  }
  void stop_wave() override { sim_.stop_wave(); }
  void inject_memory_fault(bool on) override { sim_.inject_memory_fault(on); }
  void inject_hang(bool on) override { sim_.inject_hang(on); }

 private:
  sim::SimDevice sim_;
  uint64_t wait_slice_ = 20000;
};

}  // namespace

std::vector<unsigned> rtl_array_sizes() { return sim::SimDevice::available_array_sizes(); }

std::unique_ptr<Backend> make_rtl_backend(const BackendConfig& config) {
  return std::make_unique<RtlBackend>(config);
}

}  // namespace tpuw::backends
