// The FFmpeg backend of video/backend.h.
#ifndef NOSTALL_VIDEO_FFMPEG_FFMPEG_H_
#define NOSTALL_VIDEO_FFMPEG_FFMPEG_H_

#include "video/backend.h"

namespace nostall::video {

const Backend& FfmpegBackend();

}  // namespace nostall::video

#endif  // NOSTALL_VIDEO_FFMPEG_FFMPEG_H_
