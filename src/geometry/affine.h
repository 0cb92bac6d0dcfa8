// The geometry a sample's image gets, as one record other fields can follow.
//
// Coordinates are continuous pixel coordinates, as torchvision's v2 boxes
// use them: x to the right, y down, pixel (i, j) covering [i, i + 1) x
// [j, j + 1), so its center is (i + 0.5, j + 0.5). A crop, a resize, a flip,
// a rotation, an affine map: each is an Affine, and a sample's whole
// geometry is their composition (SampleGeometry), which maps a point of the
// source image (a keypoint, a box corner) to where it lands in the output.
#ifndef NOSTALL_GEOMETRY_AFFINE_H_
#define NOSTALL_GEOMETRY_AFFINE_H_

#include <array>

namespace nostall {

// x' = m[0] x + m[1] y + m[2],  y' = m[3] x + m[4] y + m[5].
struct Affine {
  std::array<double, 6> m = {1, 0, 0, 0, 1, 0};

  // `this` applied after `first`.
  Affine After(const Affine& first) const;
  // The inverse map; false when the map is singular (then *out is unchanged).
  bool Inverse(Affine* out) const;
  void Apply(double x, double y, double* ox, double* oy) const {
    *ox = m[0] * x + m[1] * y + m[2];
    *oy = m[3] * x + m[4] * y + m[5];
  }

  // The box [x, x + w) x [y, y + h) scaled onto an out_w x out_h image.
  static Affine CropResize(double x, double y, double w, double h, int out_w, int out_h);
  static Affine FlipX(int width);   // left to right
  static Affine FlipY(int height);  // top to bottom
};

// A sample's image geometry: where each point of the source lands, and the
// output's size.
struct SampleGeometry {
  Affine to_output;
  int out_w = 0, out_h = 0;
};

}  // namespace nostall

#endif  // NOSTALL_GEOMETRY_AFFINE_H_
