// 128-bit digests (FNV-1a over two lanes) that tell files, models and jobs apart: not
// cryptographic, they do not defend against forgery. Used by output manifests and the
// start-up agreement of ranks (docs/outputs.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace moert {

class Digest {
 public:
  Digest& add(std::string_view bytes);
  // 32 lowercase hex digits.
  std::string hex() const;

 private:
  uint64_t a_ = 0xcbf29ce484222325ull, b_ = 0x84222325cbf29ce4ull;
};

std::string digest_of(std::string_view bytes);
// 64-bit FNV-1a of `bytes`, continuing from `hash` (default: the FNV offset basis). Request
// seeds and prefix keys depend on its exact values.
uint64_t fnv1a_64(std::string_view bytes, uint64_t hash = 0xcbf29ce484222325ull);
// The digest of a regular file's bytes (RegularFile::open: links followed, FIFOs and devices
// refused); errors name the path.
Result<std::string> digest_of_file(const std::string& path);

}  // namespace moert
