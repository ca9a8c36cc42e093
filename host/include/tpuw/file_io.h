// Files in and out, safely: bounded reads and atomic writes.
//
// Reading: a file given by a user may be a directory, a device such as /dev/zero, a pipe that
// never ends, or simply far larger than what the reader can use. InputFile and read_file_bounded()
// never read more than a limit the caller derives from a header or documents; a directory is an
// error, not 0 bytes.
//
// Writing: AtomicFile writes to a temporary file beside the target (same directory, so the rename
// stays on one file system), checks every write, flushes the data to the disk (fsync) and closes
// it, and only then renames it over the target. A failure at any step (full disk, `ulimit -f`, an
// unwritable or missing directory) removes the temporary and throws; the target is then
// untouched: a previous file of that name keeps its old contents, and no truncated or empty file
// appears. A target that exists and is not a regular file (a directory, a device such as
// /dev/null or /dev/full, a FIFO, a socket) is refused before anything is created: replacing it
// would destroy it (a device node of the whole machine, for root), and writing into it in place
// can neither be made atomic nor undone. A symbolic link to a regular file is followed (the file
// it points to is replaced, the link stays); a link to anything else, or to nothing, is refused.
//
// Before any work: check_output_path() says whether a path can be written that way at all (the
// same rules, plus a probe file created and removed in the directory, so /proc, a read-only file
// system or a directory without write permission is refused up front, not after an hour of
// work), check_output_dir() the same for a directory of outputs (a checkpoint).
//
// Several outputs of one command: OutputSet stages each one as a complete, fsynced temporary and
// renames them all only in commit(); destroyed without commit (an error, a failed check), it
// removes every temporary and touches no target. StagedOutput is the same for a file that a
// library writes by name (the FST waveform writer): the library writes into a private directory
// of ours beside the target, and only commit() moves the finished file into place.
//
// Every error is tpuw::Error(kBadFile) whose message starts with the path, says what was being
// read or written and gives the system's reason (e.g. "c.npy: cannot write the output file: No
// space left on device").
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
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

/// Throws Error(kBadFile) "WHAT PATH: REASON" unless `path` can be written as an output file: not
/// empty; not an existing directory, device, FIFO or socket, nor a symbolic link to one or to
/// nothing; its directory exists and a file can be created in it (probed: a temporary is created
/// and removed). `what` names the path in the message (an option such as "--out"). Nothing that
/// exists is changed.
void check_output_path(const std::filesystem::path& path, std::string_view what);

/// The same for a directory that will hold outputs (created with its parents if missing): an
/// existing `dir` must be a directory (or a link to one) in which a file can be created; a missing
/// one needs its nearest existing ancestor to be a directory in which one can be created (probed
/// with a temporary directory, removed again).
void check_output_dir(const std::filesystem::path& dir, std::string_view what);

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
  /// fsync and close the temporary (everything but the rename); throws on any failure (and
  /// removes the temporary). Idempotent; commit() calls it when it was not called.
  void finish();
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
  bool finished_ = false;
  bool committed_ = false;
};

/// A file that a library writes by name (e.g. Verilator's FST writer, which unlinks the name it is
/// given and creates a side file NAME.hier) made an atomic output: path() names a file inside a
/// private directory that this object creates beside the target (".NAME.tpuw-XXXXXX", mode 0700),
/// so whatever the library unlinks or creates stays inside it. commit() moves the finished file
/// onto the target (the rules of AtomicFile: a regular file or nothing is replaced, anything else
/// refused) and removes the directory; without commit the directory and everything in it are
/// removed. Nothing outside the private directory is created or removed except the target on
/// commit.
class StagedOutput {
 public:
  StagedOutput(const std::filesystem::path& target, std::string_view what);
  ~StagedOutput();
  StagedOutput(const StagedOutput&) = delete;
  StagedOutput& operator=(const StagedOutput&) = delete;

  /// Where the library writes (inside the private directory).
  const std::filesystem::path& path() const { return inner_; }
  /// The private directory.
  const std::filesystem::path& dir() const { return dir_; }
  const std::filesystem::path& target() const { return target_; }
  /// fsyncs path() and renames it over the target; throws Error(kBadFile) when the library wrote
  /// no regular file there, or on a failing fsync or rename. The private directory is removed.
  void commit();

 private:
  void discard() noexcept;

  std::filesystem::path target_, final_, dir_, inner_;
  std::string what_;
  bool done_ = false;
};

/// The outputs of one command, all or nothing (see above). add() writes a complete temporary at
/// once (so a full disk or `ulimit -f` fails there, before anything is renamed); commit() renames
/// them all in the order they were added.
class OutputSet {
 public:
  OutputSet() = default;
  ~OutputSet();
  OutputSet(const OutputSet&) = delete;
  OutputSet& operator=(const OutputSet&) = delete;

  void add(const std::filesystem::path& path, std::span<const uint8_t> bytes, std::string_view what);
  void add(const std::filesystem::path& path, std::string_view text, std::string_view what);
  /// A file written by a library by name (StagedOutput); owned and committed with the others.
  StagedOutput& add_staged(const std::filesystem::path& target, std::string_view what);
  /// Renames every staged output into place; throws on the first failure.
  void commit();
  bool empty() const { return files_.empty() && staged_.empty(); }

 private:
  std::vector<std::unique_ptr<AtomicFile>> files_;
  std::vector<std::unique_ptr<StagedOutput>> staged_;
};

/// Writes `bytes` to `path` through an AtomicFile.
void write_file_atomic(const std::filesystem::path& path, std::span<const uint8_t> bytes,
                       std::string_view what = "the output file");

}  // namespace tpuw
