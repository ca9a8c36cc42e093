// The driver (see tpuw/device.h): command ring, host-memory allocator, fences, faults, reset, perf.
#include "tpuw/device.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <utility>

#include "tpuw/error.h"

namespace tpuw {

// ------------------------------------------------------------------------------------------------
// Host-memory allocator: first fit over a sorted free list, neighbours coalesced on free.
// ------------------------------------------------------------------------------------------------
struct HostBuffer::Arena {
  uint64_t begin = 0;
  uint64_t end = 0;
  std::map<uint64_t, uint64_t> free_blocks;  // addr -> size

  Arena(uint64_t b, uint64_t e) : begin(b), end(e) {
    if (e > b) free_blocks.emplace(b, e - b);
  }

  std::optional<uint64_t> allocate(uint64_t bytes, uint64_t alignment) {
    for (auto it = free_blocks.begin(); it != free_blocks.end(); ++it) {
      const uint64_t blk = it->first;
      const uint64_t blk_size = it->second;
      const uint64_t addr = (blk + alignment - 1) & ~(alignment - 1);
      if (addr < blk || addr - blk > blk_size || blk_size - (addr - blk) < bytes) continue;
      free_blocks.erase(it);
      if (addr > blk) free_blocks.emplace(blk, addr - blk);
      const uint64_t tail = blk + blk_size - (addr + bytes);
      if (tail > 0) free_blocks.emplace(addr + bytes, tail);
      return addr;
    }
    return std::nullopt;
  }

  void release(uint64_t addr, uint64_t bytes) {
    auto [it, inserted] = free_blocks.emplace(addr, bytes);
    if (!inserted) return;  // double free cannot happen through HostBuffer; stay safe anyway
    if (auto next = std::next(it); next != free_blocks.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_blocks.erase(next);
    }
    if (it != free_blocks.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_blocks.erase(it);
      }
    }
  }

  uint64_t free_bytes() const {
    uint64_t s = 0;
    for (const auto& [a, n] : free_blocks) s += n;
    return s;
  }
};

HostBuffer::~HostBuffer() { release(); }

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : arena_(std::move(other.arena_)), addr_(other.addr_), size_(other.size_) {
  other.arena_.reset();
}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    release();
    arena_ = std::move(other.arena_);
    addr_ = other.addr_;
    size_ = other.size_;
    other.arena_.reset();
  }
  return *this;
}

void HostBuffer::release() noexcept {
  if (arena_) arena_->release(addr_, size_);
  arena_.reset();
}

// ------------------------------------------------------------------------------------------------
// Perf counters and fault reports
// ------------------------------------------------------------------------------------------------
std::vector<std::pair<std::string_view, uint64_t>> PerfCounters::items() const {
  return {{"cycles", cycles},           {"mxu_active", mxu_active}, {"weight_stall", weight_stall},
          {"weight_shift", weight_shift}, {"dma_wait", dma_wait},   {"act_busy", act_busy},
          {"instret", instret},         {"rd_bytes", rd_bytes},     {"wr_bytes", wr_bytes}};
}

PerfCounters& PerfCounters::operator+=(const PerfCounters& b) {
  cycles += b.cycles;
  mxu_active += b.mxu_active;
  weight_stall += b.weight_stall;
  weight_shift += b.weight_shift;
  dma_wait += b.dma_wait;
  act_busy += b.act_busy;
  instret += b.instret;
  rd_bytes += b.rd_bytes;
  wr_bytes += b.wr_bytes;
  return *this;
}

std::string FaultReport::message() const {
  std::string where = fmt::format("FAULT_PC 0x{:08x}", pc);
  if (ring_index) where += fmt::format(" = ring index {}", *ring_index);
  if (program_index) {
    where += fmt::format(", instruction {} of the program", *program_index);
    if (fence) where += fmt::format(" submitted with fence {}", *fence);
  }
  std::string instr = "unknown (FAULT_PC is outside the command ring)";
  if (instruction) {
    instr = fmt::format("`{}`", isa::disassemble_one(*instruction));
  }
  return fmt::format("device fault {} ({}); at {}; instruction {}; FAULT_INFO = 0x{:x} ({})",
                     spec::to_string(cause), spec::fault_doc(cause), where, instr, info, info);
}

