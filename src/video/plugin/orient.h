// A video's display orientation: the container's display matrix (phones
// record portrait video as landscape frames and say how to turn them), as
// FFmpeg's own program applies it by default (fftools' autorotate: a
// transpose for 90 and 270 degrees, flips for 180 and mirrored matrices),
// so that frames come out as the video is shown, and as `ffmpeg -i` and
// torchcodec give them. Angles other than multiples of 90 degrees are
// taken to the nearest one (torchcodec's rule; FFmpeg's program rotates by
// the exact angle, with black corners).
#ifndef NOSTALL_VIDEO_PLUGIN_ORIENT_H_
#define NOSTALL_VIDEO_PLUGIN_ORIENT_H_

#include <cstddef>
#include <cstdint>

namespace nostall::video {

// Output pixel (r, c) is input pixel (src_r, src_c) where, without
// `transpose`, src_r = r (or h-1-r with `flip_rows`) and src_c = c (or
// w-1-c with `flip_cols`); with `transpose`, src_r = c (or h-1-c with
// `flip_rows`) and src_c = r (or w-1-r with `flip_cols`): the output is
// h wide and w high.
struct Orientation {
  bool transpose = false, flip_rows = false, flip_cols = false;
  bool identity() const { return !transpose && !flip_rows && !flip_cols; }
  // The angle the frames are turned by, counter-clockwise, in degrees (0,
  // 90, 180, 270), as `video.info()` reports it (ffprobe's and torchcodec's
  // "rotation"); a mirrored matrix also flips them.
  int degrees = 0;
  bool mirrored = false;
};

// From a display matrix (libavutil's 3x3 16.16 fixed point, as MP4 and
// Matroska carry it); none (null): the identity.
Orientation OrientationOf(const int32_t* matrix);

// `src` (w x h packed RGB24, `src_stride` bytes a row) turned as `o` says
// into `dst` (rows of `dst_stride` bytes; h x w with a transpose).
void Orient(const Orientation& o, const uint8_t* src, size_t src_stride, int w, int h, uint8_t* dst,
            size_t dst_stride);

}  // namespace nostall::video

#endif  // NOSTALL_VIDEO_PLUGIN_ORIENT_H_
