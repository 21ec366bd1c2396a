// Logging with a rank prefix and levels. Every line is "[moert r<rank> <level>] text".
// The process identity (rank, host) is set once at start-up and also used by MOERT_CHECK.
#pragma once

#include <sstream>
#include <string>

namespace moert {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

struct ProcessIdentity {
  int rank = 0;
  int world_size = 1;
  std::string host;
};

// Reads rank and size from the launcher's environment (Open MPI, PMIx, Slurm) until a
// transport sets them for real; the host from gethostname.
ProcessIdentity identity_from_environment();
void set_process_identity(const ProcessIdentity& identity);
const ProcessIdentity& process_identity();

// Lines below `level` are dropped. Default kInfo, or MOERT_LOG_LEVEL=debug|info|warn|error|off.
void set_log_level(LogLevel level);
LogLevel log_level();
// Parses "debug", "info", "warn", "error", "off"; returns false for anything else.
bool parse_log_level(const std::string& text, LogLevel* level);

// Writes one whole line to stderr (a single write, so ranks do not interleave mid-line).
void log_line(LogLevel level, const std::string& text);

}  // namespace moert

#define MOERT_LOG(level, stream_expr)                                       \
  do {                                                                      \
    if (::moert::LogLevel::level >= ::moert::log_level()) {                 \
      std::ostringstream moert_log_stream_;                                 \
      moert_log_stream_ << stream_expr;                                     \
      ::moert::log_line(::moert::LogLevel::level, moert_log_stream_.str()); \
    }                                                                       \
  } while (0)
#define MOERT_DEBUG(x) MOERT_LOG(kDebug, x)
#define MOERT_INFO(x) MOERT_LOG(kInfo, x)
#define MOERT_WARN(x) MOERT_LOG(kWarn, x)
#define MOERT_ERROR(x) MOERT_LOG(kError, x)
