// The local drivers' part of the spec (image-folder, tar-shards):
// `"source": {"uri": "data/train", "options": {...}}` with
//
//   throttle_bandwidth   bytes/s shared by every read, emulating slow
//                        storage on a fast disk (0: none), in [1, 1e15]
//   throttle_latency_ms  a wait before each read (concurrent reads wait
//                        side by side, as requests to remote storage do),
//                        in [0, 60000]
//   drop_page_cache      after reading an item, posix_fadvise DONTNEED, so
//                        the page cache keeps no second copy of what nostall
//                        caches, and cold storage stays cold between epochs
//                        without root; default: true when the loader has a
//                        cache, else false
//
// Read by the two drivers' `options` (when a spec is read) and by
// OpenIndexed (when they open a dataset).
#ifndef NOSTALL_SOURCE_LOCAL_OPTIONS_H_
#define NOSTALL_SOURCE_LOCAL_OPTIONS_H_

#include <memory>

#include <nlohmann/json.hpp>

#include "nostall/source.h"

namespace nostall {

struct LocalOptions {
  double throttle_bandwidth = 0;
  double throttle_latency_ms = 0;
  bool drop_page_cache = false;
};

// `given` checked (`driver` names the driver in errors).
Result<LocalOptions> ReadLocalOptions(const nlohmann::json& given, bool cached, const char* driver);
nlohmann::json LocalOptionsJson(const LocalOptions& o);

// The SourceDriver::options of a local driver.
Result<nlohmann::json> ResolveImageFolderOptions(const nlohmann::json& given, bool cached);
Result<nlohmann::json> ResolveTarShardsOptions(const nlohmann::json& given, bool cached);

// `source` wrapped in the storage throttle when the options ask for one.
std::unique_ptr<Source> Throttled(std::unique_ptr<Source> source, const LocalOptions& o);

}  // namespace nostall

#endif  // NOSTALL_SOURCE_LOCAL_OPTIONS_H_
