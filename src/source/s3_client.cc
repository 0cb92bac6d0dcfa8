// S3 over libcurl's multi interface (s3_client.h). One I/O thread owns the
// multi handle: it starts the requests callers queue, drives them with
// curl_multi_socket_action from an epoll loop (only the connections that are
// ready are touched: with curl_multi_perform every wake-up stepped every
// transfer in flight, a cost that grew with the reads in flight a distant
// store needs), retries what may pass, and calls each request's completion
// (a waiting caller's, or an asynchronous reader's). Hand-written
// here: the small XML reading of ListObjectsV2 and error bodies (a handful of
// flat tags).
#include "source/s3_client.h"

#include <curl/curl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <optional>
#include <random>
#include <thread>
#include <unordered_set>

#include "common/clock.h"
#include "common/interrupt.h"
#include "common/shm.h"
#include "common/mutex.h"

namespace nostall {
namespace {

// Why WriteBody stopped taking in a body.
enum class Stopped { kNo, kTooLong, kIgnoredRange, kNoMemory };

struct Request {
  std::string url;
  std::string range;  // "a-b", "a-", or "" for the whole object
  std::string what;   // s3://bucket/key, for errors
  uint64_t offset = 0;
  int64_t length = -1;  // asked for; -1: to the end
  std::vector<uint8_t> body;
  uint64_t max_body = 0;  // the most bytes taken in (MaxBodyBytes)
  Stopped stopped = Stopped::kNo;
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

// A server that ignores Range answers a read far into an object with the
// whole object from its start: past this offset that is refused (every read
// of a tar shard would download the shard again) rather than waded through.
constexpr uint64_t kIgnoredRangeLimit = uint64_t{64} << 20;

// Takes in at most the bytes the request may need (MaxBodyBytes): a server
// sending more, or without end, is stopped there (returning less than was
// given ends the transfer; Finish says why from `stopped`).
size_t WriteBody(char* data, size_t size, size_t n, void* user) {
  auto* r = static_cast<Request*>(user);
  const size_t bytes = size * n;
  if (r->body.empty() && !r->range.empty()) {
    long http = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &http);
    if (http == 200 && r->offset > kIgnoredRangeLimit) {
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

size_t ReadHeader(char* data, size_t size, size_t n, void* user) {
  auto* r = static_cast<Request*>(user);
  const double after = ParseRetryAfter(std::string_view(data, size * n));
  if (after >= 0) r->retry_after_s = after;
  return size * n;
}

// Why a finished attempt may be tried again (RetryCause::kNone: it may not).
enum class RetryCause { kNone, kSlowDown, kServerError, kTimeout, kConnection, kCutShort };
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

std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 10 ? "%.1f s" : "%.0f s", s);
  return buf;
}

// The most bytes of a listing page or an error body taken in.
constexpr uint64_t kMaxPageBytes = uint64_t{64} << 20;

// Latency histogram: 8 buckets per octave from 1 us (about 9% wide).
constexpr int kLatencyBuckets = 8 * 27;
int LatencyBucket(int64_t us) {
  if (us <= 1) return 0;
  return std::min(kLatencyBuckets - 1, static_cast<int>(std::log2(static_cast<double>(us)) * 8));
}
double BucketSeconds(int b) { return std::exp2((b + 0.5) / 8) * 1e-6; }

// Blocks until a request is answered, or the user interrupts (Ctrl-C from
// Python): then Wait returns Cancelled at once, and the answer, when it
// comes, lands in this shared state, which the callback keeps alive.
struct Waiter {
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Status status;
    std::vector<uint8_t> body;
  };
  std::shared_ptr<State> state = std::make_shared<State>();
  S3Client::Done Callback() {
    return [s = state](Status st, std::vector<uint8_t> b) {
      std::lock_guard<std::mutex> lock(s->mu);
      s->status = std::move(st);
      s->body = std::move(b);
      s->done = true;
      s->cv.notify_all();
    };
  }
  // The answer's status (its body in `*body`), or Cancelled if interrupted.
  Status Wait(std::vector<uint8_t>* body) {
    std::unique_lock<std::mutex> lock(state->mu);
    while (!state->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return state->done; })) {
      lock.unlock();
      const bool stop = Interrupted();
      lock.lock();
      if (stop && !state->done) return Cancelled("interrupted");
    }
    if (body != nullptr) *body = std::move(state->body);
    return state->status;
  }
};

}  // namespace

