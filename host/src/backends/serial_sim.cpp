// ByteLink over the in-process verilated iCEBreaker board (tpuw::sim::SimBoard): bytes go onto the
// board's RX pin with real bit timing, link time is the board's simulated time (cycles / 12 MHz),
// so the protocol's timeouts and retries behave as on the real board, only deterministically.
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "tpuw/error.h"
#include "tpuw/serial.h"

#if TPUW_HAVE_SIM_BOARD
#include "tpuw/sim/error.h"
#include "tpuw/sim/sim_board.h"
#endif

namespace tpuw::serial {

#if TPUW_HAVE_SIM_BOARD
namespace {

template <typename F>
auto translate(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const sim::SimError& e) {
    throw Error(e.kind() == sim::SimErrorKind::kAssertion ? ErrorKind::kInternal : ErrorKind::kInvalidArgument,
                fmt::format("sim:icebreaker: {}", e.what()));
  }
}

unsigned divisor_for(unsigned baud) {
  const double hz = static_cast<double>(sim::SimBoard::kClockHz);
  const double div = std::round(hz / baud);
  if (baud == 0 || div < 4 || div > 65535 || std::abs(hz / div - baud) / baud > 0.03) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("sim:icebreaker: {} baud is not reachable from the board's 12 MHz clock", baud));
  }
  return static_cast<unsigned>(div);
}

class SimBoardLink final : public ByteLink {
 public:
  explicit SimBoardLink(const SimLinkOptions& o)
      : board_(translate([&] {
          sim::SimBoardConfig c;
          c.divisor = divisor_for(o.baud);
          c.rx_connected = o.rx_connected;
          c.tx_connected = o.tx_connected;
          return sim::SimBoard(c);
        })),
        baud_(o.baud) {}

  std::string name() const override { return "sim:icebreaker"; }

  void write(std::span<const uint8_t> bytes) override { board_.send(bytes); }

  size_t read(std::span<uint8_t> dst, double timeout_s) override {
    if (board_.available() == 0 && timeout_s > 0) {
      const auto cycles = static_cast<uint64_t>(std::ceil(timeout_s * sim::SimBoard::kClockHz));
      translate([&] { return board_.run_until_rx(cycles); });
    }
    return board_.receive(dst);
  }

  void discard_input() override {
    std::vector<uint8_t> scratch(board_.available());
    board_.receive(scratch);
  }

  void set_baud(unsigned baud) override {
    const unsigned d = divisor_for(baud);
    // Bytes already queued leave at the old rate first (a tty's tcdrain).
    while (board_.pending_tx() > 0) translate([&] { board_.tick(64); });
    board_.set_divisor(d);
    baud_ = baud;
  }

  unsigned baud() const override { return baud_; }

  double now() const override {
    return static_cast<double>(board_.cycle()) / static_cast<double>(sim::SimBoard::kClockHz);
  }

  void sleep(double seconds) override {
    if (seconds > 0) {
      translate([&] { board_.tick(static_cast<uint64_t>(std::ceil(seconds * sim::SimBoard::kClockHz))); });
    }
  }

 private:
  sim::SimBoard board_;
  unsigned baud_;
};

}  // namespace

std::unique_ptr<ByteLink> open_sim_board(const SimLinkOptions& options) {
  return std::make_unique<SimBoardLink>(options);
}
#else
std::unique_ptr<ByteLink> open_sim_board(const SimLinkOptions&) {
  throw Error(ErrorKind::kUnsupported,
              "serial: the verilated iCEBreaker board (target tpuw_sim_board) is not part of this build");
}
#endif

}  // namespace tpuw::serial
