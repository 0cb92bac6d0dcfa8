// The `nostall` command: argument parsing only; the work is in the library.
#include <unistd.h>

#include <signal.h>

#include <algorithm>
#include <cctype>
#include <atomic>
#include <chrono>
#include <thread>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "nostall/bench.h"
#include "nostall/cache.h"
#include "nostall/loader.h"
#include "nostall/shared.h"
#include "nostall/source.h"
#include "common/clock.h"
#include "common/shm.h"

namespace {

constexpr const char* kUsage = R"(usage: nostall <command> [options]

Data loading for deep-learning training, without data stalls.

commands:
  bench PATH      measure images/s of a pipeline over a dataset, with a
                  per-stage breakdown (fetch, decode+augment, batch, consumer)
  analyze --spec SPEC --step MODULE:FUNCTION
                  where your training job's time goes (compute, prep stall,
                  fetch stall), what-if predictions (cache, cores, storage,
                  jobs) and what removes the stall; table, JSON and HTML
  serve --spec SPEC --name NAME
                  run one pipeline for every training job on this node;
                  each attaches with nostall.Loader.attach(NAME, batch_size)
  inspect PATH    show what nostall sees in a dataset: kind, items, classes
  cache ls        list the MinIO caches on this node
  cache inspect NAME   size, fill, items, hit statistics, owning dataset
  cache rm NAME   remove a cache (loaders attached keep theirs until they close)
  cache serve --size SIZE   run this node's memcached for the cluster cache
                  (never evicts), or print the command (--print)
  cache inspect --servers HOST:PORT,...   the cluster cache's servers
  shared ls       list the shared loaders on this node (serving, stopped, dead)
  shared inspect NAME  producer, dataset, stream position, consumers
  shared rm NAME  remove a dead producer's shared memory
  help            show this message

PATH is an image folder (one subfolder per class) or WebDataset tar shards
("shards/train-{0000..0099}.tar"). `nostall COMMAND --help` shows options.
)";

constexpr const char* kBenchUsage = R"(usage: nostall bench PATH [options]

Runs RandomResizedCrop(SIZE) + RandomHorizontalFlip + Normalize (ImageNet
mean/std) into float32 NCHW batches, as fast as the batches come, and prints
images/s and where the time went.

options:
  --batch-size N        samples per batch (default 256)
  --threads N           decode+augment threads (default: tuned, from this process's cores)
  --reads-in-flight N   concurrent reads (default: tuned, from 4)
  --prefetch N          batches prepared ahead (default: tuned, from 2)
  --autotune            tune all three while it runs, starting from the values given,
                        and print the configuration it chose (without it, only the
                        ones not given are tuned)
  --no-autotune         tune none: unset ones are all cores, 4 reads, 2 batches
  --size N              output side in pixels (default 224)
  --epochs N            epochs to run (default 1)
  --max-batches N       stop after N batches (default: whole epochs)
  --spec FILE           use this loader spec (JSON) instead of the default
                        pipeline; PATH then overrides its "source"
  --throttle-bandwidth B   emulate storage of B bytes/s (shared by all reads)
  --throttle-latency-ms M  emulate M ms of latency per read
  --json                print one JSON object instead of the table
  --quiet               no progress line
)";

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;
  std::vector<std::string> flags;
};

bool IsFlag(const std::string& name) {
  return name == "--json" || name == "--quiet" || name == "--help" || name == "-h" ||
         name == "--print" || name == "--autotune" || name == "--no-autotune";
}

bool Parse(int argc, char** argv, int start, Args* args) {
  for (int i = start; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("-", 0) == 0 && a != "-") {
      if (IsFlag(a)) {
        args->flags.push_back(a);
        continue;
      }
      std::string value;
      size_t eq = a.find('=');
      if (eq != std::string::npos) {
        value = a.substr(eq + 1);
        a = a.substr(0, eq);
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        std::fprintf(stderr, "nostall: option %s needs a value\n", a.c_str());
        return false;
      }
      args->options[a] = value;
    } else {
      args->positional.push_back(a);
    }
  }
  return true;
}

