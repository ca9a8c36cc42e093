// The DMA engines: LOAD (AR/R into UB, WB or ACC) and STORE (UB or ACC out over AW/W/B), with
// bursts split at 4 KiB and 256 beats, their AXI_ERROR faults and the analytic timing of the
// read and write data channels. Mirrors tpu_dma_load, tpu_dma_store and tpu_dma_burst_gen.
#include "ref_impl.h"

#include <algorithm>
#include <cstring>

namespace tpuw::ref {

// STORE is decoded with LOAD's field positions.
static_assert(spec::store::kIdxMem == spec::load::kIdxMem && spec::store::kIdxLocalAddr == spec::load::kIdxLocalAddr &&
              spec::store::kIdxHostAddr == spec::load::kIdxHostAddr && spec::store::kIdxRows == spec::load::kIdxRows &&
              spec::store::kIdxRowBytes == spec::load::kIdxRowBytes &&
              spec::store::kIdxHostStride == spec::load::kIdxHostStride);

/// Bursts needed for one host row (split at 4 KiB boundaries and 256 beats).
uint64_t RefDevice::Impl::bursts_of(uint64_t addr, uint64_t len) const {
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

uint64_t RefDevice::Impl::exec_load(const Queued& e, uint64_t t) {
  namespace ld = spec::load;  // LOAD and STORE share the field order
  const uint64_t mem = e.in.fields[ld::kIdxMem], local = e.in.fields[ld::kIdxLocalAddr], haddr = e.in.fields[ld::kIdxHostAddr],
                 rows = e.in.fields[ld::kIdxRows], rbytes = e.in.fields[ld::kIdxRowBytes], stride = e.in.fields[ld::kIdxHostStride];
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

uint64_t RefDevice::Impl::exec_store(const Queued& e, uint64_t t) {
  namespace ld = spec::load;  // LOAD and STORE share the field order
  const uint64_t mem = e.in.fields[ld::kIdxMem], local = e.in.fields[ld::kIdxLocalAddr], haddr = e.in.fields[ld::kIdxHostAddr],
                 rows = e.in.fields[ld::kIdxRows], rbytes = e.in.fields[ld::kIdxRowBytes], stride = e.in.fields[ld::kIdxHostStride];
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

}  // namespace tpuw::ref
