// Audio clips as a kind of sample (ops/sample_kind.h): the spec's "audio"
// list run on each file's bytes, a float32 tensor of Spec::Shape() out.
#ifndef NOSTALL_AUDIO_KIND_H_
#define NOSTALL_AUDIO_KIND_H_

#include <memory>

#include "audio/pipeline.h"
#include "nostall/transforms.h"
#include "ops/sample_kind.h"

namespace nostall::audio {

std::shared_ptr<const SampleKind> MakeKind(std::shared_ptr<const Spec> spec);

// The audio spec `prep` holds, or null when its samples are not audio.
const Spec* SpecOf(const PrepSpec& prep);

}  // namespace nostall::audio

#endif  // NOSTALL_AUDIO_KIND_H_
