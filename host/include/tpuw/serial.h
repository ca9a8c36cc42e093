// The `serial` backend: the driver's Backend interface over the UART host link of an FPGA board
// (rtl/fpga/tpu_uart_bridge.sv, protocol in docs/uart_protocol.md), on any byte transport.
//
//   make_backend("serial", cfg)   port from TPUW_SERIAL_PORT (a tty such as /dev/ttyUSB1, or "sim"
//                                 for the in-process verilated iCEBreaker board), line rate from
//                                 TPUW_SERIAL_BAUD (default 115200; the board boots at 115200 and
//                                 is switched to this rate after connecting)
//   make_serial_backend(link, o)  explicit transport and options (tests, tools)
//
// Every request is retried on a NACK (the board saw a bad checksum), a response with a bad
// checksum or wrong sequence number, or silence; a board that stays silent gives
// Error(kTimeout) naming the port. Link time (wall clock on a tty, simulated time on the verilated
// board) drives the protocol's timeouts and wait_irq(); the board's clock (INFO) is only used for
// baud divisors, never to bound a wait (a board reporting a wrong clock cannot stretch one).
// wait_irq() polls STATUS with a doubling pause spent blocked in the link's read (poll(2) on a tty),
// so waiting does not keep the line busy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "tpuw/backend.h"

namespace tpuw::serial {

/// A bidirectional byte stream with a notion of time.
class ByteLink {
 public:
  virtual ~ByteLink() = default;
  /// For messages: the tty path, or "sim:icebreaker".
  virtual std::string name() const = 0;
  /// Sends all bytes (a tty may return before they are on the wire).
  virtual void write(std::span<const uint8_t> bytes) = 0;
  /// Waits up to timeout_s (link time) for at least one byte; returns the bytes read (0: timeout).
  virtual size_t read(std::span<uint8_t> dst, double timeout_s) = 0;
  /// Drops everything received and not yet read.
  virtual void discard_input() = 0;
  /// Changes the line rate of this end.
  virtual void set_baud(unsigned baud) = 0;
  virtual unsigned baud() const = 0;
  /// Link time in seconds (monotonic) and a pause of link time.
  virtual double now() const = 0;
  virtual void sleep(double seconds) = 0;
};

/// A tty (termios raw 8N1, no flow control) at `baud`. Throws Error(kInvalidArgument) when the
/// port cannot be opened or the rate is not supported.
std::unique_ptr<ByteLink> open_tty(const std::string& path, unsigned baud);

/// The verilated iCEBreaker board top in this process (Error(kUnsupported) if not built).
/// rx_connected/tx_connected = false model an unplugged cable (a silent board).
struct SimLinkOptions {
  unsigned baud = 115200;  // host side; the board boots at 115200
  bool rx_connected = true;
  bool tx_connected = true;
};
std::unique_ptr<ByteLink> open_sim_board(const SimLinkOptions& options = {});

struct SerialOptions {
  unsigned boot_baud = 115200;   // rate the board listens at after reset (and the link's rate now)
  unsigned baud = 0;             // switch to this rate after connecting (0 = stay at boot_baud)
  double timeout_s = 0.1;        // per attempt, on top of the frames' own transfer time
  unsigned attempts = 4;         // tries per request before Error(kTimeout)
  bool restore_baud = true;      // switch the board back to boot_baud on destruction
};

/// Counters of one backend (bytes are wire bytes, payload = register/memory data carried).
struct LinkStats {
  uint64_t requests = 0;
  uint64_t retries = 0;
  uint64_t nacks = 0;            // board reported a bad request checksum
  uint64_t bad_responses = 0;    // bad response checksum, sequence number or framing
  uint64_t timeouts = 0;         // no complete response in time
  uint64_t tx_bytes = 0, rx_bytes = 0;
  uint64_t payload_tx = 0, payload_rx = 0;
  uint64_t irq_waits = 0;        // pauses between irq polls in wait_irq()
  uint64_t stray_reads = 0;      // unsolicited bytes seen while waiting (noise; dropped)
};

/// What the board says about itself (INFO).
struct BoardInfo {
  uint32_t mem_bytes = 0;
  uint32_t clock_hz = 0;
  uint32_t protocol = 0;
  uint32_t divisor = 0;
};

class SerialBackend : public Backend {
 public:
  virtual const LinkStats& stats() const = 0;
  virtual const BoardInfo& board() const = 0;
  virtual ByteLink& link() = 0;
  virtual void reset_stats() = 0;
};

/// Connects (INFO, then SET_BAUD if options.baud differs from boot_baud). Throws Error(kTimeout)
/// when the board does not answer, Error(kInvalidArgument) when something else answers.
std::unique_ptr<SerialBackend> make_serial_backend(std::unique_ptr<ByteLink> link,
                                                   const SerialOptions& options = {});

/// make_backend("serial", ...): port and rate from the environment (see above).
std::unique_ptr<Backend> make_serial_backend_from_env();

}  // namespace tpuw::serial
