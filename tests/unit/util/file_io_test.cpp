// tpuw/file_io.h: bounded reads, and atomic writes that never leave a truncated or empty file.
#include "tpuw/file_io.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

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
  // A device is never written in place nor replaced (issue 29): /dev/full and /dev/null are refused
  // before anything is created, as bad files (CLI exit 2).
  EXPECT_NE(error_of([] { write_file_atomic("/dev/full", bytes("data")); })
                .find("/dev/full: is a character device, not a regular file"),
            std::string::npos);
  EXPECT_NE(error_of([] { write_file_atomic("/dev/null", bytes("data")); }).find("is a character device"),
            std::string::npos);
  try {
    write_file_atomic(dir_ / "no" / "c.npy", bytes("x"));
    ADD_FAILURE() << "writing into a missing directory succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadFile);
  }
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

// ---- issue 29: special files, checks before work, all-or-nothing outputs ------------------------

// Each kind of object an output path must never replace, made inside the test directory: a FIFO, a
// socket, a directory, a character device (a copy of /dev/null's node; root only), a link to the
// FIFO and a link to nothing. Name -> path.
std::vector<std::pair<std::string, fs::path>> special_files(const fs::path& dir) {
  std::vector<std::pair<std::string, fs::path>> v;
  const fs::path fifo = dir / "fifo";
  EXPECT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  v.emplace_back("a FIFO", fifo);
  const fs::path sock = dir / "sock";
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock.c_str());
  if (s >= 0 && ::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) v.emplace_back("a socket", sock);
  if (s >= 0) ::close(s);
  fs::create_directory(dir / "sub");
  v.emplace_back("a directory", dir / "sub");
  const fs::path dev = dir / "null_dev";
  if (::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) v.emplace_back("a character device", dev);
  fs::create_symlink(fifo, dir / "link");
  v.emplace_back("a symbolic link to", dir / "link");
  fs::create_symlink(dir / "nothing", dir / "dangling");
  v.emplace_back("a symbolic link to nothing", dir / "dangling");
  return v;
}

struct Snapshot {
  mode_t mode;
  ino_t ino;
  dev_t rdev;
  bool operator==(const Snapshot&) const = default;
};
Snapshot snapshot(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return {st.st_mode, st.st_ino, st.st_rdev};
}

TEST_F(FileIo, SpecialFilesAreRefusedAndLeftAsTheyWere) {
  const auto files = special_files(dir_);
  const size_t n = entries();
  for (const auto& [kind, p] : files) {
    const Snapshot before = snapshot(p);
    const std::string what = "is " + kind;
    EXPECT_NE(error_of([&] { check_output_path(p, "--out"); }).find("--out " + p.string() + ": " + what),
              std::string::npos)
        << kind;
    EXPECT_NE(error_of([&] { write_file_atomic(p, bytes("x")); }).find(p.string()), std::string::npos) << kind;
    EXPECT_NE(error_of([&] { StagedOutput s(p, "--wave"); }).find(what), std::string::npos) << kind;
    OutputSet outs;
    EXPECT_THROW(outs.add(p, std::string_view("x"), "the output"), Error) << kind;
    EXPECT_TRUE(snapshot(p) == before) << kind << " changed";
    EXPECT_EQ(entries(), n) << kind << ": something was created";
  }
}

