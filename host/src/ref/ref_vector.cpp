// The ISA 1.1 non-matrix units: TRANSPOSE (a UB tile, int8 or bf16, through a transpose buffer)
// and VECTOR (element-wise fp32 work on ACC rows, docs/numerics.md). Both share the UB/ACC ports
// with ACTIVATE and are timed like it (act_unit_timing): they wait for the MXU's results and the
// previous non-matrix instruction, then take one row per cycle plus a short pipeline:
//   TRANSPOSE: `rows` tile rows read, then N tile rows written: rows + N + transpose_pipeline;
//   VECTOR:    one row of N lanes per cycle (COLSUM too):       rows + vector_pipeline.
// Busy cycles count in PERF_ACT_BUSY (non-matrix work).
#include <algorithm>
#include <cstring>
#include <vector>

#include "ref_impl.h"
#include "tpuw/numerics.h"

namespace tpuw::ref {

uint64_t RefDevice::Impl::exec_transpose(const Queued& e, uint64_t t) {
  namespace tr = spec::transpose;
  const uint64_t src = e.in.fields[tr::kIdxSrcAddr], dst = e.in.fields[tr::kIdxDstAddr], rows = e.in.fields[tr::kIdxRows];
  const size_t esz = e.in.fields[tr::kIdxBf16] != 0 ? 2 : 1;  // element bytes; a tile row is esz UB rows
  const size_t row_bytes = esz * n;
  // Every source row is read (into the transpose buffer) before the first destination row is
  // written, so the ranges may overlap. Rows >= `rows` of the source tile read as zero.
  std::vector<uint8_t> in(static_cast<size_t>(n) * row_bytes, 0), out(in.size(), 0);
  std::memcpy(in.data(), ub.data() + src * n, static_cast<size_t>(rows) * row_bytes);
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < n; ++i) std::memcpy(&out[j * row_bytes + i * esz], &in[i * row_bytes + j * esz], esz);
  }
  std::memcpy(ub.data() + dst * n, out.data(), out.size());
  return act_unit_timing(t, rows + n, pm.transpose_pipeline);
}

uint64_t RefDevice::Impl::exec_vector(const Queued& e, uint64_t t) {
  namespace ve = spec::vector;
  const auto op = static_cast<spec::VecOp>(e.in.fields[ve::kIdxOp]);
  const uint64_t dst = e.in.fields[ve::kIdxDstAddr], a = e.in.fields[ve::kIdxAAddr], b = e.in.fields[ve::kIdxBAddr],
                 rows = e.in.fields[ve::kIdxRows];
  const auto s = static_cast<uint32_t>(e.in.fields[ve::kIdxScalar]);
  if (op == spec::VecOp::kColsum) {
    std::vector<uint32_t> sum(n, 0u);  // +0
    for (uint64_t i = 0; i < rows; ++i) {
      const uint32_t* ar = acc.data() + (a + i) * n;
      for (size_t c = 0; c < n; ++c) sum[c] = num::colsum_step(sum[c], ar[c]);
    }
    std::copy(sum.begin(), sum.end(), acc.begin() + static_cast<std::ptrdiff_t>(dst * n));
  } else {
    // Row i of the destination depends only on row i of the sources, and a destination range
    // equals a source range or misses it (decode rule): row by row in place is exact.
    const bool reads_b = num::vecop_reads_b(op);
    std::vector<uint32_t> d(n);
    for (uint64_t i = 0; i < rows; ++i) {
      const uint32_t* ar = acc.data() + (a + i) * n;
      const uint32_t* br = reads_b ? acc.data() + (b + i) * n : nullptr;
      for (size_t c = 0; c < n; ++c) d[c] = num::vector_lane(op, ar[c], reads_b ? br[c] : 0u, s);
      std::copy(d.begin(), d.end(), acc.begin() + static_cast<std::ptrdiff_t>((dst + i) * n));
    }
  }
  return act_unit_timing(t, rows, pm.vector_pipeline);
}

}  // namespace tpuw::ref