bool Has(const Args& a, const char* flag) {
  for (const auto& f : a.flags) {
    if (f == flag) return true;
  }
  return false;
}

bool IntOption(const Args& a, const char* name, long long lo, long long* out) {
  auto it = a.options.find(name);
  if (it == a.options.end()) return true;
  char* end = nullptr;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0' || v < lo) {
    std::fprintf(stderr, "nostall: %s must be an integer >= %lld, not '%s'\n", name, lo,
                 it->second.c_str());
    return false;
  }
  *out = v;
  return true;
}

int Fail(const nostall::Status& st) {
  std::fprintf(stderr, "nostall: %s\n", st.ToString().c_str());
  return 1;
}

nostall::Result<nostall::LoaderSpec> ReadSpecFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nostall::NotFound("cannot read spec file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nostall::LoaderSpec::FromJson(ss.str());
}

constexpr const char* kServeUsage = R"(usage: nostall serve --spec SPEC --name NAME [options]

Runs one pipeline and serves its batches to every training process on this
node that attaches with nostall.Loader.attach(NAME, batch_size=...). Serves
until Ctrl-C or SIGTERM, then removes the shared memory.

options:
  --spec FILE          the loader spec (JSON, as for nostall bench --spec)
  --name NAME          the name consumers attach to
  --chunk N            samples per published chunk (default: the spec's
                       batch_size); consumers whose batch size divides it
                       read zero-copy, others copy once
  --max-consumers N    consumer table size (default 8)
  --slots N            chunk slots in shared memory (default 4 + 2 x consumers)
  --max-lag-ms N       how long the producer waits for one consumer before
                       that consumer continues on its own pipeline (default 1000)
  --block-chunks N     shuffle block, in chunks (default: ~1/16 of an epoch);
                       a consumer starts at a block boundary
  --quiet              no status lines
)";

std::atomic<bool> g_stop{false};

int Serve(const Args& args) {
  if (Has(args, "--help") || Has(args, "-h")) {
    std::fputs(kServeUsage, stdout);
    return 0;
  }
  static const char* kKnown[] = {"--spec", "--name", "--chunk", "--max-consumers", "--slots",
                                 "--max-lag-ms", "--block-chunks"};
  for (const auto& [k, v] : args.options) {
    if (std::find(std::begin(kKnown), std::end(kKnown), k) == std::end(kKnown)) {
      std::fprintf(stderr, "nostall serve: unknown option %s (see nostall serve --help)\n",
                   k.c_str());
      return 2;
    }
  }
  auto spec_path = args.options.find("--spec");
  auto name = args.options.find("--name");
  if (spec_path == args.options.end() || name == args.options.end() || !args.positional.empty()) {
    std::fputs(kServeUsage, stderr);
    return 2;
  }
  auto spec = ReadSpecFile(spec_path->second);
  if (!spec.ok()) return Fail(spec.status());
  long long chunk = 0, consumers = 8, slots = 0, lag_ms = 1000, block = 0;
  if (!IntOption(args, "--chunk", 0, &chunk) || !IntOption(args, "--max-consumers", 1, &consumers) ||
      !IntOption(args, "--slots", 0, &slots) || !IntOption(args, "--max-lag-ms", 1, &lag_ms) ||
      !IntOption(args, "--block-chunks", 0, &block)) {
    return 2;
  }
  nostall::ServeOptions o;
  o.chunk = chunk;
  o.max_consumers = static_cast<int>(consumers);
  o.slots = static_cast<int>(slots);
  o.max_lag_s = lag_ms / 1000.0;
  o.block_chunks = block;
  o.verbose = !Has(args, "--quiet");
  auto producer = nostall::SharedProducer::Create(name->second, spec.value(), o);
  if (!producer.ok()) return Fail(producer.status());
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_stop.store(true); };
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const auto& p = *producer.value();
  std::fprintf(stderr, "nostall serve: '%s' serving %s in chunks of %lld; attach with "
               "nostall.Loader.attach(\"%s\", batch_size=...)\n",
               name->second.c_str(), p.spec().source.c_str(),
               static_cast<long long>(p.spec().batch_size), name->second.c_str());
  std::atomic<bool> done{false};
  std::thread status([&] {
    int64_t last = nostall::NowNs();
    while (!done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (!o.verbose || nostall::NowNs() - last < 5000000000) continue;
      last = nostall::NowNs();
      nostall::ProducerStatus st = p.Snapshot();
      std::string who;
      for (const auto& c : st.consumers) {
        who += (who.empty() ? "" : ", ") + std::to_string(c.pid) + " " + c.state;
      }
      const nostall::LoaderStats ps = p.PipelineStats();
      const std::string tuned =
          ps.has_autotune ? "; autotuned: " + std::to_string(ps.autotune_threads) + " threads, " +
                                std::to_string(ps.autotune_reads) + " reads"
                          : "";
      std::fprintf(stderr, "nostall serve: %lld chunks (epoch %lld), consumers: %s%s\n",
                   static_cast<long long>(st.produced),
                   static_cast<long long>(st.produced / std::max<int64_t>(1, st.chunks_per_epoch)),
                   who.empty() ? "none" : who.c_str(), tuned.c_str());
    }
  });
  nostall::Status result = producer.value()->Run(g_stop);
  done.store(true);
  status.join();
  producer.value().reset();  // closes and removes the segment
  if (!result.ok()) return Fail(result);
  std::fputs("nostall serve: stopped\n", stderr);
  return 0;
}

