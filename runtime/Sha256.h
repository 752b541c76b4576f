//===- Sha256.h - SHA-256 digests -------------------------------*- C++ -*-===//
//
// A small, dependency-free SHA-256 (FIPS 180-4) for kernel cache keys and the
// integrity check of cache entries. Not constant-time; not for secrets.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_SHA256_H
#define ATTNC_RUNTIME_SHA256_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace attnc {

class Sha256 {
public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();
  /// Feeds more message bytes; may be called any number of times.
  Sha256 &update(const void *data, size_t size);
  Sha256 &update(std::string_view bytes) { return update(bytes.data(), bytes.size()); }
  /// Pads, returns the digest and resets the object for a new message.
  Digest finish();

  /// One-shot digest of `bytes`.
  static Digest hash(std::string_view bytes);
  static Digest hash(const void *data, size_t size);
  /// Lower-case hexadecimal, 64 characters.
  static std::string hex(const Digest &digest);
  static std::string hexHash(std::string_view bytes) { return hex(hash(bytes)); }

private:
  void reset();
  void compress(const uint8_t *block);

  uint32_t state_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t totalBytes_ = 0;
};

} // namespace attnc

#endif // ATTNC_RUNTIME_SHA256_H
