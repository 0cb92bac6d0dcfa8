// Per-image cost of the prep stage on one core (Google Benchmark): the full
// RandomResizedCrop(224) + flip + normalize path with and without DCT
// scaling, against a plain full-resolution decode of the same image.
#include <benchmark/benchmark.h>

#include "ops/decode.h"
#include "ops/prep.h"
#include "testing/test_images.h"

namespace nostall {
namespace {

const std::vector<uint8_t>& Jpeg() {
  static const std::vector<uint8_t> jpg = [] {
    auto px = testing::MakePixels(500, 375, 3, 1);
    return testing::EncodeJpeg(px, 500, 375, 3, 90);
  }();
  return jpg;
}

PrepSpec Imagenet(bool dct) {
  PrepSpec s;
  Transform rrc{TransformKind::kRandomResizedCrop};
  rrc.height = rrc.width = 224;
  Transform flip{TransformKind::kRandomHorizontalFlip};
  Transform norm{TransformKind::kNormalize};
  norm.mean = {0.485, 0.456, 0.406};
  norm.std = {0.229, 0.224, 0.225};
  s.transforms = {rrc, flip, norm};
  s.dtype = DType::kFloat32;
  s.dct_scaling = dct;
  return s;
}

void BM_Prep(benchmark::State& state) {
  const PrepSpec spec = Imagenet(state.range(0) != 0);
  std::vector<float> out(3 * 224 * 224);
  PrepScratch scratch;
  int64_t i = 0;
  for (auto _ : state) {
    Status st = PrepareSample(spec, Jpeg().data(), Jpeg().size(), {0, 0, i++}, 224, 224,
                              out.data(), &scratch);
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Prep)->Arg(1)->Arg(0)->ArgName("dct_scaling");

void BM_FullDecode(benchmark::State& state) {
  std::vector<uint8_t> buf;
  DecodedRegion region;
  for (auto _ : state) {
    Status st = JpegDecodeRegion(Jpeg().data(), Jpeg().size(), 3, 0, 0, 500, 375, 0, 0, &buf,
                                 &region);
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
    benchmark::DoNotOptimize(buf.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FullDecode);

}  // namespace
}  // namespace nostall

BENCHMARK_MAIN();
