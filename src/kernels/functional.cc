#include "kernels/functional.h"

#include "kernels/pixel_simd.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace nostall {
namespace {

// PIL's ImagingBlend: im1 + alpha * (im2 - im1) in float, truncated; clipped
// only when alpha is outside [0, 1] (inside, the result cannot leave 0-255).
inline uint8_t Blend(int degenerate, int v, float alpha) {
  float t = static_cast<float>(degenerate) + alpha * static_cast<float>(v - degenerate);
  if (t <= 0.0f) return 0;
  if (t >= 255.0f) return 255;
  return static_cast<uint8_t>(t);
}

}  // namespace

void AdjustBrightness(const ImageView& img, double factor) {
  BlendWithConstant(img.data, img.bytes(), 0.0f, static_cast<float>(factor));
}

void AdjustContrast(const ImageView& img, double factor) {
  // ImageEnhance.Contrast: the degenerate is the mean of convert("L"),
  // int(mean + 0.5).
  const size_t px = static_cast<size_t>(img.h) * img.w;
  uint64_t sum = 0;
  for (size_t i = 0; i < px; ++i) {
    sum += img.c == 3 ? Luma(img.data + i * 3) : img.data[i];
  }
  const int mean = static_cast<int>(static_cast<double>(sum) / static_cast<double>(px) + 0.5);
  BlendWithConstant(img.data, img.bytes(), static_cast<float>(mean), static_cast<float>(factor));
}

namespace {

void SaturationPixels(uint8_t* data, size_t from, size_t px, float a) {
  for (size_t i = from; i < px; ++i) {
    uint8_t* p = data + i * 3;
    const int g = Luma(p);
    p[0] = Blend(g, p[0], a);
    p[1] = Blend(g, p[1], a);
    p[2] = Blend(g, p[2], a);
  }
}

}  // namespace

void AdjustSaturation(const ImageView& img, double factor) {
  if (img.c != 3) return;  // convert("L") of a gray image is itself
  const float a = static_cast<float>(factor);
  const size_t px = static_cast<size_t>(img.h) * img.w;
  SaturationPixels(img.data, SaturationRgbSimd(img.data, px, a), px, a);
}

void AdjustSaturationScalar(const ImageView& img, double factor) {
  if (img.c != 3) return;
  SaturationPixels(img.data, 0, static_cast<size_t>(img.h) * img.w, static_cast<float>(factor));
}

void AdjustSharpness(const ImageView& img, double factor, KernelScratch& scratch) {
  // ImageEnhance.Sharpness: the degenerate is ImageFilter.SMOOTH (3x3,
  // weights 1 1 1 / 1 5 1 / 1 1 1 over 13, rounded), whose border pixels are
  // the image's own.
  if (img.h < 3 || img.w < 3) return;
  const int c = img.c;
  const size_t row = static_cast<size_t>(img.w) * c;
  scratch.tmp.assign(img.data, img.data + img.bytes());
  const uint8_t* src = scratch.tmp.data();
  for (int y = 1; y < img.h - 1; ++y) {
    SharpnessBlendRow(src + (y - 1) * row, src + y * row, src + (y + 1) * row,
                      img.data + y * row, row, c, static_cast<float>(factor));
  }
  // Border pixels: degenerate == image, so the blend leaves them as they are.
}

namespace {

// PIL's float quotients a / b for a, b in [0, 255] (b > 0), computed once:
// the same float divisions, looked up.
struct HueTables {
  float quotient[256][256];  // [b][a] = float(a) / float(b)
  HueTables() {
    for (int b = 1; b < 256; ++b) {
      for (int a = 0; a < 256; ++a) quotient[b][a] = static_cast<float>(a) / static_cast<float>(b);
    }
  }
};

const HueTables& Hue() {
  static const HueTables t;
  return t;
}

// std::lround of a non-negative value below 2^31: floor(v + 0.5).
inline int RoundHalfUp(double v) { return static_cast<int>(v + 0.5); }

}  // namespace

