// Where the ops that move pixels move a point (geometry/affine.h), from the
// inverse matrices the kernels warp with: the sample's geometry record.
#ifndef NOSTALL_OPS_MOTION_H_
#define NOSTALL_OPS_MOTION_H_

#include "geometry/affine.h"

namespace nostall {

// Where a warp that samples its input at `inverse`(x + 0.5, y + 0.5) (PIL's
// convention, AffineTransform's) moves a point: the inverse of `inverse`,
// in continuous coordinates (identity if singular).
Affine ForwardOf(const double inverse[6]);
// Where Rotate moves a point of a w x h image.
Affine RotationMotion(int w, int h, double angle_deg, const double* center);

}  // namespace nostall

#endif  // NOSTALL_OPS_MOTION_H_
