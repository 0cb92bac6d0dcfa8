// Where an S3 dataset lives and how to reach it, resolved as AWS's own tools
// resolve it (the S3 driver's configuration; no network here).
//
//   credentials  AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN),
//                else the profile's keys in ~/.aws/credentials
//                (AWS_SHARED_CREDENTIALS_FILE), else in ~/.aws/config
//                (AWS_CONFIG_FILE); none found: unsigned requests (public
//                buckets), said so in every access error
//   profile      the driver's option profile, else AWS_PROFILE, else "default"
//   region       the driver's option region, else AWS_REGION, AWS_DEFAULT_REGION,
//                the profile's region, else us-east-1
//   endpoint     the driver's option endpoint, else AWS_ENDPOINT_URL_S3,
//                AWS_ENDPOINT_URL, the profile's endpoint_url, else
//                https://s3.REGION.amazonaws.com
//   attempts     the driver's option max_attempts, else AWS_MAX_ATTEMPTS (the
//                profile's max_attempts), else 6: tries of a request before
//                its failure is final
//   timeouts     NOSTALL_S3_CONNECT_TIMEOUT (seconds, default 3) for a
//                connection, NOSTALL_S3_READ_TIMEOUT (default 10) for a body
//                that stops arriving, NOSTALL_S3_REQUEST_TIMEOUT (default
//                120) for a whole request, retries and their waits included
//   addressing   the driver's option addressing: "virtual" (bucket.host/key),
//                "path" (host/bucket/key), or "auto": virtual on AWS, path
//                on any other endpoint (MinIO, SeaweedFS, Ceph...)
//
// Secrets never leave this struct as text: Describe() and every error name
// where the keys came from, never the keys.
#ifndef NOSTALL_STORE_S3_CONFIG_H_
#define NOSTALL_STORE_S3_CONFIG_H_

#include <functional>
#include <initializer_list>
#include <string>

#include <nlohmann/json.hpp>

#include "nostall/status.h"

namespace nostall {

// s3://BUCKET/KEY: a bucket and a key or prefix (possibly empty).
struct S3Location {
  std::string bucket;
  std::string key;
};
// Bucket names as S3 allows them (3-63 of a-z, 0-9, '.', '-'); keys as given.
Result<S3Location> ParseS3Uri(const std::string& uri);

// The S3 drivers' part of the spec (s3-image-folder, s3-tar-shards):
// `"source": {"uri": "s3://...", "options": {"endpoint", "region",
// "profile", "addressing", "unsigned"}}`. Empty: from the environment.
struct S3Options {
  std::string endpoint;
  std::string region;
  std::string profile;
  std::string addressing = "auto";  // "auto", "path" or "virtual"
  bool unsigned_requests = false;   // never sign, even with credentials at hand
  int max_attempts = 0;             // tries of a request; 0: AWS_MAX_ATTEMPTS, the profile's, else 6
};

struct S3Config {
  std::string endpoint;  // scheme://host[:port], no trailing slash
  std::string region;
  bool path_style = false;
  bool sign = false;
  std::string credentials_from;  // e.g. "environment", "/home/u/.aws/credentials [train]"
  std::string access_key, secret_key, session_token;  // never printed
  int max_attempts = 6;
  double connect_timeout_s = 3, read_timeout_s = 10, request_timeout_s = 120;
  // A plain web server (the http store), not S3: an object's URL is the
  // endpoint (a base URL, path included) then its key; never signed; no
  // S3 listings.
  bool plain = false;

  // The URL of an object (the key percent-encoded as S3 expects: every byte
  // but A-Z a-z 0-9 - _ . ~ and '/').
  std::string ObjectUrl(const std::string& bucket, const std::string& key) const;
  // The bucket's URL, for ListObjectsV2 (query appended by the caller).
  std::string BucketUrl(const std::string& bucket) const;
  // The object as errors name it: s3://bucket/key, or its URL on a plain server.
  std::string ObjectName(const std::string& bucket, const std::string& key) const;
  // "endpoint http://127.0.0.1:8333, region us-east-1, path-style, signed
  // (credentials from environment)": no secrets.
  std::string Describe() const;
};

// `getenv` is the environment to read (std::getenv in the driver; a map in
// tests); HOME comes from it too.
using EnvLookup = std::function<const char*(const char*)>;
Result<S3Config> ResolveS3Config(const S3Options& options, const EnvLookup& getenv);

// The options as a spec gives them (a JSON object) checked (`driver`
// names the driver in errors), and written back with every one spelled out.
Result<S3Options> ReadS3Options(const nlohmann::json& given, const char* driver);
nlohmann::json S3OptionsJson(const S3Options& o);
// A driver whose options are its own (`own`) beside the S3 options (coco,
// parquet): its own keys in *mine, the rest in *s3, checked as the S3 drivers
// check theirs (an unknown key is named there, with `driver`).
Status SplitS3Options(const nlohmann::json& given, std::initializer_list<const char*> own, const char* driver,
                      nlohmann::json* mine, nlohmann::json* s3);
// The SourceDriver::options of both S3 drivers.
Result<nlohmann::json> ResolveS3Options(const nlohmann::json& given, bool cached);

// The configuration of an s3:// dataset: a driver's S3 options as a spec
// gives them (`driver` names it in errors) over the process environment.
Result<S3Config> ResolveS3Config(const nlohmann::json& given, const char* driver);

// A plain web server's (the http store): `base`, scheme://host[:port], no
// signing, the attempts given (0: AWS_MAX_ATTEMPTS, else 6) and the
// NOSTALL_S3_*_TIMEOUT timeouts, which every HTTP request here keeps.
Result<S3Config> PlainHttpConfig(const std::string& base, int max_attempts, const EnvLookup& getenv);
// The SourceDriver::options of the http(s):// drivers: max_attempts, their one option.
Result<nlohmann::json> ResolveHttpOptions(const nlohmann::json& given, bool cached);

// Percent-encodes `s` for a URL path or query value (RFC 3986 unreserved
// bytes kept; '/' kept when `keep_slash`).
std::string UriEncode(const std::string& s, bool keep_slash);

}  // namespace nostall

#endif  // NOSTALL_STORE_S3_CONFIG_H_
