// Assembler: the syntax of firmware/README.md to encoded instructions plus directives.
//
// A statement is one source line (a line ending in '\' continues on the next). Tokens are runs
// of characters other than blanks, ',', '=' and ';' (which starts a comment), the '=' sign, and
// double-quoted strings. Instruction operands come from spec::kInstrs, so the parser has no
// per-instruction code.
#include <charconv>
#include <algorithm>
#include <limits>
#include <system_error>

#include <fmt/format.h>

#include "syntax.h"
#include "tpuw/asm.h"
#include "tpuw/error.h"
#include "tpuw/file_io.h"
#include "tpuw/numerics.h"
#include "tpuw/quote.h"

namespace tpuw::isa {

namespace {

struct Token {
  std::string text;
  unsigned line = 0;
  unsigned col = 0;
  bool quoted = false;
  bool is_eq() const { return !quoted && text == "="; }
};

std::string lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return r;
}

/// A token of the source in a message: single-quoted, escaped, shortened (tpuw/quote.h).
std::string q(std::string_view token) { return quote(token, kQuoteMaxBytes, '\''); }

/// A token that parsed as a number (digits, x, b, sign only) in a message: shortened, unquoted.
std::string num(std::string_view token) {
  return token.size() <= kQuoteMaxBytes ? std::string(token) : std::string(token.substr(0, kQuoteMaxBytes)) + "...";
}

std::string upper(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  return r;
}

class Assembler {
 public:
  Assembler(std::string_view source, std::string_view filename) : src_(source), file_(filename) {}

  Program run() {
    prog_.filename = file_;
    std::vector<Token> stmt;
    unsigned line_no = 0;
    size_t pos = 0;
    while (pos <= src_.size()) {
      size_t end = src_.find('\n', pos);
      if (end == std::string_view::npos) end = src_.size();
      std::string_view line = src_.substr(pos, end - pos);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      ++line_no;
      const bool cont = lex_line(line, line_no, stmt);
      if (!cont) {
        if (!stmt.empty()) statement(stmt);
        stmt.clear();
      }
      if (end == src_.size()) break;
      pos = end + 1;
    }
    if (!stmt.empty()) statement(stmt);
    return std::move(prog_);
  }

 private:
  [[noreturn]] void fail(unsigned line, unsigned col, const std::string& msg) const {
    throw Error(ErrorKind::kAsmSyntax, fmt::format("{}:{}:{}: {}", file_, line, col, msg));
  }
  [[noreturn]] void fail(const Token& t, const std::string& msg) const { fail(t.line, t.col, msg); }

  /// Appends the tokens of one physical line; returns true when the line ends in '\'.
  bool lex_line(std::string_view line, unsigned line_no, std::vector<Token>& out) const {
    size_t i = 0;
    bool cont = false;
    auto col = [&](size_t k) { return static_cast<unsigned>(k + 1); };
    while (i < line.size()) {
      const char c = line[i];
      if (c == ' ' || c == '\t' || c == ',') {
        ++i;
      } else if (c == ';') {
        break;
      } else if (c == '=') {
        out.push_back({"=", line_no, col(i), false});
        ++i;
      } else if (c == '"') {
        const size_t close = line.find('"', i + 1);
        if (close == std::string_view::npos) fail(line_no, col(i), "unterminated string (expected a closing '\"')");
        out.push_back({std::string(line.substr(i + 1, close - i - 1)), line_no, col(i), true});
        i = close + 1;
      } else if (c == '\\') {
        size_t k = i + 1;
        while (k < line.size() && (line[k] == ' ' || line[k] == '\t')) ++k;
        if (k < line.size() && line[k] != ';') {
          fail(line_no, col(i), "'\\' continues a statement on the next line and must end the line");
        }
        cont = true;
        break;
      } else {
        size_t k = i;
        while (k < line.size() && line[k] != ' ' && line[k] != '\t' && line[k] != ',' && line[k] != '=' &&
               line[k] != ';' && line[k] != '"') {
          ++k;
        }
        out.push_back({std::string(line.substr(i, k - i)), line_no, col(i), false});
        i = k;
      }
    }
    return cont;
  }

