// The `serial` backend: Backend over the UART bridge protocol (docs/uart_protocol.md).
//
//   request  A5 | cmd | seq | addr[4] LE | n | payload | crc8      (cmd bit 7: RETRY)
//   response 5A | code | seq | status | payload | crc8             (status bit 0: irq)
//
// One request at a time (stop-and-wait). A request is retried with the RETRY flag on a NACK, a
// response that fails its checksum, sequence number or framing, or silence; the board executes a
// retried write only if it did not execute it already, so a lost response never repeats a
// register write. Memory transfers move up to 256 words per frame; unaligned edges are
// read-modify-write on the host.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tpuw/error.h"
#include "tpuw/serial.h"
#include "tpuw/spec.h"

namespace tpuw::serial {
namespace {

constexpr uint8_t kSyncReq = 0xA5;
constexpr uint8_t kSyncRsp = 0x5A;
constexpr uint8_t kRetryFlag = 0x80;
constexpr uint32_t kInfoMagic = 0x42555054;  // "TPUB"
constexpr size_t kMaxWords = 256;
constexpr double kMaxPause = 0.005;  // longest sleep between two irq polls (link seconds)

enum class Cmd : uint8_t { kStatus = 0, kInfo = 1, kRegRd = 2, kRegWr = 3, kMemRd = 4, kMemWr = 5, kSetBaud = 6 };
enum Code : uint8_t { kOk = 0, kBadCrc = 1, kBadCmd = 2, kRange = 3, kBusErr = 4 };

const char* cmd_name(Cmd c) {
  switch (c) {
    case Cmd::kStatus: return "STATUS";
    case Cmd::kInfo: return "INFO";
    case Cmd::kRegRd: return "REG_READ";
    case Cmd::kRegWr: return "REG_WRITE";
    case Cmd::kMemRd: return "MEM_READ";
    case Cmd::kMemWr: return "MEM_WRITE";
    case Cmd::kSetBaud: return "SET_BAUD";
  }
  return "?";
}

uint8_t crc8(uint8_t crc, uint8_t byte) {
  crc = static_cast<uint8_t>(crc ^ byte);
  for (int i = 0; i < 8; ++i) {
    crc = static_cast<uint8_t>((crc & 0x80) ? ((crc << 1) ^ 0x07) : (crc << 1));
  }
  return crc;
}

uint8_t crc8(std::span<const uint8_t> bytes) {
  uint8_t c = 0;
  for (uint8_t b : bytes) c = crc8(c, b);
  return c;
}

uint32_t le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

void put_le32(std::vector<uint8_t>& v, uint32_t x) {
  for (int i = 0; i < 4; ++i) v.push_back(static_cast<uint8_t>(x >> (8 * i)));
}

struct Response {
  uint8_t status = 0;
  std::vector<uint8_t> payload;
};

class SerialBackendImpl final : public SerialBackend {
 public:
  SerialBackendImpl(std::unique_ptr<ByteLink> link, const SerialOptions& options)
      : link_(std::move(link)), options_(options) {
    if (!link_) throw Error(ErrorKind::kInvalidArgument, "serial: null link");
    if (options_.attempts == 0) options_.attempts = 1;
    connect();
  }

  ~SerialBackendImpl() override {
    if (!options_.restore_baud || link_->baud() == options_.boot_baud) return;
    try {
      set_board_baud(options_.boot_baud);
    } catch (...) {  // best effort: a board that went away keeps its rate until reset
    }
  }

  std::string_view name() const override { return "serial"; }

  uint32_t read_reg(uint32_t offset) override {
    const Response r = transact(Cmd::kRegRd, offset, 0, {}, 4);
    stats_.payload_rx += 4;
    return le32(r.payload.data());
  }

  void write_reg(uint32_t offset, uint32_t value) override {
    std::vector<uint8_t> p;
    put_le32(p, value);
    transact(Cmd::kRegWr, offset, 0, p, 0);
    stats_.payload_tx += 4;
  }

  uint64_t mem_base() const override { return 0; }
  uint64_t mem_size() const override { return info_.mem_bytes; }

