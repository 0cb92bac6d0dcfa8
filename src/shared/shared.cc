// Shared loader: the producer and the consumer of docs/shared_format.md.
//
// Who writes what:
//   header        producer (once; then heartbeat, produced, state, evictions)
//   slot table    producer (seq, state, count, epoch, chunk); consumers read
//   pins          each consumer its own column (+1 per live view of a slot);
//                 the producer clears a dead consumer's column
//   consumer row  its consumer (claim, need, state ACTIVE), the producer
//                 (state LAGGED when it leaves one behind, FREE when it died).
//                 A row is owned while its pid is non-zero: claimed by CAS of
//                 the pid from 0, released by storing 0 last.
//
// The two races that matter are settled Dekker-style with sequentially
// consistent operations on both sides:
//   * overwrite vs need: the producer marks a slot WRITING, then reads every
//     active consumer's `need`; a consumer publishes `need` and ACTIVE, then
//     reads the slot. One of them sees the other.
//   * overwrite vs pin: the producer marks WRITING, then reads the slot's
//     pins; a consumer adds its pin, then re-reads the slot's state and seq.
#include "nostall/shared.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/syscall.h>
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
#include "ring/batch_ring.h"
#include "stats/consumer_recorder.h"

namespace nostall {
namespace {

constexpr char kMagic[8] = {'N', 'S', 'T', 'S', 'H', 'R', 'D', '1'};
constexpr uint32_t kVersion = 2;
constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
enum : uint32_t { kRunning = 1, kClosed = 2, kFailed = 3 };
enum : uint32_t { kFree = 0, kActive = 1, kLagged = 2, kClaimed = 3 };
enum : uint32_t { kEmpty = 0, kWriting = 1, kReady = 2 };

struct alignas(64) Header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint64_t spec_fingerprint;
  uint64_t dataset_fingerprint;
  int64_t producer_pid;
  uint64_t producer_start_time;
  std::atomic<int64_t> heartbeat_ns;  // CLOCK_MONOTONIC, every 100 ms
  std::atomic<uint32_t> state;
  uint32_t max_consumers;
  uint32_t slot_count;
  uint32_t dtype;  // 0 uint8, 1 float32
  int64_t chunk, samples_per_epoch, chunks_per_epoch, block_chunks;
  uint64_t sample_bytes;
  int64_t shape[3];
  std::atomic<int64_t> produced;  // chunks published: the next seq
  // Futex words: bumped (and woken) when a chunk is published, and when a
  // consumer lets go of something the producer may be waiting for.
  std::atomic<uint32_t> published_gen;
  std::atomic<uint32_t> released_gen;
  std::atomic<int64_t> evictions;
  std::atomic<int64_t> reaped;
  uint64_t consumers_offset, slots_offset, pins_offset, spec_offset, spec_bytes;
  uint64_t data_offset, slot_stride;
  char error[512];
};

struct alignas(64) ConsumerRow {
  std::atomic<uint32_t> state;
  std::atomic<int64_t> pid;  // the owner; 0: free
  std::atomic<uint64_t> start_time;
  std::atomic<int64_t> need;
};

struct alignas(64) SlotRow {
  std::atomic<int64_t> seq;  // -1: never written
  std::atomic<uint32_t> state;
  std::atomic<int64_t> published_ns;  // CLOCK_MONOTONIC when it became READY
  int64_t count, epoch, chunk_in_epoch;
};

uint64_t RoundUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Blocks while *word == expected, at most `timeout_ns` (futex on shared
// memory: works across processes).
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000), static_cast<long>(timeout_ns % 1000000000)};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void Bump(std::atomic<uint32_t>* word) {
  word->fetch_add(1);
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

Status ValidName(const std::string& name) {
  if (name.empty() || name.size() > 200) return InvalidArgument("shared loader name must be 1-200 characters");
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return InvalidArgument("shared loader name '" + name +
                             "' may hold only letters, digits, '-', '_' and '.'");
    }
  }
  return Status::OK();
}

std::string SegmentName(const std::string& name) { return "/nostall-shared-" + name; }


// The header's layout fields, read once. Other processes can write the
// header at any time (a bug, damage, hostility): each process checks this
// copy against its mapping (CheckGeometry) and from then on uses only the
// copy, so a header changed after attach cannot move a read out of bounds.
struct Geometry {
  uint32_t header_bytes = 0, max_consumers = 0, slot_count = 0, dtype = 0;
  int64_t chunk = 0, samples_per_epoch = 0, chunks_per_epoch = 0, block_chunks = 0;
  uint64_t sample_bytes = 0;
  int64_t shape[3] = {0, 0, 0};
  uint64_t consumers_offset = 0, slots_offset = 0, pins_offset = 0, spec_offset = 0,
           spec_bytes = 0, data_offset = 0, slot_stride = 0;
};

Geometry ReadGeometry(const Header& h) {
  // volatile: one load per field, whatever the compiler would like to re-read.
  const volatile Header& v = h;
  Geometry g;
  g.header_bytes = v.header_bytes;
  g.max_consumers = v.max_consumers;
  g.slot_count = v.slot_count;
  g.dtype = v.dtype;
  g.chunk = v.chunk;
  g.samples_per_epoch = v.samples_per_epoch;
  g.chunks_per_epoch = v.chunks_per_epoch;
  g.block_chunks = v.block_chunks;
  g.sample_bytes = v.sample_bytes;
  for (int i = 0; i < 3; ++i) g.shape[i] = v.shape[i];
  g.consumers_offset = v.consumers_offset;
  g.slots_offset = v.slots_offset;
  g.pins_offset = v.pins_offset;
  g.spec_offset = v.spec_offset;
  g.spec_bytes = v.spec_bytes;
  g.data_offset = v.data_offset;
  g.slot_stride = v.slot_stride;
  return g;
}

// A mapped segment with typed views; shared by the loader and every lease.
struct Segment {
  Mapping mapping;
  std::string name;
  Geometry g;  // checked; the only layout this process trusts
  Header* h = nullptr;
  ConsumerRow* consumers = nullptr;
  SlotRow* slots = nullptr;
  std::atomic<uint32_t>* pins = nullptr;
  uint8_t* data = nullptr;

