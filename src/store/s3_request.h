// One S3 request and its attempts (s3_client.cc runs them): what is asked,
// the body as it comes in (never more than may be needed), why an attempt
// may be tried again, and the error a request that fails for good returns.
// Private to the source layer.
#ifndef NOSTALL_STORE_S3_REQUEST_H_
#define NOSTALL_STORE_S3_REQUEST_H_

#include <curl/curl.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nostall/status.h"
#include "store/s3_client.h"
#include "store/s3_config.h"

namespace nostall {

// Why WriteBody stopped taking in a body.
enum class Stopped { kNo, kTooLong, kIgnoredRange, kNoMemory };

struct Request {
  std::string url;
  std::string range;  // "a-b", "a-", or "" for the whole object
  std::string what;   // s3://bucket/key, for errors
  uint64_t offset = 0;
  int64_t length = -1;  // asked for; -1: to the end
  std::vector<uint8_t> body;
  // A PUT of these bytes (an index written beside the data), not a GET.
  bool put = false;
  std::string put_body;
  // A 404 is NotFound (an object that may not be there), not a data error.
  bool absent_ok = false;
  // A HEAD: the object's size and tags are its answer (filled when it succeeds).
  S3Client::Head* head = nullptr;
  uint64_t max_body = 0;  // the most bytes taken in (MaxBodyBytes)
  Stopped stopped = Stopped::kNo;
  // A whole object (HTTP 200) for a ranged read is refused at any offset.
  bool whole_answer_refused = false;
  // When the attempt last received a byte (0: none yet), and how long a
  // body may go without one (the read timeout): curl's own low-speed check
  // averages over five seconds, so a body that stalls after a burst would
  // be waited on for about that long whatever the timeout.
  int64_t last_byte_ns = 0;
  int64_t read_timeout_ns = 0;
  bool stalled = false;
  int64_t deadline_ns = 0;  // the request fails for good past this, retries included
  double retry_after_s = -1;
  int attempt = 0;
  int64_t start_at_ns = 0;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  long http = 0;
  // What each attempt so far ended with ("503", "cut short after 1234 of
  // 5678 bytes", ...): a request that fails for good says its whole story.
  std::string history;
  S3Client::Done done;
};

// The most bytes of a listing page or an error body taken in.
constexpr uint64_t kMaxPageBytes = uint64_t{64} << 20;

// Why a finished attempt may be tried again (RetryCause::kNone: it may not).
enum class RetryCause { kNone, kSlowDown, kServerError, kTimeout, kConnection, kCutShort };
RetryCause Classify(CURLcode code, long http);

// A new attempt of `r`: its easy handle, set up from `config` (signing,
// timeouts within what is left of the deadline, the range), the body and
// the answer of any earlier attempt cleared.
CURL* StartAttempt(Request* r, const S3Config& config);

// WriteBody stopped taking in the body: enough of a whole object (or of an
// error body) is a complete answer (nullopt); the rest are errors.
std::optional<Status> StoppedEarly(const Request* r);

// The answer, done trying: OK, or the error naming the object, the HTTP
// status and S3's code and message (never the keys).
Status FinalStatus(const Request* r, CURLcode code, const S3Config& config);

// The latencies of answered requests: a histogram (8 buckets per octave
// from 1 us, about 9% wide) for the quantiles, and the least latency of
// each window of 128 answers: the round trip without queueing (a server or
// proxy that queues requests shows longer latency the more are sent; sizing
// reads in flight by that would chase it). Record: the I/O thread only;
// the rest: any thread.
class RequestLatencies {
 public:
  void Record(int64_t us);
  double Quantile(double q) const;  // seconds; 0 before the first answer
  double BaseSeconds() const { return base_ns_.load(std::memory_order_relaxed) / 1e9; }

 private:
  static constexpr int kBuckets = 8 * 27;
  static constexpr int kWindow = 128;
  static int Bucket(int64_t us);
  static double BucketSeconds(int b) { return std::exp2((b + 0.5) / 8) * 1e-6; }
  std::atomic<int64_t> hist_[kBuckets] = {};
  int64_t window_min_ns_ = INT64_MAX, window_count_ = 0;  // the I/O thread's
  std::atomic<int64_t> base_ns_{0};
};

// "1.5 s", "12 s".
std::string FormatSeconds(double s);

}  // namespace nostall

#endif  // NOSTALL_STORE_S3_REQUEST_H_
