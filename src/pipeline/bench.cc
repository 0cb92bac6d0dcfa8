#include "nostall/bench.h"

#include "common/clock.h"

namespace nostall {

Result<ThroughputResult> MeasureThroughput(const LoaderSpec& spec, int epochs,
                                           int64_t max_batches,
                                           const std::function<void(int64_t, double)>& progress) {
  if (epochs <= 0) return InvalidArgument("epochs must be positive");
  NOSTALL_ASSIGN_OR_RETURN(std::unique_ptr<Loader> loader, Loader::Create(spec));
  ThroughputResult r;
  const int64_t t0 = NowNs();
  for (int e = 0; e < epochs; ++e) {
    NOSTALL_RETURN_IF_ERROR(loader->StartEpoch(e));
    while (max_batches <= 0 || r.batches < max_batches) {
      NextStatus ns;
      std::shared_ptr<Batch> batch;
      NOSTALL_RETURN_IF_ERROR(loader->Next(-1, &ns, &batch));
      if (ns == NextStatus::kEndOfEpoch) break;
      r.images += batch->size();
      ++r.batches;
      if (progress) progress(r.images, (NowNs() - t0) / 1e9);
    }
  }
  r.seconds = (NowNs() - t0) / 1e9;
  r.stats = loader->Stats();
  return r;
}

}  // namespace nostall
