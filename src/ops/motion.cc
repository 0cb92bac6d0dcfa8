// Motions of the ops that move pixels (motion.h).
#include "ops/motion.h"

#include <cmath>

#include "kernels/functional.h"

namespace nostall {

Affine ForwardOf(const double inverse[6]) {
  Affine inv, forward;
  inv.m = {inverse[0], inverse[1], inverse[2], inverse[3], inverse[4], inverse[5]};
  return inv.Inverse(&forward) ? forward : Affine{};
}

Affine RotationMotion(int w, int h, double angle_deg, const double* center) {
  if (center == nullptr && std::fmod(angle_deg, 360.0) == 0) return Affine{};
  // (PIL's transposes for 180, and 90/270 on a square, are this map exactly.)
  double m[6];
  RotationInverse(w, h, angle_deg, center, m);
  return ForwardOf(m);
}

}  // namespace nostall
