// The compute engine: LOADW into the MXU's shadow weight bank, MATMUL (weight-stationary,
// int8 x int8 -> wrapping int32 accumulation) and ACTIVATE (bias, per-column requantization,
// ReLU, saturation), each with its analytic timing. Mirrors tpu_compute, tpu_mxu, tpu_act_seq
// and tpu_act_unit (rtl/core).
#include "ref_impl.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tpuw/activate.h"

namespace tpuw::ref {

uint64_t RefDevice::Impl::exec_loadw(const Queued& e, uint64_t t) {
  const uint64_t wb_addr = e.in.fields[spec::loadw::kIdxWbAddr];
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

uint64_t RefDevice::Impl::exec_matmul(const Queued& e, uint64_t t) {
  namespace mm = spec::matmul;
  const bool accumulate = e.in.fields[mm::kIdxAccumulate] != 0, swap = e.in.fields[mm::kIdxSwap] != 0;
  const uint64_t ub_addr = e.in.fields[mm::kIdxUbAddr], acc_addr = e.in.fields[mm::kIdxAccAddr], rows = e.in.fields[mm::kIdxRows];
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

uint64_t RefDevice::Impl::exec_activate(const Queued& e, uint64_t t) {
  namespace ac = spec::activate;
  const bool relu = e.in.fields[ac::kIdxRelu] != 0, bias = e.in.fields[ac::kIdxBias] != 0;
  const uint64_t acc_addr = e.in.fields[ac::kIdxAccAddr], ub_addr = e.in.fields[ac::kIdxUbAddr], rows = e.in.fields[ac::kIdxRows],
                 bias_addr = e.in.fields[ac::kIdxBiasAddr], qp = e.in.fields[ac::kIdxQparamAddr];
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

}  // namespace tpuw::ref