  void mem_write(uint64_t addr, const void* src, size_t bytes) override {
    check_range("mem_write", addr, bytes);
    const auto* s = static_cast<const uint8_t*>(src);
    uint64_t a = addr;
    size_t left = bytes;
    // Unaligned head/tail: read-modify-write of the word.
    while (left > 0 && ((a & 3) != 0 || left < 4)) {
      const uint64_t w = a & ~uint64_t{3};
      std::array<uint8_t, 4> word{};
      read_words(w, 1, word.data());
      const size_t off = static_cast<size_t>(a - w);
      const size_t n = std::min(left, 4 - off);
      std::memcpy(word.data() + off, s, n);
      write_words(w, 1, word.data());
      a += n;
      s += n;
      left -= n;
    }
    while (left >= 4) {
      const size_t words = std::min(left / 4, kMaxWords);
      write_words(a, words, s);
      a += 4 * words;
      s += 4 * words;
      left -= 4 * words;
      if (left > 0 && left < 4) {
        std::array<uint8_t, 4> word{};
        read_words(a, 1, word.data());
        std::memcpy(word.data(), s, left);
        write_words(a, 1, word.data());
        left = 0;
      }
    }
  }

  void mem_read(uint64_t addr, void* dst, size_t bytes) override {
    check_range("mem_read", addr, bytes);
    auto* d = static_cast<uint8_t*>(dst);
    const uint64_t first = addr & ~uint64_t{3};
    const uint64_t end = addr + bytes;
    std::vector<uint8_t> buf(kMaxWords * 4);
    for (uint64_t w = first; w < end;) {
      const size_t words = static_cast<size_t>(std::min<uint64_t>((end - w + 3) / 4, kMaxWords));
      read_words(w, words, buf.data());
      const uint64_t lo = std::max(w, addr);
      const uint64_t hi = std::min(w + 4 * words, end);
      std::memcpy(d + (lo - addr), buf.data() + (lo - w), static_cast<size_t>(hi - lo));
      w += 4 * words;
    }
  }

  void mem_map(uint64_t addr, uint64_t bytes) override {
    // The board's memory is all there is, and it is always mapped.
    check_range("mem_map", addr, bytes);
  }
  uint64_t mem_mapped() const override { return info_.mem_bytes; }

  // The UART bridge has no reset line for the device: a soft reset (waited for, bounded by link
  // time), then the writable registers the soft reset keeps go back to their reset values.
  void reset() override {
    write_reg(spec::reg::kCtrl, spec::reg::kCtrlSoftReset);
    const double t0 = link_->now();
    while ((read_reg(spec::reg::kCtrl) & spec::reg::kCtrlSoftReset) != 0) {
      if (link_->now() - t0 > 1.0) {
        throw Error(ErrorKind::kTimeout,
                    fmt::format("serial: the device on '{}' did not finish its reset within 1 s", link_->name()));
      }
      link_->sleep(0.001);
    }
    write_reg(spec::reg::kIrqEnable, 0);
    write_reg(spec::reg::kDmaWinBase, 0);
    write_reg(spec::reg::kDmaWinLast, 0xFFFFFFFFu);
  }

  bool irq() { return (transact(Cmd::kStatus, 0, 0, {}, 0).status & 1) != 0; }

  // The board never talks unasked, so the irq level comes with a STATUS poll. Between polls the
  // host sleeps in the link's blocking read (poll(2) on a tty; the simulated board runs meanwhile),
  // with the pause doubling from two frame times up to kMaxPause: an idle wait costs a few polls
  // per second, not a saturated line. Bounded by timeout_s of link time (wall time on a tty),
  // whatever clock the board reports.
  bool wait_irq(double timeout_s) override {
    const double t0 = link_->now();
    double pause = 2 * 14 * 10.0 / link_->baud();
    std::array<uint8_t, 64> stray{};
    for (;;) {
      if (irq()) return true;
      const double left = timeout_s - (link_->now() - t0);
      if (left <= 0) return false;
      const double nap = std::min({pause, left, kMaxPause});
      // Blocks until a byte arrives (there should be none: any that do are noise and dropped)
      // or the nap is over.
      const double until = link_->now() + nap;
      while (link_->now() < until) {
        const size_t k = link_->read(stray, until - link_->now());
        stats_.rx_bytes += k;
        if (k == 0) break;
        ++stats_.stray_reads;
      }
      ++stats_.irq_waits;
      pause = std::min(2 * pause, kMaxPause);
    }
  }

  const LinkStats& stats() const override { return stats_; }
  const BoardInfo& board() const override { return info_; }
  ByteLink& link() override { return *link_; }
  void reset_stats() override { stats_ = {}; }

 private:
  void check_range(const char* what, uint64_t addr, size_t bytes) const {
    if (addr > info_.mem_bytes || bytes > info_.mem_bytes - addr) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("serial: {} [0x{:x}, +{}) outside the board's {} bytes of memory", what,
                              addr, bytes, info_.mem_bytes));
    }
  }

