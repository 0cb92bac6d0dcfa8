// Per-image cost of the prep stage on one core (Google Benchmark).
//
//   build/bench/prep_bench [--benchmark_filter=...]
//   NOSTALL_BENCH_FILES=bench_data/imagenet-like/files.txt build/bench/prep_bench
//
// Images: the files listed in NOSTALL_BENCH_FILES (up to 200, read into
// memory; `make bench` writes that list for its photo-like set), else one
// generated 500x375 JPEG. Benchmarks:
//   BM_Prep/dct_scaling:N  RandomResizedCrop(224) + flip + Normalize, float32 NCHW
//   BM_FullDecode          a plain full-resolution decode of the same images
//   BM_Recipe              torchvision's ImageNet training recipe: RRC + flip +
//                          TrivialAugmentWide(bilinear) + Normalize + RandomErasing
//   BM_Op/<name>           one op alone on a 224x224 RGB image (what it adds)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "nostall/loader.h"
#include "codecs/decode.h"
#include "ops/op.h"
#include "ops/prep.h"
#include "testing/test_images.h"

namespace nostall {
namespace {

const std::vector<std::vector<uint8_t>>& Images() {
  static const std::vector<std::vector<uint8_t>> images = [] {
    std::vector<std::vector<uint8_t>> out;
    if (const char* list = std::getenv("NOSTALL_BENCH_FILES")) {
      std::ifstream in(list);
      std::string path;
      while (out.size() < 200 && std::getline(in, path)) {
        std::ifstream f(path, std::ios::binary);
        out.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
      }
    }
    if (out.empty()) {
      auto px = testing::MakePixels(500, 375, 3, 1);
      out.push_back(testing::EncodeJpeg(px, 500, 375, 3, 90));
    }
    return out;
  }();
  return images;
}

PrepSpec SpecFrom(const std::string& transforms_json, bool dct) {
  auto spec = LoaderSpec::FromJson("{\"source\": \".\", \"transforms\": " + transforms_json + "}");
  if (!spec.ok()) std::abort();
  PrepSpec s = spec.value().prep;
  s.dct_scaling = dct;
  return s;
}

constexpr const char* kNormalize =
    R"({"type": "Normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]})";

