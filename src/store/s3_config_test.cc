#include "store/s3_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "testing/test_images.h"

namespace nostall {
namespace {

// An environment of exactly these variables.
class FakeEnv {
 public:
  using Vars = std::map<std::string, std::string>;
  explicit FakeEnv(Vars vars) : vars_(std::move(vars)) {}
  EnvLookup Lookup() const {
    return [this](const char* name) -> const char* {
      auto it = vars_.find(name);
      return it == vars_.end() ? nullptr : it->second.c_str();
    };
  }

 private:
  std::map<std::string, std::string> vars_;
};

void Write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  testing::WriteFile(path, std::vector<uint8_t>(text.begin(), text.end()));
}

TEST(S3ConfigTest, UrisNameABucketAndAKey) {
  auto loc = ParseS3Uri("s3://my-bucket.v2/imagenet/train/");
  ASSERT_TRUE(loc.ok()) << loc.status().ToString();
  EXPECT_EQ(loc->bucket, "my-bucket.v2");
  EXPECT_EQ(loc->key, "imagenet/train/");
  EXPECT_EQ(ParseS3Uri("s3://bucket")->key, "");
  EXPECT_FALSE(ParseS3Uri("s3://Bad_Bucket/x").ok());
  EXPECT_FALSE(ParseS3Uri("s3://ab/x").ok());
  EXPECT_FALSE(ParseS3Uri("/local/path").ok());
}

TEST(S3ConfigTest, TheEnvironmentGivesKeysRegionAndEndpoint) {
  FakeEnv env(FakeEnv::Vars{{"AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"},
               {"AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"},
               {"AWS_SESSION_TOKEN", "token"},
               {"AWS_REGION", "eu-west-1"},
               {"AWS_DEFAULT_REGION", "us-west-2"},
               {"AWS_ENDPOINT_URL", "http://127.0.0.1:9000/"},
               {"AWS_ENDPOINT_URL_S3", "http://127.0.0.1:8333"}});
  auto c = ResolveS3Config({}, env.Lookup());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key, "AKIDEXAMPLE");
  EXPECT_EQ(c->session_token, "token");
  EXPECT_EQ(c->region, "eu-west-1");                 // AWS_REGION before AWS_DEFAULT_REGION
  EXPECT_EQ(c->endpoint, "http://127.0.0.1:8333");   // the S3-specific one first
  EXPECT_TRUE(c->path_style);                        // not AWS: path-style
  EXPECT_TRUE(c->sign);
  EXPECT_EQ(c->ObjectUrl("data", "train/a b+c.jpg"), "http://127.0.0.1:8333/data/train/a%20b%2Bc.jpg");
  // Secrets never in the description.
  const std::string d = c->Describe();
  EXPECT_EQ(d.find("wJalr"), std::string::npos) << d;
  EXPECT_EQ(d.find("AKIDEXAMPLE"), std::string::npos) << d;
  EXPECT_NE(d.find("environment"), std::string::npos) << d;
}

TEST(S3ConfigTest, OnAwsTheBucketIsInTheHostName) {
  FakeEnv env(FakeEnv::Vars{{"AWS_DEFAULT_REGION", "ap-south-1"}});
  auto c = ResolveS3Config({}, env.Lookup());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->endpoint, "https://s3.ap-south-1.amazonaws.com");
  EXPECT_FALSE(c->path_style);
  EXPECT_EQ(c->ObjectUrl("b1b", "k/x.jpg"), "https://b1b.s3.ap-south-1.amazonaws.com/k/x.jpg");
  EXPECT_FALSE(c->sign);  // no credentials anywhere: unsigned, and said so
  EXPECT_NE(c->Describe().find("no credentials found"), std::string::npos);
  S3Options path;
  path.addressing = "path";
  EXPECT_EQ(ResolveS3Config(path, env.Lookup())->ObjectUrl("b1b", "k"),
            "https://s3.ap-south-1.amazonaws.com/b1b/k");
}

