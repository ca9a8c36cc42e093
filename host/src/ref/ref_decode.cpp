// Instruction fetch and decode: the fetch timing of bursts from the ring (prefetch up to
// fetch_burst_instrs), decoding the instruction at RING_HEAD and validating it in the contract's
// order (docs/architecture.md, "Validation"), including the TOKEN_OVERFLOW check. Mirrors
// tpu_cmd_fetch and tpu_decode (rtl/core).
#include "ref_impl.h"

#include <algorithm>
#include <cstring>

#include "tpuw/activate.h"
#include "tpuw/numerics.h"

namespace tpuw::ref {

// Validation (docs/architecture.md, "Validation"), in the contract's order.
std::optional<FaultRec> RefDevice::Impl::range_fault(uint64_t start, uint64_t count, uint64_t depth) {
  if (start + count > depth) return FaultRec{Fault::kLocalRange, static_cast<uint32_t>(std::max(start, depth))};
  return std::nullopt;
}

std::optional<FaultRec> RefDevice::Impl::validate(const isa::Word& w, const isa::Instr& in, const spec::InstrInfo& inf) const {
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
    namespace ld = spec::load;  // LOAD and STORE share the field order (asserted in tpu_decode)
    const uint64_t mem = in.fields[ld::kIdxMem], local = in.fields[ld::kIdxLocalAddr], haddr = in.fields[ld::kIdxHostAddr],
                   rows = in.fields[ld::kIdxRows], rbytes = in.fields[ld::kIdxRowBytes], stride = in.fields[ld::kIdxHostStride];
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
    // ISA 1.1: a bf16 tile is N row pairs (wb_addr even).
    namespace lw = spec::loadw;
    const uint64_t wb_addr = in.fields[lw::kIdxWbAddr], pair = in.fields[lw::kIdxBf16] != 0 ? 2 : 1;
    if (pair == 2 && wb_addr % 2 != 0) return illegal(lw::kWbAddr.lsb);
    if (auto f = range_fault(wb_addr, pair * n, p.wb_depth)) return f;
  } else if (op == Opcode::kMatmul) {
    namespace mm = spec::matmul;
    const uint64_t ub_addr = in.fields[mm::kIdxUbAddr], acc_addr = in.fields[mm::kIdxAccAddr], rows = in.fields[mm::kIdxRows];
    const uint64_t pair = in.fields[mm::kIdxBf16] != 0 ? 2 : 1;
    if (rows == 0) return illegal(mm::kRows.lsb);
    if (pair == 2 && ub_addr % 2 != 0) return illegal(mm::kUbAddr.lsb);
    if (auto f = range_fault(ub_addr, pair * rows, p.ub_depth)) return f;
    if (auto f = range_fault(acc_addr, rows, p.acc_depth)) return f;
  } else if (op == Opcode::kActivate) {
    namespace ac = spec::activate;
    const uint64_t bias = in.fields[ac::kIdxBias], acc_addr = in.fields[ac::kIdxAccAddr], ub_addr = in.fields[ac::kIdxUbAddr],
                   rows = in.fields[ac::kIdxRows], bias_addr = in.fields[ac::kIdxBiasAddr], qp = in.fields[ac::kIdxQparamAddr];
    const bool bf16 = in.fields[ac::kIdxBf16] != 0;
    const uint64_t pair = bf16 ? 2 : 1;
    const bool lut = in.fields[ac::kIdxLut] != 0;
    if (rows == 0) return illegal(ac::kRows.lsb);
    if (bf16 && lut) return illegal(ac::kLut.lsb);  // the table maps int8 results only
    if (bf16 && ub_addr % 2 != 0) return illegal(ac::kUbAddr.lsb);
    if (auto f = range_fault(acc_addr, rows, p.acc_depth)) return f;
    if (auto f = range_fault(ub_addr, pair * rows, p.ub_depth)) return f;
    if (bias != 0) {
      if (auto f = range_fault(bias_addr, 1, p.acc_depth)) return f;
    }
    if (!bf16) {  // bf16 mode has no requantization parameters: qparam_addr is not checked
      // multiplier and shift rows, then (lut) the table rows
      if (auto f = range_fault(qp, 2 + (lut ? lut_rows(n) : 0), p.acc_depth)) return f;
    }
  } else if (op == Opcode::kTranspose) {
    namespace tr = spec::transpose;
    const uint64_t src = in.fields[tr::kIdxSrcAddr], dst = in.fields[tr::kIdxDstAddr], rows = in.fields[tr::kIdxRows];
    const uint64_t pair = in.fields[tr::kIdxBf16] != 0 ? 2 : 1;
    if (rows == 0 || rows > n) return illegal(tr::kRows.lsb);
    if (pair == 2 && src % 2 != 0) return illegal(tr::kSrcAddr.lsb);
    if (pair == 2 && dst % 2 != 0) return illegal(tr::kDstAddr.lsb);
    if (auto f = range_fault(src, pair * rows, p.ub_depth)) return f;
    if (auto f = range_fault(dst, pair * n, p.ub_depth)) return f;
  } else if (op == Opcode::kVector) {
    namespace ve = spec::vector;
    const uint64_t opv = in.fields[ve::kIdxOp], dst = in.fields[ve::kIdxDstAddr], a = in.fields[ve::kIdxAAddr],
                   bb = in.fields[ve::kIdxBAddr], rows = in.fields[ve::kIdxRows];
    if (!num::vecop_defined(static_cast<uint32_t>(opv))) return illegal(ve::kOp.lsb);
    const auto vop = static_cast<spec::VecOp>(opv);
    const bool colsum = vop == spec::VecOp::kColsum, reads_b = num::vecop_reads_b(vop);
    if (rows == 0) return illegal(ve::kRows.lsb);
    // An element-wise destination equals a source range or does not overlap it.
    const auto bad_overlap = [&](uint64_t src) { return dst != src && dst < src + rows && src < dst + rows; };
    if (!colsum && (bad_overlap(a) || (reads_b && bad_overlap(bb)))) return illegal(ve::kDstAddr.lsb);
    if (auto f = range_fault(dst, colsum ? 1 : rows, p.acc_depth)) return f;
    if (auto f = range_fault(a, rows, p.acc_depth)) return f;
    if (reads_b) {
      if (auto f = range_fault(bb, rows, p.acc_depth)) return f;
    }
  } else if (op == Opcode::kFence) {
    const uint64_t haddr = in.fields[spec::fence::kIdxHostAddr];
    if (haddr % 4 != 0) return illegal(spec::fence::kHostAddr.lsb);
    if (haddr < win_base || haddr + 3 > win_last) return FaultRec{Fault::kDmaWindow, static_cast<uint32_t>(haddr)};
  }
  return std::nullopt;
}