  void write_words(uint64_t addr, size_t words, const uint8_t* src) {
    transact(Cmd::kMemWr, static_cast<uint32_t>(addr), static_cast<uint8_t>(words - 1),
             std::span<const uint8_t>(src, 4 * words), 0);
    stats_.payload_tx += 4 * words;
  }

  void read_words(uint64_t addr, size_t words, uint8_t* dst) {
    const Response r = transact(Cmd::kMemRd, static_cast<uint32_t>(addr), static_cast<uint8_t>(words - 1),
                                {}, 4 * words);
    std::memcpy(dst, r.payload.data(), 4 * words);
    stats_.payload_rx += 4 * words;
  }

  void connect() {
    // The board listens at boot_baud after reset; it may still be at the target rate when a
    // previous session did not restore it.
    const unsigned target = options_.baud == 0 ? options_.boot_baud : options_.baud;
    link_->set_baud(options_.boot_baud);
    Response r;
    bool ok = false;
    try {
      r = transact(Cmd::kInfo, 0, 0, {}, 16);
      ok = true;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kTimeout || target == options_.boot_baud) throw;
    }
    if (!ok) {
      link_->set_baud(target);
      try {
        r = transact(Cmd::kInfo, 0, 0, {}, 16);
      } catch (const Error& e) {
        throw Error(e.kind(), fmt::format("{} (also tried {} baud)", e.what(), target));
      }
    }
    const uint8_t* p = r.payload.data();
    if (le32(p) != kInfoMagic) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("serial: '{}' answers but is not a TPU Worker UART bridge (INFO magic 0x{:08x})",
                              link_->name(), le32(p)));
    }
    info_.mem_bytes = le32(p + 4);
    info_.clock_hz = le32(p + 8);
    info_.divisor = le32(p + 12) & 0xFFFF;
    info_.protocol = le32(p + 12) >> 24;
    if (info_.clock_hz == 0 || info_.mem_bytes == 0) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("serial: '{}': implausible INFO (clock {} Hz, memory {} bytes)", link_->name(),
                              info_.clock_hz, info_.mem_bytes));
    }
    if (link_->baud() != target) set_board_baud(target);
  }

  void set_board_baud(unsigned baud) {
    const double div = std::round(static_cast<double>(info_.clock_hz) / baud);
    const double actual = info_.clock_hz / div;
    if (div < 4 || div > 65535 || std::abs(actual - baud) / baud > 0.03) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("serial: {} baud is not reachable from the board's {} Hz clock "
                              "(divisor {} gives {:.0f} baud)",
                              baud, info_.clock_hz, div, actual));
    }
    transact(Cmd::kSetBaud, static_cast<uint32_t>(div), 0, {}, 0);
    link_->set_baud(baud);
    // The board switches after its last stop bit; give it a few bit times at the old rate.
    link_->sleep(0.001);
    info_.divisor = static_cast<uint32_t>(div);
    transact(Cmd::kStatus, 0, 0, {}, 0);  // proves the new rate works
  }

  // Reads exactly dst.size() bytes before the deadline; false on timeout.
  bool read_exact(uint8_t* dst, size_t n, double deadline) {
    size_t got = 0;
    while (got < n) {
      const double left = deadline - link_->now();
      if (left <= 0) return false;
      const size_t k = link_->read(std::span<uint8_t>(dst + got, n - got), left);
      stats_.rx_bytes += k;
      got += k;
    }
    return true;
  }

  // One request/response exchange with retries. rsp_len: payload bytes of an OK response.
  Response transact(Cmd cmd, uint32_t addr, uint8_t n, std::span<const uint8_t> payload, size_t rsp_len) {
    ++stats_.requests;
    const uint8_t seq = seq_++;
    std::vector<uint8_t> frame;
    frame.reserve(9 + payload.size());
    frame.push_back(kSyncReq);
    frame.push_back(static_cast<uint8_t>(cmd));
    frame.push_back(seq);
    put_le32(frame, addr);
    frame.push_back(n);
    frame.insert(frame.end(), payload.begin(), payload.end());
    frame.push_back(0);

    std::string last_problem;
    for (unsigned attempt = 0; attempt < options_.attempts; ++attempt) {
      if (attempt > 0) {
        ++stats_.retries;
        frame[1] = static_cast<uint8_t>(static_cast<uint8_t>(cmd) | kRetryFlag);
        // Let the board's parser give up on whatever it was reading (it drops a request after 256
        // quiet bit times), then forget anything that arrived meanwhile.
        link_->sleep(300.0 / link_->baud());
        link_->discard_input();
      }
      frame.back() = crc8(std::span<const uint8_t>(frame).subspan(1, frame.size() - 2));
      link_->write(frame);
      stats_.tx_bytes += frame.size();

      const double wire = 10.0 * static_cast<double>(frame.size() + 5 + rsp_len) / link_->baud();
      const double deadline = link_->now() + options_.timeout_s + 1.5 * wire;

      // Response header: hunt for the sync byte, then code, seq, status.
      std::array<uint8_t, 4> hdr{};
      bool timed_out = false;
      for (;;) {
        if (!read_exact(hdr.data(), 1, deadline)) {
          timed_out = true;
          break;
        }
        if (hdr[0] == kSyncRsp) break;
      }
      if (!timed_out && !read_exact(hdr.data() + 1, 3, deadline)) timed_out = true;
      if (timed_out) {
        ++stats_.timeouts;
        last_problem = "no response";
        continue;
      }
      const uint8_t code = hdr[1];
      const size_t plen = code == kOk ? rsp_len : 0;
      std::vector<uint8_t> rest(plen + 1);
      if (!read_exact(rest.data(), rest.size(), deadline)) {
        ++stats_.timeouts;
        last_problem = "truncated response";
        continue;
      }
      uint8_t c = crc8(std::span<const uint8_t>(hdr).subspan(1));
      for (uint8_t b : rest) c = crc8(c, b);
      if (c != 0) {
        ++stats_.bad_responses;
        last_problem = "response checksum error";
        continue;
      }
      if (code == kBadCrc) {
        ++stats_.nacks;
        last_problem = "board reported a request checksum error (NACK)";
        continue;
      }
      if (hdr[2] != seq) {
        ++stats_.bad_responses;
        last_problem = fmt::format("response to sequence number {} (expected {})", hdr[2], seq);
        continue;
      }
      if (code != kOk) {
        const char* why = code == kRange   ? "address, length or rate out of range"
                          : code == kBusErr ? "the register access answered an AXI error"
                          : code == kBadCmd ? "unknown command (is the board's bitstream older than this driver?)"
                                            : "unknown response code";
        // A command the board does not know is a version mismatch between bitstream and driver,
        // not a bug in either: kUnsupported (exit 2) with a hint, not kInternal.
        throw Error(code == kBadCmd ? ErrorKind::kUnsupported : ErrorKind::kInvalidArgument,
                    fmt::format("serial: board on '{}' rejected {} 0x{:x} (n={}): {} (code {})", link_->name(),
                                cmd_name(cmd), addr, n, why, code));
      }
      Response r;
      r.status = hdr[3];
      r.payload.assign(rest.begin(), rest.end() - 1);
      return r;
    }
    throw Error(ErrorKind::kTimeout,
                fmt::format("serial: no valid answer from the board on '{}' at {} baud to {} 0x{:x} after {} "
                            "attempts (last: {}); is the board connected, configured with the TPU Worker "
                            "bitstream and listening at this rate?",
                            link_->name(), link_->baud(), cmd_name(cmd), addr, options_.attempts,
                            last_problem));
  }

  std::unique_ptr<ByteLink> link_;
  SerialOptions options_;
  BoardInfo info_;
  LinkStats stats_;
  uint8_t seq_ = 1;
};

