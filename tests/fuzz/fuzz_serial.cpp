// libFuzzer target: the serial backend's response decoder (host/src/backends/serial_backend.cpp,
// protocol in docs/uart_protocol.md), i.e. everything a board's bytes go through. The input is
//
//   ops[k] | 0xFF | board bytes ...      (no 0xFF: the first 4 bytes are the ops, the rest the board)
//
// The board bytes are what a lying, noisy or crawling board sends, whatever the host asked: the
// link hands them out in chunks (sized by the bytes themselves) with simulated time, and answers
// "nothing" (time passes) once they are used up. The backend connects (INFO, SET_BAUD) and then
// runs the ops (register reads and writes, unaligned memory reads and writes, irq waits, reset)
// with small timeouts. Every outcome is a return value or tpuw::Error (kTimeout, kInvalidArgument,
// kInternal for a board that calls a command unknown); anything else (a crash, another exception,
// an endless loop, which libFuzzer's -timeout reports) is a bug. The seeds are well-formed
// sessions (tests/fuzz/serial/make_seeds.py).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tpuw/error.h"
#include "tpuw/serial.h"
#include "tpuw/spec.h"

namespace {

using tpuw::serial::ByteLink;

// A board that replays the fuzz input, one chunk per read() call, on a simulated clock.
class ReplayLink final : public ByteLink {
 public:
  explicit ReplayLink(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  std::string name() const override { return "fuzz"; }
  void write(std::span<const uint8_t> bytes) override { now_ += 10.0 * static_cast<double>(bytes.size()) / baud_; }
  size_t read(std::span<uint8_t> dst, double timeout_s) override {
    if (pos_ >= bytes_.size() || dst.empty()) {
      now_ += std::max(timeout_s, 0.0);
      return 0;
    }
    // Chunk size from the low bits of the next byte: 1..8 bytes per read (a crawling or bursty board).
    const size_t chunk = std::min({dst.size(), bytes_.size() - pos_, size_t{1} + (bytes_[pos_] & 7u)});
    std::memcpy(dst.data(), bytes_.data() + pos_, chunk);
    pos_ += chunk;
    now_ += 10.0 * static_cast<double>(chunk) / baud_;
    return chunk;
  }
  void discard_input() override {}  // the bytes "arrive later": nothing is pending at a retry
  void set_baud(unsigned baud) override {
    if (baud == 0) throw tpuw::Error(tpuw::ErrorKind::kInternal, "fuzz link: baud 0");
    baud_ = baud;
  }
  unsigned baud() const override { return baud_; }
  double now() const override { return now_; }
  void sleep(double seconds) override { now_ += std::max(seconds, 0.0); }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
  unsigned baud_ = 115200;
  double now_ = 0;
};

void run_op(tpuw::serial::SerialBackend& b, uint8_t op) {
  namespace reg = tpuw::spec::reg;
  const uint64_t mem = b.mem_size();
  const uint64_t addr = mem > 0 ? (uint64_t{op} * 37u) % mem : 0;
  switch (op & 7u) {
    case 0: (void)b.read_reg(reg::kStatus); break;
    case 1: b.write_reg(reg::kIrqEnable, op); break;
    case 2: {
      std::array<uint8_t, 11> buf{};
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), mem - addr));
      b.mem_read(addr, buf.data(), n);
      break;
    }
    case 3: {
      std::array<uint8_t, 7> buf{};
      buf.fill(op);
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), mem - addr));
      b.mem_write(addr, buf.data(), n);
      break;
    }
    case 4: (void)b.wait_irq(0.002); break;
    case 5: b.reset(); break;
    case 6: (void)b.read_reg(reg::kFaultInfo); break;
    default: {
      // A transfer longer than one frame (256 words), when the board has the memory.
      if (mem >= 1100) {
        std::vector<uint8_t> buf(1100);
        b.mem_read(0, buf.data(), buf.size());
      }
      break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> in(data, size);
  const auto sep = std::find(in.begin(), in.end(), uint8_t{0xFF});
  std::span<const uint8_t> ops, board;
  if (sep != in.end() && sep - in.begin() <= 16) {
    ops = in.first(static_cast<size_t>(sep - in.begin()));
    board = in.subspan(ops.size() + 1);
  } else {
    ops = in.first(std::min<size_t>(4, in.size()));
    board = in.subspan(ops.size());
  }
  tpuw::serial::SerialOptions o;
  o.timeout_s = 0.01;
  o.attempts = 2;
  o.baud = (ops.empty() || (ops[0] & 0x80u) == 0) ? 0 : 921600;  // some sessions switch the rate
  o.restore_baud = !ops.empty() && (ops[0] & 0x40u) != 0;
  try {
    auto b = tpuw::serial::make_serial_backend(std::make_unique<ReplayLink>(board), o);
    // What the backend reports about the board stays consistent with what it enforces.
    if (b->mem_size() != b->board().mem_bytes || b->board().clock_hz == 0) __builtin_trap();
    for (uint8_t op : ops) run_op(*b, op);
  } catch (const tpuw::Error& e) {
    const auto k = e.kind();
    if (k != tpuw::ErrorKind::kTimeout && k != tpuw::ErrorKind::kInvalidArgument && k != tpuw::ErrorKind::kInternal) {
      throw;
    }
  }
  return 0;
}
