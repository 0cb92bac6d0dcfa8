// Creating a pipeline: the spec validated and its defaults resolved, the
// source opened, the order fixed, the output size found, the cache opened.
// Running it is pipeline_loader.cc.
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "nostall/cache.h"
#include "nostall/loader.h"
#include "audio/kind.h"
#include "video/kind.h"
#include "detect/detect.h"
#include "ops/prep.h"
#include "pipeline/durations.h"
#include "pipeline/pipeline.h"
#include "nostall/model.h"

namespace nostall {

int AvailableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

namespace {

// The spec held to its rules (spec.cc), and which knobs the autotuner
// moves: "auto" those left unset, "on" all.
Result<AutotuneLimits> CheckCounts(LoaderSpec* spec) {
  NOSTALL_RETURN_IF_ERROR(CheckSpecRules(*spec));
  AutotuneLimits tune;
  const bool all = spec->autotune == "on", some = spec->autotune == "auto";
  tune.threads = all || (some && spec->num_threads == 0);
  tune.reads = all || (some && spec->reads_in_flight == 0);
  tune.prefetch = all || (some && spec->prefetch < 0);
  if (spec->prefetch < 0) spec->prefetch = kDefaultPrefetch;
  if (spec->num_threads == 0) spec->num_threads = AvailableCores();
  return tune;
}

// Each item's aspect-ratio bin, as torchvision's create_aspect_ratio_groups
// (k = group_factor): bisect_right of width / height in 2^linspace(-1, 1,
// 2k + 1), or in [1] for k = 0.
Result<std::vector<int32_t>> AspectRatioGroups(const Source& source, int64_t group_factor) {
  if (source.sharded() != nullptr) {
    return InvalidArgument("bucketing by aspect ratio needs each image's size before the epoch; shards "
                           "do not give it (a COCO dataset does)");
  }
  std::vector<double> bins;
  for (int64_t i = 0; i <= 2 * group_factor; ++i) {
    bins.push_back(group_factor == 0 ? 1.0 : std::pow(2.0, -1.0 + static_cast<double>(i) / group_factor));
  }
  std::vector<int32_t> groups(static_cast<size_t>(source.size()));
  for (int64_t i = 0; i < source.size(); ++i) {
    int w = 0, h = 0;
    if (!source.image_size(i, &w, &h)) {
      return InvalidArgument("bucketing by aspect ratio needs each image's size from the dataset's index, "
                             "and " + source.key(i) + " has none (a COCO file's images give their width "
                             "and height)");
    }
    const double ratio = static_cast<double>(w) / h;
    groups[static_cast<size_t>(i)] =
        static_cast<int32_t>(std::upper_bound(bins.begin(), bins.end(), ratio) - bins.begin());
  }
  return groups;
}

// shuffle_window="auto" where the source keeps no decoded units: windows
// only bound how far a unit's items spread.
constexpr int64_t kDefaultAutoWindow = 8192;

Result<Sampler> SamplerFor(const LoaderSpec& spec, const Source& source) {
  SamplerOptions so;
  if (spec.bucketing.by == "aspect_ratio") {
    NOSTALL_ASSIGN_OR_RETURN(so.groups, AspectRatioGroups(source, spec.bucketing.group_factor));
  } else if (spec.bucketing.by == "duration") {
    if (!audio::SpecOf(spec.prep)) {
      return InvalidArgument("bucketing by duration is for audio: the spec has no audio field");
    }
    NOSTALL_ASSIGN_OR_RETURN(so.durations, ItemDurations(spec, source));
    so.max_duration = spec.bucketing.max_duration;
    so.num_buckets = spec.bucketing.num_buckets;
    so.quadratic_duration = spec.bucketing.quadratic_duration;
  }
  so.shards = source.sharded();
  so.shuffle_buffer = spec.shuffle_buffer;
  so.shard_shuffle = spec.shard_shuffle;
  // (Shards still being indexed: the count comes from them when known.)
  so.num_items = so.shards != nullptr && !so.shards->complete() ? 0 : source.size();
  so.batch_size = spec.batch_size;
  so.shuffle = spec.shuffle;
  so.seed = spec.seed;
  so.rank = spec.rank;
  so.world_size = spec.world_size;
  so.drop_last = spec.drop_last;
  so.pad_ranks = spec.pad_ranks;
  so.subset = spec.subset;
  so.shuffle_block = spec.shuffle_block;
  if (spec.shuffle_window != 0 && spec.shuffle) {
    Source::ReadUnits units = source.read_units();
    so.unit_starts = std::move(units.starts);
    so.shuffle_window = spec.shuffle_window != kAutoShuffleWindow ? spec.shuffle_window
                        : units.window > 0                         ? units.window
                                                                   : kDefaultAutoWindow;
  }
  return Sampler::Create(so);
}

// The batch's image size: the transforms' fixed output, else the first
// item's (any other size is then reported per item).
Status OutputSize(const LoaderSpec& spec, const Source& source, int* out_h, int* out_w) {
  if (spec.prep.FixedOutputSize(out_h, out_w)) return Status::OK();
  std::vector<uint8_t> bytes;
  Status st = source.Read(0, &bytes);
  int w = 0, h = 0;
  // (A record's image is its span of the bytes, not always at their start.)
  const FieldSpan image = ImageSpan(source.record(0), bytes.size());
  if (st.ok() && (image.size < 0 || image.offset + static_cast<uint64_t>(image.size) > bytes.size())) {
    st = DataError("the record's bytes do not hold its image");
  }
  if (st.ok()) st = ProbeImageSize(bytes.data() + image.offset, static_cast<size_t>(image.size), &w, &h);
  SamplePlan plan;
  if (st.ok()) st = PlanSample(spec.prep, w, h, spec.seed, 0, 0, &plan);
  if (!st.ok()) {
    return InvalidArgument(
        "the transforms do not fix the output size, and the first item, which would set it, "
        "cannot be read: " + st.WithItem(source.key(0), "probe").Describe());
  }
  *out_h = plan.out_h;
  *out_w = plan.out_w;
  return Status::OK();
}

// The cache tiers, front first (a node-local MinIO cache in front of a
// cluster tier, say). One tier alone is stacked too, for its lookup timing
// (TierStats). Null: no cache.
Result<std::unique_ptr<Cache>> CacheFor(const LoaderSpec& spec, const Source& source) {
  if (spec.cache.empty()) return std::unique_ptr<Cache>();
  std::vector<std::unique_ptr<Cache>> tiers;
  for (const CacheTierSpec& tier : spec.cache) {
    CacheConfig config{tier.name, tier.bytes, source.fingerprint(), source.size()};
    config.options = tier.options;
    config.pool_parts = spec.world_size;  // every rank's share, pooled in a cluster tier
    NOSTALL_ASSIGN_OR_RETURN(std::unique_ptr<Cache> cache, OpenCache(tier.driver, config));
    tiers.push_back(std::move(cache));
  }
  return StackCaches(std::move(tiers));
}

// Whether the first epoch may be buffered (tar shards indexed as they are
// read, loader.h): asked for, or left to "auto" on S3; and nothing needs
// the whole index from the start: no cache (sized per item), subset or
// shuffle blocks (drawn from every item), extra fields (each one's room is
// its largest member), output size read off the first item, or shared
// producer (its consumers count the epoch's chunks).
bool MayBuffer(const LoaderSpec& spec, bool shared) {
  const bool asked =
      spec.first_epoch == "buffered" || (spec.first_epoch == "auto" && spec.source.rfind("s3://", 0) == 0);
  int h = 0, w = 0;
  return asked && !shared && spec.cache.empty() && spec.subset == 0 && spec.shuffle_block == 0 &&
         ExtraFields(spec).empty() && spec.prep.FixedOutputSize(&h, &w);
}

}  // namespace

namespace {

// The fields a kind writes (detection's targets, a clip's audio): there when
// the kind writes them, and only then.
Status CheckWrittenFields(const LoaderSpec& spec) {
  const auto& fields = spec.source_options.fields;
  const std::optional<FieldKind> written = WrittenFieldKind(spec.prep.sample_kind());
  struct Rule {
    FieldKind kind;
    const char* needs;    // the field without the kind that writes it
    const char* missing;  // the kind without its field
  };
  static const Rule kRules[] = {
      {FieldKind::kTargets,
       "a targets field needs the spec's \"detection\" transforms (at least a Resize((h, w)) that gives every "
       "image one size); docs/detection.md",
       "\"detection\" transforms need a targets field in fields (e.g. \"targets\": {\"ext\": \"json\", "
       "\"kind\": \"targets\"}); docs/detection.md"},
      {FieldKind::kClipAudio,
       "a clip_audio field needs a video list with a video.Audio (the clip's own audio); docs/video.md",
       "video.Audio needs a clip_audio field in fields (e.g. \"audio\": {\"kind\": \"clip_audio\"}); "
       "docs/video.md"}};
  for (const Rule& rule : kRules) {
    const bool has = std::any_of(fields.begin(), fields.end(),
                                 [&](const FieldSpec& f) { return f.kind == rule.kind; });
    if (has != (written == rule.kind)) return InvalidArgument(has ? rule.needs : rule.missing);
  }
  return Status::OK();
}

}  // namespace

Result<PipelineParts> PreparePipeline(const LoaderSpec& in, bool shared) {
  LoaderSpec spec = in;
  NOSTALL_ASSIGN_OR_RETURN(AutotuneLimits tune, CheckCounts(&spec));
  NOSTALL_RETURN_IF_ERROR(spec.prep.Validate());
  const auto& fields = spec.source_options.fields;
  const bool audio_field = std::any_of(fields.begin(), fields.end(),
                                       [](const FieldSpec& f) { return f.kind == FieldKind::kAudio; });
  if (audio_field && !audio::SpecOf(spec.prep)) {
    return InvalidArgument("an audio field needs the spec's \"audio\" transforms: a crop that gives every "
                           "sample one length (e.g. RandomCrop(seconds=1.0)), or a bound on the lengths "
                           "(Decode(sample_rate=16000, max_seconds=20)); docs/audio.md");
  }
  if (!audio_field && audio::SpecOf(spec.prep)) {
    return InvalidArgument("\"audio\" transforms need an audio field in fields (e.g. \"audio\": "
                           "\"flac;wav;mp3;ogg;opus\")");
  }
  const bool video_field = std::any_of(fields.begin(), fields.end(),
                                       [](const FieldSpec& f) { return f.kind == FieldKind::kVideo; });
  if (video_field != (video::SpecOf(spec.prep) != nullptr)) {
    return InvalidArgument(video_field ? "a video field needs the spec's \"video\" transforms: a Clip and a size "
                                         "(e.g. Clip(16, step=4), Resize(128), RandomCrop(112)); docs/video.md"
                                       : "\"video\" transforms need a video field in fields (e.g. \"video\": "
                                         "\"mp4;mkv;webm;avi\")");
  }
  NOSTALL_RETURN_IF_ERROR(CheckWrittenFields(spec));
  const detect::Spec* detection = detect::SpecOf(spec.prep);
  if (detection && detection->masks && spec.source_options.driver == "coco") {
    // Masks need the segmentations in the annotation table.
    nlohmann::json o = nlohmann::json::parse(spec.source_options.driver_options.empty()
                                                 ? "{}" : spec.source_options.driver_options,
                                             nullptr, false);
    if (o.is_object()) {
      o["segmentation"] = true;
      spec.source_options.driver_options = o.dump();
    }
  }
  spec.source_options.skip_bad_samples = spec.on_error == ErrorPolicy::kSkip;
  spec.source_options.lazy_index = MayBuffer(spec, shared);
  spec.source_options.shard_order = spec.shard_shuffle || (spec.shuffle && spec.shuffle_window != 0);
  NOSTALL_ASSIGN_OR_RETURN(std::unique_ptr<Source> source,
                           OpenSource(spec.source, spec.source_options));
  // `reads_in_flight` is one of two knobs, each with one controller:
  // - a source read blocking (local files) reads with that many fetch
  //   threads: 4 unless given, moved by the autotuner (up to kMaxAutoReads);
  // - a source that sends requests (S3, a web server: Source::ReadsAsync)
  //   keeps that many in flight: unless given (with autotune "on", from
  //   the number given), sized by Little's law from the measured latency as it runs
  //   (PipelineLoader::AdaptReadLimit), never by the autotuner.
  const bool async = source->ReadsAsync();
  const bool adapt_requests = async && (spec.reads_in_flight == 0 || spec.autotune == "on");
  tune.reads = tune.reads && !async;
  if (spec.reads_in_flight == 0 && !async) spec.reads_in_flight = 4;
  tune.max_threads = std::max(AvailableCores(), spec.num_threads);
  tune.min_reads = 2;
  tune.max_reads = std::max(kMaxAutoReads, spec.reads_in_flight);
  NOSTALL_ASSIGN_OR_RETURN(Sampler sampler, SamplerFor(spec, *source));
  int out_h = 0, out_w = 0;
  NOSTALL_RETURN_IF_ERROR(OutputSize(spec, *source, &out_h, &out_w));
  NOSTALL_ASSIGN_OR_RETURN(std::unique_ptr<Cache> cache, CacheFor(spec, *source));
  // Prefetch within kAutotuneRingBytes of slots (at most 8 batches ahead).
  const uint64_t slot_bytes =
      std::max<uint64_t>(1, SampleBytes(spec.prep, out_h, out_w) * static_cast<uint64_t>(spec.batch_size));
  tune.max_prefetch = std::max<int>(
      spec.prefetch, static_cast<int>(std::min<uint64_t>(8, kAutotuneRingBytes / slot_bytes)) - 2);
  PipelineParts parts;
  parts.tune = tune;
  parts.adapt_requests = adapt_requests;
  parts.spec = std::move(spec);
  parts.source = std::move(source);
  parts.sampler = std::move(sampler);
  parts.out_h = out_h;
  parts.out_w = out_w;
  parts.cache = std::move(cache);
  return parts;
}

std::vector<int64_t> SampleShapeOf(const PrepSpec& prep, int64_t out_h, int64_t out_w) {
  return prep.sample_kind().SampleShape(prep, static_cast<int>(out_h), static_cast<int>(out_w));
}

Result<std::unique_ptr<Loader>> Loader::Create(const LoaderSpec& spec) {
  NOSTALL_ASSIGN_OR_RETURN(PipelineParts parts, PreparePipeline(spec));
  return StartPipeline(std::move(parts));
}

}  // namespace nostall