unsigned env_baud(const char* name, unsigned fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const unsigned long x = std::strtoul(v, &end, 10);
  if (end == v || *end != '\0' || x == 0 || x > 100'000'000) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{}='{}' is not a baud rate", name, v));
  }
  return static_cast<unsigned>(x);
}

}  // namespace

std::unique_ptr<SerialBackend> make_serial_backend(std::unique_ptr<ByteLink> link, const SerialOptions& options) {
  return std::make_unique<SerialBackendImpl>(std::move(link), options);
}

std::unique_ptr<Backend> make_serial_backend_from_env() {
  const char* port = std::getenv("TPUW_SERIAL_PORT");
  if (port == nullptr || *port == '\0') {
    throw Error(ErrorKind::kInvalidArgument,
                "backend 'serial' needs TPUW_SERIAL_PORT: the board's tty (e.g. /dev/ttyUSB1) or 'sim' for "
                "the verilated iCEBreaker board");
  }
  SerialOptions o;
  o.baud = env_baud("TPUW_SERIAL_BAUD", o.boot_baud);
  const std::string p(port);
  if (p == "sim") {
    SimLinkOptions s;
    s.baud = o.boot_baud;
    return make_serial_backend(open_sim_board(s), o);
  }
  return make_serial_backend(open_tty(p, o.boot_baud), o);
}

}  // namespace tpuw::serial
