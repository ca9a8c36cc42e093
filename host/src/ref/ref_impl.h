// Private to the ref backend: the reference model's shared state (RefDevice::Impl) and the
// declarations of its parts. Each part is defined in the file named beside it, mirroring the
// RTL block it models (docs/architecture.md, "Reference model"):
//   ref_device.cpp   tpu_top's Backend/SimControl surface, host memory pages, fault injection
//   ref_regs.cpp     tpu_reg_top / tpu_reg_block: register reads and writes, soft reset, doorbell
//   ref_decode.cpp   tpu_cmd_fetch + tpu_decode: instruction fetch timing, decode, validation
//   ref_cmd_proc.cpp tpu_cmd_dispatch / tpu_cmd_proc: queues, dependency tokens, FENCE, faults
//   ref_dma.cpp      tpu_dma_load / tpu_dma_store / tpu_dma_burst_gen: LOAD and STORE
//   ref_compute.cpp  tpu_compute / tpu_mxu / tpu_act_seq / tpu_act_unit: LOADW, MATMUL, ACTIVATE
//   ref_vector.cpp   the transpose and vector units (ISA 1.1): TRANSPOSE, VECTOR
//   ref_events.cpp   no RTL block (the clock): the discrete-event loop and busy-cycle accounting
// The timing constants of the analytic cycle model are PerfModel (tpuw/ref/ref_device.h); each
// engine applies them beside its functional effect, in the same function.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "tpuw/asm.h"
#include "tpuw/backend.h"
#include "tpuw/ref/ref_device.h"
#include "tpuw/spec.h"

namespace tpuw::ref {

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

inline uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

inline bool is_pow2(uint32_t v) { return v != 0 && (v & (v - 1)) == 0; }

struct RefDevice::Impl {
  DeviceParams p;
  HostMemoryConfig mc;
  PerfModel pm;
  RefConfig cfg;
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

  // Local memories. UB/WB rows of n int8, ACC rows of n int32 (kept as uint32 for wrap-around)
  // or fp32 bit patterns. A bf16 row is a row pair 2r, 2r+1: 2n contiguous bytes, little-endian.
  std::vector<int8_t> ub, wb;
  std::vector<uint32_t> acc;
  // The MXU's 16-bit weight registers, [k*n + nn]: an int8 LOADW stores the sign-extended byte,
  // a bf16 LOADW the bf16 bits; int8 MATMUL reads the low byte, bf16 MATMUL all 16 bits.
  std::array<std::vector<uint16_t>, 2> wbank;
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

  // Fault injection (RefDevice::inject_*).
  bool mem_fault = false;
  bool hang = false;

  // ---- Engines ----
  std::array<uint64_t, 3> accept{};     // engine can accept its next instruction
  std::array<uint64_t, 3> last_done{};  // done time of the engine's last instruction
  uint64_t rd_chan_free = 0, wr_chan_free = 0;
  uint64_t mxu_in_free = 0, mxu_last_done = 0;
  uint64_t shifter_free = 0, shadow_ready = 0, shadow_free = 0;
  uint64_t act_free = 0;

  std::optional<uint64_t> busy_since;

  // ---- ref_device.cpp: construction, host memory ----
  Impl(const DeviceParams& params, const HostMemoryConfig& memory, const PerfModel& model, const RefConfig& config);
  bool in_host(uint64_t addr, uint64_t len) const {
    if (!(addr >= mc.base && len <= mc.size && addr - mc.base <= mc.size - len)) return false;
    if (len == 0) return true;
    for (uint64_t pg = (addr - mc.base) / kMemPageBytes; pg <= (addr - mc.base + len - 1) / kMemPageBytes; ++pg) {
      if (!page_mapped[pg]) return false;
    }
    return true;
  }
  void map(uint64_t addr, uint64_t len);
  uint8_t* hptr(uint64_t addr) { return host.get() + (addr - mc.base); }
  // The device's own accesses (fetch, DMA, FENCE): refused while a memory fault is injected.
  bool dev_in_host(uint64_t addr, uint64_t len) const { return !mem_fault && in_host(addr, len); }
  void check_hang(std::string_view what, uint32_t offset) const;

