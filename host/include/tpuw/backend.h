// The lowest host layer: what every device backend provides. The driver (tpuw/device.h) is
// written against this interface only, so nothing above it knows which backend it drives.
//
//   rtl : the verilated tpu_top, clocked by tpuw::sim::SimDevice (cycle-accurate)
//   ref : the bit-exact C++ reference model (host/src/ref), with an analytic cycle estimate
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tpuw {

/// The emulated host memory the device masters into over AXI4.
struct HostMemoryConfig {
  uint64_t base = 0x0;                 // first byte address of host memory
  uint64_t size = 64ull << 20;         // bytes; accesses outside [base, base+size) get an AXI error
  unsigned read_latency = 16;          // cycles from AR handshake to first R beat
  unsigned write_latency = 16;         // cycles from last W beat to B
  unsigned bytes_per_cycle = 16;       // bandwidth limit of each direction
  double backpressure = 0.0;           // probability per cycle that a ready/valid is withheld (tests)
  uint64_t seed = 1;                   // for backpressure
};

/// Everything needed to create one device.
struct BackendConfig {
  unsigned array_n = 16;               // rtl: one of SimDevice's built configurations
  HostMemoryConfig memory;
  std::string wave_path;               // rtl only: FST file; empty = tracing off
  uint64_t wave_from = 0;              // first cycle traced
  uint64_t wave_to = UINT64_MAX;       // last cycle traced
};

/// Optional test hook: makes a device misbehave the way failing hardware does, so the layers
/// above (driver timeouts, the worker's reset and retry) can be tested. Backends that cannot do it
/// return nullptr from Backend::fault_injection(). Both are off when the backend is created; a
/// re-created backend starts healthy.
class FaultInjection {
 public:
  virtual ~FaultInjection() = default;
  /// While on, every host-memory access the device makes (fetch, LOAD, STORE, FENCE) is refused
  /// (rtl: answered DECERR), so the device faults with AXI_ERROR. CPU-side mem_read/mem_write work.
  virtual void inject_memory_fault(bool on) = 0;
  /// While on, the device stops answering: run() lets time pass without progress, register
  /// accesses fail with Error(kTimeout). The driver's wait() and reset() then time out.
  virtual void inject_hang(bool on) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;

  /// 32-bit register access over the device's AXI4-Lite port (byte offset into the register window).
  virtual uint32_t read_reg(uint32_t offset) = 0;
  virtual void write_reg(uint32_t offset, uint32_t value) = 0;

  /// Host memory, as the CPU sees it (no device cycles pass).
  virtual uint64_t mem_base() const = 0;
  virtual uint64_t mem_size() const = 0;
  virtual void mem_write(uint64_t addr, const void* src, size_t bytes) = 0;
  virtual void mem_read(uint64_t addr, void* dst, size_t bytes) = 0;

  /// Level of the interrupt line.
  virtual bool irq() = 0;

  /// Let the device run until its interrupt line is high or `max_cycles` have passed.
  /// Returns the cycles run (0 when irq is already high).
  virtual uint64_t run(uint64_t max_cycles) = 0;

  /// Device clock cycles since the backend was created.
  virtual uint64_t cycles() const = 0;

  /// The fault-injection hook, or nullptr when this backend has none.
  virtual FaultInjection* fault_injection() { return nullptr; }
};

/// Names accepted by make_backend, e.g. {"rtl", "ref"}.
std::vector<std::string> backend_names();

/// Array sizes the backend can be created with (rtl: the verilated configurations).
std::vector<unsigned> backend_array_sizes(std::string_view name);

/// Creates a backend; throws tpuw::Error(kInvalidArgument) for an unknown name or array size.
std::unique_ptr<Backend> make_backend(std::string_view name, const BackendConfig& config);

}  // namespace tpuw
