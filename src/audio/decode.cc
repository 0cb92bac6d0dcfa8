// Audio decoding (decode.h) over libsndfile's virtual I/O: the file's bytes
// stay where the fetcher put them.
#include "audio/decode.h"

#include <sndfile.h>

#include <algorithm>
#include <cstring>
#include <memory>

namespace nostall::audio {
namespace {

struct Memory {
  const uint8_t* data;
  sf_count_t size;
  sf_count_t pos;
};

sf_count_t Length(void* user) { return static_cast<Memory*>(user)->size; }

sf_count_t Seek(sf_count_t offset, int whence, void* user) {
  Memory* m = static_cast<Memory*>(user);
  sf_count_t to = offset;
  if (whence == SEEK_CUR) to = m->pos + offset;
  if (whence == SEEK_END) to = m->size + offset;
  if (to < 0 || to > m->size) return -1;
  m->pos = to;
  return m->pos;
}

sf_count_t Read(void* ptr, sf_count_t count, void* user) {
  Memory* m = static_cast<Memory*>(user);
  const sf_count_t n = std::max<sf_count_t>(0, std::min(count, m->size - m->pos));
  if (n > 0) std::memcpy(ptr, m->data + m->pos, static_cast<size_t>(n));
  m->pos += n;
  return n;
}

sf_count_t Write(const void*, sf_count_t, void*) { return 0; }
sf_count_t Tell(void* user) { return static_cast<Memory*>(user)->pos; }

std::string FormatName(int format) {
  const int major = format & SF_FORMAT_TYPEMASK, sub = format & SF_FORMAT_SUBMASK;
  switch (major) {
    case SF_FORMAT_WAV: case SF_FORMAT_WAVEX: case SF_FORMAT_RF64: return "WAV";
    case SF_FORMAT_FLAC: return "FLAC";
    case SF_FORMAT_MPEG: return "MP3";
    case SF_FORMAT_OGG:
      return sub == SF_FORMAT_OPUS ? "OGG/OPUS" : "OGG/VORBIS";
    case SF_FORMAT_AIFF: return "AIFF";
    default: return "other";
  }
}

struct Closer {
  void operator()(SNDFILE* f) const { sf_close(f); }
};

// Opens the bytes; *info from the header.
Status Open(Memory* mem, std::unique_ptr<SNDFILE, Closer>* out, AudioInfo* info, int* format) {
  if (mem->size == 0) return DataError("empty audio file (zero bytes)");
  static SF_VIRTUAL_IO io = {Length, Seek, Read, Write, Tell};
  SF_INFO sfi;
  std::memset(&sfi, 0, sizeof sfi);
  SNDFILE* f = sf_open_virtual(&io, SFM_READ, &sfi, mem);
  if (f == nullptr) {
    return DataError(std::string("not an audio file libsndfile reads (WAV, FLAC, MP3, Ogg Vorbis, Opus): ") +
                     sf_strerror(nullptr));
  }
  out->reset(f);
  if (sfi.channels < 1 || sfi.channels > 64) {
    return DataError("audio header gives " + std::to_string(sfi.channels) + " channels");
  }
  if (sfi.samplerate < 1 || sfi.samplerate > 768000) {
    return DataError("audio header gives a sample rate of " + std::to_string(sfi.samplerate) + " Hz");
  }
  if (sfi.frames < 0) return DataError("audio header gives no length");
  info->frames = sfi.frames;
  info->sample_rate = sfi.samplerate;
  info->channels = sfi.channels;
  info->format = FormatName(sfi.format);
  *format = sfi.format;
  return Status::OK();
}

// Frames [start, start + count) clamped to the file, read by `read`
// (sf_readf_float or sf_readf_short) into `buf` (interleaved); *got frames.
template <typename T, typename ReadFn>
Status ReadRange(SNDFILE* f, const AudioInfo& info, int format, int64_t start, int64_t count,
                 ReadFn read, std::vector<T>* buf) {
  buf->assign(static_cast<size_t>(count) * info.channels, T(0));
  const int64_t from = std::clamp<int64_t>(start, 0, info.frames);
  const int64_t to = std::clamp<int64_t>(start + count, 0, info.frames);
  if (to <= from) return Status::OK();
  if (from > 0 && sf_seek(f, from, SEEK_SET) != from) {
    return DataError("cannot seek to frame " + std::to_string(from) + " of " + std::to_string(info.frames) +
                     " (" + sf_strerror(f) + ")");
  }
  T* dst = buf->data() + (from - start) * info.channels;
  int64_t got = 0;
  while (got < to - from) {
    const sf_count_t n = read(f, dst + got * info.channels, to - from - got);
    if (n <= 0) break;
    got += n;
  }
  // An MP3's length in its header can be an estimate a frame or two long;
  // any other format that stops short is truncated or corrupt.
  const int64_t slack = (format & SF_FORMAT_TYPEMASK) == SF_FORMAT_MPEG ? 2304 : 0;
  if (got < to - from - slack) {
    const int err = sf_error(f);
    return DataError("audio data ends at frame " + std::to_string(from + got) + " of the " +
                     std::to_string(info.frames) + " its header promises (truncated or corrupt" +
                     (err != 0 ? std::string(": ") + sf_strerror(f) : std::string()) + ")");
  }
  return Status::OK();
}

}  // namespace

Status ProbeAudio(const uint8_t* data, size_t size, AudioInfo* info) {
  Memory mem{data, static_cast<sf_count_t>(size), 0};
  std::unique_ptr<SNDFILE, Closer> f;
  int format = 0;
  return Open(&mem, &f, info, &format);
}

Status DecodeFrames(const uint8_t* data, size_t size, int64_t start, int64_t count, bool mono,
                    std::vector<float>* out, AudioInfo* info) {
  Memory mem{data, static_cast<sf_count_t>(size), 0};
  std::unique_ptr<SNDFILE, Closer> f;
  int format = 0;
  NOSTALL_RETURN_IF_ERROR(Open(&mem, &f, info, &format));
  if (count < 0) return InvalidArgument("negative frame count");
  // Integer PCM read as float is x / 2^(bits-1) (libsndfile's default).
  sf_command(f.get(), SFC_SET_NORM_FLOAT, nullptr, SF_TRUE);
  thread_local std::vector<float> inter;
  NOSTALL_RETURN_IF_ERROR(ReadRange(f.get(), *info, format, start, count,
                                    [](SNDFILE* s, float* p, sf_count_t n) { return sf_readf_float(s, p, n); },
                                    &inter));
  const int c = info->channels;
  const int rows = mono ? 1 : c;
  out->assign(static_cast<size_t>(rows) * static_cast<size_t>(count), 0.0f);
  if (mono) {
    for (int64_t t = 0; t < count; ++t) {
      float s = 0;
      for (int k = 0; k < c; ++k) s += inter[static_cast<size_t>(t * c + k)];
      (*out)[static_cast<size_t>(t)] = s / static_cast<float>(c);
    }
  } else {
    for (int64_t t = 0; t < count; ++t) {
      for (int k = 0; k < c; ++k) {
        (*out)[static_cast<size_t>(k * count + t)] = inter[static_cast<size_t>(t * c + k)];
      }
    }
  }
  return Status::OK();
}

Status DecodeFramesInt16(const uint8_t* data, size_t size, int64_t start, int64_t count,
                         std::vector<int16_t>* out, AudioInfo* info) {
  Memory mem{data, static_cast<sf_count_t>(size), 0};
  std::unique_ptr<SNDFILE, Closer> f;
  int format = 0;
  NOSTALL_RETURN_IF_ERROR(Open(&mem, &f, info, &format));
  if (count < 0) return InvalidArgument("negative frame count");
  return ReadRange(f.get(), *info, format, start, count,
                   [](SNDFILE* s, int16_t* p, sf_count_t n) { return sf_readf_short(s, p, n); }, out);
}

}  // namespace nostall::audio
