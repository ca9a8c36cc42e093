// The serial backend against the verilated iCEBreaker board top (tpuw::sim::SimBoard): the UART
// bridge protocol with real bit timing on the board's pins, GEMMs and quantized networks (the
// board's one-lane activation unit, FPGA RAMs and 32-bit counters) bit-identical to the ref model,
// checksum errors injected on the link in both directions, and silent boards (simulated cable off,
// and a pseudo-terminal nobody answers) timing out with a clear error.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../../unit/network/network_testlib.h"
#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/runtime/gemm.h"
#include "tpuw/runtime/network.h"
#include "tpuw/serial.h"
#include "tpuw/spec.h"

namespace tpuw {
namespace {

using serial::ByteLink;

// Wraps a link and flips one bit of chosen bytes: the n-th byte written (host -> board) and/or the
// n-th byte read (board -> host), counting from 0 after arm().
class CorruptingLink final : public ByteLink {
 public:
  explicit CorruptingLink(std::unique_ptr<ByteLink> inner) : inner_(std::move(inner)) {}
  void arm(int64_t tx_index, int64_t rx_index) {
    tx_at_ = tx_index;
    rx_at_ = rx_index;
    tx_count_ = rx_count_ = 0;
  }
  int flipped = 0;

  std::string name() const override { return inner_->name(); }
  void write(std::span<const uint8_t> bytes) override {
    std::vector<uint8_t> v(bytes.begin(), bytes.end());
    for (auto& b : v) {
      if (tx_count_++ == tx_at_) {
        b ^= 0x10;
        ++flipped;
      }
    }
    inner_->write(v);
  }
  size_t read(std::span<uint8_t> dst, double timeout_s) override {
    const size_t n = inner_->read(dst, timeout_s);
    for (size_t i = 0; i < n; ++i) {
      if (rx_count_++ == rx_at_) {
        dst[i] ^= 0x04;
        ++flipped;
      }
    }
    return n;
  }
  void discard_input() override { inner_->discard_input(); }
  void set_baud(unsigned baud) override { inner_->set_baud(baud); }
  unsigned baud() const override { return inner_->baud(); }
  double now() const override { return inner_->now(); }
  void sleep(double s) override { inner_->sleep(s); }

