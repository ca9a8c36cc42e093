// libFuzzer target: differential test of the instruction decoder. The input is a short program of
// raw 16-byte instruction words (1 to 32; a trailing partial word is dropped). Every word goes
// through the verilated RTL decoder (rtl/core/tpu_decode.sv alone, N=4 configuration: the same
// parameters as the ref backend's array_n = 4 device, checked against its registers), and the
// whole program runs on a ref device (the reference model's fetch, decode and validation, then
// execution). Both must agree:
//   - the first word the RTL decoder faults on is where the ref device faults, with the same
//     FAULT_CAUSE and FAULT_INFO (ILLEGAL_OPCODE, ILLEGAL_FIELD, LOCAL_RANGE, DMA_WINDOW);
//   - the ref device never reports a decode-time cause on a word the RTL decoder accepts;
//     execution-time causes (AXI_ERROR, TOKEN_OVERFLOW) come only from words the RTL accepts,
//     before the first one it rejects;
//   - a word the RTL accepts goes to the queue of its opcode (QUEUE_LOAD/STORE/COMPUTE/CTRL).
// Dependency flags that are legal for an instruction's queue and would wait for a token (pop) are
// cleared before the run (a random program would otherwise deadlock until the driver's timeout);
// illegal ones are kept, so rule 3 is still compared. The DMA window is the driver's (device
// memory below the command ring), read back from DMA_WIN_BASE/LAST.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "Vtpu_decode_n4.h"
#include "verilated.h"

#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/sim_control.h"
#include "tpuw/spec.h"

