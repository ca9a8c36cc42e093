// Overflow-safe size arithmetic for sizes computed from outside data (file headers, command-line
// options, model dimensions): every product or sum that decides an allocation, a loop bound or an
// offset goes through these before use.
//
//   try_mul / try_add          -> std::optional<T>, empty on overflow (for callers with their own message)
//   checked_mul / checked_add  -> T, or throw tpuw::Error(kind) "WHAT: A * B overflows a 64-bit size"
//   checked_product            -> the product of a list of dimensions, or throw naming the whole list
//   checked_size               -> a uint64_t that must also fit in size_t (an allocation)
//
// T is any integral type (uint64_t for sizes, int64_t for signed model dimensions); the builtins
// of GCC and Clang do the exact check, so there is no undefined behaviour on signed overflow.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tpuw/error.h"

namespace tpuw {

namespace detail {
/// "64-bit size" (unsigned) or "64-bit integer" (signed), for overflow messages.
template <std::integral T>
std::string overflow_type() {
  constexpr int bits = std::numeric_limits<T>::digits + (std::numeric_limits<T>::is_signed ? 1 : 0);
  return fmt::format("{}-bit {}", bits, std::numeric_limits<T>::is_signed ? "integer" : "size");
}
}  // namespace detail

template <std::integral T>
constexpr std::optional<T> try_mul(T a, T b) {
  T r{};
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

template <std::integral T>
constexpr std::optional<T> try_add(T a, T b) {
  T r{};
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

/// a * b, or throws Error(kind) "WHAT: A * B overflows a 64-bit size".
template <std::integral T>
T checked_mul(T a, T b, std::string_view what, ErrorKind kind = ErrorKind::kInvalidArgument) {
  if (const auto r = try_mul(a, b)) return *r;
  throw Error(kind, fmt::format("{}: {} * {} overflows a {}", what, a, b, detail::overflow_type<T>()));
}

/// a + b, or throws Error(kind) "WHAT: A + B overflows a 64-bit size".
template <std::integral T>
T checked_add(T a, T b, std::string_view what, ErrorKind kind = ErrorKind::kInvalidArgument) {
  if (const auto r = try_add(a, b)) return *r;
  throw Error(kind, fmt::format("{}: {} + {} overflows a {}", what, a, b, detail::overflow_type<T>()));
}

/// The product of `dims` (1 for none), or throws Error(kind) "WHAT: the product of [d0, d1, ...]
/// overflows a 64-bit size". A zero anywhere gives 0 without overflow.
template <std::integral T>
T checked_product(std::span<const T> dims, std::string_view what, ErrorKind kind = ErrorKind::kInvalidArgument) {
  T n = 1;
  bool overflow = false;
  for (const T d : dims) {
    if (d == 0) return 0;
    if (!overflow) {
      if (const auto r = try_mul(n, d)) {
        n = *r;
      } else {
        overflow = true;  // keep scanning: a later zero makes the product 0
      }
    }
  }
  if (overflow) {
    throw Error(kind, fmt::format("{}: the product of [{}] overflows a {}", what, fmt::join(dims, ", "),
                                  detail::overflow_type<T>()));
  }
  return n;
}

template <std::integral T>
T checked_product(std::initializer_list<T> dims, std::string_view what, ErrorKind kind = ErrorKind::kInvalidArgument) {
  return checked_product(std::span<const T>(dims.begin(), dims.size()), what, kind);
}

/// `v` as a size_t (an allocation or index on this host), or throws Error(kind).
inline size_t checked_size(uint64_t v, std::string_view what, ErrorKind kind = ErrorKind::kInvalidArgument) {
  if (v > std::numeric_limits<size_t>::max()) {
    throw Error(kind, fmt::format("{}: {} does not fit in this host's address space", what, v));
  }
  return static_cast<size_t>(v);
}

}  // namespace tpuw
