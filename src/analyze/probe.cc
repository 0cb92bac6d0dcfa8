// Storage probe: timed cold reads, and a latency + bandwidth fit.
#include <algorithm>
#include <atomic>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "nostall/analyze.h"

namespace nostall {

Result<StorageProbe> ProbeStorage(const Source& source, const std::vector<int64_t>& items,
                                  int concurrency) {
  if (concurrency < 1) return InvalidArgument("probe concurrency must be >= 1");
  for (int64_t i : items) {
    if (i < 0 || i >= source.size()) return InvalidArgument("probe item out of range");
    Status st = source.Evict(i);
    if (!st.ok()) return st.WithItem(source.key(i), "fetch");
  }
  StorageProbe probe;
  probe.concurrency = concurrency;
  probe.reads.resize(items.size());
  std::vector<Status> errors(items.size());
  std::atomic<size_t> next{0};
  // Remote storage: each reader makes its connection before the timing
  // starts, as a running loader has them (a new connection costs a round
  // trip or more, which the concurrent probe would take for bandwidth).
  const bool warm_up = source.ReadsAsync() && !items.empty();
  std::atomic<int> warmed{0};
  std::atomic<int64_t> t0{warm_up ? 0 : NowNs()};
  auto worker = [&](int t) {
    std::vector<uint8_t> buf;
    if (warm_up) {
      (void)source.Read(items[static_cast<size_t>(t) % items.size()], &buf);
      if (warmed.fetch_add(1) + 1 == concurrency) t0.store(NowNs());
      while (warmed.load() < concurrency) std::this_thread::yield();
    }
    for (size_t k; (k = next.fetch_add(1)) < items.size();) {
      const int64_t start = NowNs();
      errors[k] = source.Read(items[k], &buf);
      probe.reads[k] = {static_cast<int64_t>(buf.size()), (NowNs() - start) / 1e9};
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) threads.emplace_back(worker, t);
  for (auto& t : threads) t.join();
  probe.elapsed_s = (NowNs() - t0.load()) / 1e9;
  for (size_t k = 0; k < items.size(); ++k) {
    if (!errors[k].ok()) return errors[k].WithItem(source.key(items[k]), "fetch");
    // Leave storage as cold as it was found.
    (void)source.Evict(items[k]);
  }
  return probe;
}

namespace {

// Latency + bandwidth from reads one at a time: a least-squares line of time
// against bytes.
StorageModel FitSequential(const std::vector<ReadTiming>& reads) {
  StorageModel m;
  const size_t n = reads.size();
  if (n < 2) return m;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& r : reads) {
    const double x = static_cast<double>(r.bytes), y = r.seconds;
    sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double dn = static_cast<double>(n);
  const double var = sxx - sx * sx / dn;
  const double slope = var > 0 ? (sxy - sx * sy / dn) / var : 0.0;  // seconds per byte
  const double intercept = (sy - slope * sx) / dn;
  // How much of the spread in read times the sizes explain (R^2): with
  // small, alike items and a large latency, the slope is noise.
  double ss_tot = 0, ss_res = 0;
  for (const auto& r : reads) {
    const double x = static_cast<double>(r.bytes), y = r.seconds;
    ss_tot += (y - sy / dn) * (y - sy / dn);
    ss_res += (y - intercept - slope * x) * (y - intercept - slope * x);
  }
  const double r2 = ss_tot > 0 ? 1 - ss_res / ss_tot : 0.0;
  if (slope <= 0 || r2 < 0.25) {
    m.latency = sy / dn;  // read time does not follow size: all latency
  } else if (intercept < 0) {
    m.bandwidth = sxx > 0 && sxy > 0 ? sxx / sxy : 0.0;  // through the origin
  } else {
    m.latency = intercept;
    m.bandwidth = 1 / slope;
  }
  return m;
}

// The reads without the stragglers: those 4x the median and 5 ms more (a
// disk another program made wait, a thread the machine woke late).
std::vector<ReadTiming> WithoutStragglers(std::vector<ReadTiming> reads) {
  if (reads.size() < 8) return reads;
  std::vector<double> t;
  for (const auto& r : reads) t.push_back(r.seconds);
  std::nth_element(t.begin(), t.begin() + static_cast<ptrdiff_t>(t.size() / 2), t.end());
  const double limit = std::max(4 * t[t.size() / 2], t[t.size() / 2] + 0.005);
  std::erase_if(reads, [limit](const ReadTiming& r) { return r.seconds > limit; });
  return reads;
}

}  // namespace

StorageModel FitStorage(const StorageProbe& seq, const StorageProbe& conc) {
  StorageModel m = FitSequential(seq.reads);
  double bytes = 0;
  for (const auto& r : conc.reads) bytes += static_cast<double>(r.bytes);
  const double reads = static_cast<double>(conc.reads.size());
  const double q = std::max(1, conc.concurrency);
  // The concurrent reads finished sooner than the sequential reads' latency
  // allows at their concurrency: a few of those were stragglers, not what
  // the storage takes per read (one read of 5 s among 64 of 5 ms puts the
  // mean at 80 ms, and hides the bandwidth the others follow).
  if (conc.elapsed_s > 0 && m.latency > 0 && conc.elapsed_s < 0.8 * reads * m.latency / q) {
    const std::vector<ReadTiming> kept = WithoutStragglers(seq.reads);
    if (kept.size() < seq.reads.size()) m = FitSequential(kept);
  }
  // Concurrent reads: if they finished clearly sooner than one shared stream
  // of that bandwidth allows, the device has parallelism; find the bandwidth
  // that explains their time under the same model (see analyze.h).
  if (conc.elapsed_s > 0 && bytes > 0 && m.bandwidth == 0 && m.latency > 0 &&
      conc.elapsed_s > 1.25 * reads * m.latency / q) {
    // Latency alone would have let them finish much sooner: a shared pipe.
    m.bandwidth = bytes / conc.elapsed_s;
  } else if (conc.elapsed_s > 0 && bytes > 0 && m.bandwidth > 0) {
    const double mean = bytes / reads;
    const double predicted = std::max(bytes / m.bandwidth, reads * (m.latency + mean / m.bandwidth) / q);
    if (conc.elapsed_s < 0.9 * predicted) {
      const double by_bytes = bytes / conc.elapsed_s;
      if (reads * (m.latency + mean / by_bytes) / q <= conc.elapsed_s) {
        m.bandwidth = by_bytes;
      } else {
        const double transfer = conc.elapsed_s * q / reads - m.latency;
        m.bandwidth = transfer > 0 ? mean / transfer : 0.0;
      }
    }
  }
  return m;
}

namespace {

// `count` of `all`, spread evenly, starting `offset` in.
std::vector<int64_t> Spread(const std::vector<int64_t>& all, int64_t count, int64_t offset) {
  const int64_t n = static_cast<int64_t>(all.size());
  std::vector<int64_t> v;
  count = std::min(count, n);
  for (int64_t k = 0; k < count; ++k) v.push_back(all[(k * n / count + offset) % n]);
  return v;
}

nlohmann::json Summary(const StorageProbe& p) {
  int64_t bytes = 0;
  for (const auto& r : p.reads) bytes += r.bytes;
  return {{"reads", p.reads.size()}, {"bytes", bytes}, {"elapsed_s", p.elapsed_s},
          {"concurrency", p.concurrency}};
}

}  // namespace

Result<std::string> ProbeLoaderStorageJson(const Loader& loader, int64_t sequential,
                                           int64_t concurrent, int concurrency) {
  const std::vector<int64_t> all = loader.sampler().Items();
  const int64_t n = static_cast<int64_t>(all.size());
  NOSTALL_ASSIGN_OR_RETURN(StorageProbe s, ProbeStorage(loader.source(), Spread(all, sequential, 0), 1));
  NOSTALL_ASSIGN_OR_RETURN(StorageProbe c, ProbeStorage(loader.source(), Spread(all, concurrent, n / 2),
                                                        concurrency));
  const StorageModel m = FitStorage(s, c);
  return nlohmann::json{{"bandwidth", m.bandwidth}, {"latency_s", m.latency},
                        {"sequential", Summary(s)}, {"concurrent", Summary(c)}}
      .dump();
}

}  // namespace nostall
