// Affine maps (affine.h).
#include "geometry/affine.h"

#include <cmath>

namespace nostall {

Affine Affine::After(const Affine& f) const {
  const auto& a = m;
  const auto& b = f.m;
  Affine r;
  r.m = {a[0] * b[0] + a[1] * b[3], a[0] * b[1] + a[1] * b[4], a[0] * b[2] + a[1] * b[5] + a[2],
         a[3] * b[0] + a[4] * b[3], a[3] * b[1] + a[4] * b[4], a[3] * b[2] + a[4] * b[5] + a[5]};
  return r;
}

bool Affine::Inverse(Affine* out) const {
  const double det = m[0] * m[4] - m[1] * m[3];
  if (!std::isfinite(det) || std::fabs(det) < 1e-300) return false;
  const double a = m[4] / det, b = -m[1] / det, d = -m[3] / det, e = m[0] / det;
  out->m = {a, b, -(a * m[2] + b * m[5]), d, e, -(d * m[2] + e * m[5])};
  return true;
}

Affine Affine::CropResize(double x, double y, double w, double h, int out_w, int out_h) {
  const double sx = w > 0 ? out_w / w : 1, sy = h > 0 ? out_h / h : 1;
  Affine r;
  r.m = {sx, 0, -x * sx, 0, sy, -y * sy};
  return r;
}

Affine Affine::FlipX(int width) {
  Affine r;
  r.m = {-1, 0, static_cast<double>(width), 0, 1, 0};
  return r;
}

Affine Affine::FlipY(int height) {
  Affine r;
  r.m = {1, 0, 0, 0, -1, static_cast<double>(height)};
  return r;
}

}  // namespace nostall