  // Points the views into the mapping by `geometry` (already checked).
  void Bind(const Geometry& geometry) {
    g = geometry;
    auto* base = static_cast<uint8_t*>(mapping.data());
    h = reinterpret_cast<Header*>(base);
    consumers = reinterpret_cast<ConsumerRow*>(base + g.consumers_offset);
    slots = reinterpret_cast<SlotRow*>(base + g.slots_offset);
    pins = reinterpret_cast<std::atomic<uint32_t>*>(base + g.pins_offset);
    data = base + g.data_offset;
  }
  std::atomic<uint32_t>& pin(uint32_t slot, uint32_t consumer) const {
    return pins[static_cast<size_t>(slot) * g.max_consumers + consumer];
  }
  uint8_t* images(uint32_t s) const { return data + s * g.slot_stride; }
  int64_t* labels(uint32_t s) const {
    return reinterpret_cast<int64_t*>(images(s) + RoundUp(g.chunk * g.sample_bytes, 64));
  }
  int64_t* indices(uint32_t s) const { return labels(s) + g.chunk; }
  int64_t ChunkCount(int64_t seq) const {
    const int64_t k = seq % g.chunks_per_epoch;
    return k == g.chunks_per_epoch - 1 ? g.samples_per_epoch - k * g.chunk : g.chunk;
  }
  std::string Spec() const {
    return std::string(reinterpret_cast<const char*>(mapping.data()) + g.spec_offset,
                       g.spec_bytes);
  }
  // The first chunk from which the segment holds every chunk up to the
  // newest published one (`produced` when it holds none): where a consumer
  // may start or rejoin. Older chunks may still sit in a slot, but with gaps
  // after them (a slot nobody needed was reused), so they are no start.
  int64_t HeldFrom() const {
    const int64_t produced = h->produced.load();
    std::vector<int64_t> ready;
    for (uint32_t s = 0; s < g.slot_count; ++s) {
      if (slots[s].state.load() == kReady) ready.push_back(slots[s].seq.load());
    }
    std::sort(ready.rbegin(), ready.rend());
    int64_t from = produced;
    for (int64_t seq : ready) {
      if (seq == from - 1) from = seq;
      else if (seq < from - 1) break;
    }
    return from;
  }
  // The owned rows of consumers that attached (claimed rows that have not
  // yet are left out); with `check_alive`, a dead one's state says "dead".
  std::vector<ConsumerInfo> Consumers(bool check_alive = false) const {
    std::vector<ConsumerInfo> out;
    for (uint32_t i = 0; i < g.max_consumers; ++i) {
      const ConsumerRow& c = consumers[i];
      const uint32_t state = c.state.load();
      const int64_t pid = c.pid.load();
      if (pid == 0 || (state != kActive && state != kLagged)) continue;
      std::string what = state == kActive ? "active" : "lagged";
      if (check_alive && !ProcessAlive(pid, c.start_time.load())) what = "dead";
      out.push_back({pid, what, c.need.load()});
    }
    return out;
  }
  // Lets go of consumer row `i` and everything it holds; the pid goes last,
  // so the row is free for another claim only once it is clean.
  void ReleaseRow(uint32_t i) const {
    ConsumerRow& c = consumers[i];
    for (uint32_t s = 0; s < g.slot_count; ++s) pin(s, i).store(0);
    CrashPoint("consumer.releasing");
    c.need.store(kNone);
    c.state.store(kFree);
    c.start_time.store(0);
    c.pid.store(0);
    Bump(&h->released_gen);
  }
};

// ------------------------------------------------------------------ producer

class Producer final : public SharedProducer {
 public:
  Producer(std::shared_ptr<Segment> seg, std::unique_ptr<Loader> pipeline, LoaderSpec spec,
           ServeOptions options)
      : seg_(std::move(seg)), pipeline_(std::move(pipeline)), spec_(std::move(spec)),
        options_(options) {
    watcher_ = std::thread([this] { Watch(); });
  }

  ~Producer() override {
    stop_watch_.store(true);
    watcher_.join();
    if (seg_->h->state.load() == kRunning) seg_->h->state.store(kClosed);
    ::shm_unlink(seg_->name.c_str());
  }

  const LoaderSpec& spec() const override { return spec_; }

  ProducerStatus Snapshot() const override {
    ProducerStatus st;
    const Header& h = *seg_->h;
    st.produced = h.produced.load();
    st.chunks_per_epoch = seg_->g.chunks_per_epoch;
    st.evictions = h.evictions.load();
    st.reaped = h.reaped.load();
    st.consumers = seg_->Consumers();
    return st;
  }

  Status Run(const std::atomic<bool>& stop) override {
    Status st = Serve(stop);
    if (!st.ok()) {
      std::snprintf(seg_->h->error, sizeof seg_->h->error, "%s", st.ToString().c_str());
      seg_->h->state.store(kFailed);
    }
    return st;
  }

 private:
  Status Serve(const std::atomic<bool>& stop) {
    int64_t epoch = 0;
    NOSTALL_RETURN_IF_ERROR(pipeline_->StartEpoch(epoch));
    int64_t seq = seg_->h->produced.load();
    while (!stop.load()) {
      NextStatus ns;
      std::shared_ptr<Batch> batch;
      NOSTALL_RETURN_IF_ERROR(pipeline_->Next(50, &ns, &batch));
      if (ns == NextStatus::kTimeout) continue;
      if (ns == NextStatus::kEndOfEpoch) {
        NOSTALL_RETURN_IF_ERROR(pipeline_->StartEpoch(++epoch));
        continue;
      }
      int64_t slot = -1;
      while (!stop.load()) {
        const uint32_t gen = seg_->h->released_gen.load();
        if ((slot = ClaimSlot()) >= 0) break;
        FutexWait(&seg_->h->released_gen, gen, 20000000);  // 20 ms: lag checks, stop
      }
      if (slot < 0) break;
      Publish(static_cast<uint32_t>(slot), *batch, seq++);
    }
    return Status::OK();
  }

  // A slot whose chunk no active consumer needs and nobody views, marked
  // WRITING; -1 if none (and then, after max_lag_s, the consumers holding
  // everyone back are left behind).
  int64_t ClaimSlot() {
    Header& h = *seg_->h;
    int64_t min_need = kNone;
    for (uint32_t i = 0; i < seg_->g.max_consumers; ++i) {
      if (seg_->consumers[i].state.load() == kActive) {
        min_need = std::min(min_need, seg_->consumers[i].need.load());
      }
    }
    // Nobody attached: fill empty slots (so the first consumer starts at
    // once), but keep what is there rather than spin through the dataset.
    const bool anyone = min_need != kNone;
    bool blocked_by_need = false;
    for (uint32_t s = 0; s < seg_->g.slot_count; ++s) {
      SlotRow& row = seg_->slots[s];
      uint32_t state = row.state.load();
      if (state == kWriting) continue;
      const int64_t old = row.seq.load();
      if (state == kReady && (!anyone || old >= min_need)) {
        blocked_by_need = anyone;
        continue;
      }
      if (!row.state.compare_exchange_strong(state, kWriting)) continue;
      CrashPoint("producer.slot_writing");
      // Now that the slot says WRITING: does anyone still need or view it?
      bool busy = false;
      for (uint32_t i = 0; i < seg_->g.max_consumers && !busy; ++i) {
        const ConsumerRow& c = seg_->consumers[i];
        if (old >= 0 && c.state.load() == kActive && c.need.load() <= old) busy = true;
        if (seg_->pin(s, i).load() != 0) busy = true;
      }
      if (!busy) return s;
      row.state.store(state);  // give it back untouched
    }
    // Left behind: while the producer waits on the slowest consumer and
    // another consumer waits on the producer, a consumer whose next chunk was
    // published more than max_lag ago is too far behind to set the pace.
    bool someone_waits = false;
    const int64_t next = h.produced.load();
    for (uint32_t i = 0; i < seg_->g.max_consumers; ++i) {
      const ConsumerRow& c = seg_->consumers[i];
      if (c.state.load() == kActive && c.need.load() >= next) someone_waits = true;
    }
    if (!blocked_by_need || !someone_waits) return -1;
    const int64_t now = NowNs();
    const int64_t lag_ns = static_cast<int64_t>(options_.max_lag_s * 1e9);
    for (uint32_t i = 0; i < seg_->g.max_consumers; ++i) {
      ConsumerRow& c = seg_->consumers[i];
      if (c.state.load() != kActive) continue;
      const int64_t need = c.need.load();
      int64_t published = now;
      for (uint32_t s = 0; s < seg_->g.slot_count; ++s) {
        if (seg_->slots[s].seq.load() == need) published = seg_->slots[s].published_ns.load();
      }
      uint32_t active = kActive;
      if (now - published > lag_ns && c.state.compare_exchange_strong(active, kLagged)) {
        h.evictions.fetch_add(1);
        if (options_.verbose) {
          std::fprintf(stderr, "nostall serve: consumer pid %lld is more than %.1fs behind; "
                       "it continues on its own pipeline\n",
                       static_cast<long long>(c.pid.load()), options_.max_lag_s);
        }
      }
    }
    return -1;
  }

