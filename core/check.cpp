#include "core/check.h"

#include <unistd.h>

#include <cstdlib>

#include "core/log.h"

namespace moert {

void check_failed(const char* file, int line, const char* condition, const std::string& message) {
  const ProcessIdentity& who = process_identity();
  std::string text = "[moert r" + std::to_string(who.rank) + "@" + who.host + "] CHECK failed at " +
                     file + ":" + std::to_string(line) + ": " + condition;
  if (!message.empty()) text += ": " + message;
  text += "\n";
  ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
  std::abort();
}

}  // namespace moert
