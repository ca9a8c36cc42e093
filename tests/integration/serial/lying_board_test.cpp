// Issue 14, class 8: boards that lie or crawl. A fake board speaks the UART bridge protocol
// (docs/uart_protocol.md) in this process, in real time, with the reference model behind it; its
// INFO may lie about its clock and its configuration registers say what they say. Whatever the board
// claims, the driver's waits end within their wall-clock timeout, and the configuration (ARRAY_N and
// the rest) comes from the board's registers, never from what the host asked for.
#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/ref/ref_device.h"
#include "tpuw/runtime/gemm.h"
#include "tpuw/serial.h"
#include "tpuw/spec.h"

namespace tpuw {
namespace {

using Clock = std::chrono::steady_clock;

uint8_t crc8(const std::vector<uint8_t>& bytes, size_t from) {
  uint8_t crc = 0;
  for (size_t i = from; i < bytes.size(); ++i) {
    crc = static_cast<uint8_t>(crc ^ bytes[i]);
    for (int b = 0; b < 8; ++b) crc = static_cast<uint8_t>((crc & 0x80) ? ((crc << 1) ^ 0x07) : (crc << 1));
  }
  return crc;
}

uint32_t le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

void put32(std::vector<uint8_t>& v, uint32_t x) {
  for (int i = 0; i < 4; ++i) v.push_back(static_cast<uint8_t>(x >> (8 * i)));
}

struct BoardLies {
  uint32_t clock_hz = 12'000'000;  // what INFO reports
  std::optional<uint32_t> array_n_reg;  // what the ARRAY_N register reads (default: the truth)
  std::optional<uint8_t> unknown_cmd;   // a command this (older) bitstream answers with code 2
};

// A ByteLink with a board on the other end: requests are answered at once from a RefDevice, which
// runs 12 M cycles per second of wall time while the host waits in read().
class FakeBoard final : public serial::ByteLink {
 public:
  FakeBoard(const DeviceParams& params, BoardLies lies)
      : dev_(params, memory_config()), lies_(lies), t0_(Clock::now()), last_run_(t0_) {}

  std::string name() const override { return "fake:board"; }
  void write(std::span<const uint8_t> bytes) override {
    rx_.insert(rx_.end(), bytes.begin(), bytes.end());
    parse();
  }
  size_t read(std::span<uint8_t> dst, double timeout_s) override {
    if (tx_.empty()) {
      std::this_thread::sleep_for(std::chrono::duration<double>(std::min(timeout_s, 0.002)));
      advance();
    }
    size_t n = 0;
    while (n < dst.size() && !tx_.empty()) {
      dst[n++] = tx_.front();
      tx_.pop_front();
    }
    return n;
  }
  void discard_input() override { tx_.clear(); }
  void set_baud(unsigned baud) override { baud_ = baud; }
  unsigned baud() const override { return baud_; }
  double now() const override { return std::chrono::duration<double>(Clock::now() - t0_).count(); }
  void sleep(double seconds) override {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    advance();
  }

 private:
  static HostMemoryConfig memory_config() {
    HostMemoryConfig m;
    m.size = 131072;
    return m;
  }

  // The device runs on its own clock (12 MHz of wall time), whatever INFO claims.
  void advance() {
    const auto t = Clock::now();
    const double dt = std::chrono::duration<double>(t - last_run_).count();
    last_run_ = t;
    dev_.run(static_cast<uint64_t>(dt * 12e6) + 1);
  }

  void respond(uint8_t code, uint8_t seq, const std::vector<uint8_t>& payload) {
    std::vector<uint8_t> r = {0x5A, code, seq, static_cast<uint8_t>(dev_.irq() ? 1 : 0)};
    r.insert(r.end(), payload.begin(), payload.end());
    r.push_back(crc8(r, 1));
    tx_.insert(tx_.end(), r.begin(), r.end());
  }

  void parse() {
    for (;;) {
      while (!rx_.empty() && rx_.front() != 0xA5) rx_.pop_front();
      if (rx_.size() < 9) return;
      const uint8_t cmd = rx_[1] & 0x7F, seq = rx_[2], n = rx_[7];
      const uint32_t addr = uint32_t{rx_[3]} | uint32_t{rx_[4]} << 8 | uint32_t{rx_[5]} << 16 | uint32_t{rx_[6]} << 24;
      const size_t plen = cmd == 3 ? 4 : cmd == 5 ? 4u * (n + 1u) : 0;
      if (rx_.size() < 9 + plen) return;
      std::vector<uint8_t> frame(rx_.begin(), rx_.begin() + static_cast<long>(9 + plen));
      rx_.erase(rx_.begin(), rx_.begin() + static_cast<long>(9 + plen));
      advance();
      if (lies_.unknown_cmd == cmd) {
        respond(2, seq, {});
        continue;
      }
      std::vector<uint8_t> out;
      switch (cmd) {
        case 0: break;
        case 1:
          put32(out, 0x42555054);
          put32(out, 131072);
          put32(out, lies_.clock_hz);
          put32(out, 1u << 24 | 104);
          break;
        case 2: {
          uint32_t v = dev_.read_reg(addr);
          if (addr == spec::reg::kArrayN && lies_.array_n_reg) v = *lies_.array_n_reg;
          put32(out, v);
          break;
        }
        case 3: dev_.write_reg(addr, le32(frame.data() + 8)); break;
        case 4: {
          std::vector<uint8_t> words(4u * (n + 1u));
          dev_.mem_read(addr, words.data(), words.size());
          out = words;
          break;
        }
        case 5: dev_.mem_write(addr, frame.data() + 8, 4u * (n + 1u)); break;
        case 6: break;
        default: respond(2, seq, {}); continue;
      }
      respond(0, seq, out);
    }
  }

