// What an S3 server answers, read without trusting it: ListObjectsV2 pages,
// the headers nostall acts on, and whether a body is the bytes asked for.
// Every function here is linear in its input and bounds what it keeps (a
// hostile or broken server on the other end of a listing or a GET must give
// a clear error, never a hang, a crash or memory without end). Hand-written:
// the few flat tags of ListObjectsV2 and of S3's error bodies need no XML
// library, and the fuzz target s3_response_fuzz runs them.
#ifndef NOSTALL_STORE_S3_RESPONSE_H_
#define NOSTALL_STORE_S3_RESPONSE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "nostall/status.h"

namespace nostall {

struct S3Object {
  std::string key;
  int64_t size = 0;
  std::string etag;
};

// XML's five named entities and numeric character references decoded
// (others are kept as written; an '&' without its ';' within a few bytes is
// a plain '&').
std::string XmlDecode(std::string_view s);
// The decoded text of the first <tag>...</tag> that opens in [from, to) of
// `xml` (and closes before `to`); "" if there is none.
std::string XmlTag(std::string_view xml, std::string_view tag, size_t from = 0,
                   size_t to = std::string_view::npos);

// One page of ListObjectsV2.
struct ListPage {
  std::vector<S3Object> objects;      // <Contents>
  std::vector<std::string> folders;   // <CommonPrefixes><Prefix>
  bool truncated = false;
  std::string next_token;
};
// Reads a page listed under `prefix`: every key and folder must start with
// the prefix (a server answering another prefix's keys is an error naming
// one), sizes are integers in [0, 2^50), an element opened and never closed
// is an error. `what` names the listing in errors ("s3://b/p (listing)").
Result<ListPage> ParseListPage(std::string_view xml, const std::string& prefix,
                               const std::string& what);

// The seconds of a "Retry-After: N" header line (any case), or -1 for any
// other line or a value that is not a number of seconds.
double ParseRetryAfter(std::string_view line);

// The most bytes a GET for [offset, offset + length) may take in: a 206
// carries `length`; a server that ignores Range answers 200 with the object
// from its start, of which offset + length bytes are enough. length < 0
// (listings, error bodies): `whole_limit`.
uint64_t MaxBodyBytes(uint64_t offset, int64_t length, uint64_t whole_limit);

// A finished GET's body checked against what was asked for, cut to the
// range when the server answered the whole object (HTTP 200 to a ranged
// request); any other length is an error naming `what`, never bytes passed
// on as the item.
Status CheckBody(const std::string& what, long http, bool ranged, uint64_t offset, int64_t length,
                 std::vector<uint8_t>* body);

}  // namespace nostall

#endif  // NOSTALL_STORE_S3_RESPONSE_H_
