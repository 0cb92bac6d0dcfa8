// libFuzzer target: a ListObjectsV2 page as a broken or hostile S3 server
// could send it. Invariants: no crash, linear time (libFuzzer's -timeout
// catches a quadratic page), every listed key and folder starts with the
// prefix, a truncated page has its continuation token.
#include <cstdlib>
#include <string>

#include "store/s3_response.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nostall;
  if (size < 1) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string prefix(text.substr(0, data[0] % 8));
  Result<ListPage> page = ParseListPage(text, prefix, "s3://fuzz/ (listing)");
  if (page.ok()) {
    for (const S3Object& o : page.value().objects) {
      if (o.key.compare(0, prefix.size(), prefix) != 0 || o.size < 0) std::abort();
    }
    for (const std::string& f : page.value().folders) {
      if (f.compare(0, prefix.size(), prefix) != 0) std::abort();
    }
    if (page.value().truncated && page.value().next_token.empty()) std::abort();
  }
  const std::string decoded = XmlDecode(text);
  if (decoded.size() > text.size()) std::abort();  // an entity is never shorter than its text
  return 0;
}
