// The plugin's entry point (_nostall_video.so): video/backend.h loads it.
#include "video/plugin/ffmpeg.h"

extern "C" __attribute__((visibility("default"))) const nostall::video::Backend* nostall_video_backend() {
  return &nostall::video::FfmpegBackend();
}