namespace {

using tpuw::spec::Fault;

// The verilated decoder's parameters (tests/fuzz/CMakeLists.txt) and the ref device they must match.
constexpr uint32_t kN = 4, kUbDepth = 2048, kWbDepth = 512, kAccDepth = 1024;

struct Harness {
  std::unique_ptr<VerilatedContext> ctx;
  std::unique_ptr<Vtpu_decode_n4> rtl;
  std::unique_ptr<tpuw::Device> dev;
  uint32_t win_base = 0, win_last = 0;
};

[[noreturn]] void mismatch(const char* what, size_t index, std::span<const uint8_t> word, unsigned a_cause,
                           uint32_t a_info, unsigned b_cause, uint32_t b_info) {
  std::fprintf(stderr, "decode_diff: %s at word %zu:", what, index);
  for (size_t i = word.size(); i-- > 0;) std::fprintf(stderr, "%02x", word[i]);
  std::fprintf(stderr, "\n  rtl cause %u info 0x%x, ref cause %u info 0x%x\n", a_cause, a_info, b_cause, b_info);
  std::abort();
}

Harness& harness() {
  static Harness* const h = [] {
    auto* x = new Harness;
    x->ctx = std::make_unique<VerilatedContext>();
    x->rtl = std::make_unique<Vtpu_decode_n4>(x->ctx.get(), "decode");
    tpuw::BackendConfig cfg;
    cfg.array_n = kN;
    cfg.memory.size = 1u << 20;
    tpuw::DeviceOptions opt;
    opt.ring_entries = 64;
    opt.timeout_cycles = 400'000;
    opt.timeout_seconds = 5.0;
    x->dev = std::make_unique<tpuw::Device>(tpuw::Device::open("ref", cfg, opt));
    if (tpuw::SimControl* sim = x->dev->backend().sim_control()) sim->set_wait_slice(5000);
    namespace reg = tpuw::spec::reg;
    tpuw::Backend& b = x->dev->backend();
    if (b.read_reg(reg::kUbDepth) != kUbDepth || b.read_reg(reg::kWbDepth) != kWbDepth ||
        b.read_reg(reg::kAccDepth) != kAccDepth) {
      std::fprintf(stderr, "decode_diff: the ref device's depths differ from the verilated decoder's\n");
      std::abort();
    }
    x->win_base = b.read_reg(reg::kDmaWinBase);
    x->win_last = b.read_reg(reg::kDmaWinLast);
    return x;
  }();
  return *h;
}

struct Decoded {
  bool fault = false;
  unsigned cause = 0;
  uint32_t info = 0;
  unsigned queue = 0;
};

Decoded rtl_decode(Harness& h, std::span<const uint8_t, tpuw::spec::kInstrBytes> word) {
  for (size_t i = 0; i < 4; ++i) {
    uint32_t w = 0;
    std::memcpy(&w, word.data() + 4 * i, 4);  // bits 32i+31 .. 32i, little-endian like the DMA
    h.rtl->instr_i[i] = w;
  }
  h.rtl->win_base_i = h.win_base;
  h.rtl->win_last_i = h.win_last;
  h.rtl->eval();
  return {h.rtl->fault_o != 0, h.rtl->cause_o, h.rtl->info_o, h.rtl->queue_o};
}

bool decode_time(unsigned cause) {
  const auto c = static_cast<Fault>(cause);
  return c == Fault::kIllegalOpcode || c == Fault::kIllegalField || c == Fault::kLocalRange || c == Fault::kDmaWindow;
}

// Clears the pop flags an instruction's queue allows (they would wait for a token).
void clear_legal_pops(std::span<uint8_t, tpuw::spec::kInstrBytes> word) {
  using tpuw::spec::Queue;
  const auto* inf = tpuw::spec::find_instr(word[0]);
  if (inf == nullptr) return;
  const uint8_t pop_prev = 1u << (tpuw::spec::header::kPopPrev.lsb - 8);
  const uint8_t pop_next = 1u << (tpuw::spec::header::kPopNext.lsb - 8);
  switch (inf->queue) {
    case Queue::kLoad: word[1] = static_cast<uint8_t>(word[1] & ~pop_next); break;
    case Queue::kStore: word[1] = static_cast<uint8_t>(word[1] & ~pop_prev); break;
    case Queue::kCompute: word[1] = static_cast<uint8_t>(word[1] & ~(pop_prev | pop_next)); break;
    case Queue::kCtrl: break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr size_t kW = tpuw::spec::kInstrBytes;
  constexpr size_t kMaxWords = 32;
  const size_t n = std::min(size / kW, kMaxWords);
  if (n == 0) return 0;
  Harness& h = harness();
  std::vector<uint8_t> code(data, data + n * kW);
  std::vector<Decoded> rtl(n);
  std::optional<size_t> first;
  for (size_t i = 0; i < n; ++i) {
    const std::span<uint8_t, kW> w(code.data() + i * kW, kW);
    clear_legal_pops(w);
    rtl[i] = rtl_decode(h, w);
    const auto* inf = tpuw::spec::find_instr(w[0]);
    if (!rtl[i].fault && (inf == nullptr || static_cast<unsigned>(inf->queue) != rtl[i].queue)) {
      mismatch("RTL queue differs from the opcode's", i, w, rtl[i].cause, rtl[i].queue, 0,
               inf == nullptr ? 0xFFu : static_cast<unsigned>(inf->queue));
    }
    if (rtl[i].fault && !first) first = i;
  }

  tpuw::Device& dev = *h.dev;
  std::optional<tpuw::FaultReport> f;
  bool timed_out = false;
  try {
    dev.wait(dev.submit_code(code));
  } catch (const tpuw::Error& e) {
    if (e.kind() == tpuw::ErrorKind::kDeviceFault) {
      f = dev.fault();
      if (!f) std::abort();  // kDeviceFault without STATUS.FAULT
    } else if (e.kind() == tpuw::ErrorKind::kTimeout) {
      timed_out = true;
    } else {
      throw;
    }
    dev.reset();
  }
  if (timed_out) return 0;  // a long-running legal program: nothing to compare
  if (!f) {
    if (first) {
      mismatch("the ref ran a word the RTL decoder rejects", *first, std::span(code).subspan(*first * kW, kW),
               rtl[*first].cause, rtl[*first].info, 0, 0);
    }
    return 0;
  }
  if (!f->program_index || *f->program_index > n) std::abort();  // the fault must name a word of this program
  const size_t j = static_cast<size_t>(*f->program_index);
  const unsigned cause = static_cast<unsigned>(f->cause);
  const auto word = std::span(code).subspan(std::min(j, n - 1) * kW, kW);
  if (j == n) mismatch("the driver's FENCE faulted", j, word, 0, 0, cause, f->info);
  if (decode_time(cause)) {
    if (!first || j != *first || rtl[j].cause != cause || rtl[j].info != f->info) {
      mismatch("decode fault differs", j, word, rtl[j].cause, rtl[j].info, cause, f->info);
    }
  } else if (rtl[j].fault || (first && j > *first)) {
    mismatch("execution fault on or after a word the RTL rejects", j, word, rtl[j].cause, rtl[j].info, cause, f->info);
  }
  return 0;
}
