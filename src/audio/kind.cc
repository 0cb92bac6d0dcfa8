#include "audio/kind.h"

#include <nlohmann/json.hpp>

#include "ops/prep.h"

namespace nostall::audio {
namespace {

struct AudioScratch : KindScratch {
  Scratch audio;
};

class AudioKind final : public SampleKind {
 public:
  explicit AudioKind(std::shared_ptr<const Spec> spec) : spec_(std::move(spec)) {}
  const Spec& spec() const { return *spec_; }

  const char* name() const override { return "audio"; }
  const char* unit() const override { return "clips"; }
  Status Validate(const PrepSpec& prep) const override {
    if (!prep.transforms.empty()) {
      return InvalidArgument("an audio batch takes its transforms from \"audio\"; \"transforms\" (image "
                             "transforms) must be empty");
    }
    if (prep.dtype != DType::kFloat32) return InvalidArgument("audio batches are float32 (dtype \"float32\")");
    if (spec_->out_frames > (int64_t{1} << 30)) return InvalidArgument("audio samples over 2^30 frames");
    return Status::OK();
  }
  int channels(const PrepSpec&) const override { return spec_->out_channels; }
  bool FixedOutputSize(const PrepSpec&, int* height, int* width) const override {
    *height = spec_->out_bins;
    *width = static_cast<int>(spec_->out_frames);
    return true;
  }
  std::vector<int64_t> SampleShape(const PrepSpec&, int, int) const override { return spec_->Shape(); }
  size_t SampleBytes(const PrepSpec&, int, int) const override { return spec_->SampleBytes(); }
  Status Prepare(const PrepSpec&, const SampleInput& in, const SampleKey& key, const SampleOutput& out,
                 PrepScratch* scratch) const override {
    return audio::Prepare(*spec_, in.data, in.size, key, static_cast<float*>(out.dst),
                          &KindScratchOf<AudioScratch>(scratch).audio, nullptr, out.dims, in.file);
  }
  // A crop of a long recording reads its frames, not the whole file.
  bool ReadsPart() const override { return true; }
  // (C, T) or (C, bins, frames): the frames vary.
  uint32_t RaggedAxes(const PrepSpec&) const override {
    if (!spec_->ragged) return 0;
    return spec_->out_bins > 0 ? 4u : 2u;
  }
  nlohmann::json ToJson() const override { return spec_->ToJson(); }

 private:
  std::shared_ptr<const Spec> spec_;
};

}  // namespace

std::shared_ptr<const SampleKind> MakeKind(std::shared_ptr<const Spec> spec) {
  return std::make_shared<AudioKind>(std::move(spec));
}

const Spec* SpecOf(const PrepSpec& prep) {
  const auto* kind = dynamic_cast<const AudioKind*>(prep.kind.get());
  return kind != nullptr ? &kind->spec() : nullptr;
}

}  // namespace nostall::audio