struct S3Client::Impl {
  S3Config config;
  CURLM* multi = nullptr;
  int epoll_fd = -1;  // the sockets curl asks to watch, and wake_fd
  int wake_fd = -1;   // an eventfd: new requests, cancel, stop
  int64_t timer_due_ns = -1;  // when curl wants its timeout handled (-1: no timer)
  std::thread io;
  Mutex mu;
  std::deque<Request*> incoming GUARDED_BY(mu);
  bool stop GUARDED_BY(mu) = false;
  int64_t cancel_requested GUARDED_BY(mu) = 0;  // CancelAll calls so far
  // The I/O thread's own: requests in the multi handle, and waiting to be retried.
  std::unordered_set<Request*> active;
  std::vector<Request*> later;
  int64_t cancel_done = 0;
  std::atomic<int64_t> requests{0}, bytes{0}, retries{0}, errors{0}, in_flight{0}, peak{0},
      io_cpu_ns{0};
  std::atomic<int64_t> retry_by[6] = {};
  std::atomic<int64_t> latency_hist[kLatencyBuckets] = {};
  std::atomic<int64_t> latency_ewma_ns{0};
  // The least latency of each window of kWindow answers: the round trip
  // without queueing (a server or proxy that queues requests shows longer
  // latency the more are sent; sizing reads in flight by that would chase it).
  static constexpr int kWindow = 128;
  int64_t window_min_ns = INT64_MAX, window_count = 0;  // the I/O thread's
  std::atomic<int64_t> base_latency_ns{0};
  std::mt19937_64 jitter{std::random_device{}()};

  void Submit(Request* r) {
    r->deadline_ns = NowNs() + static_cast<int64_t>(config.request_timeout_s * 1e9);
    if (r->max_body == 0) r->max_body = MaxBodyBytes(r->offset, r->length, kMaxPageBytes);
    const int64_t n = in_flight.fetch_add(1) + 1;
    int64_t p = peak.load(std::memory_order_relaxed);
    while (n > p && !peak.compare_exchange_weak(p, n)) {
    }
    {
      MutexLock lock(&mu);
      incoming.push_back(r);
    }
    Wake();
  }

  void Wake() {
    const uint64_t one = 1;
    (void)!write(wake_fd, &one, sizeof one);
  }

