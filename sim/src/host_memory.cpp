#include "tpuw/sim/host_memory.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "tpuw/sim/error.h"

namespace tpuw::sim {

void HostMemory::Free::operator()(uint8_t* p) const noexcept { std::free(p); }

HostMemory::HostMemory(uint64_t base, uint64_t size) : base_(base), size_(size) {
  if (size == 0) {
    throw SimError(SimErrorKind::kInvalidArgument, "host memory: size must be at least 1 byte");
  }
  if (base + size < base) {
    throw SimError(SimErrorKind::kInvalidArgument,
                   fmt::format("host memory: window base {:#x} size {:#x} wraps around 2^64", base, size));
  }
  void* p = std::calloc(static_cast<size_t>(size), 1);
  if (p == nullptr) {
    throw SimError(SimErrorKind::kInvalidArgument,
                   fmt::format("host memory: cannot allocate {} bytes", size));
  }
  data_.reset(static_cast<uint8_t*>(p));
}

void HostMemory::check(uint64_t addr, size_t bytes, const char* what) const {
  if (bytes == 0) return;
  if (!contains(addr, bytes)) {
    throw SimError(SimErrorKind::kOutOfRange,
                   fmt::format("host memory {}: [{:#x}, {:#x}) is outside the window [{:#x}, {:#x})",
                               what, addr, addr + bytes, base_, base_ + size_));
  }
}

void HostMemory::write(uint64_t addr, const void* src, size_t bytes) {
  check(addr, bytes, "write");
  if (bytes != 0) std::memcpy(at(addr), src, bytes);
}

void HostMemory::read(uint64_t addr, void* dst, size_t bytes) const {
  check(addr, bytes, "read");
  if (bytes != 0) std::memcpy(dst, at(addr), bytes);
}

void HostMemory::fill(uint64_t addr, uint8_t value, size_t bytes) {
  check(addr, bytes, "fill");
  if (bytes != 0) std::memset(at(addr), value, bytes);
}

}  // namespace tpuw::sim
