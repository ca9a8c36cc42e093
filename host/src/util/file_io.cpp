// Bounded reads and atomic writes (see tpuw/file_io.h). POSIX file descriptors rather than
// iostreams: every error of open, read, write, fsync, close and rename has to be seen, with its
// errno, and iostreams hide most of them.
#include "tpuw/file_io.h"

#include <dirent.h>
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

uint64_t random64() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

/// What a file system object that is not a regular file is, for messages; nullptr for a regular file.
const char* kind_of(mode_t m) {
  if (S_ISREG(m)) return nullptr;
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

/// Where an output written to `path` lands: `path` itself (nothing there yet, or a regular file) or
/// the regular file a symbolic link points to. Anything else is refused through `fail(reason)`,
/// which throws. `exists` and `mode` describe what is there now.
struct OutputTarget {
  std::filesystem::path final;
  bool exists = false;
  mode_t mode = 0;
};

template <class Fail>
OutputTarget resolve_output(const std::filesystem::path& path, Fail&& fail) {
  if (path.empty()) fail(std::string("the path is empty"));
  OutputTarget t{path};
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return t;  // nothing there (the directory is checked by the caller)
    fail(fmt::format("cannot look at the path: {}", reason(err)));
  }
  if (S_ISLNK(st.st_mode)) {
    struct stat to {};
    if (::stat(path.c_str(), &to) != 0) {
      fail(fmt::format("is a symbolic link to nothing ({}); refusing to replace the link", reason(errno)));
    }
    if (const char* k = kind_of(to.st_mode)) {
      fail(fmt::format("is a symbolic link to {}, not to a regular file; refusing to write there", k));
    }
    std::error_code ec;
    const auto resolved = std::filesystem::canonical(path, ec);  // replace what the link points to
    if (ec) fail(fmt::format("cannot resolve the symbolic link: {}", ec.message()));
    t.final = resolved;
    t.exists = true;
    t.mode = to.st_mode;
    return t;
  }
  if (const char* k = kind_of(st.st_mode)) {
    // Never replace or write into a directory, device, FIFO or socket: a rename would destroy it
    // (a device node of the whole machine, for root) and writing in place cannot be undone.
    fail(S_ISDIR(st.st_mode) ? std::string("is a directory")
                             : fmt::format("is {}, not a regular file; refusing to write there", k));
  }
  t.exists = true;
  t.mode = st.st_mode;
  return t;
}

std::filesystem::path dir_of(const std::filesystem::path& p) {
  std::filesystem::path d = p.parent_path();
  return d.empty() ? std::filesystem::path(".") : d;
}

/// Removes the directory `dir` and the files in it (one level: the private directories of
/// StagedOutput and the probes hold nothing else). Only for directories this process created.
void remove_private_dir(const std::filesystem::path& dir) noexcept {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string_view n(e->d_name);
      if (n == "." || n == "..") continue;
      const std::string p = (dir / std::string(n)).string();
      if (::unlink(p.c_str()) != 0 && errno == EISDIR) (void)::rmdir(p.c_str());
    }
    ::closedir(d);
  }
  (void)::rmdir(dir.c_str());
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Checks before any work
// ---------------------------------------------------------------------------------------------
void check_output_path(const std::filesystem::path& path, std::string_view what) {
  const auto fail = [&](const std::string& why) {
    throw Error(ErrorKind::kBadFile, fmt::format("{} {}: {}", what, path.string(), why));
  };
  const OutputTarget t = resolve_output(path, fail);
  const std::filesystem::path dir = dir_of(t.final);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    fail(err == ENOENT ? fmt::format("directory {} does not exist", dir.string())
                       : fmt::format("directory {}: {}", dir.string(), reason(err)));
  }
  if (!S_ISDIR(st.st_mode)) fail(fmt::format("{} is not a directory", dir.string()));
  // The probe: the one reliable answer to "can a file be created here" (permissions, root on a
  // read-only file system or /proc, ACLs, quotas on inodes). Created with O_EXCL under a random
  // name, so it is ours, and removed at once.
  int fd = -1;
  std::filesystem::path probe;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    probe = dir / fmt::format(".{}.tpuw-probe-{:016x}", t.final.filename().string(), random64());
    fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) fail(fmt::format("cannot create files in directory {}: {}", dir.string(), reason(errno)));
  ::close(fd);
  ::unlink(probe.c_str());
}

