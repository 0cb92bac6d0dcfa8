// Annotations (records, masks, COCO tables) and the detection steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include "annotations/coco.h"
#include "annotations/targets.h"
#include "detect/detect.h"

namespace nostall {
namespace {

using annotations::DecodeTargets;
using annotations::EncodeTargets;
using annotations::Instance;
using annotations::Targets;

std::vector<std::vector<uint8_t>> Rows(const std::vector<uint8_t>& m, int h, int w) {
  std::vector<std::vector<uint8_t>> rows;
  for (int y = 0; y < h; ++y) rows.emplace_back(m.begin() + y * w, m.begin() + (y + 1) * w);
  return rows;
}

TEST(Masks, CompressedRleDecodesAsPycocotools) {
  // pycocotools.mask.encode of a 6x7 mask with rows 1-3 x columns 2-5 set
  // and pixel (5, 0).
  Instance inst;
  inst.seg = annotations::SegKind::kRuns;
  inst.runs_h = 6, inst.runs_w = 7;
  ASSERT_TRUE(annotations::RunsFromString("5172L000005", &inst.runs).ok());
  std::vector<uint8_t> mask;
  ASSERT_TRUE(annotations::RasterizeInstance(inst, 6, 7, &mask).ok());
  std::vector<uint8_t> want(42, 0);
  for (int y = 1; y < 4; ++y) {
    for (int x = 2; x < 6; ++x) want[y * 7 + x] = 1;
  }
  want[5 * 7 + 0] = 1;
  EXPECT_EQ(Rows(mask, 6, 7), Rows(want, 6, 7));
}

TEST(Masks, PolygonRasterisesAsPycocotools) {
  // pycocotools: merge(frPyObjects([[1.2, 0.7, 5.6, 1.1, 4.3, 4.8]], 6, 7)).
  Instance inst;
  inst.seg = annotations::SegKind::kPolygons;
  inst.polygons = {{1.2, 0.7, 5.6, 1.1, 4.3, 4.8}};
  std::vector<uint8_t> mask;
  ASSERT_TRUE(annotations::RasterizeInstance(inst, 6, 7, &mask).ok());
  const std::vector<std::vector<uint8_t>> want = {
      {0, 0, 0, 0, 0, 0, 0}, {0, 0, 1, 1, 1, 0, 0}, {0, 0, 0, 1, 1, 0, 0},
      {0, 0, 0, 1, 1, 0, 0}, {0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0}};
  EXPECT_EQ(Rows(mask, 6, 7), want);
}

TEST(Masks, HostileSegmentationsAreErrors) {
  std::vector<uint32_t> counts;
  EXPECT_FALSE(annotations::RunsFromString("5\x7f", &counts).ok());   // outside the alphabet
  EXPECT_FALSE(annotations::RunsFromString("o", &counts).ok());       // ends inside a count
  Instance runs;
  runs.seg = annotations::SegKind::kRuns;
  runs.runs_h = 4, runs.runs_w = 4;
  runs.runs = {3, 100};  // longer than the image
  std::vector<uint8_t> mask;
  EXPECT_FALSE(annotations::RasterizeInstance(runs, 4, 4, &mask).ok());
  Instance far;
  far.seg = annotations::SegKind::kPolygons;
  far.polygons = {{0, 0, 1e9, 0, 0, 1e9}};
  Status st = annotations::RasterizeInstance(far, 48, 64, &mask);
  EXPECT_NE(st.message().find("far outside"), std::string::npos) << st.message();
  Instance two_points;
  two_points.seg = annotations::SegKind::kPolygons;
  two_points.polygons = {{1, 1, 5, 5}};
  ASSERT_TRUE(annotations::RasterizeInstance(two_points, 8, 8, &mask).ok());
  EXPECT_EQ(std::count(mask.begin(), mask.end(), 1), 0);
}

TEST(Records, RoundTripAndHostileBytes) {
  Targets t;
  t.width = 64, t.height = 48;
  Instance a;
  std::copy_n(std::array<float, 4>{1, 2, 30, 40}.data(), 4, a.box);
  a.label = 17;
  a.seg = annotations::SegKind::kPolygons;
  a.polygons = {{1, 2, 30, 2, 30, 40}};
  Instance b;
  std::copy_n(std::array<float, 4>{5, 5, 6, 6}.data(), 4, b.box);
  b.label = 3, b.crowd = true;
  t.instances = {a, b};
  const std::string rec = EncodeTargets(t);
  Targets back;
  ASSERT_TRUE(DecodeTargets(reinterpret_cast<const uint8_t*>(rec.data()), rec.size(), true, &back).ok());
  ASSERT_EQ(back.instances.size(), 2u);
  EXPECT_EQ(back.instances[0].polygons, a.polygons);
  EXPECT_EQ(back.instances[1].label, 3);
  EXPECT_TRUE(back.instances[1].crowd);
  // Every truncation is an error, never a read past the end.
  for (size_t n = 0; n < rec.size(); ++n) {
    EXPECT_FALSE(DecodeTargets(reinterpret_cast<const uint8_t*>(rec.data()), n, true, &back).ok()) << n;
  }
  std::string huge = rec;
  const uint32_t count = 1u << 30;
  std::memcpy(huge.data() + 8, &count, 4);
  Status st = DecodeTargets(reinterpret_cast<const uint8_t*>(huge.data()), huge.size(), true, &back);
  EXPECT_NE(st.message().find("over the limit"), std::string::npos) << st.message();
  const std::string nan = R"({"boxes": [[0, 0, NaN, 1]], "labels": [1]})";
  EXPECT_FALSE(DecodeTargets(reinterpret_cast<const uint8_t*>(nan.data()), nan.size(), false, &back).ok());
}

TEST(Coco, TableIsCheckedAndStamped) {
  const std::string json = R"({"images": [{"id": 2, "file_name": "b.jpg", "width": 10, "height": 8},
      {"id": 1, "file_name": "a.jpg", "width": 10, "height": 8}, {"id": 3, "file_name": "c.jpg"}],
    "annotations": [{"id": 1, "image_id": 2, "bbox": [1, 1, 3, 3], "category_id": 5},
      {"id": 2, "image_id": 2, "bbox": [2, 2, 3, 3], "category_id": 6, "iscrowd": 1},
      {"id": 3, "image_id": 1, "bbox": [0, 0, 10, 8], "category_id": 5}],
    "categories": [{"id": 5, "name": "cat"}, {"id": 6, "name": "dog"}], "info": {"x": [1, {"y": 2}]}})";
  annotations::CocoOptions keep;
  Result<annotations::CocoTable> t = annotations::ParseCocoBytes(json, keep, "x.json");
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ(t->images.size(), 3u);
  EXPECT_EQ(t->images[0].file_name, "a.jpg");  // by id
  EXPECT_EQ(t->images[1].count, 2u);
  annotations::CocoOptions drop{false, false, false};
  Result<annotations::CocoTable> d = annotations::ParseCocoBytes(json, drop, "x.json");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->images.size(), 2u);
  EXPECT_EQ(d->dropped_empty, 1);
  EXPECT_EQ(d->images[1].count, 1u);  // the crowd one dropped
  const std::string bytes = annotations::SerializeCoco(*t, 100, 7, "k");
  Result<annotations::CocoView> v = annotations::CocoView::Open(bytes, 100, 7, "k");
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v->size(), 3u);
  EXPECT_EQ(v->file_name(2), "c.jpg");
  EXPECT_EQ(v->max_count(), 2u);
  EXPECT_EQ(v->categories()[1].second, "dog");
  EXPECT_FALSE(annotations::CocoView::Open(bytes, 101, 7, "k").ok());  // stale
  EXPECT_FALSE(annotations::CocoView::Open(bytes, 100, 7, "other").ok());
  // The rows, names and categories are hashed: a flipped bit there is found
  // when the table is opened (and the table rebuilt).
  std::string damaged = bytes;
  damaged[annotations::kCocoHeaderBytes + 3 * annotations::kCocoTableRowBytes + 8 + 1] ^= 1;  // in the names
  EXPECT_FALSE(annotations::CocoView::Open(damaged, 100, 7, "k").ok());
  // A record is checked when it is decoded: a damaged one is an error or
  // other valid annotations, never a read outside it.
  for (size_t at = bytes.size() - 60; at < bytes.size(); ++at) {
    std::string rec_damaged = bytes;
    rec_damaged[at] ^= 0x5a;
    Result<annotations::CocoView> rv = annotations::CocoView::Open(rec_damaged, 100, 7, "k");
    ASSERT_TRUE(rv.ok());
    for (size_t i = 0; i < rv->size(); ++i) {
      const std::string_view r = rv->record(i);
      Targets t;
      (void)DecodeTargets(reinterpret_cast<const uint8_t*>(r.data()), r.size(), true, &t);
    }
  }
  for (size_t n : {size_t{0}, size_t{40}, size_t{90}, bytes.size() - 1}) {
    EXPECT_FALSE(annotations::CocoView::Open(std::string_view(bytes).substr(0, n), 100, 7, "k").ok());
  }
  for (const char* bad : {R"({"images": [{"id": 1, "file_name": "a"}, {"id": 1, "file_name": "b"}]})",
                          R"({"images": [{"id": 1, "file_name": "../etc/passwd"}]})",
                          R"({"images": [], "annotations": [{"id": 1, "image_id": 9, "bbox": [0,0,1,1], "category_id": 1}]})",
                          R"({"images": 5})", R"([1])", R"({"images": [)"}) {
    Result<annotations::CocoTable> r = annotations::ParseCocoBytes(bad, keep, "bad.json");
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) EXPECT_NE(r.status().message().find("bad.json"), std::string::npos) << r.status().message();
  }
}

