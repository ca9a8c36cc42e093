// The driver: one TPU Worker device over any Backend (rtl, ref, serial, ...).
//
//   auto dev = tpuw::Device::open("ref", {});          // or Device(make_backend(...))
//   tpuw::HostBuffer buf = dev.alloc(4096);            // device-visible memory
//   dev.write(buf, 0, data.data(), data.size());
//   uint32_t f = dev.submit(program);                  // program + FENCE(value f, irq)
//   dev.wait(f);                                       // throws on fault / timeout
//   tpuw::PerfCounters p = dev.perf();
//
// Memory layout. The backend's address range [mem_base, mem_base + mem_size), below 4 GiB:
//   [mem_base, window_end)   the arena alloc() hands out, from the bottom up, and the memory
//                            programs with fixed host addresses use (map_fixed). It grows while the
//                            device is open: alloc() maps more pages (Backend::mem_map) and raises
//                            DMA_WIN_LAST over them.
//   [ring_base, top)         driver-owned: the command ring. It lies outside the DMA window
//                            [DMA_WIN_BASE, DMA_WIN_LAST] = [mem_base, window_end - 1], so a program
//                            cannot STORE or FENCE into it: the device faults DMA_WINDOW.
//
// Fences cannot be forged. The driver's FENCE writes its value to a word inside the window (a
// "fence sink" the driver never reads), and completion is read from the device's registers only:
// fence f is done when FENCE_VALUE shows f or a later driver fence, or when the device is idle
// with every submitted instruction fetched (RING_HEAD, STATUS.BUSY). A driver fence value is never
// one that a FENCE of an earlier, possibly still running program carries (submit() reads the
// programs' FENCE values), so a program cannot end a run early by writing a value the driver waits
// for, in memory or in FENCE_VALUE.
//
// Waiting and timeouts. wait() sleeps in Backend::wait_irq() for at most poll_seconds at a time
// (the FENCE and FAULT interrupts wake it early) and checks progress between sleeps: RING_HEAD,
// FENCE_VALUE and the PERF counters. It throws Error(kTimeout) when there was no progress
//   - for timeout_cycles cycles of the device's own clock, counted by its PERF_CYCLES register
//     (which counts while the device is busy, as it is while deadlocked), or
//   - for timeout_seconds of wall-clock time (std::chrono::steady_clock), whatever the device
//     or a board says about its clock.
// Cycle figures in reports come from the device's counters too (perf(), busy_cycles()); the
// driver never asks a simulator for its cycle count.
//
// Errors are tpuw::Error: kDeviceFault (message: cause, fault_doc, ring index, program index,
// the instruction, FAULT_INFO), kTimeout (no progress within the cycle or wall-clock budget),
// kInvalidArgument (bad ID/VERSION, allocation failure, misuse).
//
// A Device holds no global state: any number of them can live in one process. It is movable;
// HostBuffers stay valid across a move but must not outlive their Device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tpuw/asm.h"
#include "tpuw/backend.h"
#include "tpuw/device_configs.h"
#include "tpuw/spec.h"

namespace tpuw {

/// What the device says about itself (its read-only configuration registers).
struct DeviceInfo {
  std::string backend;       // Backend::name()
  uint32_t id = 0;           // ID register (spec::kDeviceId)
  uint32_t version = 0;      // VERSION register: major << 16 | minor
  DeviceParams params{};     // ARRAY_N, UB/WB/ACC_DEPTH, DMA_DATA_W, QUEUE_DEPTH
  uint32_t features = 0;     // FEATURES register bits (spec::reg::kFeatures*)
  uint64_t mem_base = 0;     // backend address range for device-visible memory
  uint64_t mem_size = 0;

