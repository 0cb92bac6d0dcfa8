// Where a dataset's bytes live, apart from how they are laid out: an object
// store lists objects, states one, and reads a byte range of one, blocking
// or with many reads in flight. Formats (src/source: Parquet and Arrow IPC
// files, ...) read through this seam, so a format is written once over every
// store and a store is one file here and one line in NOSTALL_OBJECT_STORES:
//
//   local   a path on this machine (pread; a folder's files, glob patterns)
//   s3      s3://BUCKET/KEY (ListObjectsV2, ranged GETs, SigV4; s3_client.h)
//   http    http(s)://HOST/PATH: any web server or CDN that answers Range
//           requests (nginx, Apache, Caddy, a CDN); a folder is listed from
//           its index page (the <a href> links of an autoindex); files
//           named by a brace pattern need no listing
//
// Every store passes the conformance suite in store_conformance_test.cc
// (local files, a real S3 server, a real web server). Keys are relative to
// the store's root, '/'-separated; Uri(key) is how a user names the object.
#ifndef NOSTALL_STORE_OBJECT_STORE_H_
#define NOSTALL_STORE_OBJECT_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nostall/stats.h"
#include "nostall/status.h"

namespace nostall {
class S3Client;
}  // namespace nostall

namespace nostall::store {

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
  // Changes when the object's bytes may have: an ETag's hash, a file's
  // mtime and inode; 0 when the store cannot tell.
  int64_t version = 0;
  // The store's own mark of the bytes as it gives it (S3's and a web
  // server's ETag, else Last-Modified and the size; "" for local files).
  std::string tag;
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  // "local", "s3" or "http": the store's name in NOSTALL_OBJECT_STORES.
  virtual const char* name() const = 0;
  // The object `key` as a user names it ("s3://b/k", "https://h/k", "/d/k").
  virtual std::string Uri(const std::string& key) const = 0;
  // How the store is reached ("endpoint ..., signed (...)"), for errors; "" for local files.
  virtual std::string Describe() const { return ""; }

  // Every object whose key starts with `prefix`, at any depth, in byte order
  // of key. A prefix ending in '/' is a folder.
  virtual Result<std::vector<ObjectInfo>> List(const std::string& prefix) const = 0;
  // The folders right under `prefix` (a folder: "" or ending in '/'), each
  // as a key ending in '/', in byte order: S3's common prefixes, a web
  // server's index page's subfolder links, a local folder's subfolders. By
  // default taken from List(prefix).
  virtual Result<std::vector<std::string>> ListFolders(const std::string& prefix) const;
  // How many List calls are worth running at once (a driver listing many
  // folders): one where a listing is local work; more where each is round
  // trips to a server.
  virtual int ListsAtOnce() const { return 1; }
  // The objects matching `pattern` (fnmatch with FNM_PATHNAME: '*' stays
  // within one folder), in key order: listed from the pattern's fixed
  // prefix; a pattern with no wildcard is that object (NotFound when not there).
  virtual Result<std::vector<ObjectInfo>> Match(const std::string& pattern) const;
  // One object's size and version; NotFound when there is none.
  virtual Result<ObjectInfo> Stat(const std::string& key) const = 0;
  // Each of `keys` stated, in their order (NotFound naming the first that
  // is not there): by default one listing of their common prefix (one
  // request on S3); the http store asks each, many at once.
  virtual Result<std::vector<ObjectInfo>> StatAll(const std::vector<std::string>& keys) const;

  // [offset, offset + length) of `key` (length < 0: to its end, at most
  // `most` bytes when most > 0). Never takes in more than asked for; fewer
  // bytes than a range asked for is an error naming the object.
  virtual Status Read(const std::string& key, uint64_t offset, int64_t length, std::vector<uint8_t>* out,
                      uint64_t most = 0) const = 0;
  // Exactly [offset, offset + length) of `key` into `out` (the local store
  // reads straight into it; the others copy a Read).
  virtual Status ReadExact(const std::string& key, uint64_t offset, uint64_t length, uint8_t* out) const;
  // The same, without blocking when ReadsAsync(): `done` is called once (on
  // the store's I/O thread: keep it short) with the status and the bytes
  // (`buffer`'s storage reused). Otherwise it reads on the caller's thread.
  using Done = std::function<void(Status, std::vector<uint8_t>)>;
  virtual void ReadAsync(const std::string& key, uint64_t offset, int64_t length, std::vector<uint8_t> buffer,
                         Done done, uint64_t most = 0) const;
  // The whole object `key` (at most `most` bytes), or NotFound when it is
  // not there (a file that may be, as an index beside the data).
  virtual Status ReadIfThere(const std::string& key, uint64_t most, std::vector<uint8_t>* out) const {
    return Read(key, 0, -1, out, most);
  }
  // Writes `bytes` as object `key` (an index beside the data) where
  // Writable(); a store that cannot write (a web server) says so.
  virtual Status Write(const std::string& key, std::string bytes) const;
  virtual bool Writable() const { return false; }
  // Whether a read is a request to a server (true: keep many in flight).
  virtual bool ReadsAsync() const { return false; }
  // Answers every read in flight with Cancelled, promptly.
  virtual void CancelAll() const {}
  virtual std::optional<StorageStats> Stats() const { return std::nullopt; }
  // Recent request latency without queueing (seconds; 0 for local files).
  virtual double LatencySeconds() const { return 0; }
};

// A URI split into the store that holds it and the key within.
struct Located {
  std::unique_ptr<ObjectStore> store;
  std::string key;  // may be a pattern or a folder ("train/", "*.arrow")
};

// The store for `uri` (by its scheme: s3://, http://, https://, else a local
// path) and the key it names. `options`: the store's own options as a spec
// gives them (the S3 ones for s3://: endpoint, region, ...; max_attempts for
// http(s)://); `who` names the caller (a driver) in errors.
Result<Located> OpenStore(const std::string& uri, const nlohmann::json& options, const char* who);

// The registered stores' names and their claims, in the order they are asked.
struct StoreKind {
  const char* name;
  bool (*claims)(const std::string& uri);
  Result<Located> (*open)(const std::string& uri, const nlohmann::json& options, const char* who);
};
const std::vector<StoreKind>& StoreKinds();

// An S3 store over a client made already (the S3 image-folder driver lists
// with S3's own folder listings first), reading `bucket`.
std::unique_ptr<ObjectStore> MakeS3Store(std::unique_ptr<S3Client> client, std::string bucket);

// An object's version from the mark its store gives (an ETag): its FNV-1a hash.
int64_t VersionOfTag(const std::string& tag);

// Whether `uri` is not on this machine (s3://, http(s)://): a store that
// reads over a network.
bool IsRemoteUri(const std::string& uri);

#define NOSTALL_OBJECT_STORES(X) \
  X(S3)                          \
  X(Http)                        \
  X(Local)

#define NOSTALL_DECLARE_OBJECT_STORE(name) StoreKind name##Store();
NOSTALL_OBJECT_STORES(NOSTALL_DECLARE_OBJECT_STORE)
#undef NOSTALL_DECLARE_OBJECT_STORE

}  // namespace nostall::store

#endif  // NOSTALL_STORE_OBJECT_STORE_H_
