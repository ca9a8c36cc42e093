// ByteLink over a tty: raw 8N1, no flow control, non-blocking I/O with poll(2), wall-clock time.
#include <fcntl.h>
#include <poll.h>
#include <termios.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstring>
#include <thread>

#include "tpuw/error.h"
#include "tpuw/serial.h"

namespace tpuw::serial {
namespace {

speed_t speed_of(unsigned baud) {
  switch (baud) {
    case 9600: return B9600;
    case 19200: return B19200;
    case 38400: return B38400;
    case 57600: return B57600;
    case 115200: return B115200;
    case 230400: return B230400;
    case 460800: return B460800;
    case 500000: return B500000;
    case 921600: return B921600;
    case 1000000: return B1000000;
    case 1500000: return B1500000;
    case 2000000: return B2000000;
    case 3000000: return B3000000;
    case 4000000: return B4000000;
    default: return B0;
  }
}

class TtyLink final : public ByteLink {
 public:
  TtyLink(std::string path, unsigned baud) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("serial: cannot open '{}': {}", path_, std::strerror(errno)));
    }
    termios t{};
    if (::tcgetattr(fd_, &t) != 0) {
      const int e = errno;
      ::close(fd_);
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("serial: '{}' is not a terminal: {}", path_, std::strerror(e)));
    }
    ::cfmakeraw(&t);
    t.c_cflag |= CLOCAL | CREAD;
    t.c_cflag &= ~static_cast<tcflag_t>(CSTOPB | CRTSCTS | PARENB);
    t.c_cc[VMIN] = 0;
    t.c_cc[VTIME] = 0;
    tio_ = t;
    try {
      set_baud(baud);
    } catch (...) {
      ::close(fd_);
      throw;
    }
    ::tcflush(fd_, TCIOFLUSH);
  }

  ~TtyLink() override { ::close(fd_); }

  std::string name() const override { return path_; }

  void write(std::span<const uint8_t> bytes) override {
    size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t k = ::write(fd_, bytes.data() + off, bytes.size() - off);
      if (k > 0) {
        off += static_cast<size_t>(k);
        continue;
      }
      if (k < 0 && errno != EAGAIN && errno != EINTR) {
        throw Error(ErrorKind::kTimeout, fmt::format("serial: write to '{}' failed: {}", path_, std::strerror(errno)));
      }
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, 1000) == 0) {
        throw Error(ErrorKind::kTimeout, fmt::format("serial: '{}' does not take output (1 s)", path_));
      }
    }
  }

  size_t read(std::span<uint8_t> dst, double timeout_s) override {
    const ssize_t k0 = ::read(fd_, dst.data(), dst.size());
    if (k0 > 0) return static_cast<size_t>(k0);
    pollfd p{fd_, POLLIN, 0};
    const int ms = static_cast<int>(std::ceil(std::max(0.0, timeout_s) * 1000.0));
    const int r = ::poll(&p, 1, ms);
    if (r <= 0) return 0;
    if ((p.revents & (POLLERR | POLLNVAL)) != 0) {
      throw Error(ErrorKind::kTimeout, fmt::format("serial: '{}' reports an error (unplugged?)", path_));
    }
    const ssize_t k = ::read(fd_, dst.data(), dst.size());
    if (k < 0 && errno != EAGAIN && errno != EINTR) {
      throw Error(ErrorKind::kTimeout, fmt::format("serial: read from '{}' failed: {}", path_, std::strerror(errno)));
    }
    if (k <= 0 && (p.revents & POLLHUP) != 0) {
      // A pty without a peer reports hang-up at once; wait out the timeout like a silent line.
      std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, timeout_s)));
      return 0;
    }
    return k > 0 ? static_cast<size_t>(k) : 0;
  }

  void discard_input() override {
    ::tcflush(fd_, TCIFLUSH);
    uint8_t buf[256];
    while (::read(fd_, buf, sizeof buf) > 0) {
    }
  }

  void set_baud(unsigned baud) override {
    const speed_t s = speed_of(baud);
    if (s == B0) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("serial: {} baud is not a supported tty rate", baud));
    }
    ::tcdrain(fd_);  // what was written goes out at the old rate
    ::cfsetispeed(&tio_, s);
    ::cfsetospeed(&tio_, s);
    if (::tcsetattr(fd_, TCSANOW, &tio_) != 0) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("serial: cannot set '{}' to {} baud: {}", path_, baud, std::strerror(errno)));
    }
    baud_ = baud;
  }

  unsigned baud() const override { return baud_; }

  double now() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }

  void sleep(double seconds) override {
    std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, seconds)));
  }

 private:
  std::string path_;
  int fd_ = -1;
  termios tio_{};
  unsigned baud_ = 0;
};

}  // namespace

std::unique_ptr<ByteLink> open_tty(const std::string& path, unsigned baud) {
  return std::make_unique<TtyLink>(path, baud);
}

}  // namespace tpuw::serial
