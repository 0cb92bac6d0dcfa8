// Resume states: written and checked here only (nostall/resume.h).
#include "nostall/resume.h"

#include <cinttypes>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "common/json_fields.h"

namespace nostall {
namespace {

using json = nlohmann::json;

std::string Hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

// An integer field in [0, hi]: not 3.7 taken as 3, not 1e19 converted.
Result<int64_t> Whole(const json& state, const char* key, int64_t hi) {
  if (!state.contains(key)) return InvalidArgument(std::string("loader state has no ") + key);
  const json& v = state.at(key);
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) ||
      (!v.is_number_unsigned() && (v.get<int64_t>() < 0 || v.get<int64_t>() > hi))) {
    return InvalidArgument(std::string("state ") + key + " must be an integer in [0, " +
                           std::to_string(hi) + "], not " + Shown(v));
  }
  return v.get<int64_t>();
}

}  // namespace

Result<std::string> ResumeStateJson(const Loader& loader, int64_t epoch, int64_t batch,
                                    const std::string& shared_name, const std::vector<ElasticStep>& elastic) {
  const LoaderSpec& spec = loader.spec();
  json state = {{"version", kResumeStateVersion},
                {"epoch", epoch},
                {"batch", batch},
                {"seed", spec.seed},
                {"batch_size", spec.batch_size},
                {"shuffle", spec.shuffle},
                {"rank", spec.rank},
                {"world_size", spec.world_size},
                {"subset", spec.subset},
                {"drop_last", spec.drop_last},
                {"pad_ranks", spec.pad_ranks},
                {"shuffle_block", spec.shuffle_block},
                {"dataset_fingerprint", Hex16(loader.source().fingerprint())}};
  if (!elastic.empty()) {
    json steps = json::array();
    for (const ElasticStep& s : elastic) steps.push_back({s.world_size, s.batch});
    state["elastic"] = steps;
  }
  // Which epoch ran in the buffered order (tar shards indexed as read):
  // resumed, it runs in that order again.
  if (loader.sampler().buffered_epoch() >= 0) {
    state["buffered_epoch"] = loader.sampler().buffered_epoch();
    state["shuffle_buffer"] = spec.shuffle_buffer;
  }
  if (spec.shard_shuffle) {
    state["shard_shuffle"] = true;
    state["shuffle_buffer"] = spec.shuffle_buffer;
  }
  // The window as resolved ("auto" is sized from the cache).
  if (loader.sampler().options().shuffle_window > 0) state["shuffle_window"] = loader.sampler().options().shuffle_window;
  if (!shared_name.empty()) {
    // A consumer's epoch is a stretch of the producer's stream: where it began.
    state["shared"] = shared_name;
    state["spec_fingerprint"] = Hex16(SharedSpecFingerprint(spec));
    if (batch > 0) {
      NOSTALL_ASSIGN_OR_RETURN(SharedPosition p, SharedPositionOf(loader));
      state["stream_position"] = {p.stream_base, p.chunk, p.block_chunks};
    }
  }
  return state.dump();
}

