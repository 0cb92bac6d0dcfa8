#include "nostall/stats.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace nostall {
namespace {

nlohmann::json StageJson(const StageStats& s) {
  return {{"items", s.items},           {"bytes", s.bytes},
          {"busy_cpu_s", s.busy_cpu_ns / 1e9}, {"work_s", s.work_ns / 1e9},
          {"starved_s", s.starved_ns / 1e9},
          {"blocked_s", s.blocked_ns / 1e9},   {"threads", s.threads}};
}

nlohmann::json FetchJson(const StageStats& s) {
  nlohmann::json j = StageJson(s);
  j["peak_in_flight"] = s.peak_in_flight;  // counted for reads only
  return j;
}

}  // namespace

double LoaderStats::StallFraction() const {
  const double total = static_cast<double>(wait_ns + between_ns);
  return total > 0 ? wait_ns / total : 0.0;
}

double LoaderStats::RecentWaitQuantile(double q) const {
  if (recent_wait_ns.empty()) return 0.0;
  std::vector<int64_t> v = recent_wait_ns;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(k), v.end());
  return v[k] / 1e9;
}

namespace {

nlohmann::json EpochsJson(const std::vector<LoaderStats::ConsumerEpoch>& epochs) {
  nlohmann::json per_epoch = nlohmann::json::array();
  for (const auto& e : epochs) {
    const double wall = (e.wait_ns + e.between_ns) / 1e9;
    per_epoch.push_back({{"epoch", e.epoch},
                         {"batches", e.batches},
                         {"samples", e.samples},
                         {"wait_s", e.wait_ns / 1e9},
                         {"between_s", e.between_ns / 1e9},
                         {"stall_fraction", wall > 0 ? e.wait_ns / 1e9 / wall : 0.0},
                         {"images_per_s", wall > 0 ? e.samples / wall : 0.0}});
  }
  return per_epoch;
}

nlohmann::json StorageJson(const StorageStats& s, int64_t reads_in_flight_target) {
  return {{"requests", s.requests},
          {"bytes", s.bytes},
          {"retries", s.retries},
          {"errors", s.errors},
          {"in_flight", s.in_flight},
          {"peak_in_flight", s.peak_in_flight},
          {"reads_in_flight_target", reads_in_flight_target},
          {"latency_p50_s", s.latency_p50_s},
          {"latency_p99_s", s.latency_p99_s},
          {"retries_by_cause", {{"slow_down", s.retry_slow_down},
                                {"server_error", s.retry_server_error},
                                {"timeout", s.retry_timeout},
                                {"connection", s.retry_connection},
                                {"cut_short", s.retry_cut_short}}},
          {"io_cpu_s", s.io_cpu_ns / 1e9}};
}

nlohmann::json AutotuneJson(const LoaderStats& st) {
  nlohmann::json decisions = nlohmann::json::array();
  for (const auto& d : st.autotune_decisions) {
    decisions.push_back({{"time_s", d.time_s}, {"knob", d.knob}, {"from", d.from},
                         {"to", d.to}, {"why", d.why},
                         {"model", {{"before", d.model_rate_before}, {"after", d.model_rate_after}}}});
  }
  return {{"knobs", st.autotune_knobs},
          {"threads", st.autotune_threads},
          {"reads_in_flight", st.autotune_reads},
          {"prefetch", st.autotune_prefetch},
          {"changes", st.autotune_changes},
          {"decisions", decisions}};
}

nlohmann::json CacheJson(const LoaderStats& st) {
  nlohmann::json epochs = nlohmann::json::array();
  for (const auto& e : st.cache_epochs) {
    const int64_t n = e.hits + e.misses, b = e.hit_bytes + e.miss_bytes;
    epochs.push_back({{"epoch", e.epoch},
                      {"hits", e.hits},
                      {"misses", e.misses},
                      {"errors", e.errors},
                      {"hit_bytes", e.hit_bytes},
                      {"miss_bytes", e.miss_bytes},
                      {"hit_rate", n > 0 ? static_cast<double>(e.hits) / n : 0.0},
                      {"byte_hit_rate", b > 0 ? static_cast<double>(e.hit_bytes) / b : 0.0}});
  }
  nlohmann::json tiers = nlohmann::json::array();
  for (const auto& t : st.cache_tiers) {
    tiers.push_back({{"tier", t.tier}, {"budget_bytes", t.budget_bytes},
                     {"used_bytes", t.used_bytes}, {"items", t.items}, {"hits", t.hits},
                     {"misses", t.misses}, {"errors", t.errors}, {"lookups", t.lookups},
                     {"lookup_mean_s", t.lookups > 0 ? t.lookup_ns / 1e9 / t.lookups : 0.0},
                     {"hit_bytes", t.hit_bytes}});
  }
  return {{"name", st.cache_name},
          {"budget_bytes", st.cache_budget_bytes},
          {"used_bytes", st.cache_used_bytes},
          {"fill", st.cache_budget_bytes > 0
                       ? static_cast<double>(st.cache_used_bytes) / st.cache_budget_bytes
                       : 0.0},
          {"items", st.cache_items},
          {"inserted_bytes", st.cache_inserted_bytes},
          {"epochs", epochs},
          {"tiers", tiers}};
}

// The cache's lines of the table: its fill, each epoch's hit rate, and each
// tier when there are several (or one failed).
std::string CacheTable(const LoaderStats& st) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "cache '%s': %.1f%% full (%lld items)", st.cache_name.c_str(),
                st.cache_budget_bytes ? 100.0 * st.cache_used_bytes / st.cache_budget_bytes : 0.0,
                static_cast<long long>(st.cache_items));
  out += line;
  for (const auto& e : st.cache_epochs) {
    const int64_t n = e.hits + e.misses;
    std::snprintf(line, sizeof line, "; epoch %lld hit rate %.1f%%", static_cast<long long>(e.epoch),
                  n ? 100.0 * e.hits / n : 0.0);
    out += line;
  }
  out += "\n";
  if (st.cache_tiers.size() > 1 || (!st.cache_tiers.empty() && st.cache_tiers[0].errors > 0)) {
    for (const auto& t : st.cache_tiers) {
      std::snprintf(line, sizeof line,
                    "  tier %-10s %.1f%% full, %lld hits, %lld misses, %lld errors, %.1f MB "
                    "found; lookup %.2f ms mean\n",
                    t.tier.c_str(), t.budget_bytes ? 100.0 * t.used_bytes / t.budget_bytes : 0.0,
                    static_cast<long long>(t.hits), static_cast<long long>(t.misses),
                    static_cast<long long>(t.errors), t.hit_bytes / 1e6,
                    t.lookups > 0 ? t.lookup_ns / 1e6 / t.lookups : 0.0);
      out += line;
    }
  }
  return out;
}

}  // namespace

