// A Source over local files described by an Index (index_file.h): whole
// files (an image folder) or byte spans of files (tar shards). Both local
// drivers build their Index once and open it through OpenIndexed, which keeps
// it in the index cache between runs.
#ifndef NOSTALL_SOURCE_INDEXED_SOURCE_H_
#define NOSTALL_SOURCE_INDEXED_SOURCE_H_

#include <functional>
#include <memory>
#include <string>

#include "nostall/source.h"
#include "source/index_file.h"

namespace nostall {

// Opens the dataset that `canonical` names (a string equal for equal
// datasets): from the index cache if its stamps still hold, else by
// `build`, saving what it built.
Result<std::unique_ptr<Source>> OpenIndexed(const char* kind, const std::string& canonical,
                                            const std::function<Result<Index>()>& build,
                                            const SourceOptions& options);

}  // namespace nostall

#endif  // NOSTALL_SOURCE_INDEXED_SOURCE_H_