 private:
  std::unique_ptr<ByteLink> inner_;
  int64_t tx_at_ = -1, rx_at_ = -1, tx_count_ = 0, rx_count_ = 0;
};

std::unique_ptr<serial::SerialBackend> sim_backend(unsigned baud = 3'000'000) {
  serial::SerialOptions o;
  o.baud = baud;
  o.timeout_s = 0.01;  // simulated seconds; a request here takes well under 1 ms at 3 Mbaud
  return serial::make_serial_backend(serial::open_sim_board(), o);
}

DeviceOptions board_device_options() {
  DeviceOptions d;
  d.ring_entries = 256;  // 4 KiB of the board's 128 KiB
  return d;
}

std::vector<int8_t> random_i8(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-128, 127);
  std::vector<int8_t> v(n);
  for (auto& x : v) x = static_cast<int8_t>(dist(rng));
  return v;
}

// Board clock cycles of link time (the simulated board runs at 12 MHz).
uint64_t board_cycles(serial::SerialBackend& be) { return static_cast<uint64_t>(be.link().now() * 12e6); }

TEST(SerialBackend, ConnectsAndReadsTheBoard) {
  auto be = sim_backend(115200);
  EXPECT_EQ(be->name(), "serial");
  EXPECT_EQ(be->board().mem_bytes, 131072u);
  EXPECT_EQ(be->board().clock_hz, 12'000'000u);
  EXPECT_EQ(be->board().protocol, 1u);
  EXPECT_EQ(be->mem_size(), 131072u);
  EXPECT_EQ(be->read_reg(spec::reg::kId), spec::kDeviceId);
  EXPECT_EQ(be->read_reg(spec::reg::kArrayN), 4u);
  EXPECT_EQ(be->read_reg(spec::reg::kDmaDataW), 32u);
  EXPECT_FALSE(be->wait_irq(0));  // one STATUS poll, no wait
  EXPECT_EQ(be->stats().retries, 0u);
  // 115200 baud from a 12 MHz clock: about 1042 cycles per byte on the wire.
  const uint64_t c0 = board_cycles(*be);
  be->read_reg(spec::reg::kId);
  const uint64_t per_reg_read = board_cycles(*be) - c0;  // 9-byte request + 9-byte response
  EXPECT_GT(per_reg_read, 18u * 1000u);
  EXPECT_LT(per_reg_read, 18u * 1300u);
}

TEST(SerialBackend, SwitchesToThreeMegabaud) {
  auto be = sim_backend(3'000'000);
  EXPECT_EQ(be->link().baud(), 3'000'000u);
  EXPECT_EQ(be->board().divisor, 4u);
  const uint64_t c0 = board_cycles(*be);
  EXPECT_EQ(be->read_reg(spec::reg::kId), spec::kDeviceId);
  EXPECT_LT(board_cycles(*be) - c0, 18u * 40u + 200u);
}

TEST(SerialBackend, MemoryRoundTripAnyAlignment) {
  auto be = sim_backend();
  std::vector<uint8_t> data(3000);
  std::iota(data.begin(), data.end(), uint8_t{7});
  be->mem_write(0x1001, data.data(), data.size());  // unaligned head and tail, 3 frames
  std::vector<uint8_t> back(data.size());
  be->mem_read(0x1001, back.data(), back.size());
  EXPECT_EQ(back, data);
  // The bytes around the range were not touched.
  uint8_t edge[2] = {0xEE, 0xEE};
  be->mem_read(0x1000, &edge[0], 1);
  be->mem_read(0x1001 + data.size(), &edge[1], 1);
  EXPECT_EQ(edge[0], 0);
  EXPECT_EQ(edge[1], 0);
  // Small odd pieces.
  const uint8_t three[3] = {1, 2, 3};
  be->mem_write(0x2003, three, 3);
  uint8_t got[5] = {};
  be->mem_read(0x2002, got, 5);
  EXPECT_EQ(std::vector<uint8_t>(got, got + 5), (std::vector<uint8_t>{0, 1, 2, 3, 0}));
  EXPECT_THROW(be->mem_write(131070, three, 3), Error);
  EXPECT_EQ(be->stats().retries, 0u);
}

TEST(SerialBackend, GemmBitIdenticalToRef) {
  Device board(sim_backend(), board_device_options());
  EXPECT_EQ(board.info().backend, "serial");
  EXPECT_EQ(board.info().params.array_n, 4u);
  BackendConfig rc;
  rc.array_n = 4;
  Device ref = Device::open("ref", rc);
  const runtime::GemmShape shapes[] = {{4, 4, 4}, {5, 7, 3}, {16, 16, 16}, {9, 20, 6}, {33, 8, 12}};
  uint32_t seed = 1;
  for (const auto& s : shapes) {
    const auto a = random_i8(s.m * s.k, seed++);
    const auto b = random_i8(s.k * s.n, seed++);
    const auto want = runtime::gemm(ref, a, b, s);
    const auto got = runtime::gemm(board, a, b, s);
    EXPECT_EQ(got.c, want.c) << "M=" << s.m << " K=" << s.k << " N=" << s.n;
    EXPECT_GT(got.cycles, 0u);
  }
}

// Layers chained on the device exercise what a GEMM does not: ACTIVATE (bias, per-column
// requantize, ReLU, saturation) through the board's single time-shared requantize lane, and UB
// ping-pong between layers. Every intermediate int8 tensor is compared, and the board's 32-bit
// performance counters must agree with the program's own accounting.
TEST(SerialBackend, NetworkBitIdenticalToRefAndCpu) {
  Device board(sim_backend(), board_device_options());
  BackendConfig rc;
  rc.array_n = 4;
  Device ref = Device::open("ref", rc);
  struct Case {
    std::vector<uint32_t> dims;
    uint64_t batch;
    bool final_int8;
  };
  const Case cases[] = {{{9, 7, 11}, 6, false}, {{12, 16, 5, 8}, 5, true}};
  std::mt19937 rng(2026);
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "layers " << c.dims.size() - 1 << " batch " << c.batch);
    const nn::QNetwork net = nettest::random_network(c.dims, rng, c.final_int8);
    const std::vector<int8_t> x = nettest::random_int8(c.batch * c.dims[0], rng);
    runtime::NetworkOptions opt;
    opt.keep_intermediate = true;
    const runtime::NetworkRunResult got = runtime::run_network(board, net, x, c.batch, opt);
    const runtime::NetworkRunResult want = runtime::run_network(ref, net, x, c.batch, opt);
    const nettest::CpuForward cpu = nettest::forward(net, x, c.batch);
    nettest::expect_outputs_match(got, want, cpu, net, c.final_int8);
    // The board's smaller buffers tile differently from the ref device's: compare the board's
    // counters with its own program's exact accounting (network.h), not with the ref's.
    EXPECT_EQ(got.perf.instret, got.instructions);
    uint64_t mxu = 0, rd = 16, wr = 4;  // + the final FENCE's fetch and its 4-byte write
    for (const runtime::LayerReport& lr : got.layers) {
      mxu += lr.mxu_active;
      rd += lr.rd_bytes;
      wr += lr.wr_bytes;
    }
    EXPECT_EQ(got.perf.mxu_active, mxu);
    EXPECT_EQ(got.perf.rd_bytes, rd);
    EXPECT_EQ(got.perf.wr_bytes, wr);
    EXPECT_GT(got.perf.act_busy, 0u);
  }
}

