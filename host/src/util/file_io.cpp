// Bounded reads and atomic writes (see tpuw/file_io.h). POSIX file descriptors rather than
// iostreams: every error of open, read, write, fsync, close and rename has to be seen, with its
// errno, and iostreams hide most of them.
#include "tpuw/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <random>
#include <system_error>

#include "tpuw/error.h"

namespace tpuw {
namespace {

constexpr uint64_t kReadChunk = uint64_t{64} << 20;  // growth step of read_append

std::string reason(int err) { return std::system_category().message(err); }

[[noreturn]] void bad(const std::filesystem::path& p, const std::string& what) {
  throw Error(ErrorKind::kBadFile, fmt::format("{}: {}", p.string(), what));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// InputFile
// ---------------------------------------------------------------------------------------------
InputFile::InputFile(const std::filesystem::path& path, std::string_view what) : path_(path), what_(what) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd_ < 0) {
    const int err = errno;
    bad(path_, fmt::format("cannot open {}: {}", what_, reason(err)));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    bad(path_, fmt::format("cannot read {}: {}", what_, reason(err)));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd_);
    bad(path_, fmt::format("is a directory, not {}", what_));
  }
  if (S_ISREG(st.st_mode)) size_ = static_cast<uint64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

size_t InputFile::read(void* buf, size_t n) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd_, p + got, std::min<size_t>(n - got, size_t{1} << 30));
    if (r < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      bad(path_, fmt::format("cannot read {}: {}", what_, reason(err)));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

uint64_t InputFile::read_append(std::vector<uint8_t>& out, uint64_t n) {
  uint64_t got = 0;
  while (got < n) {
    const size_t step = static_cast<size_t>(std::min(n - got, kReadChunk));
    const size_t old = out.size();
    out.resize(old + step);
    const size_t r = read(out.data() + old, step);
    out.resize(old + r);
    got += r;
    if (r < step) break;
  }
  return got;
}

bool InputFile::at_end() {
  uint8_t b = 0;
  return read(&b, 1) == 0;
}

std::vector<uint8_t> read_file_bounded(const std::filesystem::path& path, uint64_t max_bytes, std::string_view what) {
  InputFile f(path, what);
  const auto too_large = [&] {
    bad(path, fmt::format("{} is larger than the limit of {} bytes", what, max_bytes));
  };
  if (f.regular_size() && *f.regular_size() > max_bytes) too_large();
  std::vector<uint8_t> out;
  if (f.regular_size()) out.reserve(static_cast<size_t>(*f.regular_size()));
  f.read_append(out, max_bytes);
  if (!f.at_end()) too_large();  // an endless stream, or a file that grew while being read
  return out;
}

// ---------------------------------------------------------------------------------------------
// AtomicFile
// ---------------------------------------------------------------------------------------------
AtomicFile::AtomicFile(const std::filesystem::path& target, std::string_view what)
    : target_(target), final_(target), what_(what) {
  if (target.empty()) throw Error(ErrorKind::kBadFile, fmt::format("cannot write {}: the path is empty", what_));
  struct stat st {};
  mode_t mode = 0666;  // a new file: 0666 & ~umask, like any other tool
  bool keep_mode = false;
  if (::stat(target.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) bad(target_, fmt::format("is a directory; cannot write {} there", what_));
    if (!S_ISREG(st.st_mode)) {
      // A device or a pipe: no temporary can replace it; write in place.
      fd_ = ::open(target.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
      if (fd_ < 0) fail("open", errno);
      return;
    }
    std::error_code ec;
    const auto resolved = std::filesystem::canonical(target, ec);  // replace what a link points to
    if (!ec) final_ = resolved;
    mode = st.st_mode & 07777;
    keep_mode = true;
  }
  std::filesystem::path dir = final_.parent_path();
  if (dir.empty()) dir = ".";
  std::random_device rd;
  for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {
    const uint64_t r = (uint64_t{rd()} << 32) ^ rd();
    temp_ = dir / fmt::format(".{}.tmp-{:016x}", final_.filename().string(), r);
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, mode);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) {
    const int err = errno;
    temp_.clear();
    bad(target_, fmt::format("cannot create {} in directory {}: {}", what_, dir.string(), reason(err)));
  }
  if (keep_mode && ::fchmod(fd_, mode) != 0) fail("set the mode of", errno);
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard();
}

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
}

void AtomicFile::fail(std::string_view step, int err) {
  discard();
  committed_ = true;  // nothing left to clean up
  const std::string msg = fmt::format("{}: cannot {} {}: {}", target_.string(), step, what_, reason(err));
  // Out of space (disk, quota, `ulimit -f`) or memory is the machine's state, not a bad path.
  if (err == ENOSPC || err == EFBIG || err == EDQUOT || err == ENOMEM) throw Error(ErrorKind::kResource, msg);
  throw Error(ErrorKind::kBadFile, msg);
}

void AtomicFile::write(std::span<const uint8_t> bytes) {
  if (fd_ < 0) throw Error(ErrorKind::kInternal, fmt::format("{}: AtomicFile::write after commit", target_.string()));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd_, bytes.data() + done, std::min<size_t>(bytes.size() - done, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("write", errno);
    }
    if (w == 0) fail("write", ENOSPC);
    done += static_cast<size_t>(w);
  }
}

void AtomicFile::write(std::string_view text) {
  write(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

void AtomicFile::commit() {
  if (fd_ < 0) throw Error(ErrorKind::kInternal, fmt::format("{}: AtomicFile::commit twice", target_.string()));
  if (::fsync(fd_) != 0) {
    const int err = errno;
    // Devices and pipes written in place need no (and may not support) fsync.
    if (!temp_.empty() || (err != EINVAL && err != EROFS && err != ENOTSUP)) fail("flush", err);
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close", errno);
  if (!temp_.empty()) {
    if (::rename(temp_.c_str(), final_.c_str()) != 0) fail("rename the temporary file to", errno);
    temp_.clear();
    // Make the rename itself durable; a failure here loses nothing already visible.
    std::filesystem::path dir = final_.parent_path();
    if (dir.empty()) dir = ".";
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)::fsync(dfd);
      ::close(dfd);
    }
  }
  committed_ = true;
}

void write_file_atomic(const std::filesystem::path& path, std::span<const uint8_t> bytes, std::string_view what) {
  AtomicFile f(path, what);
  f.write(bytes);
  f.commit();
}

}  // namespace tpuw
