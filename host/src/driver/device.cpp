// The driver (see tpuw/device.h): command ring, host-memory allocator, fences, faults, reset, perf.
#include "tpuw/device.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdlib>
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

  // Adds [end, new_end) to the free list (the arena grew).
  void grow(uint64_t new_end) {
    if (new_end <= end) return;
    const uint64_t old = end;
    end = new_end;
    release(old, new_end - old);
  }

  // Takes [addr, addr+bytes) out of the free list; false when part of it is allocated.
  bool reserve(uint64_t addr, uint64_t bytes) {
    const uint64_t last = addr + bytes;
    // Every byte must be free: walk the free blocks covering the range.
    uint64_t a = addr;
    while (a < last) {
      auto it = free_blocks.upper_bound(a);
      if (it == free_blocks.begin()) return false;
      --it;
      if (it->first + it->second <= a) return false;
      a = it->first + it->second;
    }
    // Split the blocks.
    a = addr;
    while (a < last) {
      auto it = std::prev(free_blocks.upper_bound(a));
      const uint64_t b = it->first, n = it->second;
      free_blocks.erase(it);
      if (b < a) free_blocks.emplace(b, a - b);
      const uint64_t e = b + n;
      if (e > last) free_blocks.emplace(last, e - last);
      a = e;
    }
    return true;
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
constexpr uint64_t kGrowBytes = 1ull << 20;  // the arena grows by at least this much at a time
constexpr uint64_t kFenceSinkBytes = 64;

struct Submission {
  uint64_t first_seq;  // sequence number (instructions_submitted) of its first instruction
  uint64_t count;      // instructions including the trailing FENCE
  uint32_t fence;
};

// A driver FENCE not yet known to have completed.
struct PendingFence {
  uint32_t value;
  uint64_t seq;  // ring sequence number of the FENCE instruction
};

// A FENCE inside a submitted program (its value must not be reused for a driver fence while it may
// still be ahead of one).
struct ProgramFence {
  uint32_t value;
  uint64_t seq;
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

uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// DeviceOptions::program_log: one line per submitted program, appended with a single write().
class ProgramLog {
 public:
  ProgramLog() = default;
  ~ProgramLog() {
    if (fd_ >= 0) ::close(fd_);
  }
  ProgramLog(const ProgramLog&) = delete;
  ProgramLog& operator=(const ProgramLog&) = delete;

  void open(const std::string& path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("program log '{}': {}", path, std::strerror(errno)));
    }
    path_ = path;
  }

  void record(std::span<const isa::Word> program) {
    if (fd_ < 0) return;
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64
    for (const isa::Word& w : program) {
      for (uint8_t b : w) h = (h ^ b) * 0x100000001b3ull;
    }
    const std::string line = fmt::format("{:016x} {}\n", h, program.size());
    if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      throw Error(ErrorKind::kResource, fmt::format("program log '{}': write failed: {}", path_,
                                                    std::strerror(errno)));
    }
  }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace

struct Device::Impl {
  std::unique_ptr<Backend> backend;
  DeviceOptions options;
  DeviceInfo info;
  std::shared_ptr<HostBuffer::Arena> arena;

  uint64_t ring_base = 0;
  uint32_t ring_entries = 0;
  uint64_t window_end = 0;             // DMA_WIN_LAST + 1; arena mapped up to here
  uint64_t fence_sink = 0;             // where driver FENCEs write (inside the window, never read)
  std::vector<isa::Word> ring_copy;    // what the driver wrote to each entry
  std::vector<uint64_t> ring_seq;      // sequence number of each entry
  uint32_t tail = 0;
  uint32_t head = 0;                   // last RING_HEAD read
  uint64_t submitted = 0;
  uint64_t consumed = 0;
  uint32_t next_fence = 1;
  std::deque<Submission> submissions;  // recent ones, for fault reports
  std::deque<PendingFence> pending;    // driver fences not yet seen complete, in ring order
  std::deque<ProgramFence> program_fences;  // program FENCEs after the last completed driver fence
  uint64_t busy_cycles_base = 0;       // PERF_CYCLES folded in before clear_perf / reset
  ProgramLog program_log;              // DeviceOptions::program_log

  // Progress tracking shared by submit (ring full) and wait.
  ProgressSample last_sample;
  uint64_t last_progress_cycle = 0;    // PERF_CYCLES at the last progress
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

  // Clears a pending FENCE interrupt (completion is read from FENCE_VALUE and RING_HEAD) and
  // throws when the device has faulted.
  void service_irq() {
    const uint32_t st = rd(spec::reg::kIrqStatus);
    if (st & spec::reg::kIrqStatusFault) check_fault();
    if (st & spec::reg::kIrqStatusFence) wr(spec::reg::kIrqStatus, spec::reg::kIrqStatusFence);
  }

