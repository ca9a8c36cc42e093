// tpuw::SimControl: what only a simulated device can do. Tests and benchmarks get it from
// Backend::sim_control() (nullptr for a real device); the driver, runtime and worker never use it.
//
//   if (tpuw::SimControl* sim = dev.backend().sim_control()) sim->inject_hang(true);
#pragma once

#include <cstdint>
#include <string>

namespace tpuw {

class SimControl {
 public:
  virtual ~SimControl() = default;

  /// Lets the device run until its interrupt line is high or `max_cycles` have passed.
  /// Returns the cycles run (0 when irq is already high).
  virtual uint64_t run(uint64_t max_cycles) = 0;

  /// Simulator clock cycles since the backend was created (register accesses included).
  virtual uint64_t cycles() const = 0;

  /// Device cycles a Backend::wait_irq() call simulates at most before it returns (default 20000).
  virtual void set_wait_slice(uint64_t cycles) = 0;

  /// Traces cycles [from, to] into an FST file (rtl only; others throw Error(kUnsupported)).
  virtual void start_wave(const std::string& path, uint64_t from = 0, uint64_t to = UINT64_MAX) = 0;
  virtual void stop_wave() = 0;

  /// Fault injection, so the layers above (driver timeouts, the worker's reset and retry) can be
  /// tested. Both are off when the backend is created; a re-created backend starts healthy.
  /// While on, every host-memory access the device makes (fetch, LOAD, STORE, FENCE) is refused
  /// (rtl: answered DECERR), so the device faults with AXI_ERROR. CPU-side mem_read/mem_write work.
  virtual void inject_memory_fault(bool on) = 0;
  /// While on, the device stops answering: time passes without progress, register accesses fail
  /// with Error(kTimeout). The driver's wait() and reset() then time out.
  virtual void inject_hang(bool on) = 0;
};

}  // namespace tpuw
