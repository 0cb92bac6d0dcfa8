// The size draws the image plan (plan.cc) and the detection steps
// (src/detect) share: torchvision's own algorithms, one copy.
#ifndef NOSTALL_OPS_PLAN_H_
#define NOSTALL_OPS_PLAN_H_

#include "common/philox.h"
#include "nostall/status.h"

namespace nostall {

struct PrepSpec;

struct CropDraw {
  int left = 0, top = 0, w = 0, h = 0;
};

// The image kind's rules (ops/prep.cc's ImageKind): the transforms' own
// arguments, their order, and the output size they fix.
Status ValidateImageSpec(const PrepSpec& spec);
bool ImageFixedOutputSize(const PrepSpec& spec, int* height, int* width);

// torchvision's RandomResizedCrop.get_params on a w x h image: the area drawn
// in [scale_min, scale_max], the aspect log-uniformly in [ratio_min,
// ratio_max], ten tries, then a center crop at the clamped ratio.
CropDraw DrawResizedCrop(Philox& rng, int w, int h, double scale_min, double scale_max, double ratio_min,
                         double ratio_max);

// torchvision's _compute_resized_output_size for Resize(short_side,
// max_size) of a w x h image (max_size 0: none); a DataError when an edge
// would be empty.
Status ShortSideSize(int w, int h, int short_side, int max_size, int* out_w, int* out_h);

}  // namespace nostall

#endif  // NOSTALL_OPS_PLAN_H_
