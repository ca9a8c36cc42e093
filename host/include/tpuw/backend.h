// The lowest host layer: what every device offers. The driver (tpuw/device.h) is written against
// this interface only, so nothing above it knows which backend it drives.
//
//   rtl    : the verilated tpu_top, clocked by tpuw::sim::SimDevice (cycle-accurate)
//   ref    : the bit-exact C++ reference model (host/src/ref), with an analytic cycle estimate
//   serial : a board behind the UART bridge (tpuw/serial.h)
//
// A Backend is shaped like a device, not like a simulator: 32-bit registers, device-visible memory
// that can grow while the device is open, and an interrupt line to wait on with a timeout. A
// simulated device runs on its own clock inside wait_irq(), as a real one runs while the host
// sleeps. What only a simulation can do (advance N cycles, read the simulator's cycle count,
// waveforms, fault injection) is the separate extension tpuw::SimControl (tpuw/sim_control.h),
// which tests and benchmarks use; the driver, runtime and worker never do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tpuw {

class SimControl;

/// The emulated host memory the device masters into over AXI4 (rtl, ref).
struct HostMemoryConfig {
  uint64_t base = 0x0;                 // first byte address of the address range
  uint64_t size = 64ull << 20;         // address range [base, base+size) memory can be mapped in
  uint64_t mapped = UINT64_MAX;        // bytes from `base` mapped when the backend is created
                                       //   (clamped to size); the rest is mapped by mem_map().
                                       //   Device or CPU accesses to unmapped bytes get an AXI error.
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
  std::string wave_path;               // rtl only: FST file; empty = tracing off (SimControl::start_wave
  uint64_t wave_from = 0;              //   can start one later); first and last cycle traced
  uint64_t wave_to = UINT64_MAX;
  bool enable_bf16 = true;             // ref: the build parameter EnableBf16 (false: FEATURES.BF16 = 0,
                                       //   ref::RefConfig::enable_bf16); rtl: the verilated models are
                                       //   built with bf16, so false is refused there
  bool enable_lut = true;              // ref: the build parameter EnableLut (false: FEATURES.LUT = 0,
                                       //   ref::RefConfig::enable_lut); rtl: built with it, false refused
};

/// Granularity of mem_map (bytes).
inline constexpr uint64_t kMemPageBytes = 4096;

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;

  /// 32-bit register access over the device's AXI4-Lite port (byte offset into the register window).
  /// A device that does not answer gives Error(kTimeout).
  virtual uint32_t read_reg(uint32_t offset) = 0;
  virtual void write_reg(uint32_t offset, uint32_t value) = 0;

  /// Device-visible memory: pages (kMemPageBytes) mapped into the address range
  /// [mem_base(), mem_base() + mem_size()). The device's DMA reaches mapped pages only.
  virtual uint64_t mem_base() const = 0;
  virtual uint64_t mem_size() const = 0;
  /// Maps the pages covering [addr, addr+bytes) (new bytes read 0; mapped pages stay as they are).
  /// Allowed while the device runs. Throws Error(kInvalidArgument) outside the address range or
  /// when the backing store cannot grow.
  virtual void mem_map(uint64_t addr, uint64_t bytes) = 0;
  /// Bytes mapped so far.
  virtual uint64_t mem_mapped() const = 0;
  /// The CPU's view of mapped memory (no device time passes); unmapped bytes: Error(kInvalidArgument).
  virtual void mem_write(uint64_t addr, const void* src, size_t bytes) = 0;
  virtual void mem_read(uint64_t addr, void* dst, size_t bytes) = 0;

  /// Waits until the interrupt line is high; returns true when it is. Returns false when
  /// `timeout_s` seconds of wall-clock time passed, and may return false earlier (a simulated
  /// device returns after a slice of its own time, a serial board after one status poll), like
  /// a condition variable's spurious wake-up: callers check the device's state and wait again.
  virtual bool wait_irq(double timeout_s) = 0;

  /// Device reset (the reset line, where the backend has one): registers return to their reset
  /// values and nothing is in flight; device-visible memory is kept. A device that does not answer
  /// afterwards gives Error(kTimeout) on its next register access. The driver's soft reset
  /// (CTRL.SOFT_RESET) is Device::reset(); this is the stronger one below it.
  virtual void reset() = 0;

  /// The simulation extension (cycle stepping, cycle count, waveforms, fault injection), or nullptr
  /// for a backend that is not a simulation. Tests and benchmarks only.
  virtual SimControl* sim_control() { return nullptr; }
};

/// Names accepted by make_backend, e.g. {"rtl", "ref", "serial"}.
std::vector<std::string> backend_names();

/// Array sizes the backend can be created with (rtl: the verilated configurations).
std::vector<unsigned> backend_array_sizes(std::string_view name);

/// Creates a backend; throws tpuw::Error(kInvalidArgument) for an unknown name or array size,
/// Error(kUnsupported) for a backend this build does not contain.
std::unique_ptr<Backend> make_backend(std::string_view name, const BackendConfig& config);

}  // namespace tpuw
