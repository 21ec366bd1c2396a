#include "core/status.h"

namespace moert {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kCorrupt: return "corrupt";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kIoError: return "i/o error";
    case StatusCode::kResourceExhausted: return "resource exhausted";
    case StatusCode::kInternal: return "internal error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

Status Status::with_context(const std::string& context) const {
  if (is_ok()) return *this;
  return Status(code_, context + ": " + message_);
}

}  // namespace moert
