// Display orientation, as FFmpeg's program turns frames (video/plugin/orient.h).
#include "video/plugin/orient.h"

#include <cmath>
#include <cstring>

extern "C" {
#include <libavutil/display.h>
}

namespace nostall::video {

Orientation OrientationOf(const int32_t* m) {
  Orientation o;
  if (m == nullptr) return o;
  // fftools' get_rotation(): the clockwise angle, in [0, 360).
  double theta = -std::round(av_display_rotation_get(m));
  if (std::isnan(theta)) return o;
  theta -= 360 * std::floor(theta / 360 + 0.9 / 360);
  const int quarter = static_cast<int>(std::lround(theta / 90)) % 4;
  // fftools' filters for each angle (ffmpeg_filter.c, configure_input_video_filter):
  // 90: transpose=clock (cclock_flip when m[3] > 0); 180: hflip if m[0] < 0,
  // vflip if m[4] < 0; 270: transpose=cclock (clock_flip when m[3] < 0);
  // 0: vflip if m[4] < 0. transpose's direction d reads rows from the
  // bottom when d & 1 and writes them from the bottom when d & 2.
  switch (quarter) {
    case 1: {
      const int dir = m[3] > 0 ? 0 : 1;  // cclock_flip : clock
      o = {true, (dir & 1) != 0, (dir & 2) != 0};
      break;
    }
    case 2: o = {false, m[4] < 0, m[0] < 0}; break;
    case 3: {
      const int dir = m[3] < 0 ? 3 : 2;  // clock_flip : cclock
      o = {true, (dir & 1) != 0, (dir & 2) != 0};
      break;
    }
    default: o = {false, m[4] < 0, false}; break;
  }
  o.degrees = (4 - quarter) % 4 * 90;  // counter-clockwise
  o.mirrored = static_cast<int64_t>(m[0]) * m[4] - static_cast<int64_t>(m[1]) * m[3] < 0;
  return o;
}

void Orient(const Orientation& o, const uint8_t* src, size_t src_stride, int w, int h, uint8_t* dst,
            size_t dst_stride) {
  const int out_h = o.transpose ? w : h, out_w = o.transpose ? h : w;
  for (int r = 0; r < out_h; ++r) {
    uint8_t* out = dst + static_cast<size_t>(r) * dst_stride;
    if (!o.transpose) {
      const uint8_t* row = src + static_cast<size_t>(o.flip_rows ? h - 1 - r : r) * src_stride;
      if (!o.flip_cols) {
        std::memcpy(out, row, static_cast<size_t>(w) * 3);
        continue;
      }
      for (int c = 0; c < out_w; ++c) std::memcpy(out + 3 * c, row + 3 * (w - 1 - c), 3);
      continue;
    }
    // A column of the input: src_c fixed by r, src_r running with c.
    const int src_c = o.flip_cols ? w - 1 - r : r;
    const uint8_t* col = src + static_cast<size_t>(src_c) * 3;
    for (int c = 0; c < out_w; ++c) {
      const int src_r = o.flip_rows ? h - 1 - c : c;
      std::memcpy(out + 3 * c, col + static_cast<size_t>(src_r) * src_stride, 3);
    }
  }
}

}  // namespace nostall::video
