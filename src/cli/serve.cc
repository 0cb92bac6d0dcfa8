// `nostall serve` (one pipeline for every process on the node) and
// `nostall shared` (ls, inspect, rm of served pipelines).
#include <signal.h>

#include <grp.h>

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

#include <nlohmann/json.hpp>

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
  --group GROUP        share it with the users of GROUP (a group you are in):
                       the segment becomes 0660 and group GROUP's; they
                       attach as Loader.attach("YOU:NAME", ..., spec=SPEC)
                       with the spec they expect. Without it only your own
                       processes can attach (the segment is 0600).
  --ray PREP           make the chunks on other machines' CPUs with Ray:
                       nostall.ray.Prep's arguments as JSON, e.g.
                       '{"num_workers": 4, "cpus_per_worker": 8,
                       "resources": {"prep": 1}, "address": "auto"}', or a
                       number of workers (docs/remote.md). A spec with
                       "remote" does the same. Runs through Python (the
                       Python that has nostall and ray installed)
  --quiet              no status lines

Names are per user (/dev/shm/nostall-shared-UID-NAME): another user's
segment is never attached to or written by mistake, and one made under
your name by someone else is refused, naming its owner.
)";

std::atomic<bool> g_stop{false};

}  // namespace

namespace {

// Whether the spec file names prep on other machines ("remote").
bool SpecHasRemote(const std::string& path) {
  std::ifstream in(path);
  if (!in) return false;
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("remote");
}

}  // namespace

int Serve(const Args& args) {
  auto spec_path = args.options.find("--spec");
  auto name = args.options.find("--name");
  if (spec_path == args.options.end()) return UsageError(kServe, "missing --spec FILE (the loader spec)");
  if (name == args.options.end()) return UsageError(kServe, "missing --name NAME (what consumers attach to)");
  if (args.options.count("--ray") != 0 || SpecHasRemote(spec_path->second)) {
    // Ray's actors make the chunks: nostall.serve(..., remote=Prep(...)) in Python.
    std::vector<std::string> given;
    for (const auto& [k, v] : args.options) given.insert(given.end(), {k, v});
    for (const std::string& f : args.flags) given.push_back(f);
    return HandToPython("serve", given);
  }
  auto spec = ReadSpecFile(spec_path->second);
  if (!spec.ok()) return Fail(spec.status());
  long long chunk = 0, consumers = 8, slots = 0, lag_ms = 1000, block = 0;
  if (!IntOption(args, "--chunk", 0, &chunk) || !IntOption(args, "--max-consumers", 1, &consumers) ||
      !IntOption(args, "--slots", 0, &slots) || !IntOption(args, "--max-lag-ms", 1, &lag_ms) ||
      !IntOption(args, "--block-chunks", 0, &block, 1LL << 40)) {
    return 2;
  }
  nostall::ServeOptions o;
  o.chunk = chunk;
  o.max_consumers = static_cast<int>(consumers);
  o.slots = static_cast<int>(slots);
  o.max_lag_s = lag_ms / 1000.0;
  o.block_chunks = block;
  o.verbose = !Has(args, "--quiet");
  if (auto g = args.options.find("--group"); g != args.options.end()) {
    struct group gr, *found = nullptr;
    char buf[8192];
    if (::getgrnam_r(g->second.c_str(), &gr, buf, sizeof buf, &found) != 0 || found == nullptr) {
      std::fprintf(stderr, "nostall serve: --group %s: no such group on this node\n", g->second.c_str());
      return 2;
    }
    o.share_gid = found->gr_gid;
  }
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

namespace {

constexpr const char* kSharedAbout =
    "\nShared loaders (`nostall serve`) live in /dev/shm while served; a producer\n"
    "that stops removes its own. One killed (SIGKILL, out of memory) leaves it\n"
    "behind, shown as dead: `nostall shared rm NAME` removes it (a name still\n"
    "served is refused), and so does serving that name again.\n";

int SharedLs(const Args&) {
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

int SharedInspect(const Args& args) {
  auto info = nostall::InspectShared(args.positional[0]);
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

int SharedRm(const Args& args) {
  const std::string& name = args.positional[0];
  nostall::Status st = nostall::RemoveShared(name);
  if (!st.ok()) return Fail(st);
  std::printf("removed shared loader '%s'\n", name.c_str());
  return 0;
}

const std::string kSharedLsHelp =
    std::string("usage: nostall shared ls\n\nLists the shared loaders on this node: name, state "
                "(serving, stopped, dead),\nproducer pid, size, consumers, dataset.\n") + kSharedAbout;
const std::string kSharedInspectHelp =
    std::string("usage: nostall shared inspect NAME\n\nOne shared loader: producer, heartbeat, "
                "dataset, stream position, size,\nand each consumer's state.\n") + kSharedAbout;
const std::string kSharedRmHelp =
    std::string("usage: nostall shared rm NAME\n\nRemoves a shared loader's shared memory. "
                "Only one whose producer is gone\n(dead or stopped) can be removed.\n") + kSharedAbout;

}  // namespace

const Command kServe = {
    "serve", kServeUsage,
    {"--spec", "--name", "--chunk", "--max-consumers", "--slots", "--max-lag-ms", "--block-chunks",
     "--group", "--ray"},
    {"--quiet"}, {}, 0, Serve};

const Command kSharedCommands[3] = {
    {"shared ls", kSharedLsHelp.c_str(), {}, {}, {}, 0, SharedLs},
    {"shared inspect", kSharedInspectHelp.c_str(), {}, {}, {"NAME"}, 1, SharedInspect},
    {"shared rm", kSharedRmHelp.c_str(), {}, {}, {"NAME"}, 1, SharedRm},
};

}  // namespace nostall::cli
