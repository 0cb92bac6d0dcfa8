// libavformat's input from a video's Bytes (video/backend.h): the bytes at
// hand, the rest of the file read a block at a time where the demuxer asks,
// so that a long file is not read whole for a clip.
#ifndef NOSTALL_VIDEO_PLUGIN_IO_H_
#define NOSTALL_VIDEO_PLUGIN_IO_H_

#include <cstdint>
#include <vector>

#include "nostall/status.h"
#include "video/backend.h"

namespace nostall::video {

struct Memory {
  const Bytes* bytes = nullptr;
  uint64_t pos = 0;
  std::vector<uint8_t> block;  // bytes [block_at, block_at + block.size()) of the file
  uint64_t block_at = 0;
  Status error;  // the first read that failed (the demuxer then sees EIO)
};

// avio_alloc_context's read_packet and seek, `opaque` a Memory.
int ReadPacket(void* opaque, uint8_t* buf, int len);
int64_t Seek(void* opaque, int64_t offset, int whence);

}  // namespace nostall::video

#endif  // NOSTALL_VIDEO_PLUGIN_IO_H_
