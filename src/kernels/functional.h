// The pixel kernels behind the ops, each the computation torchvision does on a
// PIL image (PIL's ImageEnhance, ImageOps, Image.transform and ImageFilter,
// and torch's conv2d for GaussianBlur), written out on interleaved uint8
// images. Written by hand because those computations are PIL's: OpenCV's
// equivalents round, clip and sample differently (see docs/transforms.md
// for the tolerance each is tested to).
#ifndef NOSTALL_KERNELS_FUNCTIONAL_H_
#define NOSTALL_KERNELS_FUNCTIONAL_H_

#include <array>
#include <cstdint>
#include <vector>

#include "kernels/image.h"

namespace nostall {

// ImageEnhance: Image.blend(degenerate, img, factor).
void AdjustBrightness(const ImageView& img, double factor);
void AdjustContrast(const ImageView& img, double factor);
void AdjustSaturation(const ImageView& img, double factor);
// AdjustSaturation one pixel at a time (what its vectors are tested against).
void AdjustSaturationScalar(const ImageView& img, double factor);
void AdjustSharpness(const ImageView& img, double factor, KernelScratch& scratch);
// torchvision's adjust_hue on PIL: through PIL's HSV, hue shifted mod 256.
void AdjustHue(const ImageView& img, double hue_factor);
// AdjustHue one pixel at a time: PIL's HSV round trip as PIL computes it,
// what AdjustHue's vectors (pixel_simd.cc) are tested against.
void AdjustHueScalar(const ImageView& img, double hue_factor);
// convert("L"), repeated over the image's channels.
void ToGrayscale(const ImageView& img);

// ImageOps, as 256-entry tables per channel.
using Lut = std::array<uint8_t, 256>;
void ApplyLut(const ImageView& img, const Lut* per_channel);  // c tables
void Posterize(const ImageView& img, int bits);
void Solarize(const ImageView& img, double threshold);
void Invert(const ImageView& img);
void Autocontrast(const ImageView& img);
void Equalize(const ImageView& img);

void FlipVertical(const ImageView& img);
void FlipHorizontal(const ImageView& img);

// Image.transform(size, AFFINE, matrix, resample, fillcolor): `inverse` maps
// output (x + 0.5, y + 0.5) to input coordinates. Nearest uses PIL's 16.16
// fixed point (as PIL does whenever the image is under 32k pixels a side).
void AffineTransform(const ImageView& img, const double inverse[6], bool bilinear,
                     const std::vector<double>& fill, KernelScratch& scratch);
// torchvision's _get_inverse_affine_matrix (center in pixels).
void InverseAffineMatrix(double cx, double cy, double angle_deg, double tx, double ty,
                         double scale, double shear_x_deg, double shear_y_deg, double out[6]);
// torchvision's F.rotate on PIL (Image.rotate, no expand): `center` null for
// the image centre; 0 and 180 degrees (and 90/270 on a square image) are
// PIL's exact transposes.
void Rotate(const ImageView& img, double angle_deg, const double* center, bool bilinear,
            const std::vector<double>& fill, KernelScratch& scratch);

// Image.rotate's inverse matrix for a w x h image, as Rotate uses it.
void RotationInverse(int w, int h, double angle_deg, const double* center, double out[6]);

// torchvision's gaussian_blur: reflect padding, float32 kernel, rounded.
// kx, ky odd; kx < 2 w, ky < 2 h for reflect padding (the caller checks).
void GaussianBlur(const ImageView& img, int kx, int ky, double sigma_x, double sigma_y,
                  KernelScratch& scratch);

}  // namespace nostall

#endif  // NOSTALL_KERNELS_FUNCTIONAL_H_