  // curl's socket callback: which sockets to watch, for what.
  static int OnSocket(CURL*, curl_socket_t fd, int what, void* user, void*) {
    auto* self = static_cast<Impl*>(user);
    if (what == CURL_POLL_REMOVE) {
      epoll_ctl(self->epoll_fd, EPOLL_CTL_DEL, fd, nullptr);  // may be closed already: fine
      return 0;
    }
    epoll_event ev{};
    ev.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0u) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u);
    ev.data.fd = fd;
    if (epoll_ctl(self->epoll_fd, EPOLL_CTL_MOD, fd, &ev) != 0 && errno == ENOENT) {
      epoll_ctl(self->epoll_fd, EPOLL_CTL_ADD, fd, &ev);
    }
    return 0;
  }

  // curl's timer callback: when to call it back with CURL_SOCKET_TIMEOUT.
  static int OnTimer(CURLM*, long timeout_ms, void* user) {
    auto* self = static_cast<Impl*>(user);
    self->timer_due_ns = timeout_ms < 0 ? -1 : NowNs() + static_cast<int64_t>(timeout_ms) * 1000000;
    return 0;
  }

  // Every transfer curl has finished: done, failed for good, or queued again.
  void TakeFinished() {
    int left = 0;
    while (CURLMsg* m = curl_multi_info_read(multi, &left)) {
      if (m->msg != CURLMSG_DONE) continue;
      Request* r = nullptr;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &r);
      Finish(r, m->data.result);
    }
  }

  void Complete(Request* r, Status st) {
    if (st.ok()) st = CheckBody(r->what, r->http, !r->range.empty(), r->offset, r->length, &r->body);
    if (!st.ok() && st.code() != StatusCode::kCancelled) errors.fetch_add(1);
    in_flight.fetch_sub(1);
    Done done = std::move(r->done);
    std::vector<uint8_t> body = std::move(r->body);
    delete r;
    done(std::move(st), std::move(body));
  }

  void Start(Request* r) {
    r->body.clear();
    r->stopped = Stopped::kNo;
    r->retry_after_s = -1;
    r->http = 0;
    CURL* e = curl_easy_init();
    r->easy = e;
    curl_easy_setopt(e, CURLOPT_URL, r->url.c_str());
    // A key is a name, not a path: "a/../b" is read as written (libcurl
    // would otherwise request "b", another key, signed with the user's keys).
    curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
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
    if (!r->range.empty()) curl_easy_setopt(e, CURLOPT_RANGE, r->range.c_str());
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
    requests.fetch_add(1);
    active.insert(r);
    curl_multi_add_handle(multi, e);
  }

  void Release(Request* r) {
    active.erase(r);
    curl_multi_remove_handle(multi, r->easy);
    curl_easy_cleanup(r->easy);
    r->easy = nullptr;
    curl_slist_free_all(r->headers);
    r->headers = nullptr;
  }

  void RecordLatency(int64_t us) {
    latency_hist[LatencyBucket(us)].fetch_add(1, std::memory_order_relaxed);
    const int64_t old = latency_ewma_ns.load(std::memory_order_relaxed);
    const int64_t ns = us * 1000;
    latency_ewma_ns.store(old == 0 ? ns : old + (ns - old) / 16, std::memory_order_relaxed);
    window_min_ns = std::min(window_min_ns, ns);
    if (++window_count == kWindow || base_latency_ns.load(std::memory_order_relaxed) == 0) {
      base_latency_ns.store(window_min_ns, std::memory_order_relaxed);
      if (window_count == kWindow) {
        window_min_ns = INT64_MAX;
        window_count = 0;
      }
    }
  }

  // A finished transfer: done, failed for good, or queued again.
  void Finish(Request* r, CURLcode code) {
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->http);
    curl_off_t total_us = 0;
    if (code == CURLE_OK) {
      curl_easy_getinfo(r->easy, CURLINFO_TOTAL_TIME_T, &total_us);
      RecordLatency(static_cast<int64_t>(total_us));
    }
    curl_off_t announced = -1;
    curl_easy_getinfo(r->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &announced);
    curl_off_t local_port = 0;
    curl_easy_getinfo(r->easy, CURLINFO_LOCAL_PORT, &local_port);
    Release(r);
    bytes.fetch_add(static_cast<int64_t>(r->body.size()));
    if (code == CURLE_WRITE_ERROR && r->stopped != Stopped::kNo) {
      if (std::optional<Status> error = StoppedEarly(r)) {
        Complete(r, *error);
        return;
      }
      code = CURLE_OK;
    }
    const RetryCause cause = Classify(code, r->http);
    ++r->attempt;  // tries so far
    if (cause != RetryCause::kNone) {
      std::string what = code == CURLE_OK ? "HTTP " + std::to_string(r->http)
                                          : std::string(curl_easy_strerror(code));
      if (code == CURLE_PARTIAL_FILE) {
        what += " (" + std::to_string(r->body.size()) + " of " + std::to_string(announced) +
                " bytes, HTTP " + std::to_string(r->http) + ")";
      }
      what += " [port " + std::to_string(local_port) + "]";
      r->history += (r->history.empty() ? "" : "; ") + what;
      if (RetryOrGiveUp(r, cause)) return;
    }
    Complete(r, FinalStatus(r, code));
  }

  // WriteBody stopped taking in the body: enough of a whole object (or of
  // an error body) is a complete answer (nullopt); the rest are errors.
  std::optional<Status> StoppedEarly(Request* r) {
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

  // A failure that may pass: queued again after a jittered backoff (or the
  // server's Retry-After), or answered with an error past the deadline.
  // False: out of attempts (FinalStatus says why).
  bool RetryOrGiveUp(Request* r, RetryCause cause) {
    const int64_t now = NowNs();
    if (now >= r->deadline_ns) {
      Complete(r, IoError("cannot read " + r->what + ": no answer within the request deadline of " +
                          FormatSeconds(config.request_timeout_s) + " (NOSTALL_S3_REQUEST_TIMEOUT; " +
                          std::to_string(r->attempt) + " attempts: " + r->history + "; " +
                          config.Describe() + ")"));
      return true;
    }
    if (r->attempt >= config.max_attempts) return false;
    double delay = std::min(5.0, 0.05 * (1 << std::min(r->attempt, 16))) *
                   std::uniform_real_distribution<double>(0.5, 1.5)(jitter);
    if (r->retry_after_s >= 0) delay = r->retry_after_s;
    if (now + static_cast<int64_t>(delay * 1e9) >= r->deadline_ns) {
      Complete(r, IoError("cannot read " + r->what + ": the server asked to wait " +
                          FormatSeconds(delay) + " before trying again (Retry-After), beyond the "
                          "request deadline of " + FormatSeconds(config.request_timeout_s) +
                          " (NOSTALL_S3_REQUEST_TIMEOUT; " + std::to_string(r->attempt) +
                          " attempts: " + r->history + ")"));
      return true;
    }
    retries.fetch_add(1);
    retry_by[static_cast<int>(cause)].fetch_add(1);
    r->start_at_ns = now + static_cast<int64_t>(delay * 1e9);
    later.push_back(r);
    return true;
  }

  // The answer, done trying: OK, or the error naming the object, the HTTP
  // status and S3's code and message (never the keys).
  Status FinalStatus(Request* r, CURLcode code) const {
    if (code != CURLE_OK) {
      return IoError("cannot read " + r->what + ": " + curl_easy_strerror(code) + " (after " +
                     std::to_string(r->attempt) + " attempts: " + r->history + "; " +
                     config.Describe() + ")");
    }
    if (r->http == 200 || r->http == 206) return Status::OK();
    const std::string_view xml(reinterpret_cast<const char*>(r->body.data()), r->body.size());
    const std::string s3code = XmlTag(xml, "Code").substr(0, 100);
    const std::string message = XmlTag(xml, "Message").substr(0, 300);
    std::string text = r->what + ": HTTP " + std::to_string(r->http);
    if (!s3code.empty()) text += " " + s3code;
    if (!message.empty()) text += " (" + message + ")";
    if (r->attempt > 1) {
      text += " (after " + std::to_string(r->attempt) + " attempts: " + r->history + ")";
    }
    if (r->http == 403) {
      text += config.sign ? "; signed with credentials from " + config.credentials_from
                          : "; the request was unsigned (" + config.credentials_from + ")";
    }
    return DataError(text);
  }

  // Answers everything not yet done with `why`.
  void CancelEverything(std::deque<Request*>* fresh, const char* why) {
    for (Request* r : *fresh) Complete(r, Cancelled(why));
    fresh->clear();
    for (Request* r : later) Complete(r, Cancelled(why));
    later.clear();
    const std::vector<Request*> running(active.begin(), active.end());
    for (Request* r : running) {
      Release(r);
      Complete(r, Cancelled(why));
    }
  }

  void Loop() {
    int running = 0;
    int64_t cpu_seen = ThreadCpuNs();
    epoll_event events[64];
    while (true) {
      std::deque<Request*> fresh;
      bool stopping;
      int64_t cancels;
      {
        MutexLock lock(&mu);
        fresh.swap(incoming);
        stopping = stop;
        cancels = cancel_requested;
      }
      if (stopping) {
        CancelEverything(&fresh, "the S3 client was closed");
        return;
      }
      if (cancels != cancel_done) {
        cancel_done = cancels;
        CancelEverything(&fresh, "the read was cancelled (the loader is stopping)");
      }
      for (Request* r : fresh) Start(r);
      int64_t now = NowNs();
      int64_t next_due = now + 100000000;
      for (auto it = later.begin(); it != later.end();) {
        if ((*it)->start_at_ns <= now) {
          Start(*it);
          it = later.erase(it);
        } else {
          next_due = std::min(next_due, (*it)->start_at_ns);
          ++it;
        }
      }
      // curl's own timeouts (and the first step of requests just added).
      if (timer_due_ns >= 0 && timer_due_ns <= NowNs()) {
        timer_due_ns = -1;
        curl_multi_socket_action(multi, CURL_SOCKET_TIMEOUT, 0, &running);
        TakeFinished();
      }
      const int64_t cpu = ThreadCpuNs();
      io_cpu_ns.fetch_add(cpu - cpu_seen, std::memory_order_relaxed);
      cpu_seen = cpu;
      if (timer_due_ns >= 0) next_due = std::min(next_due, timer_due_ns);
      now = NowNs();
      const int wait_ms =
          next_due <= now ? 0 : static_cast<int>(std::min<int64_t>(100, (next_due - now + 999999) / 1000000));
      const int n = epoll_wait(epoll_fd, events, 64, wait_ms);
      for (int k = 0; k < n; ++k) {
        const int fd = events[k].data.fd;
        if (fd == wake_fd) {
          uint64_t count;
          (void)!read(wake_fd, &count, sizeof count);
          continue;
        }
        const uint32_t ev = events[k].events;
        const int flags = ((ev & EPOLLIN) ? CURL_CSELECT_IN : 0) |
                          ((ev & EPOLLOUT) ? CURL_CSELECT_OUT : 0) |
                          ((ev & (EPOLLERR | EPOLLHUP)) ? CURL_CSELECT_ERR : 0);
        curl_multi_socket_action(multi, fd, flags, &running);
      }
      TakeFinished();
    }
  }

  double Quantile(double q) const {
    int64_t total = 0;
    for (const auto& b : latency_hist) total += b.load(std::memory_order_relaxed);
    if (total == 0) return 0;
    int64_t seen = 0;
    for (int b = 0; b < kLatencyBuckets; ++b) {
      seen += latency_hist[b].load(std::memory_order_relaxed);
      if (seen >= q * static_cast<double>(total)) return BucketSeconds(b);
    }
    return BucketSeconds(kLatencyBuckets - 1);
  }
};