namespace {

// numpy's uint8 cast of hue_factor * 255 (through an integer: wraps).
uint8_t HueShift(double hue_factor) {
  return static_cast<uint8_t>(static_cast<int64_t>(hue_factor * 255.0) & 0xFF);
}

// Pixels [from, px) of an RGB image at `data`, one at a time.
void HuePixels(uint8_t* data, size_t from, size_t px, uint8_t shift) {
  const HueTables& t = Hue();
  for (size_t i = from; i < px; ++i) {
    uint8_t* p = data + i * 3;
    // PIL's rgb2hsv (Convert.c).
    const int r = p[0], g = p[1], b = p[2];
    const int maxc = std::max(r, std::max(g, b)), minc = std::min(r, std::min(g, b));
    uint8_t uh = 0, us = 0;
    const uint8_t uv = static_cast<uint8_t>(maxc);
    if (minc != maxc) {
      const int cr = maxc - minc;
      const float s = t.quotient[maxc][cr];
      const float rc = t.quotient[cr][maxc - r];
      const float gc = t.quotient[cr][maxc - g];
      const float bc = t.quotient[cr][maxc - b];
      // PIL's arithmetic: float variables, double constants. The three
      // cases are all computed and one taken (which channel is the largest
      // changes from pixel to pixel: a branch would be mispredicted).
      const float cases[3] = {bc - gc, static_cast<float>(2.0 + rc - bc), static_cast<float>(4.0 + gc - rc)};
      float h = cases[r == maxc ? 0 : g == maxc ? 1 : 2];
      // fmod(x, 1.0) of a positive x is x - floor(x), exactly; x is in
      // (0.8, 2), where floor is the truncation to an integer.
      const double x = h / 6.0 + 1.0;
      h = static_cast<float>(x - static_cast<double>(static_cast<int>(x)));
      uh = static_cast<uint8_t>(std::clamp(static_cast<int>(h * 255.0), 0, 255));
      us = static_cast<uint8_t>(std::clamp(static_cast<int>(s * 255.0), 0, 255));
    }
    uh = static_cast<uint8_t>(uh + shift);
    // PIL's hsv2rgb.
    if (us == 0) {
      p[0] = p[1] = p[2] = uv;
      continue;
    }
    const int seg = static_cast<int>(static_cast<float>(uh) * 6.0 / 255.0);  // (>= 0: floor is truncation)
    const float f = static_cast<float>(static_cast<float>(uh) * 6.0 / 255.0 - seg);
    const float fs = static_cast<float>(us) / 255.0f;
    auto clip = [](double v) { return static_cast<uint8_t>(std::clamp(RoundHalfUp(v), 0, 255)); };
    const uint8_t pv = clip(static_cast<float>(uv) * (1.0 - fs));
    const uint8_t qv = clip(static_cast<float>(uv) * (1.0 - fs * f));
    const uint8_t tv = clip(static_cast<float>(uv) * (1.0 - fs * (1.0 - f)));
    // PIL's six sectors, as which of (v, p, q, t) each channel takes: a
    // lookup rather than a branch (the sector changes from pixel to pixel).
    static constexpr uint8_t kSector[6][3] = {{0, 3, 1}, {2, 0, 1}, {1, 0, 3}, {1, 2, 0}, {3, 1, 0}, {0, 1, 2}};
    const uint8_t values[4] = {uv, pv, qv, tv};
    const uint8_t* sector = kSector[seg % 6];
    p[0] = values[sector[0]];
    p[1] = values[sector[1]];
    p[2] = values[sector[2]];
  }
}

}  // namespace

void AdjustHue(const ImageView& img, double hue_factor) {
  if (img.c != 3) return;
  const size_t px = static_cast<size_t>(img.h) * img.w;
  const uint8_t shift = HueShift(hue_factor);
  HuePixels(img.data, HueRgbSimd(img.data, px, shift), px, shift);
}

void AdjustHueScalar(const ImageView& img, double hue_factor) {
  if (img.c != 3) return;
  HuePixels(img.data, 0, static_cast<size_t>(img.h) * img.w, HueShift(hue_factor));
}

void ToGrayscale(const ImageView& img) {
  if (img.c != 3) return;
  const size_t px = static_cast<size_t>(img.h) * img.w;
  for (size_t i = 0; i < px; ++i) {
    uint8_t* p = img.data + i * 3;
    p[0] = p[1] = p[2] = Luma(p);
  }
}

