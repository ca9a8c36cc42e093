// .npy reader/writer: round trips for every dtype and rank, NumPy-written files, every error case.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <thread>

#include <csignal>
#include <unistd.h>

#include "tpuw/error.h"
#include "tpuw/runtime/npy.h"

namespace tpuw::npy {
namespace {

using namespace std::string_literals;

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

// A hand-made .npy image with the given version, header text and data bytes.
std::vector<uint8_t> make_npy(unsigned major, const std::string& dict, size_t data_bytes) {
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  const std::string header = dict + "\n";
  const size_t len_bytes = major == 1 ? 2 : 4;
  for (size_t i = 0; i < len_bytes; ++i) out.push_back(static_cast<uint8_t>(header.size() >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<uint8_t>(i));
  return out;
}

// Expects parse() to throw kBadFile with a message naming the file and containing `what`.
void expect_bad(const std::vector<uint8_t>& bytes, const std::string& what) {
  try {
    parse(bytes, "x.npy");
    FAIL() << "no error; expected: " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadFile);
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("x.npy: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
}

TEST(Npy, RoundTripEveryDtypeAndRank) {
  for (DType t : {DType::kInt8, DType::kUint8, DType::kInt32, DType::kFloat32, DType::kInt64}) {
    for (const std::vector<uint64_t>& shape : std::vector<std::vector<uint64_t>>{
             {}, {0}, {7}, {3, 5}, {2, 3, 4}, {2, 1, 3, 2}}) {
      Array a = Array::zeros(t, shape);
      for (size_t i = 0; i < a.data.size(); ++i) a.data[i] = static_cast<uint8_t>(i * 37 + 11);
      const std::vector<uint8_t> img = serialize(a);
      EXPECT_EQ((img.size() - a.data.size()) % 64, 0u) << "header padded to 64 bytes";
      const Array b = parse(img, "mem");
      EXPECT_EQ(b.dtype, t);
      EXPECT_EQ(b.shape, shape);
      EXPECT_EQ(b.data, a.data);
    }
  }
}

TEST(Npy, TypedViewsAndFrom) {
  const std::vector<int32_t> v = {-5, 0, 7, 2147483647, -2147483647 - 1, 42};
  const Array a = Array::from<int32_t>({2, 3}, v);
  const Array b = parse(serialize(a), "mem");
  const auto view = b.view<int32_t>();
  ASSERT_EQ(view.size(), 6u);
  EXPECT_EQ(view[4], -2147483647 - 1);
  EXPECT_EQ(view[3], 2147483647);
  EXPECT_THROW((void)b.view<int8_t>(), Error);
  // int64: NumPy's default integer (np.save of a Python int list), used for class labels.
  const std::vector<int64_t> w = {-1, 9, int64_t{1} << 40};
  const Array c = parse(serialize(Array::from<int64_t>({3}, w)), "mem");
  EXPECT_EQ(c.dtype, DType::kInt64);
  EXPECT_EQ(c.view<int64_t>()[2], int64_t{1} << 40);
  EXPECT_EQ(descr(DType::kInt64), "<i8");
}

TEST(Npy, FileRoundTripAndHeaderText) {
  const auto path = std::filesystem::temp_directory_path() / "tpuw_npy_test.npy";
  const std::vector<int8_t> v = {-128, 127, 0, 1, -1, 5};
  save(path, Array::from<int8_t>({3, 2}, v));
  const Array b = load(path);
  EXPECT_EQ(b.dtype, DType::kInt8);
  EXPECT_EQ(b.shape, (std::vector<uint64_t>{3, 2}));
  EXPECT_EQ(b.view<int8_t>()[0], -128);
  std::ifstream in(path, std::ios::binary);
  std::string head(128, '\0');
  in.read(head.data(), 128);
  EXPECT_NE(head.find("{'descr': '|i1', 'fortran_order': False, 'shape': (3, 2), }"), std::string::npos);
  std::filesystem::remove(path);
}

TEST(Npy, ReadsVersions2And3AndPythonSpellings) {
  const Array v2 = parse(make_npy(2, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", 8), "v2");
  EXPECT_EQ(v2.dtype, DType::kInt32);
  EXPECT_EQ(v2.shape, (std::vector<uint64_t>{2}));
  EXPECT_EQ(v2.view<int32_t>()[1], 0x07060504);
  const Array v3 = parse(make_npy(3, "{\"shape\": (1, 3), \"fortran_order\": False, \"descr\": \"<f4\"}", 12), "v3");
  EXPECT_EQ(v3.dtype, DType::kFloat32);
  EXPECT_EQ(v3.shape, (std::vector<uint64_t>{1, 3}));
  const Array u8 = parse(make_npy(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (4L,)}", 4), "u8");
  EXPECT_EQ(u8.dtype, DType::kUint8);
  const Array scalar = parse(make_npy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': ()}", 4), "s");
  EXPECT_EQ(scalar.rank(), 0u);
  EXPECT_EQ(scalar.elements(), 1u);
}

TEST(Npy, ReadsFilesWrittenByNumPy) {
  // examples/gemm was written by np.save (scripts: examples/gemm/make_example.py).
  const Array a = load(std::filesystem::path(TPUW_EXAMPLES_DIR) / "gemm" / "a.npy");
  EXPECT_EQ(a.dtype, DType::kInt8);
  ASSERT_EQ(a.rank(), 2u);
  EXPECT_EQ(a.data.size(), a.shape[0] * a.shape[1]);
  const Array c = load(std::filesystem::path(TPUW_EXAMPLES_DIR) / "gemm" / "c_expected.npy");
  EXPECT_EQ(c.dtype, DType::kInt32);
}

TEST(Npy, NotNpy) {
  expect_bad(bytes_of("hello world, not numpy"), "not a .npy file");
  expect_bad({}, "not a .npy file");
  expect_bad(bytes_of("\x93NUMP"), "not a .npy file");
}

TEST(Npy, UnsupportedVersion) {
  expect_bad(make_npy(4, "{'descr': '<i4', 'fortran_order': False, 'shape': (1,)}", 4), "version 4.0");
  auto img = make_npy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (1,)}", 4);
  img[7] = 1;
  expect_bad(img, "version 1.1");
}

TEST(Npy, Truncated) {
  auto img = make_npy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,)}", 12);
  expect_bad({img.begin(), img.begin() + 9}, "truncated");          // header length cut
  expect_bad({img.begin(), img.begin() + 20}, "truncated");         // header cut
  expect_bad({img.begin(), img.end() - 1}, "truncated .npy file: shape (3,) of int32 needs 12 data bytes, the file has 11");
}

TEST(Npy, TrailingBytes) {
  expect_bad(make_npy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,)}", 13), "1 unexpected bytes");
}

TEST(Npy, BadHeader) {
  expect_bad(make_npy(1, "garbage", 0), "bad .npy header");
  expect_bad(make_npy(1, "{'descr': '<i4', 'fortran_order': False}", 0), "no 'shape' key");
  expect_bad(make_npy(1, "{'descr': '<i4', 'shape': (1,)}", 4), "no 'fortran_order' key");
  expect_bad(make_npy(1, "{'fortran_order': False, 'shape': (1,)}", 4), "no 'descr' key");
  expect_bad(make_npy(1, "{'descr': '<i4', 'fortran_order': Maybe, 'shape': (1,)}", 4), "expected True or False");
  expect_bad(make_npy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (1, x)}", 4), "bad .npy header");
  expect_bad(make_npy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (1,), 'extra': 1}", 4), "unknown key");
}

TEST(Npy, ShapesWhoseSizeOverflowsAreRefused) {
  // 2^32 * 2^32 elements: the product overflows 64 bits (it wrapped to 0 before and "matched" an
  // empty data section).
  expect_bad(make_npy(1, "{'descr': '|i1', 'fortran_order': False, 'shape': (4294967296, 4294967296)}", 0),
             "is too large");
  // The element count fits but the byte count (x4) does not.
  expect_bad(make_npy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (4611686018427387904,)}", 0),
             "shape (4611686018427387904,) of int32 is too large");
  // Many moderate dimensions whose product overflows.
  expect_bad(make_npy(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (65536, 65536, 65536, 65536, 2)}", 0),
             "is too large");
  // A zero dimension makes any shape empty, however large the others are.
  const Array empty = parse(
      make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (18446744073709551615, 0)}", 0), "e");
  EXPECT_EQ(empty.elements(), 0u);
  // A dimension above 2^64 - 1 is refused by the header parser.
  expect_bad(make_npy(1, "{'descr': '|i1', 'fortran_order': False, 'shape': (18446744073709551616,)}", 0),
             "shape dimension too large");
  // In-memory arrays: elements() and zeros() check the product too.
  Array a;
  a.shape = {uint64_t{1} << 32, uint64_t{1} << 32};
  EXPECT_THROW((void)a.elements(), Error);
  EXPECT_THROW((void)Array::zeros(DType::kInt32, {uint64_t{1} << 62}), Error);
}

std::string fmt_bytes(size_t n) { return "\"... (" + std::to_string(n) + " bytes)"; }

TEST(Npy, UntrustedHeaderTextIsQuotedAndShortened) {
  // Issue 14, class 10: a 90 KB header was echoed whole, and binary bytes and NULs raw.
  const std::string big = "{'descr': '<i4', 'fortran_order': False, 'shape': (1, x" + std::string(90000, 'y') + ")}";
  try {
    (void)parse(make_npy(2, big, 4), "x.npy");
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_LT(msg.size(), 400u) << msg.substr(0, 400);
    EXPECT_NE(msg.find(fmt_bytes(big.size() + 1)), std::string::npos) << msg;  // + the '\n'
    EXPECT_EQ(msg.find(std::string(200, 'y')), std::string::npos);
  }
  // A NUL and escape sequences in a dtype and in a key.
  expect_bad(make_npy(1, "{'descr': '<\0\x1b[2J', 'fortran_order': False, 'shape': (1,)}"s, 4),
             "dtype '<\\x00\\x1b[2J' is not supported");
  const std::string with_nul = "{'descr': '<i4', 'fortran_order': False, 'shape': (1,), 'k\0ey': 1}"s;
  expect_bad(make_npy(1, with_nul, 4), "unknown key 'k\\x00ey'");
  // Non-UTF-8 bytes in the header text.
  expect_bad(make_npy(1, "{'descr': '\xff\xfe', 'fortran_order': False, 'shape': (1,)}", 4),
             "dtype '\\xff\\xfe' is not supported");
}

TEST(Npy, LongShapesAreShortenedInMessagesNotInFiles) {
  // Issue 29: a .npy with 20,000 dimensions echoed its whole 60-90 KB shape in the error.
  std::string dims;
  for (int i = 0; i < 20000; ++i) dims += "1, ";
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "5), }";
  try {
    (void)parse(make_npy(2, dict, 4), "x.npy");  // 5 elements need 20 bytes
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_LT(msg.size(), 300u) << msg.substr(0, 300);
    EXPECT_NE(msg.find("(1, 1, 1, 1, 1, 1, 1, 1, ..., 1, 5) (20001 dimensions)"), std::string::npos) << msg;
  }
  EXPECT_EQ(shape_string({2, 3}), "(2, 3)");
  EXPECT_EQ(shape_string({7}), "(7,)");
  EXPECT_EQ(shape_string(std::vector<uint64_t>(kShapeMessageDims, 2)), "(2, 2, 2, 2, 2, 2, 2, 2, 2, 2)");
  EXPECT_EQ(shape_string(std::vector<uint64_t>(kShapeMessageDims + 1, 2)),
            "(2, 2, 2, 2, 2, 2, 2, 2, ..., 2, 2) (11 dimensions)");
  // The file itself keeps every dimension.
  const Array a = Array::zeros(DType::kInt8, std::vector<uint64_t>(30, 1));
  EXPECT_EQ(parse(serialize(a), "y.npy").shape.size(), 30u);
}

TEST(Npy, UnsupportedDtypeAndOrder) {
  expect_bad(make_npy(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1,)}", 8), "dtype '<f8' is not supported");
  expect_bad(make_npy(1, "{'descr': '<i2', 'fortran_order': False, 'shape': (1,)}", 2), "dtype '<i2' is not supported");
  expect_bad(make_npy(1, "{'descr': '>i4', 'fortran_order': False, 'shape': (1,)}", 4), "big-endian");
  expect_bad(make_npy(1, "{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (1,)}", 4), "structured");
  expect_bad(make_npy(1, "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 2)}", 16), "fortran_order is True");
}

TEST(Npy, RequireDtypeAndRank) {
  const Array a = Array::zeros(DType::kInt32, {2, 3, 4});
  try {
    require(a, "a.npy", DType::kInt8, 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadFile);
    EXPECT_STREQ(e.what(), "a.npy: dtype is int32, expected int8");
  }
  try {
    require(a, "a.npy", DType::kInt32, 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "a.npy: rank 3 (shape (2, 3, 4)), expected a rank-2 array");
  }
  EXPECT_NO_THROW(require(a, "a.npy", DType::kInt32, 3));
}

// Expects load() to throw kBadFile with a message containing `what`.
void expect_load_bad(const std::filesystem::path& p, const std::string& what, uint64_t max = kMaxDataBytes) {
  try {
    (void)load(p, max);
    FAIL() << "no error; expected: " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadFile);
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

std::filesystem::path write_temp(const std::string& name, const std::vector<uint8_t>& bytes) {
  const auto p = std::filesystem::temp_directory_path() / name;
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                           static_cast<std::streamsize>(bytes.size()));
  return p;
}

TEST(Npy, BoundedReads) {
  // Issue 14, class 3: /dev/zero as .npy was read until memory ran out.
  expect_load_bad("/dev/zero", "/dev/zero: not a .npy file");
  // A directory is an error, not an empty file.
  expect_load_bad(std::filesystem::temp_directory_path(), "is a directory");
  // A header length far beyond the limit: refused before the header is read.
  auto img = make_npy(2, "{'descr': '|i1', 'fortran_order': False, 'shape': (1,)}", 1);
  img[8] = img[9] = img[10] = img[11] = 0xff;
  expect_bad(img, "the .npy header is 4294967295 bytes long; the limit is 1048576 bytes");
  expect_load_bad(write_temp("tpuw_npy_hdr.npy", img), "the limit is 1048576 bytes");
  // A small file whose header announces 1 TiB: refused from the file's size, nothing allocated.
  const auto huge = write_temp(
      "tpuw_npy_huge.npy", make_npy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (65536, 4194304)}", 16));
  expect_load_bad(huge, "more than the limit of 4294967296 bytes");
  expect_load_bad(huge, "needs 1099511627776 data bytes, the file has 16", uint64_t{1} << 41);
  // A caller's own limit.
  const auto ok = write_temp("tpuw_npy_ok.npy", make_npy(1, "{'descr': '|i1', 'fortran_order': False, 'shape': (100,)}", 100));
  expect_load_bad(ok, "needs 100 data bytes, more than the limit of 99 bytes", 99);
  EXPECT_EQ(load(ok, 100).data.size(), 100u);
  // Trailing bytes in a regular file are counted from its size.
  expect_load_bad(write_temp("tpuw_npy_trail.npy",
                             make_npy(1, "{'descr': '|i1', 'fortran_order': False, 'shape': (4,)}", 9)),
                  "5 unexpected bytes");
  for (const char* f : {"tpuw_npy_hdr.npy", "tpuw_npy_huge.npy", "tpuw_npy_ok.npy", "tpuw_npy_trail.npy"}) {
    std::filesystem::remove(std::filesystem::temp_directory_path() / f);
  }
}

TEST(Npy, StreamsAreReadOnlyAsFarAsTheHeaderSays) {
  // A pipe (size unknown): a valid header, its data, then more bytes than it announced.
  std::signal(SIGPIPE, SIG_IGN);  // the reader stops early; the writer must not die of it
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::vector<uint8_t> img = make_npy(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 2)}", 6);
  img.resize(img.size() + 1000, 7);
  std::thread writer([&] {
    size_t off = 0;
    while (off < img.size()) {
      const ssize_t w = ::write(fds[1], img.data() + off, img.size() - off);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
    ::close(fds[1]);
  });
  expect_load_bad("/proc/self/fd/" + std::to_string(fds[0]), "unexpected bytes after the data of shape (3, 2)");
  ::close(fds[0]);  // the writer may still block on a full pipe: closing the read end ends it
  writer.join();
  // The same without the extra bytes loads.
  ASSERT_EQ(::pipe(fds), 0);
  const std::vector<uint8_t> exact = make_npy(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 2)}", 6);
  std::thread writer2([&] {
    (void)::write(fds[1], exact.data(), exact.size());
    ::close(fds[1]);
  });
  const Array a = load("/proc/self/fd/" + std::to_string(fds[0]));
  writer2.join();
  ::close(fds[0]);
  EXPECT_EQ(a.shape, (std::vector<uint64_t>{3, 2}));
  EXPECT_EQ(a.data, (std::vector<uint8_t>{0, 1, 2, 3, 4, 5}));
}

TEST(Npy, MissingFileNamesIt) {
  try {
    (void)load("/nonexistent/dir/m.npy");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadFile);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/m.npy: cannot open"), std::string::npos);
  }
}

}  // namespace
}  // namespace tpuw::npy
