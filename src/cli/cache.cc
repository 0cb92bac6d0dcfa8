// `nostall cache`: ls, inspect, rm of node caches; serve of a memcached
// for the cluster cache.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli.h"
#include "nostall/bench.h"
#include "nostall/cache.h"
#include "nostall/loader.h"
#include "nostall/shared.h"
#include "nostall/source.h"
#include "common/clock.h"
#include "common/shm.h"

namespace nostall::cli {

namespace {

constexpr const char* kCacheUsage = R"(usage: nostall cache ls | inspect NAME | rm NAME
       nostall cache serve --size SIZE [options]
       nostall cache inspect --servers HOST:PORT,HOST:PORT,...

MinIO caches (node-local) live in /dev/shm until removed; each belongs to
one dataset.

The cluster cache keeps items in every node's memcached, each item on one
node: nostall.Cache(name, size, servers=["node1:11211", ...]), or
NOSTALL_CACHE_SERVERS=node1:11211,node2:11211.

cache serve starts this node's memcached the way the cluster cache needs it
(in the foreground; Ctrl-C or SIGTERM stops it):
  --size SIZE        memory for items, e.g. 40GiB, 512MiB (required)
  --port N           TCP port (default 11211)
  --listen ADDR      address to listen on (default 127.0.0.1: this node only;
                     give the node's cluster address, or 0.0.0.0, for other
                     nodes to reach it). memcached has no authentication:
                     nostall's values carry a MAC under the job's secret, so
                     a value written by anyone else is a miss, but anyone
                     who reaches the port can read what is cached and fill
                     or flush it; keep it inside the cluster's network
                     (docs/cluster_cache.md)
  --max-item SIZE    the largest item it takes (default 16MiB, at most half
                     of --size); a bigger item is read from storage each time
  --threads N        memcached worker threads (default 4)
  --print            print the command and exit (to run it under systemd,
                     Kubernetes or by hand)
It runs memcached with -M: a full server refuses new items instead of
evicting old ones, so the items cached first stay (the MinIO policy).

cache inspect --servers asks each server for its memory, items, evictions
(0 under -M) and hits.
)";


int CacheServe(const Args& args) {
  const auto size_it = args.options.find("--size");
  const uint64_t size = size_it == args.options.end() ? 0 : ParseSize(size_it->second);
  if (size < (64u << 20)) {
    std::fprintf(stderr, "nostall: cache serve needs --size of at least 64MiB (e.g. --size 40GiB)%s\n",
                 size_it == args.options.end() ? "" : (", not '" + size_it->second + "'").c_str());
    return 2;
  }
  long long port = 11211, threads = 4;
  if (!IntOption(args, "--port", 1, &port) || !IntOption(args, "--threads", 1, &threads)) return 2;
  if (port > 65535) {
    std::fprintf(stderr, "nostall: --port must be in [1, 65535]\n");
    return 2;
  }
  const auto listen_it = args.options.find("--listen");
  const std::string listen = listen_it == args.options.end() ? "127.0.0.1" : listen_it->second;
  const uint64_t megabytes = size >> 20;
  uint64_t max_item = 16u << 20;
  if (auto it = args.options.find("--max-item"); it != args.options.end()) {
    max_item = ParseSize(it->second);
    if (max_item < (1u << 20)) {
      std::fprintf(stderr, "nostall: --max-item must be at least 1MiB, not '%s'\n",
                   it->second.c_str());
      return 2;
    }
  }
  max_item = std::min<uint64_t>(max_item, (megabytes / 2) << 20);  // memcached's own limit
  const char* found = nullptr;
  for (const char* path : {"/usr/bin/memcached", "/usr/local/bin/memcached", "/usr/sbin/memcached"}) {
    if (access(path, X_OK) == 0) {
      found = path;
      break;
    }
  }
  std::vector<std::string> cmd = {found ? found : "memcached",
                                  "-M",
                                  "-m", std::to_string(megabytes),
                                  "-I", std::to_string(max_item >> 20) + "m",
                                  "-p", std::to_string(port),
                                  "-U", "0",
                                  "-l", listen,
                                  "-t", std::to_string(threads),
                                  "-c", "4096"};
  if (geteuid() == 0) {  // memcached will not run as root without a user to become
    cmd.push_back("-u");
    cmd.push_back("nobody");
  }
  std::string line;
  for (const std::string& a : cmd) line += (line.empty() ? "" : " ") + a;
  if (Has(args, "--print")) {
    std::printf("%s\n", line.c_str());
    return 0;
  }
  if (found == nullptr) {
    std::fprintf(stderr,
                 "nostall: memcached is not installed (Debian/Ubuntu: apt-get install memcached);"
                 " the command to run is:\n  %s\n",
                 line.c_str());
    return 1;
  }
  char host[256] = "this-node";
  gethostname(host, sizeof host - 1);
  std::fprintf(stderr,
               "nostall: cluster cache server: %s of memory, items up to %s, never evicts (-M)\n"
               "  %s\n"
               "  loaders: NOSTALL_CACHE_SERVERS=%s:%lld,<the other nodes' host:port>\n",
               nostall::FormatBytes(megabytes << 20).c_str(), nostall::FormatBytes(max_item).c_str(),
               line.c_str(), host, port);
  std::vector<char*> argv;
  for (std::string& a : cmd) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv(found, argv.data());  // memcached takes over this process: signals go to it
  return Fail(nostall::IoError(std::string("cannot run ") + found + ": " + std::strerror(errno)));
}

int CacheInspectServers(const std::string& list) {
  auto infos = nostall::InspectMemcachedServers(SplitCommas(list));
  if (!infos.ok()) return Fail(infos.status());
  if (infos->empty()) {
    std::fprintf(stderr, "nostall: --servers names no server\n");
    return 2;
  }
  int down = 0;
  for (const auto& i : *infos) {
    if (!i.error.empty()) {
      std::printf("%-24s down: %s\n", i.server.c_str(), i.error.c_str());
      ++down;
      continue;
    }
    const int64_t gets = i.get_hits + i.get_misses;
    std::printf("%-24s memcached %s: %s of %s (%.1f%%), %lld items, %lld evictions%s, "
                "%.1f%% of %lld gets hit\n",
                i.server.c_str(), i.version.c_str(), nostall::FormatBytes(i.bytes).c_str(),
                nostall::FormatBytes(i.limit_bytes).c_str(),
                i.limit_bytes ? 100.0 * i.bytes / i.limit_bytes : 0.0,
                static_cast<long long>(i.items), static_cast<long long>(i.evictions),
                i.evictions > 0 ? " (not started with -M: it evicts)" : "",
                gets ? 100.0 * i.get_hits / gets : 0.0, static_cast<long long>(gets));
  }
  return down > 0 ? 1 : 0;
}


}  // namespace

