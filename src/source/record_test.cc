// Records: a spec's fields applied to tar shards (nostall/record.h).
#include "nostall/record.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "nostall/source.h"
#include "testing/test_images.h"

namespace nostall {
namespace {

using testing::AppendTarMember;
using testing::Bytes;
using testing::EncodeJpeg;
using testing::FinishTar;
using testing::MakePixels;
using testing::TempDir;
using testing::WriteFile;


FieldSpec Field(const std::string& name, const std::string& exts, bool optional = false) {
  FieldSpec f;
  f.name = name;
  f.extensions = SplitExtensions(exts);
  f.kind = InferFieldKind(f.extensions);
  f.optional = optional;
  return f;
}

// Three samples: jpg + cls + json + txt, one without its json, one whose
// members come in another order (json first).
struct Shards {
  TempDir dir;
  std::vector<uint8_t> jpg[3];
  std::string path;
  Shards() {
    std::vector<uint8_t> tar;
    for (int i = 0; i < 3; ++i) jpg[i] = EncodeJpeg(MakePixels(8 + i, 8, 3, i), 8 + i, 8, 3);
    AppendTarMember(&tar, "a/0001.jpg", jpg[0]);
    AppendTarMember(&tar, "a/0001.cls", Bytes("1"));
    AppendTarMember(&tar, "a/0001.json", Bytes("{\"n\": 1}"));
    AppendTarMember(&tar, "a/0001.txt", Bytes("one"));
    AppendTarMember(&tar, "a/0002.jpg", jpg[1]);
    AppendTarMember(&tar, "a/0002.cls", Bytes("2"));
    AppendTarMember(&tar, "a/0002.txt", Bytes("two"));
    AppendTarMember(&tar, "a/0003.json", Bytes("{\"n\": 3}"));
    AppendTarMember(&tar, "a/0003.seg.png", Bytes("not really a png"));
    AppendTarMember(&tar, "a/0003.jpg", jpg[2]);
    AppendTarMember(&tar, "a/0003.cls", Bytes("0"));
    FinishTar(&tar);
    path = dir.path() + "/r.tar";
    WriteFile(path, tar);
  }
  SourceOptions Options(std::vector<FieldSpec> fields) const {
    SourceOptions o;
    o.index_cache_dir = dir.path() + "/index";
    o.fields = std::move(fields);
    return o;
  }
};

std::string FieldOf(const Source& s, int64_t i, int field) {
  std::vector<uint8_t> bytes;
  EXPECT_TRUE(s.Read(i, &bytes).ok());
  const FieldSpan& span = s.record(i)[field];
  if (span.size < 0) return "<none>";
  return std::string(bytes.begin() + static_cast<long>(span.offset),
                     bytes.begin() + static_cast<long>(span.offset + span.size));
}

TEST(RecordTest, EveryFieldOfASampleIsSlicedFromOneRead) {
  Shards shards;
  auto opened = OpenSource(shards.path, shards.Options({Field("image", "jpg"), Field("label", "cls"),
                                                        Field("meta", "json", true), Field("caption", "txt", true)}));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  const Source& s = *opened.value();
  ASSERT_EQ(s.size(), 3);
  ASSERT_EQ(s.extra_fields(), 2);
  for (int i = 0; i < 3; ++i) {
    std::string image = FieldOf(s, i, 0);
    EXPECT_EQ(std::vector<uint8_t>(image.begin(), image.end()), shards.jpg[i]) << i;
  }
  EXPECT_EQ(FieldOf(s, 0, 1), "{\"n\": 1}");
  EXPECT_EQ(FieldOf(s, 1, 1), "<none>");  // optional, absent
  EXPECT_EQ(FieldOf(s, 2, 1), "{\"n\": 3}");  // before its image in the shard
  EXPECT_EQ(FieldOf(s, 0, 2), "one");
  EXPECT_EQ(FieldOf(s, 2, 2), "<none>");
  EXPECT_EQ(s.label(0), 1);
  EXPECT_EQ(s.label(2), 0);
  EXPECT_EQ(s.field_room(0), 8);  // the largest json
  EXPECT_EQ(s.field_room(1), 3);
  const auto found = s.members_found();
  ASSERT_GE(found.size(), 4u);
  EXPECT_EQ(found[0], (std::pair<std::string, int64_t>{"jpg", 3}));
}

TEST(RecordTest, AMissingMemberIsAnErrorNamingSampleAndFieldOrSkipped) {
  Shards shards;
  auto strict = OpenSource(shards.path, shards.Options({Field("image", "jpg"), Field("meta", "json")}));
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().code(), StatusCode::kDataError);
  EXPECT_EQ(strict.status().item(), shards.path + ":a/0002");
  EXPECT_NE(strict.status().message().find("field 'meta'"), std::string::npos);
  EXPECT_NE(strict.status().message().find(".json"), std::string::npos);
  SourceOptions skip = shards.Options({Field("image", "jpg"), Field("meta", "json")});
  skip.skip_bad_samples = true;
  auto lenient = OpenSource(shards.path, skip);
  ASSERT_TRUE(lenient.ok()) << lenient.status().ToString();
  EXPECT_EQ(lenient.value()->size(), 2);
  EXPECT_EQ(lenient.value()->skipped_at_index(), 1);
  EXPECT_EQ(FieldOf(*lenient.value(), 1, 1), "{\"n\": 3}");
}

TEST(RecordTest, MembersOverTheLimitAreNamedErrors) {
  Shards shards;
  SourceOptions o = shards.Options({Field("image", "jpg"), Field("caption", "txt", true)});
  o.max_field_bytes = 2;
  auto opened = OpenSource(shards.path, o);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find("max_field_bytes=2"), std::string::npos);
}

