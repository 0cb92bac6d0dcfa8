// The http store: a dataset behind any web server or CDN (object_store.h).
// Reads are ranged GETs through the S3 client's transport in its plain mode
// (kept-alive connections, many in flight, retries, timeouts, redirects
// followed); an object's size and version come from a HEAD (Content-Length,
// ETag or Last-Modified); a folder is listed from its index page's links
// (http_listing.h), subfolders followed. Servers that do not answer Range
// requests are named as such by the first ranged read.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <system_error>
#include <thread>

#include "store/http_listing.h"
#include "store/object_store.h"
#include "store/s3_client.h"
#include "store/s3_config.h"

namespace nostall::store {
namespace {

constexpr int kMaxDepth = 32;                        // subfolders followed
constexpr size_t kMaxListed = 10'000'000;            // objects one listing may hold
constexpr uint64_t kMaxIndexPage = uint64_t{64} << 20;  // bytes of one index page
constexpr size_t kHeadsInFlight = 16;

// A web server's mark of a file's bytes: its ETag, else Last-Modified and the size.
std::string Tag(const S3Client::Head& h) {
  return !h.etag.empty() ? h.etag : h.last_modified + "/" + std::to_string(h.size);
}

class HttpObjectStore final : public ObjectStore {
 public:
  HttpObjectStore(std::unique_ptr<S3Client> client, std::string base)
      : client_(std::move(client)), base_(std::move(base)) {}

  const char* name() const override { return "http"; }
  std::string Uri(const std::string& key) const override { return base_ + "/" + key; }
  std::string Describe() const override { return client_->config().Describe(); }

  Result<std::vector<ObjectInfo>> List(const std::string& prefix) const override {
    const size_t slash = prefix.rfind('/');
    const std::string folder = slash == std::string::npos ? "" : prefix.substr(0, slash + 1);
    std::vector<std::string> keys;
    NOSTALL_RETURN_IF_ERROR(ListFolder(folder, prefix, 0, &keys));
    std::sort(keys.begin(), keys.end());
    return StatEach(keys);
  }

  Result<std::vector<std::string>> ListFolders(const std::string& prefix) const override {
    NOSTALL_ASSIGN_OR_RETURN(std::vector<std::string> names, IndexPage(prefix));
    std::vector<std::string> out;
    for (const std::string& n : names) {
      if (n.back() == '/') out.push_back(prefix + n);
    }
    return out;
  }

  // Each List already states its files with kHeadsInFlight HEADs at once.
  int ListsAtOnce() const override { return 4; }

  Result<ObjectInfo> Stat(const std::string& key) const override {
    NOSTALL_ASSIGN_OR_RETURN(S3Client::Head h, client_->HeadOf("", key));
    if (h.size < 0) {
      return DataError(Uri(key) + ": the server gave no size (Content-Length) for it [" + Describe() + "]");
    }
    return ObjectInfo{key, static_cast<uint64_t>(h.size), VersionOfTag(Tag(h)), Tag(h)};
  }

  Status Read(const std::string& key, uint64_t offset, int64_t length, std::vector<uint8_t>* out,
              uint64_t most) const override {
    return client_->Get("", key, offset, length, out, most);
  }
  Status ReadIfThere(const std::string& key, uint64_t most, std::vector<uint8_t>* out) const override {
    return client_->GetIfThere("", key, most, out);
  }
  Result<std::vector<ObjectInfo>> StatAll(const std::vector<std::string>& keys) const override {
    return StatEach(keys);
  }
  void ReadAsync(const std::string& key, uint64_t offset, int64_t length, std::vector<uint8_t> buffer,
                 Done done, uint64_t most) const override {
    client_->GetAsync("", key, offset, length, std::move(buffer), std::move(done), most);
  }
  bool ReadsAsync() const override { return true; }
  void CancelAll() const override { client_->CancelAll(); }
  std::optional<StorageStats> Stats() const override { return client_->Stats(); }
  double LatencySeconds() const override { return client_->LatencySeconds(); }

