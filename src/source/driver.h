// The seam every source plugs into.
//
// A driver claims a dataset path by its scheme or shape and opens it. The
// registry (registry.cc) asks the drivers in order and the first that claims
// the path opens it, so a new kind of storage is one new file in src/source/
// defining `SourceDriver FooDriver()` and one line in NOSTALL_SOURCE_DRIVERS.
// Every driver passes the typed conformance suite in source_conformance_test.cc.
#ifndef NOSTALL_SOURCE_DRIVER_H_
#define NOSTALL_SOURCE_DRIVER_H_

#include <memory>
#include <string>
#include <vector>

#include "nostall/source.h"

namespace nostall {

struct SourceDriver {
  const char* kind;  // Source::kind() of what it opens, e.g. "tar-shards"
  // Whether this driver reads `uri`. Cheap: a prefix or suffix test, or one stat().
  bool (*claims)(const std::string& uri);
  Result<std::unique_ptr<Source>> (*open)(const std::string& uri, const SourceOptions& options);
  // Reads go through the local page cache: Source::Evict means something,
  // and the storage throttle (which emulates slow storage on a fast disk)
  // may wrap it.
  bool local_files;
};

// The registered drivers, in the order they are asked.
const std::vector<SourceDriver>& SourceDrivers();

// The drivers, one line each (X(Name) defines `SourceDriver NameDriver()`).
#define NOSTALL_SOURCE_DRIVERS(X) \
  X(S3Folder)                     \
  X(S3Tar)                        \
  X(ImageFolder)                  \
  X(TarShards)

#define NOSTALL_DECLARE_SOURCE_DRIVER(name) SourceDriver name##Driver();
NOSTALL_SOURCE_DRIVERS(NOSTALL_DECLARE_SOURCE_DRIVER)
#undef NOSTALL_DECLARE_SOURCE_DRIVER

}  // namespace nostall

#endif  // NOSTALL_SOURCE_DRIVER_H_