TEST(RecordTest, TheIndexKeepsMembersAcrossRunsAndRecordsDoNotChangeTheDefault) {
  Shards shards;
  // The default spec: the same items and bytes as ever, whatever else the
  // samples hold.
  auto plain = OpenSource(shards.path, shards.Options({}));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain.value()->record(0), nullptr);
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(plain.value()->Read(2, &bytes).ok());
  EXPECT_EQ(bytes, shards.jpg[2]);
  // Opened again from the saved index: the members are still there.
  for (int run = 0; run < 2; ++run) {
    auto records = OpenSource(shards.path, shards.Options({Field("image", "jpg"), Field("seg", "seg.png", true)}));
    ASSERT_TRUE(records.ok()) << records.status().ToString();
    EXPECT_EQ(FieldOf(*records.value(), 2, 1), "not really a png") << run;
    EXPECT_EQ(FieldOf(*records.value(), 0, 1), "<none>");
    EXPECT_NE(records.value()->fingerprint(), plain.value()->fingerprint());
  }
}

TEST(RecordTest, WithoutALabelFieldSamplesNeedNoLabel) {
  TempDir dir;
  std::vector<uint8_t> tar;
  AppendTarMember(&tar, "0001.jpg", EncodeJpeg(MakePixels(8, 8, 3, 1), 8, 8, 3));
  AppendTarMember(&tar, "0001.txt", Bytes("a caption"));
  FinishTar(&tar);
  WriteFile(dir.path() + "/c.tar", tar);
  SourceOptions o;
  o.use_index_cache = false;
  EXPECT_FALSE(OpenSource(dir.path() + "/c.tar", o).ok());  // images and labels: needs its .cls
  o.fields = {Field("image", "jpg"), Field("caption", "txt")};
  auto opened = OpenSource(dir.path() + "/c.tar", o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(opened.value()->label(0), -1);
  EXPECT_EQ(FieldOf(*opened.value(), 0, 1), "a caption");
}

TEST(RecordTest, AnImageFolderHasOnlyItsImageAndLabel) {
  TempDir dir;
  WriteFile(dir.path() + "/cat/a.jpg", EncodeJpeg(MakePixels(8, 8, 3, 1), 8, 8, 3));
  SourceOptions o;
  o.use_index_cache = false;
  o.fields = {Field("image", "jpg"), Field("label", "cls")};
  auto ok = OpenSource(dir.path(), o);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok.value()->record(0), nullptr);
  o.fields.push_back(Field("meta", "json"));
  auto refused = OpenSource(dir.path(), o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("tar shards"), std::string::npos);
}

TEST(RecordTest, FieldsAreChecked) {
  EXPECT_TRUE(ValidateFields({Field("image", "jpg;png"), Field("label", "cls")}).ok());
  EXPECT_FALSE(ValidateFields({Field("meta", "json")}).ok());  // no image
  EXPECT_FALSE(ValidateFields({Field("image", "jpg"), Field("image", "json")}).ok());  // twice
  std::vector<FieldSpec> many = {Field("image", "jpg")};
  for (int i = 0; i <= kMaxExtraFields; ++i) many.push_back(Field("f" + std::to_string(i), "bin"));
  EXPECT_FALSE(ValidateFields(many).ok());
  EXPECT_EQ(SplitExtensions(".JPG; png,webp"), (std::vector<std::string>{"jpg", "png", "webp"}));
  EXPECT_EQ(InferFieldKind({"jpg", "png"}), FieldKind::kImage);
  EXPECT_EQ(InferFieldKind({"seg.png"}), FieldKind::kBytes);
  EXPECT_EQ(InferFieldKind({"txt"}), FieldKind::kText);
}

}  // namespace
}  // namespace nostall
