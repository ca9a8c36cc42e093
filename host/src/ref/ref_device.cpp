// The reference model: bit-exact instruction semantics, the command processor's queue/token
// rules, and an analytic cycle estimate (docs/perf_model.md).
//
// Execution is a discrete-event simulation with four kinds of events: the command processor
// dispatching the instruction at RING_HEAD (or detecting a fault there), a queue head issuing to
// its engine, a FENCE completing, and a pending fault being raised after the drain. Each event
// has a time computed from the engines' timelines; the earliest one runs next, so functional
// effects happen in modelled-time order and run(max_cycles) stops exactly at its horizon. Every
// event only creates later events, so the order is well defined. A program whose tokens never
// arrive leaves no event to run: the model makes no progress, as the device does.
#include "tpuw/ref/ref_device.h"

#include <algorithm>
#include <cstdlib>
#include <array>
#include <cstring>
#include <deque>
#include <limits>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "tpuw/activate.h"
#include "tpuw/asm.h"
#include "tpuw/error.h"
#include "tpuw/spec.h"

namespace tpuw::ref {

namespace {

using spec::Fault;
using spec::Opcode;

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

// Queue indices (spec::Queue values).
constexpr size_t kQLoad = 0;
constexpr size_t kQCompute = 1;
constexpr size_t kQStore = 2;

// Token counters.
enum Token : size_t { kLd2Cmp = 0, kCmp2Ld = 1, kCmp2St = 2, kSt2Cmp = 3, kNumTokens = 4 };

// Performance counters in register order (PERF_CYCLES_LO = 0x80, each 8 bytes apart).
enum Perf : size_t {
  kPerfCycles,
  kPerfMxuActive,
  kPerfWeightStall,
  kPerfWeightShift,
  kPerfDmaWait,
  kPerfActBusy,
  kPerfInstret,
  kPerfRdBytes,
  kPerfWrBytes,
  kNumPerf
};

struct FaultRec {
  Fault cause = Fault::kNone;
  uint32_t info = 0;
};

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

bool is_pow2(uint32_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

struct RefDevice::Impl {
  DeviceParams p;
  HostMemoryConfig mc;
  PerfModel pm;
  uint32_t n;            // array size
  uint32_t beat;         // DMA beat bytes
  uint64_t bw_rd;        // bytes per cycle on the read data channel
  uint64_t bw_wr;        // bytes per cycle on the write data channel

  // Host memory: one calloc'd block for the whole address range (untouched pages cost nothing)
  // and a map of the pages mapped so far (Backend::mem_map).
  struct FreeHost {
    void operator()(uint8_t* ptr) const noexcept { std::free(ptr); }
  };
  std::unique_ptr<uint8_t[], FreeHost> host;
  std::vector<bool> page_mapped;
  uint64_t mapped_bytes = 0;
  uint64_t wait_slice = 20000;

  // Local memories. UB/WB rows of n int8, ACC rows of n int32 (kept as uint32 for wrap-around).
  std::vector<int8_t> ub, wb;
  std::vector<uint32_t> acc;
  std::array<std::vector<int8_t>, 2> wbank;  // [k*n + nn]
  unsigned wsel = 0;                          // active bank

  // Registers.
  uint32_t irq_enable = 0, irq_status = 0;
  uint32_t ring_base = 0, ring_size = 0, ring_head = 0, ring_tail = 0;
  uint32_t fence_value = 0;
  uint32_t fault_cause = 0, fault_pc = 0, fault_info = 0;
  uint32_t win_base = 0, win_last = 0xFFFFFFFFu;
  bool faulted = false;
  std::array<uint64_t, kNumPerf> perf{};
  std::array<uint32_t, kNumPerf> perf_hi_latch{};

  uint64_t now = 0;

  // ---- Command processor ----
  struct Queued {
    isa::Instr in;
    uint32_t pc = 0;
    uint64_t dispatched = 0;  // time it entered the FIFO
  };
  std::array<std::deque<Queued>, 3> q;
  std::array<uint64_t, 3> n_dispatched{}, n_issued{};
  std::array<std::vector<uint64_t>, 3> issue_ring;  // issue time of instruction j at j % depth
  std::array<std::deque<uint64_t>, kNumTokens> tokens;  // arrival times of tokens not yet consumed
  // Per counter, tokens pushed minus popped by the instructions dispatched so far, in program
  // order (TOKEN_OVERFLOW; tpu_cmd_proc keeps the same balance).
  std::array<int64_t, kNumTokens> token_balance{};

  uint64_t cp_time = 0;  // the command processor is free to decode the next instruction
  // Instruction fetch: bursts of up to fetch_burst_instrs, double-buffered prefetch.
  uint64_t doorbell_time = 0;
  uint64_t fetch_data_time = 0;    // when the fetch data channel is free
  uint64_t fetch_burst_left = 0;   // instructions remaining in the current burst
  uint64_t burst_first_use = 0;    // when the CP started consuming the current burst

  struct Head {
    isa::Word w{};
    uint32_t pc = 0;
    uint64_t avail = 0;  // decoded and ready to dispatch
    std::optional<FaultRec> fault;
    size_t queue = 0;    // kQLoad.. or 3 for CTRL
    isa::Instr in;
  };
  std::optional<Head> head;  // the decoded instruction at RING_HEAD, once fetched

  std::optional<FaultRec> fault_pending;
  uint32_t fault_pending_pc = 0;
  uint64_t fault_detect_time = 0;

  // ---- Engines ----
  std::array<uint64_t, 3> accept{};     // engine can accept its next instruction
  std::array<uint64_t, 3> last_done{};  // done time of the engine's last instruction
  uint64_t rd_chan_free = 0, wr_chan_free = 0;
  uint64_t mxu_in_free = 0, mxu_last_done = 0;
  uint64_t shifter_free = 0, shadow_ready = 0, shadow_free = 0;
  uint64_t act_free = 0;

  std::optional<uint64_t> busy_since;

  Impl(const DeviceParams& params, const HostMemoryConfig& memory, const PerfModel& model)
      : p(params), mc(memory), pm(model) {
    if (p.array_n == 0 || p.ub_depth == 0 || p.wb_depth == 0 || p.acc_depth == 0 || p.queue_depth == 0 ||
        p.dma_data_w < 8 || !is_pow2(p.dma_data_w)) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("ref: invalid device parameters (array_n {}, ub {}, wb {}, acc {}, dma {} bits, "
                              "queue {})",
                              p.array_n, p.ub_depth, p.wb_depth, p.acc_depth, p.dma_data_w, p.queue_depth));
    }
    if (mc.size == 0 || mc.bytes_per_cycle == 0 || mc.base + mc.size < mc.base) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("ref: invalid host memory (base {:#x}, size {:#x}, {} bytes/cycle)", mc.base, mc.size,
                              mc.bytes_per_cycle));
    }
    n = p.array_n;
    beat = p.dma_data_w / 8;
    bw_rd = std::min<uint64_t>(beat, mc.bytes_per_cycle);
    bw_wr = bw_rd;
    void* block = std::calloc(static_cast<size_t>(mc.size), 1);
    if (block == nullptr) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("ref: cannot allocate {} bytes of host memory", mc.size));
    }
    host.reset(static_cast<uint8_t*>(block));
    page_mapped.assign(static_cast<size_t>((mc.size + kMemPageBytes - 1) / kMemPageBytes), false);
    map(mc.base, std::min(mc.mapped, mc.size));
    ub.assign(static_cast<size_t>(p.ub_depth) * n, 0);
    wb.assign(static_cast<size_t>(p.wb_depth) * n, 0);
    acc.assign(static_cast<size_t>(p.acc_depth) * n, 0);
    for (auto& b : wbank) b.assign(static_cast<size_t>(n) * n, 0);
    for (auto& r : issue_ring) r.assign(p.queue_depth, 0);
  }

  // ------------------------------------------------------------------------------------------
  // Host memory
  bool in_host(uint64_t addr, uint64_t len) const {
    if (!(addr >= mc.base && len <= mc.size && addr - mc.base <= mc.size - len)) return false;
    if (len == 0) return true;
    for (uint64_t pg = (addr - mc.base) / kMemPageBytes; pg <= (addr - mc.base + len - 1) / kMemPageBytes; ++pg) {
      if (!page_mapped[pg]) return false;
    }
    return true;
  }
  void map(uint64_t addr, uint64_t len) {
    if (len == 0) return;
    if (!(addr >= mc.base && len <= mc.size && addr - mc.base <= mc.size - len)) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("ref: cannot map [{:#x}, +{:#x}): outside the host address range [{:#x}, {:#x})", addr,
                              len, mc.base, mc.base + mc.size));
    }
    for (uint64_t pg = (addr - mc.base) / kMemPageBytes; pg <= (addr - mc.base + len - 1) / kMemPageBytes; ++pg) {
      if (page_mapped[pg]) continue;
      page_mapped[pg] = true;
      mapped_bytes += std::min(kMemPageBytes, mc.size - pg * kMemPageBytes);
    }
  }
  uint8_t* hptr(uint64_t addr) { return host.get() + (addr - mc.base); }
  // The device's own accesses (fetch, DMA, FENCE): refused while a memory fault is injected.
  bool dev_in_host(uint64_t addr, uint64_t len) const { return !mem_fault && in_host(addr, len); }

  // Fault injection (RefDevice::inject_*).
  bool mem_fault = false;
  bool hang = false;
  void check_hang(std::string_view what, uint32_t offset) const {
    if (hang) {
      throw Error(ErrorKind::kTimeout,
                  fmt::format("ref: register {} at offset {:#05x} not answered (the device hangs)", what, offset));
    }
  }

  // ------------------------------------------------------------------------------------------
  // Validation (docs/architecture.md, "Validation"), in the contract's order.
  static std::optional<FaultRec> range_fault(uint64_t start, uint64_t count, uint64_t depth) {
    if (start + count > depth) return FaultRec{Fault::kLocalRange, static_cast<uint32_t>(std::max(start, depth))};
    return std::nullopt;
  }

  uint32_t row_size(uint64_t mem) const { return mem == static_cast<uint64_t>(spec::Mem::kAcc) ? 4 * n : n; }
  uint64_t depth_of(uint64_t mem) const {
    switch (static_cast<spec::Mem>(mem)) {
      case spec::Mem::kUb: return p.ub_depth;
      case spec::Mem::kWb: return p.wb_depth;
      case spec::Mem::kAcc: return p.acc_depth;
    }
    return 0;
  }

  std::optional<FaultRec> validate(const isa::Word& w, const isa::Instr& in, const spec::InstrInfo& inf) const {
    const auto illegal = [](unsigned lsb) { return FaultRec{Fault::kIllegalField, lsb}; };
    // 3. dependency flags
    const bool flags[4] = {in.pop_prev, in.pop_next, in.push_prev, in.push_next};
    const unsigned flag_lsb[4] = {spec::header::kPopPrev.lsb, spec::header::kPopNext.lsb,
                                  spec::header::kPushPrev.lsb, spec::header::kPushNext.lsb};
    bool allowed[4] = {true, true, true, true};
    switch (inf.queue) {
      case spec::Queue::kLoad: allowed[0] = allowed[2] = false; break;
      case spec::Queue::kStore: allowed[1] = allowed[3] = false; break;
      case spec::Queue::kCtrl: allowed[0] = allowed[1] = allowed[2] = allowed[3] = false; break;
      case spec::Queue::kCompute: break;
    }
    for (size_t k = 0; k < 4; ++k) {
      if (flags[k] && !allowed[k]) return illegal(flag_lsb[k]);
    }
    (void)w;
    // 4. fields, 5. local range, 6. DMA window
    const auto op = static_cast<Opcode>(in.opcode);
    if (op == Opcode::kLoad || op == Opcode::kStore) {
      const uint64_t mem = in.fields[0], local = in.fields[1], haddr = in.fields[2], rows = in.fields[3],
                     rbytes = in.fields[4], stride = in.fields[5];
      const bool mem_ok = op == Opcode::kLoad ? mem <= 2 : (mem == 0 || mem == 2);
      if (!mem_ok) return illegal(spec::load::kMem.lsb);
      if (rows == 0) return illegal(spec::load::kRows.lsb);
      const uint32_t rs = row_size(mem);
      if (rbytes == 0 || rbytes % rs != 0 || rbytes % beat != 0) return illegal(spec::load::kRowBytes.lsb);
      if (haddr % beat != 0) return illegal(spec::load::kHostAddr.lsb);
      if (stride % beat != 0) return illegal(spec::load::kHostStride.lsb);
      if (auto f = range_fault(local, rows * (rbytes / rs), depth_of(mem))) return f;
      const uint64_t last = haddr + (rows - 1) * stride + rbytes - 1;
      if (haddr < win_base || last > win_last) return FaultRec{Fault::kDmaWindow, static_cast<uint32_t>(haddr)};
    } else if (op == Opcode::kLoadw) {
      if (auto f = range_fault(in.fields[0], n, p.wb_depth)) return f;
    } else if (op == Opcode::kMatmul) {
      const uint64_t ub_addr = in.fields[2], acc_addr = in.fields[3], rows = in.fields[4];
      if (rows == 0) return illegal(spec::matmul::kRows.lsb);
      if (auto f = range_fault(ub_addr, rows, p.ub_depth)) return f;
      if (auto f = range_fault(acc_addr, rows, p.acc_depth)) return f;
    } else if (op == Opcode::kActivate) {
      const uint64_t bias = in.fields[1], acc_addr = in.fields[2], ub_addr = in.fields[3], rows = in.fields[4],
                     bias_addr = in.fields[5], qp = in.fields[6];
      if (rows == 0) return illegal(spec::activate::kRows.lsb);
      if (auto f = range_fault(acc_addr, rows, p.acc_depth)) return f;
      if (auto f = range_fault(ub_addr, rows, p.ub_depth)) return f;
      if (bias != 0) {
        if (auto f = range_fault(bias_addr, 1, p.acc_depth)) return f;
      }
      if (auto f = range_fault(qp, 2, p.acc_depth)) return f;
    } else if (op == Opcode::kFence) {
      const uint64_t haddr = in.fields[2];
      if (haddr % 4 != 0) return illegal(spec::fence::kHostAddr.lsb);
      if (haddr < win_base || haddr + 3 > win_last) return FaultRec{Fault::kDmaWindow, static_cast<uint32_t>(haddr)};
    }
    return std::nullopt;
  }

  // ------------------------------------------------------------------------------------------
  // Fetch and decode of the instruction at RING_HEAD.
  bool ring_active() const { return !faulted && !fault_pending && ring_size != 0 && ring_head != ring_tail; }

  void peek_head() {
    if (head || !ring_active()) return;
    Head h;
    h.pc = static_cast<uint32_t>(ring_base + 16ull * ring_head);
    // Fetch timing: a burst brings up to fetch_burst_instrs instructions (not past the ring's
    // end or the tail); the next burst is requested once the CP starts using the current one.
    if (fetch_burst_left == 0) {
      const uint64_t to_end = ring_size - ring_head;
      const uint64_t avail =
          ring_tail > ring_head ? ring_tail - ring_head : static_cast<uint64_t>(ring_size) - ring_head + ring_tail;
      fetch_burst_left = std::max<uint64_t>(1, std::min<uint64_t>({pm.fetch_burst_instrs, to_end, avail}));
      const uint64_t start = std::max({fetch_data_time, burst_first_use, doorbell_time + pm.doorbell_to_fetch});
      fetch_data_time = start + mc.read_latency;
      burst_first_use = kNever;
    }
    fetch_data_time += ceil_div(spec::kInstrBytes, bw_rd);
    --fetch_burst_left;
    perf[kPerfRdBytes] += spec::kInstrBytes;
    h.avail = std::max(cp_time, fetch_data_time) + pm.decode_cycles;
    if (burst_first_use == kNever) burst_first_use = h.avail;

    if (!dev_in_host(h.pc, spec::kInstrBytes)) {
      h.fault = FaultRec{Fault::kAxiError, h.pc};
    } else {
      std::memcpy(h.w.data(), hptr(h.pc), spec::kInstrBytes);
      const auto* inf = spec::find_instr(h.w[0]);
      if (inf == nullptr) {
        h.fault = FaultRec{Fault::kIllegalOpcode, h.w[0]};
      } else if (const auto bit = isa::first_reserved_bit(h.w)) {
        h.fault = FaultRec{Fault::kIllegalField, *bit};
      } else {
        h.in = isa::decode(h.w);
        h.queue = static_cast<size_t>(inf->queue);
        h.fault = validate(h.w, h.in, *inf);
        if (!h.fault) h.fault = token_overflow(h.in, h.queue);
      }
    }
    head = h;
  }

  // ------------------------------------------------------------------------------------------
  // Tokens of a queue: which counters its pop/push flags name.
  static std::optional<Token> pop_prev_tok(size_t qi) {
    return qi == kQCompute ? std::optional<Token>(kLd2Cmp) : qi == kQStore ? std::optional<Token>(kCmp2St) : std::nullopt;
  }
  static std::optional<Token> pop_next_tok(size_t qi) {
    return qi == kQLoad ? std::optional<Token>(kCmp2Ld) : qi == kQCompute ? std::optional<Token>(kSt2Cmp) : std::nullopt;
  }
  static std::optional<Token> push_prev_tok(size_t qi) {
    return qi == kQCompute ? std::optional<Token>(kCmp2Ld) : qi == kQStore ? std::optional<Token>(kSt2Cmp) : std::nullopt;
  }
  static std::optional<Token> push_next_tok(size_t qi) {
    return qi == kQLoad ? std::optional<Token>(kLd2Cmp) : qi == kQCompute ? std::optional<Token>(kCmp2St) : std::nullopt;
  }

  /// TOKEN_OVERFLOW: the instruction pushes a counter whose program-order balance is already at
  /// TOKEN_MAX. FAULT_INFO is the lowest such counter.
  std::optional<FaultRec> token_overflow(const isa::Instr& in, size_t qi) const {
    uint32_t first = kNumTokens;
    const auto check = [&](bool flag, std::optional<Token> tok) {
      if (flag && tok && token_balance[*tok] >= static_cast<int64_t>(spec::kTokenMax)) {
        first = std::min<uint32_t>(first, static_cast<uint32_t>(*tok));
      }
    };
    check(in.push_prev, push_prev_tok(qi));
    check(in.push_next, push_next_tok(qi));
    if (first == kNumTokens) return std::nullopt;
    return FaultRec{Fault::kTokenOverflow, first};
  }

  void count_tokens(const isa::Instr& in, size_t qi) {
    if (in.push_prev) ++token_balance[*push_prev_tok(qi)];
    if (in.push_next) ++token_balance[*push_next_tok(qi)];
    if (in.pop_prev) --token_balance[*pop_prev_tok(qi)];
    if (in.pop_next) --token_balance[*pop_next_tok(qi)];
  }

  /// Earliest issue time of queue qi's head, or kNever when a token it pops has not been pushed.
  uint64_t issue_time(size_t qi, uint64_t* token_wait = nullptr) const {
    if (q[qi].empty()) return kNever;
    const Queued& e = q[qi].front();
    const uint64_t base = std::max(e.dispatched + pm.issue_cycles, accept[qi]);
    uint64_t t = base;
    uint64_t ld_tok = 0;
    if (e.in.pop_prev) {
      const auto tok = *pop_prev_tok(qi);
      if (tokens[tok].empty()) return kNever;
      t = std::max(t, tokens[tok].front());
      if (tok == kLd2Cmp) ld_tok = tokens[tok].front();
    }
    if (e.in.pop_next) {
      const auto tok = *pop_next_tok(qi);
      if (tokens[tok].empty()) return kNever;
      t = std::max(t, tokens[tok].front());
    }
    if (token_wait != nullptr) *token_wait = ld_tok > base ? ld_tok - base : 0;
    return t;
  }

  bool queues_empty() const { return q[0].empty() && q[1].empty() && q[2].empty(); }
  uint64_t max_done() const { return std::max({last_done[0], last_done[1], last_done[2]}); }

  /// Earliest dispatch (or fault-detection, or fence completion) time of the head, or kNever.
  uint64_t dispatch_time() {
    peek_head();
    if (!head) return kNever;
    uint64_t t = head->avail;
    if (head->fault) return t;
    if (head->queue == static_cast<size_t>(spec::Queue::kCtrl)) {
      if (!queues_empty()) return kNever;
      return fence_done_time(std::max(t, max_done()));
    }
    const size_t qi = head->queue;
    if (q[qi].size() >= p.queue_depth) return kNever;
    const uint64_t k = n_dispatched[qi];
    if (k >= p.queue_depth) t = std::max(t, issue_ring[qi][k % p.queue_depth]);
    return t;
  }

  uint64_t fence_done_time(uint64_t drained) const {
    return std::max(drained + pm.fence_overhead, wr_chan_free) + 1 + mc.write_latency;
  }

  uint64_t fault_raise_time() const {
    if (!fault_pending || !queues_empty()) return kNever;
    return std::max(fault_detect_time, max_done());
  }

  // ------------------------------------------------------------------------------------------
  void raise_pending(uint64_t t, const FaultRec& f, uint32_t pc) {
    if (fault_pending || faulted) return;
    fault_pending = f;
    fault_pending_pc = pc;
    fault_detect_time = t;
    head.reset();
  }

  void do_dispatch(uint64_t t) {
    Head h = *head;
    head.reset();
    if (h.fault) {
      raise_pending(t, *h.fault, h.pc);
      return;
    }
    cp_time = t;
    if (h.queue == static_cast<size_t>(spec::Queue::kCtrl)) {
      do_fence(t, h);
      if (fault_pending) return;  // RING_HEAD stays on the faulting FENCE
    } else {
      q[h.queue].push_back({h.in, h.pc, t});
      ++n_dispatched[h.queue];
      count_tokens(h.in, h.queue);
    }
    ring_head = ring_size == 0 ? 0 : (ring_head + 1) % ring_size;
    if (ring_head == ring_tail) fetch_burst_left = 0;  // prefetch stops at the tail
  }

  void do_fence(uint64_t t, const Head& h) {
    const uint32_t value = static_cast<uint32_t>(h.in.fields[1]);
    const uint64_t addr = h.in.fields[2];
    perf[kPerfWrBytes] += 4;
    wr_chan_free = std::max(wr_chan_free, t - mc.write_latency);
    if (!dev_in_host(addr, 4)) {
      raise_pending(t, FaultRec{Fault::kAxiError, static_cast<uint32_t>(addr)}, h.pc);
      return;
    }
    std::memcpy(hptr(addr), &value, 4);  // host is little-endian
    fence_value = value;
    if (h.in.fields[0] != 0) irq_status |= spec::reg::kIrqStatusFence;
    ++perf[kPerfInstret];
    for (auto& d : last_done) d = std::max(d, t);
  }

  void do_raise_fault(uint64_t t) {
    faulted = true;
    fault_cause = static_cast<uint32_t>(fault_pending->cause);
    fault_info = fault_pending->info;
    fault_pc = fault_pending_pc;
    fault_pending.reset();
    irq_status |= spec::reg::kIrqStatusFault;
    for (auto& d : last_done) d = std::max(d, t);
  }

  // ------------------------------------------------------------------------------------------
  void do_issue(size_t qi, uint64_t t) {
    uint64_t wait = 0;
    (void)issue_time(qi, &wait);
    Queued e = q[qi].front();
    q[qi].pop_front();
    issue_ring[qi][n_issued[qi] % p.queue_depth] = t;
    ++n_issued[qi];
    if (e.in.pop_prev) tokens[*pop_prev_tok(qi)].pop_front();
    if (e.in.pop_next) tokens[*pop_next_tok(qi)].pop_front();
    if (qi == kQCompute) perf[kPerfDmaWait] += wait;

    uint64_t done = t;
    switch (static_cast<Opcode>(e.in.opcode)) {
      case Opcode::kLoad: done = exec_load(e, t); break;
      case Opcode::kStore: done = exec_store(e, t); break;
      case Opcode::kLoadw: done = exec_loadw(e, t); break;
      case Opcode::kMatmul: done = exec_matmul(e, t); break;
      case Opcode::kActivate: done = exec_activate(e, t); break;
      case Opcode::kNop:
        done = t + 1;
        accept[qi] = t + 1;
        break;
      case Opcode::kFence: break;  // never queued
    }
    done = std::max(done, last_done[qi]);  // engines report done in acceptance order
    last_done[qi] = done;
    ++perf[kPerfInstret];
    if (e.in.push_prev) tokens[*push_prev_tok(qi)].push_back(done);
    if (e.in.push_next) tokens[*push_next_tok(qi)].push_back(done);
  }

  /// Bursts needed for one host row (split at 4 KiB boundaries and 256 beats).
  uint64_t bursts_of(uint64_t addr, uint64_t len) const {
    uint64_t count = 0;
    while (len > 0) {
      const uint64_t to_4k = 4096 - (addr & 4095);
      const uint64_t chunk = std::min<uint64_t>({len, to_4k, uint64_t{256} * beat});
      addr += chunk;
      len -= chunk;
      ++count;
    }
    return count;
  }

  uint64_t exec_load(const Queued& e, uint64_t t) {
    const uint64_t mem = e.in.fields[0], local = e.in.fields[1], haddr = e.in.fields[2], rows = e.in.fields[3],
                   rbytes = e.in.fields[4], stride = e.in.fields[5];
    const uint32_t rs = row_size(mem);
    const uint64_t rows_per = rbytes / rs;
    uint64_t bursts = 0, bytes = 0;
    for (uint64_t i = 0; i < rows; ++i) {
      const uint64_t a = haddr + i * stride;
      if (!dev_in_host(a, rbytes)) {
        raise_pending(t, FaultRec{Fault::kAxiError, static_cast<uint32_t>(a)}, e.pc);
        break;
      }
      bursts += bursts_of(a, rbytes);
      bytes += rbytes;
      const uint8_t* src = hptr(a);
      const uint64_t row0 = local + i * rows_per;
      if (mem == static_cast<uint64_t>(spec::Mem::kAcc)) {
        for (uint64_t j = 0; j < rbytes / 4; ++j) {
          uint32_t v = 0;
          std::memcpy(&v, src + 4 * j, 4);
          acc[static_cast<size_t>(row0 * n + j)] = v;
        }
      } else {
        auto& dst = mem == static_cast<uint64_t>(spec::Mem::kUb) ? ub : wb;
        std::memcpy(dst.data() + row0 * n, src, rbytes);
      }
    }
    perf[kPerfRdBytes] += bytes;
    const uint64_t data_start = std::max(t + pm.dma_setup + mc.read_latency, rd_chan_free);
    const uint64_t data_end = data_start + ceil_div(bytes, bw_rd) + bursts * pm.dma_burst_gap;
    rd_chan_free = data_end;
    const uint64_t done = data_end + pm.local_write_latency;
    accept[kQLoad] = pm.dma_pipelined ? t + 1 : done;
    return done;
  }

  uint64_t exec_store(const Queued& e, uint64_t t) {
    const uint64_t mem = e.in.fields[0], local = e.in.fields[1], haddr = e.in.fields[2], rows = e.in.fields[3],
                   rbytes = e.in.fields[4], stride = e.in.fields[5];
    const uint32_t rs = row_size(mem);
    const uint64_t rows_per = rbytes / rs;
    uint64_t bursts = 0, bytes = 0;
    for (uint64_t i = 0; i < rows; ++i) {
      const uint64_t a = haddr + i * stride;
      bursts += bursts_of(a, rbytes);
      bytes += rbytes;  // a failing burst is still completed on the bus
      if (!dev_in_host(a, rbytes)) {
        raise_pending(t, FaultRec{Fault::kAxiError, static_cast<uint32_t>(a)}, e.pc);
        break;
      }
      uint8_t* dst = hptr(a);
      const uint64_t row0 = local + i * rows_per;
      if (mem == static_cast<uint64_t>(spec::Mem::kAcc)) {
        for (uint64_t j = 0; j < rbytes / 4; ++j) {
          const uint32_t v = acc[static_cast<size_t>(row0 * n + j)];
          std::memcpy(dst + 4 * j, &v, 4);
        }
      } else {
        std::memcpy(dst, ub.data() + row0 * n, rbytes);
      }
    }
    perf[kPerfWrBytes] += bytes;
    const uint64_t data_start = std::max(t + pm.dma_setup + pm.local_read_latency, wr_chan_free);
    const uint64_t data_end = data_start + ceil_div(bytes, bw_wr) + bursts * pm.dma_burst_gap;
    wr_chan_free = data_end;
    const uint64_t done = data_end + mc.write_latency;
    accept[kQStore] = pm.dma_pipelined ? t + 1 : done;
    return done;
  }

  uint64_t exec_loadw(const Queued& e, uint64_t t) {
    const uint64_t wb_addr = e.in.fields[0];
    auto& shadow = wbank[1 - wsel];
    std::memcpy(shadow.data(), wb.data() + wb_addr * n, static_cast<size_t>(n) * n);
    const uint64_t shift_cycles = n + pm.loadw_extra;
    const uint64_t start = std::max({t, shifter_free, shadow_free}) + pm.wb_read_latency;
    const uint64_t end = start + shift_cycles;
    shifter_free = end;
    shadow_ready = end;
    perf[kPerfWeightShift] += shift_cycles;
    accept[kQCompute] = t + 1;
    return end;
  }

  uint64_t exec_matmul(const Queued& e, uint64_t t) {
    const bool accumulate = e.in.fields[0] != 0, swap = e.in.fields[1] != 0;
    const uint64_t ub_addr = e.in.fields[2], acc_addr = e.in.fields[3], rows = e.in.fields[4];
    if (swap) wsel ^= 1u;
    const auto& w = wbank[wsel];
    std::vector<uint32_t> sum(n);
    for (uint64_t i = 0; i < rows; ++i) {
      std::fill(sum.begin(), sum.end(), 0u);
      const int8_t* a = ub.data() + (ub_addr + i) * n;
      for (uint32_t k = 0; k < n; ++k) {
        const int32_t ak = a[k];
        if (ak == 0) continue;
        const int8_t* wrow = w.data() + static_cast<size_t>(k) * n;
        for (uint32_t c = 0; c < n; ++c) sum[c] += static_cast<uint32_t>(ak * static_cast<int32_t>(wrow[c]));
      }
      uint32_t* out = acc.data() + (acc_addr + i) * n;
      for (uint32_t c = 0; c < n; ++c) out[c] = accumulate ? out[c] + sum[c] : sum[c];
    }
    const uint64_t ready = std::max({t, mxu_in_free, act_free});
    uint64_t start = ready;
    if (swap) {
      start = std::max(start, shadow_ready);
      perf[kPerfWeightStall] += start - ready;
      shadow_free = start + 1;
    }
    mxu_in_free = start + rows;
    perf[kPerfMxuActive] += rows;
    const uint64_t done = start + rows + static_cast<uint64_t>(pm.mxu_fill_per_n) * n + pm.mxu_fill_extra;
    mxu_last_done = std::max(mxu_last_done, done);
    accept[kQCompute] = t + pm.matmul_issue;
    return done;
  }

  uint64_t exec_activate(const Queued& e, uint64_t t) {
    const bool relu = e.in.fields[0] != 0, bias = e.in.fields[1] != 0;
    const uint64_t acc_addr = e.in.fields[2], ub_addr = e.in.fields[3], rows = e.in.fields[4],
                   bias_addr = e.in.fields[5], qp = e.in.fields[6];
    const uint32_t* bias_row = acc.data() + bias_addr * n;
    const uint32_t* mult_row = acc.data() + qp * n;
    const uint32_t* shift_row = acc.data() + (qp + 1) * n;
    for (uint64_t i = 0; i < rows; ++i) {
      const uint32_t* src = acc.data() + (acc_addr + i) * n;
      int8_t* dst = ub.data() + (ub_addr + i) * n;
      for (uint32_t j = 0; j < n; ++j) {
        dst[j] = activate_element(src[j], bias ? bias_row[j] : 0u, mult_row[j], shift_row[j], relu);
      }
    }
    const uint64_t start = std::max({t, act_free, mxu_last_done});
    act_free = start + rows;
    const uint64_t busy = rows + pm.act_pipeline;
    perf[kPerfActBusy] += busy;
    accept[kQCompute] = t + 1;
    return start + busy;
  }

  // ------------------------------------------------------------------------------------------
  // The event loop.
  enum class Ev { kNone, kIssueLoad, kIssueCompute, kIssueStore, kDispatch, kRaiseFault };

  std::pair<Ev, uint64_t> next_event() {
    Ev best = Ev::kNone;
    uint64_t bt = kNever;
    for (size_t qi = 0; qi < 3; ++qi) {
      const uint64_t t = issue_time(qi);
      if (t < bt) {
        bt = t;
        best = static_cast<Ev>(static_cast<int>(Ev::kIssueLoad) + static_cast<int>(qi));
      }
    }
    const uint64_t td = dispatch_time();
    if (td < bt) {
      bt = td;
      best = Ev::kDispatch;
    }
    const uint64_t tf = fault_raise_time();
    if (tf < bt) {
      bt = tf;
      best = Ev::kRaiseFault;
    }
    return {best, bt};
  }

  bool irq_line() const { return (irq_status & irq_enable) != 0; }

  bool engines_busy() const { return !queues_empty() || max_done() > now || fault_pending.has_value(); }
  bool busy() const { return (ring_active()) || engines_busy(); }

  void settle_busy() {
    if (busy_since && !busy()) {
      const uint64_t end = std::max(*busy_since, std::min(now, max_done()));
      perf[kPerfCycles] += end - *busy_since;
      busy_since.reset();
    }
  }

  uint64_t run(uint64_t max_cycles) {
    if (hang) {  // time passes, nothing happens
      const uint64_t idle = std::min(max_cycles, kNever - now);
      now += idle;
      return idle;
    }
    if (irq_line()) return 0;
    const uint64_t start = now;
    const uint64_t horizon = max_cycles > kNever - now ? kNever : now + max_cycles;
    for (;;) {
      const auto [ev, t] = next_event();
      if (ev == Ev::kNone || t > horizon) {
        now = horizon;
        break;
      }
      now = std::max(now, t);
      switch (ev) {
        case Ev::kIssueLoad: do_issue(kQLoad, now); break;
        case Ev::kIssueCompute: do_issue(kQCompute, now); break;
        case Ev::kIssueStore: do_issue(kQStore, now); break;
        case Ev::kDispatch: do_dispatch(now); break;
        case Ev::kRaiseFault: do_raise_fault(now); break;
        case Ev::kNone: break;
      }
      if (irq_line()) break;
    }
    settle_busy();
    return now - start;
  }

  // ------------------------------------------------------------------------------------------
  // Registers.
  void soft_reset() {
    // Everything modelled up to now has completed (effects are applied at issue), so there is
    // no outstanding AXI transaction to wait for: the reset completes at once.
    settle_busy();
    for (auto& qq : q) qq.clear();
    for (auto& tk : tokens) tk.clear();
    token_balance = {};
    n_dispatched = {};
    n_issued = {};
    head.reset();
    fault_pending.reset();
    faulted = false;
    fault_cause = fault_pc = fault_info = 0;
    ring_base = ring_size = ring_head = ring_tail = 0;
    fence_value = 0;
    irq_status = 0;
    perf = {};
    perf_hi_latch = {};
    busy_since.reset();
    // The MXU's weight registers are flops with reset (both banks zero, bank 0 active); the
    // UB, WB and ACC are RAMs and keep their contents, as in the RTL.
    for (auto& bank : wbank) std::fill(bank.begin(), bank.end(), int8_t{0});
    wsel = 0;
    cp_time = fetch_data_time = burst_first_use = doorbell_time = now;
    fetch_burst_left = 0;
    accept = {now, now, now};
    last_done = {now, now, now};
    rd_chan_free = wr_chan_free = mxu_in_free = mxu_last_done = now;
    shifter_free = shadow_ready = shadow_free = act_free = now;
  }

  void doorbell(uint32_t tail) {
    ring_tail = tail;
    if (faulted || fault_pending) return;
    if (ring_size == 0 || ring_base % 16 != 0 || ring_tail >= ring_size) {
      if (!busy_since) busy_since = now;
      raise_pending(now, FaultRec{Fault::kRingConfig, ring_tail},
                    static_cast<uint32_t>(ring_base + 16ull * ring_head));
      return;
    }
    if (ring_head != ring_tail) {
      if (!busy_since) busy_since = now;
      if (!head && fetch_burst_left == 0) doorbell_time = now;
    }
  }

  uint64_t perf_value(size_t i) const {
    if (i == kPerfCycles && busy_since) return perf[i] + (now - *busy_since);
    return perf[i];
  }

  [[noreturn]] static void bad_offset(uint32_t offset, std::string_view what) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("ref: {} of undefined register offset {:#05x} (the device answers SLVERR)", what, offset));
  }

  uint32_t read_reg(uint32_t offset) {
    namespace r = spec::reg;
    if (offset >= r::kPerfCyclesLo && offset <= r::kPerfWrBytesHi && offset % 4 == 0) {
      const size_t i = (offset - r::kPerfCyclesLo) / 8;
      if ((offset - r::kPerfCyclesLo) % 8 == 0) {
        const uint64_t v = perf_value(i);
        perf_hi_latch[i] = static_cast<uint32_t>(v >> 32);
        return static_cast<uint32_t>(v);
      }
      return perf_hi_latch[i];
    }
    switch (offset) {
      case r::kId: return spec::kDeviceId;
      case r::kVersion: return spec::kVersionMajor << 16 | spec::kVersionMinor;
      case r::kArrayN: return p.array_n;
      case r::kUbDepth: return p.ub_depth;
      case r::kWbDepth: return p.wb_depth;
      case r::kAccDepth: return p.acc_depth;
      case r::kDmaDataW: return p.dma_data_w;
      case r::kFeatures:
        return r::kFeaturesWeightDoubleBuffer | r::kFeaturesBias | r::kFeaturesRelu | r::kFeaturesPerColumnQuant;
      case r::kQueueDepth: return p.queue_depth;
      case r::kCtrl: return 0;  // soft reset completes at once
      case r::kStatus:
        return (busy() ? r::kStatusBusy : 0u) | (faulted ? r::kStatusFault : 0u);
      case r::kIrqEnable: return irq_enable;
      case r::kIrqStatus: return irq_status;
      case r::kRingBase: return ring_base;
      case r::kRingSize: return ring_size;
      case r::kRingHead: return ring_head;
      case r::kRingTail: return ring_tail;
      case r::kFenceValue: return fence_value;
      case r::kFaultCause: return fault_cause;
      case r::kFaultPc: return fault_pc;
      case r::kFaultInfo: return fault_info;
      case r::kDmaWinBase: return win_base;
      case r::kDmaWinLast: return win_last;
      case r::kPerfCtrl: return 0;
      default: bad_offset(offset, "read");
    }
  }

  void write_reg(uint32_t offset, uint32_t value) {
    namespace r = spec::reg;
    // Access types and the bits that exist come from the generated register table, like the
    // RTL's generated register block.
    const spec::RegInfo* info = spec::find_reg(offset);
    if (info == nullptr) bad_offset(offset, "write");
    if (info->kind == spec::Access::kRo) return;  // read-only: the write is ignored
    value &= info->mask;
    switch (offset) {
      case r::kCtrl:
        if ((value & r::kCtrlSoftReset) != 0) soft_reset();
        return;
      case r::kIrqEnable: irq_enable = value; return;
      case r::kIrqStatus: irq_status &= ~value; return;
      case r::kRingBase: ring_base = value; return;
      case r::kRingSize: ring_size = value; return;
      case r::kRingTail: doorbell(value); return;
      case r::kDmaWinBase: win_base = value; return;
      case r::kDmaWinLast: win_last = value; return;
      case r::kPerfCtrl:
        if ((value & r::kPerfCtrlClear) != 0) {
          perf = {};
          perf_hi_latch = {};
          if (busy_since) busy_since = now;
        }
        return;
      default: bad_offset(offset, "write");
    }
  }
};