std::shared_ptr<const detect::Spec> SpecOf(const std::string& text, bool fixed = true) {
  PrepSpec prep;
  Result<std::shared_ptr<const detect::Spec>> s = detect::SpecFromJson(nlohmann::json::parse(text), prep, fixed);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? *s : nullptr;
}

TEST(Detect, ResizeAndFlipMoveBoxesAsV2) {
  auto spec = SpecOf(R"({"transforms": [{"type": "Resize", "size": [100, 200]},
                                         {"type": "RandomHorizontalFlip", "p": 1.0}]})");
  ASSERT_NE(spec, nullptr);
  const std::string rec = R"({"boxes": [[10, 20, 110, 60]], "labels": [4]})";
  nlohmann::json out;
  ASSERT_TRUE(detect::Trace(*spec, 400, 200, reinterpret_cast<const uint8_t*>(rec.data()), rec.size(), {0, 0, 0}, &out).ok());
  // 400x200 -> 200x100: halved; then flipped in a 200-wide image.
  EXPECT_EQ(out["size"], nlohmann::json({100, 200}));
  EXPECT_EQ(out["boxes"][0], nlohmann::json({145.0, 10.0, 195.0, 30.0}));
  EXPECT_EQ(out["flip"], nlohmann::json({true, false}));
}