// The pipeline `nostall bench` runs without --spec: RandomResizedCrop(size)
// + flip + ImageNet Normalize into float32 batches of 256, shuffled.
nostall::LoaderSpec DefaultBenchSpec(int size) {
  nostall::LoaderSpec spec;
  spec.batch_size = 256;
  spec.shuffle = true;
  nostall::Transform rrc{nostall::TransformKind::kRandomResizedCrop};
  rrc.height = rrc.width = size;
  nostall::Transform flip{nostall::TransformKind::kRandomHorizontalFlip};
  nostall::Transform norm{nostall::TransformKind::kNormalize};
  norm.mean = {0.485, 0.456, 0.406};
  norm.std = {0.229, 0.224, 0.225};
  spec.prep.transforms = {rrc, flip, norm};
  spec.prep.dtype = nostall::DType::kFloat32;
  return spec;
}

int Bench(const Args& args) {
  if (Has(args, "--help") || Has(args, "-h")) {
    std::fputs(kBenchUsage, stdout);
    return 0;
  }
  if (args.positional.size() != 1) {
    std::fputs(kBenchUsage, stderr);
    return 2;
  }
  static const char* kKnown[] = {"--batch-size", "--threads", "--reads-in-flight", "--prefetch",
                                 "--size", "--epochs", "--max-batches", "--spec",
                                 "--throttle-bandwidth", "--throttle-latency-ms"};
  for (const auto& [k, v] : args.options) {
    if (std::find(std::begin(kKnown), std::end(kKnown), k) == std::end(kKnown)) {
      std::fprintf(stderr, "nostall bench: unknown option %s (see nostall bench --help)\n",
                   k.c_str());
      return 2;
    }
  }
  nostall::LoaderSpec spec;
  if (auto it = args.options.find("--spec"); it != args.options.end()) {
    auto parsed = ReadSpecFile(it->second);
    if (!parsed.ok()) return Fail(parsed.status());
    spec = parsed.value();
  } else {
    long long size = 224;
    if (!IntOption(args, "--size", 1, &size)) return 2;
    spec = DefaultBenchSpec(static_cast<int>(size));
  }
  spec.source = args.positional[0];
  long long batch = spec.batch_size, threads = spec.num_threads, reads = spec.reads_in_flight,
            prefetch = spec.prefetch, epochs = 1, max_batches = 0;
  if (!IntOption(args, "--batch-size", 1, &batch) || !IntOption(args, "--threads", 0, &threads) ||
      !IntOption(args, "--reads-in-flight", 0, &reads) ||
      !IntOption(args, "--prefetch", 0, &prefetch) || !IntOption(args, "--epochs", 1, &epochs) ||
      !IntOption(args, "--max-batches", 0, &max_batches)) {
    return 2;
  }
  long long bandwidth = 0, latency = 0;
  if (!IntOption(args, "--throttle-bandwidth", 0, &bandwidth) ||
      !IntOption(args, "--throttle-latency-ms", 0, &latency)) {
    return 2;
  }
  if (bandwidth > 0) spec.source_options.throttle_bytes_per_second = static_cast<double>(bandwidth);
  if (latency > 0) spec.source_options.throttle_latency_ms = static_cast<double>(latency);
  spec.batch_size = batch;
  spec.num_threads = static_cast<int>(threads);
  spec.reads_in_flight = static_cast<int>(reads);
  spec.prefetch = static_cast<int>(prefetch);
  if (Has(args, "--autotune") && Has(args, "--no-autotune")) {
    std::fputs("nostall bench: --autotune and --no-autotune contradict each other\n", stderr);
    return 2;
  }
  if (Has(args, "--autotune")) spec.autotune = "on";
  if (Has(args, "--no-autotune")) spec.autotune = "off";
  const bool json = Has(args, "--json");
  const bool show_progress = !Has(args, "--quiet") && !json && isatty(STDERR_FILENO);
  auto progress = [&](int64_t images, double secs) {
    std::fprintf(stderr, "\r%lld images, %.1f s, %.0f images/s   ", static_cast<long long>(images),
                 secs, secs > 0 ? images / secs : 0.0);
  };
  auto r = nostall::MeasureThroughput(spec, static_cast<int>(epochs), max_batches,
                                      show_progress ? std::function<void(int64_t, double)>(progress)
                                                    : nullptr);
  if (show_progress) std::fputs("\r\033[K", stderr);
  if (!r.ok()) return Fail(r.status());
  const auto& res = r.value();
  if (json) {
    std::printf("{\"images\": %lld, \"batches\": %lld, \"seconds\": %.6f, \"images_per_s\": %.3f, "
                "\"stats\": %s}\n",
                static_cast<long long>(res.images), static_cast<long long>(res.batches),
                res.seconds, res.images_per_second(), res.stats.ToJson().c_str());
    return 0;
  }
  const std::string reads_text =
      res.stats.has_storage && spec.reads_in_flight == 0
          ? "reads in flight adaptive, " + std::to_string(res.stats.reads_in_flight_target) + " at the end"
          : std::to_string(res.stats.fetch.threads) + " reads in flight";
  std::printf("%s: %lld images in %.2f s = %.1f images/s (batch %lld, %d prep threads, %s)\n\n%s",
              spec.source.c_str(), static_cast<long long>(res.images), res.seconds,
              res.images_per_second(), static_cast<long long>(spec.batch_size),
              res.stats.prep.threads, reads_text.c_str(), res.stats.ToTable().c_str());
  if (res.stats.has_autotune && Has(args, "--autotune")) {
    std::printf("\nautotune chose: --threads %d --reads-in-flight %d --prefetch %d (%lld changes)\n",
                res.stats.autotune_threads, res.stats.autotune_reads, res.stats.autotune_prefetch,
                static_cast<long long>(res.stats.autotune_changes));
    for (const auto& d : res.stats.autotune_decisions) {
      std::printf("  %6.1f s  %-15s %d -> %d: %s\n", d.time_s, d.knob.c_str(), d.from, d.to,
                  d.why.c_str());
    }
  }
  return 0;
}

