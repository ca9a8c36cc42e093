// quote(): untrusted text escaped and shortened for messages (see tpuw/quote.h).
#include "tpuw/quote.h"

#include <fmt/format.h>

namespace tpuw {
namespace {

/// Length of the valid UTF-8 sequence (2..4 bytes) starting at s[i], or 0 when s[i] does not start
/// one (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
size_t utf8_len(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const auto cont = [&](size_t k) { return i + k < s.size() && (b(k) & 0xC0) == 0x80; };
  const unsigned char c = b(0);
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && b(1) < 0xA0) return 0;  // overlong
    if (c == 0xED && b(1) > 0x9F) return 0;  // UTF-16 surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && b(1) < 0x90) return 0;  // overlong
    if (c == 0xF4 && b(1) > 0x8F) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

std::string quote(std::string_view text, size_t max_bytes, char delim) {
  std::string out(1, delim);
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    const size_t n = c < 0x80 ? 1 : utf8_len(text, i);
    if (i + (n == 0 ? 1 : n) > max_bytes) break;
    // C1 controls (U+0080..U+009F, e.g. CSI) are valid UTF-8 but drive terminals: escaped.
    const bool c1 = n == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0;
    if (n > 1 && !c1) {
      out.append(text.substr(i, n));
      i += n;
      continue;
    }
    if (c1) {
      out += fmt::format("\\x{:02x}\\x{:02x}", c, static_cast<unsigned char>(text[i + 1]));
      i += 2;
      continue;
    }
    if (c == static_cast<unsigned char>(delim) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    switch (c) {
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c >= 0x7F) {
          out += fmt::format("\\x{:02x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += delim;
  if (i < text.size()) out += fmt::format("... ({} bytes)", text.size());
  return out;
}

}  // namespace tpuw