  void Publish(uint32_t s, const Batch& b, int64_t seq) {
    const uint64_t sb = seg_->g.sample_bytes;
    const auto n = static_cast<size_t>(b.size());
    std::memcpy(seg_->images(s), b.images(), n * sb);
    std::memcpy(seg_->labels(s), b.labels(), n * sizeof(int64_t));
    std::memcpy(seg_->indices(s), b.indices(), n * sizeof(int64_t));
    CrashPoint("producer.slot_copied");
    SlotRow& row = seg_->slots[s];
    row.count = b.size();
    row.epoch = b.epoch();
    row.chunk_in_epoch = b.index();
    row.seq.store(seq);
    row.published_ns.store(NowNs());
    row.state.store(kReady);
    CrashPoint("producer.slot_ready");
    seg_->h->produced.store(seq + 1);
    Bump(&seg_->h->published_gen);
  }

  // Every 100 ms: the heartbeat, and consumers that died are released.
  void Watch() {
    while (!stop_watch_.load()) {
      Header& h = *seg_->h;
      h.heartbeat_ns.store(NowNs());
      for (uint32_t i = 0; i < seg_->g.max_consumers; ++i) {
        ConsumerRow& c = seg_->consumers[i];
        // A consistent (pid, start time): a row freed and claimed again
        // between the two loads shows another pid on the second.
        const int64_t pid = c.pid.load();
        if (pid == 0) continue;
        const uint64_t start = c.start_time.load();
        if (c.pid.load() != pid || ProcessAlive(pid, start)) continue;
        // Dead: only this thread touches the row until it is released.
        seg_->ReleaseRow(i);
        h.reaped.fetch_add(1);
        if (options_.verbose) {
          std::fprintf(stderr, "nostall serve: consumer pid %lld is gone; its slots are released\n",
                       static_cast<long long>(pid));
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  std::shared_ptr<Segment> seg_;
  std::unique_ptr<Loader> pipeline_;
  LoaderSpec spec_;
  ServeOptions options_;
  std::atomic<bool> stop_watch_{false};
  std::thread watcher_;
};

// ------------------------------------------------------------------ consumer

// The row a consumer holds in the segment; freed when the loader and every
// lease are gone.
struct Registration {
  std::shared_ptr<Segment> seg;
  uint32_t me = 0;
  ~Registration() { seg->ReleaseRow(me); }
};

// One chunk held by the consumer: a pinned slot of the segment, or a batch of
// the private pipeline. Destroying it lets the slot go.
struct ChunkLease {
  std::shared_ptr<Segment> seg;
  std::shared_ptr<Registration> reg;  // the row outlives every view
  uint32_t slot = 0, me = 0;
  std::shared_ptr<Batch> private_batch;
  std::shared_ptr<std::atomic<int>> live;
  const uint8_t* images = nullptr;
  const int64_t* labels = nullptr;
  const int64_t* indices = nullptr;
  int64_t count = 0;
  ~ChunkLease() {
    if (seg) {
      seg->pin(slot, me).fetch_sub(1);
      Bump(&seg->h->released_gen);
    }
    if (live) live->fetch_sub(1);
  }
};

class ConsumerBatch final : public Batch {
 public:
  ConsumerBatch(int64_t epoch, int64_t index, int64_t size) : epoch_(epoch), index_(index), size_(size) {}
  int64_t epoch() const override { return epoch_; }
  int64_t index() const override { return index_; }
  int64_t size() const override { return size_; }
  const void* images() const override { return images_; }
  const int64_t* labels() const override { return labels_; }
  const int64_t* indices() const override { return indices_; }

  std::shared_ptr<ChunkLease> lease;  // zero-copy: a view into this chunk
  std::vector<uint8_t> own_images;    // or copies
  std::vector<int64_t> own_labels, own_indices;
  const void* images_ = nullptr;
  const int64_t* labels_ = nullptr;
  const int64_t* indices_ = nullptr;

 private:
  int64_t epoch_, index_, size_;
};



// Where a consumer enters the stream: the first block boundary from which
// the segment holds every chunk up to the newest (or the next chunk to come,
// rounded up to a block). Publishes `need` = that chunk and ACTIVE, then
// checks again: with the need visible, nothing from there on is overwritten
// any more, so if all of it is still there the consumer is in. Otherwise
// (the producer moved on meanwhile) tries again, `attempts` times, and on
// failure leaves the row in `fallback_state`.
bool EnterStream(const Segment& seg, uint32_t me, uint32_t fallback_state, int attempts,
                 int64_t* start) {
  ConsumerRow& row = seg.consumers[me];
  const int64_t k = seg.g.chunks_per_epoch, bc = seg.g.block_chunks;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    const int64_t from = seg.HeldFrom();
    const int64_t epoch_start = from - from % k;
    int64_t block_start = epoch_start + (from % k + bc - 1) / bc * bc;
    if (block_start - epoch_start >= k) block_start = epoch_start + k;  // next epoch
    row.need.store(block_start);
    row.state.store(kActive);
    Bump(&seg.h->released_gen);
    CrashPoint("consumer.need_published");
    if (seg.HeldFrom() <= block_start) {
      *start = block_start;
      return true;
    }
    row.state.store(fallback_state);
  }
  row.need.store(kNone);
  Bump(&seg.h->released_gen);
  return false;
}

// Chunks a consumer may hold views of before it hands out copies instead:
// views the caller keeps must not hold the producer (or the consumer's own
// private pipeline) back.
constexpr int kMaxLiveViews = 3;

class Consumer final : public Loader {
 public:
  Consumer(std::shared_ptr<Segment> seg, std::shared_ptr<Registration> reg, LoaderSpec producer_spec,
           LoaderSpec spec, std::unique_ptr<Source> source, Sampler sampler, AttachOptions options,
           int64_t start)
      : seg_(std::move(seg)), reg_(std::move(reg)), producer_spec_(std::move(producer_spec)),
        spec_(std::move(spec)), source_(std::move(source)), sampler_(std::move(sampler)),
        options_(options) {
    me_ = reg_->me;
    SetBase(start);
    mode_ = "shared";
  }

  ~Consumer() override {
    // Views the caller still holds keep their pins (and the row, through the
    // registration); the producer stops waiting for this consumer now.
    ConsumerRow& row = seg_->consumers[me_];
    row.state.store(kLagged);
    row.need.store(kNone);
    Bump(&seg_->h->released_gen);
  }

  Status StartEpoch(int64_t epoch, int64_t first_batch) override {
    if (first_batch != 0) {
      return FailedPrecondition("a shared loader's consumer resumes mid-epoch only from the "
                                "stream position it saved (state_dict / load_state_dict)");
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (started_) {
      // The next epoch, abandoning what is left of this one: the next K
      // chunks, or, off the segment, wherever the segment is now (any block
      // boundary starts a whole epoch).
      int64_t next = base_ + seg_->g.chunks_per_epoch;
      int64_t at = 0;
      if (mode_ == "private" && !producer_gone_ && EnterStream(*seg_, me_, kLagged, 3, &at)) {
        next = at;
        mode_ = "shared";
        ++rejoins_;
      }
      SetBase(next);
    }
    started_ = true;
    label_epoch_ = epoch;
    batch_ = 0;
    consumer_.EpochStarted();
    return Status::OK();
  }

  // The first chunk of the current epoch (with the batch index, where a
  // resumed consumer continues).
  SharedPosition Position() const {
    std::lock_guard<std::mutex> lock(mu_);
    return {base_, seg_->g.chunk, seg_->g.block_chunks};
  }

  Status Resume(int64_t epoch, const SharedPosition& position, int64_t first_batch) {
    const int64_t base = position.stream_base;
    if (position.chunk != seg_->g.chunk || position.block_chunks != seg_->g.block_chunks) {
      return InvalidArgument("the saved position is in a stream of chunks of " +
                             std::to_string(position.chunk) + " in blocks of " +
                             std::to_string(position.block_chunks) + "; this producer serves chunks of " +
                             std::to_string(seg_->g.chunk) + " in blocks of " + std::to_string(seg_->g.block_chunks) +
                             " (serve with the same --chunk and --block-chunks to resume)");
    }
    if (base < 0 || base % seg_->g.chunks_per_epoch % seg_->g.block_chunks != 0) {
      return InvalidArgument("stream position " + std::to_string(base) + " is not where an "
                             "epoch of this shared loader can start (a state from another one?)");
    }
    const int64_t batches = (seg_->g.samples_per_epoch + spec_.batch_size - 1) / spec_.batch_size;
    if (first_batch < 0 || first_batch > batches) {
      return InvalidArgument("batch " + std::to_string(first_batch) + " is outside the epoch's " +
                             std::to_string(batches));
    }
    std::lock_guard<std::mutex> lock(mu_);
    SetBase(base);
    started_ = true;
    label_epoch_ = epoch;
    batch_ = first_batch;
    consumer_.EpochStarted();
    // From its private pipeline at that exact position, until the segment
    // holds what it needs (Acquire tries to rejoin before every chunk).
    ConsumerRow& row = seg_->consumers[me_];
    row.state.store(kLagged);
    row.need.store(kNone);
    Bump(&seg_->h->released_gen);
    held_.reset();
    mode_ = "private";
    reason_ = "resumed from a saved position";
    return Status::OK();
  }

  Status Next(int64_t timeout_ms, NextStatus* status, std::shared_ptr<Batch>* out) override {
    const int64_t t0 = NowNs();
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_) return FailedPrecondition("StartEpoch was not called");
    consumer_.CallStarted(label_epoch_, t0);
    const int64_t n = seg_->g.samples_per_epoch;
    const int64_t b = spec_.batch_size;
    const int64_t lo = batch_ * b;
    if (lo >= n) {
      *status = NextStatus::kEndOfEpoch;
      return Status::OK();
    }
    const int64_t hi = std::min(n, lo + b);
    const int64_t deadline = timeout_ms < 0 ? kNone : t0 + timeout_ms * 1000000;
    const uint64_t sb = seg_->g.sample_bytes;
    // The chunks this batch spans.
    const int64_t first = ChunkIndex(lo), last = ChunkIndex(hi - 1);
    // A timed-out wait returns here; a batch spanning several chunks keeps
    // what it has copied for the next call.
    auto timed_out = [&] {
      consumer_.Waited(label_epoch_, NowNs() - t0);
      consumer_.TimedOut();
      *status = NextStatus::kTimeout;
      return Status::OK();
    };
    std::shared_ptr<ConsumerBatch> batch;
    if (first == last) {
      std::shared_ptr<ChunkLease> c;
      Status st = Acquire(EpochBase() + first, deadline, &c);
      if (!st.ok()) {
        consumer_.Waited(label_epoch_, NowNs() - t0);
        return st;
      }
      if (!c) return timed_out();
      batch = std::make_shared<ConsumerBatch>(label_epoch_, batch_, hi - lo);
      const int64_t off = lo - prefix_[first];
      // Zero-copy, unless this consumer already holds views of enough chunks
      // (views kept by the caller would hold the producer, or the private
      // pipeline's slots, back).
      if (live_->load() <= kMaxLiveViews) {
        batch->lease = c;
        batch->images_ = c->images + off * sb;
        batch->labels_ = c->labels + off;
        batch->indices_ = c->indices + off;
      } else {
        ++copied_batches_;
        batch->own_images.assign(c->images + off * sb, c->images + (off + hi - lo) * sb);
        batch->own_labels.assign(c->labels + off, c->labels + off + (hi - lo));
        batch->own_indices.assign(c->indices + off, c->indices + off + (hi - lo));
        batch->images_ = batch->own_images.data();
        batch->labels_ = batch->own_labels.data();
        batch->indices_ = batch->own_indices.data();
      }
      held_ = std::move(c);
      held_seq_ = EpochBase() + first;
    } else {
      // Spanning chunks: copied one chunk at a time, each let go (but the
      // newest) before the next is asked for, so a batch of any size holds
      // at most two chunks — never all the slots of the segment or of the
      // private pipeline.
      if (!partial_ || partial_->index() != batch_ || partial_->epoch() != label_epoch_) {
        partial_ = std::make_shared<ConsumerBatch>(label_epoch_, batch_, hi - lo);
        partial_->own_images.resize(static_cast<size_t>(hi - lo) * sb);
        partial_->own_labels.resize(static_cast<size_t>(hi - lo));
        partial_->own_indices.resize(static_cast<size_t>(hi - lo));
        partial_pos_ = lo;
      }
      while (partial_pos_ < hi) {
        const int64_t i = ChunkIndex(partial_pos_);
        std::shared_ptr<ChunkLease> c;
        Status st = Acquire(EpochBase() + i, deadline, &c);
        if (!st.ok()) {
          consumer_.Waited(label_epoch_, NowNs() - t0);
          partial_.reset();
          return st;
        }
        if (!c) return timed_out();
        const int64_t from = partial_pos_ - prefix_[i];
        const int64_t take = std::min(hi, prefix_[i + 1]) - partial_pos_;
        const int64_t to = partial_pos_ - lo;
        std::memcpy(partial_->own_images.data() + to * sb, c->images + from * sb, take * sb);
        std::memcpy(partial_->own_labels.data() + to, c->labels + from, take * sizeof(int64_t));
        std::memcpy(partial_->own_indices.data() + to, c->indices + from, take * sizeof(int64_t));
        partial_pos_ += take;
        // Kept: the next batch most likely starts in it; the one before goes
        // when the next chunk is acquired.
        held_ = std::move(c);
        held_seq_ = EpochBase() + i;
      }
      ++copied_batches_;
      batch = std::move(partial_);
      batch->images_ = batch->own_images.data();
      batch->labels_ = batch->own_labels.data();
      batch->indices_ = batch->own_indices.data();
    }
    consumer_.Waited(label_epoch_, NowNs() - t0);
    ++batch_;
    consumer_.Delivered(label_epoch_, hi - lo, NowNs());
    CrashPoint("consumer.batch_made");
    *out = std::move(batch);
    *status = NextStatus::kBatch;
    return Status::OK();
  }

  LoaderStats Stats() const override {
    LoaderStats st;
    std::lock_guard<std::mutex> lock(mu_);
    if (private_) {
      LoaderStats p = private_->Stats();
      st.fetch = p.fetch;
      st.prep = p.prep;
      st.batch = p.batch;
    }
    consumer_.Fill(&st);
    for (const auto& e : st.consumer_epochs) {
      st.batches += e.batches;
      st.samples += e.samples;
    }
    st.has_shared = true;
    st.shared_name = seg_->name.substr(std::strlen("/nostall-shared-"));
    st.shared_mode = mode_;
    st.shared_reason = reason_;
    st.shared_chunks = shared_chunks_;
    st.private_chunks = private_chunks_;
    st.copied_batches = copied_batches_;
    st.fallbacks = fallbacks_;
    st.rejoins = rejoins_;
    st.elapsed_ns = NowNs() - created_ns_;
    return st;
  }

  Status EvictPageCache() const override {
    return FailedPrecondition("a shared loader's consumer reads no storage itself");
  }
  const Source& source() const override { return *source_; }
  const Sampler& sampler() const override { return sampler_; }
  const LoaderSpec& spec() const override { return spec_; }
  std::vector<int64_t> SampleShape() const override {
    return {seg_->g.shape[0], seg_->g.shape[1], seg_->g.shape[2]};
  }

 private:
  int64_t EpochBase() const { return base_; }
  // The current epoch is the K chunks from `base` (a block boundary).
  void SetBase(int64_t base) {
    base_ = base;
    partial_.reset();
    prefix_.assign(1, 0);
    for (int64_t i = 0; i < seg_->g.chunks_per_epoch; ++i) {
      prefix_.push_back(prefix_.back() + seg_->ChunkCount(base + i));
    }
  }
  int64_t ChunkIndex(int64_t sample) const {
    return static_cast<int64_t>(std::upper_bound(prefix_.begin(), prefix_.end(), sample) -
                                prefix_.begin()) - 1;
  }

  std::shared_ptr<ChunkLease> SharedLease(uint32_t s) {
    auto c = std::make_shared<ChunkLease>();
    c->seg = seg_;
    c->reg = reg_;
    c->slot = s;
    c->me = me_;
    c->live = live_;
    live_->fetch_add(1);
    c->images = seg_->images(s);
    c->labels = seg_->labels(s);
    c->indices = seg_->indices(s);
    c->count = seg_->slots[s].count;
    return c;
  }

  // Pins chunk `seq` if a slot holds it: 1 found, 0 not there (yet or any
  // more), -1 being written (look again).
  int TryPin(int64_t seq, std::shared_ptr<ChunkLease>* out) {
    for (uint32_t s = 0; s < seg_->g.slot_count; ++s) {
      SlotRow& row = seg_->slots[s];
      if (row.seq.load() != seq) continue;
      if (row.state.load() != kReady) return -1;
      seg_->pin(s, me_).fetch_add(1);
      CrashPoint("consumer.pin_added");
      if (row.state.load() == kReady && row.seq.load() == seq) {
        // The lease takes over the pin just added.
        auto c = SharedLease(s);
        *out = std::move(c);
        return 1;
      }
      seg_->pin(s, me_).fetch_sub(1);
      return -1;
    }
    return 0;
  }

  // Why the producer can no longer serve, or "" while it can.
  std::string ProducerGone() const {
    const Header& h = *seg_->h;
    const uint32_t state = h.state.load();
    if (state == kClosed) return "the producer stopped";
    if (state == kFailed) {
      return "the producer failed: " + std::string(h.error, strnlen(h.error, sizeof h.error));
    }
    if (!ProcessAlive(h.producer_pid, h.producer_start_time)) {
      return "the producer (pid " + std::to_string(h.producer_pid) + ") died";
    }
    const double silent = (NowNs() - h.heartbeat_ns.load()) / 1e9;
    if (silent > options_.producer_timeout_s) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "the producer (pid %lld) has been silent for %.1fs",
                    static_cast<long long>(h.producer_pid), silent);
      return buf;
    }
    return "";
  }

  // Gets chunk `seq`: from the segment while this consumer is served there,
  // else from its private pipeline. Null with OK status: the deadline passed.
  Status Acquire(int64_t seq, int64_t deadline, std::shared_ptr<ChunkLease>* out) {
    if (held_ && held_seq_ == seq) {
      *out = held_;
      return Status::OK();
    }
    held_.reset();
    ConsumerRow& row = seg_->consumers[me_];
    if (mode_ == "private") {
      if (!producer_gone_ && TryRejoin(seq, out)) return Status::OK();
      return FromPrivate(seq, deadline, out);
    }
    if (row.need.load() < seq) {
      row.need.store(seq);
      Bump(&seg_->h->released_gen);
    }
    int64_t last_check = 0;
    while (true) {
      const uint32_t gen = seg_->h->published_gen.load();
      if (row.state.load() == kLagged) {
        return Fallback("it fell more than max_lag behind the others", seq, deadline, out);
      }
      const int r = TryPin(seq, out);
      if (r == 1) {
        ++shared_chunks_;
        return Status::OK();
      }
      if (r == 0 && seq < seg_->h->produced.load()) {
        // Overwritten: only a consumer that was left behind can meet that.
        return Fallback("its next chunk was overwritten", seq, deadline, out);
      }
      const int64_t now = NowNs();
      if (now - last_check > 100000000) {
        last_check = now;
        const std::string gone = ProducerGone();
        if (!gone.empty()) {
          producer_gone_ = true;
          if (!options_.fallback_to_private) {
            return FailedPrecondition("shared loader '" + spec_name() + "': " + gone +
                                      "; start it again and attach again, or attach with "
                                      "on_producer_exit=\"private\" to continue alone");
          }
          return Fallback(gone, seq, deadline, out);
        }
      }
      if (now >= deadline) return Status::OK();
      if (r < 0) {  // a slot changing hands: look again in a moment
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      } else {
        FutexWait(&seg_->h->published_gen, gen, std::min<int64_t>(deadline - now, 100000000));
      }
    }
  }

  std::string spec_name() const { return seg_->name.substr(std::strlen("/nostall-shared-")); }

  Status Fallback(const std::string& why, int64_t seq, int64_t deadline,
                  std::shared_ptr<ChunkLease>* out) {
    ConsumerRow& row = seg_->consumers[me_];
    uint32_t active = kActive;
    row.state.compare_exchange_strong(active, kLagged);  // stop holding the producer back
    Bump(&seg_->h->released_gen);
    mode_ = "private";
    reason_ = why;
    ++fallbacks_;
    return FromPrivate(seq, deadline, out);
  }

  // Back to the segment if it still holds (or will hold) chunk `seq`.
  bool TryRejoin(int64_t seq, std::shared_ptr<ChunkLease>* out) {
    const Header& h = *seg_->h;
    if (seq < seg_->HeldFrom() || seq >= h.produced.load() + seg_->g.slot_count) return false;
    ConsumerRow& row = seg_->consumers[me_];
    row.need.store(seq);
    row.state.store(kActive);
    // With the need visible, nothing from `seq` on is overwritten any more:
    // is everything from `seq` still there (or still to come)?
    if (seg_->HeldFrom() <= seq) {
      mode_ = "shared";
      ++rejoins_;
      if (TryPin(seq, out) == 1) {
        ++shared_chunks_;
        return true;
      }
      return false;  // registered; the chunk comes from the segment next time
    }
    row.state.store(kLagged);
    Bump(&seg_->h->released_gen);
    return false;
  }

  Status FromPrivate(int64_t seq, int64_t deadline, std::shared_ptr<ChunkLease>* out) {
    const int64_t k = seg_->g.chunks_per_epoch;
    if (!private_) {
      // Slots for the views this consumer may hand out (kMaxLiveViews),
      // the chunk it holds and one being made.
      LoaderSpec spec = producer_spec_;
      spec.prefetch = std::max(spec.prefetch, kMaxLiveViews);
      NOSTALL_ASSIGN_OR_RETURN(private_, Loader::Create(spec));
      private_next_ = -1;
    }
    if (private_next_ != seq) {
      NOSTALL_RETURN_IF_ERROR(private_->StartEpoch(seq / k, seq % k));
      private_next_ = seq;
    }
    NextStatus ns;
    std::shared_ptr<Batch> b;
    while (true) {
      const int64_t left = deadline == kNone ? -1 : std::max<int64_t>(0, (deadline - NowNs()) / 1000000);
      NOSTALL_RETURN_IF_ERROR(private_->Next(left, &ns, &b));
      if (ns == NextStatus::kTimeout) return Status::OK();  // no chunk yet: the caller comes back
      if (ns == NextStatus::kBatch) break;
      if (ns == NextStatus::kEndOfEpoch) {
        NOSTALL_RETURN_IF_ERROR(private_->StartEpoch(seq / k + 1, 0));
      }
    }
    ++private_next_;
    if (private_next_ % k == 0) {
      // The epoch is done: the private pipeline runs on into the next one.
      NOSTALL_RETURN_IF_ERROR(private_->StartEpoch(private_next_ / k, 0));
    }
    auto c = std::make_shared<ChunkLease>();
    c->images = static_cast<const uint8_t*>(b->images());
    c->labels = b->labels();
    c->indices = b->indices();
    c->count = b->size();
    c->private_batch = std::move(b);
    c->live = live_;
    live_->fetch_add(1);
    ++private_chunks_;
    *out = std::move(c);
    return Status::OK();
  }

  std::shared_ptr<Segment> seg_;
  std::shared_ptr<Registration> reg_;
  uint32_t me_ = 0;
  const LoaderSpec producer_spec_;
  const LoaderSpec spec_;
  std::unique_ptr<Source> source_;
  Sampler sampler_;
  AttachOptions options_;
  int64_t base_ = 0;                // the chunk the current epoch starts at
  std::vector<int64_t> prefix_;     // samples before each chunk of the epoch

  mutable std::mutex mu_;
  bool started_ = false;
  int64_t label_epoch_ = 0, batch_ = 0;
  std::shared_ptr<ChunkLease> held_;
  int64_t held_seq_ = -1;
  // A batch spanning chunks, filled so far up to sample partial_pos_ of the
  // epoch (a wait for its next chunk timed out).
  std::shared_ptr<ConsumerBatch> partial_;
  int64_t partial_pos_ = 0;
  std::shared_ptr<std::atomic<int>> live_ = std::make_shared<std::atomic<int>>(0);
  std::unique_ptr<Loader> private_;
  int64_t private_next_ = -1;
  bool producer_gone_ = false;
  std::string mode_, reason_;
  int64_t shared_chunks_ = 0, private_chunks_ = 0, copied_batches_ = 0, fallbacks_ = 0,
          rejoins_ = 0;
  ConsumerRecorder consumer_;
  const int64_t created_ns_ = NowNs();
};

// Whether the header describes a segment that fits in `size` bytes, with
// every table where the code will look for it: a segment that lies (damaged,
// from another build, or hostile) is refused instead of read out of bounds.
Status CheckGeometry(const Geometry& h, uint64_t size, const std::string& name) {
  auto bad = [&](const char* what) {
    return FailedPrecondition("shared loader '" + name + "' is damaged (" + what + ")");
  };
  if (h.header_bytes != sizeof(Header)) return bad("header size");
  if (h.max_consumers < 1 || h.max_consumers > 64) return bad("consumer count");
  if (h.slot_count < 2 || h.slot_count > 1024) return bad("slot count");
  if (h.dtype > 1) return bad("dtype");
  constexpr int64_t kMaxCount = int64_t{1} << 40;
  if (h.chunk < 1 || h.chunk > (1 << 20)) return bad("chunk size");
  if (h.samples_per_epoch < 1 || h.samples_per_epoch > kMaxCount) return bad("epoch size");
  if (h.chunks_per_epoch != (h.samples_per_epoch + h.chunk - 1) / h.chunk) return bad("chunks per epoch");
  if (h.block_chunks < 1 || h.block_chunks > h.chunks_per_epoch) return bad("shuffle block");
  uint64_t sample = h.dtype == 1 ? 4 : 1;
  for (int64_t d : h.shape) {
    if (d < 1 || d > (1 << 16)) return bad("sample shape");
    sample *= static_cast<uint64_t>(d);
  }
  if (h.sample_bytes != sample) return bad("sample size");
  const uint64_t chunk = static_cast<uint64_t>(h.chunk);
  // Each part at or after the end of the one before it, 64-byte aligned.
  const uint64_t parts[][2] = {
      {RoundUp(sizeof(Header), 64), 0},
      {h.consumers_offset, uint64_t{sizeof(ConsumerRow)} * h.max_consumers},
      {h.slots_offset, uint64_t{sizeof(SlotRow)} * h.slot_count},
      {h.pins_offset, uint64_t{sizeof(std::atomic<uint32_t>)} * h.slot_count * h.max_consumers},
      {h.spec_offset, h.spec_bytes},
      {h.data_offset, 0},
  };
  uint64_t end = 0;
  for (const auto& part : parts) {
    if (part[0] < end || part[0] % 64 != 0 || part[0] > size || part[1] > size - part[0]) {
      return bad("table offsets");
    }
    end = part[0] + part[1];
  }
  if (sample > (uint64_t{1} << 40) / chunk) return bad("slot size");
  if (h.slot_stride < RoundUp(chunk * sample, 64) + 2 * chunk * sizeof(int64_t) || h.slot_stride % 64 != 0 ||
      h.slot_stride > (size - h.data_offset) / h.slot_count) {
    return bad("slot size");
  }
  return Status::OK();
}

Result<std::shared_ptr<Segment>> MapSegment(const std::string& seg_name, int fd, size_t size) {
  void* addr = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (addr == MAP_FAILED) return ErrnoError("cannot map " + seg_name, errno);
  auto seg = std::make_shared<Segment>();
  seg->mapping = Mapping(addr, size);
  seg->name = seg_name;
  return seg;
}

}  // namespace

