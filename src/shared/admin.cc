// Shared loader administration: listing, inspecting and removing named
// rings without attaching to them, and the spec fingerprint consumers check.
#include "nostall/shared.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <limits>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "common/fd.h"
#include "common/process.h"
#include "common/shm.h"
#include "ring/ring.h"

namespace nostall {

using namespace ring;  // NOLINT: this file reads the named ring's header

void MakeHeaderClaimLiveProducerForFuzzing(void* bytes, size_t size) {
  if (size < sizeof(Header)) return;
  auto* h = static_cast<Header*>(bytes);
  std::memcpy(h->magic, kMagic, sizeof kMagic);
  h->version = kVersion;
  h->producer_pid = ::getpid();
  h->producer_start_time = SelfStartTime();
  h->heartbeat_ns.store(NowNs());
  h->state.store(kRunning);
}

uint64_t SharedSpecFingerprint(const LoaderSpec& spec) {
  LoaderSpec s = spec;
  s.batch_size = 1;
  s.shuffle_block = 0;
  s.drop_last = false;
  return s.Fingerprint();
}

std::vector<std::string> ListShared() {
  std::vector<std::string> names;
  // This user's: others' names hold their uids (attach OWNER:NAME to one
  // shared with a group of yours).
  const std::string prefix = "nostall-shared-" + std::to_string(::geteuid()) + "-";
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.rfind(prefix, 0) == 0) names.push_back(n.substr(prefix.size()));
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

Result<SharedInfo> InspectShared(const std::string& name) {
  NOSTALL_ASSIGN_OR_RETURN(std::shared_ptr<Segment> seg,
                           OpenNamedRing(name, /*writable=*/false, /*wait_s=*/0));
  const Header& h = *seg->h;
  SharedInfo info;
  info.name = name;
  const uint32_t state = h.state.load();
  const bool alive = ProcessAlive(h.producer_pid, h.producer_start_time);
  info.state = state == kClosed ? "stopped" : state == kFailed ? "failed" : alive ? "serving" : "dead";
  if (state == kFailed) info.error = std::string(h.error, strnlen(h.error, sizeof h.error));
  info.producer_pid = h.producer_pid;
  info.heartbeat_age_s = (NowNs() - h.heartbeat_ns.load()) / 1e9;
  info.segment_bytes = seg->mapping.size();
  Result<LoaderSpec> spec = LoaderSpec::FromJson(seg->Spec());
  if (spec.ok()) info.source = spec.value().source;
  info.chunk = seg->g.chunk;
  info.samples_per_epoch = seg->g.samples_per_epoch;
  info.chunks_per_epoch = seg->g.chunks_per_epoch;
  info.produced = h.produced.load();
  info.slots = seg->g.slot_count;
  info.max_consumers = seg->g.max_consumers;
  info.evictions = h.evictions.load();
  info.reaped = h.reaped.load();
  // Nobody reaps for a producer that is gone: say which consumers are gone too.
  info.consumers = seg->Consumers(/*check_alive=*/true);
  return info;
}

Status RemoveShared(const std::string& name) {
  NOSTALL_ASSIGN_OR_RETURN(SegmentRef ref, ParseSegmentRef(name));
  NOSTALL_RETURN_IF_ERROR(ValidName(ref.name));
  Result<SharedInfo> info = InspectShared(name);
  if (info.ok() && info.value().state == "serving") {
    const std::string pid = std::to_string(info.value().producer_pid);
    return FailedPrecondition("shared loader '" + name + "' is served by pid " + pid +
                              "; stop it (Ctrl-C, or kill " + pid +
                              ") and it removes its shared memory itself");
  }
  if (!info.ok() && info.status().code() == StatusCode::kNotFound) return info.status();
  // Gone, or damaged / of another version: in nostall's namespace either way.
  if (::shm_unlink(SegmentName(name).c_str()) != 0) {
    if (errno == ENOENT) return NotFound("no shared loader '" + name + "' on this node");
    return ErrnoError("cannot remove shared loader '" + name + "'", errno);
  }
  return Status::OK();
}

}  // namespace nostall
