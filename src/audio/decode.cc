// Audio decoding (decode.h) over libsndfile's virtual I/O, and libmpg123's
// for MP3: the file's bytes stay where the fetcher put them.
#include "audio/decode.h"

#include <mpg123.h>
#include <sndfile.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

namespace nostall::audio {
namespace {

struct Memory {
  const uint8_t* data;
  sf_count_t size;
  sf_count_t pos;
};

sf_count_t MemorySeek(sf_count_t offset, int whence, void* user) {
  Memory* m = static_cast<Memory*>(user);
  sf_count_t to = offset;
  if (whence == SEEK_CUR) to = m->pos + offset;
  if (whence == SEEK_END) to = m->size + offset;
  if (to < 0 || to > m->size) return -1;
  m->pos = to;
  return m->pos;
}

sf_count_t MemoryRead(void* ptr, sf_count_t count, void* user) {
  Memory* m = static_cast<Memory*>(user);
  const sf_count_t n = std::max<sf_count_t>(0, std::min(count, m->size - m->pos));
  if (n > 0) std::memcpy(ptr, m->data + m->pos, static_cast<size_t>(n));
  m->pos += n;
  return n;
}

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

// One open file: its header, a seek, and reads of interleaved frames.
class Reader {
 public:
  virtual ~Reader() = default;
  virtual Status Seek(int64_t frame) = 0;
  // Up to n frames into `out`; 0 at the end or on an error.
  virtual int64_t ReadFloat(float* out, int64_t n) = 0;
  virtual int64_t ReadShort(int16_t* out, int64_t n) = 0;
  virtual std::string Error() = 0;
};

class SndfileReader : public Reader {
 public:
  Status Open(Memory* mem, AudioInfo* info) {
    static SF_VIRTUAL_IO io = {VioLength, VioSeek, VioRead, VioWrite, VioTell};
    SF_INFO sfi;
    std::memset(&sfi, 0, sizeof sfi);
    SNDFILE* f = sf_open_virtual(&io, SFM_READ, &sfi, mem);
    if (f == nullptr) {
      return DataError(std::string("not an audio file libsndfile reads (WAV, FLAC, MP3, Ogg Vorbis, Opus): ") +
                       sf_strerror(nullptr));
    }
    f_.reset(f);
    // Integer PCM read as float is x / 2^(bits-1) (libsndfile's default).
    sf_command(f, SFC_SET_NORM_FLOAT, nullptr, SF_TRUE);
    info->frames = sfi.frames;
    info->sample_rate = sfi.samplerate;
    info->channels = sfi.channels;
    info->format = FormatName(sfi.format);
    return Status::OK();
  }
  Status Seek(int64_t frame) override {
    if (sf_seek(f_.get(), frame, SEEK_SET) != frame) {
      return DataError("cannot seek to frame " + std::to_string(frame) + " (" + sf_strerror(f_.get()) + ")");
    }
    return Status::OK();
  }
  int64_t ReadFloat(float* out, int64_t n) override { return sf_readf_float(f_.get(), out, n); }
  int64_t ReadShort(int16_t* out, int64_t n) override { return sf_readf_short(f_.get(), out, n); }
  std::string Error() override { return sf_error(f_.get()) != 0 ? sf_strerror(f_.get()) : ""; }

