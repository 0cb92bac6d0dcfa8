// The preparer: decodes and augments one fetched item straight into its
// place in its batch's slot, and completes a batch whose last sample is
// done (closing the holes skipped samples left). Counts the prep and batch
// stages. Stateless between items but for the caller's scratch buffers, so
// any prep thread may prepare any item.
#ifndef NOSTALL_PIPELINE_PREPARER_H_
#define NOSTALL_PIPELINE_PREPARER_H_

#include <cstdint>
#include <vector>

#include "nostall/loader.h"
#include "ops/prep.h"
#include "pipeline/work.h"

namespace nostall {

class Preparer {
 public:
  Preparer(const LoaderSpec& spec, const Source& source, const ring::Segment& seg, int out_h,
           int out_w);

  // `fi` into its slot (its pixels, label and index); its error, named by
  // the item, if its read failed or it does not decode.
  Status Prepare(const FetchedItem& fi, PrepScratch* scratch);
  // The batch in `slot` of `count` samples is done: the samples at the
  // positions marked in `bad` are dropped, keeping the others' order. The
  // samples kept. The only copy of pixels nostall ever makes, and only when
  // a batch had bad items.
  int64_t FinishBatch(uint64_t slot, int64_t count, const std::vector<uint8_t>& bad);

  size_t sample_bytes() const { return sample_bytes_; }
  // Bytes handed out per extra field so far, in the spec's order.
  std::vector<std::pair<std::string, int64_t>> FieldBytes() const;
  const StageCounters& prep() const { return prep_; }
  const StageCounters& batch() const { return batch_; }
  StageCounters* mutable_prep() { return &prep_; }

 private:
  const LoaderSpec& spec_;
  const Source& source_;
  const ring::Segment& seg_;
  const int out_h_, out_w_;
  const size_t sample_bytes_;
  const std::vector<FieldSpec> extra_;  // the extra fields, in the slot's order
  std::unique_ptr<std::atomic<int64_t>[]> field_bytes_;
  StageCounters prep_, batch_;

  // The item's extra fields into their places at `pos` of slot `s`.
  Status CopyFields(const FetchedItem& fi, const FieldSpan* record);
  // One sample through its kind (ops/sample_kind.h); a kind with targets
  // writes them to its targets field's place in the slot.
  Status PrepareOne(const FetchedItem& fi, const FieldSpan* record, const FieldSpan& image, int64_t key,
                    void* dst, PrepScratch* scratch);
};

}  // namespace nostall

#endif  // NOSTALL_PIPELINE_PREPARER_H_