  uint64_t perf_counter(uint32_t lo_off) {
    for (;;) {
      const uint32_t hi = rd(lo_off + 4);
      const uint32_t lo = rd(lo_off);
      if (rd(lo_off + 4) == hi) return (uint64_t{hi} << 32) | lo;
    }
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
    last_progress_cycle = perf_counter(spec::reg::kPerfCyclesLo);
    last_progress_time = Clock::now();
  }

  // One waiting step: fault check, timeout check, progress callback, one sleep on the interrupt.
  void step(const ProgressFn& progress, std::string_view what) {
    update_head();
    service_irq();
    const ProgressSample s = sample();
    const uint64_t now_cycle = perf_counter(spec::reg::kPerfCyclesLo);
    const auto now = Clock::now();
    if (!(s == last_sample) || now_cycle < last_progress_cycle) {  // (a cleared counter restarts)
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
    const double left = options.timeout_seconds -
                        std::chrono::duration<double>(Clock::now() - last_progress_time).count();
    backend->wait_irq(std::clamp(left, 0.0, options.poll_seconds));
  }

  // Marks every pending driver fence up to and including ring sequence `seq` complete.
  void complete_through(uint64_t seq) {
    while (!pending.empty() && pending.front().seq <= seq) pending.pop_front();
    while (!program_fences.empty() && program_fences.front().seq < seq) program_fences.pop_front();
  }

  // Reads the device's completion state (registers only; see device.h).
  void poll_fences() {
    if (pending.empty()) return;
    const uint32_t v = rd(spec::reg::kFenceValue);
    for (auto it = pending.rbegin(); it != pending.rend(); ++it) {
      if (it->value == v) {
        complete_through(it->seq);
        return;
      }
    }
    update_head();
    if (consumed == submitted && (rd(spec::reg::kStatus) & spec::reg::kStatusBusy) == 0) {
      complete_through(UINT64_MAX);
    }
  }

  bool fence_done(uint32_t fence) {
    poll_fences();
    for (const auto& p : pending) {
      if (p.value == fence) return false;
    }
    return true;
  }

  void program_window() {
    wr(spec::reg::kDmaWinBase, static_cast<uint32_t>(info.mem_base));
    wr(spec::reg::kDmaWinLast, static_cast<uint32_t>(window_end - 1));
  }

  void program_ring_and_window() {
    program_window();
    wr(spec::reg::kRingBase, static_cast<uint32_t>(ring_base));
    wr(spec::reg::kRingSize, ring_entries);
    head = rd(spec::reg::kRingHead);
    tail = head;
    wr(spec::reg::kRingTail, tail);
    consumed = submitted;
    pending.clear();
    program_fences.clear();
    wr(spec::reg::kIrqStatus, kIrqAll);
    wr(spec::reg::kIrqEnable, kIrqAll);
  }

  void soft_reset() {
    try {
      busy_cycles_base += perf_counter(spec::reg::kPerfCyclesLo);  // the reset clears the counters
    } catch (const Error&) {  // a device that does not answer fails below with the reset's message
    }
    wr(spec::reg::kIrqEnable, 0);  // keep irq low: wait_irq lets the device run while the reset drains
    wr(spec::reg::kCtrl, spec::reg::kCtrlSoftReset);
    const auto start = Clock::now();
    for (uint64_t iter = 0;; ++iter) {
      const bool busy = (rd(spec::reg::kCtrl) & spec::reg::kCtrlSoftReset) != 0 ||
                        (rd(spec::reg::kStatus) & spec::reg::kStatusResetting) != 0;
      if (!busy) break;
      const double waited = std::chrono::duration<double>(Clock::now() - start).count();
      if (waited > options.reset_timeout_seconds || iter > 100'000) {
        throw Error(ErrorKind::kTimeout,
                    fmt::format("{}: soft reset did not finish within {:.2f} s", backend->name(), waited));
      }
      backend->wait_irq(std::min(options.poll_seconds, options.reset_timeout_seconds - waited));
    }
    program_ring_and_window();
  }

  // Raises the DMA window (and the arena) to `new_end`, mapping the pages first.
  void grow_window(uint64_t new_end) {
    if (new_end <= window_end) return;
    backend->mem_map(window_end, new_end - window_end);
    window_end = new_end;
    arena->grow(new_end);
    wr(spec::reg::kDmaWinLast, static_cast<uint32_t>(window_end - 1));
  }

  uint32_t choose_fence_value() {
    for (;;) {
      const uint32_t v = next_fence++;
      if (next_fence == 0) next_fence = 1;
      if (v == 0) continue;
      bool taken = false;
      for (const auto& pf : program_fences) taken = taken || pf.value == v;
      if (!taken) return v;
    }
  }

  uint32_t submit(std::span<const isa::Word> program, const ProgressFn& progress) {
    check_fault();
    program_log.record(program);
    // FENCEs inside the program: a driver fence value must differ from every one of them that
    // may still be ahead of it in the ring.
    for (size_t i = 0; i < program.size(); ++i) {
      if (program[i][0] == static_cast<uint8_t>(spec::Opcode::kFence)) {
        uint32_t v = 0;
        std::memcpy(&v, program[i].data() + 4, sizeof v);  // value: bits 63:32 (little-endian)
        program_fences.push_back({v, submitted + i});
      }
    }
    const uint32_t fence = choose_fence_value();
    isa::Instr f = isa::make_instr(spec::Opcode::kFence);
    f.set("irq", 1);
    f.set("value", fence);
    f.set("host_addr", fence_sink);
    const isa::Word fence_word = isa::encode(f);

    const uint64_t total = program.size() + 1;
    submissions.push_back({submitted, total, fence});
    while (submissions.size() > 64) submissions.pop_front();
    pending.push_back({fence, submitted + program.size()});

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
    const std::string what = fmt::format("waiting for fence {}", fence);  // for a timeout message only
    // step() services the interrupt status before each wait_irq; a completed fence still checks
    // for a fault below, so the loop reads IRQ_STATUS once per round (a link round trip on serial).
    for (;;) {
      if (fence_done(fence)) {
        check_fault();
        return;
      }
      step(progress, what);
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
  if (options.program_log.empty()) {
    if (const char* env = std::getenv("TPUW_PROGRAM_LOG"); env != nullptr && *env != '\0') {
      d.options.program_log = env;
    }
  }
  if (!d.options.program_log.empty()) d.program_log.open(d.options.program_log);
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
  // The configuration always comes from the device's registers, whatever the backend was asked for.
  info.params.array_n = d.rd(spec::reg::kArrayN);
  info.params.ub_depth = d.rd(spec::reg::kUbDepth);
  info.params.wb_depth = d.rd(spec::reg::kWbDepth);
  info.params.acc_depth = d.rd(spec::reg::kAccDepth);
  info.params.dma_data_w = d.rd(spec::reg::kDmaDataW);
  info.params.queue_depth = d.rd(spec::reg::kQueueDepth);
  info.features = d.rd(spec::reg::kFeatures);
  info.mem_base = d.backend->mem_base();
  info.mem_size = d.backend->mem_size();
  if (info.params.array_n == 0 || info.params.array_n > 4096 || info.params.dma_data_w < 8 ||
      info.params.dma_data_w > 4096 || (info.params.dma_data_w & (info.params.dma_data_w - 1)) != 0 ||
      info.params.ub_depth == 0 || info.params.wb_depth == 0 || info.params.acc_depth == 0 ||
      info.params.queue_depth == 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: implausible configuration registers (ARRAY_N {}, UB_DEPTH {}, WB_DEPTH {}, "
                            "ACC_DEPTH {}, DMA_DATA_W {}, QUEUE_DEPTH {})",
                            info.backend, info.params.array_n, info.params.ub_depth, info.params.wb_depth,
                            info.params.acc_depth, info.params.dma_data_w, info.params.queue_depth));
  }

  // Driver-owned region at the top of the address range (below 4 GiB: addresses are 32 bits): the
  // ring, above the DMA window. Hand-written programs use fixed low addresses; they never meet it.
  const uint64_t mapped_at_open = d.backend->mem_mapped();
  d.ring_entries = options.ring_entries;
  const uint64_t mem_end = std::min<uint64_t>(info.mem_base + info.mem_size, uint64_t{1} << 32);
  const uint64_t ring_bytes = uint64_t{d.ring_entries} * spec::kInstrBytes;
  const uint64_t arena_begin = round_up(info.mem_base, kMemPageBytes);
  if (mem_end < arena_begin + ring_bytes + 2 * kMemPageBytes) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: host memory [0x{:x}, +0x{:x}) has no room below 4 GiB for a ring of {} "
                            "entries and buffers",
                            info.backend, info.mem_base, info.mem_size, d.ring_entries));
  }
  d.ring_base = (mem_end - ring_bytes) & ~(kMemPageBytes - 1);
  d.backend->mem_map(d.ring_base, ring_bytes);
  // The window starts over the memory the backend mapped at creation (contiguous from mem_base),
  // at least one growth step, and keeps one page below the ring.
  const uint64_t initially = std::max<uint64_t>(mapped_at_open / kMemPageBytes * kMemPageBytes, kGrowBytes);
  d.window_end = std::min(arena_begin + initially, d.ring_base - kMemPageBytes);
  d.backend->mem_map(arena_begin, d.window_end - arena_begin);
  d.arena = std::make_shared<HostBuffer::Arena>(arena_begin, d.window_end);
  // The fence sink: the top of the initial window (programs use low fixed addresses).
  d.fence_sink = d.window_end - kFenceSinkBytes;
  d.arena->reserve(d.fence_sink, kFenceSinkBytes);
  d.ring_copy.assign(d.ring_entries, isa::Word{});
  d.ring_seq.assign(d.ring_entries, UINT64_MAX);
  d.soft_reset();
  d.busy_cycles_base = 0;
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
  Impl& d = *impl_;
  if (bytes == 0) throw Error(ErrorKind::kInvalidArgument, "Device::alloc: size 0");
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("Device::alloc: alignment {} is not a power of two", alignment));
  }
  alignment = std::max<uint64_t>(alignment, d.info.dma_beat_bytes());
  // Round sizes up to the beat so DMA rows never straddle into a neighbour's bytes.
  const uint64_t beat = d.info.dma_beat_bytes();
  const uint64_t limit = d.ring_base - kMemPageBytes;
  if (bytes > limit - d.arena->begin) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: host memory exhausted: cannot allocate {} bytes (the arena is {} bytes)",
                            d.info.backend, bytes, limit - d.arena->begin));
  }
  const uint64_t size = round_up(bytes, beat);
  auto addr = d.arena->allocate(size, alignment);
  while (!addr && d.window_end < limit) {
    // Grow: map more pages at the top of the window (at least kGrowBytes, doubling the arena).
    const uint64_t want = std::max({size + alignment, kGrowBytes, d.window_end - d.arena->begin});
    d.grow_window(std::min(limit, round_up(d.window_end + want, kMemPageBytes)));
    addr = d.arena->allocate(size, alignment);
  }
  if (!addr) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: host memory exhausted: cannot allocate {} bytes ({} bytes free in "
                            "fragments; the arena is {} bytes)",
                            d.info.backend, bytes, d.arena->free_bytes(), limit - d.arena->begin));
  }
  return HostBuffer(d.arena, *addr, size);
}

