// Images and their annotations as a kind of sample: the image kind's
// tensor, the spec's "detection" steps, and the transformed targets in the
// targets field.
#include <nlohmann/json.hpp>

#include "detect/detect.h"

namespace nostall::detect {
namespace {

class DetectionKind final : public SampleKind {
 public:
  explicit DetectionKind(std::shared_ptr<const Spec> spec) : spec_(std::move(spec)) {}
  const Spec& spec() const { return *spec_; }

  const char* name() const override { return "detection"; }
  Status Validate(const PrepSpec& prep) const override {
    if (!prep.transforms.empty()) {
      return InvalidArgument("a detection batch takes its transforms from \"detection\"; \"transforms\" "
                             "(image transforms) must be empty");
    }
    if (prep.max_pixels <= 0) return InvalidArgument("max_pixels must be positive");
    return Status::OK();
  }
  int channels(const PrepSpec& prep) const override { return ImageKind().channels(prep); }
  bool FixedOutputSize(const PrepSpec&, int* height, int* width) const override {
    *height = spec_->out_h;
    *width = spec_->out_w;
    return true;
  }
  std::vector<int64_t> SampleShape(const PrepSpec& prep, int out_h, int out_w) const override {
    return ImageKind().SampleShape(prep, out_h, out_w);
  }
  size_t SampleBytes(const PrepSpec& prep, int out_h, int out_w) const override {
    return ImageKind().SampleBytes(prep, out_h, out_w);
  }
  std::optional<WrittenField> written_field() const override { return WrittenField::kTargets; }
  Status Prepare(const PrepSpec& prep, const SampleInput& in, const SampleKey& key, const SampleOutput& out,
                 PrepScratch* scratch) const override {
    return detect::Prepare(*spec_, prep, in, key, out, scratch);
  }
  uint32_t RaggedAxes(const PrepSpec& prep) const override {
    if (!spec_->ragged) return 0;
    return prep.layout == Layout::kNCHW ? 6u : 3u;  // (C, H, W) or (H, W, C)
  }
  int PadMultiple(const PrepSpec&) const override { return spec_->size_divisible; }
  nlohmann::json ToJson() const override { return spec_->resolved; }

 private:
  std::shared_ptr<const Spec> spec_;
};

}  // namespace

std::shared_ptr<const SampleKind> MakeKind(std::shared_ptr<const Spec> spec) {
  return std::make_shared<DetectionKind>(std::move(spec));
}

const Spec* SpecOf(const PrepSpec& prep) {
  const auto* kind = dynamic_cast<const DetectionKind*>(prep.kind.get());
  return kind != nullptr ? &kind->spec() : nullptr;
}

}  // namespace nostall::detect
