// Audio decoding (decode.h): WAV over libsndfile's virtual I/O; FLAC, Ogg
// Vorbis, Ogg Opus and MP3 through libFLAC, libvorbisfile, libopusfile and
// libmpg123 themselves. The file's bytes stay where the fetcher put them.
#include "audio/decode.h"

#include <FLAC/stream_decoder.h>
#include <mpg123.h>
#include <opusfile.h>
#include <vorbis/vorbisfile.h>
#include <sndfile.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

namespace nostall::audio {
namespace {

// The file as the decoders read it: `size` bytes, the first `have` of them
// at `data`; with `file`, the rest read a block at a time where the decoder
// reads (its seeks and the crop's frames), else have == size.
struct Memory {
  const uint8_t* data;
  sf_count_t size;
  sf_count_t pos;
  sf_count_t have;
  const ItemFile* file = nullptr;
  std::vector<uint8_t> block;  // file's bytes [block_at, block_at + block.size())
  sf_count_t block_at = -1;
  std::vector<uint8_t> whole;  // the rest read at once (a decoder that takes the bytes whole)
  Status error;                // the first failed read
};
constexpr sf_count_t kFileBlock = 64 << 10;

Memory AtHand(const uint8_t* data, size_t size) {
  const auto n = static_cast<sf_count_t>(size);
  return Memory{data, n, 0, n};
}

sf_count_t MemorySeek(sf_count_t offset, int whence, void* user) {
  Memory* m = static_cast<Memory*>(user);
  sf_count_t to = offset;
  if (whence == SEEK_CUR) to = m->pos + offset;
  if (whence == SEEK_END) to = m->size + offset;
  if (to < 0 || to > m->size) return -1;
  m->pos = to;
  return m->pos;
}

// The block of the file that holds byte `at` (past the bytes at hand).
bool LoadBlock(Memory* m, sf_count_t at) {
  if (m->block_at >= 0 && at >= m->block_at && at < m->block_at + static_cast<sf_count_t>(m->block.size())) {
    return true;
  }
  const sf_count_t from = at - at % kFileBlock, n = std::min(kFileBlock, m->size - from);
  m->block.resize(static_cast<size_t>(n));
  Status st = m->file->ReadAt(static_cast<uint64_t>(from), static_cast<size_t>(n), m->block.data());
  if (!st.ok()) {
    if (m->error.ok()) m->error = st;
    m->block_at = -1;
    return false;
  }
  m->block_at = from;
  return true;
}

sf_count_t MemoryRead(void* ptr, sf_count_t count, void* user) {
  Memory* m = static_cast<Memory*>(user);
  auto* out = static_cast<uint8_t*>(ptr);
  sf_count_t done = 0;
  count = std::max<sf_count_t>(0, std::min(count, m->size - m->pos));
  while (done < count) {
    sf_count_t n;
    if (m->pos < m->have) {
      n = std::min(count - done, m->have - m->pos);
      std::memcpy(out + done, m->data + m->pos, static_cast<size_t>(n));
    } else {
      if (!LoadBlock(m, m->pos)) break;
      const sf_count_t in = m->pos - m->block_at;
      n = std::min(count - done, static_cast<sf_count_t>(m->block.size()) - in);
      std::memcpy(out + done, m->block.data() + in, static_cast<size_t>(n));
    }
    done += n;
    m->pos += n;
  }
  return done;
}

// All of the file at hand (a decoder that takes its bytes whole).
Status Materialize(Memory* m) {
  if (m->have == m->size) return Status::OK();
  if (static_cast<uint64_t>(m->size) > m->file->whole_limit()) {
    return DataError("file is " + std::to_string(m->size) + " bytes, over the " +
                     std::to_string(m->file->whole_limit()) + "-byte item limit (this format is read whole)");
  }
  m->whole.resize(static_cast<size_t>(m->size));
  std::memcpy(m->whole.data(), m->data, static_cast<size_t>(m->have));
  NOSTALL_RETURN_IF_ERROR(m->file->ReadAt(static_cast<uint64_t>(m->have), static_cast<size_t>(m->size - m->have),
                                          m->whole.data() + m->have));
  m->data = m->whole.data();
  m->have = m->size;
  return Status::OK();
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
  // As libsndfile gives a float source as shorts: x * 32767, rounded (the
  // decoders whose output is float; libsndfile's own and FLAC's override).
  virtual int64_t ReadShort(int16_t* out, int64_t n) {
    const int c = channels();
    floats_.resize(static_cast<size_t>(n) * c);
    const int64_t got = ReadFloat(floats_.data(), n);
    for (int64_t i = 0; i < got * c; ++i) {
      out[i] = static_cast<int16_t>(std::lrintf(std::clamp(floats_[static_cast<size_t>(i)], -1.0f, 1.0f) * 32767.0f));
    }
    return got;
  }
  int channels() const { return channels_; }
  // Why the last read stopped short ("" when it did not fail).
  virtual std::string Error() { return error_; }
  // The next frame a read gives (a seek is skipped when already there).
  int64_t position() const { return position_; }
  void Advanced(int64_t to) { position_ = to; }

 protected:
  int64_t position_ = 0;
  int channels_ = 1;
  std::string error_;

 private:
  std::vector<float> floats_;
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
    channels_ = sfi.channels;
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

 private:
  static ssize_t ReadCb(void* user, void* ptr, size_t n) {
    return static_cast<ssize_t>(MemoryRead(ptr, static_cast<sf_count_t>(n), user));
  }
  static off_t SeekCb(void* user, off_t offset, int whence) {
    return static_cast<off_t>(MemorySeek(offset, whence, user));
  }
  mpg123_handle* h_ = nullptr;
};

// FLAC through libFLAC itself: libsndfile's FLAC path converts sample by
// sample through its own buffers (1 s at 44.1 kHz: 0.58 ms there, 0.50 ms here).
// Integers scale to float as libsndfile's do (x / 2^(bits-1)).
class FlacReader : public Reader {
 public:
  ~FlacReader() override {
    if (d_ != nullptr) FLAC__stream_decoder_delete(d_);
  }
  Status Open(Memory* mem, AudioInfo* info) {
    mem_ = mem;
    d_ = FLAC__stream_decoder_new();
    if (d_ == nullptr) return Internal("libFLAC: out of memory");
    FLAC__stream_decoder_set_md5_checking(d_, false);
    if (FLAC__stream_decoder_init_stream(d_, ReadCb, SeekCb, TellCb, LengthCb, EofCb, WriteCb, MetadataCb, ErrorCb,
                                         this) != FLAC__STREAM_DECODER_INIT_STATUS_OK) {
      return DataError("libFLAC cannot decode this stream");
    }
    if (!FLAC__stream_decoder_process_until_end_of_metadata(d_) || !have_info_) {
      return DataError(std::string("not a FLAC stream libFLAC reads") + (error_.empty() ? "" : ": " + error_));
    }
    if (bits_ < 4 || bits_ > 32) return DataError("FLAC stream of " + std::to_string(bits_) + "-bit samples");
    // A header of 0 total samples means "unknown" (streaming encoders write
    // it): the length is counted by decoding to the end once, then the
    // stream is read from its start as any other.
    if (frames_ == 0) NOSTALL_RETURN_IF_ERROR(CountFrames());
    info->frames = frames_;
    info->sample_rate = rate_;
    info->channels = channels_;
    info->format = "FLAC";
    return Status::OK();
  }
  Status Seek(int64_t frame) override {
    pending_.clear();
    at_ = 0;
    if (!FLAC__stream_decoder_seek_absolute(d_, static_cast<FLAC__uint64>(frame))) {
      FLAC__stream_decoder_flush(d_);
      return DataError("cannot seek to frame " + std::to_string(frame) + " of the FLAC stream" +
                       (error_.empty() ? "" : " (" + error_ + ")"));
    }
    return Status::OK();
  }
  int64_t ReadFloat(float* out, int64_t n) override {
    int64_t got = 0;
    while (got < n) {
      if (at_ == pending_.size()) {
        pending_.clear();
        at_ = 0;
        if (FLAC__stream_decoder_get_state(d_) == FLAC__STREAM_DECODER_END_OF_STREAM) break;
        if (!FLAC__stream_decoder_process_single(d_) || !error_.empty()) break;
        if (pending_.empty()) {
          if (FLAC__stream_decoder_get_state(d_) == FLAC__STREAM_DECODER_END_OF_STREAM) break;
          continue;
        }
      }
      const int64_t take = std::min<int64_t>(n - got, static_cast<int64_t>((pending_.size() - at_) / channels_));
      std::copy(pending_.begin() + static_cast<int64_t>(at_), pending_.begin() + static_cast<int64_t>(at_) + take * channels_,
                out + got * channels_);
      at_ += static_cast<size_t>(take * channels_);
      got += take;
    }
    return got;
  }
  int64_t ReadShort(int16_t* out, int64_t n) override {
    // As libsndfile gives FLAC as shorts: the top 16 bits.
    tmp_.resize(static_cast<size_t>(n) * channels_);
    const int64_t got = ReadFloat(tmp_.data(), n);
    for (int64_t i = 0; i < got * channels_; ++i) {
      out[i] = static_cast<int16_t>(std::clamp(std::floor(tmp_[static_cast<size_t>(i)] * 32768.0f), -32768.0f, 32767.0f));
    }
    return got;
  }