void ApplyLut(const ImageView& img, const Lut* lut) {
  const size_t px = static_cast<size_t>(img.h) * img.w;
  uint8_t* p = img.data;
  if (img.c == 3) {
    const uint8_t *l0 = lut[0].data(), *l1 = lut[1].data(), *l2 = lut[2].data();
    for (size_t i = 0; i < px; ++i, p += 3) {
      p[0] = l0[p[0]];
      p[1] = l1[p[1]];
      p[2] = l2[p[2]];
    }
    return;
  }
  for (size_t i = 0; i < px; ++i) p[i] = lut[0][p[i]];
}

namespace {
void SameLut(const ImageView& img, const Lut& lut) {
  Lut all[3] = {lut, lut, lut};
  ApplyLut(img, all);
}

std::array<std::array<uint32_t, 256>, 3> Histograms(const ImageView& img) {
  // Two tables per channel, even and odd pixels, summed at the end: runs of
  // equal values (flat image areas) then do not wait on one counter.
  std::array<std::array<uint32_t, 256>, 6> part{};
  const size_t px = static_cast<size_t>(img.h) * img.w;
  const int c = img.c;
  const uint8_t* p = img.data;
  for (size_t i = 0; i < px; ++i, p += c) {
    for (int k = 0; k < c; ++k) ++part[k * 2 + (i & 1)][p[k]];
  }
  std::array<std::array<uint32_t, 256>, 3> hist{};
  for (int k = 0; k < c; ++k) {
    for (int v = 0; v < 256; ++v) hist[k][v] = part[k * 2][v] + part[k * 2 + 1][v];
  }
  return hist;
}
}  // namespace

void Posterize(const ImageView& img, int bits) {
  const int mask = ~((1 << (8 - std::clamp(bits, 0, 8))) - 1);
  Lut lut;
  for (int i = 0; i < 256; ++i) lut[i] = static_cast<uint8_t>(i & mask);
  SameLut(img, lut);
}

void Solarize(const ImageView& img, double threshold) {
  Lut lut;
  for (int i = 0; i < 256; ++i) lut[i] = static_cast<uint8_t>(i < threshold ? i : 255 - i);
  SameLut(img, lut);
}

void Invert(const ImageView& img) {
  uint8_t* p = img.data;
  const size_t n = img.bytes();
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(255 - p[i]);
}

void Autocontrast(const ImageView& img) {
  // ImageOps.autocontrast(cutoff=0): each band stretched from its lowest to
  // its highest value, int(ix * scale + offset).
  const auto hist = Histograms(img);
  Lut lut[3];
  for (int k = 0; k < img.c; ++k) {
    int lo = 0, hi = 255;
    while (lo < 256 && hist[k][lo] == 0) ++lo;
    while (hi >= 0 && hist[k][hi] == 0) --hi;
    for (int i = 0; i < 256; ++i) {
      if (hi <= lo) {
        lut[k][i] = static_cast<uint8_t>(i);
        continue;
      }
      const double scale = 255.0 / (hi - lo), offset = -lo * scale;
      lut[k][i] = static_cast<uint8_t>(std::clamp(static_cast<int>(i * scale + offset), 0, 255));
    }
  }
  ApplyLut(img, lut);
}

void Equalize(const ImageView& img) {
  // ImageOps.equalize: per band, step = (count - last nonzero bin) // 255.
  const auto hist = Histograms(img);
  Lut lut[3];
  for (int k = 0; k < img.c; ++k) {
    uint64_t total = 0, last = 0;
    int nonzero = 0;
    for (int i = 0; i < 256; ++i) {
      if (hist[k][i]) {
        total += hist[k][i];
        last = hist[k][i];
        ++nonzero;
      }
    }
    const uint64_t step = nonzero <= 1 ? 0 : (total - last) / 255;
    uint64_t n = step / 2;
    for (int i = 0; i < 256; ++i) {
      if (step == 0) {
        lut[k][i] = static_cast<uint8_t>(i);
      } else {
        lut[k][i] = static_cast<uint8_t>(std::min<uint64_t>(n / step, 255));
        n += hist[k][i];
      }
    }
  }
  ApplyLut(img, lut);
}

