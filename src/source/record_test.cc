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
  FieldSpan span = s.record(i)[field];
  if (field == 0 && span.size < 0) span.size = static_cast<int64_t>(bytes.size() - span.offset);  // to the end
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

// An image folder's fields: the files beside each image, STEM.EXT (the
// image's name less its extension), in any case, with several dots.
struct Folder {
  TempDir dir;
  std::vector<uint8_t> jpg[3];
  std::string root = dir.path() + "/data";
  Folder() {
    for (int i = 0; i < 3; ++i) jpg[i] = EncodeJpeg(MakePixels(8 + i, 8, 3, i), 8 + i, 8, 3);
    WriteFile(root + "/cat/a.jpg", jpg[0]);
    WriteFile(root + "/cat/a.json", Bytes("{\"n\": 1}"));
    WriteFile(root + "/cat/a.cap.txt", Bytes("a cat"));
    WriteFile(root + "/cat/b.JPG", jpg[1]);
    WriteFile(root + "/cat/b.JSON", Bytes("{\"n\": 22}"));
    WriteFile(root + "/dog/sub/c.v2.png.jpg", jpg[2]);  // STEM is c.v2.png
    WriteFile(root + "/dog/sub/c.v2.png.cap.txt", Bytes("a dog"));
    WriteFile(root + "/dog/orphan.json", Bytes("{}"));
  }
  SourceOptions Options(std::vector<FieldSpec> fields) const {
    SourceOptions o;
    o.index_cache_dir = dir.path() + "/index";
    o.fields = std::move(fields);
    return o;
  }
};

TEST(RecordTest, AnImageFoldersFieldsAreTheFilesBesideEachImage) {
  Folder folder;
  for (int run = 0; run < 2; ++run) {  // built, then from the saved index
    auto opened = OpenSource(folder.root, folder.Options({Field("image", "jpg"), Field("label", "cls"),
                                                                Field("meta", "json", true),
                                                                Field("caption", "cap.txt", true)}));
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    const Source& s = *opened.value();
    ASSERT_EQ(s.size(), 3);
    for (int i = 0; i < 3; ++i) {
      std::string image = FieldOf(s, i, 0);
      EXPECT_EQ(std::vector<uint8_t>(image.begin(), image.end()), folder.jpg[i]) << i << " run " << run;
    }
    EXPECT_EQ(FieldOf(s, 0, 1), "{\"n\": 1}");
    EXPECT_EQ(FieldOf(s, 1, 1), "{\"n\": 22}");  // b.JSON beside b.JPG
    EXPECT_EQ(FieldOf(s, 2, 1), "<none>");
    EXPECT_EQ(FieldOf(s, 0, 2), "a cat");
    EXPECT_EQ(FieldOf(s, 1, 2), "<none>");
    EXPECT_EQ(FieldOf(s, 2, 2), "a dog");
    EXPECT_EQ(s.label(2), 1);  // its class folder, as always
    EXPECT_EQ(s.field_room(0), 9);
    // The .json files a field reads are not "left out"; the orphan is read by none.
    for (const auto& [ext, n] : s.left_out()) EXPECT_NE(ext, "json") << n;
  }
  // Without fields, the same items and bytes as ever.
  auto plain = OpenSource(folder.root, folder.Options({}));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain.value()->record(0), nullptr);
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(plain.value()->Read(1, &bytes).ok());
  EXPECT_EQ(bytes, folder.jpg[1]);
  // Its items are other bytes than the records': a cache of one is not the other's.
  auto records = OpenSource(folder.root, folder.Options({Field("image", "jpg"), Field("meta", "json", true)}));
  ASSERT_TRUE(records.ok());
  EXPECT_NE(records.value()->fingerprint(), plain.value()->fingerprint());
}

TEST(RecordTest, AFileMissingBesideAnImageIsNamedAndOneChangedMidRunIsCaught) {
  Folder folder;
  auto strict = OpenSource(folder.root, folder.Options({Field("image", "jpg"), Field("meta", "json")}));
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().code(), StatusCode::kDataError);
  EXPECT_EQ(strict.status().item(), folder.root + "/dog/sub/c.v2.png.jpg");
  EXPECT_NE(strict.status().message().find("field 'meta': no .json file beside the image"),
            std::string::npos)
      << strict.status().ToString();
  SourceOptions skip = folder.Options({Field("image", "jpg"), Field("meta", "json")});
  skip.skip_bad_samples = true;
  auto lenient = OpenSource(folder.root, skip);
  ASSERT_TRUE(lenient.ok()) << lenient.status().ToString();
  EXPECT_EQ(lenient.value()->size(), 2);
  EXPECT_EQ(lenient.value()->skipped_at_index(), 1);
  // Over the limit: named with its file.
  SourceOptions small = folder.Options({Field("image", "jpg"), Field("meta", "json", true)});
  small.max_field_bytes = 8;
  auto over = OpenSource(folder.root, small);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("b.JSON is 9 bytes, over max_field_bytes=8"), std::string::npos)
      << over.status().ToString();
  // Edited in place after the loader was made (no directory changes): the
  // read says so rather than cutting the record wrong.
  WriteFile(folder.root + "/cat/a.json", Bytes("{\"n\": 100}"));
  std::vector<uint8_t> bytes;
  Status changed = lenient.value()->Read(0, &bytes);
  EXPECT_EQ(changed.code(), StatusCode::kDataError);
  EXPECT_NE(changed.message().find("a.json changed while the loader ran: 8 bytes"), std::string::npos)
      << changed.ToString();
  // Made again, it takes the file as it is now (sizes are taken when made).
  auto again = OpenSource(folder.root, skip);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(FieldOf(*again.value(), 0, 1), "{\"n\": 100}");
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
