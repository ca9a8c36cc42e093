// Template definitions for tpuw/runtime/npy.h; include that header instead.
#pragma once

#include <cstring>
#include <string>

#include "tpuw/error.h"

namespace tpuw::npy {

template <typename T>
Array Array::from(std::vector<uint64_t> shape, std::span<const T> values) {
  Array a = zeros(dtype_of<T>(), std::move(shape));
  if (values.size() != a.elements()) {
    throw Error(ErrorKind::kInvalidArgument,
                "npy::Array::from: " + std::to_string(values.size()) + " values for a shape of " +
                    std::to_string(a.elements()) + " elements");
  }
  if (!values.empty()) std::memcpy(a.data.data(), values.data(), values.size_bytes());
  return a;
}

template <typename T>
std::span<const T> Array::view() const {
  if (dtype != dtype_of<T>()) {
    throw Error(ErrorKind::kInvalidArgument, std::string("npy::Array::view: array holds ") +
                                                 std::string(to_string(dtype)) + ", not " +
                                                 std::string(to_string(dtype_of<T>())));
  }
  return {reinterpret_cast<const T*>(data.data()), data.size() / sizeof(T)};
}

template <typename T>
std::span<T> Array::view() {
  auto c = static_cast<const Array&>(*this).view<T>();
  return {const_cast<T*>(c.data()), c.size()};
}

}  // namespace tpuw::npy
