// nostall.video's functions outside a loader: a file's stream, its frames as
// FFmpeg decodes them, one clip through a list (docs/video.md).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "python/binding.h"
#include "video/backend.h"
#include "video/kind.h"

namespace nb = nanobind;

namespace nostall::py {
namespace {

std::unique_ptr<video::Decoder> OpenVideo(const nb::bytes& data) {
  const video::Backend* backend = ValueOrRaise(video::GetBackend());
  return ValueOrRaise(backend->Open(reinterpret_cast<const uint8_t*>(data.c_str()), data.size()));
}

}  // namespace

void BindVideo(nb::module_& m) {
  m.def("video_backend", [] { return ValueOrRaise(video::GetBackend())->version(); });
  m.def("video_info", [](nb::bytes data) {
    auto d = OpenVideo(data);
    const video::StreamInfo& i = d->info();
    nlohmann::json out{{"frames", i.frames}, {"fps", i.fps}, {"width", i.width}, {"height", i.height},
                       {"duration", i.duration}, {"codec", i.codec}, {"keyframes", i.keyframes},
                       {"rotation", i.rotation}, {"mirrored", i.mirrored}, {"audio", nullptr}};
    if (!i.audio_codec.empty()) {
      out["audio"] = {{"codec", i.audio_codec}, {"sample_rate", i.audio_rate}, {"channels", i.audio_channels}};
    }
    return out.dump();
  });
  // Frames at `indices` (ascending), RGB24, (n, h, w, 3); and how many
  // frames the decoder produced for them.
  m.def("video_frames", [](nb::bytes data, std::vector<int64_t> indices) {
    auto d = OpenVideo(data);
    const video::StreamInfo& i = d->info();
    const size_t frame = static_cast<size_t>(i.width) * i.height * 3;
    std::vector<uint8_t> out(frame * indices.size());
    int64_t decoded = 0;
    Status st;
    {
      nb::gil_scoped_release release;
      st = d->Decode(indices.data(), static_cast<int>(indices.size()),
                     [&](int k, const video::Frame& f) {
                       for (int y = 0; y < f.height; ++y) {
                         std::memcpy(out.data() + k * frame + static_cast<size_t>(y) * f.width * 3,
                                     f.rgb + y * f.stride, static_cast<size_t>(f.width) * 3);
                       }
                       return Status::OK();
                     },
                     &decoded);
    }
    RaiseIfError(st);
    return std::make_tuple(Owned(std::move(out), {indices.size(), static_cast<size_t>(i.height),
                                                  static_cast<size_t>(i.width), 3}),
                           decoded);
  });
  // One clip through a video list, as the loader makes it: the tensor
  // (float32 when the list normalizes or `float32`), and what was drawn.
  m.def("video_apply", [](const std::string& list_json, nb::bytes data, uint64_t seed, int64_t epoch,
                          int64_t index, bool float32) {
    const nlohmann::json j = nlohmann::json::parse(list_json, nullptr, false);
    if (j.is_discarded()) RaiseStatus(InvalidArgument("video transforms: not JSON"));
    auto spec = ValueOrRaise(video::SpecFromJson(j));
    const DType dtype = float32 || spec->normalize ? DType::kFloat32 : DType::kUint8;
    std::vector<uint8_t> out(spec->SampleBytes(dtype));
    auto scratch = video::NewScratch();
    std::vector<float> audio(spec->AudioBytes() / sizeof(float));
    std::vector<video::ClipDraw> draws;
    int64_t decoded = 0;
    Status st;
    {
      nb::gil_scoped_release release;
      const auto* bytes = reinterpret_cast<const uint8_t*>(data.c_str());
      st = video::Prepare(*spec, video::Bytes{bytes, data.size(), data.size(), {}}, {seed, epoch, index}, dtype,
                          out.data(), audio.data(), scratch.get(), nullptr, &draws, &decoded);
    }
    RaiseIfError(st);
    // Clip 0's draws at the top (the one clip of a list without `clips`);
    // with `clips`, every clip's in "clips".
    auto drawn = [](const video::ClipDraw& d) {
      return nlohmann::json{{"frames", d.indices}, {"box", {d.x, d.y, d.w, d.h}}, {"flip", d.flip}, {"time", d.time}};
    };
    nlohmann::json params = drawn(draws.at(0));
    params["decoded"] = decoded;
    if (spec->clips > 0) {
      params["clips"] = nlohmann::json::array();
      for (const video::ClipDraw& d : draws) params["clips"].push_back(drawn(d));
    }
    std::vector<size_t> dims;
    for (int64_t v : spec->Shape()) dims.push_back(static_cast<size_t>(v));
    const size_t audio_len = audio.size();
    auto sound = Owned(std::move(audio), {audio_len});  // the clips' audio, flat (Python shapes it)
    if (dtype == DType::kFloat32) {
      std::vector<float> f(out.size() / 4);
      std::memcpy(f.data(), out.data(), out.size());
      return nb::make_tuple(Owned(std::move(f), dims), params.dump(), sound);
    }
    return nb::make_tuple(Owned(std::move(out), dims), params.dump(), sound);
  });
}

}  // namespace nostall::py
