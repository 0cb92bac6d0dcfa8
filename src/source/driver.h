// The seam every source plugs into.
//
// A driver claims a dataset path by its scheme or shape and opens it. The
// registry (registry.cc) opens a path with the driver the spec names, else
// the first that claims it, so a new kind of storage is one new file in
// src/source/ defining `SourceDriver FooDriver()` and one line in
// NOSTALL_SOURCE_DRIVERS. Every driver passes the typed conformance suite in
// source_conformance_test.cc.
//
// A driver owns its part of the loader spec, as a TensorStore driver owns
// its spec: `"source": {"uri", "driver", "options": {...}}`, where the
// options are the driver's alone (SourceOptions::driver_options). It reads
// and checks them (`options`, when the spec is read, so a bad option is an
// error before anything is opened) and reads them again when it opens the
// dataset. A new option of one driver is a change to that driver's file and
// its tests; the loader spec does not know it.
#ifndef NOSTALL_SOURCE_DRIVER_H_
#define NOSTALL_SOURCE_DRIVER_H_

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nostall/source.h"

namespace nostall {

struct SourceDriver {
  // Source::kind() of what it opens, and its name in a spec ("tar-shards").
  const char* kind;
  // Whether this driver reads `uri`. Cheap: a prefix or suffix test, or one stat().
  bool (*claims)(const std::string& uri);
  Result<std::unique_ptr<Source>> (*open)(const std::string& uri, const SourceOptions& options);
  // The driver's options as a spec gives them (a JSON object, maybe empty)
  // checked, and returned with every option spelled out; an error names the
  // option and the driver. `cached`: the loader has a cache of what it
  // reads (a default may follow it: the local drivers' drop_page_cache).
  Result<nlohmann::json> (*options)(const nlohmann::json& given, bool cached);
};

// The registered drivers, in the order they are asked.
const std::vector<SourceDriver>& SourceDrivers();

// The driver that reads `uri`: the one named `driver` (an error listing the
// names when there is none of that name), else the first that claims it;
// null when none does (no such path: OpenSource says so).
Result<const SourceDriver*> FindSourceDriver(const std::string& uri, const std::string& driver);

// A spec's source read by its driver: `given` (the "options" object)
// checked by the driver of `uri` (or the one named `*driver`, which is set
// to the driver found), every option spelled out. A path nothing claims
// yet (a folder not there) is checked as a local one.
Result<nlohmann::json> ResolveSourceOptions(const std::string& uri, std::string* driver,
                                            const nlohmann::json& given, bool cached);

// SourceOptions::driver_options parsed (an InvalidArgument naming the
// driver when it is not a JSON object).
Result<nlohmann::json> DriverOptionsJson(const SourceOptions& options, const char* driver);

// The drivers, one line each (X(Name) defines `SourceDriver NameDriver()`).
#define NOSTALL_SOURCE_DRIVERS(X) \
  X(Parquet)                      \
  X(Arrow)                        \
  X(S3Folder)                     \
  X(S3Tar)                        \
  X(HttpTar)                      \
  X(HttpFolder)                   \
  X(ImageFolder)                  \
  X(TarShards)                    \
  X(Coco)

#define NOSTALL_DECLARE_SOURCE_DRIVER(name) SourceDriver name##Driver();
NOSTALL_SOURCE_DRIVERS(NOSTALL_DECLARE_SOURCE_DRIVER)
#undef NOSTALL_DECLARE_SOURCE_DRIVER

}  // namespace nostall

#endif  // NOSTALL_SOURCE_DRIVER_H_
