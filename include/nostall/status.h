// Status and Result<T>: how every fallible call in nostall reports failure.
//
// The core never throws across threads or processes. A Status carries a code,
// a message and, for errors caused by one data item, the item's key and the
// pipeline stage that met it, so the user learns *which* file failed *where*.
// Python exceptions are made from a Status in exactly one place (the binding).
#ifndef NOSTALL_STATUS_H_
#define NOSTALL_STATUS_H_

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace nostall {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller asked for something malformed
  kNotFound,            // a path or name does not exist
  kDataError,           // one data item is bad (corrupt, truncated, too big)
  kIoError,             // the OS refused a read/write/map
  kResourceExhausted,   // not enough memory, /dev/shm, file descriptors
  kFailedPrecondition,  // the object is in the wrong state for the call
  kCancelled,           // shut down while waiting
  kInternal,            // a bug in nostall
  kPermissionDenied,    // shared memory or a file that is not the caller's own
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // For data errors: the item's key (a path or shard:member) and the stage.
  const std::string& item() const { return item_; }
  const std::string& stage() const { return stage_; }

  // Returns a copy annotated with the item and stage that met the error.
  Status WithItem(std::string item, std::string stage) const;

  // "DataError: decode: data/cat/1.jpg: premature end of JPEG data"
  std::string ToString() const;
  // The same without the code: "decode: data/cat/1.jpg: premature end of
  // JPEG data", for where the code is said already (a Python exception's
  // class).
  std::string Describe() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::string item_;
  std::string stage_;
};

inline Status InvalidArgument(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
inline Status NotFound(std::string m) {
  return Status(StatusCode::kNotFound, std::move(m));
}
inline Status DataError(std::string m) {
  return Status(StatusCode::kDataError, std::move(m));
}
inline Status IoError(std::string m) {
  return Status(StatusCode::kIoError, std::move(m));
}
inline Status ResourceExhausted(std::string m) {
  return Status(StatusCode::kResourceExhausted, std::move(m));
}
inline Status FailedPrecondition(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}
inline Status Cancelled(std::string m) {
  return Status(StatusCode::kCancelled, std::move(m));
}
inline Status Internal(std::string m) {
  return Status(StatusCode::kInternal, std::move(m));
}
inline Status PermissionDenied(std::string m) {
  return Status(StatusCode::kPermissionDenied, std::move(m));
}
// `text` safe to print to a terminal: control characters (ESC and the rest
// of C0 but newline and tab, DEL, C1) and bytes that are not UTF-8 shown as
// \xNN, so a file or class name cannot rewrite the screen. Valid UTF-8
// (names in any script) is kept.
std::string TerminalSafe(std::string_view text);

// An IoError whose message ends with strerror(err).
Status ErrnoError(const std::string& what, int err);

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(v_).ok() && "Result built from an OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  // The value, or `fallback` when there is none.
  T value_or(T fallback) const& { return ok() ? value() : std::move(fallback); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace nostall

#define NOSTALL_CONCAT_INNER_(a, b) a##b
#define NOSTALL_CONCAT_(a, b) NOSTALL_CONCAT_INNER_(a, b)

#define NOSTALL_RETURN_IF_ERROR(expr)         \
  do {                                        \
    ::nostall::Status _st = (expr);           \
    if (!_st.ok()) return _st;                \
  } while (0)

#define NOSTALL_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()

#define NOSTALL_ASSIGN_OR_RETURN(lhs, expr) \
  NOSTALL_ASSIGN_OR_RETURN_IMPL_(NOSTALL_CONCAT_(_res_, __LINE__), lhs, expr)

#endif  // NOSTALL_STATUS_H_
