#include "core/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

namespace moert {
namespace {

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  long parsed = std::strtol(value, &end, 10);
  return (end != nullptr && *end == '\0') ? static_cast<int>(parsed) : fallback;
}

ProcessIdentity& identity_storage() {
  static ProcessIdentity identity = identity_from_environment();
  return identity;
}

LogLevel initial_log_level() {
  LogLevel level = LogLevel::kInfo;
  if (const char* text = std::getenv("MOERT_LOG_LEVEL")) parse_log_level(text, &level);
  return level;
}

std::atomic<int>& level_storage() {
  static std::atomic<int> level{static_cast<int>(initial_log_level())};
  return level;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
    case LogLevel::kOff: return "off";
  }
  return "?";
}

}  // namespace

ProcessIdentity identity_from_environment() {
  ProcessIdentity identity;
  identity.rank = env_int("OMPI_COMM_WORLD_RANK", env_int("PMIX_RANK", env_int("SLURM_PROCID", 0)));
  identity.world_size =
      env_int("OMPI_COMM_WORLD_SIZE", env_int("SLURM_NTASKS", 1));
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) == 0) identity.host = host;
  return identity;
}

void set_process_identity(const ProcessIdentity& identity) { identity_storage() = identity; }
const ProcessIdentity& process_identity() { return identity_storage(); }

void set_log_level(LogLevel level) { level_storage().store(static_cast<int>(level)); }
LogLevel log_level() { return static_cast<LogLevel>(level_storage().load()); }

bool parse_log_level(const std::string& text, LogLevel* level) {
  for (LogLevel candidate : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn,
                             LogLevel::kError, LogLevel::kOff}) {
    if (text == level_name(candidate)) {
      *level = candidate;
      return true;
    }
  }
  return false;
}

void log_line(LogLevel level, const std::string& text) {
  std::string line = "[moert r" + std::to_string(process_identity().rank) + " " +
                     level_name(level) + "] " + text + "\n";
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace moert