void FlipVertical(const ImageView& img) {
  const size_t row = static_cast<size_t>(img.w) * img.c;
  std::vector<uint8_t> tmp(row);
  for (int y = 0; y < img.h / 2; ++y) {
    uint8_t* a = img.data + y * row;
    uint8_t* b = img.data + (img.h - 1 - y) * row;
    std::memcpy(tmp.data(), a, row);
    std::memcpy(a, b, row);
    std::memcpy(b, tmp.data(), row);
  }
}

void FlipHorizontal(const ImageView& img) {
  const int c = img.c;
  for (int y = 0; y < img.h; ++y) {
    uint8_t* row = img.data + static_cast<size_t>(y) * img.w * c;
    for (int x = 0; x < img.w / 2; ++x) {
      for (int k = 0; k < c; ++k) std::swap(row[x * c + k], row[(img.w - 1 - x) * c + k]);
    }
  }
}

namespace {

// PIL's FLOOR and COORD (Geometry.c).
inline int Floor(double v) { return v < 0.0 ? static_cast<int>(std::floor(v)) : static_cast<int>(v); }
inline int Coord(double v) { return v < 0.0 ? -1 : static_cast<int>(v); }

bool CheckFixedAt(const double a[6], int x, int y) {
  return std::fabs(x * a[0] + y * a[1] + a[2]) < 32768.0 &&
         std::fabs(x * a[3] + y * a[4] + a[5]) < 32768.0;
}

// PIL's affine_transform: 16.16 fixed point only when every corner's
// source coordinate fits (else a tiny scale overflows the int steps).
bool CheckFixed(const double a[6], int w, int h) {
  for (double v : {a[0], a[1], a[2], a[3], a[4], a[5]}) {
    if (!std::isfinite(v)) return false;
  }
  return CheckFixedAt(a, 0, 0) && CheckFixedAt(a, w, h) && CheckFixedAt(a, 0, h) &&
         CheckFixedAt(a, w, 0);
}

}  // namespace

