// The four colour adjustments ColorJitter and RandomPhotometricDistort draw
// (brightness, contrast, saturation, hue, by index 0-3): their ranges, read
// from a spec entry, and one adjustment applied as torchvision does on PIL
// images (color_jitter.cc).
#ifndef NOSTALL_OPS_COLOR_FACTORS_H_
#define NOSTALL_OPS_COLOR_FACTORS_H_

#include "kernels/image.h"
#include "ops/op.h"

namespace nostall {

inline constexpr const char* kColorFactorNames[4] = {"brightness", "contrast", "saturation",
                                                     "hue"};

struct ColorFactors {
  double lo[4] = {0, 0, 0, 0}, hi[4] = {0, 0, 0, 0};
  bool on[4] = {false, false, false, false};
  // The four range arguments, by kColorFactorNames.
  Status Read(OpArgs& args);
};

// Adjustment `k` (kColorFactorNames) by `factor`.
void ApplyColorFactor(const ImageView& img, int k, double factor);

}  // namespace nostall

#endif  // NOSTALL_OPS_COLOR_FACTORS_H_