void RunPrep(benchmark::State& state, const PrepSpec& spec) {
  std::vector<float> out(3 * 224 * 224);
  PrepScratch scratch;
  int64_t i = 0;
  const auto& images = Images();
  for (auto _ : state) {
    const auto& img = images[i % images.size()];
    Status st = PrepareSample(spec, img.data(), img.size(), {0, 0, i}, 224, 224, out.data(),
                              &scratch);
    ++i;
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_Prep(benchmark::State& state) {
  RunPrep(state, SpecFrom(std::string(R"([{"type": "RandomResizedCrop", "size": 224},
      {"type": "RandomHorizontalFlip"}, )") + kNormalize + "]",
                          state.range(0) != 0));
}
BENCHMARK(BM_Prep)->Arg(1)->Arg(0)->ArgName("dct_scaling");

void BM_Recipe(benchmark::State& state) {
  RunPrep(state, SpecFrom(std::string(R"([{"type": "RandomResizedCrop", "size": 224},
      {"type": "RandomHorizontalFlip"},
      {"type": "TrivialAugmentWide", "interpolation": "bilinear"}, )") + kNormalize +
                              R"(, {"type": "RandomErasing", "p": 0.25}])",
                          true));
}
BENCHMARK(BM_Recipe);

void BM_FullDecode(benchmark::State& state) {
  std::vector<uint8_t> buf;
  DecodedRegion region;
  int64_t i = 0;
  const auto& images = Images();
  for (auto _ : state) {
    const auto& img = images[i++ % images.size()];
    ImageInfo info;
    Status st = JpegReadInfo(img.data(), img.size(), &info);
    if (st.ok()) {
      st = JpegDecodeRegion(img.data(), img.size(), 3, 0, 0, info.width, info.height, 0, 0, &buf,
                            &region);
    }
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
    benchmark::DoNotOptimize(buf.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FullDecode);

// One op on a 224x224 image: the op's own cost, without decode or resample.
void BM_Op(benchmark::State& state, const char* op_json) {
  const nlohmann::json j = nlohmann::json::parse(op_json);
  OpArgs args(j, "", *FindTransformSchema(j["type"].get<std::string>()));
  auto op = FindImageOp(j["type"].get<std::string>())(args);
  if (!op.ok()) std::abort();
  const std::vector<uint8_t> base = testing::MakePixels(224, 224, 3, 7);
  std::vector<uint8_t> px = base;
  OpScratch scratch;
  int64_t i = 0;
  for (auto _ : state) {
    state.PauseTiming();
    px = base;
    state.ResumeTiming();
    Philox rng(1, 0, static_cast<uint64_t>(i++));
    op.value()->Apply(ImageView{px.data(), 224, 224, 3}, rng, scratch, nullptr);
    benchmark::DoNotOptimize(px.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK_CAPTURE(BM_Op, ColorJitter, R"({"type": "ColorJitter", "brightness": 0.4, "contrast": 0.4, "saturation": 0.4, "hue": 0.1})");
BENCHMARK_CAPTURE(BM_Op, TrivialAugmentWide, R"({"type": "TrivialAugmentWide"})");
BENCHMARK_CAPTURE(BM_Op, TrivialAugmentWideBilinear, R"({"type": "TrivialAugmentWide", "interpolation": "bilinear"})");
BENCHMARK_CAPTURE(BM_Op, RandAugment, R"({"type": "RandAugment"})");
BENCHMARK_CAPTURE(BM_Op, AutoAugment, R"({"type": "AutoAugment"})");
BENCHMARK_CAPTURE(BM_Op, RandomRotation, R"({"type": "RandomRotation", "degrees": 30})");
BENCHMARK_CAPTURE(BM_Op, RandomRotationBilinear, R"({"type": "RandomRotation", "degrees": 30, "interpolation": "bilinear"})");
BENCHMARK_CAPTURE(BM_Op, GaussianBlur, R"({"type": "GaussianBlur", "kernel_size": 23})");
BENCHMARK_CAPTURE(BM_Op, RandomGrayscale, R"({"type": "RandomGrayscale", "p": 1.0})");
BENCHMARK_CAPTURE(BM_Op, RandomEqualize, R"({"type": "RandomEqualize", "p": 1.0})");
BENCHMARK_CAPTURE(BM_Op, RandomAutocontrast, R"({"type": "RandomAutocontrast", "p": 1.0})");
BENCHMARK_CAPTURE(BM_Op, RandomPosterize, R"({"type": "RandomPosterize", "bits": 4, "p": 1.0})");
BENCHMARK_CAPTURE(BM_Op, RandomAdjustSharpness, R"({"type": "RandomAdjustSharpness", "sharpness_factor": 2, "p": 1.0})");
BENCHMARK_CAPTURE(BM_Op, Brightness, R"({"type": "ColorJitter", "brightness": 0.5})");
BENCHMARK_CAPTURE(BM_Op, Contrast, R"({"type": "ColorJitter", "contrast": 0.5})");
BENCHMARK_CAPTURE(BM_Op, Saturation, R"({"type": "ColorJitter", "saturation": 0.5})");
BENCHMARK_CAPTURE(BM_Op, Hue, R"({"type": "ColorJitter", "hue": 0.2})");
BENCHMARK_CAPTURE(BM_Op, ShearXBilinear, R"({"type": "RandomAffine", "degrees": 0, "shear": [-20, 20], "interpolation": "bilinear"})");
BENCHMARK_CAPTURE(BM_Op, ShearYBilinear, R"({"type": "RandomAffine", "degrees": 0, "shear": [0, 0, -20, 20], "interpolation": "bilinear"})");
BENCHMARK_CAPTURE(BM_Op, RandomInvert, R"({"type": "RandomInvert", "p": 1.0})");

}  // namespace
}  // namespace nostall

BENCHMARK_MAIN();
