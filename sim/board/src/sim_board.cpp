// SimBoard: the verilated tpu_icebreaker_top clocked at 12 MHz, with a host-side UART model on
// its RX/TX pins (the FTDI's role). See tpuw/sim/sim_board.h.
#include "tpuw/sim/sim_board.h"

#include <verilated.h>

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <utility>

#include "Vtpu_icebreaker_top.h"
#include "tpuw/sim/error.h"

namespace tpuw::sim {

class SimBoard::Impl {
 public:
  explicit Impl(const SimBoardConfig& config)
      : config_(config), div_(config.divisor), ctx_(std::make_unique<VerilatedContext>()) {
    if (div_ < 4 || div_ > 65535) {
      throw SimError(SimErrorKind::kInvalidArgument,
                     fmt::format("SimBoard: divisor {} out of range [4, 65535]", div_));
    }
    ctx_->fatalOnError(false);
    enter();
    top_ = std::make_unique<Vtpu_icebreaker_top>(ctx_.get(), "TOP");
    top_->clk_i = 0;
    top_->rx_i = 1;
    top_->btn_ni = 0;
    top_->eval();
    for (unsigned i = 0; i < config.reset_cycles; ++i) step();
    top_->btn_ni = 1;
    // The board leaves reset a few cycles after the button is released (synchronizer + POR).
    for (unsigned i = 0; i < 8; ++i) step();
    check();
  }

  ~Impl() {
    enter();
    top_->final();
    top_.reset();
    ctx_.reset();
    Verilated::threadContextp(nullptr);
  }

  void send(std::span<const uint8_t> bytes) { txq_.insert(txq_.end(), bytes.begin(), bytes.end()); }

  size_t receive(std::span<uint8_t> out) {
    const size_t n = std::min(out.size(), rxq_.size());
    std::copy_n(rxq_.begin(), n, out.begin());
    rxq_.erase(rxq_.begin(), rxq_.begin() + static_cast<std::ptrdiff_t>(n));
    return n;
  }

  size_t available() const noexcept { return rxq_.size(); }
  size_t pending_tx() const noexcept { return txq_.size() + (tx_bit_ < 10 ? 1 : 0); }

  void tick(uint64_t n) {
    enter();
    for (uint64_t i = 0; i < n; ++i) step();
    check();
  }

  uint64_t run_until_rx(uint64_t max_cycles) {
    enter();
    uint64_t i = 0;
    while (i < max_cycles && rxq_.empty()) {
      step();
      ++i;
    }
    check();
    return i;
  }

  void set_divisor(unsigned d) {
    if (d < 4 || d > 65535) {
      throw SimError(SimErrorKind::kInvalidArgument,
                     fmt::format("SimBoard: divisor {} out of range [4, 65535]", d));
    }
    div_ = d;
  }
  unsigned divisor() const noexcept { return div_; }
  uint64_t cycle() const noexcept { return cycle_; }
  bool led_irq() const noexcept { return top_->led_r_no == 0; }
  uint64_t framing_errors() const noexcept { return framing_errors_; }

 private:
  void enter() const noexcept { Verilated::threadContextp(ctx_.get()); }

  void check() {
    if (ctx_->gotError()) {
      ctx_->gotError(false);
      ctx_->gotFinish(false);
      throw SimError(SimErrorKind::kAssertion,
                     fmt::format("board model reported an assertion failure or $stop by cycle {} "
                                 "(Verilator's message is on stderr)",
                                 cycle_));
    }
  }

  // Host transmitter -> RX pin level for this cycle.
  uint8_t drive_rx() noexcept {
    if (tx_bit_ >= 10) {
      if (txq_.empty()) return 1;
      tx_frame_ = static_cast<uint16_t>((txq_.front() << 1) | (1u << 9));
      txq_.pop_front();
      tx_bit_ = 0;
      tx_left_ = div_;
    }
    const auto level = static_cast<uint8_t>((tx_frame_ >> tx_bit_) & 1u);
    if (--tx_left_ == 0) {
      ++tx_bit_;
      tx_left_ = div_;
    }
    return level;
  }

  // TX pin (after the edge) -> host receiver.
  void sample_tx(bool level) {
    if (!rx_active_) {
      if (!level) {
        rx_active_ = true;
        rx_bit_ = 0;
        rx_left_ = div_ / 2;  // middle of the start bit
        rx_shift_ = 0;
      }
      return;
    }
    if (--rx_left_ != 0) return;
    rx_left_ = div_;
    if (rx_bit_ == 0) {
      if (level) rx_active_ = false;  // glitch
    } else if (rx_bit_ <= 8) {
      rx_shift_ = static_cast<uint8_t>((rx_shift_ >> 1) | (level ? 0x80 : 0));
    } else {
      if (level) {
        rxq_.push_back(rx_shift_);
      } else {
        ++framing_errors_;
      }
      rx_active_ = false;  // at the middle of the stop bit: ready for the next start edge
      return;
    }
    ++rx_bit_;
  }

  void step() {
    Vtpu_icebreaker_top& t = *top_;
    const uint8_t rx = drive_rx();
    t.rx_i = config_.rx_connected ? rx : 1;
    t.clk_i = 0;
    t.eval();
    t.clk_i = 1;
    t.eval();
    ++cycle_;
    if (config_.tx_connected) sample_tx(t.tx_o != 0);
  }

  SimBoardConfig config_;
  unsigned div_;
  std::unique_ptr<VerilatedContext> ctx_;
  std::unique_ptr<Vtpu_icebreaker_top> top_;
  uint64_t cycle_ = 0;
  uint64_t framing_errors_ = 0;

  std::deque<uint8_t> txq_;
  uint16_t tx_frame_ = 0x3FF;
  unsigned tx_bit_ = 10;  // 10 = idle
  unsigned tx_left_ = 0;

  std::deque<uint8_t> rxq_;
  bool rx_active_ = false;
  unsigned rx_bit_ = 0;
  unsigned rx_left_ = 0;
  uint8_t rx_shift_ = 0;
};

SimBoard::SimBoard(const SimBoardConfig& config) : impl_(std::make_unique<Impl>(config)) {}
SimBoard::~SimBoard() = default;
SimBoard::SimBoard(SimBoard&&) noexcept = default;
SimBoard& SimBoard::operator=(SimBoard&&) noexcept = default;

void SimBoard::send(std::span<const uint8_t> bytes) { impl_->send(bytes); }
size_t SimBoard::receive(std::span<uint8_t> out) { return impl_->receive(out); }
size_t SimBoard::available() const noexcept { return impl_->available(); }
size_t SimBoard::pending_tx() const noexcept { return impl_->pending_tx(); }
void SimBoard::tick(uint64_t n) { impl_->tick(n); }
uint64_t SimBoard::run_until_rx(uint64_t max_cycles) { return impl_->run_until_rx(max_cycles); }
void SimBoard::set_divisor(unsigned cycles_per_bit) { impl_->set_divisor(cycles_per_bit); }
unsigned SimBoard::divisor() const noexcept { return impl_->divisor(); }
uint64_t SimBoard::cycle() const noexcept { return impl_->cycle(); }
bool SimBoard::led_irq() const noexcept { return impl_->led_irq(); }
uint64_t SimBoard::framing_errors() const noexcept { return impl_->framing_errors(); }

}  // namespace tpuw::sim