namespace {

// The state's version, and that it was taken by a loader of this kind (a
// shared loader's consumer resumes only from a consumer's state).
Status CheckStateKind(const json& state, bool is_consumer) {
  if (!state.is_object()) return InvalidArgument("a loader state is a JSON object");
  if (!state.contains("version") || state["version"] != kResumeStateVersion) {
    return InvalidArgument("unsupported loader state version " +
                           (state.contains("version") ? Shown(state["version"]) : "(none)"));
  }
  const bool from_consumer = state.contains("shared");
  if (is_consumer && !from_consumer) {
    return InvalidArgument("state was taken from a local loader; a shared loader's consumer "
                           "resumes only from a consumer's state (its epochs follow the "
                           "producer's stream)");
  }
  if (!is_consumer && from_consumer) {
    return InvalidArgument("state was taken from a consumer of shared loader " + Shown(state["shared"]) +
                           "; resume it with Loader.attach(...)");
  }
  return Status::OK();
}

// What orders the batches is as it was: seed, batch size, shuffle, ranks,
// and (a local loader's) subset, drop_last, shuffle_block and pad_ranks.
Status CheckOrder(const json& state, const LoaderSpec& spec, bool from_consumer) {
  json mine = {{"seed", spec.seed}, {"batch_size", spec.batch_size}, {"shuffle", spec.shuffle}};
  // A consumer's place is its rank's in the producer's stream; a loader of
  // its own reads its rank's share of what the state's ranks left.
  if (from_consumer) {
    mine["rank"] = spec.rank;
    mine["world_size"] = spec.world_size;
  }
  // Taken before these were recorded: the defaults, which order as before.
  const json since = {{"subset", 0}, {"drop_last", false}, {"shuffle_block", 0}, {"pad_ranks", true}};
  const json now = {{"subset", spec.subset}, {"drop_last", spec.drop_last},
                    {"shuffle_block", spec.shuffle_block}, {"pad_ranks", spec.pad_ranks}};
  json all = mine;
  for (const auto& [key, value] : since.items()) {
    all[key] = now.at(key);
    // A consumer's order is the producer's stream (its position is
    // checked apart): only a local loader's own order depends on these.
    if (from_consumer) {
      all.erase(key);
      continue;
    }
    if (!state.contains(key) && all[key] != value) {
      return InvalidArgument("loader state has no " + key + " (taken by an older nostall, with " + key + "=" +
                             Shown(value) + "); this loader has " + key + "=" + Shown(all[key]) +
                             ": batches would differ");
    }
  }
  for (const auto& [key, value] : all.items()) {
    if (!state.contains(key)) {
      if (since.contains(key)) continue;
      return InvalidArgument("loader state has no " + key);
    }
    if (state[key] != value) {
      return InvalidArgument("state was taken with " + key + "=" + Shown(state[key]) + ", this loader has " + key +
                             "=" + Shown(value) + ": batches would differ");
    }
  }
  return Status::OK();
}

// Tar shards' buffered epoch and shard shuffle are as they were.
Status CheckBuffered(const json& state, const Loader& loader, ResumePoint* point) {
  const LoaderSpec& spec = loader.spec();
  if (state.contains("buffered_epoch")) {
    NOSTALL_ASSIGN_OR_RETURN(point->buffered_epoch, Whole(state, "buffered_epoch", int64_t{1} << 40));
    if (state.value("shuffle_buffer", json(0)) != json(spec.shuffle_buffer)) {
      return InvalidArgument("state was taken with shuffle_buffer=" + Shown(state.value("shuffle_buffer", json(0))) +
                             ", this loader has shuffle_buffer=" + std::to_string(spec.shuffle_buffer) +
                             ": the buffered epoch's batches would differ");
    }
    if (loader.source().sharded() == nullptr) {
      return InvalidArgument("state has a buffered epoch, which only tar shards have; this dataset is not in shards");
    }
  }
  const int64_t window = loader.sampler().options().shuffle_window;
  if (state.value("shuffle_window", json(0)) != json(window)) {
    return InvalidArgument("state was taken with shuffle_window=" + Shown(state.value("shuffle_window", json(0))) +
                           " samples, this loader's is " + std::to_string(window) +
                           " (\"auto\" is sized from decoded_cache_mb): batches would differ");
  }
  if (state.value("shard_shuffle", false) != spec.shard_shuffle ||
      (spec.shard_shuffle && state.value("shuffle_buffer", json(0)) != json(spec.shuffle_buffer))) {
    return InvalidArgument("state was taken with shard_shuffle=" + Shown(state.value("shard_shuffle", false)) +
                           " and shuffle_buffer=" + Shown(state.value("shuffle_buffer", json(0))) +
                           ", this loader has shard_shuffle=" + (spec.shard_shuffle ? "true" : "false") +
                           " and shuffle_buffer=" + std::to_string(spec.shuffle_buffer) + ": batches would differ");
  }
  return Status::OK();
}

// The steps of an elastic epoch: the state's own, then the state's ranks'
// (none when it was taken at this number of ranks outside an elastic epoch:
// the epoch resumes at its batch, the rank's own share).
Status ElasticSteps(const json& state, const Loader& loader, ResumePoint* point) {
  if (state.contains("elastic")) {
    const json& steps = state.at("elastic");
    if (!steps.is_array() || steps.size() > 64) return InvalidArgument("state elastic must be a list of [world_size, batch]");
    for (const json& s : steps) {
      if (!s.is_array() || s.size() != 2 || !s[0].is_number_integer() || !s[1].is_number_integer() ||
          s[0].get<int64_t>() < 1 || s[0].get<int64_t>() > (1 << 20) || s[1].get<int64_t>() < 0 ||
          s[1].get<int64_t>() > (int64_t{1} << 40)) {
        return InvalidArgument("state elastic steps are [world_size >= 1, batch >= 0], not " + Shown(s));
      }
      point->elastic.push_back({s[0].get<int64_t>(), s[1].get<int64_t>()});
    }
  }
  NOSTALL_ASSIGN_OR_RETURN(int64_t world, Whole(state, "world_size", 1 << 20));
  if (world < 1) return InvalidArgument("state world_size must be >= 1");
  if (point->elastic.empty() && world == loader.spec().world_size) return Status::OK();
  if (point->batch > 0) point->elastic.push_back({world, point->batch});
  point->batch = 0;
  if (!point->elastic.empty() && !loader.sampler().options().durations.empty()) {
    return InvalidArgument("state was taken at world_size=" + std::to_string(world) + ", this loader has world_size=" +
                           std::to_string(loader.spec().world_size) +
                           ": batches of similar durations resume only at the number of ranks they were saved at");
  }
  return Status::OK();
}

// A consumer's state: of this pipeline, and where it was in the producer's stream.
Status ConsumerPosition(const json& state, const LoaderSpec& spec, ResumePoint* point) {
  if (state.value("spec_fingerprint", "") != Hex16(SharedSpecFingerprint(spec))) {
    return InvalidArgument("state was taken from a consumer of another pipeline (spec fingerprints differ)");
  }
  if (point->batch > 0) {
    const json& p = state.at("stream_position");
    if (!p.is_array() || p.size() != 3) return InvalidArgument("stream_position must be [base, chunk, block_chunks]");
    point->stream_position = SharedPosition{p[0].get<int64_t>(), p[1].get<int64_t>(), p[2].get<int64_t>()};
  }
  return Status::OK();
}

}  // namespace

