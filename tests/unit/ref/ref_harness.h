// Test helpers: a RefDevice with a small host memory, and a way to run an instruction list
// through the ring the way the driver does.
#pragma once

#include <cstring>
#include <initializer_list>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tpuw/asm.h"
#include "tpuw/device_configs.h"
#include "tpuw/ref/ref_device.h"
#include "tpuw/spec.h"

namespace tpuw::ref::test {

namespace r = spec::reg;

inline constexpr uint64_t kMemSize = 4u << 20;   // 4 MiB host memory
inline constexpr uint32_t kRing = 0x200000;      // ring lives at 2 MiB
inline constexpr uint32_t kRingEntries = 1024;

inline DeviceParams small() { return *find_device_config(4); }
inline DeviceParams big() { return *find_device_config(16); }

inline HostMemoryConfig mem_cfg() {
  HostMemoryConfig m;
  m.size = kMemSize;
  return m;
}

struct Dev {
  explicit Dev(const DeviceParams& p = small(), const PerfModel& pm = {}, const RefConfig& cfg = {})
      : dev(p, mem_cfg(), pm, cfg) {
    dev.write_reg(r::kIrqEnable, r::kIrqEnableFence | r::kIrqEnableFault);
    dev.write_reg(r::kRingBase, kRing);
    dev.write_reg(r::kRingSize, kRingEntries);
  }

  /// Appends instructions at RING_TAIL and rings the doorbell (no wrap handling needed here).
  void submit(const std::vector<isa::Word>& prog) {
    uint32_t tail = dev.read_reg(r::kRingTail);
    const uint32_t size = dev.read_reg(r::kRingSize);
    const uint32_t base = dev.read_reg(r::kRingBase);
    for (const auto& w : prog) {
      dev.mem_write(base + 16ull * tail, w.data(), w.size());
      tail = (tail + 1) % size;
    }
    dev.write_reg(r::kRingTail, tail);
  }
  void submit_bytes(const std::vector<uint8_t>& code) {
    std::vector<isa::Word> ws;
    for (size_t o = 0; o < code.size(); o += 16) ws.push_back(isa::word_from({code.data() + o, 16}));
    submit(ws);
  }

  /// Runs until irq or `max` cycles.
  uint64_t run(uint64_t max = 10'000'000) { return dev.run(max); }

  uint32_t reg(uint32_t off) { return dev.read_reg(off); }
  uint64_t perf(uint32_t lo) {
    const uint64_t l = dev.read_reg(lo);
    return l | static_cast<uint64_t>(dev.read_reg(lo + 4)) << 32;
  }

  template <typename T>
  void put(uint64_t addr, const std::vector<T>& v) {
    dev.mem_write(addr, v.data(), v.size() * sizeof(T));
  }
  template <typename T>
  std::vector<T> get(uint64_t addr, size_t count) {
    std::vector<T> v(count);
    dev.mem_read(addr, v.data(), count * sizeof(T));
    return v;
  }

  RefDevice dev;
};

// ---- instruction builders ----
inline isa::Instr ins(spec::Opcode op) { return isa::make_instr(op); }

inline isa::Word load(spec::Mem mem, uint64_t local, uint64_t host, uint64_t rows, uint64_t row_bytes,
                      uint64_t stride, bool push_next = false, bool pop_next = false) {
  auto i = ins(spec::Opcode::kLoad);
  i.set("mem", static_cast<uint64_t>(mem));
  i.set("local_addr", local);
  i.set("host_addr", host);
  i.set("rows", rows);
  i.set("row_bytes", row_bytes);
  i.set("host_stride", stride);
  i.push_next = push_next;
  i.pop_next = pop_next;
  return isa::encode(i);
}

inline isa::Word store(spec::Mem mem, uint64_t local, uint64_t host, uint64_t rows, uint64_t row_bytes,
                       uint64_t stride, bool pop_prev = false, bool push_prev = false) {
  auto i = ins(spec::Opcode::kStore);
  i.set("mem", static_cast<uint64_t>(mem));
  i.set("local_addr", local);
  i.set("host_addr", host);
  i.set("rows", rows);
  i.set("row_bytes", row_bytes);
  i.set("host_stride", stride);
  i.pop_prev = pop_prev;
  i.push_prev = push_prev;
  return isa::encode(i);
}

inline isa::Word loadw(uint64_t wb, bool pop_prev = false) {
  auto i = ins(spec::Opcode::kLoadw);
  i.set("wb_addr", wb);
  i.pop_prev = pop_prev;
  return isa::encode(i);
}

inline isa::Word matmul(uint64_t ub, uint64_t acc, uint64_t rows, bool swap, bool accumulate = false,
                        bool pop_prev = false, bool push_next = false) {
  auto i = ins(spec::Opcode::kMatmul);
  i.set("ub_addr", ub);
  i.set("acc_addr", acc);
  i.set("rows", rows);
  i.set("swap", swap ? 1 : 0);
  i.set("accumulate", accumulate ? 1 : 0);
  i.pop_prev = pop_prev;
  i.push_next = push_next;
  return isa::encode(i);
}

inline isa::Word activate(uint64_t acc, uint64_t ub, uint64_t rows, bool bias, uint64_t bias_addr, uint64_t qp,
                          bool relu, bool pop_prev = false, bool push_next = false) {
  auto i = ins(spec::Opcode::kActivate);
  i.set("acc_addr", acc);
  i.set("ub_addr", ub);
  i.set("rows", rows);
  i.set("bias", bias ? 1 : 0);
  i.set("bias_addr", bias_addr);
  i.set("qparam_addr", qp);
  i.set("relu", relu ? 1 : 0);
  i.pop_prev = pop_prev;
  i.push_next = push_next;
  return isa::encode(i);
}

inline isa::Word nop(bool pop_prev = false, bool push_next = false, bool pop_next = false, bool push_prev = false) {
  auto i = ins(spec::Opcode::kNop);
  i.pop_prev = pop_prev;
  i.push_next = push_next;
  i.pop_next = pop_next;
  i.push_prev = push_prev;
  return isa::encode(i);
}

/// Any instruction from field names and values, e.g. word(kMatmul, {{"bf16", 1}, {"rows", 2}}).
inline isa::Word word(spec::Opcode op, std::initializer_list<std::pair<std::string_view, uint64_t>> fields,
                      bool pop_prev = false, bool push_next = false) {
  auto i = ins(op);
  for (const auto& [name, value] : fields) i.set(name, value);
  i.pop_prev = pop_prev;
  i.push_next = push_next;
  return isa::encode(i);
}

inline isa::Word fence(uint32_t value, uint64_t host, bool irq = true) {
  auto i = ins(spec::Opcode::kFence);
  i.set("value", value);
  i.set("host_addr", host);
  i.set("irq", irq ? 1 : 0);
  return isa::encode(i);
}

}  // namespace tpuw::ref::test
