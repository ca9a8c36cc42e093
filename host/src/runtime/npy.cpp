// NumPy .npy reader and writer (format description: numpy.lib.format).
#include "tpuw/runtime/npy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <bit>
#include <cctype>
#include <algorithm>
#include <iterator>
#include <optional>
#include <utility>

#include "tpuw/checked.h"
#include "tpuw/error.h"
#include "tpuw/file_io.h"
#include "tpuw/quote.h"

static_assert(std::endian::native == std::endian::little, "the .npy code assumes a little-endian host");

namespace tpuw::npy {
namespace {

constexpr uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr size_t kQuoteHeaderBytes = 160;  // of a header echoed in an error (NumPy's are ~120 bytes)

[[noreturn]] void bad(std::string_view name, const std::string& what) {
  throw Error(ErrorKind::kBadFile, fmt::format("{}: {}", name, what));
}

// A tiny parser for the Python dict literal of the header, e.g.
//   {'descr': '<i4', 'fortran_order': False, 'shape': (3, 4), }
struct HeaderParser {
  std::string_view s;
  std::string_view name;
  size_t pos = 0;

  [[noreturn]] void fail(const std::string& what) const {
    bad(name, fmt::format("bad .npy header: {} at column {} of {}", what, pos + 1, quote(s, kQuoteHeaderBytes)));
  }
  void skip_ws() {
    while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos]))) ++pos;
  }
  bool accept(char c) {
    skip_ws();
    if (pos < s.size() && s[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!accept(c)) fail(fmt::format("expected '{}'", c));
  }
  std::string string_lit() {
    skip_ws();
    if (pos >= s.size() || (s[pos] != '\'' && s[pos] != '"')) fail("expected a quoted string");
    const char q = s[pos++];
    const size_t end = s.find(q, pos);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string out(s.substr(pos, end - pos));
    pos = end + 1;
    return out;
  }
  bool bool_lit() {
    skip_ws();
    if (s.substr(pos, 4) == "True") {
      pos += 4;
      return true;
    }
    if (s.substr(pos, 5) == "False") {
      pos += 5;
      return false;
    }
    fail("expected True or False");
  }
  uint64_t int_lit() {
    skip_ws();
    const size_t start = pos;
    uint64_t v = 0;
    while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) {
      const uint64_t d = static_cast<uint64_t>(s[pos] - '0');
      if (v > (UINT64_MAX - d) / 10) fail("shape dimension too large");
      v = v * 10 + d;
      ++pos;
    }
    if (pos == start) fail("expected a non-negative integer");
    if (pos < s.size() && (s[pos] == 'L' || s[pos] == 'l')) ++pos;  // Python 2 long suffix
    return v;
  }
  std::vector<uint64_t> shape_lit() {
    std::vector<uint64_t> shape;
    expect('(');
    if (accept(')')) return shape;
    for (;;) {
      shape.push_back(int_lit());
      if (accept(')')) return shape;
      expect(',');
      if (accept(')')) return shape;
    }
  }
};

struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<uint64_t> shape;
};

Header parse_header(std::string_view text, std::string_view name) {
  HeaderParser p{text, name};
  Header h;
  bool have_descr = false, have_order = false, have_shape = false;
  p.expect('{');
  while (!p.accept('}')) {
    const std::string key = p.string_lit();
    p.expect(':');
    if (key == "descr") {
      p.skip_ws();
      if (p.pos < text.size() && text[p.pos] == '[') {
        bad(name, "structured dtypes (a list in 'descr') are not supported; expected int8, uint8, int32, int64 or float32");
      }
      h.descr = p.string_lit();
      have_descr = true;
    } else if (key == "fortran_order") {
      h.fortran_order = p.bool_lit();
      have_order = true;
    } else if (key == "shape") {
      h.shape = p.shape_lit();
      have_shape = true;
    } else {
      p.fail(fmt::format("unknown key {}", quote(key, kQuoteMaxBytes, '\'')));
    }
    if (!p.accept(',')) {
      p.expect('}');
      break;
    }
  }
  if (!have_descr) bad(name, "bad .npy header: no 'descr' key");
  if (!have_order) bad(name, "bad .npy header: no 'fortran_order' key");
  if (!have_shape) bad(name, "bad .npy header: no 'shape' key");
  return h;
}