uint64_t Device::mem_free() const {
  const Impl& d = *impl_;
  return d.arena->free_bytes() + (d.ring_base - kMemPageBytes - d.window_end);
}

void Device::map_fixed(uint64_t addr, uint64_t bytes) {
  Impl& d = *impl_;
  if (bytes == 0) return;
  if (addr < d.arena->begin || addr > d.ring_base - kMemPageBytes ||
      bytes > d.ring_base - kMemPageBytes - addr) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: [0x{:x}, +{}) is outside the memory programs may use [0x{:x}, 0x{:x})",
                            d.info.backend, addr, bytes, d.arena->begin, d.ring_base - kMemPageBytes));
  }
  d.grow_window(round_up(addr + bytes, kMemPageBytes));
  // Take what is still free out of the allocator (overlapping fixed ranges are fine; a live
  // HostBuffer or the fence sink is not).
  for (uint64_t a = addr; a < addr + bytes;) {
    const uint64_t next = std::min(addr + bytes, (a / kMemPageBytes + 1) * kMemPageBytes);
    bool overlaps_taken = false;
    if (!d.arena->reserve(a, next - a)) {
      // Either already reserved by an earlier map_fixed (fine) or allocated (refuse): the fence
      // sink and HostBuffers are the only allocations a fixed-address program can meet.
      overlaps_taken = a < d.fence_sink + kFenceSinkBytes && next > d.fence_sink;
    }
    if (overlaps_taken) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{}: [0x{:x}, +{}) overlaps the driver's fence word at 0x{:x}", d.info.backend,
                              addr, bytes, d.fence_sink));
    }
    a = next;
  }
}

uint64_t Device::window_end() const { return impl_->window_end; }

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

void Device::clear_perf() {
  impl_->busy_cycles_base += impl_->perf_counter(spec::reg::kPerfCyclesLo);
  impl_->wr(spec::reg::kPerfCtrl, spec::reg::kPerfCtrlClear);
}

uint64_t Device::busy_cycles() { return impl_->busy_cycles_base + impl_->perf_counter(spec::reg::kPerfCyclesLo); }

uint64_t Device::ring_base() const { return impl_->ring_base; }

uint64_t Device::instructions_submitted() const { return impl_->submitted; }
uint64_t Device::instructions_consumed() {
  impl_->update_head();
  return impl_->consumed;
}

}  // namespace tpuw
