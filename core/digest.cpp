#include "core/digest.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/regular_file.h"

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
  MOERT_ASSIGN_OR_RETURN(const RegularFile file, RegularFile::open(path));
  Digest digest;
  char buffer[1 << 16];
  while (true) {
    const ssize_t got = ::read(file.fd(), buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return io_error("cannot read " + path + ": " + std::strerror(errno));
    if (got == 0) break;
    digest.add(std::string_view(buffer, static_cast<size_t>(got)));
  }
  return digest.hex();
}

}  // namespace moert