int Inspect(const Args& args) {
  if (Has(args, "--help") || Has(args, "-h") || args.positional.size() != 1) {
    std::fputs("usage: nostall inspect PATH\n\nPrints the dataset's kind, item count, classes "
               "and fingerprint, building (and caching) its index if needed.\n",
               Has(args, "--help") || Has(args, "-h") ? stdout : stderr);
    return Has(args, "--help") || Has(args, "-h") ? 0 : 2;
  }
  auto src = nostall::OpenSource(args.positional[0]);
  if (!src.ok()) return Fail(src.status());
  const nostall::Source& s = *src.value();
  int64_t known = 0;
  for (int64_t i = 0; i < s.size(); ++i) known += std::max<int64_t>(0, s.byte_size(i));
  std::printf("dataset:     %s\nkind:        %s\nitems:       %lld\n", args.positional[0].c_str(),
              s.kind(), static_cast<long long>(s.size()));
  if (!s.classes().empty()) {
    std::printf("classes:     %zu (", s.classes().size());
    for (size_t i = 0; i < s.classes().size() && i < 8; ++i) {
      std::printf("%s%s", i ? ", " : "", s.classes()[i].c_str());
    }
    std::printf("%s)\n", s.classes().size() > 8 ? ", ..." : "");
  }
  if (known > 0) std::printf("bytes:       %lld\n", static_cast<long long>(known));
  if (s.skipped_at_index() > 0) {
    std::printf("skipped:     %lld bad samples\n", static_cast<long long>(s.skipped_at_index()));
  }
  std::printf("fingerprint: %016llx\n", static_cast<unsigned long long>(s.fingerprint()));
  return 0;
}

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
  --listen ADDR      address to listen on (default 0.0.0.0: every interface;
                     memcached has no authentication, so keep the port inside
                     the cluster's network)
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

// "40GiB", "512MB", "1.5G", "1048576" -> bytes; 0 when unreadable.
uint64_t ParseSize(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !(v > 0)) return 0;
  std::string unit(end);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::map<std::string, double> kUnits = {
      {"", 1},          {"b", 1},           {"k", 1 << 10},    {"kb", 1e3},
      {"kib", 1 << 10}, {"m", 1 << 20},     {"mb", 1e6},       {"mib", 1 << 20},
      {"g", 1 << 30},   {"gb", 1e9},        {"gib", 1 << 30},  {"t", 1099511627776.0},
      {"tb", 1e12},     {"tib", 1099511627776.0}};
  auto it = kUnits.find(unit);
  return it == kUnits.end() ? 0 : static_cast<uint64_t>(v * it->second);
}

