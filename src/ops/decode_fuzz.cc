// libFuzzer target: the image header readers and decoders (JPEG, PNG, WebP,
// TIFF, BMP, PPM/PGM), through
// the whole per-sample prep (crop/scale plan, DCT-scaled cropped decode,
// resample, flip, gray/RGB, normalize). The last input byte picks the
// transforms; the rest is the file.
#include <vector>

#include "codecs/decode.h"
#include "ops/prep.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nostall;
  if (size < 1) return 0;
  const uint8_t pick = data[size - 1];
  --size;
  ImageInfo info;
  (void)ImageReadInfo(SniffFormat(data, size), data, size, &info);

  PrepSpec spec;
  spec.max_pixels = 1 << 22;  // keeps each run fast; the limit itself is under test too
  spec.mode = (pick & 1) ? ColorMode::kGray : ColorMode::kRGB;
  spec.layout = (pick & 2) ? Layout::kNHWC : Layout::kNCHW;
  spec.dct_scaling = (pick & 4) != 0;
  Transform first{(pick & 8) ? TransformKind::kRandomResizedCrop : TransformKind::kResize};
  if (first.kind == TransformKind::kResize) {
    first.short_side = 24;
    Transform crop{TransformKind::kCenterCrop};
    crop.height = crop.width = 24;
    spec.transforms = {first, crop};
  } else {
    first.height = first.width = 24;
    spec.transforms = {first};
  }
  if (pick & 16) {
    Transform flip{TransformKind::kRandomHorizontalFlip};
    flip.p = 1.0;
    spec.transforms.push_back(flip);
  }
  if (pick & 32) {
    Transform norm{TransformKind::kNormalize};
    norm.mean = {0.5, 0.5, 0.5};
    norm.std = {0.25, 0.25, 0.25};
    if (spec.mode == ColorMode::kGray) norm.mean = norm.std = {0.5};
    spec.transforms.push_back(norm);
    spec.dtype = DType::kFloat32;
  }
  if (!spec.Validate().ok()) return 0;
  std::vector<float> out(24 * 24 * 3);
  PrepScratch scratch;
  (void)PrepareSample(spec, data, size, {7, 0, pick}, 24, 24, out.data(), &scratch);
  // Full-size decode of small images too (no transforms: the image's size).
  int w = 0, h = 0;
  if (ProbeImageSize(data, size, &w, &h).ok() && w > 0 && h > 0 &&
      static_cast<int64_t>(w) * h <= (1 << 16)) {
    PrepSpec whole;
    whole.mode = spec.mode;
    std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3);
    (void)PrepareSample(whole, data, size, {0, 0, 0}, h, w, px.data(), &scratch);
  }
  return 0;
}
