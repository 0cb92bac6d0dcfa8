// The preparer (preparer.h).
#include "pipeline/preparer.h"

#include <cstring>

#include "common/clock.h"

namespace nostall {

Preparer::Preparer(const LoaderSpec& spec, const Source& source, const ring::Segment& seg,
                   int out_h, int out_w)
    : spec_(spec), source_(source), seg_(seg), out_h_(out_h), out_w_(out_w),
      sample_bytes_(SampleBytes(spec.prep, out_h, out_w)) {}

Status Preparer::Prepare(const FetchedItem& fi, PrepScratch* scratch) {
  const int64_t cpu0 = ThreadCpuNs(), wall0 = NowNs();
  const uint64_t s = fi.slot;
  Status st = fi.status;
  uint8_t* dst = seg_.images(s) + static_cast<size_t>(fi.pos) * sample_bytes_;
  if (st.ok()) {
    st = PrepareSample(spec_.prep, fi.bytes.data(), fi.bytes.size(),
                       {spec_.seed, fi.epoch, fi.item}, out_h_, out_w_, dst, scratch);
    if (!st.ok()) st = st.WithItem(source_.key(fi.item), "decode");
  }
  seg_.labels(s)[fi.pos] = source_.label(fi.item);
  seg_.indices(s)[fi.pos] = fi.item;
  prep_.busy_cpu_ns.fetch_add(ThreadCpuNs() - cpu0);
  prep_.work_ns.fetch_add(NowNs() - wall0);
  prep_.items.fetch_add(1);
  prep_.bytes.fetch_add(static_cast<int64_t>(sample_bytes_));
  return st;
}

int64_t Preparer::FinishBatch(uint64_t s, int64_t count, const std::vector<uint8_t>& bad) {
  const int64_t cpu0 = ThreadCpuNs();
  int64_t kept = 0;
  uint8_t* images = seg_.images(s);
  int64_t* labels = seg_.labels(s);
  int64_t* indices = seg_.indices(s);
  for (int64_t p = 0; p < count; ++p) {
    if (bad[static_cast<size_t>(p)]) continue;
    if (kept != p) {
      std::memmove(images + kept * sample_bytes_, images + p * sample_bytes_, sample_bytes_);
      labels[kept] = labels[p];
      indices[kept] = indices[p];
    }
    ++kept;
  }
  batch_.items.fetch_add(1);
  batch_.bytes.fetch_add(kept * static_cast<int64_t>(sample_bytes_));
  batch_.busy_cpu_ns.fetch_add(ThreadCpuNs() - cpu0);
  return kept;
}

}  // namespace nostall