// Fetch and decode of the instruction at RING_HEAD.
void RefDevice::Impl::peek_head() {
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
    // A build without bf16 (RefConfig::enable_bf16 = false, the RTL's EnableBf16 = 0) has no
    // VECTOR unit (ILLEGAL_OPCODE) and its `bf16` mode bits count as reserved (rule 2).
    const auto op0 = static_cast<Opcode>(h.w[0] & 0xFF);
    uint32_t absent = 0;
    if (!cfg.enable_bf16 && (op0 == Opcode::kLoadw || op0 == Opcode::kMatmul || op0 == Opcode::kActivate ||
                             op0 == Opcode::kTranspose)) {
      absent = 1u << spec::matmul::kBf16.lsb;  // bit 14 in all four
    }
    // Without the lookup table (RefConfig::enable_lut = false, EnableLut = 0) ACTIVATE `lut` is
    // reserved too.
    if (!cfg.enable_lut && op0 == Opcode::kActivate) absent |= 1u << spec::activate::kLut.lsb;
    uint32_t w0 = 0;
    std::memcpy(&w0, h.w.data(), sizeof w0);  // instruction bits 31:0
    const uint32_t w0_rsv = inf == nullptr ? 0 : (w0 & (inf->reserved_mask[0] | absent));
    if (inf == nullptr || (op0 == Opcode::kVector && !cfg.enable_bf16)) {
      h.fault = FaultRec{Fault::kIllegalOpcode, h.w[0]};
    } else if (w0_rsv != 0) {
      h.fault = FaultRec{Fault::kIllegalField, static_cast<uint32_t>(__builtin_ctz(w0_rsv))};
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

/// TOKEN_OVERFLOW: the instruction pushes a counter whose program-order balance is already at
/// TOKEN_MAX. FAULT_INFO is the lowest such counter.
std::optional<FaultRec> RefDevice::Impl::token_overflow(const isa::Instr& in, size_t qi) const {
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

}  // namespace tpuw::ref
