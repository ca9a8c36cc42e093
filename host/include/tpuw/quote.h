// Untrusted text in error messages: file contents, header fields, tokens of a source file, names
// from a model. quote() makes it safe to print on a terminal and in a log: the text comes back in
// double (or the given) quotes, with
//   - the quote character and '\' escaped as \" (\') and \\, tab, newline and carriage return
//     as \t \n \r,
//   - every other control character (C0 including NUL, DEL, C1) and every byte that is not part of a valid
//     UTF-8 sequence as \xNN (so binary data can neither end the message nor drive the terminal),
//   - valid UTF-8 (names in any script) kept as it is,
//   - text longer than `max_bytes` input bytes cut on a character boundary and marked:
//     "first part"... (90000 bytes)
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tpuw {

/// Default length limit of quote(): enough for any name or a header line, short enough for one
/// terminal line.
inline constexpr size_t kQuoteMaxBytes = 80;

/// `text` in quotes (`delim`, '"' or '\''), escaped and shortened as described above.
std::string quote(std::string_view text, size_t max_bytes = kQuoteMaxBytes, char delim = '"');

}  // namespace tpuw
