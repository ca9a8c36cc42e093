// SHA-256 (FIPS 180-4): the checksum of training checkpoints (tpuw/runtime/train_checkpoint.h)
// and of the inputs the MPI ranks compare before training. Any tool checks it
// (`sha256sum`, Python's hashlib).
//
//   Sha256 h;
//   h.update(bytes);             // any number of times
//   std::string hex = h.hex();   // 64 lowercase hex digits; the object is spent after this
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tpuw {

class Sha256 {
 public:
  Sha256();
  void update(std::span<const uint8_t> bytes);
  void update(std::string_view text);
  /// The digest; call once, after the last update().
  std::array<uint8_t, 32> digest();
  /// digest() as 64 lowercase hex digits.
  std::string hex();

 private:
  void block(const uint8_t* p);

  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  size_t used_ = 0;      // bytes in buf_
  uint64_t total_ = 0;   // bytes hashed
};

/// The SHA-256 of `bytes` as 64 lowercase hex digits.
std::string sha256_hex(std::span<const uint8_t> bytes);
std::string sha256_hex(std::string_view text);

}  // namespace tpuw