  // ---- ref_decode.cpp: fetch, decode, validation ----
  static std::optional<FaultRec> range_fault(uint64_t start, uint64_t count, uint64_t depth);
  uint32_t row_size(uint64_t mem) const { return mem == static_cast<uint64_t>(spec::Mem::kAcc) ? 4 * n : n; }
  uint64_t depth_of(uint64_t mem) const {
    switch (static_cast<spec::Mem>(mem)) {
      case spec::Mem::kUb: return p.ub_depth;
      case spec::Mem::kWb: return p.wb_depth;
      case spec::Mem::kAcc: return p.acc_depth;
    }
    return 0;
  }
  std::optional<FaultRec> validate(const isa::Word& w, const isa::Instr& in, const spec::InstrInfo& inf) const;
  bool ring_active() const { return !faulted && !fault_pending && ring_size != 0 && ring_head != ring_tail; }
  void peek_head();
  std::optional<FaultRec> token_overflow(const isa::Instr& in, size_t qi) const;

  // ---- ref_cmd_proc.cpp: queues, tokens, dispatch, FENCE, faults, issue ----
  static std::optional<Token> pop_prev_tok(size_t qi);
  static std::optional<Token> pop_next_tok(size_t qi);
  static std::optional<Token> push_prev_tok(size_t qi);
  static std::optional<Token> push_next_tok(size_t qi);
  void count_tokens(const isa::Instr& in, size_t qi);
  uint64_t issue_time(size_t qi, uint64_t* token_wait = nullptr) const;
  bool queues_empty() const { return q[0].empty() && q[1].empty() && q[2].empty(); }
  uint64_t max_done() const { return std::max({last_done[0], last_done[1], last_done[2]}); }
  uint64_t dispatch_time();
  uint64_t fence_done_time(uint64_t drained) const;
  uint64_t fault_raise_time() const;
  void raise_pending(uint64_t t, const FaultRec& f, uint32_t pc);
  void do_dispatch(uint64_t t);
  void do_fence(uint64_t t, const Head& h);
  void do_raise_fault(uint64_t t);
  void do_issue(size_t qi, uint64_t t);

  // ---- ref_dma.cpp: LOAD and STORE ----
  uint64_t bursts_of(uint64_t addr, uint64_t len) const;
  uint64_t exec_load(const Queued& e, uint64_t t);
  uint64_t exec_store(const Queued& e, uint64_t t);

  // ---- ref_compute.cpp: LOADW, MATMUL, ACTIVATE; ref_vector.cpp: TRANSPOSE, VECTOR ----
  uint64_t exec_loadw(const Queued& e, uint64_t t);
  uint64_t exec_matmul(const Queued& e, uint64_t t);
  uint64_t exec_activate(const Queued& e, uint64_t t);
  uint64_t exec_transpose(const Queued& e, uint64_t t);
  uint64_t exec_vector(const Queued& e, uint64_t t);
  // Timing of a non-matrix unit (ACTIVATE, TRANSPOSE, VECTOR): waits for the MXU's results and
  // the previous such instruction, takes `rows` cycles of the shared UB/ACC ports plus `pipeline`.
  uint64_t act_unit_timing(uint64_t t, uint64_t rows, uint64_t pipeline);

  // ---- ref_events.cpp: the event loop ----
  enum class Ev { kNone, kIssueLoad, kIssueCompute, kIssueStore, kDispatch, kRaiseFault };
  std::pair<Ev, uint64_t> next_event();
  bool irq_line() const { return (irq_status & irq_enable) != 0; }
  bool engines_busy() const { return !queues_empty() || max_done() > now || fault_pending.has_value(); }
  bool busy() const { return (ring_active()) || engines_busy(); }
  void settle_busy();
  uint64_t run(uint64_t max_cycles);

  // ---- ref_regs.cpp: the register block ----
  void soft_reset();
  void doorbell(uint32_t tail);
  uint64_t perf_value(size_t i) const;
  [[noreturn]] static void bad_offset(uint32_t offset, std::string_view what);
  uint32_t read_reg(uint32_t offset);
  void write_reg(uint32_t offset, uint32_t value);
};

}  // namespace tpuw::ref