std::string LoaderStats::ToJson() const {
  nlohmann::json j = {
      {"stages", {{"fetch", FetchJson(fetch)}, {"prep", StageJson(prep)}, {"batch", StageJson(batch)}}},
      {"batches", batches},
      {"samples", samples},
      {"errors", errors},
      {"skipped", skipped},
      {"empty_batches_dropped", empty_batches_dropped},
      {"private_copies", private_copies},
      {"consumer",
       {{"iterations", iterations},
        {"wait_s", wait_ns / 1e9},
        {"max_wait_s", max_wait_ns / 1e9},
        {"between_s", between_ns / 1e9},
        {"stall_fraction", StallFraction()},
        {"wait_p50_s", RecentWaitQuantile(0.5)},
        {"wait_p99_s", RecentWaitQuantile(0.99)},
        {"epochs", EpochsJson(consumer_epochs)}}},
      {"elapsed_s", elapsed_ns / 1e9},
      {"ring", {{"bytes", ring_bytes}, {"slots", ring_slots}}},
  };
  if (!field_bytes.empty()) {
    nlohmann::json f = nlohmann::json::object();
    for (const auto& [name, bytes] : field_bytes) f[name] = {{"bytes", bytes}};
    j["fields"] = f;
  }
  if (has_autotune) j["autotune"] = AutotuneJson(*this);
  if (has_shared) {
    j["shared"] = {{"name", shared_name},         {"mode", shared_mode},
                   {"reason", shared_reason},     {"shared_chunks", shared_chunks},
                   {"private_chunks", private_chunks}, {"copied_batches", copied_batches},
                   {"fallbacks", fallbacks},      {"rejoins", rejoins}};
  }
  if (has_storage) j["storage"] = StorageJson(storage, reads_in_flight_target);
  if (has_cache) j["cache"] = CacheJson(*this);
  return j.dump();
}

