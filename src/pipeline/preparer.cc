// The preparer (preparer.h).
#include "pipeline/preparer.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/clock.h"
#include "ops/sample_kind.h"
#include "pipeline/pipeline.h"
#include "ring/ragged.h"

namespace nostall {

Preparer::Preparer(const LoaderSpec& spec, const Source& source, const ring::Segment& seg,
                   int out_h, int out_w)
    : spec_(spec), source_(source), seg_(seg), out_h_(out_h), out_w_(out_w),
      sample_bytes_(SampleBytes(spec.prep, out_h, out_w)),
      extra_(ExtraFields(spec)),
      field_bytes_(new std::atomic<int64_t>[extra_.size() + 1]) {
  for (size_t f = 0; f <= extra_.size(); ++f) field_bytes_[f].store(0);
}

namespace {

// A span of the item's bytes, checked: bytes from a cache or a server that
// do not hold the record as the index says are an error, never a read past
// the buffer.
bool Inside(const FieldSpan& span, size_t size) {
  return span.size >= 0 && span.offset <= size && static_cast<uint64_t>(span.size) <= size - span.offset;
}

}  // namespace

Status Preparer::CopyFields(const FetchedItem& fi, const FieldSpan* record) {
  for (size_t f = 0; f < extra_.size(); ++f) {
    const uint32_t field = static_cast<uint32_t>(f);
    const FieldSpan& span = record[1 + f];
    int64_t* length = &seg_.field_lengths(static_cast<uint32_t>(fi.slot), field)[fi.pos];
    *length = -1;
    if (span.size < 0) continue;  // an optional field the sample has not
    if (extra_[f].kind == FieldKind::kTargets) {  // read, and written, by the detection pipeline
      if (!Inside(span, fi.bytes.size())) {
        return DataError("the record's bytes do not hold its field '" + extra_[f].name + "'");
      }
      continue;
    }
    if (!Inside(span, fi.bytes.size()) || static_cast<uint64_t>(span.size) > seg_.g.field_room[f]) {
      return DataError("the record's bytes do not hold its field '" + extra_[f].name + "'");
    }
    uint8_t* dst = seg_.field_data(static_cast<uint32_t>(fi.slot), field) +
                   static_cast<size_t>(fi.pos) * seg_.g.field_room[f];
    if (span.size > 0) std::memcpy(dst, fi.bytes.data() + span.offset, static_cast<size_t>(span.size));
    *length = span.size;
    field_bytes_[f].fetch_add(span.size, std::memory_order_relaxed);
  }
  return Status::OK();
}

Status Preparer::PrepareOne(const FetchedItem& fi, const FieldSpan* record, const FieldSpan& image, int64_t key,
                            void* dst, PrepScratch* scratch) {
  const SampleKind& kind = spec_.prep.sample_kind();
  SampleInput in{fi.bytes.data() + image.offset, static_cast<size_t>(image.size)};
  in.file = fi.file.get();
  SampleOutput out{dst, out_h_, out_w_};
  if (int64_t* dims = seg_.dims(static_cast<uint32_t>(fi.slot))) out.dims = dims + 3 * fi.pos;
  const std::optional<FieldKind> written = WrittenFieldKind(kind);
  if (!written) return kind.Prepare(spec_.prep, in, {spec_.seed, fi.epoch, key}, out, scratch);
  // The field the kind writes: its member in (a detection sample's
  // annotations; a clip's audio has none), what the kind makes of it out, in
  // its place in the slot.
  size_t f = 0;
  while (f < extra_.size() && extra_[f].kind != *written) ++f;
  if (record != nullptr && f < extra_.size() && record[1 + f].size >= 0) {
    in.annotations = fi.bytes.data() + record[1 + f].offset;
    in.annotations_size = static_cast<size_t>(record[1 + f].size);
  }
  // (A spec without the field is refused when the loader is made.)
  if (f == extra_.size()) return Internal(std::string("a spec without its ") + FieldKindName(*written) + " field");
  const uint32_t slot = static_cast<uint32_t>(fi.slot), field = static_cast<uint32_t>(f);
  int64_t len = -1;
  out.targets = seg_.field_data(slot, field) + static_cast<size_t>(fi.pos) * seg_.g.field_room[f];
  out.targets_room = seg_.g.field_room[f];
  out.targets_len = &len;
  NOSTALL_RETURN_IF_ERROR(kind.Prepare(spec_.prep, in, {spec_.seed, fi.epoch, key}, out, scratch));
  seg_.field_lengths(slot, field)[fi.pos] = len;
  field_bytes_[f].fetch_add(len, std::memory_order_relaxed);
  return Status::OK();
}

std::vector<std::pair<std::string, int64_t>> Preparer::FieldBytes() const {
  std::vector<std::pair<std::string, int64_t>> out;
  for (size_t f = 0; f < extra_.size(); ++f) out.push_back({extra_[f].name, field_bytes_[f].load()});
  return out;
}

Status Preparer::Prepare(const FetchedItem& fi, PrepScratch* scratch) {
  if (fi.item == kHole) return Status::OK();  // no sample: the batch closes up around it
  const int64_t cpu0 = ThreadCpuNs(), wall0 = NowNs();
  const uint64_t s = fi.slot;
  Status st = fi.status;
  uint8_t* dst = seg_.images(s) + static_cast<size_t>(fi.pos) * sample_bytes_;
  const FieldSpan* record = source_.record(fi.item);
  const FieldSpan image = ImageSpan(record, fi.bytes.size());
  if (st.ok() && record != nullptr) {
    if (!Inside(image, fi.bytes.size())) {
      st = DataError("the record's bytes do not hold its image");
    } else {
      st = CopyFields(fi, record);
    }
    if (!st.ok()) st = st.WithItem(source_.key(fi.item), "fields");
  } else if (!extra_.empty()) {
    for (uint32_t f = 0; f < extra_.size(); ++f) seg_.field_lengths(static_cast<uint32_t>(s), f)[fi.pos] = -1;
  }
  // The sample's random draws, and the index the caller sees, are its item;
  // in the buffered epoch its shard and member (ShardMemberKey): what names
  // it whether or not the index was whole when it was read.
  int64_t key = fi.item;
  if (fi.buffered) {
    if (const std::shared_ptr<ShardedItems> shards = source_.sharded()) key = shards->StableKey(fi.item);
  }
  if (st.ok()) {
    st = PrepareOne(fi, record, image, key, dst, scratch);
    if (!st.ok()) st = st.WithItem(source_.key(fi.item), "decode");
  }
  seg_.labels(s)[fi.pos] = source_.label(fi.item);
  seg_.indices(s)[fi.pos] = key;
  prep_.busy_cpu_ns.fetch_add(ThreadCpuNs() - cpu0);
  prep_.work_ns.fetch_add(NowNs() - wall0);
  prep_.items.fetch_add(1);
  prep_.bytes.fetch_add(static_cast<int64_t>(sample_bytes_));
  return st;
}

int64_t Preparer::FinishBatch(uint64_t s, int64_t count, const std::vector<uint8_t>& bad) {
  const int64_t cpu0 = ThreadCpuNs();
  const uint32_t slot = static_cast<uint32_t>(s);
  std::vector<int64_t> keep;
  for (int64_t p = 0; p < count; ++p) {
    if (!bad[static_cast<size_t>(p)]) keep.push_back(p);
  }
  const int64_t kept = static_cast<int64_t>(keep.size());
  uint64_t kept_bytes = static_cast<uint64_t>(kept) * sample_bytes_;
  if (int64_t* dims = seg_.dims(slot)) {
    // Samples of many sizes: the batch padded to its largest, in place.
    std::vector<int64_t> own;
    for (int64_t p : keep) own.insert(own.end(), dims + 3 * p, dims + 3 * p + 3);
    int64_t padded[3];
    const Status st = ring::PaddedShape(seg_.g, own.data(), kept, padded);
    if (!st.ok()) {  // (a kind writes only shapes within its bound: a bug)
      std::fprintf(stderr, "nostall: %s\n", st.message().c_str());
      std::abort();
    }
    ring::PadInPlace(seg_.images(slot), sample_bytes_, seg_.g.elem_bytes(), dims, keep, padded);
    kept_bytes = static_cast<uint64_t>(kept) * seg_.g.padded_bytes(padded);
  }
  uint8_t* images = seg_.images(slot);
  int64_t* labels = seg_.labels(slot);
  int64_t* indices = seg_.indices(slot);
  for (int64_t k = 0; k < kept; ++k) {
    const int64_t p = keep[static_cast<size_t>(k)];
    if (k == p) continue;
    if (!seg_.g.ragged()) std::memmove(images + k * sample_bytes_, images + p * sample_bytes_, sample_bytes_);
    labels[k] = labels[p];
    indices[k] = indices[p];
    for (uint32_t f = 0; f < extra_.size(); ++f) {
      int64_t* lengths = seg_.field_lengths(slot, f);
      const uint64_t room = seg_.g.field_room[f];
      lengths[k] = lengths[p];
      if (lengths[p] > 0) {
        std::memmove(seg_.field_data(slot, f) + k * room, seg_.field_data(slot, f) + p * room,
                     static_cast<size_t>(lengths[p]));
      }
    }
  }
  batch_.items.fetch_add(1);
  batch_.bytes.fetch_add(static_cast<int64_t>(kept_bytes));
  batch_.busy_cpu_ns.fetch_add(ThreadCpuNs() - cpu0);
  return kept;
}

}  // namespace nostall