DType parse_descr(const std::string& d, std::string_view name) {
  if (d.size() >= 2) {
    const char order = d[0];
    const std::string_view t = std::string_view(d).substr(1);
    const bool one_byte = (t == "i1" || t == "u1");
    if (order == '>' && !one_byte) {
      bad(name, fmt::format("dtype {} is big-endian; only little-endian data is supported", quote(d, kQuoteMaxBytes, '\'')));
    }
    if (order == '<' || order == '|' || order == '=' || (order == '>' && one_byte)) {
      if (t == "i1") return DType::kInt8;
      if (t == "u1") return DType::kUint8;
      if (t == "i4") return DType::kInt32;
      if (t == "f4") return DType::kFloat32;
      if (t == "i8") return DType::kInt64;
    }
  }
  if (d == "i1" || d == "b") return DType::kInt8;
  if (d == "u1" || d == "B") return DType::kUint8;
  bad(name, fmt::format("dtype {} is not supported; expected int8, uint8, int32, int64 or float32",
                        quote(d, kQuoteMaxBytes, '\'')));
}

/// The product of the dimensions, or nullopt when it overflows (a zero dimension gives 0).
std::optional<uint64_t> try_product(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  bool overflow = false;
  for (const uint64_t d : shape) {
    if (d == 0) return 0;
    if (const auto r = try_mul(n, d)) {
      n = *r;
    } else {
      overflow = true;
    }
  }
  if (overflow) return std::nullopt;
  return n;
}

}  // namespace

std::string_view to_string(DType t) {
  switch (t) {
    case DType::kInt8: return "int8";
    case DType::kUint8: return "uint8";
    case DType::kInt32: return "int32";
    case DType::kFloat32: return "float32";
    case DType::kInt64: return "int64";
  }
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kInt8:
    case DType::kUint8: return 1;
    case DType::kInt32:
    case DType::kFloat32: return 4;
    case DType::kInt64: return 8;
  }
  return 0;
}

std::string_view descr(DType t) {
  switch (t) {
    case DType::kInt8: return "|i1";
    case DType::kUint8: return "|u1";
    case DType::kInt32: return "<i4";
    case DType::kFloat32: return "<f4";
    case DType::kInt64: return "<i8";
  }
  return "?";
}

namespace {

// The shape exactly as NumPy writes it in a header (every dimension).
std::string shape_tuple(const std::vector<uint64_t>& shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  return fmt::format("({})", fmt::join(shape, ", "));
}

}  // namespace

std::string shape_string(const std::vector<uint64_t>& shape) {
  // A file's header may hold up to kMaxHeaderBytes of dimensions: a message shows the first and
  // the last few and how many there are, never the whole 60-90 KB tuple (issue 29).
  if (shape.size() <= kShapeMessageDims) return shape_tuple(shape);
  constexpr size_t kHead = kShapeMessageDims - 2;
  const std::vector<uint64_t> head(shape.begin(), shape.begin() + kHead);
  return fmt::format("({}, ..., {}, {}) ({} dimensions)", fmt::join(head, ", "), shape[shape.size() - 2],
                     shape.back(), shape.size());
}

uint64_t Array::elements() const {
  return checked_product(std::span<const uint64_t>(shape), fmt::format("npy::Array of shape {}", shape_string(shape)));
}

Array Array::zeros(DType dtype, std::vector<uint64_t> shape) {
  Array a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  const uint64_t bytes = checked_mul(a.elements(), uint64_t{dtype_size(dtype)},
                                     fmt::format("npy::Array::zeros: bytes of shape {}", shape_string(a.shape)));
  a.data.assign(checked_size(bytes, "npy::Array::zeros"), 0);
  return a;
}

