// Each item's duration (durations.h).
#include "pipeline/durations.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "audio/decode.h"
#include "common/mutex.h"
#include "source/index/index_progress.h"

namespace nostall {

Result<std::vector<float>> ItemDurations(const LoaderSpec& spec, const Source& source) {
  const int64_t n = source.size();
  std::vector<float> out(static_cast<size_t>(n), 0.0f);
  std::atomic<int64_t> next{0};
  Mutex mu;
  Status first;  // the first error, by item
  int64_t first_item = n;
  IndexProgress progress("the durations of " + spec.source, "files", n);
  auto work = [&] {
    std::vector<uint8_t> bytes;
    for (int64_t i = next++; i < n; i = next++) {
      Status st = source.Read(i, &bytes);
      audio::AudioInfo info;
      const FieldSpan media = ImageSpan(source.record(i), bytes.size());
      if (st.ok() && (media.size < 0 || media.offset + static_cast<uint64_t>(media.size) > bytes.size())) {
        st = DataError("the record's bytes do not hold its audio");
      }
      if (st.ok()) st = audio::ProbeAudio(bytes.data() + media.offset, static_cast<size_t>(media.size), &info);
      if (st.ok() && info.sample_rate <= 0) st = DataError("the audio has no sample rate");
      if (st.ok()) {
        out[static_cast<size_t>(i)] = static_cast<float>(static_cast<double>(info.frames) / info.sample_rate);
      } else if (spec.on_error != ErrorPolicy::kSkip) {
        MutexLock lock(&mu);
        if (i < first_item) first_item = i, first = st.WithItem(source.key(i), "durations");
      }
      progress.Done(bytes.size(), 1);
    }
  };
  const int threads = static_cast<int>(std::clamp<int64_t>(
      spec.reads_in_flight > 0 ? spec.reads_in_flight : 4, 1, std::max<int64_t>(1, n)));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (!first.ok()) return first;
  return out;
}

}  // namespace nostall
