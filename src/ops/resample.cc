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

void ResampleBox(const uint8_t* src, int width, int height, size_t stride, int channels, double x,
                 double y, double w, double h, uint8_t* dst, int out_w, int out_h,
                 ResampleScratch* s) {
  const int c = channels;
  const int kx = PrecomputeWeights(width, x, x + w, out_w, &s->bounds_x, &s->weights_x);
  const int ky = PrecomputeWeights(height, y, y + h, out_h, &s->bounds_y, &s->weights_y);
  // Only the input rows some output row needs go through the first pass.
  const int row0 = s->bounds_y[0];
  const int row1 = s->bounds_y[(out_h - 1) * 2] + s->bounds_y[(out_h - 1) * 2 + 1];
  const int rows = std::max(row1 - row0, 1);
  s->rows.resize(static_cast<size_t>(rows) * out_w * c);

  for (int r = 0; r < rows; ++r) {
    const uint8_t* in = src + static_cast<size_t>(row0 + r) * stride;
    float* out = s->rows.data() + static_cast<size_t>(r) * out_w * c;
    for (int xx = 0; xx < out_w; ++xx) {
      const int xmin = s->bounds_x[xx * 2], n = s->bounds_x[xx * 2 + 1];
      const float* k = s->weights_x.data() + static_cast<size_t>(xx) * kx;
      const uint8_t* p = in + static_cast<size_t>(xmin) * c;
      if (c == 3) {
        float a0 = 0, a1 = 0, a2 = 0;
        for (int i = 0; i < n; ++i) {
          a0 += k[i] * p[i * 3];
          a1 += k[i] * p[i * 3 + 1];
          a2 += k[i] * p[i * 3 + 2];
        }
        out[xx * 3] = a0;
        out[xx * 3 + 1] = a1;
        out[xx * 3 + 2] = a2;
      } else {
        for (int ch = 0; ch < c; ++ch) {
          float a = 0;
          for (int i = 0; i < n; ++i) a += k[i] * p[i * c + ch];
          out[xx * c + ch] = a;
        }
      }
    }
  }

  const size_t row_len = static_cast<size_t>(out_w) * c;
  for (int yy = 0; yy < out_h; ++yy) {
    const int ymin = s->bounds_y[yy * 2] - row0, n = s->bounds_y[yy * 2 + 1];
    const float* k = s->weights_y.data() + static_cast<size_t>(yy) * ky;
    uint8_t* out = dst + static_cast<size_t>(yy) * row_len;
    // Accumulate whole rows: contiguous, so the compiler vectorises it.
    float acc[4096];
    for (size_t start = 0; start < row_len; start += 4096) {
      const size_t len = std::min<size_t>(4096, row_len - start);
      std::fill(acc, acc + len, 0.0f);
      for (int i = 0; i < n; ++i) {
        const float* in = s->rows.data() + static_cast<size_t>(ymin + i) * row_len + start;
        const float wgt = k[i];
        for (size_t j = 0; j < len; ++j) acc[j] += wgt * in[j];
      }
      for (size_t j = 0; j < len; ++j) {
        out[start + j] = static_cast<uint8_t>(std::clamp(acc[j] + 0.5f, 0.0f, 255.0f));
      }
    }
  }
}

}  // namespace nostall
