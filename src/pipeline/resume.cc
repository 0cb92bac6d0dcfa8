// Resume states: written and checked here only (nostall/resume.h).
#include "nostall/resume.h"

#include <cinttypes>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace nostall {
namespace {

using json = nlohmann::json;

std::string Hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

std::string Shown(const json& j) { return j.dump(); }

}  // namespace

Result<std::string> ResumeStateJson(const Loader& loader, int64_t epoch, int64_t batch,
                                    const std::string& shared_name) {
  const LoaderSpec& spec = loader.spec();
  json state = {{"version", kResumeStateVersion},
                {"epoch", epoch},
                {"batch", batch},
                {"seed", spec.seed},
                {"batch_size", spec.batch_size},
                {"shuffle", spec.shuffle},
                {"rank", spec.rank},
                {"world_size", spec.world_size},
                {"dataset_fingerprint", Hex16(loader.source().fingerprint())}};
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

Result<ResumePoint> CheckResumeState(const Loader& loader, bool is_consumer,
                                     const std::string& state_json) {
  try {
    const json state = json::parse(state_json);
    if (!state.is_object()) return InvalidArgument("a loader state is a JSON object");
    if (!state.contains("version") || state["version"] != kResumeStateVersion) {
      return InvalidArgument("unsupported loader state version " +
                             (state.contains("version") ? Shown(state["version"]) : "(none)"));
    }
    const LoaderSpec& spec = loader.spec();
    const json mine = {{"seed", spec.seed},       {"batch_size", spec.batch_size},
                       {"shuffle", spec.shuffle}, {"rank", spec.rank},
                       {"world_size", spec.world_size}};
    for (const auto& [key, value] : mine.items()) {
      if (!state.contains(key)) return InvalidArgument("loader state has no " + key);
      if (state[key] != value) {
        return InvalidArgument("state was taken with " + key + "=" + Shown(state[key]) +
                               ", this loader has " + key + "=" + Shown(value) +
                               ": batches would differ");
      }
    }
    if (state.value("dataset_fingerprint", "") != Hex16(loader.source().fingerprint())) {
      return InvalidArgument("state was taken on a different dataset (index fingerprints differ)");
    }
    ResumePoint point;
    point.epoch = state.at("epoch").get<int64_t>();
    point.batch = state.at("batch").get<int64_t>();
    const int64_t batches = loader.sampler().BatchesPerEpoch();
    if (point.epoch < 0) return InvalidArgument("state epoch " + std::to_string(point.epoch) + " is negative");
    if (point.batch < 0 || point.batch > batches) {
      return InvalidArgument("state batch " + std::to_string(point.batch) +
                             " is outside the epoch's " + std::to_string(batches));
    }
    const bool from_consumer = state.contains("shared");
    if (is_consumer && !from_consumer) {
      return InvalidArgument("state was taken from a local loader; a shared loader's consumer "
                             "resumes only from a consumer's state (its epochs follow the "
                             "producer's stream)");
    }
    if (!is_consumer && from_consumer) {
      return InvalidArgument("state was taken from a consumer of shared loader " +
                             Shown(state["shared"]) + "; resume it with Loader.attach(...)");
    }
    if (is_consumer) {
      if (state.value("spec_fingerprint", "") != Hex16(SharedSpecFingerprint(spec))) {
        return InvalidArgument("state was taken from a consumer of another pipeline (spec "
                               "fingerprints differ)");
      }
      if (point.batch > 0) {
        const json& p = state.at("stream_position");
        if (!p.is_array() || p.size() != 3) {
          return InvalidArgument("stream_position must be [base, chunk, block_chunks]");
        }
        point.stream_position =
            SharedPosition{p[0].get<int64_t>(), p[1].get<int64_t>(), p[2].get<int64_t>()};
      }
    }
    return point;
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("bad loader state: ") + e.what());
  }
}

}  // namespace nostall
