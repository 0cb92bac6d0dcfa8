// An S3 client over libcurl's multi interface: one I/O thread drives every
// request in flight over kept-alive connections; a caller either blocks on
// its own request (Get) or is called back when it is done (GetAsync), so
// hundreds of reads can be in flight without a thread each. Requests are signed with libcurl's SigV4 (CURLOPT_AWS_SIGV4)
// when the configuration has keys. Failures that may pass (HTTP 500, 502,
// 503, 504, timeouts, connections reset or bodies cut short) are retried with
// jittered exponential backoff, honouring Retry-After, a bounded number of
// times; the rest (403, 404, a final failure) are errors naming the object
// and the HTTP status, never the keys.
#ifndef NOSTALL_STORE_S3_CLIENT_H_
#define NOSTALL_STORE_S3_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nostall/stats.h"
#include "nostall/status.h"
#include "store/s3_config.h"
#include "store/s3_response.h"

namespace nostall {

class S3Client {
 public:
  static Result<std::unique_ptr<S3Client>> Create(S3Config config);
  ~S3Client();

  // The bytes of `key`, or of [offset, offset + length) of it (length < 0:
  // to the end). Blocks this caller until the request is done. No more than
  // the range (or, for a whole object, `most` bytes: its listed size) is
  // ever taken in: a server sending more is stopped there and the read is
  // an error saying so.
  Status Get(const std::string& bucket, const std::string& key, uint64_t offset, int64_t length,
             std::vector<uint8_t>* out, uint64_t most = 0);
  // The same, without blocking: `done` is called once, on the client's I/O
  // thread (keep it short), with the status and the bytes (`buffer`'s
  // storage reused). After CancelAll, or as the client closes, requests not
  // yet done are answered Cancelled.
  using Done = std::function<void(Status, std::vector<uint8_t>)>;
  void GetAsync(const std::string& bucket, const std::string& key, uint64_t offset, int64_t length,
                std::vector<uint8_t> buffer, Done done, uint64_t most = 0);
  // The whole object `key` (at most `most` bytes), or NotFound when there is
  // no such object (a file that may be there, as an index beside the data).
  Status GetIfThere(const std::string& bucket, const std::string& key, uint64_t most,
                    std::vector<uint8_t>* out);
  // What a HEAD of `key` answers: its size (-1: not given) and tags.
  struct Head {
    int64_t size = -1;
    std::string etag, last_modified;
  };
  // NotFound when there is no such object.
  Result<Head> HeadOf(const std::string& bucket, const std::string& key);
  // Writes `bytes` as object `key` (one PUT, signed with its SHA-256).
  Status Put(const std::string& bucket, const std::string& key, std::string bytes);
  // Answers every request not yet done with Cancelled, promptly (a Loader
  // shutting down does not wait out retries and timeouts).
  void CancelAll();
  // Every object under `prefix` (ListObjectsV2, all pages), in key order.
  Result<std::vector<S3Object>> List(const std::string& bucket, const std::string& prefix);
  // The "folders" right under `prefix` (ListObjectsV2 with delimiter '/',
  // all pages: each common prefix, ending in '/'), in key order.
  Result<std::vector<std::string>> ListFolders(const std::string& bucket, const std::string& prefix);

  StorageStats Stats() const;
  // Recent request latency without queueing: the least of each window of
  // answered requests (seconds; 0 before the first).
  double LatencySeconds() const;
  const S3Config& config() const;

  struct Impl;

 private:
  explicit S3Client(std::unique_ptr<Impl> impl);
  // ListObjectsV2 page by page; `page` gets each page, read and checked.
  Status ListPages(const std::string& bucket, const std::string& prefix, bool folders,
                   const std::function<void(ListPage)>& page);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nostall

#endif  // NOSTALL_STORE_S3_CLIENT_H_