void check_output_dir(const std::filesystem::path& dir, std::string_view what) {
  const auto fail = [&](const std::string& why) {
    throw Error(ErrorKind::kBadFile, fmt::format("{} {}: {}", what, dir.string(), why));
  };
  if (dir.empty()) fail("the path is empty");
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      const char* k = kind_of(st.st_mode);
      fail(fmt::format("exists and is not a directory (it is {})", k != nullptr ? k : "a regular file"));
    }
    check_output_path(dir / ".tpuw-probe", what);  // a file can be created in it
    return;
  }
  if (errno != ENOENT) fail(fmt::format("cannot look at the path: {}", reason(errno)));
  struct stat lst {};
  if (::lstat(dir.c_str(), &lst) == 0) fail("is a symbolic link to nothing");
  // Missing: created later with its parents; the nearest existing ancestor must take a directory.
  std::filesystem::path anc = dir;
  do {
    anc = anc.parent_path();
    if (anc.empty()) anc = ".";
  } while (::stat(anc.c_str(), &st) != 0 && anc != "." && anc != anc.root_path());
  if (::stat(anc.c_str(), &st) != 0) fail(fmt::format("directory {}: {}", anc.string(), reason(errno)));
  if (!S_ISDIR(st.st_mode)) fail(fmt::format("{} is not a directory", anc.string()));
  std::string tmpl = (anc / ".tpuw-probe-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    fail(fmt::format("cannot create directories in {}: {}", anc.string(), reason(errno)));
  }
  (void)::rmdir(tmpl.c_str());
}

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
  const auto refuse = [&](const std::string& why) {
    throw Error(ErrorKind::kBadFile,
                target.empty() ? fmt::format("cannot write {}: {}", what_, why)
                               : fmt::format("{}: {}; {} is not written", target.string(), why, what_));
  };
  const OutputTarget t = resolve_output(target, refuse);
  final_ = t.final;
  // A new file: 0666 & ~umask, like any other tool; a replaced one keeps its mode.
  const mode_t mode = t.exists ? (t.mode & 07777) : 0666;
  const std::filesystem::path dir = dir_of(final_);
  for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {
    temp_ = dir / fmt::format(".{}.tmp-{:016x}", final_.filename().string(), random64());
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, mode);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) {
    const int err = errno;
    temp_.clear();
    bad(target_, fmt::format("cannot create {} in directory {}: {}", what_, dir.string(), reason(err)));
  }
  if (t.exists && ::fchmod(fd_, mode) != 0) fail("set the mode of", errno);
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

void AtomicFile::finish() {
  if (finished_) return;
  if (fd_ < 0) throw Error(ErrorKind::kInternal, fmt::format("{}: AtomicFile::finish after commit", target_.string()));
  if (::fsync(fd_) != 0) fail("flush", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close", errno);
  finished_ = true;
}

void AtomicFile::commit() {
  if (committed_) throw Error(ErrorKind::kInternal, fmt::format("{}: AtomicFile::commit twice", target_.string()));
  finish();
  if (::rename(temp_.c_str(), final_.c_str()) != 0) fail("rename the temporary file to", errno);
  temp_.clear();
  // Make the rename itself durable; a failure here loses nothing already visible.
  const int dfd = ::open(dir_of(final_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  committed_ = true;
}

// ---------------------------------------------------------------------------------------------
// StagedOutput
// ---------------------------------------------------------------------------------------------
StagedOutput::StagedOutput(const std::filesystem::path& target, std::string_view what)
    : target_(target), what_(what) {
  const auto refuse = [&](const std::string& why) {
    throw Error(ErrorKind::kBadFile, fmt::format("{} {}: {}", what_, target.string(), why));
  };
  final_ = resolve_output(target, refuse).final;
  const std::filesystem::path dir = dir_of(final_);
  std::string tmpl = (dir / fmt::format(".{}.tpuw-XXXXXX", final_.filename().string())).string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    refuse(fmt::format("cannot create a directory in {}: {}", dir.string(), reason(errno)));
  }
  dir_ = tmpl;
  inner_ = dir_ / final_.filename();
}

StagedOutput::~StagedOutput() {
  if (!done_) discard();
}

void StagedOutput::discard() noexcept {
  if (!dir_.empty()) remove_private_dir(dir_);
  done_ = true;
}

void StagedOutput::commit() {
  if (done_) throw Error(ErrorKind::kInternal, fmt::format("{}: StagedOutput::commit twice", target_.string()));
  const auto fail = [&](const std::string& why) {
    discard();
    throw Error(ErrorKind::kBadFile, fmt::format("{} {}: {}", what_, target_.string(), why));
  };
  struct stat st {};
  if (::lstat(inner_.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) fail("the file was not written");
  const int fd = ::open(inner_.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    fail(fmt::format("cannot flush the file: {}", reason(err)));
  }
  ::close(fd);
  // The target again, right before the rename: it must still be a regular file or nothing.
  final_ = resolve_output(target_, fail).final;
  if (::rename(inner_.c_str(), final_.c_str()) != 0) fail(fmt::format("cannot rename the file into place: {}", reason(errno)));
  discard();
}

// ---------------------------------------------------------------------------------------------
// OutputSet
// ---------------------------------------------------------------------------------------------
OutputSet::~OutputSet() = default;

void OutputSet::add(const std::filesystem::path& path, std::span<const uint8_t> bytes, std::string_view what) {
  auto f = std::make_unique<AtomicFile>(path, what);
  f->write(bytes);
  f->finish();
  files_.push_back(std::move(f));
}

void OutputSet::add(const std::filesystem::path& path, std::string_view text, std::string_view what) {
  add(path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()), what);
}

StagedOutput& OutputSet::add_staged(const std::filesystem::path& target, std::string_view what) {
  staged_.push_back(std::make_unique<StagedOutput>(target, what));
  return *staged_.back();
}

void OutputSet::commit() {
  for (auto& s : staged_) s->commit();
  for (auto& f : files_) f->commit();
  staged_.clear();
  files_.clear();
}

void write_file_atomic(const std::filesystem::path& path, std::span<const uint8_t> bytes, std::string_view what) {
  AtomicFile f(path, what);
  f.write(bytes);
  f.commit();
}

}  // namespace tpuw