namespace {

// The source image (a copy, with 4 bytes of slack: the vectorised bilinear
// path reads each tap as 4 bytes), the output and the fill pixel.
struct AffineIo {
  const uint8_t* in;
  const ImageView& img;
  uint8_t fill[3];
  size_t row() const { return static_cast<size_t>(img.w) * img.c; }
  void Fill(uint8_t* out) const { std::memcpy(out, fill, img.c); }
};

bool WholePixelTranslation(const double a[6]) {
  return a[0] == 1.0 && a[1] == 0.0 && a[3] == 0.0 && a[4] == 1.0 && a[2] == std::floor(a[2]) &&
         a[5] == std::floor(a[5]) && std::fabs(a[2]) < 1e6 && std::fabs(a[5]) < 1e6;
}

// A whole-pixel translation (TranslateX/Y): every output pixel is the
// source pixel (x + a[2], y + a[5]) or fill, for nearest and bilinear
// alike (the bilinear weights are exactly 0 and 1): copy rows.
void AffineTranslate(const AffineIo& io, const double a[6]) {
  const int w = io.img.w, h = io.img.h, c = io.img.c;
  const size_t row = io.row();
  const int tx = static_cast<int>(a[2]), ty = static_cast<int>(a[5]);
  for (int y = 0; y < h; ++y) {
    uint8_t* out = io.img.data + y * row;
    const int sy = y + ty;
    for (int x = 0; x < w; ++x) {
      const int sx = x + tx;
      if (sy < 0 || sy >= h || sx < 0 || sx >= w) io.Fill(out + x * c);
    }
    if (sy < 0 || sy >= h) continue;
    const int x0 = std::max(0, -tx), x1 = std::min(w, w - tx);
    if (x0 < x1) std::memcpy(out + x0 * c, io.in + sy * row + (x0 + tx) * c, (x1 - x0) * c);
  }
}

// One RGB pixel whose four taps lie inside: no clamping, the same arithmetic.
void BilinearInsideRgb(const uint8_t* p0, size_t row, double dx, double dy, uint8_t* out) {
  const uint8_t* p1 = p0 + row;
  if (dx == 0.0) {  // a shear along y: one column
    for (int k = 0; k < 3; ++k) {
      const double v1 = p0[k], v2 = p1[k];
      out[k] = static_cast<uint8_t>(v1 + (v2 - v1) * dy);
    }
    return;
  }
  if (dy == 0.0) {  // a shear along x: one row (v1 + (v2 - v1) * 0 is v1)
    for (int k = 0; k < 3; ++k) out[k] = static_cast<uint8_t>(p0[k] + (p0[k + 3] - p0[k]) * dx);
    return;
  }
  for (int k = 0; k < 3; ++k) {
    const double v1 = p0[k] + (p0[k + 3] - p0[k]) * dx;
    const double v2 = p1[k] + (p1[k + 3] - p1[k]) * dx;
    out[k] = static_cast<uint8_t>(v1 + (v2 - v1) * dy);
  }
}

// ImagingGenericTransform with bilinear_filter: samples at the pixel's
// centre, outside the image is fill, taps clamped to the edge, truncated.
void AffineBilinear(const AffineIo& io, const double a[6]) {
  const int w = io.img.w, h = io.img.h, c = io.img.c;
  const size_t row = io.row();
  for (int y = 0; y < h; ++y) {
    uint8_t* out = io.img.data + y * row;
    for (int x = 0; x < w; ++x, out += c) {
      double xin = a[0] * (x + 0.5) + a[1] * (y + 0.5) + a[2];
      double yin = a[3] * (x + 0.5) + a[4] * (y + 0.5) + a[5];
      if (xin < 0.0 || xin >= w || yin < 0.0 || yin >= h) {
        io.Fill(out);
        continue;
      }
      xin -= 0.5;
      yin -= 0.5;
      const int x0 = Floor(xin), y0 = Floor(yin);
      const double dx = xin - x0, dy = yin - y0;
      if (c == 3 && x0 >= 0 && x0 + 1 < w && y0 >= 0 && y0 + 1 < h) {
        BilinearInsideRgb(io.in + y0 * row + x0 * 3, row, dx, dy, out);
        continue;
      }
      const int xa = std::clamp(x0, 0, w - 1) * c, xb = std::clamp(x0 + 1, 0, w - 1) * c;
      const uint8_t* r0 = io.in + std::clamp(y0, 0, h - 1) * row;
      const bool has_r1 = y0 + 1 >= 0 && y0 + 1 < h;
      const uint8_t* r1 = has_r1 ? io.in + (y0 + 1) * row : r0;
      for (int k = 0; k < c; ++k) {
        double v1 = r0[xa + k] + (r0[xb + k] - r0[xa + k]) * dx;
        double v2 = has_r1 ? r1[xa + k] + (r1[xb + k] - r1[xa + k]) * dx : v1;
        out[k] = static_cast<uint8_t>(v1 + (v2 - v1) * dy);
      }
    }
  }
}

// affine_fixed: nearest in 16.16 fixed point, FIX(v) = FLOOR(v * 65536 + 0.5).
void AffineNearestFixed(const AffineIo& io, const double a[6]) {
  const int w = io.img.w, h = io.img.h, c = io.img.c;
  const size_t row = io.row();
  auto fix = [](double v) { return Floor(v * 65536.0 + 0.5); };
  const int a0 = fix(a[0]), a1 = fix(a[1]), a3 = fix(a[3]), a4 = fix(a[4]);
  int a2 = fix(a[2] + a[1] * 0.5 + a[0] * 0.5);
  int a5 = fix(a[5] + a[4] * 0.5 + a[3] * 0.5);
  for (int y = 0; y < h; ++y) {
    uint8_t* out = io.img.data + y * row;
    int xx = a2, yy = a5;
    for (int x = 0; x < w; ++x, out += c) {
      const int xin = xx >> 16, yin = yy >> 16;
      if (xin >= 0 && xin < w && yin >= 0 && yin < h) {
        const uint8_t* p = io.in + yin * row + xin * c;
        out[0] = p[0];
        if (c == 3) {
          out[1] = p[1];
          out[2] = p[2];
        }
      } else {
        io.Fill(out);
      }
      xx += a0;
      yy += a3;
    }
    a2 += a1;
    a5 += a4;
  }
}

// The floating-point nearest path PIL takes for coordinates past 16.16's range.
void AffineNearestFloat(const AffineIo& io, const double a[6]) {
  const int w = io.img.w, h = io.img.h, c = io.img.c;
  const size_t row = io.row();
  double xo = a[2] + a[1] * 0.5 + a[0] * 0.5, yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
  for (int y = 0; y < h; ++y) {
    uint8_t* out = io.img.data + y * row;
    double xx = xo, yy = yo;
    for (int x = 0; x < w; ++x, out += c) {
      const int xin = Coord(xx), yin = Coord(yy);
      if (xin >= 0 && xin < w && yin >= 0 && yin < h) {
        std::memcpy(out, io.in + yin * row + xin * c, c);
      } else {
        io.Fill(out);
      }
      xx += a[0];
      yy += a[3];
    }
    xo += a[1];
    yo += a[4];
  }
}

}  // namespace

