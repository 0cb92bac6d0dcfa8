// The S3 store: s3://BUCKET/KEY through one S3Client (object_store.h).
// An object's version is its ETag's hash, as its listing gives it.
#include <memory>

#include "store/object_store.h"
#include "store/s3_client.h"
#include "store/s3_config.h"

namespace nostall::store {
namespace {

class S3ObjectStore final : public ObjectStore {
 public:
  S3ObjectStore(std::unique_ptr<S3Client> client, std::string bucket)
      : client_(std::move(client)), bucket_(std::move(bucket)) {}

  const char* name() const override { return "s3"; }
  std::string Uri(const std::string& key) const override { return "s3://" + bucket_ + "/" + key; }
  std::string Describe() const override { return client_->config().Describe(); }

  Result<std::vector<ObjectInfo>> List(const std::string& prefix) const override {
    NOSTALL_ASSIGN_OR_RETURN(std::vector<S3Object> listed, client_->List(bucket_, prefix));
    std::vector<ObjectInfo> out;
    out.reserve(listed.size());
    for (S3Object& o : listed) {
      const int64_t version = VersionOfTag(o.etag);
      out.push_back({std::move(o.key), static_cast<uint64_t>(o.size), version, std::move(o.etag)});
    }
    return out;
  }

  Result<std::vector<std::string>> ListFolders(const std::string& prefix) const override {
    return client_->ListFolders(bucket_, prefix);  // one listing with a delimiter
  }

  // A listing is one page of 1,000 keys per round trip: ImageNet's 1.28 M
  // objects listed in one sequence take ~1,300 of them.
  int ListsAtOnce() const override { return 32; }

  // From a listing of the key as a prefix, so that its version is the
  // listing's (a HEAD's ETag may be written otherwise).
  Result<ObjectInfo> Stat(const std::string& key) const override {
    NOSTALL_ASSIGN_OR_RETURN(std::vector<ObjectInfo> listed, List(key));
    for (ObjectInfo& o : listed) {
      if (o.key == key) return std::move(o);
    }
    return NotFound(Uri(key) + ": no such object");
  }

  Status Read(const std::string& key, uint64_t offset, int64_t length, std::vector<uint8_t>* out,
              uint64_t most) const override {
    return client_->Get(bucket_, key, offset, length, out, most);
  }
  void ReadAsync(const std::string& key, uint64_t offset, int64_t length, std::vector<uint8_t> buffer,
                 Done done, uint64_t most) const override {
    client_->GetAsync(bucket_, key, offset, length, std::move(buffer), std::move(done), most);
  }
  Status ReadIfThere(const std::string& key, uint64_t most, std::vector<uint8_t>* out) const override {
    return client_->GetIfThere(bucket_, key, most, out);
  }
  bool Writable() const override { return true; }
  Status Write(const std::string& key, std::string bytes) const override {
    return client_->Put(bucket_, key, std::move(bytes));
  }
  bool ReadsAsync() const override { return true; }
  void CancelAll() const override { client_->CancelAll(); }
  std::optional<StorageStats> Stats() const override { return client_->Stats(); }
  double LatencySeconds() const override { return client_->LatencySeconds(); }

 private:
  const std::unique_ptr<S3Client> client_;
  const std::string bucket_;
};

bool S3Claims(const std::string& uri) { return uri.rfind("s3://", 0) == 0; }

Result<Located> S3Open(const std::string& uri, const nlohmann::json& options, const char* who) {
  NOSTALL_ASSIGN_OR_RETURN(S3Location loc, ParseS3Uri(uri));
  NOSTALL_ASSIGN_OR_RETURN(S3Config config,
                           ResolveS3Config(options.is_null() ? nlohmann::json::object() : options, who));
  NOSTALL_ASSIGN_OR_RETURN(std::unique_ptr<S3Client> client, S3Client::Create(std::move(config)));
  return Located{std::make_unique<S3ObjectStore>(std::move(client), loc.bucket), loc.key};
}

}  // namespace

StoreKind S3Store() { return {"s3", S3Claims, S3Open}; }

std::unique_ptr<ObjectStore> MakeS3Store(std::unique_ptr<S3Client> client, std::string bucket) {
  return std::make_unique<S3ObjectStore>(std::move(client), std::move(bucket));
}

}  // namespace nostall::store
