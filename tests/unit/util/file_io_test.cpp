// tpuw/file_io.h: bounded reads, and atomic writes that never leave a truncated or empty file.
#include "tpuw/file_io.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tpuw/error.h"

namespace tpuw {
namespace {

namespace fs = std::filesystem;

class FileIo : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tpuw_file_io_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string contents(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  static void put(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }
  /// Files in the test directory (a leftover temporary would show here).
  size_t entries() const { return static_cast<size_t>(std::distance(fs::directory_iterator(dir_), {})); }

  static std::span<const uint8_t> bytes(const std::string& s) {
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
  }

  fs::path dir_;
};

std::string error_of(auto&& f, ErrorKind want = ErrorKind::kBadFile) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), want) << e.what();
    return e.what();
  }
  return "(no error)";
}

TEST_F(FileIo, ReadBoundedRefusesWhatIsTooLargeOrNotAFile) {
  const fs::path f = dir_ / "f.bin";
  put(f, "0123456789");
  EXPECT_EQ(read_file_bounded(f, 10, "x").size(), 10u);
  EXPECT_EQ(error_of([&] { (void)read_file_bounded(f, 9, "the input"); }),
            f.string() + ": the input is larger than the limit of 9 bytes");
  EXPECT_NE(error_of([&] { (void)read_file_bounded("/dev/zero", 1000, "the input"); }).find("larger than the limit"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { (void)read_file_bounded(dir_, 1000, "the input"); }),
            dir_.string() + ": is a directory, not the input");
  EXPECT_NE(error_of([&] { (void)read_file_bounded(dir_ / "none", 1000, "the input"); })
                .find("cannot open the input: No such file or directory"),
            std::string::npos);
  EXPECT_TRUE(read_file_bounded("/dev/null", 0, "x").empty());
}

TEST_F(FileIo, AtomicWriteCreatesAndReplaces) {
  const fs::path f = dir_ / "out.npy";
  write_file_atomic(f, bytes("first"));
  EXPECT_EQ(contents(f), "first");
  ::chmod(f.c_str(), 0640);
  write_file_atomic(f, bytes("second, longer"));
  EXPECT_EQ(contents(f), "second, longer");
  EXPECT_EQ(fs::status(f).permissions() & fs::perms::all, fs::perms(0640)) << "mode of the replaced file kept";
  EXPECT_EQ(entries(), 1u) << "no temporary left behind";
  // A symbolic link stays a link; the file it points to is replaced.
  const fs::path link = dir_ / "link.npy";
  fs::create_symlink(f, link);
  write_file_atomic(link, bytes("third"));
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(contents(f), "third");
  // Zero bytes is a valid (empty) file.
  write_file_atomic(dir_ / "empty", {});
  EXPECT_EQ(fs::file_size(dir_ / "empty"), 0u);
  EXPECT_EQ(entries(), 3u);
}

TEST_F(FileIo, AtomicWriteFailuresLeaveNothingBehind) {
  // Issue 14, class 4: a failing write must be an error, never a truncated or empty file.
  // /dev/full: a device is written in place and the write fails.
  EXPECT_NE(error_of([] { write_file_atomic("/dev/full", bytes("data")); }, ErrorKind::kResource)
                .find("/dev/full: cannot write the output file: No space left on device"),
            std::string::npos);
  // A full disk is a resource error (CLI exit 1), a bad path a bad-file error (exit 2).
  try {
    write_file_atomic("/dev/full", bytes("data"));
    ADD_FAILURE() << "writing /dev/full succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResource);
  }
  try {
    write_file_atomic(dir_ / "no" / "c.npy", bytes("x"));
    ADD_FAILURE() << "writing into a missing directory succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadFile);
  }
  // /dev/null takes anything.
  EXPECT_NO_THROW(write_file_atomic("/dev/null", bytes("data")));
  // A directory that does not exist, a "directory" that is a file, an unwritable directory (even
  // for root: /proc), the target itself a directory.
  EXPECT_NE(error_of([&] { write_file_atomic(dir_ / "no" / "c.npy", bytes("x"), "the .npy file"); })
                .find("cannot create the .npy file in directory"),
            std::string::npos);
  put(dir_ / "file", "keep");
  EXPECT_NE(error_of([&] { write_file_atomic(dir_ / "file" / "c.npy", bytes("x")); }).find("Not a directory"),
            std::string::npos);
  EXPECT_NE(error_of([] { write_file_atomic("/proc/tpuw_test.npy", bytes("x")); }).find("/proc/tpuw_test.npy: cannot"),
            std::string::npos);
  EXPECT_NE(error_of([&] { write_file_atomic(dir_, bytes("x")); }).find("is a directory"), std::string::npos);
  EXPECT_EQ(contents(dir_ / "file"), "keep");
  EXPECT_EQ(entries(), 1u);
  if (::geteuid() != 0) {  // root writes into a 0500 directory anyway
    const fs::path ro = dir_ / "ro";
    fs::create_directory(ro);
    ::chmod(ro.c_str(), 0500);
    EXPECT_NE(error_of([&] { write_file_atomic(ro / "c.npy", bytes("x")); }).find("Permission denied"),
              std::string::npos);
    ::chmod(ro.c_str(), 0700);
  }
}

TEST_F(FileIo, FileSizeLimitKeepsTheOldFile) {
  // `ulimit -f`: the write fails half way (EFBIG); the existing target keeps its contents and the
  // temporary is removed. In a child process, so the limit does not reach the test runner.
  const fs::path f = dir_ / "c.npy";
  put(f, "old contents");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit lim{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    const std::string big(100000, 'x');
    try {
      write_file_atomic(f, bytes(big));
      ::_exit(1);  // must not succeed
    } catch (const Error& e) {
      ::_exit(std::string(e.what()).find("File too large") != std::string::npos ? 0 : 2);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of a signal";
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(contents(f), "old contents");
  EXPECT_EQ(entries(), 1u);
}

TEST_F(FileIo, AbandonedAtomicFileRemovesItsTemporary) {
  const fs::path f = dir_ / "c.npy";
  put(f, "old");
  {
    AtomicFile a(f);
    a.write(std::string_view("partial"));
    EXPECT_EQ(entries(), 2u);  // the target and the temporary beside it
  }  // no commit(): e.g. an exception while producing the data
  EXPECT_EQ(entries(), 1u);
  EXPECT_EQ(contents(f), "old");
  AtomicFile b(f);
  b.write(std::string_view("new"));
  b.commit();
  EXPECT_EQ(contents(f), "new");
  EXPECT_THROW(b.commit(), Error);
}

}  // namespace
}  // namespace tpuw