 private:
  static FLAC__StreamDecoderReadStatus ReadCb(const FLAC__StreamDecoder*, FLAC__byte buffer[], size_t* bytes, void* c) {
    FlacReader* r = static_cast<FlacReader*>(c);
    *bytes = static_cast<size_t>(MemoryRead(buffer, static_cast<sf_count_t>(*bytes), r->mem_));
    return *bytes == 0 ? FLAC__STREAM_DECODER_READ_STATUS_END_OF_STREAM : FLAC__STREAM_DECODER_READ_STATUS_CONTINUE;
  }
  static FLAC__StreamDecoderSeekStatus SeekCb(const FLAC__StreamDecoder*, FLAC__uint64 to, void* c) {
    FlacReader* r = static_cast<FlacReader*>(c);
    return MemorySeek(static_cast<sf_count_t>(to), SEEK_SET, r->mem_) < 0 ? FLAC__STREAM_DECODER_SEEK_STATUS_ERROR
                                                                          : FLAC__STREAM_DECODER_SEEK_STATUS_OK;
  }
  static FLAC__StreamDecoderTellStatus TellCb(const FLAC__StreamDecoder*, FLAC__uint64* at, void* c) {
    *at = static_cast<FLAC__uint64>(static_cast<FlacReader*>(c)->mem_->pos);
    return FLAC__STREAM_DECODER_TELL_STATUS_OK;
  }
  static FLAC__StreamDecoderLengthStatus LengthCb(const FLAC__StreamDecoder*, FLAC__uint64* n, void* c) {
    *n = static_cast<FLAC__uint64>(static_cast<FlacReader*>(c)->mem_->size);
    return FLAC__STREAM_DECODER_LENGTH_STATUS_OK;
  }
  Status CountFrames() {
    counting_ = true;
    const bool ok = FLAC__stream_decoder_process_until_end_of_stream(d_) != 0;
    counting_ = false;
    if (!ok || !error_.empty()) {
      return DataError("a FLAC stream of unknown length that cannot be decoded to its end" +
                       (error_.empty() ? std::string() : ": " + error_));
    }
    if (counted_ == 0) return DataError("a FLAC stream that holds no samples");
    const int64_t counted = counted_;
    if (!FLAC__stream_decoder_reset(d_) || !FLAC__stream_decoder_process_until_end_of_metadata(d_)) {
      return DataError("cannot read the FLAC stream again from its start");
    }
    frames_ = counted;  // (the STREAMINFO read again said 0)
    return Status::OK();
  }
  static FLAC__bool EofCb(const FLAC__StreamDecoder*, void* c) {
    const Memory* m = static_cast<FlacReader*>(c)->mem_;
    return m->pos >= m->size;
  }
  static FLAC__StreamDecoderWriteStatus WriteCb(const FLAC__StreamDecoder*, const FLAC__Frame* frame,
                                                const FLAC__int32* const buffer[], void* c) {
    FlacReader* r = static_cast<FlacReader*>(c);
    const unsigned n = frame->header.blocksize, ch = frame->header.channels;
    if (static_cast<int>(ch) != r->channels_ || frame->header.bits_per_sample != static_cast<unsigned>(r->bits_)) {
      r->error_ = "a FLAC frame's channels or sample size differ from the stream's";
      return FLAC__STREAM_DECODER_WRITE_STATUS_ABORT;
    }
    if (r->counting_) {
      r->counted_ += n;
      return FLAC__STREAM_DECODER_WRITE_STATUS_CONTINUE;
    }
    const float scale = 1.0f / static_cast<float>(int64_t{1} << (r->bits_ - 1));
    const size_t base = r->pending_.size();
    r->pending_.resize(base + static_cast<size_t>(n) * ch);
    float* out = r->pending_.data() + base;
    for (unsigned k = 0; k < ch; ++k) {
      const FLAC__int32* in = buffer[k];
      for (unsigned t = 0; t < n; ++t) out[t * ch + k] = static_cast<float>(in[t]) * scale;
    }
    return FLAC__STREAM_DECODER_WRITE_STATUS_CONTINUE;
  }
  static void MetadataCb(const FLAC__StreamDecoder*, const FLAC__StreamMetadata* m, void* c) {
    FlacReader* r = static_cast<FlacReader*>(c);
    if (m->type != FLAC__METADATA_TYPE_STREAMINFO) return;
    r->have_info_ = true;
    r->frames_ = static_cast<int64_t>(m->data.stream_info.total_samples);
    r->rate_ = static_cast<int>(m->data.stream_info.sample_rate);
    r->channels_ = static_cast<int>(m->data.stream_info.channels);
    r->bits_ = static_cast<int>(m->data.stream_info.bits_per_sample);
  }
  static void ErrorCb(const FLAC__StreamDecoder*, FLAC__StreamDecoderErrorStatus status, void* c) {
    static_cast<FlacReader*>(c)->error_ = FLAC__StreamDecoderErrorStatusString[status];
  }

