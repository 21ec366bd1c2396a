// Status and Result<T>: the error style across module boundaries.
// A Status is ok or carries a code and a message that names the offending value;
// Result<T> holds either a T or a non-ok Status. Exceptions are used only at the top
// (launch/), never inside modules.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace moert {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller passed a bad value (option, shape, token id)
  kNotFound,         // a file, tensor or key does not exist
  kCorrupt,          // a file exists but its contents break the format's rules
  kUnsupported,      // valid input that moert does not implement (architecture, feature)
  kIoError,          // the operating system refused a read, write or map
  kResourceExhausted,
  kInternal,
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "<code name>: <message>", or "ok".
  std::string to_string() const;
  // Returns a copy whose message is "<context>: <message>".
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status corrupt(std::string m) { return {StatusCode::kCorrupt, std::move(m)}; }
inline Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : state_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(state_).is_ok() && "Result built from an ok Status");
  }

  bool is_ok() const { return std::holds_alternative<T>(state_); }
  const Status& status() const {
    static const Status kOkStatus;
    return is_ok() ? kOkStatus : std::get<Status>(state_);
  }
  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace moert

// Propagates a non-ok Status from an expression returning Status.
#define MOERT_RETURN_IF_ERROR(expr)            \
  do {                                         \
    ::moert::Status moert_status_ = (expr);    \
    if (!moert_status_.is_ok()) return moert_status_; \
  } while (0)

#define MOERT_CONCAT_INNER_(a, b) a##b
#define MOERT_CONCAT_(a, b) MOERT_CONCAT_INNER_(a, b)
// `MOERT_ASSIGN_OR_RETURN(auto x, f());` binds the value or returns the error.
#define MOERT_ASSIGN_OR_RETURN(lhs, expr)                                   \
  auto MOERT_CONCAT_(moert_result_, __LINE__) = (expr);                     \
  if (!MOERT_CONCAT_(moert_result_, __LINE__).is_ok())                      \
    return MOERT_CONCAT_(moert_result_, __LINE__).status();                 \
  lhs = std::move(MOERT_CONCAT_(moert_result_, __LINE__)).value()
