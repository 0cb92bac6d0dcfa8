#include "ops/resample.h"

#include <algorithm>
#include <cmath>

namespace nostall {
namespace {

// PIL's precompute_coeffs for the bilinear filter (support 1): for each
// output pixel, the first input pixel, the tap count and normalised weights.
int PrecomputeWeights(int in_size, double in0, double in1, int out_size, std::vector<int>* bounds,
                      std::vector<float>* weights) {
  const double scale = (in1 - in0) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  const int ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  bounds->assign(static_cast<size_t>(out_size) * 2, 0);
  weights->assign(static_cast<size_t>(out_size) * ksize, 0.0f);
  const double ss = 1.0 / filterscale;
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
    int xmax = std::min(static_cast<int>(center + support + 0.5), in_size) - xmin;
    xmax = std::clamp(xmax, 0, ksize);
    float* k = weights->data() + static_cast<size_t>(xx) * ksize;
    double total = 0;
    for (int i = 0; i < xmax; ++i) {
      double t = std::abs((i + xmin - center + 0.5) * ss);
      double v = t < 1.0 ? 1.0 - t : 0.0;
      k[i] = static_cast<float>(v);
      total += v;
    }
    if (total > 0) {
      for (int i = 0; i < xmax; ++i) k[i] = static_cast<float>(k[i] / total);
    } else if (xmax == 0) {  // a box entirely off the image edge: take the edge
      xmin = std::clamp(static_cast<int>(center), 0, in_size - 1);
      xmax = 1;
      k[0] = 1.0f;
    }
    (*bounds)[xx * 2] = xmin;
    (*bounds)[xx * 2 + 1] = xmax;
  }
  return ksize;
}

}  // namespace

namespace {

// The vertical pass's inner loop: contiguous, so it vectorises; built for
// AVX2 too where the CPU has it (chosen at load time, by an ifunc resolver
// that runs before ThreadSanitizer's runtime is up: a TSan build has the
// default version only).
#if defined(NOSTALL_NO_TARGET_CLONES)
#define NOSTALL_CLONES
#else
#define NOSTALL_CLONES __attribute__((target_clones("avx2", "default")))
#endif
NOSTALL_CLONES void AccumulateRow(float* acc,
                                                                    const uint8_t* in,
                                                                    float weight, size_t n,
                                                                    bool first) {
  if (first) {
    for (size_t j = 0; j < n; ++j) acc[j] = weight * static_cast<float>(in[j]);
  } else {
    for (size_t j = 0; j < n; ++j) acc[j] += weight * static_cast<float>(in[j]);
  }
}

// The horizontal pass for 3 channels with a fixed number of taps (weights
// past a pixel's own taps are zero), so the tap loop unrolls.
template <int K>
void HorizontalRgb(const float* in, const int* bounds, const float* weights, int col0, int out_w,
                   uint8_t* out) {
  for (int xx = 0; xx < out_w; ++xx) {
    const float* k = weights + static_cast<size_t>(xx) * K;
    const float* p = in + static_cast<size_t>(bounds[xx * 2] - col0) * 3;
    float a0 = 0.5f, a1 = 0.5f, a2 = 0.5f;
    for (int i = 0; i < K; ++i) {
      a0 += k[i] * p[i * 3];
      a1 += k[i] * p[i * 3 + 1];
      a2 += k[i] * p[i * 3 + 2];
    }
    out[xx * 3] = static_cast<uint8_t>(std::clamp(a0, 0.0f, 255.0f));
    out[xx * 3 + 1] = static_cast<uint8_t>(std::clamp(a1, 0.0f, 255.0f));
    out[xx * 3 + 2] = static_cast<uint8_t>(std::clamp(a2, 0.0f, 255.0f));
  }
}

}  // namespace

// Vertical pass first (input rows -> out_h float rows, only the columns the
// horizontal pass will read), then horizontal (-> uint8). The order is
// immaterial to the result (separable filter, float intermediate) but puts
// the vectorisable pass over the larger data.
void ResampleBox(const uint8_t* src, int width, int height, size_t stride, int channels, double x,
                 double y, double w, double h, uint8_t* dst, int out_w, int out_h,
                 ResampleScratch* s) {
  const int c = channels;
  const int kx = PrecomputeWeights(width, x, x + w, out_w, &s->bounds_x, &s->weights_x);
  const int ky = PrecomputeWeights(height, y, y + h, out_h, &s->bounds_y, &s->weights_y);
  const int col0 = s->bounds_x[0];
  const int col1 = s->bounds_x[(out_w - 1) * 2] + s->bounds_x[(out_w - 1) * 2 + 1];
  const size_t span = static_cast<size_t>(std::max(col1 - col0, 1)) * c;
  // Padding after the last row: fixed-tap kernels may read up to kx pixels
  // past a row's end, always with weight zero.
  s->rows.resize(span * out_h + static_cast<size_t>(kx) * c);
  std::fill(s->rows.end() - static_cast<ptrdiff_t>(kx) * c, s->rows.end(), 0.0f);

  for (int yy = 0; yy < out_h; ++yy) {
    const int ymin = s->bounds_y[yy * 2], n = s->bounds_y[yy * 2 + 1];
    const float* k = s->weights_y.data() + static_cast<size_t>(yy) * ky;
    float* acc = s->rows.data() + static_cast<size_t>(yy) * span;
    for (int i = 0; i < n; ++i) {
      AccumulateRow(acc, src + static_cast<size_t>(ymin + i) * stride + static_cast<size_t>(col0) * c,
                    k[i], span, /*first=*/i == 0);
    }
  }

  for (int yy = 0; yy < out_h; ++yy) {
    const float* in = s->rows.data() + static_cast<size_t>(yy) * span;
    uint8_t* out = dst + static_cast<size_t>(yy) * out_w * c;
    if (c == 3 && (kx == 3 || kx == 5 || kx == 7)) {
      const int* b = s->bounds_x.data();
      const float* k = s->weights_x.data();
      if (kx == 3) HorizontalRgb<3>(in, b, k, col0, out_w, out);
      if (kx == 5) HorizontalRgb<5>(in, b, k, col0, out_w, out);
      if (kx == 7) HorizontalRgb<7>(in, b, k, col0, out_w, out);
      continue;
    }
    // Any other channel count or tap count: the same sum, not unrolled.
    for (int xx = 0; xx < out_w; ++xx) {
      const float* k = s->weights_x.data() + static_cast<size_t>(xx) * kx;
      const float* p = in + static_cast<size_t>(s->bounds_x[xx * 2] - col0) * c;
      for (int ch = 0; ch < c; ++ch) {
        float a = 0.5f;
        for (int i = 0; i < kx; ++i) a += k[i] * p[i * c + ch];
        out[xx * c + ch] = static_cast<uint8_t>(std::clamp(a, 0.0f, 255.0f));
      }
    }
  }
}

}  // namespace nostall