TEST(Detect, ZoomOutCropResizeComposeIntoOneSourceBox) {
  auto spec = SpecOf(R"({"transforms": [{"type": "RandomZoomOut", "p": 1.0},
                                         {"type": "RandomIoUCrop"}, {"type": "Resize", "size": [300, 300]},
                                         {"type": "SanitizeBoundingBoxes"}]})");
  ASSERT_NE(spec, nullptr);
  const std::string rec = R"({"boxes": [[100, 100, 300, 250]], "labels": [1]})";
  for (int64_t index = 0; index < 50; ++index) {
    nlohmann::json out;
    ASSERT_TRUE(detect::Trace(*spec, 640, 480, reinterpret_cast<const uint8_t*>(rec.data()), rec.size(),
                              {1, 0, index}, &out).ok());
    // The box's output place maps back to its source place through the
    // composed map: output = (source - box origin) * 300 / box size.
    const auto& sb = out["source_box"];
    if (out["boxes"].empty()) continue;
    const auto& b = out["boxes"][0];
    const double sx = 300.0 / sb[2].get<double>(), sy = 300.0 / sb[3].get<double>();
    const double want_x0 = std::clamp((100 - sb[0].get<double>()) * sx, 0.0, 300.0);
    const double want_y1 = std::clamp((250 - sb[1].get<double>()) * sy, 0.0, 300.0);
    EXPECT_NEAR(b[0].get<double>(), want_x0, 1e-3) << out.dump();
    EXPECT_NEAR(b[3].get<double>(), want_y1, 1e-3) << out.dump();
  }
}

