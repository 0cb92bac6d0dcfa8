// One sample's whole prep: sniff, plan, decode the needed region, resample,
// flip, normalize and lay out, writing straight into the caller's memory
// (a batch slot). Thread-compatible: one Scratch per thread.
#ifndef NOSTALL_OPS_PREP_H_
#define NOSTALL_OPS_PREP_H_

#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "nostall/transforms.h"
#include "audio/pipeline.h"
#include "common/sample_key.h"
#include "ops/op.h"
#include "kernels/resample.h"

namespace nostall {

// Per-thread buffers, reused from sample to sample so the steady state
// allocates nothing.
struct PrepScratch {
  std::vector<uint8_t> decoded;
  std::vector<uint8_t> resized;
  std::vector<uint8_t> canvas, mask;  // a detection sample's padded canvas, one instance's mask
  ResampleScratch resample;
  OpScratch ops;
  audio::Scratch audio;
};


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
