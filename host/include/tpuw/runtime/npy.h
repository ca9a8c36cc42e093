// NumPy .npy files: the tensor format users already have (np.save / np.load).
//
// Hand-written on purpose: no Debian 12 C++ library reads or writes .npy (cnpy and xtensor-io are
// not packaged), and the format is small (https://numpy.org/doc/stable/reference/generated/
// numpy.lib.format.html). Supported: format versions 1.0, 2.0 and 3.0; dtypes int8, uint8, int32,
// int64 (NumPy's default integer: class labels) and float32, little-endian; C order; any rank (0 = a scalar). Everything else is refused with a
// clear message: big-endian data, other dtypes, fortran_order True, structured dtypes.
//
// Every error is tpuw::Error(kBadFile) whose message starts with the file name and says what is
// wrong: not a .npy file, unsupported version, truncated header or data, bad header, unsupported
// dtype or order, trailing bytes, a header or data larger than the limits below; require() adds
// wrong dtype and wrong rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tpuw::npy {

enum class DType { kInt8, kUint8, kInt32, kFloat32, kInt64 };

/// NumPy's name: "int8", "uint8", "int32", "float32", "int64".
std::string_view to_string(DType t);
/// Bytes per element.
size_t dtype_size(DType t);
/// The `descr` written to headers: "|i1", "|u1", "<i4", "<f4", "<i8".
std::string_view descr(DType t);

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<int8_t>() { return DType::kInt8; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::kUint8; }
template <> constexpr DType dtype_of<int32_t>() { return DType::kInt32; }
template <> constexpr DType dtype_of<float>() { return DType::kFloat32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::kInt64; }

/// A C-order array: shape plus the raw little-endian element bytes.
struct Array {
  DType dtype = DType::kInt8;
  std::vector<uint64_t> shape;  // empty = scalar
  std::vector<uint8_t> data;    // elements() * dtype_size(dtype) bytes

  /// The product of the shape; throws Error(kInvalidArgument) when it overflows 64 bits.
  uint64_t elements() const;
  size_t rank() const { return shape.size(); }

  /// A zero-filled array of this dtype and shape.
  static Array zeros(DType dtype, std::vector<uint64_t> shape);
  /// Copies `values` (elements() of them) into a new array.
  template <typename T>
  static Array from(std::vector<uint64_t> shape, std::span<const T> values);
  /// Typed views; throw Error(kInvalidArgument) when T does not match dtype.
  template <typename T> std::span<const T> view() const;
  template <typename T> std::span<T> view();
};

/// Longest .npy header accepted (NumPy writes about 128 bytes; 1 MiB is rank ~100000).
inline constexpr uint64_t kMaxHeaderBytes = uint64_t{1} << 20;
/// Default limit of load(): the data of one array may not exceed the 4 GiB the device addresses.
inline constexpr uint64_t kMaxDataBytes = uint64_t{4} << 30;

/// Parses an in-memory .npy image. `name` is used in error messages (usually the path).
Array parse(std::span<const uint8_t> bytes, std::string_view name);
/// Reads and parses a file. Reads are bounded by the header: at most 12 + kMaxHeaderBytes bytes
/// before the header is parsed, then exactly the data it announces (refused when more than
/// `max_data_bytes`, or, for a regular file, when the file's size does not match, before reading
/// it), then one byte to see that nothing follows. So /dev/zero, an endless pipe or a huge file
/// is an error, not a memory exhaustion; a directory is an error, not an empty file.
Array load(const std::filesystem::path& path, uint64_t max_data_bytes = kMaxDataBytes);

/// Encodes an array (version 1.0, or 2.0 when the header needs it), header padded to 64 bytes.
std::vector<uint8_t> serialize(const Array& array);
/// Writes a file atomically (tpuw/file_io.h): the file appears complete or not at all, and an
/// existing file of that name stays intact when writing fails. Throws Error(kBadFile) "PATH:
/// cannot write the .npy file: REASON" (full disk, /dev/full, missing or unwritable directory).
void save(const std::filesystem::path& path, const Array& array);

/// Checks dtype and rank; throws Error(kBadFile) "NAME: dtype is int32, expected int8" /
/// "NAME: rank 3 (shape (2, 3, 4)), expected a rank-2 array".
void require(const Array& array, std::string_view name, DType dtype, size_t rank);

/// Most dimensions shape_string() prints in full.
inline constexpr size_t kShapeMessageDims = 10;

/// "(2, 3)" like NumPy prints shapes, for messages: a shape of more than kShapeMessageDims
/// dimensions is shortened to its first and last dimensions and the count,
/// "(1, 1, 1, 1, 1, 1, 1, 1, ..., 1, 7) (20000 dimensions)".
std::string shape_string(const std::vector<uint64_t>& shape);

}  // namespace tpuw::npy

#include "tpuw/runtime/npy_impl.h"  // IWYU pragma: export