  uint32_t version_major() const { return version >> 16; }
  uint32_t version_minor() const { return version & 0xFFFFu; }
  /// Bytes per DMA beat (DMA_DATA_W / 8): host addresses and strides must be multiples of it.
  uint32_t dma_beat_bytes() const { return params.dma_data_w / 8; }
};

/// The PERF_* counters (64-bit each).
struct PerfCounters {
  uint64_t cycles = 0;        // STATUS.BUSY cycles (doorbell to last fence)
  uint64_t mxu_active = 0;    // cycles an activation row entered the MXU
  uint64_t weight_stall = 0;  // MATMUL waiting for its weight tile
  uint64_t weight_shift = 0;  // weight shifter busy
  uint64_t dma_wait = 0;      // compute head waiting for a load token
  uint64_t act_busy = 0;      // activation unit busy
  uint64_t instret = 0;       // instructions retired
  uint64_t rd_bytes = 0;      // AXI bytes read (fetch + LOAD)
  uint64_t wr_bytes = 0;      // AXI bytes written (STORE + FENCE)

  /// (name, value) of every counter, in register order; names as in the JSON reports.
  std::vector<std::pair<std::string_view, uint64_t>> items() const;
  /// Adds every counter of `b` (totals over runs or devices).
  PerfCounters& operator+=(const PerfCounters& b);
};

/// Where and why the device stopped (read from FAULT_* when STATUS.FAULT is set).
struct FaultReport {
  spec::Fault cause = spec::Fault::kNone;
  uint32_t pc = 0;                       // FAULT_PC: host address of the instruction
  std::optional<uint32_t> ring_index;    // (pc - RING_BASE) / 16 when pc lies in the ring
  std::optional<uint64_t> program_index; // index inside the submit() call that wrote it
  std::optional<uint32_t> fence;         // fence value of that submit() call
  std::optional<isa::Word> instruction;  // the instruction at pc (from the driver's ring copy)
  uint32_t info = 0;                     // FAULT_INFO

  /// One line: cause (fault_doc), where, the instruction, FAULT_INFO.
  std::string message() const;
};

/// A region of the backend's host memory handed out by Device::alloc; freed on destruction.
class HostBuffer {
 public:
  HostBuffer() = default;
  ~HostBuffer();
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  uint64_t addr() const { return addr_; }  // device (host-memory) byte address
  uint64_t size() const { return size_; }
  bool valid() const { return arena_ != nullptr; }

 private:
  friend class Device;
  struct Arena;
  HostBuffer(std::shared_ptr<Arena> arena, uint64_t addr, uint64_t size)
      : arena_(std::move(arena)), addr_(addr), size_(size) {}
  void release() noexcept;

  std::shared_ptr<Arena> arena_;
  uint64_t addr_ = 0;
  uint64_t size_ = 0;
};

struct DeviceOptions {
  uint32_t ring_entries = 4096;         // command ring size in instructions (>= 2)
  double poll_seconds = 0.05;           // longest single Backend::wait_irq() sleep while waiting
  uint64_t timeout_cycles = 5'000'000;  // no progress while PERF_CYCLES advanced this much -> kTimeout
  double timeout_seconds = 60.0;        // no progress for this much wall time -> kTimeout
  double reset_timeout_seconds = 5.0;   // soft reset must finish within this wall time
  /// Program log (tests/golden, debugging): when not empty, every submit() appends one line
  /// "<FNV-1a 64 of the program's bytes, 16 hex digits> <instructions>\n" to this file with one
  /// O_APPEND write, so devices in several threads or processes may share it. Empty: the
  /// environment variable TPUW_PROGRAM_LOG names the file, if set. The driver's own trailing FENCE
  /// is not part of the hash. An unwritable log is Error(kInvalidArgument) when the device opens.
  std::string program_log;
};

/// Called once per wait_irq() sleep while the driver waits (for progress displays).
using ProgressFn = std::function<void()>;

class Device {
 public:
  /// Opens the device behind `backend`: checks ID and VERSION (major must match spec.h), reads the
  /// configuration registers, programs the DMA window, the command ring and IRQ_ENABLE (FENCE and
  /// FAULT). Throws Error(kInvalidArgument) for a device that is not a compatible TPU Worker.
  explicit Device(std::unique_ptr<Backend> backend, const DeviceOptions& options = {});
  /// make_backend(name, config) + the constructor above.
  static Device open(std::string_view backend_name, const BackendConfig& config,
                     const DeviceOptions& options = {});
  ~Device();
  Device(Device&&) noexcept;
  Device& operator=(Device&&) noexcept;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceInfo& info() const;
  const DeviceOptions& options() const;
  void set_timeouts(uint64_t cycles, double seconds);
  Backend& backend();