namespace {

/// What the magic, version and header of a .npy image say.
struct Layout {
  DType dtype = DType::kInt8;
  std::vector<uint64_t> shape;
  uint64_t data_off = 0;    // first data byte
  uint64_t data_bytes = 0;  // elements * dtype size
};

/// The header length field: (bytes before the header text, header text length). `bytes` holds at
/// least the first 12 bytes of the file, or all of a shorter one.
std::pair<uint64_t, uint64_t> parse_preamble(std::span<const uint8_t> bytes, std::string_view name) {
  if (bytes.size() < 8 || !std::equal(std::begin(kMagic), std::end(kMagic), bytes.begin())) {
    bad(name, "not a .npy file (missing the \\x93NUMPY magic)");
  }
  const unsigned major = bytes[6];
  const unsigned minor = bytes[7];
  size_t len_bytes = 0;
  if (major == 1) {
    len_bytes = 2;
  } else if (major == 2 || major == 3) {
    len_bytes = 4;
  } else {
    bad(name, fmt::format(".npy format version {}.{} is not supported (1.0, 2.0, 3.0)", major, minor));
  }
  if (minor != 0) {
    bad(name, fmt::format(".npy format version {}.{} is not supported (1.0, 2.0, 3.0)", major, minor));
  }
  if (bytes.size() < 8 + len_bytes) bad(name, "truncated .npy file: the header length is cut off");
  uint64_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i) header_len |= uint64_t{bytes[8 + i]} << (8 * i);
  if (header_len > kMaxHeaderBytes) {
    bad(name, fmt::format("the .npy header is {} bytes long; the limit is {} bytes", header_len, kMaxHeaderBytes));
  }
  return {8 + len_bytes, header_len};
}

/// Preamble and header; `bytes` holds at least the whole header (else a "truncated" error).
Layout parse_layout(std::span<const uint8_t> bytes, std::string_view name) {
  const auto [pre, header_len] = parse_preamble(bytes, name);
  const uint64_t data_off = pre + header_len;
  if (bytes.size() < data_off) {
    bad(name, fmt::format("truncated .npy file: header of {} bytes but only {} bytes in the file", header_len,
                          bytes.size() - pre));
  }
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + pre), header_len);
  Header h = parse_header(text, name);
  Layout l;
  l.dtype = parse_descr(h.descr, name);
  if (h.fortran_order) {
    bad(name, "fortran_order is True; only C-order arrays are supported (save np.ascontiguousarray(x))");
  }
  const auto n = try_product(h.shape);
  const auto want = n ? try_mul(*n, uint64_t{dtype_size(l.dtype)}) : std::nullopt;
  if (!want || !try_add(*want, data_off)) {
    bad(name, fmt::format("shape {} of {} is too large (its size overflows a 64-bit byte count)",
                          shape_string(h.shape), to_string(l.dtype)));
  }
  l.shape = std::move(h.shape);
  l.data_off = data_off;
  l.data_bytes = *want;
  return l;
}

/// The data section holds `have` bytes: exactly data_bytes, else "truncated" or "trailing bytes".
void check_data_size(const Layout& l, uint64_t have, std::string_view name) {
  if (have < l.data_bytes) {
    bad(name, fmt::format("truncated .npy file: shape {} of {} needs {} data bytes, the file has {}",
                          shape_string(l.shape), to_string(l.dtype), l.data_bytes, have));
  }
  if (have > l.data_bytes) {
    bad(name, fmt::format("{} unexpected bytes after the data of shape {} of {}", have - l.data_bytes,
                          shape_string(l.shape), to_string(l.dtype)));
  }
}

}  // namespace

Array parse(std::span<const uint8_t> bytes, std::string_view name) {
  Layout l = parse_layout(bytes, name);
  check_data_size(l, bytes.size() - l.data_off, name);
  Array a;
  a.dtype = l.dtype;
  a.shape = std::move(l.shape);
  a.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(l.data_off), bytes.end());
  return a;
}

