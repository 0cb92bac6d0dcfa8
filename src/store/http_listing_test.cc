// Index pages as the common web servers write them, read as folder listings.
#include "store/http_listing.h"

#include <gtest/gtest.h>

namespace nostall::store {
namespace {

using Names = std::vector<std::string>;

TEST(HttpListing, NginxAutoindex) {
  const char* page = R"(<html>
<head><title>Index of /data/</title></head>
<body>
<h1>Index of /data/</h1><hr><pre><a href="../">../</a>
<a href="sub/">sub/</a>                                               28-Nov-2026 10:00                   -
<a href="train%20set.parquet">train set.parquet</a>                  28-Nov-2026 10:00               12345
<a href="a%26b.tar">a&amp;b.tar</a>                                   28-Nov-2026 10:00                 678
</pre><hr></body>
</html>)";
  EXPECT_EQ(IndexLinks(page), (Names{"a&b.tar", "sub/", "train set.parquet"}));
}

TEST(HttpListing, ApacheAutoindexLeavesOutSortLinksAndTheParent) {
  const char* page = R"(<table>
<tr><th><a href="?C=N;O=D">Name</a></th><th><a href="?C=M;O=A">Last modified</a></th></tr>
<tr><td><a href="/datasets/">Parent Directory</a></td></tr>
<tr><td><a href="shard-000.tar">shard-000.tar</a></td></tr>
<tr><td><a HREF='shard-001.tar'>shard-001.tar</a></td></tr>
</table>)";
  EXPECT_EQ(IndexLinks(page), (Names{"shard-000.tar", "shard-001.tar"}));
}

TEST(HttpListing, LinksThatLeaveTheFolderAreNotEntries) {
  const char* page = R"(<a href="https://elsewhere.org/x.tar">x</a>
<a href="//cdn.org/y.tar">y</a> <a href="mailto:me@x.org">m</a> <a href="#top">t</a>
<a href="a/b.tar">deep</a> <a href="./c.tar">c</a> <a href="..">up</a> <a href=d.tar>unquoted</a>
<a href="d.tar">again</a> <a data-href="e.tar">not a link</a> <a href="%2e%2e/">encoded parent</a>)";
  EXPECT_EQ(IndexLinks(page), (Names{"d.tar"}));
}

TEST(HttpListing, NothingToReadIsNoEntries) {
  EXPECT_TRUE(IndexLinks("").empty());
  EXPECT_TRUE(IndexLinks("href").empty());
  EXPECT_TRUE(IndexLinks(" href=\"").empty());
  EXPECT_TRUE(IndexLinks(" href= ").empty());
  EXPECT_EQ(PercentDecode("a%2"), "a%2");
  EXPECT_EQ(PercentDecode("%41%zz"), "A%zz");
}

}  // namespace
}  // namespace nostall::store
