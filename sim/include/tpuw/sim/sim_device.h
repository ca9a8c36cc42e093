// tpuw::sim::SimDevice: one verilated tpu_top plus the host around it, driven through the top's
// ports only: an AXI4 slave over host memory on m_axi_*, an AXI4-Lite master on s_axil_*, the
// interrupt line irq_o, the clock and the active-low reset.
//
// Each instance owns its VerilatedContext, its model and its host memory; instances are
// independent (no global mutable state), so one process may run many of them, interleaved from one
// thread or one per thread.
//
// Errors are SimError exceptions (tpuw/sim/error.h):
//   - constructor: kInvalidArgument for an array size that was not built (the message lists the
//     available ones) or a bad memory configuration; kIo when the waveform file cannot be opened.
//   - read_reg / write_reg: kBusError when the device answers SLVERR or DECERR (the message names
//     the offset and response), kTimeout when it does not answer within reg_timeout_cycles.
//     try_read_reg / try_write_reg return the response code instead and only throw kTimeout.
//   - mem_read / mem_write: kOutOfRange outside [base, base+size).
//
// Waveforms: FST tracing is compiled in and off by default. Give a path and a cycle window in
// WaveConfig, or call start_wave() later; the file is opened when cycle() reaches `from` and
// closed after cycle `to` (or by stop_wave() / destruction). Outside the window the cost is one
// compare per cycle.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tpuw/device_configs.h"
#include "tpuw/sim/axi_slave.h"
#include "tpuw/sim/axil_master.h"
#include "tpuw/sim/error.h"
#include "tpuw/sim/host_memory.h"

namespace tpuw::sim {

struct WaveConfig {
  std::string path;              // FST file; empty = no tracing
  uint64_t from = 0;             // first cycle traced
  uint64_t to = UINT64_MAX;      // last cycle traced
};

struct SimDeviceConfig {
  unsigned array_n = 16;                // one of SimDevice::available_array_sizes()
  MemoryConfig memory;                  // host memory window and AXI4 slave behaviour
  WaveConfig wave;
  uint64_t reg_timeout_cycles = 10000;  // AXI4-Lite access gives up (kTimeout) after this
  unsigned reset_cycles = 4;            // rst_ni held low this many cycles at construction
};

class SimDevice {
 public:
  explicit SimDevice(const SimDeviceConfig& config = {});
  ~SimDevice();
  SimDevice(SimDevice&&) noexcept;
  SimDevice& operator=(SimDevice&&) noexcept;
  SimDevice(const SimDevice&) = delete;
  SimDevice& operator=(const SimDevice&) = delete;

  /// Array sizes of the verilated configurations, in TPUW_DEVICE_CONFIGS order.
  static std::vector<unsigned> available_array_sizes();

  /// The synthesis parameters of this instance's configuration.
  const DeviceParams& params() const noexcept;

  /// 32-bit register access over AXI4-Lite (byte offset into the 4 KiB register window). Each
  /// call clocks the device until the access completes.
  uint32_t read_reg(uint32_t offset);
  void write_reg(uint32_t offset, uint32_t value);
  AxilResult try_read_reg(uint32_t offset);
  uint8_t try_write_reg(uint32_t offset, uint32_t value, uint8_t strb = 0xF);

  /// Host memory as the CPU sees it (no device cycles pass).
  HostMemory& memory() noexcept;
  const HostMemory& memory() const noexcept;
  void mem_write(uint64_t addr, const void* src, size_t bytes);
  void mem_read(uint64_t addr, void* dst, size_t bytes) const;

  /// Level of irq_o after the last clock edge.
  bool irq() const noexcept;

  /// Clock until irq_o is high or `max_cycles` have run; returns the cycles run (0 when irq_o is
  /// already high).
  uint64_t run(uint64_t max_cycles);
  /// Device reset: rst_ni low for reset_cycles cycles (SimDeviceConfig) with the emulated host idle;
  /// bursts in flight are dropped, host memory is kept, cycle() keeps counting. A hang injection
  /// stays in force (the reset is not clocked while it is on).
  void reset();
  /// Clock exactly n cycles.
  void tick(uint64_t n = 1);
  /// Clock cycles since construction (reset cycles included).
  uint64_t cycle() const noexcept;

  /// Trace cycles [from, to] into an FST file (replaces a pending or open window: the open file is
  /// closed first). from < cycle() starts now.
  void start_wave(const std::string& path, uint64_t from = 0, uint64_t to = UINT64_MAX);
  void stop_wave();
  bool wave_active() const noexcept;

  /// Fault injection, for tests of the layers above (both off by default; checked once per call or
  /// per AXI burst, never per cycle, so the simulation costs the same when they are off).
  ///   memory fault: while on, every host-memory burst the device starts is answered DECERR (memory
  ///     is not touched): the device faults with AXI_ERROR on its next fetch, LOAD, STORE or FENCE.
  ///   hang: while on, the device stops answering: cycles pass (cycle() advances) but the model is
  ///     not clocked, so no instruction, fence or interrupt ever comes and every register access
  ///     times out (SimError kTimeout). Turning it off resumes the model where it stopped.
  void inject_memory_fault(bool on) noexcept;
  void inject_hang(bool on) noexcept;
  bool memory_fault_injected() const noexcept;
  bool hang_injected() const noexcept;

  /// Counters of the host-memory AXI4 slave (bytes, beats, bursts, error responses).
  const AxiSlaveStats& axi_stats() const noexcept;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpuw::sim