RefDevice::RefDevice(const DeviceParams& params, const HostMemoryConfig& memory, const PerfModel& model)
    : impl_(std::make_unique<Impl>(params, memory, model)) {}

RefDevice::~RefDevice() = default;

uint32_t RefDevice::read_reg(uint32_t offset) {
  impl_->check_hang("read", offset);
  return impl_->read_reg(offset);
}
void RefDevice::write_reg(uint32_t offset, uint32_t value) {
  impl_->check_hang("write", offset);
  impl_->write_reg(offset, value);
}
void RefDevice::inject_memory_fault(bool on) { impl_->mem_fault = on; }
void RefDevice::inject_hang(bool on) { impl_->hang = on; }

uint64_t RefDevice::mem_base() const { return impl_->mc.base; }
uint64_t RefDevice::mem_size() const { return impl_->mc.size; }
void RefDevice::mem_map(uint64_t addr, uint64_t bytes) { impl_->map(addr, bytes); }
uint64_t RefDevice::mem_mapped() const { return impl_->mapped_bytes; }

void RefDevice::mem_write(uint64_t addr, const void* src, size_t bytes) {
  if (!impl_->in_host(addr, bytes)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("ref: host memory write of {} bytes at {:#x} is outside mapped memory in [{:#x}, {:#x})", bytes, addr,
                            impl_->mc.base, impl_->mc.base + impl_->mc.size));
  }
  if (bytes != 0) std::memcpy(impl_->hptr(addr), src, bytes);
}

