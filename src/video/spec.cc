// The "video" list read and checked (video/kind.h says what it takes).
#include <algorithm>
#include <cmath>
#include <string>

#include "ops/op.h"
#include "video/kind.h"

namespace nostall::video {

using nlohmann::json;

namespace {

std::string Shown(const json& j) { return j.dump().substr(0, 80); }

Status SizeArg(const json& t, const char* name, int* h, int* w) {
  const json& s = t.contains("size") ? t["size"] : json();
  if (s.is_number_integer() && s.get<int64_t>() > 0 && s.get<int64_t>() <= 16384) {
    *h = *w = s.get<int>();
    return Status::OK();
  }
  if (s.is_array() && s.size() == 2 && s[0].is_number_integer() && s[1].is_number_integer() && s[0].get<int64_t>() > 0 &&
      s[1].get<int64_t>() > 0 && s[0].get<int64_t>() <= 16384 && s[1].get<int64_t>() <= 16384) {
    *h = s[0].get<int>();
    *w = s[1].get<int>();
    return Status::OK();
  }
  return InvalidArgument(std::string("video ") + name + ": size must be a positive int or (h, w), not " + Shown(s));
}

Status PairArg(const json& t, const char* key, double* lo, double* hi) {
  if (!t.contains(key)) return Status::OK();
  const json& v = t[key];
  if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number()) {
    return InvalidArgument(std::string("video RandomResizedCrop: ") + key + " must be (lo, hi), not " + Shown(v));
  }
  *lo = v[0].get<double>();
  *hi = v[1].get<double>();
  if (!(*lo > 0 && *lo <= *hi)) return InvalidArgument(std::string("video RandomResizedCrop: ") + key + " must be 0 < lo <= hi");
  return Status::OK();
}

Status ClipFromJson(const json& t, Spec* s) {
  for (auto it = t.begin(); it != t.end(); ++it) {
    const std::string& k = it.key();
    if (k != "type" && k != "num_frames" && k != "step" && k != "sampling" && k != "layout" && k != "clips" &&
        k != "frame_rate" && k != "seconds_between_frames") {
      return InvalidArgument("video Clip has no argument '" + k +
                             "' (num_frames, step, sampling, layout, clips, frame_rate, seconds_between_frames)");
    }
  }
  const json n = t.value("num_frames", json(16)), step = t.value("step", json(1));
  if (!n.is_number_integer() || n.get<int64_t>() < 1 || n.get<int64_t>() > 4096) {
    return InvalidArgument("video Clip: num_frames must be an int in [1, 4096], not " + Shown(n));
  }
  if (!step.is_number_integer() || step.get<int64_t>() < 1 || step.get<int64_t>() > 1000) {
    return InvalidArgument("video Clip: step must be an int in [1, 1000], not " + Shown(step));
  }
  s->num_frames = n.get<int>();
  s->step = step.get<int>();
  const std::string sampling = t.value("sampling", std::string("random"));
  if (sampling != "random" && sampling != "uniform") {
    return InvalidArgument("video Clip: sampling is \"random\" or \"uniform\", not \"" + sampling + "\"");
  }
  s->sampling = sampling == "random" ? Sampling::kRandom : Sampling::kUniform;
  const std::string layout = t.value("layout", std::string("CTHW"));
  if (layout != "CTHW" && layout != "TCHW") {
    return InvalidArgument("video Clip: layout is \"CTHW\" or \"TCHW\", not \"" + layout + "\"");
  }
  s->tchw = layout == "TCHW";
  const json clips = t.value("clips", json());
  if (!clips.is_null()) {
    if (!clips.is_number_integer() || clips.get<int64_t>() < 1 || clips.get<int64_t>() > 1024) {
      return InvalidArgument("video Clip: clips must be an int in [1, 1024] (or None: one clip, no clips axis), "
                             "not " + Shown(clips));
    }
    s->clips = clips.get<int>();
  }
  const json rate = t.value("frame_rate", json());
  if (!rate.is_null()) {
    if (!rate.is_number() || !(rate.get<double>() > 0) || rate.get<double>() > 1000) {
      return InvalidArgument("video Clip: frame_rate must be a number of frames a second in (0, 1000] (or None: "
                             "every frame), not " + Shown(rate));
    }
    s->frame_rate = rate.get<double>();
  }
  const json apart = t.value("seconds_between_frames", json());
  if (!apart.is_null()) {
    if (!apart.is_number() || !(apart.get<double>() > 0) || apart.get<double>() > 3600) {
      return InvalidArgument("video Clip: seconds_between_frames must be a number of seconds in (0, 3600] (or None: "
                             "frames by index), not " + Shown(apart));
    }
    if (s->frame_rate > 0 || s->step != 1) {
      return InvalidArgument("video Clip: seconds_between_frames places the frames by time; step and frame_rate "
                             "place them by index: give one or the other");
    }
    s->seconds_between_frames = apart.get<double>();
  }
  return Status::OK();
}

// An op of the image registry on the clip's pixels: one that works on the
// resampled uint8 RGB pixels in place (its schema's role "pixels"), keeps
// three channels and needs no float32 image.
Status PixelOpFromJson(const json& t, size_t position, Spec* s) {
  Result<Transform> op = TransformFromJson(t, position);
  if (!op.ok()) {
    return InvalidArgument("a video list takes Clip, Resize, RandomCrop, CenterCrop, RandomResizedCrop, "
                           "RandomHorizontalFlip, ops on the pixels (ColorJitter, ...), Normalize and Audio: " +
                           op.status().message());
  }
  const Transform& tr = op.value();
  if (tr.kind != TransformKind::kOp || SchemaOf(tr).role != OpRole::kPixels || tr.op == nullptr ||
      (tr.op->output_channels() > 0 && tr.op->output_channels() != 3) || !tr.op->needs_float32().empty()) {
    return InvalidArgument("video clips take ops on the pixels that keep 3 channels (ColorJitter, RandomGrayscale, "
                           "RandomPosterize, ...), not " + Shown(t));
  }
  s->ops.push_back(tr);
  return Status::OK();
}

// RandomErasing(p, scale, ratio, value): the image op's arguments and draws.
Status EraseFromJson(const json& t, size_t position, Spec* s) {
  NOSTALL_ASSIGN_OR_RETURN(Transform tr, TransformFromJson(t, position));
  if (tr.op == nullptr) return Internal("RandomErasing made no op");
  Spec::Erase e{tr.op, {}, false};
  const json args = json::parse(tr.op_args, nullptr, false);
  const json value = args.is_object() ? args.value("value", json(0)) : json(0);
  if (value.is_string()) {
    e.random = true;
  } else if (value.is_number()) {
    e.value = {value.get<double>()};
  } else if (value.is_array()) {
    for (const json& v : value) e.value.push_back(v.get<double>());
  }
  s->erase.push_back(std::move(e));
  return Status::OK();
}

// RandomResize(min_size, max_size): the short side drawn per clip.
Status RandomResizeFromJson(const json& t, Spec* s) {
  for (auto it = t.begin(); it != t.end(); ++it) {
    const std::string& k = it.key();
    if (k != "type" && k != "min_size" && k != "max_size" && k != "interpolation" && k != "antialias") {
      return InvalidArgument("video RandomResize has no argument '" + k + "' (min_size, max_size)");
    }
  }
  const json lo = t.value("min_size", json()), hi = t.value("max_size", json());
  if (!lo.is_number_integer() || !hi.is_number_integer() || lo.get<int64_t>() < 1 ||
      hi.get<int64_t>() <= lo.get<int64_t>() || hi.get<int64_t>() > 16385) {
    return InvalidArgument("video RandomResize: the short side is drawn from [min_size, max_size): ints with "
                           "1 <= min_size < max_size <= 16385, not " + Shown(t));
  }
  s->resize_min = lo.get<int>();
  s->resize_max = hi.get<int>();
  return Status::OK();
}

// Audio(sample_rate, seconds, channels): the clip's audio, anywhere after the Clip.
Status AudioFromJson(const json& t, Spec* s) {
  for (auto it = t.begin(); it != t.end(); ++it) {
    const std::string& k = it.key();
    if (k != "type" && k != "sample_rate" && k != "seconds" && k != "channels") {
      return InvalidArgument("video Audio has no argument '" + k + "' (sample_rate, seconds, channels)");
    }
  }
  if (s->audio()) return InvalidArgument("a video list takes one Audio");
  const json rate = t.value("sample_rate", json(16000)), seconds = t.value("seconds", json()),
             channels = t.value("channels", json(1));
  if (!rate.is_number_integer() || rate.get<int64_t>() < 1000 || rate.get<int64_t>() > 384000) {
    return InvalidArgument("video Audio: sample_rate must be an int in [1000, 384000], not " + Shown(rate));
  }
  if (!seconds.is_number() || !(seconds.get<double>() > 0) || seconds.get<double>() > 600) {
    return InvalidArgument("video Audio: seconds (how much audio from the clip's first frame; clips of videos at "
                           "different frame rates last different times) must be in (0, 600], not " +
                           Shown(seconds));
  }
  if (!channels.is_number_integer() || (channels.get<int64_t>() != 1 && channels.get<int64_t>() != 2)) {
    return InvalidArgument("video Audio: channels is 1 (mono, mixed down) or 2, not " + Shown(channels));
  }
  s->audio_rate = rate.get<int>();
  s->audio_channels = channels.get<int>();
  s->audio_samples = std::max<int64_t>(1, std::llround(seconds.get<double>() * s->audio_rate));
  return Status::OK();
}

// Where the list has got to: the last of Resize (1), a crop (2) and the ops
// (4), which go in that order, and whether the flip and Normalize came.
struct Stage {
  int at = 0;
  bool flip = false, normalize = false;
};

// The transforms after the Clip. Resize, a crop and the ops on the pixels
// go in that order (an op such as ColorJitter's contrast looks at the whole
// frame it is given); the flip and Normalize go anywhere after the Clip, as
// torchvision's video recipe puts them (Resize, flip, Normalize, RandomCrop):
// one window and one flip of every frame, and a per-pixel Normalize, give
// the same clips in any order. Ops on the pixels need the uint8 pixels, so
// they come before Normalize.
Status StepFromJson(const json& t, size_t position, Stage* stage, Spec* s) {
  const std::string type = t.value("type", std::string());
  if (type == "Audio") return AudioFromJson(t, s);
  const bool crop = type == "RandomCrop" || type == "CenterCrop" || type == "RandomResizedCrop";
  const int order = type == "Resize" || type == "RandomResize" ? 1 : crop ? 2
                    : type == "RandomHorizontalFlip" ? 3 : type == "Normalize" ? 5 : type == "RandomErasing" ? 6 : 4;
  if (order == 6) {
    stage->at = 6;
    return EraseFromJson(t, position, s);
  }
  if (stage->at == 6) {
    return InvalidArgument("video RandomErasing works on the finished clip: it goes last, not before " + type);
  }
  if (order == 3 || order == 5) {
    bool& seen = order == 3 ? stage->flip : stage->normalize;
    if (seen) return InvalidArgument("a video list takes one " + type);
    seen = true;
  } else if (order <= stage->at && !(order == 4 && stage->at == 4)) {
    return InvalidArgument("video transforms go in the order Clip, Resize, a crop, ops on the pixels (the flip "
                           "and Normalize anywhere after the Clip), each but the ops at most once: " + type +
                           " is out of place");
  } else if (order == 4 && stage->normalize) {
    return InvalidArgument("video ops on the pixels work on the uint8 frames: " + type + " goes before Normalize");
  } else {
    stage->at = order;
  }
  if (order == 4) return PixelOpFromJson(t, position, s);
  if (type == "RandomResize") return RandomResizeFromJson(t, s);
  if (type == "Resize") {
    const json& size = t.contains("size") ? t["size"] : json();
    if (size.is_number_integer() && size.get<int64_t>() > 0 && size.get<int64_t>() <= 16384) {
      s->resize_short = size.get<int>();
      const json m = t.value("max_size", json());
      if (m.is_number_integer()) s->max_size = m.get<int>();
      return Status::OK();
    }
    return SizeArg(t, "Resize", &s->resize_h, &s->resize_w);
  }
  if (order == 2) {
    s->crop = type == "RandomCrop" ? CropKind::kRandom : type == "CenterCrop" ? CropKind::kCenter : CropKind::kRandomResized;
    NOSTALL_RETURN_IF_ERROR(SizeArg(t, type.c_str(), &s->crop_h, &s->crop_w));
    NOSTALL_RETURN_IF_ERROR(PairArg(t, "scale", &s->scale_min, &s->scale_max));
    NOSTALL_RETURN_IF_ERROR(PairArg(t, "ratio", &s->ratio_min, &s->ratio_max));
    if (s->scale_max > 1) return InvalidArgument("video RandomResizedCrop: scale must be within (0, 1]");
    return Status::OK();
  }
  if (order == 3) {
    const json p = t.value("p", json(0.5));
    if (!p.is_number() || p.get<double>() < 0 || p.get<double>() > 1) {
      return InvalidArgument("video RandomHorizontalFlip: p must be in [0, 1], not " + Shown(p));
    }
    s->flip_p = p.get<double>();
    return Status::OK();
  }
  const json mean = t.value("mean", json()), std = t.value("std", json());
  if (!mean.is_array() || !std.is_array() || mean.size() != 3 || std.size() != 3) {
    return InvalidArgument("video Normalize: mean and std are three numbers each (RGB), not " + Shown(t));
  }
  for (int k = 0; k < 3; ++k) {
    if (!mean[k].is_number() || !std[k].is_number() || !(std[k].get<double>() > 0)) {
      return InvalidArgument("video Normalize: mean and std are numbers, std > 0: " + Shown(t));
    }
    s->mul[k] = static_cast<float>(1.0 / (255.0 * std[k].get<double>()));
    s->add[k] = static_cast<float>(-mean[k].get<double>() / std[k].get<double>());
  }
  s->normalize = true;
  return Status::OK();
}

}  // namespace