Result<std::unique_ptr<S3Client>> S3Client::Create(S3Config config) {
  static const bool initialised = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  if (!initialised) return Internal("libcurl could not be initialised");
  auto impl = std::make_unique<Impl>();
  impl->config = std::move(config);
  impl->multi = curl_multi_init();
  if (impl->multi == nullptr) return Internal("libcurl could not make a multi handle");
  impl->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  impl->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl->epoll_fd < 0 || impl->wake_fd < 0) {
    const std::string why = std::strerror(errno);
    if (impl->epoll_fd >= 0) close(impl->epoll_fd);
    if (impl->wake_fd >= 0) close(impl->wake_fd);
    curl_multi_cleanup(impl->multi);
    return ResourceExhausted("the S3 client could not make its event loop: " + why);
  }
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.fd = impl->wake_fd;
  epoll_ctl(impl->epoll_fd, EPOLL_CTL_ADD, impl->wake_fd, &wake);
  curl_multi_setopt(impl->multi, CURLMOPT_SOCKETFUNCTION, &Impl::OnSocket);
  curl_multi_setopt(impl->multi, CURLMOPT_SOCKETDATA, impl.get());
  curl_multi_setopt(impl->multi, CURLMOPT_TIMERFUNCTION, &Impl::OnTimer);
  curl_multi_setopt(impl->multi, CURLMOPT_TIMERDATA, impl.get());
  Impl* raw = impl.get();
  impl->io = std::thread([raw] { raw->Loop(); });
  return std::unique_ptr<S3Client>(new S3Client(std::move(impl)));
}