  /// Raw register access (byte offsets, spec::reg::k*).
  uint32_t read_reg(uint32_t offset);
  void write_reg(uint32_t offset, uint32_t value);

  /// Allocates `bytes` (>= 1) of host memory aligned to `alignment` (a power of two, at least the
  /// DMA beat is used). Throws Error(kInvalidArgument) when host memory is exhausted.
  HostBuffer alloc(uint64_t bytes, uint64_t alignment = 64);
  /// Bytes still free in the allocator (sum of free blocks), including the part of the arena not
  /// mapped yet.
  uint64_t mem_free() const;
  /// For programs with fixed host addresses (tpuw exec): makes [addr, addr+bytes) device-visible
  /// memory inside the DMA window and takes it out of the allocator. It must lie in
  /// [mem_base, ring_base()) and not overlap a live HostBuffer (Error(kInvalidArgument)).
  void map_fixed(uint64_t addr, uint64_t bytes);
  /// One past the highest byte programs may reach (DMA_WIN_LAST + 1).
  uint64_t window_end() const;
  /// CPU-side copies into / out of a buffer (bounds-checked).
  void write(const HostBuffer& buf, uint64_t offset, const void* src, uint64_t bytes);
  void read(const HostBuffer& buf, uint64_t offset, void* dst, uint64_t bytes);

  /// Appends `program` and a FENCE (fresh value, irq=1) to the ring and rings the doorbell. When the
  /// ring is full it lets the device run until it has consumed enough entries (it never overwrites
  /// an entry the device has not fetched); this may throw like wait(). Returns the fence value.
  uint32_t submit(std::span<const isa::Word> program, const ProgressFn& progress = {});
  /// Same, for encoded bytes (a multiple of 16, e.g. isa::Program::code).
  uint32_t submit_code(std::span<const uint8_t> code, const ProgressFn& progress = {});

  /// Runs the device until the FENCE with value `fence` has completed (or the device is idle with
  /// every submitted instruction done). Throws Error(kDeviceFault) with the FaultReport message
  /// when the device faults, Error(kTimeout) when it makes no progress (RING_HEAD, FENCE_VALUE and
  /// the PERF counters unchanged) for timeout_cycles device cycles or timeout_seconds.
  void wait(uint32_t fence, const ProgressFn& progress = {});

  /// submit + wait.
  void run(std::span<const isa::Word> program, const ProgressFn& progress = {});

  /// The fault the device stopped on, if STATUS.FAULT is set.
  std::optional<FaultReport> fault();

  /// Soft reset (CTRL.SOFT_RESET), waits for it to finish, then reprograms the ring, DMA window
  /// and IRQ_ENABLE. Buffers stay allocated. Throws Error(kTimeout) if the reset never completes.
  void reset();

  PerfCounters perf();
  void clear_perf();
  /// Device cycles with STATUS.BUSY since the device was opened: PERF_CYCLES, summed across
  /// clear_perf() and reset() (the device's own count, not a simulator's).
  uint64_t busy_cycles();

  /// Host address of the command ring (the driver owns [ring_base, top of the address range);
  /// it lies above the DMA window).
  uint64_t ring_base() const;

  /// Instructions written to the ring so far / fetched by the device so far (monotonic, across
  /// wrap-arounds; reset() sets consumed = submitted).
  uint64_t instructions_submitted() const;
  uint64_t instructions_consumed();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpuw
