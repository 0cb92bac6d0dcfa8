// Video decoding with FFmpeg's libraries (video/backend.h): libavformat
// demuxes from memory, libavcodec decodes on the calling thread (the prep
// threads are the decoder's threads: no second pool), libswscale converts
// to RGB24 with the frame's own colour matrix and range.
#include "video/plugin/ffmpeg.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libavutil/log.h>
#include <libavutil/mathematics.h>
#include <libswresample/swresample.h>
#include <libswscale/swscale.h>
}

#include "video/plugin/io.h"
#include "video/plugin/orient.h"

namespace nostall::video {
namespace {

std::string AvError(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(err, buf, sizeof(buf));
  return buf;
}

// The first bytes of a file a scan keeps, to be told apart from another.
constexpr size_t kScanPrefix = 4096;

// A packet's presentation time (its decoding time where it has none).
int64_t PacketTime(const AVPacket* p) { return p->pts != AV_NOPTS_VALUE ? p->pts : p->dts; }

// A decoded frame's presentation time (the decoder's best effort, else its pts).
int64_t FrameTimestamp(const AVFrame* f) {
  return f->best_effort_timestamp != AV_NOPTS_VALUE ? f->best_effort_timestamp : f->pts;
}

// The stream's average frame rate, else its base rate (0/0 when it states none).
AVRational StreamRate(const AVStream* st) {
  return st->avg_frame_rate.num > 0 ? st->avg_frame_rate : st->r_frame_rate;
}

// The stream's display matrix (how its frames are turned to be shown), or
// null.
const int32_t* DisplayMatrix(const AVStream* st) {
#if LIBAVCODEC_VERSION_INT >= AV_VERSION_INT(60, 30, 100)  // FFmpeg 6.1: codecpar->coded_side_data
  const AVPacketSideData* sd = av_packet_side_data_get(st->codecpar->coded_side_data,
                                                       st->codecpar->nb_coded_side_data, AV_PKT_DATA_DISPLAYMATRIX);
  const uint8_t* data = sd != nullptr ? sd->data : nullptr;
  const size_t size = sd != nullptr ? sd->size : 0;
#else
  size_t size = 0;
  const uint8_t* data = av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, &size);
#endif
  return data != nullptr && size >= 9 * sizeof(int32_t) ? reinterpret_cast<const int32_t*>(data) : nullptr;
}

// A decoder for `st` (`what`: "video", "audio", for the errors), on the
// calling thread: the prep threads decode in parallel.
Status OpenCodec(const AVStream* st, const char* what, AVCodecContext** out) {
  const AVCodec* dec = avcodec_find_decoder(st->codecpar->codec_id);
  if (dec == nullptr) {
    return DataError(std::string("no decoder for its ") + what + " codec (" +
                     avcodec_get_name(st->codecpar->codec_id) + ")");
  }
  *out = avcodec_alloc_context3(dec);
  if (*out == nullptr) return ResourceExhausted(std::string("out of memory for the ") + what + " decoder");
  int err = avcodec_parameters_to_context(*out, st->codecpar);
  if (err < 0) return DataError(std::string("the ") + what + " stream's parameters: " + AvError(err));
  (*out)->thread_count = 1;
  (*out)->pkt_timebase = st->time_base;
  err = avcodec_open2(*out, dec, nullptr);
  if (err < 0) return DataError(std::string("the ") + what + " decoder does not open: " + AvError(err));
  return Status::OK();
}

// One packet as the scan saw it.
struct PacketMark {
  int64_t pts, dts;
  bool key;
};

// How a keyframe is sought: by its presentation time, by its decoding time
// (containers that seek by it: MPEG-TS), or not at all (decoding from the
// start); raised for the file when a seek lands past the keyframe.
enum SeekBy { kByPts, kByDts, kFromStart };

// What the scan of a file's packets found.
struct FfmpegScan final : Scanned {
  int stream = -1;
  std::vector<int64_t> pts;      // each frame's presentation time, ascending
  std::vector<size_t> key_at;    // per frame: the index in keys of the last keyframe at or before it
  std::vector<PacketMark> keys;  // keyframes, by presentation time
  // Frames numbered as they come out of the decoder from the start, as
  // FFmpeg's own program numbers them, where packets lack presentation
  // times (AVI with packed B-frames, raw streams): no seeks, no skipped frames.
  bool counted = false;
  int64_t audio_first = AV_NOPTS_VALUE;  // the audio stream's first packet's time
  // How this file's keyframes are sought: what the decoders that opened it
  // learned (they raise it; each starts where the last left it).
  mutable std::atomic<int> seek_by{kByPts};
};

class FfmpegDecoder final : public Decoder {
 public:
  explicit FfmpegDecoder(const Bytes& bytes) : bytes_(bytes) { mem_.bytes = &bytes_; }
  ~FfmpegDecoder() override {
    swr_free(&swr_);
    avcodec_free_context(&audio_);
    sws_freeContext(sws_);
    av_frame_free(&frame_);
    av_packet_free(&packet_);
    avcodec_free_context(&codec_);
    avformat_close_input(&fmt_);
    if (io_ != nullptr) av_freep(&io_->buffer);
    avio_context_free(&io_);
  }

  Status Open(std::shared_ptr<const Scanned> scanned);
  std::shared_ptr<const Scanned> scanned() const override { return scan_; }
  const StreamInfo& info() const override { return info_; }
  Status Decode(const int64_t* indices, int count, const FrameSink& sink, int64_t* decoded) override;
  double FrameTime(int64_t index) const override {
    return static_cast<double>(scan_->pts[static_cast<size_t>(index)]) * av_q2d(fmt_->streams[stream_]->time_base);
  }
  Status DecodeAudio(double start, int rate, int channels, int64_t count, float* dst) override;

 private:
  Status OpenAudio(int rate, int channels);
  Status AudioFrame(int64_t first, int64_t count, int64_t* at, int64_t* grid_next, float* dst);
  Status Resampled(const uint8_t** in, int n_in, int64_t first, int64_t count, int64_t* grid_next, float* dst);
  Status SeekAudio(int64_t ts);
  Status AudioWindow(int64_t first, int64_t count, float* dst, bool strict, bool* late);
  bool LateFrame(int64_t first) const;
  Status Scan();
  void Describe();
  Status ReadError(const std::string& what, int err) const;
  Status SeekTo(size_t key);
  Status SeekToStart();
  Status Convert(const FrameSink& sink, int k);
  Status Receive(const std::vector<int64_t>& want, int* k, const FrameSink& sink, int64_t* decoded);

  Bytes bytes_;
  Memory mem_;
  AVIOContext* io_ = nullptr;
  AVFormatContext* fmt_ = nullptr;
  AVCodecContext* codec_ = nullptr;
  AVPacket* packet_ = nullptr;
  AVFrame* frame_ = nullptr;
  SwsContext* sws_ = nullptr;
  int sws_format_ = -1, sws_space_ = -1, sws_full_ = -1;  // what sws_ was made and given for
  int stream_ = -1;
  StreamInfo info_;
  std::shared_ptr<const FfmpegScan> scan_;
  std::vector<uint8_t> rgb_;
  int coded_width_ = 0, coded_height_ = 0;  // the frames' size as decoded (info_'s is as shown)
  Orientation orient_;                      // how they are turned to be shown
  std::vector<uint8_t> shown_;              // a turned frame
  bool overshot_ = false;  // a frame came out after a wanted one that never did
  int seek_by_ = kByPts;  // (scan_->seek_by when opened)
  int64_t frame_number_ = 0;  // scan_->counted: the next frame's number
  // The audio (DecodeAudio): its stream (-1: none), decoder and resampler
  // (made for swr_rate_ and swr_channels_).
  int audio_stream_ = -1;
  AVCodecContext* audio_ = nullptr;
  SwrContext* swr_ = nullptr;
  int swr_rate_ = 0, swr_channels_ = 0;
  std::vector<float> audio_out_;  // a frame's resampled samples, planar
};

Status FfmpegDecoder::Open(std::shared_ptr<const Scanned> scanned) {
  constexpr int kIoBuffer = 1 << 16;
  auto* buffer = static_cast<uint8_t*>(av_malloc(kIoBuffer));
  if (buffer == nullptr) return ResourceExhausted("out of memory for the video's reader");
  io_ = avio_alloc_context(buffer, kIoBuffer, 0, &mem_, ReadPacket, nullptr, Seek);
  if (io_ == nullptr) {
    av_free(buffer);
    return ResourceExhausted("out of memory for the video's reader");
  }
  fmt_ = avformat_alloc_context();
  if (fmt_ == nullptr) return ResourceExhausted("out of memory for the video's demuxer");
  fmt_->pb = io_;
  fmt_->flags |= AVFMT_FLAG_CUSTOM_IO;
  int err = avformat_open_input(&fmt_, nullptr, nullptr, nullptr);
  if (err < 0 && !mem_.error.ok()) return mem_.error;
  if (err < 0) return DataError("not a video container FFmpeg reads (" + AvError(err) + ")");
  stream_ = av_find_best_stream(fmt_, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  if (stream_ < 0 && (fmt_->ctx_flags & AVFMTCTX_NOHEADER) != 0) {
    // Streams found only by reading packets (MPEG program streams): probe.
    avformat_find_stream_info(fmt_, nullptr);
    stream_ = av_find_best_stream(fmt_, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  }
  AVStream* st = stream_ >= 0 ? fmt_->streams[stream_] : nullptr;
  if (st != nullptr && (st->codecpar->width <= 0 || st->codecpar->format < 0)) {
    avformat_find_stream_info(fmt_, nullptr);  // headers alone do not say: probe
  }
  if (st == nullptr) return DataError("no video stream in the file");
  audio_stream_ = av_find_best_stream(fmt_, AVMEDIA_TYPE_AUDIO, -1, stream_, nullptr, 0);
  if (audio_stream_ >= 0) {
    const AVCodecParameters* a = fmt_->streams[audio_stream_]->codecpar;
    info_.audio_codec = avcodec_get_name(a->codec_id);
    info_.audio_rate = a->sample_rate;
    info_.audio_channels = a->ch_layout.nb_channels;
  } else {
    audio_stream_ = -1;
  }
  NOSTALL_RETURN_IF_ERROR(OpenCodec(st, "video", &codec_));
  packet_ = av_packet_alloc();
  frame_ = av_frame_alloc();
  if (packet_ == nullptr || frame_ == nullptr) return ResourceExhausted("out of memory for video frames");
  coded_width_ = st->codecpar->width;
  coded_height_ = st->codecpar->height;
  info_.codec = codec_->codec->name;
  if (coded_width_ <= 0 || coded_height_ <= 0 || coded_width_ > 16384 || coded_height_ > 16384 ||
      int64_t{coded_width_} * coded_height_ > int64_t{8192} * 8192) {
    return DataError("the video's frame size (" + std::to_string(coded_width_) + " x " +
                     std::to_string(coded_height_) + ") is not one nostall decodes");
  }
  orient_ = OrientationOf(DisplayMatrix(st));
  info_.rotation = orient_.degrees;
  info_.mirrored = orient_.mirrored;
  info_.width = orient_.transpose ? coded_height_ : coded_width_;
  info_.height = orient_.transpose ? coded_width_ : coded_height_;
  // A scan given for this file (the same stream, size and first bytes) is
  // taken; else the packets are read.
  auto given = std::dynamic_pointer_cast<const FfmpegScan>(scanned);
  const size_t prefix = std::min<size_t>(bytes_.have, kScanPrefix);
  if (given != nullptr && given->stream == stream_ && given->size == bytes_.size && given->prefix.size() == prefix &&
      std::equal(given->prefix.begin(), given->prefix.end(), bytes_.data)) {
    scan_ = std::move(given);
  } else {
    NOSTALL_RETURN_IF_ERROR(Scan());
  }
  Describe();
  return Status::OK();
}

// Every packet of the stream, read (not decoded) once: the frames'
// presentation times and the keyframes among them.
Status FfmpegDecoder::Scan() {
  auto scan = std::make_shared<FfmpegScan>();
  std::vector<PacketMark> marks;
  int64_t packets = 0;  // of the stream, read
  int err = 0;
  while ((err = av_read_frame(fmt_, packet_)) >= 0) {
    if (packet_->stream_index == audio_stream_ && audio_stream_ >= 0) {
      const int64_t t = PacketTime(packet_);
      if (t != AV_NOPTS_VALUE && (scan->audio_first == AV_NOPTS_VALUE || t < scan->audio_first)) scan->audio_first = t;
    }
    if (packet_->stream_index == stream_) {
      ++packets;
      if (packet_->pts == AV_NOPTS_VALUE) scan->counted = true;
      const int64_t pts = PacketTime(packet_);
      if (pts != AV_NOPTS_VALUE && (packet_->flags & AV_PKT_FLAG_DISCARD) == 0) {
        marks.push_back({pts, packet_->dts, (packet_->flags & AV_PKT_FLAG_KEY) != 0});
      }
    }
    av_packet_unref(packet_);
  }
  if (!mem_.error.ok()) return mem_.error;
  if (err != AVERROR_EOF && marks.empty()) return DataError("the video's packets do not read: " + AvError(err));
  if (marks.empty()) return DataError("the video stream has no frames");
  // An MP4 (MOV) header lists every sample: fewer in the file is a file cut short.
  const AVStream* st = fmt_->streams[stream_];
  if (std::strstr(fmt_->iformat->name, "mp4") != nullptr && st->nb_frames > packets) {
    return DataError("the video is cut short: its header lists " + std::to_string(st->nb_frames) +
                     " frames, the file holds " + std::to_string(packets));
  }
  std::sort(marks.begin(), marks.end(), [](const PacketMark& a, const PacketMark& b) { return a.pts < b.pts; });
  marks.erase(std::unique(marks.begin(), marks.end(),
                          [](const PacketMark& a, const PacketMark& b) { return a.pts == b.pts; }),
              marks.end());
  if (!marks.front().key) {
    // A stream whose first frame is not marked a keyframe (some AVI and
    // raw streams): decoding starts at the file's start.
    marks.front().key = true;
  }
  scan->pts.reserve(marks.size());
  scan->key_at.reserve(marks.size());
  for (const PacketMark& m : marks) {
    if (m.key) scan->keys.push_back(m);
    scan->pts.push_back(m.pts);
    scan->key_at.push_back(scan->keys.size() - 1);
  }
  const AVRational rate = StreamRate(st);
  if (scan->counted) {
    // The frames' times as their numbers at the stream's rate (the packets'
    // decoding times leave gaps where B-frames were packed).
    scan->seek_by = kFromStart;
    if (rate.num > 0 && rate.den > 0) {
      const int64_t first = scan->pts.front();
      for (size_t i = 0; i < scan->pts.size(); ++i) {
        scan->pts[i] = first + av_rescale_q(static_cast<int64_t>(i), av_inv_q(rate), st->time_base);
      }
    }
  }
  scan->stream = stream_;
  scan->size = bytes_.size;
  scan->prefix.assign(bytes_.data, bytes_.data + std::min<size_t>(bytes_.have, kScanPrefix));
  scan->bytes = sizeof(FfmpegScan) + scan->pts.size() * (sizeof(int64_t) + sizeof(size_t)) +
                scan->keys.size() * sizeof(PacketMark) + scan->prefix.size();
  scan_ = std::move(scan);
  return Status::OK();
}

// The stream's description from the scan (its own or the one given).
void FfmpegDecoder::Describe() {
  const AVStream* st = fmt_->streams[stream_];
  info_.frames = static_cast<int64_t>(scan_->pts.size());
  info_.keyframes = static_cast<int64_t>(scan_->keys.size());
  const AVRational rate = StreamRate(st);
  info_.fps = rate.num > 0 && rate.den > 0 ? av_q2d(rate) : 0;
  info_.duration = static_cast<double>(scan_->pts.back() - scan_->pts.front()) * av_q2d(st->time_base) +
                   (info_.fps > 0 ? 1.0 / info_.fps : 0);
  seek_by_ = scan_->seek_by.load(std::memory_order_relaxed);
}

// A libav call's failure: the file's read error where one stopped it.
Status FfmpegDecoder::ReadError(const std::string& what, int err) const {
  if (!mem_.error.ok()) return mem_.error;
  return DataError(what + AvError(err));
}

Status FfmpegDecoder::SeekTo(size_t key) {
  if (seek_by_ == kFromStart) return SeekToStart();
  const PacketMark& k = scan_->keys[key];
  const int64_t ts = seek_by_ == kByDts && k.dts != AV_NOPTS_VALUE ? k.dts : k.pts;
  if (av_seek_frame(fmt_, stream_, ts, AVSEEK_FLAG_BACKWARD) < 0) return SeekToStart();
  avcodec_flush_buffers(codec_);
  return Status::OK();
}

Status FfmpegDecoder::SeekToStart() {
  int err = av_seek_frame(fmt_, stream_, INT64_MIN, AVSEEK_FLAG_BACKWARD | AVSEEK_FLAG_ANY);
  if (err < 0 && (fmt_->iformat->flags & AVFMT_NO_BYTE_SEEK) == 0) {
    err = av_seek_frame(fmt_, stream_, 0, AVSEEK_FLAG_BYTE);
  }
  if (err < 0) return DataError("the video does not seek: " + AvError(err));
  avcodec_flush_buffers(codec_);
  frame_number_ = 0;
  return Status::OK();
}

Status FfmpegDecoder::Convert(const FrameSink& sink, int k) {
  const int w = frame_->width, h = frame_->height;
  if (w != coded_width_ || h != coded_height_) {
    return DataError("a frame's size (" + std::to_string(w) + " x " + std::to_string(h) +
                     ") differs from the stream's: nostall decodes videos of one frame size");
  }
  const auto fmt = static_cast<AVPixelFormat>(frame_->format);
  sws_ = sws_getCachedContext(sws_, w, h, fmt, w, h, AV_PIX_FMT_RGB24, SWS_BICUBIC, nullptr, nullptr, nullptr);
  if (sws_ == nullptr) return DataError("no conversion from the frames' pixel format to RGB");
  // The frame's own colour matrix and range (BT.601 when it states none),
  // set again when they or the pixel format (a new context: the frame size
  // is the stream's) change.
  const int space = frame_->colorspace != AVCOL_SPC_UNSPECIFIED ? frame_->colorspace : SWS_CS_DEFAULT;
  const int full = frame_->color_range == AVCOL_RANGE_JPEG ? 1 : 0;
  if (fmt != sws_format_ || space != sws_space_ || full != sws_full_) {
    sws_setColorspaceDetails(sws_, sws_getCoefficients(space), full, sws_getCoefficients(SWS_CS_DEFAULT), 1, 0,
                             1 << 16, 1 << 16);
    sws_format_ = fmt;
    sws_space_ = space;
    sws_full_ = full;
  }
  const size_t stride = static_cast<size_t>(w) * 3;
  rgb_.resize(stride * h + 32);  // + the resampler's one-pixel over-read
  uint8_t* dst[4] = {rgb_.data(), nullptr, nullptr, nullptr};
  int dst_stride[4] = {static_cast<int>(stride), 0, 0, 0};
  if (sws_scale(sws_, frame_->data, frame_->linesize, 0, h, dst, dst_stride) != h) {
    return DataError("a frame's conversion to RGB failed");
  }
  if (orient_.identity()) return sink(k, Frame{rgb_.data(), stride, w, h});
  const int shown_w = info_.width, shown_h = info_.height;
  const size_t shown_stride = static_cast<size_t>(shown_w) * 3;
  shown_.resize(shown_stride * shown_h + 32);  // + the resampler's one-pixel over-read
  Orient(orient_, rgb_.data(), stride, w, h, shown_.data(), shown_stride);
  return sink(k, Frame{shown_.data(), shown_stride, shown_w, shown_h});
}

// Frames out of the decoder: each wanted one (its time in `want`, from
// `*k` on) converted and handed over (several when an index repeats).
Status FfmpegDecoder::Receive(const std::vector<int64_t>& want, int* k, const FrameSink& sink, int64_t* decoded) {
  const int count = static_cast<int>(want.size());
  for (;;) {
    const int err = avcodec_receive_frame(codec_, frame_);
    if (err == AVERROR(EAGAIN) || err == AVERROR_EOF) return Status::OK();
    if (err < 0) return DataError("a frame does not decode: " + AvError(err));
    ++*decoded;
    const int64_t pts = scan_->counted ? frame_number_++ : FrameTimestamp(frame_);
    while (*k < count && want[*k] == pts) {
      NOSTALL_RETURN_IF_ERROR(Convert(sink, *k));
      ++*k;
    }
    if (*k < count && pts > want[*k]) overshot_ = true;  // the seek landed past it
    av_frame_unref(frame_);
  }
}

Status FfmpegDecoder::Decode(const int64_t* indices, int count, const FrameSink& sink, int64_t* decoded) {
  std::vector<int64_t> want(static_cast<size_t>(count));  // the wanted frames' times, ascending
  for (int i = 0; i < count; ++i) {
    if (indices[i] < 0 || indices[i] >= info_.frames || (i > 0 && indices[i] < indices[i - 1])) {
      return InvalidArgument("frame indices must be ascending, within the video's " +
                             std::to_string(info_.frames) + " frames");
    }
    want[i] = scan_->counted ? indices[i] : scan_->pts[indices[i]];
  }
  int64_t produced = 0;
  int k = 0;
  int64_t run_key = AV_NOPTS_VALUE;  // the last keyframe sent in this run of packets
  overshot_ = false;
  while (k < count) {
    if (overshot_ && seek_by_ != kFromStart) {
      // A container whose seek lands after the keyframe asked for (or where
      // no frame of it comes out): seek by the decoding time, then from the
      // start, for the rest of the file's life.
      ++seek_by_;
      scan_->seek_by.store(seek_by_, std::memory_order_relaxed);  // the next decoder of the file starts there
      overshot_ = false;
      run_key = AV_NOPTS_VALUE;
    }
    // Start (again) at the keyframe before the next wanted frame unless the
    // run under way has reached it: the frames between are not decoded.
    const PacketMark& key = scan_->keys[scan_->key_at[indices[k]]];
    if (run_key == AV_NOPTS_VALUE || key.pts > run_key) {
      NOSTALL_RETURN_IF_ERROR(SeekTo(scan_->key_at[indices[k]]));
      run_key = seek_by_ == kFromStart ? INT64_MAX : key.pts;
    }
    int err = av_read_frame(fmt_, packet_);
    if (err == AVERROR_EOF && !mem_.error.ok()) return mem_.error;
    if (err == AVERROR_EOF) {
      avcodec_send_packet(codec_, nullptr);  // drain
      NOSTALL_RETURN_IF_ERROR(Receive(want, &k, sink, &produced));
      if (k < count && seek_by_ != kFromStart) {
        overshot_ = true;
        continue;
      }
      if (k < count) {
        return DataError("the video ends before frame " + std::to_string(indices[k]) + " of its " +
                         std::to_string(info_.frames) + " (truncated?)");
      }
      break;
    }
    if (err < 0) return ReadError("the video's packets do not read: ", err);
    if (packet_->stream_index != stream_) {
      av_packet_unref(packet_);
      continue;
    }
    const int64_t pts = PacketTime(packet_);
    if ((packet_->flags & AV_PKT_FLAG_KEY) != 0 && pts != AV_NOPTS_VALUE) run_key = std::max(run_key, pts);
    // A frame no other frame refers to, and not wanted, is not decoded.
    const bool wanted = scan_->counted || std::binary_search(want.begin() + k, want.end(), pts);
    codec_->skip_frame = wanted ? AVDISCARD_DEFAULT : AVDISCARD_NONREF;
    err = avcodec_send_packet(codec_, packet_);
    av_packet_unref(packet_);
    if (err < 0 && err != AVERROR(EAGAIN) && err != AVERROR_INVALIDDATA) {
      return DataError("a packet does not decode: " + AvError(err));
    }
    NOSTALL_RETURN_IF_ERROR(Receive(want, &k, sink, &produced));
  }
  if (decoded != nullptr) *decoded = produced;
  return Status::OK();
}

Status FfmpegDecoder::OpenAudio(int rate, int channels) {
  if (audio_ == nullptr) NOSTALL_RETURN_IF_ERROR(OpenCodec(fmt_->streams[audio_stream_], "audio", &audio_));
  avcodec_flush_buffers(audio_);
  swr_free(&swr_);  // made again at the first frame: a fresh filter state per window
  swr_rate_ = rate;
  swr_channels_ = channels;
  return Status::OK();
}

// One decoded audio frame into the window [first, first + count) of the
// output grid: `*at` is the input sample (at the frame's rate, from the
// timeline's zero) the frame's first sample is, `*grid_next` the output
// sample the resampler gives next (-1 before the first frame).
Status FfmpegDecoder::AudioFrame(int64_t first, int64_t count, int64_t* at, int64_t* grid_next, float* dst) {
  const int in_rate = frame_->sample_rate;
  if (in_rate <= 0 || frame_->nb_samples <= 0) return Status::OK();
  int skip = 0;  // input samples before the grid's first point, left out
  if (*grid_next < 0) {
    const int64_t pts = FrameTimestamp(frame_);
    const AVRational tb = fmt_->streams[audio_stream_]->time_base;
    if (*at == INT64_MIN) *at = pts == AV_NOPTS_VALUE ? 0 : av_rescale_q(pts, tb, AVRational{1, in_rate});
    // Start at an input sample that falls on the output grid (a multiple of
    // in_rate / gcd): the samples then sit where a resample of the whole
    // stream from its zero puts them.
    const int64_t g = in_rate / std::gcd(in_rate, swr_rate_);
    const int64_t aligned = (*at >= 0 ? (*at + g - 1) / g : -((-*at) / g)) * g;
    if (aligned - *at >= frame_->nb_samples) {
      *at += frame_->nb_samples;
      return Status::OK();
    }
    skip = static_cast<int>(aligned - *at);
    AVChannelLayout out_layout;
    av_channel_layout_default(&out_layout, swr_channels_);
    const int err = swr_alloc_set_opts2(&swr_, &out_layout, AV_SAMPLE_FMT_FLTP, swr_rate_, &frame_->ch_layout,
                                        static_cast<AVSampleFormat>(frame_->format), in_rate, 0, nullptr);
    av_channel_layout_uninit(&out_layout);
    if (err < 0 || swr_init(swr_) < 0) return DataError("the audio does not resample to " + std::to_string(swr_rate_));
    *grid_next = aligned / g * (swr_rate_ / std::gcd(in_rate, swr_rate_));
  }
  const auto fmt = static_cast<AVSampleFormat>(frame_->format);
  const int bytes = av_get_bytes_per_sample(fmt);
  const bool planar = av_sample_fmt_is_planar(fmt) != 0;
  const int in_channels = frame_->ch_layout.nb_channels;
  if (in_channels <= 0 || in_channels > 64) return DataError("the audio has " + std::to_string(in_channels) + " channels");
  const uint8_t* in[64];
  for (int c = 0; c < (planar ? in_channels : 1); ++c) {
    in[c] = frame_->extended_data[c] + static_cast<size_t>(skip) * bytes * (planar ? 1 : in_channels);
  }
  const int n_in = frame_->nb_samples - skip;
  *at += frame_->nb_samples;
  return Resampled(in, n_in, first, count, grid_next, dst);
}

// The resampler's output for `n_in` input samples (none: its tail) placed
// in the window.
Status FfmpegDecoder::Resampled(const uint8_t** in, int n_in, int64_t first, int64_t count, int64_t* grid_next,
                                float* dst) {
  const int room = swr_get_out_samples(swr_, n_in);
  if (room < 0) return DataError("the audio does not resample");
  audio_out_.resize(static_cast<size_t>(room) * swr_channels_ + 1);
  uint8_t* out[2] = {reinterpret_cast<uint8_t*>(audio_out_.data()),
                     reinterpret_cast<uint8_t*>(audio_out_.data() + room)};
  const int n = swr_convert(swr_, out, room, in, n_in);
  if (n < 0) return DataError("the audio does not resample: " + AvError(n));
  const int64_t lo = std::max(*grid_next, first), hi = std::min(*grid_next + n, first + count);
  for (int c = 0; c < swr_channels_ && lo < hi; ++c) {
    std::memcpy(dst + c * count + (lo - first), audio_out_.data() + static_cast<size_t>(c) * room + (lo - *grid_next),
                static_cast<size_t>(hi - lo) * sizeof(float));
  }
  *grid_next += n;
  return Status::OK();
}

Status FfmpegDecoder::SeekAudio(int64_t ts) {
  // (Where the demuxer cannot seek to the stream's start by time, as AVI's
  // at its first packet, the file's first byte is the start.)
  if (av_seek_frame(fmt_, audio_stream_, ts, AVSEEK_FLAG_BACKWARD) < 0 &&
      av_seek_frame(fmt_, -1, 0, AVSEEK_FLAG_BYTE) < 0 &&
      av_seek_frame(fmt_, audio_stream_, INT64_MIN, AVSEEK_FLAG_BACKWARD | AVSEEK_FLAG_ANY) < 0) {
    return DataError("the audio does not seek");
  }
  return Status::OK();
}

// The window [first, first + count) from where the reader stands. With
// `strict`, a first frame after the window's start (the seek landed past
// it) places nothing and sets `*late`.
Status FfmpegDecoder::AudioWindow(int64_t first, int64_t count, float* dst, bool strict, bool* late) {
  int64_t at = INT64_MIN, grid_next = -1;
  *late = false;
  auto drain = [&]() -> Status {
    for (;;) {
      const int err = avcodec_receive_frame(audio_, frame_);
      if (err == AVERROR(EAGAIN) || err == AVERROR_EOF) return Status::OK();
      if (err < 0) return DataError("the audio does not decode: " + AvError(err));
      if (strict && grid_next < 0 && at == INT64_MIN && LateFrame(first)) {
        av_frame_unref(frame_);
        *late = true;
        return Status::OK();
      }
      const Status s = AudioFrame(first, count, &at, &grid_next, dst);
      av_frame_unref(frame_);
      NOSTALL_RETURN_IF_ERROR(s);
    }
  };
  while (grid_next < first + count && !*late) {
    const int err = av_read_frame(fmt_, packet_);
    if (err < 0) {  // the end: what the decoder and the resampler still hold
      if (!mem_.error.ok()) return mem_.error;
      avcodec_send_packet(audio_, nullptr);
      NOSTALL_RETURN_IF_ERROR(drain());
      if (swr_ != nullptr && grid_next >= 0) NOSTALL_RETURN_IF_ERROR(Resampled(nullptr, 0, first, count, &grid_next, dst));
      break;
    }
    if (packet_->stream_index != audio_stream_) {
      av_packet_unref(packet_);
      continue;
    }
    const int sent = avcodec_send_packet(audio_, packet_);
    av_packet_unref(packet_);
    if (sent < 0 && sent != AVERROR(EAGAIN) && sent != AVERROR_INVALIDDATA) {
      return DataError("an audio packet does not decode: " + AvError(sent));
    }
    NOSTALL_RETURN_IF_ERROR(drain());
  }
  return Status::OK();
}

// Whether the frame in frame_, the first after a seek, starts after output
// sample `first` (on the output grid of swr_rate_).
bool FfmpegDecoder::LateFrame(int64_t first) const {
  const int64_t pts = FrameTimestamp(frame_);
  if (pts == AV_NOPTS_VALUE) return false;
  const AVRational tb = fmt_->streams[audio_stream_]->time_base;
  return av_rescale_q(pts, tb, AVRational{1, swr_rate_}) > first;
}

Status FfmpegDecoder::DecodeAudio(double start, int rate, int channels, int64_t count, float* dst) {
  std::fill(dst, dst + static_cast<size_t>(channels) * count, 0.0f);
  if (audio_stream_ < 0) return Status::OK();  // no audio: silence
  NOSTALL_RETURN_IF_ERROR(OpenAudio(rate, channels));
  const int64_t first = std::llround(start * rate);  // the window on the output grid
  const AVStream* st = fmt_->streams[audio_stream_];
  // From a little before the window: the decoder's pre-roll (an MDCT's
  // overlap, Opus's 80 ms) and the samples left out to reach the grid.
  const int in_rate = std::max(1, st->codecpar->sample_rate);
  const double preroll = 0.25 + static_cast<double>(st->codecpar->seek_preroll) / in_rate +
                         static_cast<double>(in_rate / std::gcd(in_rate, rate)) / in_rate;
  int64_t ts = av_rescale_q(std::llround((start - preroll) * AV_TIME_BASE), AV_TIME_BASE_Q, st->time_base);
  // Not before the stream's first packet (an AAC stream's is its priming
  // frame, before time zero: the decoder needs it for the first samples).
  const int64_t stream_start = scan_->audio_first != AV_NOPTS_VALUE ? scan_->audio_first : INT64_MIN;
  ts = std::max(ts, stream_start);
  NOSTALL_RETURN_IF_ERROR(SeekAudio(ts));
  bool late = false;
  NOSTALL_RETURN_IF_ERROR(AudioWindow(first, count, dst, ts > stream_start, &late));
  if (late) {
    // The seek landed after the window's start: again from the stream's
    // start (where samples before the first are silence indeed).
    NOSTALL_RETURN_IF_ERROR(OpenAudio(rate, channels));
    NOSTALL_RETURN_IF_ERROR(SeekAudio(stream_start));
    NOSTALL_RETURN_IF_ERROR(AudioWindow(first, count, dst, false, &late));
  }
  return Status::OK();
}

class FfmpegBackendImpl final : public Backend {
 public:
  FfmpegBackendImpl() { av_log_set_level(AV_LOG_QUIET); }
  Result<std::unique_ptr<Decoder>> Open(const Bytes& bytes, std::shared_ptr<const Scanned> scanned) const override {
    if (bytes.size == 0) return DataError("the video file is empty");
    auto d = std::make_unique<FfmpegDecoder>(bytes);
    NOSTALL_RETURN_IF_ERROR(d->Open(std::move(scanned)));
    return std::unique_ptr<Decoder>(std::move(d));
  }
  std::string version() const override {
    return std::string("FFmpeg ") + av_version_info() + " (libavformat " + AV_STRINGIFY(LIBAVFORMAT_VERSION) +
           ", libavcodec " + AV_STRINGIFY(LIBAVCODEC_VERSION) + ")";
  }
};

}  // namespace

const Backend& FfmpegBackend() {
  static const FfmpegBackendImpl backend;
  return backend;
}

}  // namespace nostall::video