// ------------------------------------------------------------------------------------------------
// Device
// ------------------------------------------------------------------------------------------------
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kIrqAll = spec::reg::kIrqEnableFence | spec::reg::kIrqEnableFault;

struct Submission {
  uint64_t first_seq;  // sequence number (instructions_submitted) of its first instruction
  uint64_t count;      // instructions including the trailing FENCE
  uint32_t fence;
};

// What "progress" means while waiting: any of these changes.
struct ProgressSample {
  uint64_t consumed = 0;
  uint32_t fence_value = 0;
  uint32_t instret = 0;
  uint32_t mxu_active = 0;
  uint32_t weight_shift = 0;
  uint32_t rd_bytes = 0;
  uint32_t wr_bytes = 0;
  bool operator==(const ProgressSample&) const = default;
};

}  // namespace

struct Device::Impl {
  std::unique_ptr<Backend> backend;
  DeviceOptions options;
  DeviceInfo info;
  std::shared_ptr<HostBuffer::Arena> arena;

  uint64_t ring_base = 0;
  uint32_t ring_entries = 0;
  uint64_t fence_addr = 0;
  std::vector<isa::Word> ring_copy;    // what the driver wrote to each entry
  std::vector<uint64_t> ring_seq;      // sequence number of each entry
  uint32_t tail = 0;
  uint32_t head = 0;                   // last RING_HEAD read
  uint64_t submitted = 0;
  uint64_t consumed = 0;
  uint32_t next_fence = 1;
  std::deque<Submission> submissions;  // recent ones, for fault reports

  // Progress tracking shared by submit (ring full) and wait.
  ProgressSample last_sample;
  uint64_t last_progress_cycle = 0;
  Clock::time_point last_progress_time;

  uint32_t rd(uint32_t off) { return backend->read_reg(off); }
  void wr(uint32_t off, uint32_t v) { backend->write_reg(off, v); }

  void update_head() {
    const uint32_t h = rd(spec::reg::kRingHead);
    if (h >= ring_entries) {
      throw Error(ErrorKind::kInternal,
                  fmt::format("RING_HEAD = {} is outside the ring of {} entries", h, ring_entries));
    }
    consumed += (h + ring_entries - head) % ring_entries;
    head = h;
  }

  uint32_t ring_used() const { return (tail + ring_entries - head) % ring_entries; }

  std::optional<FaultReport> read_fault() {
    if ((rd(spec::reg::kStatus) & spec::reg::kStatusFault) == 0) return std::nullopt;
    FaultReport r;
    r.cause = static_cast<spec::Fault>(rd(spec::reg::kFaultCause));
    r.pc = rd(spec::reg::kFaultPc);
    r.info = rd(spec::reg::kFaultInfo);
    if (r.pc >= ring_base && r.pc < ring_base + uint64_t{ring_entries} * spec::kInstrBytes &&
        (r.pc - ring_base) % spec::kInstrBytes == 0) {
      const auto idx = static_cast<uint32_t>((r.pc - ring_base) / spec::kInstrBytes);
      r.ring_index = idx;
      if (ring_seq[idx] != UINT64_MAX) {
        r.instruction = ring_copy[idx];
        const uint64_t seq = ring_seq[idx];
        for (const auto& s : submissions) {
          if (seq >= s.first_seq && seq < s.first_seq + s.count) {
            r.program_index = seq - s.first_seq;
            r.fence = s.fence;
          }
        }
      }
    }
    return r;
  }

  [[noreturn]] void throw_fault(const FaultReport& r) {
    throw Error(ErrorKind::kDeviceFault, fmt::format("{}: {}", backend->name(), r.message()));
  }