  Memory* mem_ = nullptr;
  FLAC__StreamDecoder* d_ = nullptr;
  bool have_info_ = false;
  int64_t frames_ = 0;
  bool counting_ = false;  // CountFrames: frames are counted, not kept
  int64_t counted_ = 0;
  int rate_ = 0, bits_ = 16;
  std::vector<float> pending_, tmp_;
  size_t at_ = 0;
};

// Ogg Vorbis through libvorbisfile (see Open for why not libsndfile);
// floats as libsndfile gives them, to rounding (ov_read_float).
class VorbisReader : public Reader {
 public:
  ~VorbisReader() override {
    if (open_) ov_clear(&vf_);
  }
  Status Open(Memory* mem, AudioInfo* info) {
    const ov_callbacks cb = {ReadCb, SeekCb, nullptr, TellCb};
    const int r = ov_open_callbacks(mem, &vf_, nullptr, 0, cb);
    if (r != 0) {
      // It clears itself on most failures, not all (a corrupt second
      // header left its serial number list: found by audio_fuzz); ov_clear
      // of a cleared file (all zero) does nothing.
      ov_clear(&vf_);
      return DataError("not an Ogg Vorbis stream libvorbisfile reads (error " + std::to_string(r) + ")");
    }
    open_ = true;
    const vorbis_info* vi = ov_info(&vf_, -1);
    const ogg_int64_t total = ov_pcm_total(&vf_, -1);
    if (vi == nullptr || total < 0) return DataError("Ogg Vorbis stream of unknown length");
    channels_ = vi->channels;
    rate_ = vi->rate;
    info->frames = total;
    info->sample_rate = static_cast<int>(std::clamp<long>(vi->rate, 0, 1 << 30));
    info->channels = channels_;
    info->format = "OGG/VORBIS";
    return Status::OK();
  }
  Status Seek(int64_t frame) override {
    if (ov_pcm_seek(&vf_, frame) != 0) return DataError("cannot seek to frame " + std::to_string(frame));
    return Status::OK();
  }
  int64_t ReadFloat(float* out, int64_t n) override {
    int64_t got = 0;
    while (got < n) {
      float** pcm = nullptr;
      int link = 0;
      const long r = ov_read_float(&vf_, &pcm, static_cast<int>(std::min<int64_t>(n - got, 1 << 20)), &link);
      if (r == OV_HOLE) continue;  // a gap in the stream: what follows still decodes
      if (r < 0) {
        error_ = "corrupt Ogg Vorbis data (error " + std::to_string(r) + ")";
        break;
      }
      if (r == 0) break;
      const vorbis_info* vi = ov_info(&vf_, link);
      if (vi == nullptr || vi->channels != channels_ || vi->rate != rate_) {
        error_ = "a chained Ogg stream changes its channels or rate";
        break;
      }
      for (long t = 0; t < r; ++t) {
        for (int k = 0; k < channels_; ++k) out[(got + t) * channels_ + k] = pcm[k][t];
      }
      got += r;
    }
    return got;
  }

