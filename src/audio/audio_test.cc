// The audio pipeline's invariants that the Python tests (test_audio.py,
// against torchaudio's formulas) do not reach: resampling in pieces equals
// resampling whole, a crop's decode equals the whole decode's crop to the
// bit, and the pipeline's errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "audio/pipeline.h"

namespace nostall::audio {
namespace {

// A 16-bit PCM WAV file of `frames` x `channels` (a chirp).
std::vector<uint8_t> Wav(int rate, int channels, int64_t frames) {
  std::vector<int16_t> pcm(static_cast<size_t>(frames * channels));
  for (int64_t t = 0; t < frames; ++t) {
    for (int c = 0; c < channels; ++c) {
      const double s = static_cast<double>(t) / rate;
      pcm[static_cast<size_t>(t * channels + c)] =
          static_cast<int16_t>(12000 * std::sin(2 * M_PI * (200 + 900 * s + 50 * c) * s));
    }
  }
  const uint32_t bytes = static_cast<uint32_t>(pcm.size() * 2);
  std::vector<uint8_t> out(44 + bytes);
  auto put32 = [&](size_t at, uint32_t v) { std::memcpy(&out[at], &v, 4); };
  auto put16 = [&](size_t at, uint16_t v) { std::memcpy(&out[at], &v, 2); };
  std::memcpy(&out[0], "RIFF", 4);
  put32(4, 36 + bytes);
  std::memcpy(&out[8], "WAVEfmt ", 8);
  put32(16, 16);
  put16(20, 1);
  put16(22, static_cast<uint16_t>(channels));
  put32(24, static_cast<uint32_t>(rate));
  put32(28, static_cast<uint32_t>(rate * channels * 2));
  put16(32, static_cast<uint16_t>(channels * 2));
  put16(34, 16);
  std::memcpy(&out[36], "data", 4);
  put32(40, bytes);
  std::memcpy(&out[44], pcm.data(), bytes);
  return out;
}

std::shared_ptr<const Spec> SpecOf(const std::string& json, bool fixed = true) {
  auto r = SpecFromJson(nlohmann::json::parse(json), fixed);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r.value() : nullptr;
}

TEST(ResampleTest, InPiecesEqualsWhole) {
  auto k = MakeResampleKernel(44100, 16000, 6, 0.99, ResampleWindow::kHann, 0);
  ASSERT_TRUE(k.ok());
  const ResampleKernel& r = k.value();
  EXPECT_EQ(r.orig, 441);
  EXPECT_EQ(r.phases, 160);
  const int64_t n = 44100;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>(std::sin(i * 0.01));
  const int64_t out = r.OutLength(n);
  EXPECT_EQ(out, 16000);
  // The input widened to the kernel's reach, zeros outside.
  auto run = [&](int64_t k0, int64_t k1) {
    int64_t lo, hi;
    r.InputRange(k0, k1, &lo, &hi);
    std::vector<float> in(static_cast<size_t>(hi - lo), 0.0f);
    for (int64_t j = std::max<int64_t>(lo, 0); j < std::min(hi, n); ++j) in[static_cast<size_t>(j - lo)] = x[static_cast<size_t>(j)];
    std::vector<float> y(static_cast<size_t>(k1 - k0));
    ResampleRange(r, in.data(), lo, k0, k1, y.data());
    return y;
  };
  const std::vector<float> whole = run(0, out);
  for (auto [a, b] : {std::pair<int64_t, int64_t>{0, 1}, {1234, 5678}, {15999, 16000}}) {
    const std::vector<float> part = run(a, b);
    for (int64_t i = a; i < b; ++i) EXPECT_EQ(part[static_cast<size_t>(i - a)], whole[static_cast<size_t>(i)]) << i;
  }
  // Away from the edges a sine passes at unit gain.
  EXPECT_NEAR(*std::max_element(whole.begin() + 1000, whole.end() - 1000), 1.0f, 2e-3);
}

// ResampleRange is built twice (AVX2 and the baseline) and picked at run
// time: both must sum as this plain loop does (eight partial sums, lane by
// lane, no fused multiply-add), so every machine gives the same bits.
TEST(ResampleTest, SumsTheSameBitsWhicheverBuildRuns) {
  auto k = MakeResampleKernel(22050, 16000, 6, 0.99, ResampleWindow::kHann, 0);
  ASSERT_TRUE(k.ok());
  const ResampleKernel& r = k.value();
  const int64_t n = 22050, out = r.OutLength(n);
  int64_t lo, hi;
  r.InputRange(0, out, &lo, &hi);
  std::vector<float> in(static_cast<size_t>(hi - lo), 0.0f);
  for (int64_t j = 0; j < n; ++j) in[static_cast<size_t>(j - lo)] = static_cast<float>(std::sin(j * 0.37) * 0.5);
  std::vector<float> y(static_cast<size_t>(out));
  ResampleRange(r, in.data(), lo, 0, out, y.data());
  for (int64_t k0 = 0; k0 < out; ++k0) {
    const int64_t i = k0 / r.phases, p = k0 % r.phases;
    const int32_t a = r.first[static_cast<size_t>(p)], len = r.end[static_cast<size_t>(p)] - a;
    const float* x = in.data() + (i * r.orig - r.width - lo) + a;
    const float* w = r.k.data() + p * r.taps + a;
    volatile float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // volatile: kept as written
    int64_t j = 0;
    for (; j + 8 <= len; j += 8) {
      for (int u = 0; u < 8; ++u) {
        const float prod = x[j + u] * w[j + u];
        acc[u] = acc[u] + prod;
      }
    }
    float tail = 0;
    for (; j < len; ++j) {
      const volatile float prod = x[j] * w[j];
      tail = tail + prod;
    }
    const float want = tail + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    ASSERT_EQ(y[static_cast<size_t>(k0)], want) << k0;
  }
}

TEST(AudioPipelineTest, ACropDecodesItsFramesAndEqualsTheWholeDecodesCrop) {
  const std::vector<uint8_t> wav = Wav(22050, 2, 22050 * 5);
  auto cropped = SpecOf(R"([{"type": "Decode", "mono": false, "channels": 2},
                            {"type": "Resample", "new_freq": 16000}, {"type": "Gain", "gain_db": 3},
                            {"type": "RandomCrop", "seconds": 0.5}])");
  // The same list without the crop: the whole file decoded and resampled.
  auto whole = SpecOf(R"([{"type": "Decode", "mono": false, "channels": 2},
                          {"type": "Resample", "new_freq": 16000}, {"type": "Gain", "gain_db": 3}])",
                      false);
  ASSERT_TRUE(cropped && whole);
  EXPECT_EQ(cropped->Shape(), (std::vector<int64_t>{2, 8000}));
  for (int64_t index = 0; index < 8; ++index) {
    std::vector<float> a(16000), b;
    std::vector<int64_t> shape;
    Scratch sa;
    nlohmann::json ta, tb;
    ASSERT_TRUE(Prepare(*cropped, wav.data(), wav.size(), {7, 1, index}, a.data(), &sa, &ta).ok());
    ASSERT_TRUE(Apply(*whole, wav.data(), wav.size(), {7, 1, index}, &b, &shape, &tb).ok());
    EXPECT_LT(ta["decoded"][1].get<int64_t>() - ta["decoded"][0].get<int64_t>(), 22050 / 2 + 500);
    EXPECT_EQ(tb["decoded"][1].get<int64_t>(), 22050 * 5);
    EXPECT_EQ(ta["ops"][0]["gain_db"], tb["ops"][0]["gain_db"]);  // the same draw
    ASSERT_EQ(shape, (std::vector<int64_t>{2, 80000}));
    const int64_t start = ta["ops"][1]["start"].get<int64_t>();
    for (int c = 0; c < 2; ++c) {
      for (int64_t i = 0; i < 8000; ++i) {
        ASSERT_NEAR(a[static_cast<size_t>(c * 8000 + i)], b[static_cast<size_t>(c * 80000 + start + i)], 1e-6f) << i;
      }
    }
  }
}