  void check_fault() {
    if (auto f = read_fault()) throw_fault(*f);
  }

  // Clears a pending FENCE interrupt (the driver polls FENCE_VALUE / the fence word instead) and
  // throws when the device has faulted.
  void service_irq() {
    const uint32_t st = rd(spec::reg::kIrqStatus);
    if (st & spec::reg::kIrqStatusFault) check_fault();
    if (st & spec::reg::kIrqStatusFence) wr(spec::reg::kIrqStatus, spec::reg::kIrqStatusFence);
  }

  ProgressSample sample() {
    ProgressSample s;
    s.consumed = consumed;
    s.fence_value = rd(spec::reg::kFenceValue);
    s.instret = rd(spec::reg::kPerfInstretLo);
    s.mxu_active = rd(spec::reg::kPerfMxuActiveLo);
    s.weight_shift = rd(spec::reg::kPerfWeightShiftLo);
    s.rd_bytes = rd(spec::reg::kPerfRdBytesLo);
    s.wr_bytes = rd(spec::reg::kPerfWrBytesLo);
    return s;
  }

  void start_progress_clock() {
    last_sample = sample();
    last_progress_cycle = backend->cycles();
    last_progress_time = Clock::now();
  }

  // One waiting step: fault check, timeout check, progress callback, one run slice.
  void step(const ProgressFn& progress, std::string_view what) {
    update_head();
    service_irq();
    const ProgressSample s = sample();
    const uint64_t now_cycle = backend->cycles();
    const auto now = Clock::now();
    if (!(s == last_sample)) {
      last_sample = s;
      last_progress_cycle = now_cycle;
      last_progress_time = now;
    } else {
      const uint64_t idle_cycles = now_cycle - last_progress_cycle;
      const double idle_s = std::chrono::duration<double>(now - last_progress_time).count();
      if (idle_cycles >= options.timeout_cycles || idle_s >= options.timeout_seconds) {
        throw Error(ErrorKind::kTimeout,
                    fmt::format("{}: device made no progress for {} cycles ({:.2f} s) while {}: "
                                "RING_HEAD {} RING_TAIL {} STATUS 0x{:x} FENCE_VALUE {} "
                                "PERF_INSTRET {} (a program whose tokens never arrive deadlocks; "
                                "reset() recovers the device)",
                                backend->name(), idle_cycles, idle_s, what, head, tail,
                                rd(spec::reg::kStatus), s.fence_value, s.instret));
      }
    }
    if (progress) progress();
    backend->run(options.slice_cycles);
  }

  bool fence_done(uint32_t fence) {
    uint32_t word = 0;
    backend->mem_read(fence_addr, &word, sizeof word);
    if (static_cast<int32_t>(word - fence) >= 0) return true;
    // Idle with everything fetched: every submitted fence has completed.
    update_head();
    return consumed == submitted && (rd(spec::reg::kStatus) & spec::reg::kStatusBusy) == 0;
  }

  void program_ring_and_window() {
    const uint64_t last = info.mem_base + info.mem_size - 1;
    wr(spec::reg::kDmaWinBase, static_cast<uint32_t>(info.mem_base));
    wr(spec::reg::kDmaWinLast, static_cast<uint32_t>(std::min<uint64_t>(last, UINT32_MAX)));
    wr(spec::reg::kRingBase, static_cast<uint32_t>(ring_base));
    wr(spec::reg::kRingSize, ring_entries);
    head = rd(spec::reg::kRingHead);
    tail = head;
    wr(spec::reg::kRingTail, tail);
    consumed = submitted;
    wr(spec::reg::kIrqStatus, kIrqAll);
    wr(spec::reg::kIrqEnable, kIrqAll);
    const uint32_t done = next_fence - 1;
    backend->mem_write(fence_addr, &done, sizeof done);
  }

