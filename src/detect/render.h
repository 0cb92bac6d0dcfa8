// A detection sample's image (detect.h): the source region the output
// covers decoded once, padded with the fill where the output lies outside
// the image, pixel ops run where the spec puts them, and one resample.
#ifndef NOSTALL_DETECT_RENDER_H_
#define NOSTALL_DETECT_RENDER_H_

#include <cstddef>
#include <cstdint>

#include "common/sample_key.h"
#include "detect/detect.h"
#include "detect/geometry.h"
#include "nostall/status.h"
#include "ops/prep.h"

namespace nostall::detect {

// The image of `data` (width x height) through the geometry `s`, into
// `dst` as `prep` lays it out (s.cw x s.ch).
Status RenderImage(const Spec& spec, const PrepSpec& prep, const uint8_t* data, size_t size, int width,
                   int height, const State& s, const SampleKey& key, void* dst, PrepScratch* scratch);

}  // namespace nostall::detect

#endif  // NOSTALL_DETECT_RENDER_H_
