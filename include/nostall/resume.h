// Resuming a loader: the state a training checkpoint keeps, and the checks
// that it fits the loader it is loaded into. One implementation for Python's
// state_dict()/load_state_dict(), the CLI and `serve`.
//
// The state is a JSON object (docs/spec.md, "Resuming"):
//   {"version": 1, "epoch": E, "batch": B, "seed": .., "batch_size": ..,
//    "shuffle": .., "rank": .., "world_size": .., "dataset_fingerprint": "hex16",
//    and for a consumer of a shared loader: "shared": NAME,
//    "spec_fingerprint": "hex16", "stream_position": [base, chunk, block_chunks]}
#ifndef NOSTALL_RESUME_H_
#define NOSTALL_RESUME_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nostall/loader.h"
#include "nostall/sampler.h"
#include "nostall/shared.h"
#include "nostall/status.h"

namespace nostall {

inline constexpr int kResumeStateVersion = 1;

// The state of `loader` at batch `batch` of epoch `epoch` (the next batch it
// would hand out). `shared_name`: the shared loader it is a consumer of, or
// "" for a loader of its own.
// `elastic`: the steps of an elastic epoch before this one (sampler.h).
Result<std::string> ResumeStateJson(const Loader& loader, int64_t epoch, int64_t batch,
                                    const std::string& shared_name,
                                    const std::vector<ElasticStep>& elastic = {});

struct ResumePoint {
  int64_t epoch = 0;
  int64_t batch = 0;
  std::optional<SharedPosition> stream_position;  // a consumer resuming mid-epoch
  int64_t buffered_epoch = -1;  // the epoch that ran buffered (-1: none)
  // Taken at another number of ranks (or in an elastic epoch): the epoch
  // resumes elastic (sampler.h), from its batch 0, holding what is unread.
  std::vector<ElasticStep> elastic;
};

// Checks `state_json` against `loader` (same seed, batch size, shuffle and
// dataset; for a loader of its own any rank and world size: ranks step
// together, so a state says how far every rank was, and at another world
// size the epoch resumes elastic; for a consumer the same rank and world size; a consumer's state only for a consumer of
// the same pipeline, and the other way round) and says where to resume. An
// InvalidArgument error says what differs.
Result<ResumePoint> CheckResumeState(const Loader& loader, bool is_consumer,
                                     const std::string& state_json);

}  // namespace nostall

#endif  // NOSTALL_RESUME_H_
