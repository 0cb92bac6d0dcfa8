// One sample's whole prep: sniff, plan, decode the needed region, resample,
// flip, normalize and lay out, writing straight into the caller's memory
// (a batch slot). Thread-compatible: one Scratch per thread.
#ifndef NOSTALL_OPS_PREP_H_
#define NOSTALL_OPS_PREP_H_

#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "nostall/transforms.h"
#include "common/sample_key.h"
#include "ops/op.h"
#include "kernels/resample.h"
#include "ops/sample_kind.h"

namespace nostall {

// Per-thread buffers, reused from sample to sample so the steady state
// allocates nothing.
struct PrepScratch {
  std::vector<uint8_t> decoded;
  std::vector<uint8_t> resized;
  ResampleScratch resample;
  OpScratch ops;
  // The sample kind's own (KindScratchOf).
  std::unique_ptr<KindScratch> kind;
};

// The kind's buffers of type T in `scratch`, made on first use.
template <typename T>
T& KindScratchOf(PrepScratch* scratch) {
  T* have = dynamic_cast<T*>(scratch->kind.get());
  if (have == nullptr) {
    scratch->kind = std::make_unique<T>();
    have = static_cast<T*>(scratch->kind.get());
  }
  return *have;
}


// Writes one out_h x out_w sample (as `spec` lays it out) to `dst`; the
// output size must equal (out_h, out_w) or the sample is a DataError.
Status PrepareSample(const PrepSpec& spec, const uint8_t* data, size_t size, const SampleKey& key,
                     int out_h, int out_w, void* dst, PrepScratch* scratch);

// The parameters sample `key` of a src_w x src_h image would be augmented
// with, without touching pixels: {"box": [x, y, w, h] (source pixels),
// "size": [h, w], "flip": bool, "ops": [one object per op draw]}.
Status TraceSample(const PrepSpec& spec, int src_w, int src_h, const SampleKey& key,
                   nlohmann::json* out);

// Reads just the header: the size of the image in `data`.
Status ProbeImageSize(const uint8_t* data, size_t size, int* width, int* height);

// Bytes one sample takes in a batch.
size_t SampleBytes(const PrepSpec& spec, int out_h, int out_w);

}  // namespace nostall

#endif  // NOSTALL_OPS_PREP_H_