  /// Parses a signed integer: decimal, 0x hex or 0b binary, with an optional '-'.
  bool parse_int(const std::string& s, int64_t& out) const {
    std::string_view v = s;
    bool neg = false;
    if (!v.empty() && (v[0] == '-' || v[0] == '+')) {
      neg = v[0] == '-';
      v.remove_prefix(1);
    }
    int base = 10;
    if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) {
      base = 16;
      v.remove_prefix(2);
    } else if (v.size() > 2 && v[0] == '0' && (v[1] == 'b' || v[1] == 'B')) {
      base = 2;
      v.remove_prefix(2);
    }
    if (v.empty()) return false;
    uint64_t mag = 0;
    const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), mag, base);
    if (ec != std::errc{} || p != v.data() + v.size()) return false;
    if (mag > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    out = neg ? -static_cast<int64_t>(mag) : static_cast<int64_t>(mag);
    return true;
  }

  int64_t number(const Token& t, std::string_view what) const {
    int64_t v = 0;
    if (t.quoted || !parse_int(t.text, v)) {
      fail(t, fmt::format("expected {} (a decimal, 0x hex or 0b binary number), got {}", what, q(t.text)));
    }
    return v;
  }

  uint64_t unsigned_number(const Token& t, std::string_view what, uint64_t max) const {
    const int64_t v = number(t, what);
    if (v < 0 || static_cast<uint64_t>(v) > max) {
      fail(t, fmt::format("{} = {} is out of range (0..{:#x})", what, num(t.text), max));
    }
    return static_cast<uint64_t>(v);
  }

  // -------------------------------------------------------------------------------------------
  void statement(const std::vector<Token>& toks) {
    const Token& head = toks[0];
    if (!head.quoted && head.text.starts_with(".")) {
      directive(toks);
    } else {
      instruction(toks);
    }
  }

  static std::string mnemonic_list() {
    std::string s;
    for (const auto& i : spec::kInstrs) s += (s.empty() ? "" : ", ") + lower(i.name);
    return s;
  }

  static std::string field_list(const spec::InstrInfo& inf) {
    std::string s;
    for (unsigned i = 0; i < inf.num_fields; ++i) s += (s.empty() ? "" : ", ") + std::string(inf.fields[i].name);
    for (const auto& f : detail::kFlags) s += (s.empty() ? "" : ", ") + std::string(f.name);
    return s;
  }

  void instruction(const std::vector<Token>& toks) {
    const Token& m = toks[0];
    const std::string name = upper(m.text);
    const spec::InstrInfo* inf = nullptr;
    for (const auto& i : spec::kInstrs) {
      if (i.name == name) inf = &i;
    }
    if (inf == nullptr || m.quoted) {
      fail(m, fmt::format("unknown mnemonic {} (expected one of: {}; or a directive such as .data)", q(m.text),
                          mnemonic_list()));
    }
    Instr in;
    in.opcode = static_cast<uint8_t>(inf->opcode);
    std::vector<bool> seen(inf->num_fields + detail::kFlags.size(), false);

    size_t i = 1;
    while (i < toks.size()) {
      const Token& ft = toks[i];
      if (ft.is_eq()) fail(ft, "expected a field name before '='");
      const std::string fname = lower(ft.text);
      // Which field: an instruction field (index < num_fields) or a header flag.
      int idx = -1;
      spec::Field field{};
      for (unsigned k = 0; k < inf->num_fields; ++k) {
        if (inf->fields[k].name == fname) {
          idx = static_cast<int>(k);
          field = inf->fields[k];
        }
      }
      for (size_t k = 0; k < detail::kFlags.size() && idx < 0; ++k) {
        if (detail::kFlags[k].name == fname) {
          idx = static_cast<int>(inf->num_fields + k);
          field = detail::kFlags[k];
        }
      }
      if (idx < 0 || ft.quoted) {
        fail(ft, fmt::format("unknown field {} for {} (expected one of: {})", q(ft.text), lower(inf->name),
                             field_list(*inf)));
      }
      if (seen[static_cast<size_t>(idx)]) fail(ft, fmt::format("field '{}' given twice", fname));
      seen[static_cast<size_t>(idx)] = true;

      uint64_t value = 1;  // a bare 1-bit field name means 1
      if (i + 1 < toks.size() && toks[i + 1].is_eq()) {
        if (i + 2 >= toks.size()) fail(toks[i + 1], fmt::format("expected a value after '{}='", fname));
        const Token& vt = toks[i + 2];
        value = field_value(*inf, field, vt);
        i += 3;
      } else {
        if (field.width != 1) {
          fail(ft, fmt::format("expected '=' and a value after '{}' ({} bits)", fname, field.width));
        }
        i += 1;
      }
      if (static_cast<unsigned>(idx) < inf->num_fields) {
        in.fields[static_cast<size_t>(idx)] = value;
      } else {
        const size_t k = static_cast<size_t>(idx) - inf->num_fields;
        bool* flags[4] = {&in.pop_prev, &in.pop_next, &in.push_prev, &in.push_next};
        *flags[k] = value != 0;
      }
    }
    for (unsigned k = 0; k < inf->num_fields; ++k) {
      if (!seen[k] && inf->fields[k].width > 1) {
        fail(m, fmt::format("missing required field '{}' for {} ({})", inf->fields[k].name, lower(inf->name),
                            inf->fields[k].doc));
      }
    }
    const Word w = encode(in);
    prog_.code.insert(prog_.code.end(), w.begin(), w.end());
    prog_.lines.push_back(m.line);
  }

  uint64_t field_value(const spec::InstrInfo& inf, const spec::Field& f, const Token& vt) const {
    if (vt.is_eq()) fail(vt, fmt::format("expected a value for '{}', got '='", f.name));
    const uint64_t max = f.width >= 64 ? ~uint64_t{0} : (uint64_t{1} << f.width) - 1;
    if (detail::is_mem_field(f.name) && !vt.text.empty() && !(vt.text[0] >= '0' && vt.text[0] <= '9')) {
      const std::string u = upper(vt.text);
      for (const auto mem : detail::kMems) {
        if (spec::to_string(mem) == u) return static_cast<uint64_t>(mem);
      }
      fail(vt, fmt::format("unknown memory {} for {} {} (expected UB, WB or ACC)", q(vt.text), lower(inf.name),
                           f.name));
    }
    if (detail::is_vecop_field(inf, f.name) && !vt.quoted && !vt.text.empty() &&
        !(vt.text[0] >= '0' && vt.text[0] <= '9')) {
      const std::string u = upper(vt.text);
      std::string names;
      for (const auto op : detail::kVecOps) {
        if (spec::to_string(op) == u) return static_cast<uint64_t>(op);
        names += (names.empty() ? "" : ", ") + std::string(spec::to_string(op));
      }
      fail(vt, fmt::format("unknown vector op {} for {} {} (expected one of: {}; or a number)", q(vt.text),
                           lower(inf.name), f.name, names));
    }
    if (detail::is_f32_field(inf, f.name)) return f32_value(inf, f, vt);
    int64_t v = 0;
    if (vt.quoted || !parse_int(vt.text, v)) {
      fail(vt, fmt::format("expected a number for {} (decimal, 0x hex or 0b binary), got {}", f.name, q(vt.text)));
    }
    if (v < 0 || static_cast<uint64_t>(v) > max) {
      fail(vt, fmt::format("value {} out of range for {} {} ({} bits: 0..{:#x})", num(vt.text), lower(inf.name), f.name,
                           f.width, max));
    }
    return static_cast<uint64_t>(v);
  }

  /// An fp32 field: 0x / 0b bits, or a float literal rounded to fp32 (nearest even).
  uint64_t f32_value(const spec::InstrInfo& inf, const spec::Field& f, const Token& vt) const {
    const std::string usage = "a float such as 0.5, -1e-3, inf or nan, or fp32 bits in 0x hex";
    if (vt.quoted) fail(vt, fmt::format("expected {} for {} {}, got {}", usage, lower(inf.name), f.name, q(vt.text)));
    std::string_view t = vt.text;
    const bool bits = t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X' || t[1] == 'b' || t[1] == 'B');
    if (bits) {
      int64_t v = 0;
      if (!parse_int(vt.text, v)) fail(vt, fmt::format("expected {} for {} {}, got {}", usage, lower(inf.name), f.name, q(vt.text)));
      if (v < 0 || v > 0xFFFFFFFFll) {
        fail(vt, fmt::format("value {} out of range for {} {} (32 bits: 0..0xffffffff)", num(vt.text), lower(inf.name),
                             f.name));
      }
      return static_cast<uint64_t>(v);
    }
    bool neg = false;
    if (!t.empty() && (t[0] == '+' || t[0] == '-')) {
      neg = t[0] == '-';
      t.remove_prefix(1);
    }
    const std::string l = lower(t);
    if (l == "nan") return neg ? 0xFFC00000u : num::kF32Nan;
    float value = 0;
    const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), value, std::chars_format::general);
    if (t.empty() || ec == std::errc::invalid_argument || p != t.data() + t.size()) {
      fail(vt, fmt::format("expected {} for {} {}, got {}", usage, lower(inf.name), f.name, q(vt.text)));
    }
    if (ec == std::errc::result_out_of_range) {
      fail(vt, fmt::format("{} is out of the fp32 range for {} {} (|x| <= 3.4e38 and normal; write other values "
                           "as bits in 0x hex)",
                           num(vt.text), lower(inf.name), f.name));
    }
    const uint32_t b = num::to_bits(value);
    return neg ? (b ^ num::kF32SignBit) : b;
  }

  // -------------------------------------------------------------------------------------------
  void expect_args(const std::vector<Token>& toks, size_t min, size_t max, std::string_view usage) const {
    for (size_t i = 1; i < toks.size(); ++i) {
      if (toks[i].is_eq()) fail(toks[i], fmt::format("unexpected '=' (usage: {})", usage));
    }
    const size_t n = toks.size() - 1;
    if (n < min) {
      const Token& last = toks.back();
      fail(last.line, last.col + static_cast<unsigned>(last.text.size()),
           fmt::format("{} expects {}{} arguments, got {} (usage: {})", toks[0].text, min == max ? "" : "at least ",
                       min, n, usage));
    }
    if (n > max) fail(toks[max + 1], fmt::format("too many arguments to {} (usage: {})", toks[0].text, usage));
  }

  ElemType elem_type(const Token& t) const {
    const std::string s = lower(t.text);
    for (const auto e : {ElemType::kInt8, ElemType::kUint8, ElemType::kInt32, ElemType::kUint32, ElemType::kHex8}) {
      if (to_string(e) == s) return e;
    }
    fail(t, fmt::format("unknown element type {} (expected int8, uint8, int32, uint32 or hex8)", q(t.text)));
  }

  void push_value(std::vector<uint8_t>& out, const Token& t, ElemType type) const {
    const int64_t v = number(t, "a value");
    const size_t sz = elem_size(type);
    const int64_t lo = sz == 1 ? -128 : -(int64_t{1} << 31);
    const int64_t hi = sz == 1 ? 255 : (int64_t{1} << 32) - 1;
    if (v < lo || v > hi) {
      fail(t, fmt::format("value {} out of range for {} ({}..{})", num(t.text), to_string(type), lo, hi));
    }
    const auto u = static_cast<uint64_t>(v);
    for (size_t b = 0; b < sz; ++b) out.push_back(static_cast<uint8_t>(u >> (8 * b)));
  }

  static constexpr uint64_t kAddrMax = 0xFFFFFFFFull;

  void directive(const std::vector<Token>& toks) {
    const Token& d = toks[0];
    const std::string name = lower(d.text);
    if (name == ".array_n") {
      expect_args(toks, 1, 1, ".array_n N");
      prog_.array_n = static_cast<unsigned>(unsigned_number(toks[1], "the array size", 1u << 16));
      if (prog_.array_n == 0) fail(toks[1], "the array size must be >= 1");
    } else if (name == ".data") {
      expect_args(toks, 3, 3, ".data NAME ADDR FILE");
      DataSegment s{toks[1].text, unsigned_number(toks[2], "an address", kAddrMax), toks[3].text, {}, d.line};
      prog_.data.push_back(std::move(s));
    } else if (name == ".int8" || name == ".int32" || name == ".bytes") {
      const std::string usage = fmt::format("{} NAME ADDR VALUE...", name);
      expect_args(toks, 3, std::numeric_limits<size_t>::max() - 1, usage);
      DataSegment s{toks[1].text, unsigned_number(toks[2], "an address", kAddrMax), "", {}, d.line};
      const ElemType t = name == ".int32" ? ElemType::kInt32 : ElemType::kInt8;
      for (size_t i = 3; i < toks.size(); ++i) push_value(s.bytes, toks[i], t);
      prog_.data.push_back(std::move(s));
    } else if (name == ".zero") {
      expect_args(toks, 3, 3, ".zero NAME ADDR BYTES");
      ZeroRegion z{toks[1].text, unsigned_number(toks[2], "an address", kAddrMax),
                   unsigned_number(toks[3], "a byte count", kAddrMax + 1), d.line};
      prog_.zeros.push_back(std::move(z));
    } else if (name == ".dump") {
      const char* usage = ".dump NAME ADDR BYTES [TYPE [COLUMNS [FILE]]]";
      expect_args(toks, 3, 6, usage);
      Dump u;
      u.name = toks[1].text;
      u.addr = unsigned_number(toks[2], "an address", kAddrMax);
      u.bytes = unsigned_number(toks[3], "a byte count", kAddrMax + 1);
      u.line = d.line;
      if (toks.size() > 4) u.type = elem_type(toks[4]);
      if (toks.size() > 5) u.columns = static_cast<unsigned>(unsigned_number(toks[5], "a column count", 4096));
      if (u.columns == 0) fail(toks[5], "the column count must be >= 1");
      if (toks.size() > 6) u.file = toks[6].text;
      if (u.bytes % elem_size(u.type) != 0) {
        fail(toks[3], fmt::format("{} bytes is not a whole number of {} elements", u.bytes, to_string(u.type)));
      }
      prog_.dumps.push_back(std::move(u));
    } else if (name == ".expect") {
      expect_args(toks, 4, std::numeric_limits<size_t>::max() - 1, ".expect NAME ADDR TYPE VALUE...");
      Expect e;
      e.name = toks[1].text;
      e.addr = unsigned_number(toks[2], "an address", kAddrMax);
      e.type = elem_type(toks[3]);
      e.line = d.line;
      for (size_t i = 4; i < toks.size(); ++i) push_value(e.bytes, toks[i], e.type);
      prog_.expects.push_back(std::move(e));
    } else if (name == ".expect_fault") {
      expect_args(toks, 3, 3, ".expect_fault CAUSE INFO INDEX");
      if (prog_.expect_fault) fail(d, "only one .expect_fault per program");
      ExpectFault f;
      const std::string cause = upper(toks[1].text);
      bool found = false;
      for (unsigned v = 1; v < 256 && !found; ++v) {
        const auto c = static_cast<spec::Fault>(v);
        if (spec::to_string(c) == cause) {
          f.cause = c;
          found = true;
        }
        if (spec::to_string(c) == "?") break;
      }
      if (!found) {
        fail(toks[1], fmt::format("unknown fault cause {} (expected a name from the fault table, e.g. "
                                  "ILLEGAL_OPCODE, ILLEGAL_FIELD, LOCAL_RANGE, DMA_WINDOW, AXI_ERROR)",
                                  q(toks[1].text)));
      }
      f.info = static_cast<uint32_t>(unsigned_number(toks[2], "the fault info", kAddrMax));
      f.index = static_cast<uint32_t>(unsigned_number(toks[3], "an instruction index", kAddrMax));
      f.line = d.line;
      prog_.expect_fault = f;
    } else if (name == ".word") {
      expect_args(toks, 4, 4, ".word W0 W1 W2 W3 (four 32-bit little-endian words of one instruction)");
      Word w{};
      for (unsigned k = 0; k < 4; ++k) set_bits(w, 32 * k, 32, unsigned_number(toks[k + 1], "a 32-bit word", kAddrMax));
      prog_.code.insert(prog_.code.end(), w.begin(), w.end());
      prog_.lines.push_back(d.line);
    } else {
      fail(d, fmt::format("unknown directive {} (expected .array_n, .data, .int8, .int32, .bytes, .zero, .dump, "
                          ".expect, .expect_fault or .word)",
                          q(d.text)));
    }
  }

  std::string_view src_;
  std::string file_;
  Program prog_;
};

}  // namespace

Program assemble(std::string_view source, std::string_view filename) { return Assembler(source, filename).run(); }

void load_data_files(Program& program, const std::filesystem::path& dir) {
  for (auto& s : program.data) {
    if (s.file.empty()) continue;
    const std::filesystem::path p = dir / s.file;  // an absolute s.file replaces dir
    // The segment must fit below 4 GiB from its address, and in the documented maximum.
    const uint64_t limit = std::min(kMaxDataFileBytes, (uint64_t{1} << 32) - s.addr);
    s.bytes = read_file_bounded(p, limit, fmt::format("the data file of .data {} at 0x{:x} ({}:{})", s.name, s.addr,
                                                      program.filename, s.line));
  }
}

Program assemble_file(const std::filesystem::path& path) {
  const auto bytes = read_file_bounded(path, kMaxSourceBytes, "the assembly source");
  const std::string text(bytes.begin(), bytes.end());
  Program p = assemble(text, path.string());
  load_data_files(p, path.parent_path());
  return p;
}

}  // namespace tpuw::isa
