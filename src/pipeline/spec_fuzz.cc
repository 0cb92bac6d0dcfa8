// libFuzzer target: the loader spec's JSON parser. Invariant: a spec that
// parses survives a round trip through ToJson unchanged.
#include <cstdlib>
#include <string>

#include "nostall/loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nostall;
  Result<LoaderSpec> spec = LoaderSpec::FromJson(std::string(reinterpret_cast<const char*>(data), size));
  if (!spec.ok()) return 0;
  (void)spec.value().prep.Validate();
  const std::string once = spec.value().ToJson();
  Result<LoaderSpec> again = LoaderSpec::FromJson(once);
  if (!again.ok() || again.value().ToJson() != once) std::abort();  // not a round trip
  return 0;
}