S3Client::S3Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

S3Client::~S3Client() {
  {
    MutexLock lock(&impl_->mu);
    impl_->stop = true;
  }
  impl_->Wake();
  impl_->io.join();
  curl_multi_cleanup(impl_->multi);
  close(impl_->epoll_fd);
  close(impl_->wake_fd);
}

void S3Client::CancelAll() {
  {
    MutexLock lock(&impl_->mu);
    ++impl_->cancel_requested;
  }
  impl_->Wake();
}

void S3Client::GetAsync(const std::string& bucket, const std::string& key, uint64_t offset,
                        int64_t length, std::vector<uint8_t> buffer, Done done, uint64_t most) {
  if (length == 0) {
    buffer.clear();
    done(Status::OK(), std::move(buffer));
    return;
  }
  auto* r = new Request;
  r->url = impl_->config.ObjectUrl(bucket, key);
  r->what = "s3://" + bucket + "/" + key;
  r->offset = offset;
  r->length = length;
  if (offset > 0 || length >= 0) {
    r->range = std::to_string(offset) + "-" +
               (length >= 0 ? std::to_string(offset + static_cast<uint64_t>(length) - 1) : "");
  }
  buffer.clear();
  if (length > 0) buffer.reserve(static_cast<size_t>(std::min<int64_t>(length, int64_t{64} << 20)));
  r->body = std::move(buffer);
  r->done = std::move(done);
  r->max_body = length < 0 && most > 0 ? most : MaxBodyBytes(offset, length, kMaxPageBytes);
  impl_->Submit(r);
}