 private:
  // The files under `folder` (a key ending in '/', or "" for the root)
  // whose keys start with `prefix`, from its index page and its subfolders'.
  Status ListFolder(const std::string& folder, const std::string& prefix, int depth,
                    std::vector<std::string>* keys) const {
    if (depth > kMaxDepth) return Status::OK();
    NOSTALL_ASSIGN_OR_RETURN(std::vector<std::string> names, IndexPage(folder));
    for (const std::string& name : names) {
      const std::string key = folder + name;
      const size_t common = std::min(key.size(), prefix.size());
      if (key.compare(0, common, prefix, 0, common) != 0) continue;
      if (name.back() == '/') {
        NOSTALL_RETURN_IF_ERROR(ListFolder(key, prefix, depth + 1, keys));
      } else if (key.size() >= prefix.size()) {
        if (keys->size() >= kMaxListed) return ResourceExhausted(Uri(folder) + ": over 10 million files listed");
        keys->push_back(key);
      }
    }
    return Status::OK();
  }

  // The entries of `folder`'s index page (http_listing.h).
  Result<std::vector<std::string>> IndexPage(const std::string& folder) const {
    std::vector<uint8_t> page;
    Status s = client_->GetIfThere("", folder, kMaxIndexPage, &page);
    if (s.code() == StatusCode::kNotFound) {
      return NotFound(Uri(folder) + ": no such folder (HTTP 404): a folder is listed from its index page; "
                      "name the files with a brace pattern (train-{00000..00099}.parquet) where the server has none");
    }
    NOSTALL_RETURN_IF_ERROR(s);
    return IndexLinks(std::string_view(reinterpret_cast<const char*>(page.data()), page.size()));
  }

  // Each key's size and version: HEADs, kHeadsInFlight at a time (fewer
  // when the process may start no more threads: slower, not an error).
  Result<std::vector<ObjectInfo>> StatEach(const std::vector<std::string>& keys) const {
    std::vector<Result<ObjectInfo>> each(keys.size(), Result<ObjectInfo>(ObjectInfo{}));
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    auto work = [&] {
      for (size_t k; !failed.load() && (k = next.fetch_add(1)) < keys.size();) {
        each[k] = Stat(keys[k]);
        if (!each[k].ok()) failed.store(true);
      }
    };
    std::vector<std::thread> threads;
    try {
      for (size_t t = 1; t < std::min(kHeadsInFlight, keys.size()); ++t) threads.emplace_back(work);
    } catch (const std::system_error&) {
    }
    work();
    for (auto& t : threads) t.join();
    std::vector<ObjectInfo> out;
    for (auto& r : each) {
      if (!r.ok()) return r.status();
      out.push_back(std::move(r.value()));
    }
    return out;
  }

  const std::unique_ptr<S3Client> client_;
  const std::string base_;  // scheme://host[:port]
};

bool HttpClaims(const std::string& uri) { return uri.rfind("http://", 0) == 0 || uri.rfind("https://", 0) == 0; }

Result<Located> HttpOpen(const std::string& uri, const nlohmann::json& options, const char* who) {
  if (uri.find_first_of("?#") != std::string::npos) {
    return InvalidArgument(std::string(who) + ": " + uri + " has a query or a fragment; an http(s) dataset is "
                           "named by its path (wildcards: * and [...])");
  }
  const size_t host = uri.find("://") + 3;
  const size_t path = uri.find('/', host);
  if (path == host || host >= uri.size()) return InvalidArgument(std::string(who) + ": no host in " + uri);
  const std::string base = uri.substr(0, path);
  std::string key = path == std::string::npos ? "" : PercentDecode(uri.substr(path + 1));
  int attempts = 0;
  if (options.is_object() && options.contains("max_attempts") && options["max_attempts"].is_number_integer()) {
    attempts = options["max_attempts"].get<int>();
  }
  NOSTALL_ASSIGN_OR_RETURN(
      S3Config config,
      PlainHttpConfig(base, attempts, [](const char* name) { return static_cast<const char*>(std::getenv(name)); }));
  NOSTALL_ASSIGN_OR_RETURN(std::unique_ptr<S3Client> client, S3Client::Create(std::move(config)));
  return Located{std::make_unique<HttpObjectStore>(std::move(client), base), std::move(key)};
}

}  // namespace

StoreKind HttpStore() { return {"http", HttpClaims, HttpOpen}; }

}  // namespace nostall::store
