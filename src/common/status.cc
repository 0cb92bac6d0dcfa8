#include "nostall/status.h"

#include <cstring>

namespace nostall {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kDataError: return "DataError";
    case StatusCode::kIoError: return "IoError";
    case StatusCode::kResourceExhausted: return "ResourceExhausted";
    case StatusCode::kFailedPrecondition: return "FailedPrecondition";
    case StatusCode::kCancelled: return "Cancelled";
    case StatusCode::kPermissionDenied: return "PermissionDenied";
    case StatusCode::kInternal: return "Internal";
  }
  return "Unknown";
}

Status Status::WithItem(std::string item, std::string stage) const {
  Status s = *this;
  s.item_ = std::move(item);
  s.stage_ = std::move(stage);
  return s;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s = StatusCodeName(code_);
  s += ": ";
  if (!stage_.empty()) s += stage_ + ": ";
  if (!item_.empty()) s += item_ + ": ";
  s += message_;
  return s;
}

Status ErrnoError(const std::string& what, int err) {
  StatusCode code = StatusCode::kIoError;
  if (err == ENOENT) code = StatusCode::kNotFound;
  if (err == ENOSPC || err == ENOMEM || err == EMFILE || err == ENFILE) {
    code = StatusCode::kResourceExhausted;
  }
  return Status(code, what + ": " + std::strerror(err));
}

}  // namespace nostall