Status S3Client::Get(const std::string& bucket, const std::string& key, uint64_t offset,
                     int64_t length, std::vector<uint8_t>* out, uint64_t most) {
  Waiter w;
  GetAsync(bucket, key, offset, length, std::move(*out), w.Callback(), most);
  out->clear();
  return w.Wait(out);
}

Status S3Client::ListPages(const std::string& bucket, const std::string& prefix, bool folders,
                           const std::function<void(ListPage)>& page) {
  std::string token;
  std::unordered_set<std::string> tokens_seen;
  const std::string what = "s3://" + bucket + "/" + prefix + " (listing)";
  int empty_in_a_row = 0;
  for (int n = 0; n < 1000000; ++n) {
    auto* r = new Request;
    // Parameters in SigV4's canonical (sorted) order: libcurl signs the
    // query as written, and a server sorts it before checking.
    r->url = impl_->config.BucketUrl(bucket) + "?";
    if (!token.empty()) r->url += "continuation-token=" + UriEncode(token, false) + "&";
    if (folders) r->url += "delimiter=%2F&";
    r->url += "list-type=2&prefix=" + UriEncode(prefix, false);
    r->what = what;
    Waiter w;
    r->done = w.Callback();
    impl_->Submit(r);
    std::vector<uint8_t> body;
    NOSTALL_RETURN_IF_ERROR(w.Wait(&body));
    NOSTALL_ASSIGN_OR_RETURN(
        ListPage p, ParseListPage(std::string_view(reinterpret_cast<const char*>(body.data()), body.size()),
                                  prefix, what));
    const bool truncated = p.truncated;
    empty_in_a_row = p.objects.empty() && p.folders.empty() ? empty_in_a_row + 1 : 0;
    token = p.next_token;
    page(std::move(p));
    if (!truncated) return Status::OK();
    // A server that never ends its listing: the same token again, or page
    // after page of nothing.
    if (!tokens_seen.insert(token).second) {
      return DataError(what + ": the server sent the continuation token '" + token.substr(0, 100) +
                       "' a second time (a listing that would never end)");
    }
    if (empty_in_a_row >= 1000) {
      return DataError(what + ": 1000 listing pages in a row with no keys (a listing that would "
                       "never end)");
    }
  }
  return DataError(what + ": a listing of over a million pages");
}

Result<std::vector<S3Object>> S3Client::List(const std::string& bucket, const std::string& prefix) {
  std::vector<S3Object> objects;
  NOSTALL_RETURN_IF_ERROR(ListPages(bucket, prefix, false, [&](ListPage p) {
    for (S3Object& o : p.objects) objects.push_back(std::move(o));
  }));
  std::sort(objects.begin(), objects.end(),
            [](const S3Object& a, const S3Object& b) { return a.key < b.key; });
  return objects;
}

Result<std::vector<std::string>> S3Client::ListFolders(const std::string& bucket,
                                                       const std::string& prefix) {
  std::vector<std::string> folders;
  NOSTALL_RETURN_IF_ERROR(ListPages(bucket, prefix, true, [&](ListPage p) {
    for (std::string& f : p.folders) folders.push_back(std::move(f));
  }));
  std::sort(folders.begin(), folders.end());
  return folders;
}

StorageStats S3Client::Stats() const {
  const Impl& i = *impl_;
  StorageStats s;
  s.requests = i.requests.load();
  s.bytes = i.bytes.load();
  s.retries = i.retries.load();
  s.errors = i.errors.load();
  s.in_flight = i.in_flight.load();
  s.peak_in_flight = i.peak.load();
  s.latency_p50_s = i.Quantile(0.5);
  s.latency_p99_s = i.Quantile(0.99);
  s.retry_slow_down = i.retry_by[static_cast<int>(RetryCause::kSlowDown)].load();
  s.retry_server_error = i.retry_by[static_cast<int>(RetryCause::kServerError)].load();
  s.retry_timeout = i.retry_by[static_cast<int>(RetryCause::kTimeout)].load();
  s.retry_connection = i.retry_by[static_cast<int>(RetryCause::kConnection)].load();
  s.retry_cut_short = i.retry_by[static_cast<int>(RetryCause::kCutShort)].load();
  s.io_cpu_ns = i.io_cpu_ns.load();
  return s;
}

double S3Client::LatencySeconds() const { return impl_->base_latency_ns.load() / 1e9; }

const S3Config& S3Client::config() const { return impl_->config; }

}  // namespace nostall
