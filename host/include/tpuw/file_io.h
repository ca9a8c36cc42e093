// Files in and out, safely: bounded reads and atomic writes.
//
// Reading: a file given by a user may be a directory, a device such as /dev/zero, a pipe that
// never ends, or simply far larger than what the reader can use. InputFile and read_file_bounded()
// never read more than a limit the caller derives from a header or documents; a directory is an
// error, not 0 bytes.
//
// Writing: AtomicFile writes to a temporary file beside the target (same directory, so the rename
// stays on one file system), checks every write, flushes the data to the disk (fsync) and closes
// it, and only then renames it over the target. A failure at any step (full disk, /dev/full,
// `ulimit -f`, an unwritable or missing directory) removes the temporary and throws; the target
// is then untouched: a previous file of that name keeps its old contents, and no truncated or
// empty file appears. A target that exists and is not a regular file (a device such as /dev/null,
// /dev/full or /dev/stdout, a pipe) is written in place, every write still checked. A symbolic
// link is followed: the file it points to is replaced, the link stays.
//
// Every error is tpuw::Error(kBadFile) whose message starts with the path, says what was being
// read or written and gives the system's reason (e.g. "c.npy: cannot write the output file: No
// space left on device").
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tpuw {

/// A file open for reading, read in pieces (for formats whose header says how much follows).
class InputFile {
 public:
  /// Opens `path`; `what` names it in messages ("the assembly source"). Throws Error(kBadFile)
  /// when it cannot be opened or is a directory.
  InputFile(const std::filesystem::path& path, std::string_view what);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  /// The size of a regular file; nullopt for a device, pipe or socket (size unknown until read).
  std::optional<uint64_t> regular_size() const { return size_; }

  /// Reads up to `n` bytes into `buf`; fewer only at the end of the file. Throws on a read error.
  size_t read(void* buf, size_t n);

  /// Appends up to `n` bytes to `out` (fewer only at the end of the file), growing `out` in steps
  /// of at most 64 MiB, so a stream that ends early never costs an allocation of the full `n`.
  /// Returns the number of bytes appended.
  uint64_t read_append(std::vector<uint8_t>& out, uint64_t n);

  /// True when no byte is left (reads at most one byte to find out).
  bool at_end();

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::string what_;
  int fd_ = -1;
  std::optional<uint64_t> size_;
};

/// The whole file, if it holds at most `max_bytes` bytes; otherwise Error(kBadFile) "PATH: WHAT is
/// larger than the limit of N bytes" (a regular file is refused from its size, before reading).
std::vector<uint8_t> read_file_bounded(const std::filesystem::path& path, uint64_t max_bytes, std::string_view what);

/// An output file that appears complete or not at all (see above).
class AtomicFile {
 public:
  /// Creates the temporary beside `target`; `what` names the file in messages ("the output
  /// file"). Throws Error(kBadFile) when the directory is missing or not writable.
  explicit AtomicFile(const std::filesystem::path& target, std::string_view what = "the output file");
  /// Without commit(): closes and removes the temporary (the target is untouched).
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Writes all of `bytes` (retrying short writes); throws on any failure.
  void write(std::span<const uint8_t> bytes);
  void write(std::string_view text);
  /// fsync, close, rename over the target; throws on any failure (and removes the temporary).
  void commit();

  const std::filesystem::path& target() const { return target_; }

 private:
  [[noreturn]] void fail(std::string_view step, int err);
  void discard() noexcept;

  std::filesystem::path target_;  // the path as given (messages)
  std::filesystem::path final_;   // where the rename goes (the target, or what its link points to)
  std::filesystem::path temp_;    // empty when writing in place
  std::string what_;
  int fd_ = -1;
  bool committed_ = false;
};

/// Writes `bytes` to `path` through an AtomicFile.
void write_file_atomic(const std::filesystem::path& path, std::span<const uint8_t> bytes,
                       std::string_view what = "the output file");

}  // namespace tpuw
