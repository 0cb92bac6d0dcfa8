// One S3 request's attempts: the body as it comes in, retry causes, final
// errors (s3_request.h).
#include "store/s3_request.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <new>

#include <openssl/evp.h>

#include "common/clock.h"
#include "store/s3_response.h"

namespace nostall {
namespace {

// A server that ignores Range answers a read far into an object with the
// whole object from its start: past this offset that is refused (every read
// of a tar shard would download the shard again) rather than waded through.
// A plain web server's is refused at any offset: its files are read by
// pages, each of which would download the whole file again.
constexpr uint64_t kIgnoredRangeLimit = uint64_t{64} << 20;

// Takes in at most the bytes the request may need (MaxBodyBytes): a server
// sending more, or without end, is stopped there (returning less than was
// given ends the transfer; Finish says why from `stopped`).
size_t WriteBody(char* data, size_t size, size_t n, void* user) {
  auto* r = static_cast<Request*>(user);
  const size_t bytes = size * n;
  r->last_byte_ns = NowNs();
  if (r->body.empty() && !r->range.empty()) {
    long http = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &http);
    if (http == 200 && (r->offset > kIgnoredRangeLimit || r->whole_answer_refused)) {
      r->stopped = Stopped::kIgnoredRange;
      return 0;
    }
  }
  const uint64_t room = r->max_body > r->body.size() ? r->max_body - r->body.size() : 0;
  const size_t take = static_cast<size_t>(std::min<uint64_t>(room, bytes));
  try {
    r->body.insert(r->body.end(), data, data + take);
  } catch (const std::bad_alloc&) {
    r->stopped = Stopped::kNoMemory;
    return 0;
  }
  if (take < bytes) {
    r->stopped = Stopped::kTooLong;
    return 0;
  }
  return bytes;
}

std::string Sha256Hex(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &n, EVP_sha256(), nullptr);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

size_t ReadHeader(char* data, size_t size, size_t n, void* user) {
  auto* r = static_cast<Request*>(user);
  r->last_byte_ns = NowNs();
  const std::string_view line(data, size * n);
  const double after = ParseRetryAfter(line);
  if (after >= 0) r->retry_after_s = after;
  if (r->head != nullptr) {
    const size_t colon = line.find(':');
    if (colon != std::string_view::npos && colon < 32) {
      std::string name(line.substr(0, colon));
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string_view value = line.substr(colon + 1);
      while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
      while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) {
        value.remove_suffix(1);
      }
      if (name == "etag") r->head->etag = std::string(value.substr(0, 200));
      if (name == "last-modified") r->head->last_modified = std::string(value.substr(0, 100));
    }
  }
  return size * n;
}

// Called by curl at least once a second while a transfer is open (the
// low-speed check's timer): an answer begun and then silent for the read
// timeout is ended here (a timeout, retried as one). Before its first byte
// curl's low-speed check is exact, and stays in charge.
int WatchStall(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* r = static_cast<Request*>(user);
  if (r->last_byte_ns == 0 || NowNs() - r->last_byte_ns <= r->read_timeout_ns) return 0;
  r->stalled = true;
  return 1;
}

}  // namespace

RetryCause Classify(CURLcode code, long http) {
  switch (code) {
    case CURLE_OK:
      if (http == 503) return RetryCause::kSlowDown;
      return http == 500 || http == 502 || http == 504 ? RetryCause::kServerError : RetryCause::kNone;
    case CURLE_OPERATION_TIMEDOUT:
      return RetryCause::kTimeout;
    case CURLE_COULDNT_CONNECT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
      return RetryCause::kConnection;
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
      return RetryCause::kCutShort;
    default:
      return RetryCause::kNone;
  }
}

CURL* StartAttempt(Request* r, const S3Config& config) {
  r->body.clear();
  r->stopped = Stopped::kNo;
  r->last_byte_ns = 0;
  r->stalled = false;
  r->read_timeout_ns = static_cast<int64_t>(std::max(0.001, config.read_timeout_s) * 1e9);
  r->retry_after_s = -1;
  r->http = 0;
  CURL* e = curl_easy_init();
  r->easy = e;
  curl_easy_setopt(e, CURLOPT_URL, r->url.c_str());
  // A key is a name, not a path: "a/../b" is read as written (libcurl
  // would otherwise request "b", another key, signed with the user's keys).
  curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  if (config.plain) {  // a web server or CDN may send a file elsewhere (S3 never does)
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  }
  // What is left of the request's deadline (retries included).
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(std::max<int64_t>(1, (r->deadline_ns - NowNs()) / 1000000)));
  curl_easy_setopt(e, CURLOPT_PRIVATE, r);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, WriteBody);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, ReadHeader);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(config.connect_timeout_s * 1000));
  // A server that stalls mid-body: under 1 byte/s for the read timeout.
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME,
                   std::max(1L, static_cast<long>(std::lround(config.read_timeout_s))));
  curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, WatchStall);
  curl_easy_setopt(e, CURLOPT_XFERINFODATA, r);
  curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
  if (!r->range.empty()) curl_easy_setopt(e, CURLOPT_RANGE, r->range.c_str());
  r->whole_answer_refused = config.plain && !r->range.empty();
  if (r->head != nullptr) {
    *r->head = S3Client::Head{};
    curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  }
  if (r->put) {
    // The body is given whole, so SigV4 signs its SHA-256. (Every header
    // set here is signed as set: an "Expect:" that removes a header would
    // be signed and not sent.)
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "PUT");
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->put_body.data());
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r->put_body.size()));
    r->headers = curl_slist_append(r->headers, "Content-Type: application/octet-stream");
  }
  if (config.sign) {
    // The payload's hash (a GET's: of nothing), which S3 requires on every
    // request signed with SigV4 and checks the body against; libcurl before
    // 8.x does not send it. Signed with the other x-amz- headers.
    static const std::string kEmpty = Sha256Hex("");
    r->headers = curl_slist_append(
        r->headers, ("x-amz-content-sha256: " + (r->put ? Sha256Hex(r->put_body) : kEmpty)).c_str());
  }
  if (config.sign) {
    const std::string sigv4 = "aws:amz:" + config.region + ":s3";
    curl_easy_setopt(e, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(e, CURLOPT_USERNAME, config.access_key.c_str());
    curl_easy_setopt(e, CURLOPT_PASSWORD, config.secret_key.c_str());
    if (!config.session_token.empty()) {
      r->headers = curl_slist_append(
          r->headers, ("x-amz-security-token: " + config.session_token).c_str());
    }
  }
  if (r->headers) curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
  return e;
}

