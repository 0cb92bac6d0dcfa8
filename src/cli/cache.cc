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

constexpr const char* kCacheAbout =
    "\nMinIO caches (node-local, nostall.Cache(name, size)) live in /dev/shm\n"
    "until removed; each belongs to one dataset. The cluster cache keeps items\n"
    "in every node's memcached, each item on one node: nostall.Cache(name,\n"
    "size, servers=[\"node1:11211\", ...]), or NOSTALL_CACHE_SERVERS=node1:11211,...\n"
    "(docs/cluster_cache.md).\n";

constexpr const char* kCacheServeUsage = R"(usage: nostall cache serve --size SIZE [options]

Starts this node's memcached the way the cluster cache needs it (in the
foreground; Ctrl-C or SIGTERM stops it):
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
)";

// What loaders should name this server as: the address it listens on, which
// for a loopback address reaches it from this node only.
std::string ServersHint(const std::string& listen, long long port) {
  const std::string p = std::to_string(port);
  if (listen == "0.0.0.0" || listen == "::" || listen == "[::]") {
    char host[256] = "this-node";
    gethostname(host, sizeof host - 1);
    return std::string("NOSTALL_CACHE_SERVERS=") + host + ":" + p +
           ",<the other nodes' host:port>";
  }
  if (listen == "127.0.0.1" || listen == "localhost" || listen == "::1" ||
      listen.rfind("127.", 0) == 0) {
    return "NOSTALL_CACHE_SERVERS=" + listen + ":" + p +
           " (this node only: --listen with the node's cluster address, or 0.0.0.0, lets the "
           "other nodes reach it)";
  }
  return "NOSTALL_CACHE_SERVERS=" + listen + ":" + p + ",<the other nodes' host:port>";
}

int CacheServe(const Args& args) {
  const auto size_it = args.options.find("--size");
  if (size_it == args.options.end()) {
    return UsageError(kCacheCommands[3], "missing --size SIZE (memory for items, e.g. 40GiB)");
  }
  const uint64_t size = ParseSize(size_it->second);
  if (size < (64u << 20)) {
    std::fprintf(stderr, "nostall cache serve: --size must be at least 64MiB (e.g. --size 40GiB), "
                 "not '%s'\n", size_it->second.c_str());
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
  std::fprintf(stderr,
               "nostall: cluster cache server: %s of memory, items up to %s, never evicts (-M)\n"
               "  %s\n  loaders: %s\n",
               nostall::FormatBytes(megabytes << 20).c_str(), nostall::FormatBytes(max_item).c_str(),
               line.c_str(), ServersHint(listen, port).c_str());
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


int CacheLs(const Args&) {
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

int CacheInspect(const Args& args) {
  const auto servers = args.options.find("--servers");
  if (servers != args.options.end()) {
    if (!args.positional.empty()) {
      return UsageError(kCacheCommands[1], "give NAME (a node cache) or --servers (the cluster's), not both");
    }
    return CacheInspectServers(servers->second);
  }
  if (args.positional.empty()) {
    return UsageError(kCacheCommands[1], "missing NAME (a cache `nostall cache ls` lists) or --servers HOST:PORT,...");
  }
  const std::string& name = args.positional[0];
  auto info = nostall::MinioCache::Inspect(name);
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

int CacheRm(const Args& args) {
  const std::string& name = args.positional[0];
  nostall::Status st = nostall::MinioCache::Remove(name);
  if (!st.ok()) return Fail(st);
  std::printf("removed cache '%s'\n", name.c_str());
  return 0;
}

const std::string kCacheLsHelp =
    std::string("usage: nostall cache ls\n\nLists the MinIO caches on this node: name, size, "
                "fill, items.\n") + kCacheAbout;
const std::string kCacheInspectHelp =
    std::string("usage: nostall cache inspect NAME\n       nostall cache inspect --servers "
                "HOST:PORT,HOST:PORT,...\n\nA MinIO cache: size, fill, items, hit statistics, "
                "owning dataset. With\n--servers: each cluster cache server's memory, items, "
                "evictions (0 under\n-M) and hits.\n") + kCacheAbout;
const std::string kCacheRmHelp =
    std::string("usage: nostall cache rm NAME\n\nRemoves a MinIO cache's shared memory; "
                "loaders attached keep theirs\nuntil they close.\n") + kCacheAbout;
const std::string kCacheServeHelp = std::string(kCacheServeUsage) + kCacheAbout;

}  // namespace

const Command kCacheCommands[4] = {
    {"cache ls", kCacheLsHelp.c_str(), {}, {}, {}, 0, CacheLs},
    {"cache inspect", kCacheInspectHelp.c_str(), {"--servers"}, {}, {"NAME"}, 0, CacheInspect},
    {"cache rm", kCacheRmHelp.c_str(), {}, {}, {"NAME"}, 1, CacheRm},
    {"cache serve", kCacheServeHelp.c_str(), {"--size", "--port", "--listen", "--max-item", "--threads"},
     {"--print"}, {}, 0, CacheServe},
};

}  // namespace nostall::cli