TEST(AudioPipelineTest, FilesThatDoNotFitTheListAreDataErrors) {
  const std::vector<uint8_t> mono = Wav(16000, 1, 16000);
  auto unknown = SpecFromJson(nlohmann::json::parse(
      R"([{"type": "Decode", "sample_rate": 8000}, {"type": "CenterCrop", "seconds": 0.5, "x": 1}])"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown argument 'x'"), std::string::npos);
  auto two = SpecOf(R"([{"type": "Decode", "mono": false, "channels": 2, "sample_rate": 16000},
                        {"type": "CenterCrop", "seconds": 0.5}])");
  ASSERT_NE(two, nullptr);
  std::vector<float> out(16000);
  Scratch s;
  Status st = Prepare(*two, mono.data(), mono.size(), {0, 0, 0}, out.data(), &s, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kDataError);
  EXPECT_NE(st.message().find("1 channels"), std::string::npos) << st.message();
  auto rate = SpecOf(R"([{"type": "Decode", "sample_rate": 8000}, {"type": "CenterCrop", "seconds": 0.5}])");
  st = Prepare(*rate, mono.data(), mono.size(), {0, 0, 0}, out.data(), &s, nullptr);
  EXPECT_NE(st.message().find("16000 Hz"), std::string::npos) << st.message();
  // Too short for a reflect-padded STFT: torch refuses it, so do we.
  auto stft = SpecOf(R"([{"type": "Decode", "sample_rate": 16000}, {"type": "CenterCrop", "seconds": 0.01},
                         {"type": "Spectrogram", "n_fft": 1024}])");
  ASSERT_NE(stft, nullptr);
  std::vector<float> spec(stft->SampleBytes() / 4);
  st = Prepare(*stft, mono.data(), mono.size(), {0, 0, 0}, spec.data(), &s, nullptr);
  EXPECT_NE(st.message().find("too short"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace nostall::audio