std::vector<int64_t> Spec::Shape() const {
  std::vector<int64_t> one = tchw ? std::vector<int64_t>{num_frames, 3, out_h, out_w}
                                  : std::vector<int64_t>{3, num_frames, out_h, out_w};
  if (clips > 0) one.insert(one.begin(), clips);
  return one;
}

size_t Spec::SampleBytes(DType dtype) const {
  return static_cast<size_t>(ClipCount()) * 3 * num_frames * out_h * out_w * (dtype == DType::kFloat32 ? 4 : 1);
}

Result<std::shared_ptr<const Spec>> SpecFromJson(const json& list) {
  if (!list.is_array() || list.empty() || !list[0].is_object() || list[0].value("type", std::string()) != "Clip") {
    return InvalidArgument("a video list starts with a Clip (nostall.video.Clip(num_frames=16, step=4)), not " +
                           Shown(list));
  }
  auto s = std::make_shared<Spec>();
  NOSTALL_RETURN_IF_ERROR(ClipFromJson(list[0], s.get()));
  Stage stage;
  for (size_t i = 1; i < list.size(); ++i) {
    if (!list[i].is_object()) return InvalidArgument("a video transform is an object, not " + Shown(list[i]));
    NOSTALL_RETURN_IF_ERROR(StepFromJson(list[i], i, &stage, s.get()));
  }
  if (s->crop != CropKind::kNone) {
    s->out_h = s->crop_h;
    s->out_w = s->crop_w;
  } else if (s->resize_h > 0) {
    s->out_h = s->resize_h;
    s->out_w = s->resize_w;
  } else {
    return InvalidArgument("a video list needs a crop or Resize((h, w)) that gives every clip one frame size "
                           "(e.g. Resize(128), RandomCrop(112))");
  }
  if (s->AudioBytes() > (size_t{1} << 30)) {
    return InvalidArgument("a video clip's audio over 1 GiB (clips x channels x seconds x sample_rate x 4 bytes)");
  }
  if (s->SampleBytes(DType::kFloat32) > (size_t{1} << 31)) {
    return InvalidArgument("a video clip over 2 GiB (num_frames x 3 x h x w x 4 bytes)");
  }
  s->resolved = list;
  return std::shared_ptr<const Spec>(std::move(s));
}

}  // namespace nostall::video