std::string LoaderStats::ToTable() const {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-16s %8s %12s %10s %10s %10s %10s %12s\n", "stage",
                "threads", "items", "busy cpu", "working", "starved", "blocked", "items/cpu-s");
  out += line;
  auto row = [&](const char* name, const StageStats& s) {
    double rate = s.busy_cpu_ns > 0 ? s.items / (s.busy_cpu_ns / 1e9) : 0.0;
    std::snprintf(line, sizeof line, "%-16s %8d %12lld %9.2fs %9.2fs %9.2fs %9.2fs %12.0f\n",
                  name, s.threads, static_cast<long long>(s.items), s.busy_cpu_ns / 1e9,
                  s.work_ns / 1e9, s.starved_ns / 1e9, s.blocked_ns / 1e9, rate);
    out += line;
  };
  row("fetch", fetch);
  row("decode+augment", prep);
  row("batch", batch);
  std::snprintf(line, sizeof line,
                "%-16s %8s %12lld   waited %.2fs of %.2fs (%.1f%% stalled), longest wait %.1f ms\n",
                "consumer", "", static_cast<long long>(iterations), wait_ns / 1e9,
                (wait_ns + between_ns) / 1e9, 100.0 * StallFraction(), max_wait_ns / 1e6);
  out += line;
  if (has_cache) out += CacheTable(*this);
  if (has_storage) {
    // For remote storage the fetch row's "threads" is the reads-in-flight
    // limit (one dispatcher starts them; they complete on the I/O thread).
    std::snprintf(line, sizeof line,
                  "storage: %lld requests (%lld retried, %lld failed), %.1f MB; reads in flight "
                  "now %lld, limit %d, peak %lld; latency p50 %.1f ms, p99 %.1f ms; "
                  "I/O thread %.2fs CPU\n",
                  static_cast<long long>(storage.requests), static_cast<long long>(storage.retries),
                  static_cast<long long>(storage.errors), storage.bytes / 1e6,
                  static_cast<long long>(storage.in_flight), reads_in_flight_target,
                  static_cast<long long>(storage.peak_in_flight), storage.latency_p50_s * 1e3,
                  storage.latency_p99_s * 1e3, storage.io_cpu_ns / 1e9);
    out += line;
  }
  if (has_autotune) {
    std::string knobs;
    for (const auto& k : autotune_knobs) knobs += (knobs.empty() ? "" : ", ") + k;
    std::snprintf(line, sizeof line,
                  "autotune (%s): threads %d, reads in flight %d, prefetch %d; %lld changes\n",
                  knobs.c_str(), autotune_threads, autotune_reads, autotune_prefetch,
                  static_cast<long long>(autotune_changes));
    out += line;
  }
  if (has_shared) {
    std::snprintf(line, sizeof line,
                  "shared '%s': %s; %lld chunks shared, %lld private, %lld batches copied, "
                  "%lld fallbacks, %lld rejoins\n",
                  shared_name.c_str(), shared_mode.c_str(), static_cast<long long>(shared_chunks),
                  static_cast<long long>(private_chunks), static_cast<long long>(copied_batches),
                  static_cast<long long>(fallbacks), static_cast<long long>(rejoins));
    out += line;
  }
  if (errors > 0) {
    std::snprintf(line, sizeof line, "bad items: %lld (%lld skipped)\n",
                  static_cast<long long>(errors), static_cast<long long>(skipped));
    out += line;
  }
  if (empty_batches_dropped > 0) {
    std::snprintf(line, sizeof line, "batches dropped with every sample skipped: %lld\n",
                  static_cast<long long>(empty_batches_dropped));
    out += line;
  }
  if (private_copies > 0) {
    std::snprintf(line, sizeof line,
                  "batches copied because every other slot was held by the caller: %lld\n",
                  static_cast<long long>(private_copies));
    out += line;
  }
  for (const auto& [name, bytes] : field_bytes) {
    std::snprintf(line, sizeof line, "field %-24.24s %12.1f MB in batches\n", name.c_str(),
                  static_cast<double>(bytes) / 1e6);
    out += line;
  }
  return out;
}

}  // namespace nostall