void AffineTransform(const ImageView& img, const double a[6], bool bilinear,
                     const std::vector<double>& fill, KernelScratch& scratch) {
  scratch.tmp.resize(img.bytes() + 4);
  std::copy(img.data, img.data + img.bytes(), scratch.tmp.begin());
  AffineIo io{scratch.tmp.data(), img, {0, 0, 0}};
  for (int k = 0; k < img.c; ++k) {
    io.fill[k] = static_cast<uint8_t>(
        std::clamp(static_cast<int>(fill.empty() ? 0 : fill[fill.size() == 1 ? 0 : k]), 0, 255));
  }
  if (WholePixelTranslation(a)) {
    AffineTranslate(io, a);
  } else if (bilinear && img.c == 3 && img.bytes() < (size_t{1} << 30) &&
             AffineBilinearRgbSimd(io.in, img.w, img.h, a, io.fill, img.data)) {
    return;
  } else if (bilinear) {
    AffineBilinear(io, a);
  } else if (CheckFixed(a, img.w, img.h)) {
    AffineNearestFixed(io, a);
  } else {
    AffineNearestFloat(io, a);
  }
}

void InverseAffineMatrix(double cx, double cy, double angle_deg, double tx, double ty,
                         double scale, double shear_x_deg, double shear_y_deg, double m[6]) {
  const double rot = angle_deg * M_PI / 180.0;
  const double sx = shear_x_deg * M_PI / 180.0, sy = shear_y_deg * M_PI / 180.0;
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  m[0] = d / scale;
  m[1] = -b / scale;
  m[2] = 0.0;
  m[3] = -c / scale;
  m[4] = a / scale;
  m[5] = 0.0;
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
}

namespace {
// Python's round(v, 15), to the precision that matters here.
double Round15(double v) { return std::nearbyint(v * 1e15) / 1e15; }

void Rotate180(const ImageView& img) {
  FlipVertical(img);
  FlipHorizontal(img);
}

// Transpose.ROTATE_90 (counter-clockwise) or ROTATE_270, square images.
void RotateSquare(const ImageView& img, bool ccw90, KernelScratch& scratch) {
  const int n = img.w, c = img.c;
  scratch.tmp.assign(img.data, img.data + img.bytes());
  const uint8_t* in = scratch.tmp.data();
  for (int y = 0; y < n; ++y) {
    for (int x = 0; x < n; ++x) {
      // ROTATE_90: out(x, y) = in(n - 1 - y, x); ROTATE_270: in(y, n - 1 - x).
      const int sx = ccw90 ? n - 1 - y : y, sy = ccw90 ? x : n - 1 - x;
      std::memcpy(img.data + (static_cast<size_t>(y) * n + x) * c,
                  in + (static_cast<size_t>(sy) * n + sx) * c, c);
    }
  }
}

double NormalAngle(double angle_deg) {
  double angle = std::fmod(angle_deg, 360.0);
  return angle < 0 ? angle + 360.0 : angle;
}

}  // namespace

