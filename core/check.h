// MOERT_CHECK: an always-on check for broken invariants (never for bad user input, which
// gets a Status). On failure it prints file, line, rank and host plus the message, then
// aborts the process (an MPI launcher then tears the job down).
#pragma once

#include <sstream>
#include <string>

namespace moert {
[[noreturn]] void check_failed(const char* file, int line, const char* condition,
                               const std::string& message);
}  // namespace moert

#define MOERT_CHECK(condition, ...)                                            \
  do {                                                                         \
    if (!(condition)) [[unlikely]] {                                           \
      std::ostringstream moert_check_stream_;                                  \
      moert_check_stream_ << "" __VA_ARGS__;                                   \
      ::moert::check_failed(__FILE__, __LINE__, #condition,                    \
                            moert_check_stream_.str());                        \
    }                                                                          \
  } while (0)
