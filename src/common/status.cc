#include "nostall/status.h"

#include <cstdio>

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
  return StatusCodeName(code_) + std::string(": ") + Describe();
}

std::string Status::Describe() const {
  if (ok()) return "OK";
  std::string s;
  if (!stage_.empty()) s += stage_ + ": ";
  if (!item_.empty()) s += item_ + ": ";
  s += message_;
  return TerminalSafe(s);
}

std::string TerminalSafe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  auto escape = [&](unsigned char c) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", c);
    out += buf;
  };
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) escape(c);
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    // The length of a well-formed UTF-8 sequence starting here (0: not one).
    size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    for (size_t k = 1; n != 0 && k < n; ++k) {
      if (i + k >= text.size() || (static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) n = 0;
    }
    if (n == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0) n = 0;  // C1 controls
    if (n == 0) {
      escape(c);
      ++i;
      continue;
    }
    out.append(text.substr(i, n));
    i += n;
  }
  return out;
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