TEST(S3ConfigTest, ProfilesComeFromTheSharedFiles) {
  testing::TempDir home;
  Write(home.path() + "/.aws/credentials",
        "[default]\naws_access_key_id = DEFAULTKEY\naws_secret_access_key = defaultsecret\n"
        "# a comment\n[train]\naws_access_key_id=TRAINKEY\naws_secret_access_key=trainsecret\n");
  Write(home.path() + "/.aws/config",
        "[default]\nregion = us-east-2\n[profile train]\nregion = eu-central-1\n"
        "endpoint_url = http://minio.local:9000\n");
  FakeEnv plain(FakeEnv::Vars{{"HOME", home.path()}});
  auto d = ResolveS3Config({}, plain.Lookup());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->access_key, "DEFAULTKEY");
  EXPECT_EQ(d->region, "us-east-2");
  EXPECT_NE(d->credentials_from.find("[default]"), std::string::npos);

  FakeEnv train(FakeEnv::Vars{{"HOME", home.path()}, {"AWS_PROFILE", "train"}});
  auto t = ResolveS3Config({}, train.Lookup());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->access_key, "TRAINKEY");
  EXPECT_EQ(t->region, "eu-central-1");
  EXPECT_EQ(t->endpoint, "http://minio.local:9000");
  // The spec's fields win over the environment and the files.
  S3Options spec;
  spec.region = "sa-east-1";
  spec.endpoint = "http://10.0.0.5:8333";
  spec.unsigned_requests = true;
  auto s = ResolveS3Config(spec, train.Lookup());
  EXPECT_EQ(s->region, "sa-east-1");
  EXPECT_EQ(s->endpoint, "http://10.0.0.5:8333");
  EXPECT_FALSE(s->sign);
  EXPECT_EQ(s->max_attempts, 6);
  spec.max_attempts = 2;  // over AWS_MAX_ATTEMPTS too
  FakeEnv retries(FakeEnv::Vars{{"HOME", home.path()}, {"AWS_MAX_ATTEMPTS", "9"}});
  EXPECT_EQ(ResolveS3Config({}, retries.Lookup())->max_attempts, 9);
  EXPECT_EQ(ResolveS3Config(spec, retries.Lookup())->max_attempts, 2);
  // A profile asked for by name that exists nowhere is an error naming it.
  FakeEnv missing(FakeEnv::Vars{{"HOME", home.path()}, {"AWS_PROFILE", "nope"}});
  auto m = ResolveS3Config({}, missing.Lookup());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("'nope'"), std::string::npos);
}

// The drivers' part of the spec: read, checked, written back whole.
TEST(S3ConfigTest, OptionsAreReadCheckedAndWrittenBack) {
  auto o = ReadS3Options(nlohmann::json::parse(R"({"endpoint": "http://h:1", "max_attempts": 3})"),
                         "s3-tar-shards");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->endpoint, "http://h:1");
  EXPECT_EQ(o->max_attempts, 3);
  EXPECT_EQ(ReadS3Options(S3OptionsJson(*o), "s3-tar-shards")->max_attempts, 3);
  EXPECT_EQ(S3OptionsJson(S3Options{})["max_attempts"], 0);
  auto message = [](const char* text) {
    return ReadS3Options(nlohmann::json::parse(text), "s3-tar-shards").status().message();
  };
  EXPECT_NE(message(R"({"max_attempts": 500})").find("source.options.max_attempts must be in [0, 100]"),
            std::string::npos);
  EXPECT_NE(message(R"({"unsigned": "yes"})").find("source.options.unsigned must be true or false"),
            std::string::npos);
  EXPECT_NE(message(R"({"bucket": "x"})").find("unknown key 'bucket' in the s3-tar-shards driver's options"),
            std::string::npos);
}

TEST(S3ConfigTest, MistakesAreNamed) {
  FakeEnv env(FakeEnv::Vars{});
  S3Options bad;
  bad.addressing = "dns";
  EXPECT_NE(ResolveS3Config(bad, env.Lookup()).status().message().find("addressing must be one of"),
            std::string::npos);
  S3Options no_scheme;
  no_scheme.endpoint = "127.0.0.1:8333";
  EXPECT_NE(ResolveS3Config(no_scheme, env.Lookup()).status().message().find("http://"),
            std::string::npos);
}

}  // namespace
}  // namespace nostall
