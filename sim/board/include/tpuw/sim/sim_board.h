// The verilated iCEBreaker board (rtl/fpga/tpu_icebreaker_top.sv) as a byte stream: bytes sent
// here are driven onto the board's RX pin bit by bit (8N1, `divisor` clock cycles per bit), and the
// board's TX pin is sampled every cycle and decoded back into bytes, exactly as the FTDI chip on the
// real board would. Nothing reaches into the model's internals: the only inputs are the pins.
//
//   tpuw::sim::SimBoard board;              // 12 MHz, 104 cycles/bit (115200 baud)
//   board.send(request);                    // queued; transmitted while the board is clocked
//   board.run_until_rx(1'000'000);          // clock until a byte came back (or the budget ends)
//   size_t n = board.receive(buf);
//
// Each SimBoard owns its VerilatedContext; any number can live in one process (one thread each at
// a time). Errors are tpuw::sim::SimError (an RTL assertion: kAssertion).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace tpuw::sim {

struct SimBoardConfig {
  unsigned divisor = 104;          // host-side UART: clock cycles per bit (the board boots at 104)
  bool rx_connected = true;        // false: the board's RX pin idles high whatever is sent (cable off)
  bool tx_connected = true;        // false: nothing the board sends is received
  unsigned reset_cycles = 32;      // BTN_N held low for this many cycles at start
};

class SimBoard {
 public:
  explicit SimBoard(const SimBoardConfig& config = {});
  ~SimBoard();
  SimBoard(SimBoard&&) noexcept;
  SimBoard& operator=(SimBoard&&) noexcept;
  SimBoard(const SimBoard&) = delete;
  SimBoard& operator=(const SimBoard&) = delete;

  static constexpr uint64_t kClockHz = 12'000'000;

  /// Queues bytes for the board's RX pin.
  void send(std::span<const uint8_t> bytes);
  /// Takes up to out.size() decoded bytes from the TX pin; returns how many.
  size_t receive(std::span<uint8_t> out);
  /// Decoded bytes waiting in receive().
  size_t available() const noexcept;
  /// Bytes queued by send() that have not fully left yet.
  size_t pending_tx() const noexcept;

  /// Clocks the board n cycles.
  void tick(uint64_t n);
  /// Clocks until at least one decoded byte is waiting, at most max_cycles; returns cycles run.
  uint64_t run_until_rx(uint64_t max_cycles);

  /// Host-side bit time (both directions) in clock cycles; takes effect at the next byte.
  void set_divisor(unsigned cycles_per_bit);
  unsigned divisor() const noexcept;

  uint64_t cycle() const noexcept;
  bool led_irq() const noexcept;           // LEDR_N lit
  uint64_t framing_errors() const noexcept;  // TX bytes whose stop bit was low

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpuw::sim