// ------------------------------------------------------------------ factories

Result<std::unique_ptr<SharedProducer>> SharedProducer::Create(const std::string& name,
                                                               const LoaderSpec& user_spec,
                                                               const ServeOptions& options) {
  NOSTALL_RETURN_IF_ERROR(ValidName(name));
  if (options.max_consumers < 1 || options.max_consumers > 64) {
    return InvalidArgument("max_consumers must be in [1, 64]");
  }
  if (options.max_lag_s <= 0) return InvalidArgument("max_lag must be positive");
  if (user_spec.world_size != 1) {
    return InvalidArgument("a shared loader serves one node: world_size must be 1");
  }
  if (user_spec.on_error == ErrorPolicy::kSkip) {
    return InvalidArgument("a shared loader serves whole chunks: on_error must be \"raise\" "
                           "(a bad item stops the producer, and every consumer is told which)");
  }
  LoaderSpec spec = user_spec;
  spec.batch_size = options.chunk > 0 ? options.chunk : user_spec.batch_size;
  spec.drop_last = false;
  // The sampler's count first (the pipeline is built after the block size is known).
  NOSTALL_ASSIGN_OR_RETURN(std::unique_ptr<Source> probe, OpenSource(spec.source, spec.source_options));
  SamplerOptions so;
  so.num_items = probe->size();
  so.batch_size = spec.batch_size;
  so.subset = spec.subset;
  NOSTALL_ASSIGN_OR_RETURN(Sampler counting, Sampler::Create(so));
  const int64_t n = counting.SamplesPerEpoch();
  const int64_t k = counting.BatchesPerEpoch();
  int64_t block_chunks = options.block_chunks > 0 ? options.block_chunks : std::max<int64_t>(1, k / 16);
  block_chunks = std::min(block_chunks, k);
  if (spec.shuffle) spec.shuffle_block = block_chunks * spec.batch_size;
  NOSTALL_ASSIGN_OR_RETURN(std::unique_ptr<Loader> pipeline, Loader::Create(spec));
  const LoaderSpec& resolved = pipeline->spec();
  const std::vector<int64_t> shape = pipeline->SampleShape();
  uint64_t sample_bytes = resolved.prep.dtype == DType::kFloat32 ? 4 : 1;
  for (int64_t d : shape) sample_bytes *= static_cast<uint64_t>(d);

  const uint32_t max_consumers = static_cast<uint32_t>(options.max_consumers);
  const uint32_t slots = static_cast<uint32_t>(options.slots > 0 ? options.slots : 4 + 2 * options.max_consumers);
  if (slots < 2 || slots > 1024) return InvalidArgument("slots must be in [2, 1024]");
  const std::string spec_json = resolved.ToJson();
  uint64_t off = RoundUp(sizeof(Header), 64);
  const uint64_t consumers_offset = off;
  off += RoundUp(sizeof(ConsumerRow) * max_consumers, 64);
  const uint64_t slots_offset = off;
  off += RoundUp(sizeof(SlotRow) * slots, 64);
  const uint64_t pins_offset = off;
  off += RoundUp(sizeof(std::atomic<uint32_t>) * slots * max_consumers, 64);
  const uint64_t spec_offset = off;
  off += RoundUp(spec_json.size(), 64);
  const uint64_t data_offset = RoundUp(off, 4096);
  const uint64_t chunk = static_cast<uint64_t>(spec.batch_size);
  const uint64_t stride = RoundUp(RoundUp(chunk * sample_bytes, 64) + 2 * chunk * sizeof(int64_t), 4096);
  const uint64_t total = data_offset + stride * slots;

  const std::string seg_name = SegmentName(name);
  int raw = ::shm_open(seg_name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (raw < 0 && errno == EEXIST) {
    // Another producer's: refuse while it lives; replace a dead one's.
    UniqueFd old(::shm_open(seg_name.c_str(), O_RDONLY | O_CLOEXEC, 0));
    struct stat st;
    if (old.get() >= 0 && ::fstat(old.get(), &st) == 0 &&
        static_cast<size_t>(st.st_size) >= sizeof(Header)) {
      void* a = ::mmap(nullptr, sizeof(Header), PROT_READ, MAP_SHARED, old.get(), 0);
      if (a != MAP_FAILED) {
        const auto* h = static_cast<const Header*>(a);
        const bool live = std::memcmp(h->magic, kMagic, 8) == 0 && h->state.load() == kRunning &&
                          ProcessAlive(h->producer_pid, h->producer_start_time);
        const int64_t pid = h->producer_pid;
        ::munmap(a, sizeof(Header));
        if (live) {
          return FailedPrecondition("shared loader '" + name + "' is already served by pid " +
                                    std::to_string(pid) + "; pick another name");
        }
      }
    }
    ::shm_unlink(seg_name.c_str());
    raw = ::shm_open(seg_name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  }
  if (raw < 0) return ErrnoError("cannot create shared memory " + seg_name, errno);
  UniqueFd fd(raw);
  Status reserved = ReserveShm(fd.get(), total, "shared loader '" + name + "'",
                               "use a smaller chunk or fewer slots, or enlarge /dev/shm");
  if (!reserved.ok()) {
    ::shm_unlink(seg_name.c_str());
    return reserved;
  }
  auto mapped = MapSegment(seg_name, fd.get(), total);
  if (!mapped.ok()) {
    ::shm_unlink(seg_name.c_str());
    return mapped.status();
  }
  std::shared_ptr<Segment> seg = std::move(mapped).value();
  auto* h = new (seg->mapping.data()) Header{};
  h->version = kVersion;
  h->header_bytes = sizeof(Header);
  h->spec_fingerprint = SharedSpecFingerprint(resolved);
  h->dataset_fingerprint = pipeline->source().fingerprint();
  h->producer_pid = ::getpid();
  h->producer_start_time = SelfStartTime();
  h->heartbeat_ns.store(NowNs());
  h->max_consumers = max_consumers;
  h->slot_count = slots;
  h->dtype = resolved.prep.dtype == DType::kFloat32 ? 1 : 0;
  h->chunk = static_cast<int64_t>(chunk);
  h->samples_per_epoch = n;
  h->chunks_per_epoch = k;
  h->block_chunks = block_chunks;
  h->sample_bytes = sample_bytes;
  for (size_t i = 0; i < 3 && i < shape.size(); ++i) h->shape[i] = shape[i];
  h->consumers_offset = consumers_offset;
  h->slots_offset = slots_offset;
  h->pins_offset = pins_offset;
  h->spec_offset = spec_offset;
  h->spec_bytes = spec_json.size();
  h->data_offset = data_offset;
  h->slot_stride = stride;
  seg->Bind(ReadGeometry(*h));
  for (uint32_t i = 0; i < max_consumers; ++i) {
    new (&seg->consumers[i]) ConsumerRow{};
    seg->consumers[i].need.store(kNone);
  }
  for (uint32_t s = 0; s < slots; ++s) {
    new (&seg->slots[s]) SlotRow{};
    seg->slots[s].seq.store(-1);
  }
  for (uint64_t i = 0; i < uint64_t{slots} * max_consumers; ++i) new (&seg->pins[i]) std::atomic<uint32_t>(0);
  std::memcpy(static_cast<uint8_t*>(seg->mapping.data()) + spec_offset, spec_json.data(), spec_json.size());
  h->state.store(kRunning);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  std::memcpy(h->magic, kMagic, sizeof kMagic);  // last: the segment is complete
  return std::unique_ptr<SharedProducer>(
      new Producer(std::move(seg), std::move(pipeline), resolved, options));
}

Result<std::unique_ptr<Loader>> AttachShared(const std::string& name, const AttachOptions& options) {
  NOSTALL_RETURN_IF_ERROR(ValidName(name));
  if (options.batch_size <= 0) return InvalidArgument("batch_size must be positive");
  const std::string seg_name = SegmentName(name);
  const int64_t give_up = NowNs() + static_cast<int64_t>(options.attach_timeout_s * 1e9);
  int raw = -1;
  while ((raw = ::shm_open(seg_name.c_str(), O_RDWR | O_CLOEXEC, 0)) < 0 && errno == ENOENT &&
         NowNs() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (raw < 0) {
    if (errno == ENOENT) {
      return NotFound("no shared loader '" + name + "' on this node (start one with "
                      "`nostall serve --spec SPEC --name " + name + "`)");
    }
    return ErrnoError("cannot open shared loader '" + name + "'", errno);
  }
  UniqueFd fd(raw);
  struct stat st;
  // The producer may still be sizing a segment it has just created.
  for (int i = 0;; ++i) {
    if (::fstat(fd.get(), &st) != 0) return ErrnoError("cannot stat " + seg_name, errno);
    if (static_cast<size_t>(st.st_size) >= sizeof(Header) || i >= 200) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (static_cast<size_t>(st.st_size) < sizeof(Header)) {
    return FailedPrecondition("shared memory " + seg_name + " is not a nostall shared loader");
  }
  NOSTALL_ASSIGN_OR_RETURN(std::shared_ptr<Segment> seg,
                           MapSegment(seg_name, fd.get(), static_cast<size_t>(st.st_size)));
  const auto* h = static_cast<const Header*>(seg->mapping.data());
  for (int i = 0; i < 200 && std::memcmp(h->magic, kMagic, 8) != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (std::memcmp(h->magic, kMagic, 8) != 0) {
    return FailedPrecondition("shared memory " + seg_name + " is not a nostall shared loader");
  }
  if (h->version != kVersion) {
    return FailedPrecondition("shared loader '" + name + "' speaks format version " +
                              std::to_string(h->version) + ", this nostall speaks " +
                              std::to_string(kVersion) + "; serve it with this nostall");
  }
  const Geometry geometry = ReadGeometry(*h);
  NOSTALL_RETURN_IF_ERROR(CheckGeometry(geometry, static_cast<uint64_t>(st.st_size), name));
  if (options.expect_spec_fingerprint != 0 && options.expect_spec_fingerprint != h->spec_fingerprint) {
    return FailedPrecondition("shared loader '" + name + "' serves another pipeline (its spec "
                              "differs from the one given); attach without a spec, or serve "
                              "this one under another name");
  }
  seg->Bind(geometry);
  if (h->state.load() != kRunning || !ProcessAlive(h->producer_pid, h->producer_start_time)) {
    return FailedPrecondition("shared loader '" + name + "' has no running producer");
  }
  Result<LoaderSpec> served = LoaderSpec::FromJson(seg->Spec());
  if (!served.ok()) {
    return FailedPrecondition("shared loader '" + name + "' is damaged (its spec: " +
                              served.status().message() + ")");
  }
  const LoaderSpec producer_spec = std::move(served).value();
  LoaderSpec spec = producer_spec;
  spec.batch_size = options.batch_size;
  NOSTALL_ASSIGN_OR_RETURN(std::unique_ptr<Source> source,
                           OpenSource(producer_spec.source, producer_spec.source_options));
  if (source->fingerprint() != h->dataset_fingerprint) {
    return FailedPrecondition("shared loader '" + name + "': the dataset at " + producer_spec.source +
                              " differs from the one the producer indexed");
  }
  SamplerOptions so;
  so.num_items = source->size();
  so.batch_size = options.batch_size;
  so.subset = producer_spec.subset;
  NOSTALL_ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(so));

  // A row of the consumer table: owned once its pid is ours.
  uint32_t me = seg->g.max_consumers;
  for (uint32_t i = 0; i < seg->g.max_consumers; ++i) {
    int64_t free = 0;
    if (seg->consumers[i].pid.compare_exchange_strong(free, ::getpid())) {
      me = i;
      break;
    }
  }
  if (me == seg->g.max_consumers) {
    return ResourceExhausted("shared loader '" + name + "' already has its maximum of " +
                             std::to_string(seg->g.max_consumers) + " consumers (serve with "
                             "--max-consumers to allow more)");
  }
  ConsumerRow& row = seg->consumers[me];
  CrashPoint("consumer.row_claimed");
  row.start_time.store(SelfStartTime());
  row.state.store(kClaimed);
  auto reg = std::make_shared<Registration>();
  reg->seg = seg;
  reg->me = me;
  int64_t start = 0;
  if (!EnterStream(*seg, me, kClaimed, 1000, &start)) {
    return Internal("could not find a starting chunk in '" + name + "'");
  }
  return std::unique_ptr<Loader>(new Consumer(std::move(seg), std::move(reg), producer_spec,
                                              std::move(spec), std::move(source), std::move(sampler),
                                              options, start));
}

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

Result<SharedPosition> SharedPositionOf(const Loader& loader) {
  const auto* consumer = dynamic_cast<const Consumer*>(&loader);
  if (consumer == nullptr) return InvalidArgument("not a consumer of a shared loader");
  return consumer->Position();
}

Status ResumeShared(Loader* loader, int64_t epoch, const SharedPosition& position,
                    int64_t first_batch) {
  auto* consumer = dynamic_cast<Consumer*>(loader);
  if (consumer == nullptr) return InvalidArgument("not a consumer of a shared loader");
  return consumer->Resume(epoch, position, first_batch);
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
  const std::string prefix = "nostall-shared-";
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

namespace {

// Maps segment `name` read-only and checks it is a whole nostall segment of
// this version.
Result<std::shared_ptr<Segment>> OpenForReading(const std::string& name) {
  NOSTALL_RETURN_IF_ERROR(ValidName(name));
  const std::string seg_name = SegmentName(name);
  UniqueFd fd(::shm_open(seg_name.c_str(), O_RDONLY | O_CLOEXEC, 0));
  if (fd.get() < 0) {
    if (errno == ENOENT) return NotFound("no shared loader '" + name + "' on this node");
    return ErrnoError("cannot open shared loader '" + name + "'", errno);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("cannot stat " + seg_name, errno);
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < sizeof(Header)) {
    return FailedPrecondition("shared memory " + seg_name + " is not a nostall shared loader");
  }
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (addr == MAP_FAILED) return ErrnoError("cannot map " + seg_name, errno);
  auto seg = std::make_shared<Segment>();
  seg->mapping = Mapping(addr, size);
  seg->name = seg_name;
  const auto* h = static_cast<const Header*>(addr);
  if (std::memcmp(h->magic, kMagic, 8) != 0) {
    return FailedPrecondition("shared memory " + seg_name + " is not a nostall shared loader");
  }
  if (h->version != kVersion) {
    return FailedPrecondition("shared loader '" + name + "' has format version " +
                              std::to_string(h->version) + ", this nostall reads " +
                              std::to_string(kVersion));
  }
  const Geometry geometry = ReadGeometry(*h);
  NOSTALL_RETURN_IF_ERROR(CheckGeometry(geometry, size, name));
  seg->Bind(geometry);
  return seg;
}

}  // namespace

Result<SharedInfo> InspectShared(const std::string& name) {
  NOSTALL_ASSIGN_OR_RETURN(std::shared_ptr<Segment> seg, OpenForReading(name));
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
  NOSTALL_RETURN_IF_ERROR(ValidName(name));
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
