// The key of one sample's random draws, for every kind of sample (image,
// detection, audio): (seed, epoch, index) alone, never thread timing, so a
// sample is the same whichever thread, process or machine prepares it. Each
// kind of draw has its own stream, so that adding a transform of one kind
// does not change the draws of another (an added ColorJitter leaves the
// crops where they were).
#ifndef NOSTALL_COMMON_SAMPLE_KEY_H_
#define NOSTALL_COMMON_SAMPLE_KEY_H_

#include <cstdint>

#include "common/philox.h"

namespace nostall {

enum class SampleStream : uint64_t {
  kGeometry = 0,                      // crops, resizes, flips, zoom-outs (and boxes with them)
  kPixelOps = 0x6f70735f72616e64ULL,  // "ops_rand": the ops on pixels and tensors
  kAudio = 0x617564696f5f7267ULL,     // "audio_rg": an audio sample's transforms
  kVideo = 0x766964656f5f7267ULL,     // "video_rg": a video clip's frames and geometry
};

struct SampleKey {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t index = 0;  // the item's index in the dataset

  Philox Stream(SampleStream stream) const {
    return Philox(seed ^ static_cast<uint64_t>(stream), static_cast<uint64_t>(epoch),
                  static_cast<uint64_t>(index));
  }
};

}  // namespace nostall

#endif  // NOSTALL_COMMON_SAMPLE_KEY_H_
