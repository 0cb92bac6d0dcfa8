// Each item's duration, for batches of similar durations (sampler.h): read
// from the audio's header (the whole item is read: a pass over the dataset
// when the loader is made, on the fetch threads' count of threads, with a
// progress line on long runs). An item whose header does not read is an
// error naming it, or, with on_error="skip", a duration of 0 (it is then
// skipped where the pipeline meets it).
#ifndef NOSTALL_PIPELINE_DURATIONS_H_
#define NOSTALL_PIPELINE_DURATIONS_H_

#include <vector>

#include "nostall/loader.h"

namespace nostall {

Result<std::vector<float>> ItemDurations(const LoaderSpec& spec, const Source& source);

}  // namespace nostall

#endif  // NOSTALL_PIPELINE_DURATIONS_H_