  void soft_reset() {
    wr(spec::reg::kIrqEnable, 0);  // keep irq low so run() clocks while the reset drains
    wr(spec::reg::kCtrl, spec::reg::kCtrlSoftReset);
    const uint64_t start = backend->cycles();
    for (uint64_t iter = 0;; ++iter) {
      const bool busy = (rd(spec::reg::kCtrl) & spec::reg::kCtrlSoftReset) != 0 ||
                        (rd(spec::reg::kStatus) & spec::reg::kStatusResetting) != 0;
      if (!busy) break;
      if (backend->cycles() - start > options.reset_timeout_cycles || iter > 1'000'000) {
        throw Error(ErrorKind::kTimeout,
                    fmt::format("{}: soft reset did not finish within {} cycles", backend->name(),
                                options.reset_timeout_cycles));
      }
      backend->run(64);
    }
    program_ring_and_window();
  }

  uint32_t submit(std::span<const isa::Word> program, const ProgressFn& progress) {
    check_fault();
    const uint32_t fence = next_fence++;
    if (next_fence == 0) next_fence = 1;
    isa::Instr f = isa::make_instr(spec::Opcode::kFence);
    f.set("irq", 1);
    f.set("value", fence);
    f.set("host_addr", fence_addr);
    const isa::Word fence_word = isa::encode(f);

    const uint64_t total = program.size() + 1;
    submissions.push_back({submitted, total, fence});
    while (submissions.size() > 64) submissions.pop_front();

    auto word_at = [&](uint64_t i) -> const isa::Word& { return i < program.size() ? program[i] : fence_word; };
    uint64_t i = 0;
    bool clock_started = false;
    while (i < total) {
      update_head();
      const uint32_t space = ring_entries - 1 - ring_used();
      if (space == 0) {
        if (!clock_started) {
          start_progress_clock();
          clock_started = true;
        }
        step(progress, "waiting for space in the command ring");
        continue;
      }
      const uint64_t chunk = std::min<uint64_t>({space, total - i, uint64_t{ring_entries} - tail});
      std::vector<uint8_t> bytes(chunk * spec::kInstrBytes);
      for (uint64_t j = 0; j < chunk; ++j) {
        const isa::Word& w = word_at(i + j);
        std::memcpy(bytes.data() + j * spec::kInstrBytes, w.data(), spec::kInstrBytes);
        ring_copy[tail + j] = w;
        ring_seq[tail + j] = submitted + j;
      }
      backend->mem_write(ring_base + uint64_t{tail} * spec::kInstrBytes, bytes.data(), bytes.size());
      tail = static_cast<uint32_t>((tail + chunk) % ring_entries);
      submitted += chunk;
      i += chunk;
      wr(spec::reg::kRingTail, tail);
    }
    return fence;
  }

  void wait(uint32_t fence, const ProgressFn& progress) {
    start_progress_clock();
    for (;;) {
      service_irq();
      if (fence_done(fence)) {
        check_fault();
        return;
      }
      step(progress, fmt::format("waiting for fence {}", fence));
    }
  }

  uint64_t perf_counter(uint32_t lo_off) {
    for (;;) {
      const uint32_t hi = rd(lo_off + 4);
      const uint32_t lo = rd(lo_off);
      if (rd(lo_off + 4) == hi) return (uint64_t{hi} << 32) | lo;
    }
  }
};

