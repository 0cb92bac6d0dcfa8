// The `_nostall` extension's functions for one sample of a kind, outside a
// loader: nostall.detection's (trace, apply), nostall.audio's (a file's
// header and frames, a sample's transforms) and a spec's fields read as the
// loader reads them (each field's kind). module.cc binds the rest.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <nlohmann/json.hpp>

#include "annotations/targets.h"
#include "audio/ops.h"
#include "audio/pipeline.h"
#include "detect/detect.h"
#include "nostall/transforms.h"
#include "python/binding.h"
#include "source/record_json.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace nostall::py {
namespace {

std::shared_ptr<const nostall::audio::Spec> AudioSpecOf(const std::string& list_json, bool fixed) {
  const nlohmann::json j = nlohmann::json::parse(list_json, nullptr, false);
  if (j.is_discarded()) RaiseStatus(nostall::InvalidArgument("audio transforms: not JSON"));
  return ValueOrRaise(nostall::audio::SpecFromJson(j, fixed));
}

// A detection spec ({"transforms", "box_format", "masks"}) read for one
// sample's work outside a loader (uint8 RGB or L, NHWC).
std::shared_ptr<const detect::Spec> DetectionSpecOf(const std::string& spec_json, const std::string& mode,
                                                    PrepSpec* prep, bool fixed = false) {
  nlohmann::json j = nlohmann::json::parse(spec_json, nullptr, false);
  if (j.is_discarded()) RaiseStatus(InvalidArgument("detection spec: not JSON"));
  prep->layout = Layout::kNHWC;
  prep->mode = mode == "L" ? ColorMode::kGray : ColorMode::kRGB;
  prep->dtype = DefaultDType(j.is_object() ? j.value("transforms", nlohmann::json()) : nlohmann::json());
  auto spec = ValueOrRaise(detect::SpecFromJson(j, *prep, fixed));
  prep->kind = detect::MakeKind(spec);
  return spec;
}

}  // namespace

// nostall.detection's functions (docs/detection.md).
void BindDetection(nb::module_& m) {
  m.def("detection_trace", [](const std::string& spec_json, int width, int height, nb::bytes record,
                              uint64_t seed, int64_t epoch, int64_t index) {
    PrepSpec prep;
    auto spec = DetectionSpecOf(spec_json, "RGB", &prep);
    nlohmann::json out;
    RaiseIfError(detect::Trace(*spec, width, height, reinterpret_cast<const uint8_t*>(record.c_str()),
                               record.size(), {seed, epoch, index}, &out));
    return out.dump();
  });
  m.def("detection_apply", [](const std::string& spec_json, nb::bytes image, nb::bytes record, uint64_t seed,
                              int64_t epoch, int64_t index, const std::string& mode, bool dct_scaling) {
    PrepSpec prep;
    prep.dct_scaling = dct_scaling;
    auto spec = DetectionSpecOf(spec_json, mode, &prep);
    // The sample's own size (a spec need not fix one for a single sample).
    const auto* rec = reinterpret_cast<const uint8_t*>(record.c_str());
    int src_w = 0, src_h = 0;
    RaiseIfError(ProbeImageSize(reinterpret_cast<const uint8_t*>(image.c_str()), image.size(), &src_w, &src_h));
    nlohmann::json trace;
    RaiseIfError(detect::Trace(*spec, src_w, src_h, rec, record.size(), {seed, epoch, index}, &trace));
    const int h = trace["size"][0].get<int>(), w = trace["size"][1].get<int>(), c = prep.channels();
    const bool f32 = prep.dtype == DType::kFloat32;
    std::vector<uint8_t> pixels(static_cast<size_t>(h) * w * c * (f32 ? 4 : 1));
    // Room for every annotation the record holds.
    annotations::Targets t;
    if (record.size() > 0) RaiseIfError(annotations::DecodeTargets(rec, record.size(), false, &t));
    std::vector<uint8_t> targets(detect::TargetsRoom(*spec, static_cast<uint32_t>(t.instances.size()), h, w));
    int64_t len = 0;
    PrepScratch scratch;
    Status st;
    {
      nb::gil_scoped_release release;
      SampleInput in{reinterpret_cast<const uint8_t*>(image.c_str()), image.size(), rec, record.size()};
      SampleOutput out{pixels.data(), h, w, nullptr, targets.data(), targets.size(), &len};
      st = detect::Prepare(*spec, prep, in, {seed, epoch, index}, out, &scratch);
    }
    RaiseIfError(st);
    nb::object img;
    if (f32) {
      std::vector<float> fl(pixels.size() / 4);
      std::memcpy(fl.data(), pixels.data(), pixels.size());
      img = Owned(std::move(fl), {static_cast<size_t>(h), static_cast<size_t>(w), static_cast<size_t>(c)});
    } else {
      img = Owned(std::move(pixels), {static_cast<size_t>(h), static_cast<size_t>(w), static_cast<size_t>(c)});
    }
    return std::make_tuple(img, nb::bytes(reinterpret_cast<const char*>(targets.data()), static_cast<size_t>(len)));
  });
  // A spec's "fields" read and written back as the loader's spec holds
  // them: every field's kind stated (a kind not given is inferred from the
  // extensions, then the field's name: InferFieldKind), each field checked.
  m.def("resolve_fields", [](const std::string& fields_json) {
    const nlohmann::json j = nlohmann::json::parse(fields_json, nullptr, false);
    if (j.is_discarded()) RaiseStatus(InvalidArgument("fields: not JSON"));
    return FieldsJson(ValueOrRaise(ReadFields(j))).dump();
  });
  m.def("targets_record", [](const std::string& json_text) {
    annotations::Targets t;
    RaiseIfError(annotations::ParseTargetsJson(reinterpret_cast<const uint8_t*>(json_text.data()),
                                               json_text.size(), true, &t));
    const std::string rec = annotations::EncodeTargets(t);
    return nb::bytes(rec.data(), rec.size());
  });
  m.def("targets_masks", [](nb::bytes record, uint32_t height, uint32_t width) {
    annotations::Targets t;
    RaiseIfError(annotations::DecodeTargets(reinterpret_cast<const uint8_t*>(record.c_str()), record.size(),
                                            true, &t));
    std::vector<uint8_t> all, one;
    for (const annotations::Instance& inst : t.instances) {
      RaiseIfError(annotations::RasterizeInstance(inst, height, width, &one));
      all.insert(all.end(), one.begin(), one.end());
    }
    return Owned(std::move(all), {t.instances.size(), static_cast<size_t>(height), static_cast<size_t>(width)});
  });
}