Result<ResumePoint> CheckResumeState(const Loader& loader, bool is_consumer, const std::string& state_json) {
  NOSTALL_RETURN_IF_ERROR(LoaderSpec::CheckJsonDepth(state_json, 8, "the loader state"));
  try {
    const json state = json::parse(state_json);
    NOSTALL_RETURN_IF_ERROR(CheckStateKind(state, is_consumer));
    const LoaderSpec& spec = loader.spec();
    NOSTALL_RETURN_IF_ERROR(CheckOrder(state, spec, state.contains("shared")));
    if (state.value("dataset_fingerprint", "") != Hex16(loader.source().fingerprint())) {
      return InvalidArgument("state was taken on a different dataset (index fingerprints differ)");
    }
    ResumePoint point;
    // Epochs up to 2^40: far beyond any run, and every later count fits.
    NOSTALL_ASSIGN_OR_RETURN(point.epoch, Whole(state, "epoch", int64_t{1} << 40));
    NOSTALL_ASSIGN_OR_RETURN(point.batch, Whole(state, "batch", int64_t{1} << 40));
    NOSTALL_RETURN_IF_ERROR(CheckBuffered(state, loader, &point));
    if (!is_consumer) NOSTALL_RETURN_IF_ERROR(ElasticSteps(state, loader, &point));
    const int64_t batches = loader.sampler().BatchesPerEpoch();
    if (point.batch < 0 || point.batch > batches) {
      return InvalidArgument("state batch " + std::to_string(point.batch) + " is outside the epoch's " +
                             std::to_string(batches));
    }
    if (is_consumer) NOSTALL_RETURN_IF_ERROR(ConsumerPosition(state, spec, &point));
    return point;
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("bad loader state: ") + e.what());
  }
}

}  // namespace nostall
