// libavformat's input from a video's Bytes (video/plugin/io.h).
#include "video/plugin/io.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

extern "C" {
#include <libavformat/avio.h>
#include <libavutil/error.h>
}

namespace nostall::video {
namespace {

constexpr size_t kReadBlock = 256 << 10;

}  // namespace

int ReadPacket(void* opaque, uint8_t* buf, int len) {
  auto* m = static_cast<Memory*>(opaque);
  const Bytes& b = *m->bytes;
  if (m->pos >= b.size || len <= 0) return AVERROR_EOF;
  size_t n = static_cast<size_t>(std::min<uint64_t>(static_cast<uint64_t>(len), b.size - m->pos));
  if (m->pos < b.have) {
    n = std::min(n, static_cast<size_t>(b.have - m->pos));
    std::memcpy(buf, b.data + m->pos, n);
  } else {
    if (m->block.empty() || m->pos < m->block_at || m->pos >= m->block_at + m->block.size()) {
      const uint64_t from = m->pos - m->pos % kReadBlock;
      m->block.resize(static_cast<size_t>(std::min<uint64_t>(kReadBlock, b.size - from)));
      Status st = b.read ? b.read(from, m->block.size(), m->block.data())
                         : DataError("the video's bytes end early");
      if (!st.ok()) {
        if (m->error.ok()) m->error = std::move(st);
        m->block.clear();
        return AVERROR(EIO);
      }
      m->block_at = from;
    }
    n = std::min(n, static_cast<size_t>(m->block_at + m->block.size() - m->pos));
    std::memcpy(buf, m->block.data() + (m->pos - m->block_at), n);
  }
  m->pos += n;
  return static_cast<int>(n);
}

int64_t Seek(void* opaque, int64_t offset, int whence) {
  auto* m = static_cast<Memory*>(opaque);
  const auto size = static_cast<int64_t>(m->bytes->size);
  if ((whence & AVSEEK_SIZE) != 0) return size;
  int64_t to = offset;
  switch (whence & ~AVSEEK_FORCE) {
    case SEEK_SET: break;
    case SEEK_CUR: to += static_cast<int64_t>(m->pos); break;
    case SEEK_END: to += size; break;
    default: return -1;
  }
  if (to < 0 || to > size) return -1;
  m->pos = static_cast<uint64_t>(to);
  return to;
}

}  // namespace nostall::video