 private:
  static sf_count_t VioLength(void* user) { return static_cast<Memory*>(user)->size; }
  static sf_count_t VioSeek(sf_count_t offset, int whence, void* user) { return MemorySeek(offset, whence, user); }
  static sf_count_t VioRead(void* ptr, sf_count_t count, void* user) { return MemoryRead(ptr, count, user); }
  static sf_count_t VioWrite(const void*, sf_count_t, void*) { return 0; }
  static sf_count_t VioTell(void* user) { return static_cast<Memory*>(user)->pos; }
  std::unique_ptr<SNDFILE, Closer> f_;
};

// MP3 through libmpg123 itself (the library libsndfile decodes MP3 with),
// quiet: a seek into a stream decodes a frame or two without their bit
// reservoir (their output is dropped), which libsndfile's use of it reports
// on stderr; and scanned, so the length is exact rather than estimated.
class Mp3Reader : public Reader {
 public:
  ~Mp3Reader() override {
    if (h_ != nullptr) {
      mpg123_close(h_);
      mpg123_delete(h_);
    }
  }
  Status Open(Memory* mem, AudioInfo* info) {
    int err = MPG123_OK;
    h_ = mpg123_new(nullptr, &err);
    if (h_ == nullptr) return Internal(std::string("libmpg123: ") + mpg123_plain_strerror(err));
    mpg123_param(h_, MPG123_FLAGS, MPG123_QUIET | MPG123_GAPLESS | MPG123_FORCE_FLOAT, 0.0);
    mpg123_format_none(h_);
    const long* rates = nullptr;
    size_t count = 0;
    mpg123_rates(&rates, &count);
    for (size_t i = 0; i < count; ++i) mpg123_format(h_, rates[i], MPG123_MONO | MPG123_STEREO, MPG123_ENC_FLOAT_32);
    mpg123_replace_reader_handle(h_, ReadCb, SeekCb, nullptr);
    long rate = 0;
    int enc = 0;
    if (mpg123_open_handle(h_, mem) != MPG123_OK || mpg123_getformat(h_, &rate, &channels_, &enc) != MPG123_OK) {
      return DataError(std::string("not an MP3 file libmpg123 reads: ") + mpg123_strerror(h_));
    }
    if (mpg123_scan(h_) != MPG123_OK) return DataError(std::string("MP3 stream: ") + mpg123_strerror(h_));
    const off_t frames = mpg123_length(h_);
    if (frames < 0) return DataError("MP3 stream of unknown length");
    info->frames = frames;
    info->sample_rate = static_cast<int>(rate);
    info->channels = channels_;
    info->format = "MP3";
    return Status::OK();
  }
  Status Seek(int64_t frame) override {
    if (mpg123_seek(h_, static_cast<off_t>(frame), SEEK_SET) != frame) {
      return DataError("cannot seek to frame " + std::to_string(frame) + " (" + mpg123_strerror(h_) + ")");
    }
    return Status::OK();
  }
  int64_t ReadFloat(float* out, int64_t n) override {
    size_t done = 0;
    const int r = mpg123_read(h_, reinterpret_cast<unsigned char*>(out),
                              static_cast<size_t>(n) * channels_ * sizeof(float), &done);
    if (r != MPG123_OK && r != MPG123_DONE && r != MPG123_NEW_FORMAT) error_ = mpg123_strerror(h_);
    return static_cast<int64_t>(done / (sizeof(float) * channels_));
  }
  int64_t ReadShort(int16_t* out, int64_t n) override {
    // As libsndfile gives a float source as shorts: x * 32767, rounded.
    tmp_.resize(static_cast<size_t>(n) * channels_);
    const int64_t got = ReadFloat(tmp_.data(), n);
    for (int64_t i = 0; i < got * channels_; ++i) {
      out[i] = static_cast<int16_t>(std::lrintf(std::clamp(tmp_[static_cast<size_t>(i)], -1.0f, 1.0f) * 32767.0f));
    }
    return got;
  }
  std::string Error() override { return error_; }