std::vector<std::string> SplitCommas(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

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
  const std::string listen = listen_it == args.options.end() ? "0.0.0.0" : listen_it->second;
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

int SharedCommand(const Args& args) {
  const auto& p = args.positional;
  const std::string usage =
      "usage: nostall shared ls | inspect NAME | rm NAME\n\nShared loaders (`nostall serve`) "
      "live in /dev/shm while served; a producer\nthat stops removes its own. One killed "
      "(SIGKILL, out of memory) leaves it\nbehind, shown as dead: `rm` removes it (a name "
      "still served is refused),\nand so does serving that name again.\n";
  if (Has(args, "--help") || Has(args, "-h")) {
    std::fputs(usage.c_str(), stdout);
    return 0;
  }
  if (p.size() == 1 && p[0] == "ls") {
    auto names = nostall::ListShared();
    if (names.empty()) std::puts("no shared loaders");
    for (const auto& n : names) {
      auto info = nostall::InspectShared(n);
      if (!info.ok()) {
        std::printf("%-24s (unreadable: %s)\n", n.c_str(), info.status().message().c_str());
        continue;
      }
      const auto& i = info.value();
      std::printf("%-24s %-8s pid %-8lld %10s  %zu consumer%s  %s\n", n.c_str(), i.state.c_str(),
                  static_cast<long long>(i.producer_pid),
                  nostall::FormatBytes(static_cast<int64_t>(i.segment_bytes)).c_str(),
                  i.consumers.size(), i.consumers.size() == 1 ? "" : "s", i.source.c_str());
    }
    return 0;
  }
  if (p.size() == 2 && p[0] == "inspect") {
    auto info = nostall::InspectShared(p[1]);
    if (!info.ok()) return Fail(info.status());
    const auto& i = info.value();
    std::printf("shared loader: %s (/dev/shm/nostall-shared-%s)\nstate:         %s, producer pid "
                "%lld, heartbeat %.1f s ago\n",
                i.name.c_str(), i.name.c_str(), i.state.c_str(),
                static_cast<long long>(i.producer_pid), i.heartbeat_age_s);
    if (!i.error.empty()) std::printf("error:         %s\n", i.error.c_str());
    std::printf("dataset:       %s\nstream:        %lld samples per epoch in %lld chunks of %lld; "
                "%lld chunks published\nsize:          %s (%lld slots)\nconsumers:     %zu of "
                "%lld (%lld left behind for lagging, %lld released after dying)\n",
                i.source.c_str(), static_cast<long long>(i.samples_per_epoch),
                static_cast<long long>(i.chunks_per_epoch), static_cast<long long>(i.chunk),
                static_cast<long long>(i.produced),
                nostall::FormatBytes(static_cast<int64_t>(i.segment_bytes)).c_str(),
                static_cast<long long>(i.slots), i.consumers.size(),
                static_cast<long long>(i.max_consumers), static_cast<long long>(i.evictions),
                static_cast<long long>(i.reaped));
    for (const auto& c : i.consumers) {
      std::printf("  pid %-8lld %-7s next chunk %lld\n", static_cast<long long>(c.pid),
                  c.state.c_str(), static_cast<long long>(c.need));
    }
    return 0;
  }
  if (p.size() == 2 && p[0] == "rm") {
    nostall::Status st = nostall::RemoveShared(p[1]);
    if (!st.ok()) return Fail(st);
    std::printf("removed shared loader '%s'\n", p[1].c_str());
    return 0;
  }
  std::fputs(usage.c_str(), stderr);
  return 2;
}

}  // namespace