Device::Device(std::unique_ptr<Backend> backend, const DeviceOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  if (!backend) throw Error(ErrorKind::kInvalidArgument, "Device: null backend");
  if (options.ring_entries < 2) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("Device: ring_entries must be >= 2 (got {})", options.ring_entries));
  }
  d.backend = std::move(backend);
  d.options = options;
  DeviceInfo& info = d.info;
  info.backend = std::string(d.backend->name());
  info.id = d.rd(spec::reg::kId);
  if (info.id != spec::kDeviceId) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: not a TPU Worker device: ID register reads 0x{:08x}, expected 0x{:08x}",
                            info.backend, info.id, spec::kDeviceId));
  }
  info.version = d.rd(spec::reg::kVersion);
  if (info.version_major() != spec::kVersionMajor) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: device speaks ISA version {}.{}, this driver version {}.{}", info.backend,
                            info.version_major(), info.version_minor(), spec::kVersionMajor,
                            spec::kVersionMinor));
  }
  info.params.array_n = d.rd(spec::reg::kArrayN);
  info.params.ub_depth = d.rd(spec::reg::kUbDepth);
  info.params.wb_depth = d.rd(spec::reg::kWbDepth);
  info.params.acc_depth = d.rd(spec::reg::kAccDepth);
  info.params.dma_data_w = d.rd(spec::reg::kDmaDataW);
  info.params.queue_depth = d.rd(spec::reg::kQueueDepth);
  info.features = d.rd(spec::reg::kFeatures);
  info.mem_base = d.backend->mem_base();
  info.mem_size = d.backend->mem_size();
  if (info.params.array_n == 0 || info.params.dma_data_w < 8) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: implausible configuration (ARRAY_N {}, DMA_DATA_W {})", info.backend,
                            info.params.array_n, info.params.dma_data_w));
  }

  // Driver-owned region at the top of host memory (below 4 GiB: addresses are 32 bits): ring, then
  // the fence word. Hand-written programs use fixed low addresses; they never meet the ring.
  const uint64_t beat = info.dma_beat_bytes();
  d.ring_entries = options.ring_entries;
  const uint64_t mem_end = std::min<uint64_t>(info.mem_base + info.mem_size, uint64_t{1} << 32);
  const uint64_t ring_bytes = uint64_t{d.ring_entries} * spec::kInstrBytes;
  const uint64_t region = ring_bytes + std::max<uint64_t>(beat, 64);
  const uint64_t arena_begin = (info.mem_base + 4095) & ~uint64_t{4095};
  if (mem_end < arena_begin + region + 4096) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: host memory [0x{:x}, +0x{:x}) has no room below 4 GiB for a ring of {} "
                            "entries and buffers",
                            info.backend, info.mem_base, info.mem_size, d.ring_entries));
  }
  d.ring_base = (mem_end - region) & ~uint64_t{4095};
  d.fence_addr = d.ring_base + ring_bytes;
  d.arena = std::make_shared<HostBuffer::Arena>(arena_begin, d.ring_base);
  d.ring_copy.assign(d.ring_entries, isa::Word{});
  d.ring_seq.assign(d.ring_entries, UINT64_MAX);
  d.soft_reset();
}

Device Device::open(std::string_view backend_name, const BackendConfig& config, const DeviceOptions& options) {
  return Device(make_backend(backend_name, config), options);
}

Device::~Device() = default;
Device::Device(Device&&) noexcept = default;
Device& Device::operator=(Device&&) noexcept = default;

const DeviceInfo& Device::info() const { return impl_->info; }
const DeviceOptions& Device::options() const { return impl_->options; }
void Device::set_timeouts(uint64_t cycles, double seconds) {
  impl_->options.timeout_cycles = cycles;
  impl_->options.timeout_seconds = seconds;
}
Backend& Device::backend() { return *impl_->backend; }

uint32_t Device::read_reg(uint32_t offset) { return impl_->rd(offset); }
void Device::write_reg(uint32_t offset, uint32_t value) { impl_->wr(offset, value); }

