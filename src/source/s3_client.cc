// S3 over libcurl's multi interface (s3_client.h). One I/O thread owns the
// multi handle: it starts the requests callers queue, drives them all with
// curl_multi_perform/poll, retries what may pass, and hands each result back
// to the caller waiting on it. Hand-written here: the small XML reading of
// ListObjectsV2 and error bodies (a handful of flat tags).
#include "source/s3_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <random>
#include <thread>

#include "common/clock.h"
#include "common/mutex.h"

namespace nostall {
namespace {

constexpr int kMaxAttempts = 6;

struct Request {
  std::string url;
  std::string range;  // "a-b", "a-", or "" for the whole object
  std::string what;   // s3://bucket/key, for errors
  std::vector<uint8_t> body;
  double retry_after_s = -1;
  int attempt = 0;
  int64_t start_at_ns = 0;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  long http = 0;
  // Completion, waited on by the caller.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
};

std::string XmlDecode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const size_t semi = s.find(';', i);
    if (semi == std::string::npos) {
      out += s[i];
      continue;
    }
    const std::string ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp") out += '&';
    else if (ent == "lt") out += '<';
    else if (ent == "gt") out += '>';
    else if (ent == "quot") out += '"';
    else if (ent == "apos") out += '\'';
    else if (!ent.empty() && ent[0] == '#') {
      const long cp = ent.size() > 1 && (ent[1] == 'x' || ent[1] == 'X')
                          ? std::strtol(ent.c_str() + 2, nullptr, 16)
                          : std::strtol(ent.c_str() + 1, nullptr, 10);
      if (cp < 0x80) {
        out += static_cast<char>(cp);
      } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      }
    } else {
      out += s.substr(i, semi - i + 1);
    }
    i = semi;
  }
  return out;
}

// The text of the first <tag>...</tag> in [from, to) of `xml`, decoded.
std::string Tag(const std::string& xml, const std::string& tag, size_t from = 0,
                size_t to = std::string::npos) {
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  const size_t a = xml.find(open, from);
  if (a == std::string::npos || (to != std::string::npos && a >= to)) return "";
  const size_t b = xml.find(close, a + open.size());
  if (b == std::string::npos) return "";
  return XmlDecode(xml.substr(a + open.size(), b - a - open.size()));
}

size_t WriteBody(char* data, size_t size, size_t n, void* user) {
  auto* r = static_cast<Request*>(user);
  r->body.insert(r->body.end(), data, data + size * n);
  return size * n;
}

size_t ReadHeader(char* data, size_t size, size_t n, void* user) {
  auto* r = static_cast<Request*>(user);
  std::string line(data, size * n);
  const std::string name = "retry-after:";
  if (line.size() > name.size()) {
    std::string head = line.substr(0, name.size());
    std::transform(head.begin(), head.end(), head.begin(), ::tolower);
    if (head == name) r->retry_after_s = std::atof(line.c_str() + name.size());
  }
  return size * n;
}

bool Retriable(CURLcode code, long http) {
  switch (code) {
    case CURLE_OK:
      return http == 500 || http == 502 || http == 503 || http == 504;
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_COULDNT_CONNECT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
      return true;
    default:
      return false;
  }
}

}  // namespace

struct S3Client::Impl {
  S3Config config;
  CURLM* multi = nullptr;
  std::thread io;
  Mutex mu;
  std::deque<Request*> incoming GUARDED_BY(mu);
  bool stop GUARDED_BY(mu) = false;
  std::atomic<int64_t> requests{0}, bytes{0}, retries{0}, errors{0};
  std::mt19937_64 jitter{std::random_device{}()};

  void Submit(Request* r) {
    {
      MutexLock lock(&mu);
      incoming.push_back(r);
    }
    curl_multi_wakeup(multi);
  }

  static void Complete(Request* r, Status st) {
    std::lock_guard<std::mutex> lock(r->mu);
    r->status = std::move(st);
    r->done = true;
    r->cv.notify_all();
  }

