// What the S3 drivers (s3_folder.cc, s3_tar.cc) share: an indexed source
// whose items are whole objects or byte ranges of objects, read through one
// S3Client, blocking or with many reads in flight (Source::ReadAsync).
#ifndef NOSTALL_SOURCE_S3_SOURCE_H_
#define NOSTALL_SOURCE_S3_SOURCE_H_

#include <memory>
#include <string>

#include "source/indexed_source.h"
#include "source/s3_client.h"

namespace nostall {

class S3Source : public IndexSource {
 public:
  std::optional<StorageStats> storage_stats() const override { return client_->Stats(); }
  bool ReadsAsync() const override { return true; }
  double RequestLatencySeconds() const override { return client_->LatencySeconds(); }
  void CancelReads() const override { client_->CancelAll(); }

  Status Read(int64_t i, std::vector<uint8_t>* out) const override {
    NOSTALL_ASSIGN_OR_RETURN(Span s, Where(i));
    return client_->Get(bucket_, s.key, s.offset, s.length, out, s.most);
  }
  void ReadAsync(int64_t i, std::vector<uint8_t> buffer, ReadDone done) const override {
    Result<Span> s = Where(i);
    if (!s.ok()) return done(s.status(), std::move(buffer));
    client_->GetAsync(bucket_, s.value().key, s.value().offset, s.value().length,
                      std::move(buffer), std::move(done), s.value().most);
  }

 protected:
  S3Source(std::unique_ptr<S3Client> client, std::string bucket, IndexViewPtr index,
           RecordTable records, uint64_t max_item_bytes)
      : IndexSource(std::move(index), std::move(records)),
        client_(std::move(client)),
        bucket_(std::move(bucket)),
        max_item_bytes_(max_item_bytes) {}
  // Shards indexed as they are read, through `client`.
  S3Source(std::unique_ptr<S3Client> client, std::string bucket, std::shared_ptr<LazyShards> lazy,
           uint64_t max_item_bytes)
      : IndexSource(std::move(lazy)),
        client_(std::move(client)),
        bucket_(std::move(bucket)),
        max_item_bytes_(max_item_bytes) {}
  ~S3Source() override {
    if (lazy_) lazy_->Stop();  // its reads go through client_
  }

  // Where item `i`'s bytes are: an object, and a range of it (length -1:
  // the whole object, of at most `most` bytes: its listed size).
  struct Span {
    std::string key;
    uint64_t offset;
    int64_t length;
    uint64_t most = 0;
  };
  virtual Result<Span> Where(int64_t i) const = 0;

  const std::unique_ptr<S3Client> client_;
  const std::string bucket_;
  const uint64_t max_item_bytes_;
};

}  // namespace nostall

#endif  // NOSTALL_SOURCE_S3_SOURCE_H_