HostBuffer Device::alloc(uint64_t bytes, uint64_t alignment) {
  if (bytes == 0) throw Error(ErrorKind::kInvalidArgument, "Device::alloc: size 0");
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("Device::alloc: alignment {} is not a power of two", alignment));
  }
  alignment = std::max<uint64_t>(alignment, impl_->info.dma_beat_bytes());
  // Round sizes up to the beat so DMA rows never straddle into a neighbour's bytes.
  const uint64_t beat = impl_->info.dma_beat_bytes();
  const uint64_t size = (bytes + beat - 1) / beat * beat;
  auto addr = impl_->arena->allocate(size, alignment);
  if (!addr) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: host memory exhausted: cannot allocate {} bytes ({} bytes free in "
                            "fragments; host memory is {} bytes)",
                            impl_->info.backend, bytes, impl_->arena->free_bytes(), impl_->info.mem_size));
  }
  return HostBuffer(impl_->arena, *addr, size);
}

uint64_t Device::mem_free() const { return impl_->arena->free_bytes(); }

namespace {
void check_range(const HostBuffer& buf, uint64_t offset, uint64_t bytes, const char* what) {
  if (!buf.valid()) throw Error(ErrorKind::kInvalidArgument, fmt::format("Device::{}: empty buffer", what));
  if (offset > buf.size() || bytes > buf.size() - offset) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("Device::{}: bytes [{}, +{}) outside the buffer of {} bytes at 0x{:x}", what,
                            offset, bytes, buf.size(), buf.addr()));
  }
}
}  // namespace

void Device::write(const HostBuffer& buf, uint64_t offset, const void* src, uint64_t bytes) {
  check_range(buf, offset, bytes, "write");
  impl_->backend->mem_write(buf.addr() + offset, src, bytes);
}

void Device::read(const HostBuffer& buf, uint64_t offset, void* dst, uint64_t bytes) {
  check_range(buf, offset, bytes, "read");
  impl_->backend->mem_read(buf.addr() + offset, dst, bytes);
}

uint32_t Device::submit(std::span<const isa::Word> program, const ProgressFn& progress) {
  return impl_->submit(program, progress);
}

uint32_t Device::submit_code(std::span<const uint8_t> code, const ProgressFn& progress) {
  if (code.size() % spec::kInstrBytes != 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("Device::submit_code: {} bytes is not a whole number of {}-byte instructions",
                            code.size(), spec::kInstrBytes));
  }
  std::vector<isa::Word> words(code.size() / spec::kInstrBytes);
  for (size_t i = 0; i < words.size(); ++i) words[i] = isa::word_from(code.subspan(i * spec::kInstrBytes));
  return impl_->submit(words, progress);
}

void Device::wait(uint32_t fence, const ProgressFn& progress) { impl_->wait(fence, progress); }

void Device::run(std::span<const isa::Word> program, const ProgressFn& progress) {
  wait(submit(program, progress), progress);
}

std::optional<FaultReport> Device::fault() { return impl_->read_fault(); }

void Device::reset() { impl_->soft_reset(); }

PerfCounters Device::perf() {
  Impl& d = *impl_;
  PerfCounters p;
  p.cycles = d.perf_counter(spec::reg::kPerfCyclesLo);
  p.mxu_active = d.perf_counter(spec::reg::kPerfMxuActiveLo);
  p.weight_stall = d.perf_counter(spec::reg::kPerfWeightStallLo);
  p.weight_shift = d.perf_counter(spec::reg::kPerfWeightShiftLo);
  p.dma_wait = d.perf_counter(spec::reg::kPerfDmaWaitLo);
  p.act_busy = d.perf_counter(spec::reg::kPerfActBusyLo);
  p.instret = d.perf_counter(spec::reg::kPerfInstretLo);
  p.rd_bytes = d.perf_counter(spec::reg::kPerfRdBytesLo);
  p.wr_bytes = d.perf_counter(spec::reg::kPerfWrBytesLo);
  return p;
}

void Device::clear_perf() { impl_->wr(spec::reg::kPerfCtrl, spec::reg::kPerfCtrlClear); }

uint64_t Device::ring_base() const { return impl_->ring_base; }

uint64_t Device::instructions_submitted() const { return impl_->submitted; }
uint64_t Device::instructions_consumed() {
  impl_->update_head();
  return impl_->consumed;
}

}  // namespace tpuw