namespace nostall {

std::optional<FieldKind> WrittenFieldKind(const SampleKind& kind) {
  const std::optional<WrittenField> w = kind.written_field();
  if (!w) return std::nullopt;
  return *w == WrittenField::kTargets ? FieldKind::kTargets : FieldKind::kClipAudio;
}

std::vector<FieldSpec> ExtraFields(const LoaderSpec& spec) {
  std::vector<FieldSpec> out;
  for (const FieldSpec& f : spec.source_options.fields) {
    if (!IsMediaKind(f.kind) && f.kind != FieldKind::kLabel) out.push_back(f);
  }
  return out;
}

uint64_t FieldRoom(const LoaderSpec& spec, const Source& source, int f, int out_h, int out_w) {
  const std::vector<FieldSpec> extra = ExtraFields(spec);
  const detect::Spec* detection = detect::SpecOf(spec.prep);
  if (detection && static_cast<size_t>(f) < extra.size() &&
      extra[static_cast<size_t>(f)].kind == FieldKind::kTargets) {
    // The transformed annotations: as many as the field says, else as the
    // source's largest item holds, else as its largest member could hold (a
    // box takes at least 9 bytes of JSON), at most 256 with masks (each a
    // bit-packed output-sized mask; COCO's images hold under 100).
    const FieldSpec& field = extra[static_cast<size_t>(f)];
    int64_t most = field.max_annotations > 0 ? field.max_annotations : source.max_annotations();
    if (most < 0) {
      most = source.field_room(f) / 9 + 1;
      if (detection->masks) most = std::min<int64_t>(most, 256);
    }
    most = std::min<int64_t>(most, annotations::kMaxAnnotations);
    return detect::TargetsRoom(*detection, static_cast<uint32_t>(most), out_h, out_w);
  }
  if (static_cast<size_t>(f) < extra.size() && extra[static_cast<size_t>(f)].kind == FieldKind::kClipAudio) {
    if (const video::Spec* clip = video::SpecOf(spec.prep)) return clip->AudioBytes();
  }
  // At least a byte: a field every sample has empty still has its place.
  return static_cast<uint64_t>(std::max<int64_t>(1, source.field_room(f)));
}

void SetSampleLayout(const LoaderSpec& spec, const Source& source, int out_h, int out_w,
                     ring::RingLayout* layout) {
  layout->sample_bytes = SampleBytes(spec.prep, out_h, out_w);
  std::vector<int64_t> shape = SampleShapeOf(spec.prep, out_h, out_w);
  // The ring keeps three axes: a sample of more (a video clip's (C, T, H, W))
  // has its leading ones folded into the first (its kind is never ragged on
  // them; the batch's shape is the kind's, from the spec).
  while (shape.size() > 3) {
    shape[1] *= shape[0];
    shape.erase(shape.begin());
  }
  for (size_t i = 0; i < 3; ++i) layout->shape[i] = i < shape.size() ? shape[i] : 1;
  layout->dtype = spec.prep.dtype == DType::kFloat32 ? 1 : 0;
  layout->ragged_axes = spec.prep.sample_kind().RaggedAxes(spec.prep);
  layout->pad_multiple = static_cast<uint32_t>(spec.prep.sample_kind().PadMultiple(spec.prep));
  static_assert(ring::kMaxFields == kMaxExtraFields, "the ring holds every extra field");
  layout->field_count = static_cast<uint32_t>(source.extra_fields());
  for (int f = 0; f < source.extra_fields(); ++f) {
    layout->field_room[f] = FieldRoom(spec, source, f, out_h, out_w);
  }
}

}  // namespace nostall