void RotationInverse(int w, int h, double angle_deg, const double* center, double m[6]) {
  const double angle = NormalAngle(angle_deg);
  const double cx = center ? center[0] : w / 2.0, cy = center ? center[1] : h / 2.0;
  const double rad = -angle * M_PI / 180.0;
  m[0] = Round15(std::cos(rad));
  m[1] = Round15(std::sin(rad));
  m[2] = 0.0;
  m[3] = Round15(-std::sin(rad));
  m[4] = Round15(std::cos(rad));
  m[5] = 0.0;
  const double tx = -cx, ty = -cy;
  const double m2 = m[0] * tx + m[1] * ty + m[2], m5 = m[3] * tx + m[4] * ty + m[5];
  m[2] = m2 + cx;
  m[5] = m5 + cy;
}

void Rotate(const ImageView& img, double angle_deg, const double* center, bool bilinear,
            const std::vector<double>& fill, KernelScratch& scratch) {
  const double angle = NormalAngle(angle_deg);
  if (center == nullptr) {
    if (angle == 0) return;
    if (angle == 180) return Rotate180(img);
    if ((angle == 90 || angle == 270) && img.w == img.h) {
      return RotateSquare(img, angle == 90, scratch);
    }
  }
  double m[6];
  RotationInverse(img.w, img.h, angle, center, m);
  AffineTransform(img, m, bilinear, fill, scratch);
}

void GaussianBlur(const ImageView& img, int kx, int ky, double sigma_x, double sigma_y,
                  KernelScratch& scratch) {
  // torchvision's _get_gaussian_kernel1d in float32: exp(-0.5 (x / sigma)^2)
  // over linspace(-(k-1)/2, (k-1)/2, k), normalised.
  auto kernel = [](int k, double sigma) {
    std::vector<float> w(k);
    float sum = 0;
    const float s = static_cast<float>(sigma);
    for (int i = 0; i < k; ++i) {
      const float x = -(k - 1) * 0.5f + static_cast<float>(i);
      const float t = x / s;
      w[i] = std::exp(-0.5f * t * t);
      sum += w[i];
    }
    for (float& v : w) v /= sum;
    return w;
  };
  const std::vector<float> wx = kernel(kx, sigma_x), wy = kernel(ky, sigma_y);
  const int w = img.w, h = img.h, c = img.c;
  const int px = kx / 2, py = ky / 2;
  // Reflect (without repeating the edge), as torch's pad(mode="reflect").
  auto reflect = [](int i, int n) {
    if (n == 1) return 0;
    while (i < 0 || i >= n) i = i < 0 ? -i : 2 * (n - 1) - i;
    return i;
  };
  // Vertical pass into floats, then horizontal, then round half to even.
  scratch.ftmp.assign(static_cast<size_t>(w) * h * c, 0.0f);
  const size_t row = static_cast<size_t>(w) * c;
  for (int y = 0; y < h; ++y) {
    float* acc = scratch.ftmp.data() + y * row;
    for (int i = 0; i < ky; ++i) {
      const uint8_t* in = img.data + reflect(y - py + i, h) * row;
      const float k = wy[i];
      for (size_t j = 0; j < row; ++j) acc[j] += k * in[j];
    }
  }
  // Horizontal: each row padded by reflection once, then each tap is a
  // contiguous multiply-add over the row (the next pixel of a channel is c
  // floats on), which the compiler vectorises.
  std::vector<float> padded(static_cast<size_t>(w + 2 * px) * c), line(row);
  for (int y = 0; y < h; ++y) {
    const float* in = scratch.ftmp.data() + y * row;
    uint8_t* out = img.data + y * row;
    for (int x = -px; x < w + px; ++x) {
      std::copy_n(in + static_cast<size_t>(reflect(x, w)) * c, c,
                  padded.begin() + static_cast<ptrdiff_t>(x + px) * c);
    }
    std::fill(line.begin(), line.end(), 0.0f);
    for (int i = 0; i < kx; ++i) {
      const float k = wx[i];
      const float* p = padded.data() + static_cast<size_t>(i) * c;
      for (size_t j = 0; j < row; ++j) line[j] += k * p[j];
    }
    for (size_t j = 0; j < row; ++j) {
      out[j] = static_cast<uint8_t>(std::clamp(std::nearbyint(line[j]), 0.0f, 255.0f));
    }
  }
}

}  // namespace nostall
