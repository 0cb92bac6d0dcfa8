// S3 over libcurl's multi interface (s3_client.h). One I/O thread owns the
// multi handle: it starts the requests callers queue, drives them on an
// epoll loop (curl_events.h), retries what may pass (s3_request.h says
// which), and calls each request's completion (a waiting caller's, or an
// asynchronous reader's). The small XML reading of ListObjectsV2 and error
// bodies (a handful of flat tags) is hand-written: s3_response.cc.
#include "store/s3_client.h"

#include <curl/curl.h>

#include <algorithm>
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
#include "store/curl_events.h"
#include "store/s3_request.h"

namespace nostall {
namespace {


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
  std::unique_ptr<CurlEvents> events;
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
  RequestLatencies latencies;
  std::mt19937_64 jitter{std::random_device{}()};

  // A request for object `key`, named in errors as the user names it.
  Request* ObjectRequest(const std::string& bucket, const std::string& key) const {
    auto* r = new Request;
    r->url = config.ObjectUrl(bucket, key);
    r->what = config.ObjectName(bucket, key);
    return r;
  }

  // `r` submitted and waited for: its status, its body in `*out`.
  Status SubmitAndWait(Request* r, std::vector<uint8_t>* out) {
    Waiter w;
    r->done = w.Callback();
    Submit(r);
    return w.Wait(out);
  }

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

  void Wake() { events->Wake(); }

  // Every transfer curl has finished: done, failed for good, or queued again.
  void TakeFinished() {
    events->TakeFinished([this](CURL* easy, CURLcode result) {
      Request* r = nullptr;
      curl_easy_getinfo(easy, CURLINFO_PRIVATE, &r);
      Finish(r, result);
    });
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
    CURL* e = StartAttempt(r, config);
    requests.fetch_add(1);
    active.insert(r);
    curl_multi_add_handle(events->multi(), e);
  }

  void Release(Request* r) {
    active.erase(r);
    curl_multi_remove_handle(events->multi(), r->easy);
    curl_easy_cleanup(r->easy);
    r->easy = nullptr;
    curl_slist_free_all(r->headers);
    r->headers = nullptr;
  }


  // A finished transfer: done, failed for good, or queued again.
  void Finish(Request* r, CURLcode code) {
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->http);
    curl_off_t total_us = 0;
    if (code == CURLE_OK) {
      curl_easy_getinfo(r->easy, CURLINFO_TOTAL_TIME_T, &total_us);
      latencies.Record(static_cast<int64_t>(total_us));
    }
    curl_off_t announced = -1;
    curl_easy_getinfo(r->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &announced);
    curl_off_t local_port = 0;
    curl_easy_getinfo(r->easy, CURLINFO_LOCAL_PORT, &local_port);
    Release(r);
    if (r->head != nullptr) r->head->size = static_cast<int64_t>(announced);
    bytes.fetch_add(static_cast<int64_t>(r->body.size()));
    if (code == CURLE_WRITE_ERROR && r->stopped != Stopped::kNo) {
      if (std::optional<Status> error = StoppedEarly(r)) {
        Complete(r, *error);
        return;
      }
      code = CURLE_OK;
    }
    if (code == CURLE_ABORTED_BY_CALLBACK && r->stalled) code = CURLE_OPERATION_TIMEDOUT;
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
    Complete(r, FinalStatus(r, code, config));
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
    int64_t cpu_seen = ThreadCpuNs();
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
      events->RunDueTimers();
      TakeFinished();
      const int64_t cpu = ThreadCpuNs();
      io_cpu_ns.fetch_add(cpu - cpu_seen, std::memory_order_relaxed);
      cpu_seen = cpu;
      events->Wait(next_due);
      TakeFinished();
    }
  }

};

Result<std::unique_ptr<S3Client>> S3Client::Create(S3Config config) {
  static const bool initialised = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  if (!initialised) return Internal("libcurl could not be initialised");
  auto impl = std::make_unique<Impl>();
  impl->config = std::move(config);
  NOSTALL_ASSIGN_OR_RETURN(impl->events, CurlEvents::Create());
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
  Request* r = impl_->ObjectRequest(bucket, key);
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

Status S3Client::GetIfThere(const std::string& bucket, const std::string& key, uint64_t most,
                            std::vector<uint8_t>* out) {
  Request* r = impl_->ObjectRequest(bucket, key);
  r->absent_ok = true;
  r->max_body = most;
  return impl_->SubmitAndWait(r, out);
}

Result<S3Client::Head> S3Client::HeadOf(const std::string& bucket, const std::string& key) {
  Request* r = impl_->ObjectRequest(bucket, key);
  r->absent_ok = true;
  r->max_body = kMaxPageBytes;
  // Filled on the I/O thread as the answer comes; shared with the request's
  // callback, so that a wait given up (Ctrl-C) leaves it alive until then.
  auto head = std::make_shared<Head>();
  r->head = head.get();
  Waiter w;
  r->done = [answer = w.Callback(), head](Status st, std::vector<uint8_t> body) {
    answer(std::move(st), std::move(body));
  };
  impl_->Submit(r);
  std::vector<uint8_t> none;
  NOSTALL_RETURN_IF_ERROR(w.Wait(&none));
  return *head;
}

Status S3Client::Put(const std::string& bucket, const std::string& key, std::string bytes) {
  Request* r = impl_->ObjectRequest(bucket, key);
  r->put = true;
  r->put_body = std::move(bytes);
  r->max_body = kMaxPageBytes;  // the answer: empty, or an error's XML
  std::vector<uint8_t> answer;
  return impl_->SubmitAndWait(r, &answer);
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
    std::vector<uint8_t> body;
    NOSTALL_RETURN_IF_ERROR(impl_->SubmitAndWait(r, &body));
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
  s.latency_p50_s = i.latencies.Quantile(0.5);
  s.latency_p99_s = i.latencies.Quantile(0.99);
  s.retry_slow_down = i.retry_by[static_cast<int>(RetryCause::kSlowDown)].load();
  s.retry_server_error = i.retry_by[static_cast<int>(RetryCause::kServerError)].load();
  s.retry_timeout = i.retry_by[static_cast<int>(RetryCause::kTimeout)].load();
  s.retry_connection = i.retry_by[static_cast<int>(RetryCause::kConnection)].load();
  s.retry_cut_short = i.retry_by[static_cast<int>(RetryCause::kCutShort)].load();
  s.io_cpu_ns = i.io_cpu_ns.load();
  return s;
}

double S3Client::LatencySeconds() const { return impl_->latencies.BaseSeconds(); }

const S3Config& S3Client::config() const { return impl_->config; }

}  // namespace nostall
