#include "core/digest.h"

#include <cstdio>
#include <fstream>

namespace moert {

Digest& Digest::add(std::string_view bytes) {
  for (const char ch : bytes) {
    const auto byte = static_cast<unsigned char>(ch);
    a_ = (a_ ^ byte) * 0x100000001b3ull;
    b_ = (b_ ^ byte) * 0x100000001b3ull + 0x9e3779b97f4a7c15ull;
  }
  return *this;
}

std::string Digest::hex() const {
  char text[40];
  std::snprintf(text, sizeof(text), "%016llx%016llx", static_cast<unsigned long long>(a_),
                static_cast<unsigned long long>(b_));
  return text;
}

std::string digest_of(std::string_view bytes) { return Digest().add(bytes).hex(); }

uint64_t fnv1a_64(std::string_view bytes, uint64_t hash) {
  for (unsigned char ch : bytes) hash = (hash ^ ch) * 0x100000001b3ull;
  return hash;
}

Result<std::string> digest_of_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot read " + path);
  Digest digest;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) digest.add(std::string_view(buffer, static_cast<size_t>(in.gcount())));
  if (in.bad()) return io_error("cannot read " + path);
  return digest.hex();
}

}  // namespace moert