  ref::RefDevice dev_;
  BoardLies lies_;
  Clock::time_point t0_, last_run_;
  std::deque<uint8_t> rx_, tx_;
  unsigned baud_ = 115200;
};

DeviceParams board_params() { return *find_device_config(4); }

Device open_board(BoardLies lies, const DeviceOptions& options = {}) {
  return Device(serial::make_serial_backend(std::make_unique<FakeBoard>(board_params(), lies)), options);
}

// A NOP that pops a token no LOAD ever pushes: the device waits forever.
std::vector<isa::Word> deadlock() {
  isa::Instr i = isa::make_instr(spec::Opcode::kNop);
  i.pop_prev = true;
  return {isa::encode(i)};
}

void expect_timeout_within(Device& dev, double bound_s) {
  const auto t0 = Clock::now();
  try {
    dev.run(deadlock());
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("no progress"), std::string::npos) << e.what();
  }
  // Not a timing test: the bound is 20x the timeout, to tell "ended" from "hung".
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), bound_s);
}

// The example: a board reporting a 1 Hz clock. The wait ends at timeout_seconds of wall
// time (before the fix, one run slice of 20000 "cycles" lasted 20000 s of link time).
TEST(LyingBoard, OneHertzClockDoesNotStretchTheTimeout) {
  DeviceOptions o;
  o.timeout_seconds = 0.5;
  o.timeout_cycles = UINT64_MAX;  // only the wall clock bounds this wait
  Device dev = open_board({.clock_hz = 1, .array_n_reg = std::nullopt, .unknown_cmd = std::nullopt}, o);
  expect_timeout_within(dev, 10.0);
  dev.reset();
  dev.run(std::vector<isa::Word>{});  // still usable
}

// Variant: a board claiming an absurdly fast clock (4 GHz) must not cut waits short either: a
// short program completes, and a deadlock still ends at the wall-clock timeout.
TEST(LyingBoard, FourGigahertzClockNeitherShortensNorStretches) {
  DeviceOptions o;
  o.timeout_seconds = 0.5;
  o.timeout_cycles = UINT64_MAX;
  Device dev = open_board({.clock_hz = 4000000000u, .array_n_reg = std::nullopt, .unknown_cmd = std::nullopt}, o);
  std::vector<int8_t> a(8 * 8, 3), b(8 * 8, -2);
  const runtime::GemmShape shape{8, 8, 8};
  EXPECT_EQ(runtime::gemm(dev, a, b, shape).c, runtime::gemm_cpu(a, b, shape));
  expect_timeout_within(dev, 10.0);
}

// The configuration comes from the board's registers: a board with N=4 is an N=4 device, whatever
// the caller configured, and utilization is computed with N=4.
TEST(LyingBoard, ConfigurationComesFromTheRegisters) {
  Device dev = open_board({});
  EXPECT_EQ(dev.info().params.array_n, 4u);
  EXPECT_EQ(dev.info().params.ub_depth, board_params().ub_depth);
  std::mt19937 rng(5);
  const runtime::GemmShape shape{12, 8, 8};
  std::vector<int8_t> a(shape.m * shape.k), b(shape.k * shape.n);
  for (auto& x : a) x = static_cast<int8_t>(rng());
  for (auto& x : b) x = static_cast<int8_t>(rng());
  const auto r = runtime::gemm(dev, a, b, shape);
  EXPECT_EQ(r.c, runtime::gemm_cpu(a, b, shape));
  EXPECT_EQ(r.plan.array_n, 4u);
  ASSERT_GT(r.cycles, 0u);
  EXPECT_DOUBLE_EQ(r.utilization, 12.0 * 8 * 8 / (16.0 * static_cast<double>(r.cycles)));
}

// Variant: configuration registers that cannot be true are refused at open, naming them.
TEST(LyingBoard, ImplausibleConfigurationIsRefused) {
  for (uint32_t n : {0u, 1u << 20}) {
    try {
      (void)open_board({.clock_hz = 12000000, .array_n_reg = n, .unknown_cmd = std::nullopt});
      FAIL() << "opened with ARRAY_N " << n;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("ARRAY_N"), std::string::npos) << e.what();
    }
  }
}

// A board whose bitstream does not know a command the driver needs (here the burst memory read)
// answers "unknown command": a version mismatch, reported as unsupported (exit 2) with a hint and
// the command named, not as an internal error; nothing is retried.
TEST(LyingBoard, UnknownCommandIsAVersionMismatchNotABug) {
  for (uint8_t cmd : {uint8_t{4}, uint8_t{5}}) {
    Device dev = open_board({.clock_hz = 12000000, .array_n_reg = std::nullopt, .unknown_cmd = cmd});
    std::vector<int8_t> a(8 * 8, 1), b(8 * 8, 1);
    try {
      (void)runtime::gemm(dev, a, b, runtime::GemmShape{8, 8, 8});
      FAIL() << "command " << int{cmd} << " refused by the board, yet the GEMM succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find("unknown command"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bitstream"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tpuw
