// The reference model of tpu_top as a Backend (tpuw/ref/ref_device.h): construction and parameter
// checks, the host memory it sees (one calloc'd block, mapped page by page), fault injection,
// and the Backend / SimControl surface that forwards to the parts in the other ref_*.cpp files
// (see ref_impl.h for which file models which RTL block). Mirrors tpu_top plus the host memory
// behind its AXI master port.
#include "ref_impl.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "tpuw/error.h"

namespace tpuw::ref {

RefDevice::Impl::Impl(const DeviceParams& params, const HostMemoryConfig& memory, const PerfModel& model,
                      const RefConfig& config)
    : p(params), mc(memory), pm(model), cfg(config) {
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

void RefDevice::Impl::map(uint64_t addr, uint64_t len) {
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

void RefDevice::Impl::check_hang(std::string_view what, uint32_t offset) const {
  if (hang) {
    throw Error(ErrorKind::kTimeout,
                fmt::format("ref: register {} at offset {:#05x} not answered (the device hangs)", what, offset));
  }
}


RefDevice::RefDevice(const DeviceParams& params, const HostMemoryConfig& memory, const PerfModel& model,
                     const RefConfig& config)
    : impl_(std::make_unique<Impl>(params, memory, model, config)) {}

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
const RefConfig& RefDevice::config() const { return impl_->cfg; }

}  // namespace tpuw::ref