std::optional<Status> StoppedEarly(const Request* r) {
  const bool enough = r->stopped == Stopped::kTooLong &&
                      ((r->http == 200 && !r->range.empty()) || (r->http != 200 && r->http != 206));
  if (enough) return std::nullopt;
  if (r->stopped == Stopped::kNoMemory) {
    return ResourceExhausted("cannot read " + r->what + ": out of memory after " +
                             std::to_string(r->body.size()) + " bytes");
  }
  std::string why;
  if (r->stopped == Stopped::kIgnoredRange) {
    why = "the server ignores Range: it answered a read of bytes " + r->range +
          " with the whole object (HTTP 200), which nostall will not download again for "
          "every read of a large object";
  } else if (r->length >= 0) {
    why = "the server sent more than the " + std::to_string(r->length) +
          " bytes asked for (HTTP " + std::to_string(r->http) + "); reading stopped there";
  } else {
    why = "the server sent more than the " + std::to_string(r->max_body) + " bytes " +
          (r->range.empty() && r->url.find('?') == std::string::npos
               ? "listed for it (the object changed since it was listed, or the server is broken)"
               : "a listing page may take") +
          "; reading stopped there";
  }
  return DataError(r->what + ": " + why);
}

Status FinalStatus(const Request* r, CURLcode code, const S3Config& config) {
  if (code != CURLE_OK) {
    return IoError(std::string(r->put ? "cannot write " : "cannot read ") + r->what + ": " + curl_easy_strerror(code) + " (after " +
                   std::to_string(r->attempt) + " attempts: " + r->history + "; " +
                   config.Describe() + ")");
  }
  if (r->http == 200 || r->http == 206) return Status::OK();
  if (r->http == 404 && r->absent_ok) return NotFound(r->what + ": no such object");
  const std::string_view xml(reinterpret_cast<const char*>(r->body.data()), r->body.size());
  const std::string s3code = XmlTag(xml, "Code").substr(0, 100);
  const std::string message = XmlTag(xml, "Message").substr(0, 300);
  std::string text = r->what + ": HTTP " + std::to_string(r->http);
  if (!s3code.empty()) text += " " + s3code;
  if (!message.empty()) text += " (" + message + ")";
  if (r->attempt > 1) {
    text += " (after " + std::to_string(r->attempt) + " attempts: " + r->history + ")";
  }
  if (r->http == 403 && !config.plain) {
    text += config.sign ? "; signed with credentials from " + config.credentials_from
                        : "; the request was unsigned (" + config.credentials_from + ")";
  }
  return DataError(text);
}

std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 10 ? "%.1f s" : "%.0f s", s);
  return buf;
}

int RequestLatencies::Bucket(int64_t us) {
  if (us <= 1) return 0;
  return std::min(kBuckets - 1, static_cast<int>(std::log2(static_cast<double>(us)) * 8));
}

void RequestLatencies::Record(int64_t us) {
  hist_[Bucket(us)].fetch_add(1, std::memory_order_relaxed);
  const int64_t ns = us * 1000;
  window_min_ns_ = std::min(window_min_ns_, ns);
  if (++window_count_ == kWindow || base_ns_.load(std::memory_order_relaxed) == 0) {
    base_ns_.store(window_min_ns_, std::memory_order_relaxed);
    if (window_count_ == kWindow) {
      window_min_ns_ = INT64_MAX;
      window_count_ = 0;
    }
  }
}

double RequestLatencies::Quantile(double q) const {
  int64_t total = 0;
  for (const auto& b : hist_) total += b.load(std::memory_order_relaxed);
  if (total == 0) return 0;
  int64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += hist_[b].load(std::memory_order_relaxed);
    if (seen >= q * static_cast<double>(total)) return BucketSeconds(b);
  }
  return BucketSeconds(kBuckets - 1);
}

}  // namespace nostall