TEST_F(FileIo, CheckOutputPathBeforeAnyWork) {
  const fs::path ok = dir_ / "out.npy";
  EXPECT_NO_THROW(check_output_path(ok, "--out"));
  put(ok, "old");
  EXPECT_NO_THROW(check_output_path(ok, "--out"));
  EXPECT_EQ(contents(ok), "old");
  fs::create_symlink(ok, dir_ / "link.npy");  // a link to a regular file is fine
  EXPECT_NO_THROW(check_output_path(dir_ / "link.npy", "--out"));
  EXPECT_EQ(entries(), 2u) << "the probe was not removed";
  // /proc exists but takes no new files, even for root; /proc/version is a regular file there.
  EXPECT_NE(error_of([] { check_output_path("/proc/version", "--out"); }).find("cannot create files in directory /proc"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_output_path(dir_ / "no" / "x.npy", "--trace"); })
                .find("--trace " + (dir_ / "no" / "x.npy").string() + ": directory " + (dir_ / "no").string() +
                      " does not exist"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_output_path(ok / "x.npy", "-o"); }).find("is not a directory"), std::string::npos);
  EXPECT_NE(error_of([] { check_output_path("", "-o"); }).find("the path is empty"), std::string::npos);
  // Directories of outputs (--checkpoint): existing, missing with an existing parent, refused.
  EXPECT_NO_THROW(check_output_dir(dir_, "--checkpoint"));
  EXPECT_NO_THROW(check_output_dir(dir_ / "a" / "b" / "c", "--checkpoint"));
  EXPECT_FALSE(fs::exists(dir_ / "a")) << "check_output_dir created the directory";
  EXPECT_NE(error_of([&] { check_output_dir(ok, "--checkpoint"); }).find("exists and is not a directory"),
            std::string::npos);
  EXPECT_NE(error_of([] { check_output_dir("/proc/tpuw_ck", "--checkpoint"); }).find("/proc/tpuw_ck"), std::string::npos);
  EXPECT_EQ(entries(), 2u);
}

TEST_F(FileIo, OutputSetIsAllOrNothing) {
  const fs::path a = dir_ / "a.npy", b = dir_ / "b.json";
  put(a, "old a");
  {
    OutputSet outs;
    outs.add(a, std::string_view("new a"), "the .npy file");
    outs.add(b, std::string_view("new b"), "the trace file");
    EXPECT_EQ(contents(a), "old a") << "renamed before commit";
    EXPECT_FALSE(fs::exists(b));
  }  // an error after both were staged: nothing appears, nothing is touched
  EXPECT_EQ(contents(a), "old a");
  EXPECT_EQ(entries(), 1u);
  // A failing add (the second target is a directory) leaves the first staged output unrenamed.
  fs::create_directory(dir_ / "d");
  {
    OutputSet outs;
    outs.add(a, std::string_view("new a"), "the .npy file");
    EXPECT_THROW(outs.add(dir_ / "d", std::string_view("x"), "the trace file"), Error);
  }
  EXPECT_EQ(contents(a), "old a");
  EXPECT_EQ(entries(), 2u);
  OutputSet outs;
  outs.add(a, std::string_view("new a"), "the .npy file");
  outs.add(b, std::string_view("new b"), "the trace file");
  outs.commit();
  EXPECT_EQ(contents(a), "new a");
  EXPECT_EQ(contents(b), "new b");
  EXPECT_EQ(entries(), 3u);
}

TEST_F(FileIo, StagedOutputKeepsALibraryInItsPrivateDirectory) {
  // A library that unlinks the name it is given and writes NAME.hier beside it (the FST writer).
  const auto library_writes = [](const fs::path& p) {
    ::unlink(p.c_str());
    put(p, "waveform");
    put(p.string() + ".hier", "side file");
  };
  const fs::path w = dir_ / "w.fst";
  put(w, "old");
  put(dir_ / "w.fst.hier", "not ours");
  {
    StagedOutput s(w, "--wave");
    EXPECT_EQ(s.path().parent_path(), s.dir());
    EXPECT_EQ(s.dir().parent_path(), dir_);
    library_writes(s.path());
    EXPECT_EQ(contents(w), "old");
  }  // not committed: the private directory and all in it are removed
  EXPECT_EQ(contents(w), "old");
  EXPECT_EQ(contents(dir_ / "w.fst.hier"), "not ours");
  EXPECT_EQ(entries(), 2u);
  StagedOutput s(w, "--wave");
  library_writes(s.path());
  s.commit();
  EXPECT_EQ(contents(w), "waveform");
  EXPECT_EQ(contents(dir_ / "w.fst.hier"), "not ours") << "a file we did not create was touched";
  EXPECT_EQ(entries(), 2u) << "the private directory was left";
  // Nothing written: an error at commit, and nothing left either.
  StagedOutput none(dir_ / "x.fst", "--wave");
  EXPECT_NE(error_of([&] { none.commit(); }).find("the file was not written"), std::string::npos);
  EXPECT_EQ(entries(), 2u);
}

}  // namespace
}  // namespace tpuw