TEST(Detect, SpecErrorsNameTheTransform) {
  PrepSpec prep;
  for (const char* bad : {R"({"transforms": [{"type": "RandomRotation", "degrees": 10}, {"type": "Resize", "size": [8, 8]}]})",
                          R"({"transforms": [{"type": "RandomIoUCrop", "min_scale": 0.9, "max_scale": 0.5}, {"type": "Resize", "size": [8, 8]}]})",
                          R"({"transforms": [{"type": "RandomZoomOut"}]})",
                          R"({"transforms": [], "box_format": "XYZ"})", R"({"masks": 1})", R"([])"}) {
    Result<std::shared_ptr<const detect::Spec>> s = detect::SpecFromJson(nlohmann::json::parse(bad), prep);
    EXPECT_FALSE(s.ok()) << bad;
  }
}

// The resizes of many sizes give samples of many sizes, bounded on each side
// (padded per batch), or one size through a FixedSizeCrop after them; a
// resize that bounds no side is refused, naming what bounds one. The crop
// pads with one fill with any RandomZoomOut.
TEST(Detect, ResizesOfManySizesAreBoundedOrCroppedToOneSize) {
  PrepSpec prep;
  const auto message = [&](const char* text) {
    Result<std::shared_ptr<const detect::Spec>> s = detect::SpecFromJson(nlohmann::json::parse(text), prep);
    return s.ok() ? std::string() : s.status().message();
  };
  auto jitter = SpecOf(R"({"transforms": [{"type": "ScaleJitter", "target_size": [64, 48]}]})");
  ASSERT_NE(jitter, nullptr);
  EXPECT_TRUE(jitter->ragged);
  EXPECT_EQ(jitter->out_h, 128);  // 48 x 2 (+1) and 64 x 2 (+1), rounded up to 32
  EXPECT_EQ(jitter->out_w, 160);
  auto shortest = SpecOf(R"({"transforms": [{"type": "RandomShortestSize", "min_size": [32, 48], "max_size": 100},
                                            {"type": "RandomHorizontalFlip"}], "size_divisible": 1})");
  ASSERT_NE(shortest, nullptr);
  EXPECT_TRUE(shortest->ragged);
  EXPECT_EQ(shortest->out_h, 100);
  EXPECT_EQ(shortest->out_w, 100);
  EXPECT_NE(message(R"({"transforms": [{"type": "FixedSizeCrop", "size": 64},
                                       {"type": "RandomShortestSize", "min_size": [32, 48]}]})").find("max_size"),
            std::string::npos);
  EXPECT_NE(message(R"({"transforms": [{"type": "RandomResize", "min_size": 40, "max_size": 80}]})").find("bound"),
            std::string::npos);
  EXPECT_NE(message(R"({"transforms": [{"type": "Resize", "size": 64}], "size_divisible": 0})").find("size_divisible"),
            std::string::npos);
  EXPECT_NE(message(R"({"transforms": [{"type": "RandomZoomOut", "fill": 10}, {"type": "RandomResize",
                       "min_size": 40, "max_size": 80}, {"type": "FixedSizeCrop", "size": 64}]})").find("same fill"),
            std::string::npos);
  EXPECT_NE(message(R"({"transforms": [{"type": "RandomResize", "min_size": 80, "max_size": 80},
                                       {"type": "FixedSizeCrop", "size": 64}]})").find("min_size"),
            std::string::npos);
  EXPECT_NE(message(R"({"transforms": [{"type": "ScaleJitter", "target_size": 64},
                                       {"type": "FixedSizeCrop", "size": 64}]})").find("target_size"),
            std::string::npos);
  auto lsj = SpecOf(R"({"transforms": [{"type": "ScaleJitter", "target_size": [64, 96]},
                                        {"type": "FixedSizeCrop", "size": [64, 96], "fill": 7},
                                        {"type": "RandomHorizontalFlip"}]})");
  ASSERT_NE(lsj, nullptr);
  EXPECT_EQ(lsj->out_h, 64);
  EXPECT_EQ(lsj->out_w, 96);
  // Every sample comes out 64 x 96 whatever the scale drawn.
  const std::string rec = R"({"boxes": [[10, 10, 200, 150]], "labels": [1]})";
  for (int64_t index = 0; index < 20; ++index) {
    nlohmann::json out;
    ASSERT_TRUE(detect::Trace(*lsj, 640, 480, reinterpret_cast<const uint8_t*>(rec.data()), rec.size(),
                              {3, 0, index}, &out).ok());
    EXPECT_EQ(out["size"], nlohmann::json({64, 96})) << out.dump();
  }
}

}  // namespace
}  // namespace nostall