TEST(SerialBackend, CorruptedRequestIsNackedAndRetried) {
  auto link = std::make_unique<CorruptingLink>(serial::open_sim_board());
  CorruptingLink* tap = link.get();
  serial::SerialOptions o;
  o.timeout_s = 0.01;
  auto be = serial::make_serial_backend(std::move(link), o);
  std::vector<uint8_t> data(64);
  std::iota(data.begin(), data.end(), uint8_t{100});
  tap->arm(20, -1);  // a payload byte of the MEM_WRITE
  be->mem_write(0x400, data.data(), data.size());
  EXPECT_EQ(tap->flipped, 1);
  EXPECT_EQ(be->stats().nacks, 1u);
  EXPECT_EQ(be->stats().retries, 1u);
  std::vector<uint8_t> back(data.size());
  be->mem_read(0x400, back.data(), back.size());
  EXPECT_EQ(back, data);  // the corrupted frame never reached memory; the retry did

  tap->arm(3, -1);  // an address byte of a REG_WRITE: the board must not write anywhere
  be->write_reg(spec::reg::kIrqEnable, 1);
  EXPECT_EQ(be->stats().nacks, 2u);
  EXPECT_EQ(be->read_reg(spec::reg::kIrqEnable), 1u);

  tap->arm(8, -1);  // the length byte of a MEM_WRITE: the board waits for bytes that never come
  be->mem_write(0x800, data.data(), data.size());
  EXPECT_EQ(be->stats().retries, 3u);
  be->mem_read(0x800, back.data(), back.size());
  EXPECT_EQ(back, data);
}