// nostall.audio's functions: a file's header, its frames, one sample's
// transforms (docs/audio.md).
void BindAudio(nb::module_& m) {
  m.def("audio_info", [](nb::bytes data) {
    audio::AudioInfo info;
    RaiseIfError(audio::ProbeAudio(reinterpret_cast<const uint8_t*>(data.c_str()), data.size(), &info));
    return std::make_tuple(info.frames, info.sample_rate, info.channels, info.format);
  });
  m.def("audio_decode", [](nb::bytes data, int64_t start, int64_t count, bool mono, bool int16) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(data.c_str());
    const size_t size = data.size();
    audio::AudioInfo info;
    RaiseIfError(audio::ProbeAudio(p, size, &info));
    if (count < 0) count = std::max<int64_t>(0, info.frames - start);
    if (start < 0) RaiseStatus(InvalidArgument("start must be >= 0"));
    Status st;
    if (int16) {
      std::vector<int16_t> v;
      {
        nb::gil_scoped_release release;
        st = audio::DecodeFramesInt16(p, size, start, count, &v, &info);
      }
      RaiseIfError(st);
      return Owned(std::move(v), {static_cast<size_t>(count), static_cast<size_t>(info.channels)});
    }
    std::vector<float> v;
    {
      nb::gil_scoped_release release;
      st = audio::DecodeFrames(p, size, start, count, mono, &v, &info);
    }
    RaiseIfError(st);
    return Owned(std::move(v), {static_cast<size_t>(mono ? 1 : info.channels), static_cast<size_t>(count)});
  });
  m.def("audio_schemas", &audio::AudioSchemasJson);
  m.def("audio_check", [](const std::string& list_json, bool fixed) {
    auto spec = AudioSpecOf(list_json, fixed);
    return std::make_tuple(spec->ToJson().dump(), spec->Shape());
  });
  m.def("audio_apply", [](const std::string& list_json, nb::bytes data, uint64_t seed, int64_t epoch,
                          int64_t index) {
    auto spec = AudioSpecOf(list_json, false);
    std::vector<float> out;
    std::vector<int64_t> shape;
    nlohmann::json trace;
    Status st;
    {
      nb::gil_scoped_release release;
      st = audio::Apply(*spec, reinterpret_cast<const uint8_t*>(data.c_str()), data.size(),
                                 {seed, epoch, index}, &out, &shape, &trace);
    }
    RaiseIfError(st);
    std::vector<size_t> dims(shape.begin(), shape.end());
    return std::make_tuple(Owned(std::move(out), dims), trace.dump());
  });
  m.def("audio_trace", [](const std::string& list_json, int64_t frames, int sample_rate, int channels,
                          uint64_t seed, int64_t epoch, int64_t index) {
    auto spec = AudioSpecOf(list_json, false);
    audio::AudioInfo info;
    info.frames = frames;
    info.sample_rate = sample_rate;
    info.channels = channels;
    if (frames < 0 || sample_rate < 1 || channels < 1) {
      RaiseStatus(InvalidArgument("frames >= 0, sample_rate >= 1 and channels >= 1"));
    }
    nlohmann::json out;
    RaiseIfError(audio::Trace(*spec, info, {seed, epoch, index}, &out));
    return out.dump();
  });
}

}  // namespace nostall::py