Array load(const std::filesystem::path& path, uint64_t max_data_bytes) {
  const std::string name = path.string();
  InputFile f(path, "a .npy file");
  // Magic, version and header length (12 bytes at most), then the header (at most
  // kMaxHeaderBytes), then exactly the data the header announces: nothing is read or allocated
  // beyond what the header justifies, so /dev/zero or an endless pipe cannot exhaust memory.
  std::vector<uint8_t> head;
  f.read_append(head, 12);
  const auto [pre, header_len] = parse_preamble(head, name);
  if (head.size() < pre + header_len) f.read_append(head, pre + header_len - head.size());
  const Layout l = parse_layout(head, name);
  if (l.data_bytes > max_data_bytes) {
    bad(name, fmt::format("shape {} of {} needs {} data bytes, more than the limit of {} bytes",
                          shape_string(l.shape), to_string(l.dtype), l.data_bytes, max_data_bytes));
  }
  if (const auto size = f.regular_size()) check_data_size(l, *size >= l.data_off ? *size - l.data_off : 0, name);
  Array a;
  a.dtype = l.dtype;
  a.shape = l.shape;
  // Bytes of the first 12 that already belong to the data (a header shorter than 2 bytes).
  if (head.size() > l.data_off) {
    a.data.assign(head.begin() + static_cast<std::ptrdiff_t>(l.data_off), head.end());
    if (a.data.size() > l.data_bytes) check_data_size(l, a.data.size(), name);
  }
  const uint64_t got = a.data.size() + f.read_append(a.data, l.data_bytes - a.data.size());
  check_data_size(l, got, name);
  if (!f.at_end()) {
    bad(name, fmt::format("unexpected bytes after the data of shape {} of {}", shape_string(l.shape),
                          to_string(l.dtype)));
  }
  return a;
}

std::vector<uint8_t> serialize(const Array& array) {
  const auto n = try_product(array.shape);
  const auto want = n ? try_mul(*n, uint64_t{dtype_size(array.dtype)}) : std::nullopt;
  if (!want || array.data.size() != *want) {
    throw Error(ErrorKind::kInternal,
                fmt::format("npy::serialize: {} data bytes for shape {} of {}", array.data.size(),
                            shape_string(array.shape), to_string(array.dtype)));
  }
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                 descr(array.dtype), shape_tuple(array.shape));
  unsigned major = 1;
  size_t len_bytes = 2;
  auto padded = [&](size_t lb) {
    const size_t total = 8 + lb + dict.size() + 1;  // + '\n'
    return dict.size() + 1 + (64 - total % 64) % 64;
  };
  size_t header_len = padded(2);
  if (header_len > 65535) {
    major = 2;
    len_bytes = 4;
    header_len = padded(4);
  }
  std::vector<uint8_t> out(std::begin(kMagic), std::end(kMagic));
  out.reserve(8 + len_bytes + header_len + array.data.size());
  out.push_back(static_cast<uint8_t>(major));
  out.push_back(0);
  for (size_t i = 0; i < len_bytes; ++i) out.push_back(static_cast<uint8_t>(header_len >> (8 * i)));
  out.insert(out.end(), dict.begin(), dict.end());
  out.insert(out.end(), header_len - dict.size() - 1, ' ');
  out.push_back('\n');
  out.insert(out.end(), array.data.begin(), array.data.end());
  return out;
}

void save(const std::filesystem::path& path, const Array& array) {
  write_file_atomic(path, serialize(array), "the .npy file");
}

void require(const Array& array, std::string_view name, DType dtype, size_t rank) {
  if (array.dtype != dtype) {
    bad(name, fmt::format("dtype is {}, expected {}", to_string(array.dtype), to_string(dtype)));
  }
  if (array.rank() != rank) {
    bad(name, fmt::format("rank {} (shape {}), expected a rank-{} array", array.rank(),
                          shape_string(array.shape), rank));
  }
}

}  // namespace tpuw::npy