// `analyze` runs the user's Python training step, so it is the Python
// package's command: hand over to the interpreter installed beside this
// binary (a virtual environment's bin/), else $NOSTALL_PYTHON, else python3.
int Analyze(char** argv) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("NOSTALL_PYTHON")) candidates.push_back(env);
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    std::string dir(self, static_cast<size_t>(n));
    dir = dir.substr(0, dir.rfind('/'));
    candidates.push_back(dir + "/python3");
    candidates.push_back(dir + "/python");
  }
  std::vector<char*> args;
  std::string module_flag = "-m", module = "nostall";
  args.push_back(nullptr);  // the interpreter, below
  args.push_back(module_flag.data());
  args.push_back(module.data());
  for (char** a = argv + 1; *a != nullptr; ++a) args.push_back(*a);
  args.push_back(nullptr);
  for (std::string& py : candidates) {
    if (::access(py.c_str(), X_OK) != 0) continue;
    args[0] = py.data();
    ::execv(py.c_str(), args.data());
  }
  std::string python3 = "python3";
  args[0] = python3.data();
  ::execvp("python3", args.data());
  std::fprintf(stderr, "nostall analyze: cannot run python3 (%s); it runs your training step, "
               "so it needs the Python that has nostall installed: set NOSTALL_PYTHON, or "
               "run `python -m nostall analyze ...`\n", std::strerror(errno));
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "help" || cmd == "--help" || cmd == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (cmd == "--version") {
    std::puts("nostall 0.1.0");
    return 0;
  }
  Args args;
  if (!Parse(argc, argv, 2, &args)) return 2;
  if (cmd == "bench") return Bench(args);
  if (cmd == "analyze") return Analyze(argv);
  if (cmd == "serve") return Serve(args);
  if (cmd == "inspect") return Inspect(args);
  if (cmd == "cache") return CacheCommand(args);
  if (cmd == "shared") return SharedCommand(args);
  std::fprintf(stderr, "nostall: unknown command '%s'\n\n%s", cmd.c_str(), kUsage);
  return 2;
}