 private:
  static size_t ReadCb(void* ptr, size_t size, size_t count, void* user) {
    if (size == 0) return 0;
    return static_cast<size_t>(MemoryRead(ptr, static_cast<sf_count_t>(size * count), user)) / size;
  }
  static int SeekCb(void* user, ogg_int64_t offset, int whence) {
    return MemorySeek(static_cast<sf_count_t>(offset), whence, user) < 0 ? -1 : 0;
  }
  static long TellCb(void* user) { return static_cast<long>(static_cast<Memory*>(user)->pos); }
  OggVorbis_File vf_{};
  bool open_ = false;
  long rate_ = 0;
};

// Ogg Opus through libopusfile: decoded at 48 kHz (as every Opus decoder
// gives it), channels as the stream has them.
class OpusReader : public Reader {
 public:
  ~OpusReader() override {
    if (of_ != nullptr) op_free(of_);
  }
  Status Open(Memory* mem, AudioInfo* info) {
    int err = 0;
    NOSTALL_RETURN_IF_ERROR(Materialize(mem));
    of_ = op_open_memory(mem->data, static_cast<size_t>(mem->size), &err);
    if (of_ == nullptr) return DataError("not an Ogg Opus stream libopusfile reads (error " + std::to_string(err) + ")");
    const ogg_int64_t total = op_pcm_total(of_, -1);
    if (total < 0) return DataError("Ogg Opus stream of unknown length");
    channels_ = op_channel_count(of_, -1);
    info->frames = total;
    info->sample_rate = 48000;
    info->channels = channels_;
    info->format = "OGG/OPUS";
    return Status::OK();
  }
  Status Seek(int64_t frame) override {
    if (op_pcm_seek(of_, frame) != 0) return DataError("cannot seek to frame " + std::to_string(frame));
    return Status::OK();
  }
  int64_t ReadFloat(float* out, int64_t n) override {
    int64_t got = 0;
    while (got < n) {
      int link = 0;
      const int r = op_read_float(of_, out + got * channels_,
                                  static_cast<int>(std::min<int64_t>(n - got, 1 << 20) * channels_), &link);
      if (r == OP_HOLE) continue;
      if (r < 0) {
        error_ = "corrupt Ogg Opus data (error " + std::to_string(r) + ")";
        break;
      }
      if (r == 0) break;
      if (op_channel_count(of_, link) != channels_) {
        error_ = "a chained Ogg stream changes its channels";
        break;
      }
      got += r;
    }
    return got;
  }

