#include "tpuw/sim/host_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "tpuw/sim/error.h"

namespace tpuw::sim {

void HostMemory::Free::operator()(uint8_t* p) const noexcept { std::free(p); }

HostMemory::HostMemory(uint64_t base, uint64_t size, uint64_t mapped) : base_(base), size_(size) {
  if (size == 0) {
    throw SimError(SimErrorKind::kInvalidArgument, "host memory: size must be at least 1 byte");
  }
  if (base + size < base) {
    throw SimError(SimErrorKind::kInvalidArgument,
                   fmt::format("host memory: window base {:#x} size {:#x} wraps around 2^64", base, size));
  }
  if (base % kPageBytes != 0) {
    throw SimError(SimErrorKind::kInvalidArgument,
                   fmt::format("host memory: base {:#x} is not a multiple of {} bytes", base, kPageBytes));
  }
  const uint64_t chunk = uint64_t{1} << kChunkShift;
  chunks_.resize(static_cast<size_t>((size + chunk - 1) / chunk));
  page_mapped_.assign(static_cast<size_t>((size + kPageBytes - 1) / kPageBytes), false);
  const uint64_t initial = std::min(mapped, size);
  if (initial > 0) map(base, initial);
}

void HostMemory::map(uint64_t addr, uint64_t bytes) {
  if (bytes == 0) return;
  if (addr < base_ || addr - base_ >= size_ || bytes > size_ - (addr - base_)) {
    throw SimError(SimErrorKind::kOutOfRange,
                   fmt::format("host memory map: [{:#x}, +{:#x}) is outside the address range [{:#x}, {:#x})",
                               addr, bytes, base_, base_ + size_));
  }
  const uint64_t first = (addr - base_) / kPageBytes;
  const uint64_t last = (addr - base_ + bytes - 1) / kPageBytes;
  const uint64_t chunk = uint64_t{1} << kChunkShift;
  for (uint64_t pg = first; pg <= last; ++pg) {
    if (page_mapped_[pg]) continue;
    const uint64_t c = (pg * kPageBytes) >> kChunkShift;
    if (!chunks_[c]) {
      const uint64_t bytes_in_chunk = std::min(chunk, size_ - c * chunk);
      void* p = std::calloc(static_cast<size_t>(bytes_in_chunk), 1);
      if (p == nullptr) {
        throw SimError(SimErrorKind::kOutOfMemory,
                       fmt::format("host memory: out of memory: cannot allocate {} bytes", bytes_in_chunk));
      }
      chunks_[c].reset(static_cast<uint8_t*>(p));
    }
    page_mapped_[pg] = true;
    mapped_bytes_ += std::min(kPageBytes, size_ - pg * kPageBytes);
  }
}

bool HostMemory::contains(uint64_t addr, uint64_t bytes) const noexcept {
  if (addr < base_ || addr - base_ >= size_ || bytes > size_ - (addr - base_)) return false;
  if (bytes == 0) return true;
  const uint64_t first = (addr - base_) / kPageBytes;
  const uint64_t last = (addr - base_ + bytes - 1) / kPageBytes;
  for (uint64_t pg = first; pg <= last; ++pg) {
    if (!page_mapped_[pg]) return false;
  }
  return true;
}

void HostMemory::check(uint64_t addr, size_t bytes, const char* what) const {
  if (bytes == 0) return;
  if (!contains(addr, bytes)) {
    throw SimError(SimErrorKind::kOutOfRange,
                   fmt::format("host memory {}: [{:#x}, {:#x}) is outside mapped memory (address range "
                               "[{:#x}, {:#x}), {} bytes mapped)",
                               what, addr, addr + bytes, base_, base_ + size_, mapped_bytes_));
  }
}

template <typename F>
void HostMemory::for_each_span(uint64_t addr, size_t bytes, F&& f) const {
  const uint64_t chunk = uint64_t{1} << kChunkShift;
  size_t done = 0;
  while (done < bytes) {
    const uint64_t a = addr + done;
    const uint64_t in_chunk = chunk - ((a - base_) & (chunk - 1));
    const size_t n = static_cast<size_t>(std::min<uint64_t>(in_chunk, bytes - done));
    f(const_cast<uint8_t*>(at(a)), done, n);
    done += n;
  }
}

void HostMemory::write(uint64_t addr, const void* src, size_t bytes) {
  check(addr, bytes, "write");
  const auto* s = static_cast<const uint8_t*>(src);
  for_each_span(addr, bytes, [&](uint8_t* p, size_t off, size_t n) { std::memcpy(p, s + off, n); });
}

void HostMemory::read(uint64_t addr, void* dst, size_t bytes) const {
  check(addr, bytes, "read");
  auto* d = static_cast<uint8_t*>(dst);
  for_each_span(addr, bytes, [&](uint8_t* p, size_t off, size_t n) { std::memcpy(d + off, p, n); });
}

void HostMemory::fill(uint64_t addr, uint8_t value, size_t bytes) {
  check(addr, bytes, "fill");
  for_each_span(addr, bytes, [&](uint8_t* p, size_t, size_t n) { std::memset(p, value, n); });
}

}  // namespace tpuw::sim