int CacheCommand(const Args& args) {
  const auto& p = args.positional;
  const std::string usage = kCacheUsage;
  if (Has(args, "--help") || Has(args, "-h")) {
    std::fputs(usage.c_str(), stdout);
    return 0;
  }
  if (p.size() == 1 && p[0] == "serve") return CacheServe(args);
  if (p.size() == 1 && p[0] == "inspect" && args.options.count("--servers")) {
    return CacheInspectServers(args.options.at("--servers"));
  }
  if (p.size() == 1 && p[0] == "ls") {
    auto names = nostall::MinioCache::List();
    if (names.empty()) std::puts("no caches");
    for (const auto& n : names) {
      auto info = nostall::MinioCache::Inspect(n);
      if (!info.ok()) {
        std::printf("%-32s (unreadable: %s)\n", n.c_str(), info.status().message().c_str());
        continue;
      }
      const auto& s = info->stats;
      std::printf("%-32s %10s  %5.1f%% full  %lld items\n", n.c_str(),
                  nostall::FormatBytes(s.budget_bytes).c_str(),
                  s.budget_bytes ? 100.0 * s.used_bytes / s.budget_bytes : 0.0,
                  static_cast<long long>(s.items));
    }
    return 0;
  }
  if (p.size() == 2 && p[0] == "inspect") {
    auto info = nostall::MinioCache::Inspect(p[1]);
    if (!info.ok()) return Fail(info.status());
    const auto& s = info->stats;
    const int64_t lookups = s.hits + s.misses;
    std::printf("cache:        %s (/dev/shm/nostall-cache-%s)\nformat:       version %u\n"
                "dataset:      %lld items, fingerprint %016llx\nsize:         %s budget, %s "
                "segment\nfill:         %s used (%.1f%%), %lld items cached\n"
                "lookups:      %lld hits, %lld misses (%.1f%% hits, all processes)\n",
                info->name.c_str(), info->name.c_str(), info->version,
                static_cast<long long>(info->num_items),
                static_cast<unsigned long long>(info->dataset_fingerprint),
                nostall::FormatBytes(s.budget_bytes).c_str(),
                nostall::FormatBytes(info->segment_bytes).c_str(),
                nostall::FormatBytes(s.used_bytes).c_str(),
                s.budget_bytes ? 100.0 * s.used_bytes / s.budget_bytes : 0.0,
                static_cast<long long>(s.items), static_cast<long long>(s.hits),
                static_cast<long long>(s.misses), lookups ? 100.0 * s.hits / lookups : 0.0);
    return 0;
  }
  if (p.size() == 2 && p[0] == "rm") {
    nostall::Status st = nostall::MinioCache::Remove(p[1]);
    if (!st.ok()) return Fail(st);
    std::printf("removed cache '%s'\n", p[1].c_str());
    return 0;
  }
  std::fputs(usage.c_str(), stderr);
  return 2;
}


}  // namespace nostall::cli
