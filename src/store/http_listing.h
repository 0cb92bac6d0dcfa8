// A web server's folder listing: the links of an index page (nginx's,
// Apache's and Caddy's autoindex, Python's http.server, a hand-written
// index.html) read as the folder's files and subfolders. Private to the
// http store; its own fuzz target (http_listing_fuzz.cc) since any server
// may answer anything.
#ifndef NOSTALL_STORE_HTTP_LISTING_H_
#define NOSTALL_STORE_HTTP_LISTING_H_

#include <string>
#include <string_view>
#include <vector>

namespace nostall::store {

// The entries an index page links to, as names within its folder ("a.tar",
// "sub/": a subfolder ends in '/'), percent- and entity-decoded, each once,
// in byte order. Links that leave the folder (absolute, "../", another
// host), sort and query links ("?C=N;O=D") and fragments are not entries.
std::vector<std::string> IndexLinks(std::string_view html);

// `s` with %XX escapes decoded (a malformed escape kept as written).
std::string PercentDecode(std::string_view s);

}  // namespace nostall::store

#endif  // NOSTALL_STORE_HTTP_LISTING_H_