TEST(SerialBackend, CorruptedResponseIsRetried) {
  auto link = std::make_unique<CorruptingLink>(serial::open_sim_board());
  CorruptingLink* tap = link.get();
  serial::SerialOptions o;
  o.timeout_s = 0.01;
  auto be = serial::make_serial_backend(std::move(link), o);
  std::vector<uint8_t> data(256);
  std::iota(data.begin(), data.end(), uint8_t{3});
  be->mem_write(0x100, data.data(), data.size());
  tap->arm(-1, 30);  // a data byte of the MEM_READ response
  std::vector<uint8_t> back(data.size());
  be->mem_read(0x100, back.data(), back.size());
  EXPECT_EQ(back, data);
  EXPECT_EQ(be->stats().bad_responses, 1u);
  EXPECT_EQ(be->stats().retries, 1u);

  // The response to a register write is lost: the retry is recognised and not executed twice.
  tap->arm(-1, 0);
  be->write_reg(spec::reg::kRingTail, 0);
  EXPECT_EQ(be->stats().retries, 2u);
  EXPECT_EQ(be->read_reg(spec::reg::kRingTail), 0u);
}

TEST(SerialBackend, GemmCorrectDespiteCorruptionInBothDirections) {
  auto link = std::make_unique<CorruptingLink>(serial::open_sim_board());
  CorruptingLink* tap = link.get();
  serial::SerialOptions o;
  o.baud = 3'000'000;
  o.timeout_s = 0.01;
  Device board(serial::make_serial_backend(std::move(link), o), board_device_options());
  BackendConfig rc;
  rc.array_n = 4;
  Device ref = Device::open("ref", rc);
  const runtime::GemmShape s{12, 10, 7};
  const auto a = random_i8(s.m * s.k, 77);
  const auto b = random_i8(s.k * s.n, 78);
  tap->arm(700, 300);
  const auto got = runtime::gemm(board, a, b, s);
  EXPECT_EQ(tap->flipped, 2);
  EXPECT_EQ(got.c, runtime::gemm(ref, a, b, s).c);
}

TEST(SerialBackend, SilentSimulatedBoardTimesOut) {
  serial::SimLinkOptions so;
  so.tx_connected = false;
  serial::SerialOptions o;
  o.timeout_s = 0.005;
  o.attempts = 3;
  try {
    serial::make_serial_backend(serial::open_sim_board(so), o);
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
    EXPECT_NE(std::string(e.what()).find("sim:icebreaker"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("3 attempts"), std::string::npos) << e.what();
  }
}

TEST(SerialBackend, SilentTtyTimesOutNamingThePort) {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0);
  ASSERT_EQ(::grantpt(master), 0);
  ASSERT_EQ(::unlockpt(master), 0);
  const std::string slave = ::ptsname(master);
  serial::SerialOptions o;
  o.timeout_s = 0.05;
  o.attempts = 2;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    serial::make_serial_backend(serial::open_tty(slave, 115200), o);
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
    EXPECT_NE(std::string(e.what()).find(slave), std::string::npos) << e.what();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 2.0);
  // The request did go out on the line, framed as the protocol says.
  uint8_t buf[64];
  const ssize_t n = ::read(master, buf, sizeof buf);
  ASSERT_GE(n, 9);
  EXPECT_EQ(buf[0], 0xA5);
  EXPECT_EQ(buf[1], 0x01);  // INFO
  ::close(master);
}

TEST(SerialBackend, MissingPortIsAClearError) {
  EXPECT_THROW(serial::open_tty("/dev/does-not-exist-tpuw", 115200), Error);
  ::unsetenv("TPUW_SERIAL_PORT");
  try {
    make_backend("serial", {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("TPUW_SERIAL_PORT"), std::string::npos);
  }
}

TEST(SerialBackend, FactoryWithSimPort) {
  ::setenv("TPUW_SERIAL_PORT", "sim", 1);
  ::setenv("TPUW_SERIAL_BAUD", "3000000", 1);
  DeviceOptions d = board_device_options();
  Device dev = Device::open("serial", {}, d);
  EXPECT_EQ(dev.info().params.array_n, 4u);
  EXPECT_EQ(dev.info().mem_size, 131072u);
  ::unsetenv("TPUW_SERIAL_PORT");
  ::unsetenv("TPUW_SERIAL_BAUD");
}

}  // namespace
}  // namespace tpuw