void RefDevice::mem_read(uint64_t addr, void* dst, size_t bytes) {
  if (!impl_->in_host(addr, bytes)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("ref: host memory read of {} bytes at {:#x} is outside mapped memory in [{:#x}, {:#x})", bytes, addr,
                            impl_->mc.base, impl_->mc.base + impl_->mc.size));
  }
  if (bytes != 0) std::memcpy(dst, impl_->hptr(addr), bytes);
}

void RefDevice::reset() {
  if (impl_->hang) return;  // a hung device does not take the reset either
  impl_->soft_reset();
  impl_->irq_enable = 0;
  impl_->win_base = 0;
  impl_->win_last = 0xFFFFFFFFu;
}

bool RefDevice::irq() { return impl_->irq_line(); }
bool RefDevice::wait_irq(double timeout_s) {
  if (impl_->irq_line()) return true;
  if (timeout_s <= 0) return false;
  impl_->run(impl_->wait_slice);
  return impl_->irq_line();
}
uint64_t RefDevice::run(uint64_t max_cycles) { return impl_->run(max_cycles); }
uint64_t RefDevice::cycles() const { return impl_->now; }
void RefDevice::set_wait_slice(uint64_t cycles) { impl_->wait_slice = cycles == 0 ? 1 : cycles; }
void RefDevice::start_wave(const std::string&, uint64_t, uint64_t) {
  throw Error(ErrorKind::kUnsupported, "waveforms need the rtl backend; the ref backend has no signals to trace");
}
const DeviceParams& RefDevice::params() const { return impl_->p; }
const PerfModel& RefDevice::perf_model() const { return impl_->pm; }

}  // namespace tpuw::ref