 private:
  OggOpusFile* of_ = nullptr;
};

// An Ogg stream (its codec said by its first packet: Vorbis, Opus).
bool IsOgg(const uint8_t* data, size_t size) { return size >= 4 && std::memcmp(data, "OggS", 4) == 0; }
bool OggCodecIs(const uint8_t* data, size_t size, const char* magic, size_t n) {
  return size >= 28 + n && std::memcmp(data + 28, magic, n) == 0;
}

// An MP3 stream: an ID3v2 tag or an MPEG audio frame sync first.
bool LooksLikeMp3(const uint8_t* data, size_t size) {
  if (size >= 3 && std::memcmp(data, "ID3", 3) == 0) return true;
  return size >= 2 && data[0] == 0xFF && (data[1] & 0xE0) == 0xE0;
}

// Opens the bytes with the reader for their format; *info from the header.
Status Open(Memory* mem, std::unique_ptr<Reader>* out, AudioInfo* info) {
  if (mem->size == 0) return DataError("empty audio file (zero bytes)");
  if (mem->size >= 4 && std::memcmp(mem->data, "fLaC", 4) == 0) {
    auto r = std::make_unique<FlacReader>();
    NOSTALL_RETURN_IF_ERROR(r->Open(mem, info));
    *out = std::move(r);
  } else if (IsOgg(mem->data, static_cast<size_t>(mem->size))) {
    // Never libsndfile for Ogg: 1.2.0 leaks a Vorbis codec setup (~5.7 KB)
    // on every Ogg stream that fails to open (audio_fuzz found it).
    const size_t size = static_cast<size_t>(mem->size);
    if (OggCodecIs(mem->data, size, "\x01vorbis", 7)) {
      auto r = std::make_unique<VorbisReader>();
      NOSTALL_RETURN_IF_ERROR(r->Open(mem, info));
      *out = std::move(r);
    } else if (OggCodecIs(mem->data, size, "OpusHead", 8)) {
      auto r = std::make_unique<OpusReader>();
      NOSTALL_RETURN_IF_ERROR(r->Open(mem, info));
      *out = std::move(r);
    } else {
      return DataError("an Ogg stream of neither Vorbis nor Opus (or a corrupt first page)");
    }
  } else if (LooksLikeMp3(mem->data, static_cast<size_t>(mem->size))) {
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
  if (info->frames == 0) return DataError("the audio holds no samples");  // not a clip of silence
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
  if (from != r->position()) NOSTALL_RETURN_IF_ERROR(r->Seek(from));
  T* dst = buf->data() + (from - start) * info.channels;
  int64_t got = 0;
  while (got < to - from) {
    const int64_t n = read(r, dst + got * info.channels, to - from - got);
    if (n <= 0) break;
    got += n;
  }
  r->Advanced(from + got);
  if (got < to - from) {
    const std::string err = r->Error();
    return DataError("audio data ends at frame " + std::to_string(from + got) + " of the " +
                     std::to_string(info.frames) + " its header promises (truncated or corrupt" +
                     (err.empty() ? std::string() : ": " + err) + ")");
  }
  return Status::OK();
}


// Interleaved frames to planar rows (or their mean, `mono`).
void Deinterleave(const std::vector<float>& inter, int c, int64_t count, bool mono, std::vector<float>* out) {
  const int rows = mono ? 1 : c;
  out->assign(static_cast<size_t>(rows) * static_cast<size_t>(count), 0.0f);
  if (mono && c == 1) {
    std::copy(inter.begin(), inter.begin() + count, out->begin());
  } else if (mono) {
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
}

}  // namespace

struct AudioFile::Impl {
  Memory mem = AtHand(nullptr, 0);
  std::unique_ptr<Reader> reader;
  std::vector<float> inter;
};

AudioFile::AudioFile() : impl_(std::make_unique<Impl>()) {}
AudioFile::~AudioFile() = default;

Status AudioFile::Open(const uint8_t* data, size_t size, const ItemFile* file) {
  impl_->reader.reset();
  impl_->mem = AtHand(data, size);
  if (file != nullptr && file->size() > size) {
    impl_->mem.size = static_cast<sf_count_t>(file->size());
    impl_->mem.file = file;
  }
  Status st = nostall::audio::Open(&impl_->mem, &impl_->reader, &info_);
  return impl_->mem.error.ok() ? st : impl_->mem.error;
}

Status AudioFile::Decode(int64_t start, int64_t count, bool mono, std::vector<float>* out) {
  if (!impl_->reader) return FailedPrecondition("the audio file is not open");
  if (count < 0) return InvalidArgument("negative frame count");
  Status st = ReadRange(impl_->reader.get(), info_, start, count,
                        [](Reader* rd, float* p, int64_t n) { return rd->ReadFloat(p, n); }, &impl_->inter);
  // (A file that changed while it was read: that, not what the decoder made of it.)
  if (!impl_->mem.error.ok()) return impl_->mem.error;
  NOSTALL_RETURN_IF_ERROR(st);
  Deinterleave(impl_->inter, info_.channels, count, mono, out);
  return Status::OK();
}

Status ProbeAudio(const uint8_t* data, size_t size, AudioInfo* info) {
  AudioFile f;
  NOSTALL_RETURN_IF_ERROR(f.Open(data, size));
  *info = f.info();
  return Status::OK();
}

Status DecodeFrames(const uint8_t* data, size_t size, int64_t start, int64_t count, bool mono,
                    std::vector<float>* out, AudioInfo* info) {
  AudioFile f;
  NOSTALL_RETURN_IF_ERROR(f.Open(data, size));
  *info = f.info();
  return f.Decode(start, count, mono, out);
}

Status DecodeFramesInt16(const uint8_t* data, size_t size, int64_t start, int64_t count,
                         std::vector<int16_t>* out, AudioInfo* info) {
  Memory mem = AtHand(data, size);
  std::unique_ptr<Reader> r;
  NOSTALL_RETURN_IF_ERROR(Open(&mem, &r, info));
  if (count < 0) return InvalidArgument("negative frame count");
  return ReadRange(r.get(), *info, start, count,
                   [](Reader* rd, int16_t* p, int64_t n) { return rd->ReadShort(p, n); }, out);
}

}  // namespace nostall::audio
