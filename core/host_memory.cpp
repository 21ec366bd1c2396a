#include "core/host_memory.h"

#include <cstdlib>
#include <fstream>
#include <string>

namespace moert {

std::optional<int64_t> available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      const long long kib = std::atoll(line.c_str() + 13);
      if (kib > 0) return static_cast<int64_t>(kib) * 1024;
    }
  }
  return std::nullopt;
}

std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t product = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

}  // namespace moert
