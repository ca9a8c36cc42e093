// The register block (docs/isa.md register map): reads, writes with the access types of the
// generated register table, the performance counters with their latched high halves, soft
// reset and the RING_TAIL doorbell. Mirrors tpu_reg_top / tpu_reg_block (rtl/core).
#include "ref_impl.h"

#include <algorithm>

#include <fmt/format.h>

#include "tpuw/error.h"

namespace tpuw::ref {

void RefDevice::Impl::soft_reset() {
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
  for (auto& bank : wbank) std::fill(bank.begin(), bank.end(), uint16_t{0});
  wsel = 0;
  cp_time = fetch_data_time = burst_first_use = doorbell_time = now;
  fetch_burst_left = 0;
  accept = {now, now, now};
  last_done = {now, now, now};
  rd_chan_free = wr_chan_free = mxu_in_free = mxu_last_done = now;
  shifter_free = shadow_ready = shadow_free = act_free = now;
}

void RefDevice::Impl::doorbell(uint32_t tail) {
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

uint64_t RefDevice::Impl::perf_value(size_t i) const {
  if (i == kPerfCycles && busy_since) return perf[i] + (now - *busy_since);
  return perf[i];
}

void RefDevice::Impl::bad_offset(uint32_t offset, std::string_view what) {
  throw Error(ErrorKind::kInvalidArgument,
              fmt::format("ref: {} of undefined register offset {:#05x} (the device answers SLVERR)", what, offset));
}

uint32_t RefDevice::Impl::read_reg(uint32_t offset) {
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
      return r::kFeaturesWeightDoubleBuffer | r::kFeaturesBias | r::kFeaturesRelu | r::kFeaturesPerColumnQuant |
             r::kFeaturesTranspose | (cfg.enable_bf16 ? r::kFeaturesBf16 : 0u) |
             (cfg.enable_lut ? r::kFeaturesLut : 0u);
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

void RefDevice::Impl::write_reg(uint32_t offset, uint32_t value) {
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

}  // namespace tpuw::ref
