// The compute engine: LOADW into the MXU's shadow weight bank (int8 or bf16, optionally
// transposed), MATMUL (weight-stationary; int8 x int8 -> wrapping int32, or bf16 x bf16 -> fp32
// in the column order of docs/numerics.md) and ACTIVATE (int8: bias, per-column requantization,
// ReLU, saturation; bf16: fp32 bias, ReLU, RNE to bf16), each with its analytic timing. Mirrors
// tpu_compute, tpu_mxu, tpu_act_seq and tpu_act_unit (rtl/core).
#include "ref_impl.h"
#include "ref_mxu.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tpuw/activate.h"
#include "tpuw/numerics.h"

namespace tpuw::ref {

namespace {

// bf16 element e of the row (pair) starting at byte p, little-endian.
inline uint16_t bf16_at(const int8_t* p, size_t e) {
  const auto* b = reinterpret_cast<const uint8_t*>(p) + 2 * e;
  return static_cast<uint16_t>(b[0] | (b[1] << 8));
}

inline void put_bf16(int8_t* p, size_t e, uint16_t v) {
  auto* b = reinterpret_cast<uint8_t*>(p) + 2 * e;
  b[0] = static_cast<uint8_t>(v);
  b[1] = static_cast<uint8_t>(v >> 8);
}

}  // namespace

uint64_t RefDevice::Impl::exec_loadw(const Queued& e, uint64_t t) {
  namespace lw = spec::loadw;
  const uint64_t wb_addr = e.in.fields[lw::kIdxWbAddr];
  const bool transpose = e.in.fields[lw::kIdxTranspose] != 0, bf16 = e.in.fields[lw::kIdxBf16] != 0;
  auto& shadow = wbank[1 - wsel];
  // Tile row r, element c: int8 at WB row wb_addr + r, bf16 in the row pair wb_addr + 2r.
  const auto tile = [&](size_t r, size_t c) -> uint16_t {
    if (bf16) return bf16_at(wb.data() + (wb_addr + 2 * r) * n, c);
    return static_cast<uint16_t>(static_cast<int16_t>(wb[(wb_addr + r) * n + c]));  // sign-extended
  };
  for (size_t k = 0; k < n; ++k) {
    for (size_t c = 0; c < n; ++c) shadow[k * n + c] = transpose ? tile(c, k) : tile(k, c);
  }
  // One tile row (a WB row pair in bf16 mode) per shift cycle, transposed or not.
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
  const bool bf16 = e.in.fields[mm::kIdxBf16] != 0;
  const uint64_t ub_addr = e.in.fields[mm::kIdxUbAddr], acc_addr = e.in.fields[mm::kIdxAccAddr], rows = e.in.fields[mm::kIdxRows];
  if (swap) wsel ^= 1u;
  const auto& w = wbank[wsel];
  uint32_t* out = acc.data() + acc_addr * n;
  if (bf16) {
    mxu_bf16(simd, reinterpret_cast<const uint8_t*>(ub.data() + ub_addr * n), rows, w.data(), n, out, accumulate);
  } else {
    mxu_int8(simd, ub.data() + ub_addr * n, rows, w.data(), n, out, accumulate);
  }
  // Timing: one activation row (a UB row pair in bf16 mode) enters the array per cycle.
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

uint64_t RefDevice::Impl::act_unit_timing(uint64_t t, uint64_t rows, uint64_t pipeline) {
  const uint64_t start = std::max({t, act_free, mxu_last_done});
  act_free = start + rows;
  const uint64_t busy = rows + pipeline;
  perf[kPerfActBusy] += busy;
  accept[kQCompute] = t + 1;
  return start + busy;
}

uint64_t RefDevice::Impl::exec_activate(const Queued& e, uint64_t t) {
  namespace ac = spec::activate;
  const bool relu = e.in.fields[ac::kIdxRelu] != 0, bias = e.in.fields[ac::kIdxBias] != 0;
  const bool bf16 = e.in.fields[ac::kIdxBf16] != 0, lut = e.in.fields[ac::kIdxLut] != 0;
  const uint64_t acc_addr = e.in.fields[ac::kIdxAccAddr], ub_addr = e.in.fields[ac::kIdxUbAddr], rows = e.in.fields[ac::kIdxRows],
                 bias_addr = e.in.fields[ac::kIdxBiasAddr], qp = e.in.fields[ac::kIdxQparamAddr];
  // bias_addr is range-checked only when `bias` is set: read the row only then.
  const uint32_t* bias_row = bias ? acc.data() + bias_addr * n : nullptr;
  if (bf16) {
    for (uint64_t i = 0; i < rows; ++i) {
      const uint32_t* src = acc.data() + (acc_addr + i) * n;
      int8_t* dst = ub.data() + (ub_addr + 2 * i) * n;
      for (size_t j = 0; j < n; ++j) put_bf16(dst, j, num::activate_bf16(src[j], bias ? bias_row[j] : 0u, bias, relu));
    }
  } else {
    const uint32_t* mult_row = acc.data() + qp * n;
    const uint32_t* shift_row = acc.data() + (qp + 1) * n;
    // ISA 1.2: the table rows follow the shift row (ACC; the results go to UB, so the table
    // never changes under the instruction).
    LutTable table{};
    if (lut) table = lut_from_acc_words(acc.data() + (qp + 2) * n);
    for (uint64_t i = 0; i < rows; ++i) {
      const uint32_t* src = acc.data() + (acc_addr + i) * n;
      int8_t* dst = ub.data() + (ub_addr + i) * n;
      for (uint32_t j = 0; j < n; ++j) {
        const int8_t r = activate_element(src[j], bias ? bias_row[j] : 0u, mult_row[j], shift_row[j], relu);
        dst[j] = lut ? lut_apply(table, r) : r;
      }
    }
  }
  // One ACC row per cycle in both modes (a bf16 row leaves as one UB row pair); a LUT ACTIVATE
  // first reads its table rows, one per cycle.
  return act_unit_timing(t, rows, pm.act_pipeline + (lut ? lut_rows(n) : 0));
}

}  // namespace tpuw::ref