 private:
  static ssize_t ReadCb(void* user, void* ptr, size_t n) {
    return static_cast<ssize_t>(MemoryRead(ptr, static_cast<sf_count_t>(n), user));
  }
  static off_t SeekCb(void* user, off_t offset, int whence) {
    return static_cast<off_t>(MemorySeek(offset, whence, user));
  }
  mpg123_handle* h_ = nullptr;
  int channels_ = 1;
  std::string error_;
  std::vector<float> tmp_;
};

// An MP3 stream: an ID3v2 tag or an MPEG audio frame sync first.
bool LooksLikeMp3(const uint8_t* data, size_t size) {
  if (size >= 3 && std::memcmp(data, "ID3", 3) == 0) return true;
  return size >= 2 && data[0] == 0xFF && (data[1] & 0xE0) == 0xE0;
}

// Opens the bytes with the reader for their format; *info from the header.
Status Open(Memory* mem, std::unique_ptr<Reader>* out, AudioInfo* info) {
  if (mem->size == 0) return DataError("empty audio file (zero bytes)");
  if (LooksLikeMp3(mem->data, static_cast<size_t>(mem->size))) {
    auto r = std::make_unique<Mp3Reader>();
    NOSTALL_RETURN_IF_ERROR(r->Open(mem, info));
    *out = std::move(r);
  } else {
    auto r = std::make_unique<SndfileReader>();
    NOSTALL_RETURN_IF_ERROR(r->Open(mem, info));
    *out = std::move(r);
  }
  if (info->channels < 1 || info->channels > 64) {
    return DataError("audio header gives " + std::to_string(info->channels) + " channels");
  }
  if (info->sample_rate < 1 || info->sample_rate > 768000) {
    return DataError("audio header gives a sample rate of " + std::to_string(info->sample_rate) + " Hz");
  }
  if (info->frames < 0) return DataError("audio header gives no length");
  return Status::OK();
}

// Frames [start, start + count) clamped to the file, read by `read` into
// `buf` (interleaved, zeros outside the file).
template <typename T, typename ReadFn>
Status ReadRange(Reader* r, const AudioInfo& info, int64_t start, int64_t count, ReadFn read,
                 std::vector<T>* buf) {
  buf->assign(static_cast<size_t>(count) * info.channels, T(0));
  const int64_t from = std::clamp<int64_t>(start, 0, info.frames);
  const int64_t to = std::clamp<int64_t>(start + count, 0, info.frames);
  if (to <= from) return Status::OK();
  if (from > 0) NOSTALL_RETURN_IF_ERROR(r->Seek(from));
  T* dst = buf->data() + (from - start) * info.channels;
  int64_t got = 0;
  while (got < to - from) {
    const int64_t n = read(r, dst + got * info.channels, to - from - got);
    if (n <= 0) break;
    got += n;
  }
  if (got < to - from) {
    const std::string err = r->Error();
    return DataError("audio data ends at frame " + std::to_string(from + got) + " of the " +
                     std::to_string(info.frames) + " its header promises (truncated or corrupt" +
                     (err.empty() ? std::string() : ": " + err) + ")");
  }
  return Status::OK();
}

}  // namespace

Status ProbeAudio(const uint8_t* data, size_t size, AudioInfo* info) {
  Memory mem{data, static_cast<sf_count_t>(size), 0};
  std::unique_ptr<Reader> r;
  return Open(&mem, &r, info);
}

Status DecodeFrames(const uint8_t* data, size_t size, int64_t start, int64_t count, bool mono,
                    std::vector<float>* out, AudioInfo* info) {
  Memory mem{data, static_cast<sf_count_t>(size), 0};
  std::unique_ptr<Reader> r;
  NOSTALL_RETURN_IF_ERROR(Open(&mem, &r, info));
  if (count < 0) return InvalidArgument("negative frame count");
  thread_local std::vector<float> inter;
  NOSTALL_RETURN_IF_ERROR(ReadRange(r.get(), *info, start, count,
                                    [](Reader* rd, float* p, int64_t n) { return rd->ReadFloat(p, n); }, &inter));
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
  std::unique_ptr<Reader> r;
  NOSTALL_RETURN_IF_ERROR(Open(&mem, &r, info));
  if (count < 0) return InvalidArgument("negative frame count");
  return ReadRange(r.get(), *info, start, count,
                   [](Reader* rd, int16_t* p, int64_t n) { return rd->ReadShort(p, n); }, out);
}

}  // namespace nostall::audio
