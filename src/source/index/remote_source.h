// What the remote drivers (remote_folder.cc, remote_tar.cc) share: an indexed
// source whose items are whole objects or byte ranges of objects in one
// object store (S3, a web server), read blocking or with many reads in
// flight (Source::ReadAsync).
#ifndef NOSTALL_SOURCE_INDEX_REMOTE_SOURCE_H_
#define NOSTALL_SOURCE_INDEX_REMOTE_SOURCE_H_

#include <memory>
#include <string>

#include "source/index/indexed_source.h"
#include "store/object_store.h"

namespace nostall {

// What the remote drivers claim by (a URI's scheme, and whether it names
// one tar shard rather than a folder).
inline bool IsS3Uri(const std::string& uri) { return uri.rfind("s3://", 0) == 0; }
inline bool IsHttpUri(const std::string& uri) {
  return uri.rfind("http://", 0) == 0 || uri.rfind("https://", 0) == 0;
}
inline bool NamesATar(const std::string& uri) {
  return uri.size() >= 4 && uri.compare(uri.size() - 4, 4, ".tar") == 0;
}

class RemoteSource : public IndexSource {
 public:
  std::optional<StorageStats> storage_stats() const override { return store_->Stats(); }
  bool ReadsAsync() const override { return store_->ReadsAsync(); }
  double RequestLatencySeconds() const override { return store_->LatencySeconds(); }
  void CancelReads() const override { store_->CancelAll(); }

  Status Read(int64_t i, std::vector<uint8_t>* out) const override {
    NOSTALL_ASSIGN_OR_RETURN(Span s, Where(i));
    return store_->Read(s.key, s.offset, s.length, out, s.most);
  }
  void ReadAsync(int64_t i, std::vector<uint8_t> buffer, ReadDone done) const override {
    Result<Span> s = Where(i);
    if (!s.ok()) return done(s.status(), std::move(buffer));
    store_->ReadAsync(s.value().key, s.value().offset, s.value().length, std::move(buffer), std::move(done),
                      s.value().most);
  }

 protected:
  RemoteSource(std::unique_ptr<store::ObjectStore> store, IndexViewPtr index, RecordTable records,
               uint64_t max_item_bytes)
      : IndexSource(std::move(index), std::move(records)),
        store_(std::move(store)),
        max_item_bytes_(max_item_bytes) {}
  // Shards indexed as they are read, through `store`.
  RemoteSource(std::unique_ptr<store::ObjectStore> store, std::shared_ptr<LazyShards> lazy,
               uint64_t max_item_bytes)
      : IndexSource(std::move(lazy)), store_(std::move(store)), max_item_bytes_(max_item_bytes) {}
  ~RemoteSource() override {
    if (lazy_) lazy_->Stop();  // its reads go through store_
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

  const std::unique_ptr<store::ObjectStore> store_;
  const uint64_t max_item_bytes_;
};

}  // namespace nostall

#endif  // NOSTALL_SOURCE_INDEX_REMOTE_SOURCE_H_