  void Start(Request* r) {
    r->body.clear();
    r->retry_after_s = -1;
    r->http = 0;
    CURL* e = curl_easy_init();
    r->easy = e;
    curl_easy_setopt(e, CURLOPT_URL, r->url.c_str());
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, WriteBody);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, ReadHeader);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    // A server that stalls mid-body: under 1 byte/s for 10 s is a timeout.
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, 10L);
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
    curl_multi_add_handle(multi, e);
  }

  void Release(Request* r) {
    curl_multi_remove_handle(multi, r->easy);
    curl_easy_cleanup(r->easy);
    r->easy = nullptr;
    curl_slist_free_all(r->headers);
    r->headers = nullptr;
  }

  // A finished transfer: done, failed for good, or queued again.
  void Finish(Request* r, CURLcode code, std::vector<Request*>* later) {
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->http);
    Release(r);
    bytes.fetch_add(static_cast<int64_t>(r->body.size()));
    if (Retriable(code, r->http) && ++r->attempt < kMaxAttempts) {
      retries.fetch_add(1);
      double delay = std::min(5.0, 0.05 * (1 << r->attempt)) *
                     std::uniform_real_distribution<double>(0.5, 1.5)(jitter);
      if (r->retry_after_s >= 0) delay = std::min(30.0, r->retry_after_s);
      r->start_at_ns = NowNs() + static_cast<int64_t>(delay * 1e9);
      later->push_back(r);
      return;
    }
    Status st;
    if (code != CURLE_OK) {
      st = IoError("cannot read " + r->what + ": " + curl_easy_strerror(code) + " (after " +
                   std::to_string(r->attempt) + " attempts)");
    } else if (r->http != 200 && r->http != 206) {
      const std::string xml(r->body.begin(), r->body.end());
      const std::string s3code = Tag(xml, "Code"), message = Tag(xml, "Message");
      std::string text = r->what + ": HTTP " + std::to_string(r->http);
      if (!s3code.empty()) text += " " + s3code;
      if (!message.empty()) text += " (" + message + ")";
      if (r->http == 403) {
        text += config.sign ? "; signed with credentials from " + config.credentials_from
                            : "; the request was unsigned (" + config.credentials_from + ")";
      }
      st = DataError(text);
    }
    if (!st.ok()) errors.fetch_add(1);
    Complete(r, st);
  }

  void Loop() {
    std::vector<Request*> later;  // waiting to be retried
    int running = 0;
    while (true) {
      std::deque<Request*> fresh;
      bool stopping;
      {
        MutexLock lock(&mu);
        fresh.swap(incoming);
        stopping = stop;
      }
      if (stopping) {
        // The owner is going: nobody can be waiting on a transfer still in
        // the multi handle (the source outlives its readers), but a request
        // queued or waiting to be retried is answered.
        for (Request* r : fresh) Complete(r, Cancelled("the S3 client was closed"));
        for (Request* r : later) Complete(r, Cancelled("the S3 client was closed"));
        return;
      }
      for (Request* r : fresh) Start(r);
      const int64_t now = NowNs();
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
      curl_multi_perform(multi, &running);
      int left = 0;
      while (CURLMsg* m = curl_multi_info_read(multi, &left)) {
        if (m->msg != CURLMSG_DONE) continue;
        Request* r = nullptr;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &r);
        Finish(r, m->data.result, &later);
      }
      const int wait_ms = static_cast<int>(std::max<int64_t>(1, (next_due - NowNs()) / 1000000));
      curl_multi_poll(multi, nullptr, 0, std::min(wait_ms, 100), nullptr);
    }
  }
};

Result<std::unique_ptr<S3Client>> S3Client::Create(S3Config config) {
  static const bool initialised = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  if (!initialised) return Internal("libcurl could not be initialised");
  auto impl = std::make_unique<Impl>();
  impl->config = std::move(config);
  impl->multi = curl_multi_init();
  if (impl->multi == nullptr) return Internal("libcurl could not make a multi handle");
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
  curl_multi_wakeup(impl_->multi);
  impl_->io.join();
  curl_multi_cleanup(impl_->multi);
}

Status S3Client::Get(const std::string& bucket, const std::string& key, uint64_t offset,
                     int64_t length, std::vector<uint8_t>* out) {
  Request r;
  r.url = impl_->config.ObjectUrl(bucket, key);
  r.what = "s3://" + bucket + "/" + key;
  if (offset > 0 || length >= 0) {
    r.range = std::to_string(offset) + "-" +
              (length >= 0 ? std::to_string(offset + static_cast<uint64_t>(length) - 1) : "");
    if (length == 0) {
      out->clear();
      return Status::OK();
    }
  }
  impl_->Submit(&r);
  std::unique_lock<std::mutex> lock(r.mu);
  r.cv.wait(lock, [&] { return r.done; });
  if (!r.status.ok()) return r.status;
  if (r.http == 200 && !r.range.empty()) {
    // The server sent the whole object: keep the range asked for.
    const uint64_t end = length >= 0 ? std::min<uint64_t>(r.body.size(), offset + length)
                                     : r.body.size();
    if (offset > r.body.size()) return DataError(r.what + ": shorter than the range asked for");
    r.body = std::vector<uint8_t>(r.body.begin() + offset, r.body.begin() + end);
  }
  if (length >= 0 && r.body.size() != static_cast<uint64_t>(length)) {
    return DataError(r.what + ": " + std::to_string(r.body.size()) + " bytes where " +
                     std::to_string(length) + " were asked for");
  }
  *out = std::move(r.body);
  return Status::OK();
}

Result<std::vector<S3Object>> S3Client::List(const std::string& bucket, const std::string& prefix) {
  std::vector<S3Object> objects;
  std::string token;
  for (int page = 0; page < 1000000; ++page) {
    Request r;
    r.url = impl_->config.BucketUrl(bucket) + "?list-type=2&prefix=" + UriEncode(prefix, false);
    if (!token.empty()) r.url += "&continuation-token=" + UriEncode(token, false);
    r.what = "s3://" + bucket + "/" + prefix + " (listing)";
    impl_->Submit(&r);
    {
      std::unique_lock<std::mutex> lock(r.mu);
      r.cv.wait(lock, [&] { return r.done; });
    }
    if (!r.status.ok()) return r.status;
    const std::string xml(r.body.begin(), r.body.end());
    for (size_t at = xml.find("<Contents>"); at != std::string::npos;
         at = xml.find("<Contents>", at + 1)) {
      const size_t end = xml.find("</Contents>", at);
      S3Object o;
      o.key = Tag(xml, "Key", at, end);
      o.size = std::atoll(Tag(xml, "Size", at, end).c_str());
      o.etag = Tag(xml, "ETag", at, end);
      objects.push_back(std::move(o));
    }
    if (Tag(xml, "IsTruncated") != "true") break;
    token = Tag(xml, "NextContinuationToken");
    if (token.empty()) return DataError(r.what + ": a truncated listing without a continuation token");
  }
  std::sort(objects.begin(), objects.end(),
            [](const S3Object& a, const S3Object& b) { return a.key < b.key; });
  return objects;
}

S3ClientStats S3Client::Stats() const {
  return {impl_->requests.load(), impl_->bytes.load(), impl_->retries.load(), impl_->errors.load()};
}

const S3Config& S3Client::config() const { return impl_->config; }

}  // namespace nostall
