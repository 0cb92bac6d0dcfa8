// Resolving an S3 endpoint, region and credentials (s3_config.h).
#include "store/s3_config.h"

#include "common/json_fields.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <map>

namespace nostall {
namespace {

std::string Trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

std::string Env(const EnvLookup& getenv, const char* name) {
  const char* v = getenv(name);
  return v ? std::string(v) : std::string();
}

// An AWS shared file (INI): section -> key -> value. A file that does not
// exist is empty; one that cannot be parsed line by line keeps what it can
// (as the AWS tools do, lines without '=' are ignored).
using Ini = std::map<std::string, std::map<std::string, std::string>>;
using IniSection = std::map<std::string, std::string>;
Ini ReadIni(const std::string& path) {
  Ini ini;
  std::ifstream in(path);
  std::string line, section;
  while (std::getline(in, line)) {
    const std::string t = Trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      section = Trim(t.substr(1, t.size() - 2));
      continue;
    }
    const size_t eq = t.find('=');
    if (eq == std::string::npos || section.empty()) continue;
    ini[section][Trim(t.substr(0, eq))] = Trim(t.substr(eq + 1));
  }
  return ini;
}

const std::map<std::string, std::string>* Section(const Ini& ini, const std::string& name) {
  auto it = ini.find(name);
  return it == ini.end() ? nullptr : &it->second;
}

std::string Get(const std::map<std::string, std::string>* section, const char* key) {
  if (section == nullptr) return "";
  auto it = section->find(key);
  return it == section->end() ? "" : it->second;
}

bool IsAws(const std::string& endpoint) {
  const size_t scheme = endpoint.find("://");
  std::string host = scheme == std::string::npos ? endpoint : endpoint.substr(scheme + 3);
  host = host.substr(0, host.find_first_of(":/"));
  const std::string suffix = ".amazonaws.com";
  return host.size() > suffix.size() &&
         host.compare(host.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string UriEncode(const std::string& s, bool keep_slash) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Result<S3Location> ParseS3Uri(const std::string& uri) {
  const std::string scheme = "s3://";
  if (uri.compare(0, scheme.size(), scheme) != 0) return InvalidArgument("not an s3:// path: " + uri);
  const std::string rest = uri.substr(scheme.size());
  const size_t slash = rest.find('/');
  S3Location loc{rest.substr(0, slash), slash == std::string::npos ? "" : rest.substr(slash + 1)};
  bool ok = loc.bucket.size() >= 3 && loc.bucket.size() <= 63;
  for (char c : loc.bucket) {
    ok = ok && (std::islower(static_cast<unsigned char>(c)) ||
                std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-');
  }
  if (!ok) {
    return InvalidArgument("bad bucket name '" + loc.bucket + "' in " + uri +
                           " (3-63 lowercase letters, digits, '.' or '-')");
  }
  return loc;
}

// `text` as a number in [lo, hi], or an error naming `name`.
static Result<double> PositiveNumber(const char* name, const std::string& text, double lo,
                                     double hi) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(v >= lo && v <= hi)) {
    char range[64];
    std::snprintf(range, sizeof range, "[%g, %g]", lo, hi);
    return InvalidArgument(std::string(name) + " must be a number in " + range + ", not \"" +
                           text + "\"");
  }
  return v;
}

namespace {

// The credentials: the environment's, else the profile's section of the
// credentials file, then of the config file (`sections`: each with its file).
void FindCredentials(const EnvLookup& getenv,
                     std::initializer_list<std::pair<const IniSection*, std::string>> sections,
                     const std::string& profile, S3Config* c) {
  const std::string env_key = Env(getenv, "AWS_ACCESS_KEY_ID");
  const std::string env_secret = Env(getenv, "AWS_SECRET_ACCESS_KEY");
  if (!env_key.empty() && !env_secret.empty()) {
    c->access_key = env_key;
    c->secret_key = env_secret;
    c->session_token = Env(getenv, "AWS_SESSION_TOKEN");
    c->credentials_from = "environment";
    return;
  }
  for (const auto& [section, path] : sections) {
    if (!Get(section, "aws_access_key_id").empty() && !Get(section, "aws_secret_access_key").empty()) {
      c->access_key = Get(section, "aws_access_key_id");
      c->secret_key = Get(section, "aws_secret_access_key");
      c->session_token = Get(section, "aws_session_token");
      c->credentials_from = path + " [" + profile + "]";
      return;
    }
  }
  c->credentials_from = "none found";
}

// Attempts per request and the timeouts: the options', else the
// environment's, else the profile's.
Status ReadRetries(const S3Options& options, const EnvLookup& getenv, const IniSection* conf_section,
                   S3Config* c) {
  const std::string attempts =
      !Env(getenv, "AWS_MAX_ATTEMPTS").empty() ? Env(getenv, "AWS_MAX_ATTEMPTS") : Get(conf_section, "max_attempts");
  if (options.max_attempts > 0) {
    c->max_attempts = options.max_attempts;
  } else if (!attempts.empty()) {
    NOSTALL_ASSIGN_OR_RETURN(double n, PositiveNumber("AWS_MAX_ATTEMPTS", attempts, 1, 100));
    c->max_attempts = static_cast<int>(n);
  }
  for (auto [name, field] : {std::pair{"NOSTALL_S3_CONNECT_TIMEOUT", &c->connect_timeout_s},
                             std::pair{"NOSTALL_S3_READ_TIMEOUT", &c->read_timeout_s},
                             std::pair{"NOSTALL_S3_REQUEST_TIMEOUT", &c->request_timeout_s}}) {
    if (!Env(getenv, name).empty()) {
      NOSTALL_ASSIGN_OR_RETURN(*field, PositiveNumber(name, Env(getenv, name), 0.05, 3600));
    }
  }
  return Status::OK();
}

}  // namespace

Result<S3Config> ResolveS3Config(const S3Options& options, const EnvLookup& getenv) {
  if (options.addressing != "auto" && options.addressing != "path" &&
      options.addressing != "virtual") {
    return InvalidArgument("addressing must be one of auto, path, virtual, not '" +
                           options.addressing + "'");
  }
  const std::string home = Env(getenv, "HOME");
  std::string credentials_path = Env(getenv, "AWS_SHARED_CREDENTIALS_FILE");
  if (credentials_path.empty() && !home.empty()) credentials_path = home + "/.aws/credentials";
  std::string config_path = Env(getenv, "AWS_CONFIG_FILE");
  if (config_path.empty() && !home.empty()) config_path = home + "/.aws/config";
  std::string profile = options.profile.empty() ? Env(getenv, "AWS_PROFILE") : options.profile;
  const bool profile_named = !profile.empty();
  if (profile.empty()) profile = "default";

  const Ini credentials = credentials_path.empty() ? Ini{} : ReadIni(credentials_path);
  const Ini config = config_path.empty() ? Ini{} : ReadIni(config_path);
  const auto* cred_section = Section(credentials, profile);
  // In the config file a profile is "[profile NAME]", the default "[default]".
  const auto* conf_section =
      Section(config, profile == "default" ? "default" : "profile " + profile);
  if (profile_named && cred_section == nullptr && conf_section == nullptr) {
    return NotFound("AWS profile '" + profile + "' is in neither " + credentials_path + " nor " +
                    config_path);
  }

  S3Config c;
  c.region = !options.region.empty()                  ? options.region
             : !Env(getenv, "AWS_REGION").empty()         ? Env(getenv, "AWS_REGION")
             : !Env(getenv, "AWS_DEFAULT_REGION").empty() ? Env(getenv, "AWS_DEFAULT_REGION")
             : !Get(conf_section, "region").empty()       ? Get(conf_section, "region")
                                                          : "us-east-1";
  c.endpoint = !options.endpoint.empty()                  ? options.endpoint
               : !Env(getenv, "AWS_ENDPOINT_URL_S3").empty() ? Env(getenv, "AWS_ENDPOINT_URL_S3")
               : !Env(getenv, "AWS_ENDPOINT_URL").empty()    ? Env(getenv, "AWS_ENDPOINT_URL")
               : !Get(conf_section, "endpoint_url").empty()  ? Get(conf_section, "endpoint_url")
                                                             : "https://s3." + c.region + ".amazonaws.com";
  while (!c.endpoint.empty() && c.endpoint.back() == '/') c.endpoint.pop_back();
  if (c.endpoint.rfind("http://", 0) != 0 && c.endpoint.rfind("https://", 0) != 0) {
    return InvalidArgument("S3 endpoint '" + c.endpoint + "' must start with http:// or https://");
  }
  c.path_style = options.addressing == "path" || (options.addressing == "auto" && !IsAws(c.endpoint));

  FindCredentials(getenv, {{cred_section, credentials_path}, {conf_section, config_path}}, profile, &c);
  c.sign = !options.unsigned_requests && !c.access_key.empty();
  NOSTALL_RETURN_IF_ERROR(ReadRetries(options, getenv, conf_section, &c));
  return c;
}

Result<S3Options> ReadS3Options(const nlohmann::json& given, const char* driver) {
  NOSTALL_RETURN_IF_ERROR(CheckKeys(given, std::string("the ") + driver + " driver's options",
                                    {"endpoint", "region", "profile", "addressing", "unsigned",
                                     "max_attempts"}));
  const std::string w = "source.options.";
  S3Options o;
  NOSTALL_RETURN_IF_ERROR(GetString(given, w, "endpoint", &o.endpoint));
  NOSTALL_RETURN_IF_ERROR(GetString(given, w, "region", &o.region));
  NOSTALL_RETURN_IF_ERROR(GetString(given, w, "profile", &o.profile));
  NOSTALL_RETURN_IF_ERROR(GetString(given, w, "addressing", &o.addressing));
  NOSTALL_RETURN_IF_ERROR(GetBool(given, w, "unsigned", &o.unsigned_requests));
  NOSTALL_RETURN_IF_ERROR(GetIntAs(given, w, "max_attempts", 0, 100, &o.max_attempts));
  if (o.addressing != "auto" && o.addressing != "path" && o.addressing != "virtual") {
    return InvalidArgument(w + "addressing must be one of auto, path, virtual, not " +
                           Shown(given["addressing"]));
  }
  return o;
}

Status SplitS3Options(const nlohmann::json& given, std::initializer_list<const char*> own, const char* driver,
                      nlohmann::json* mine, nlohmann::json* s3) {
  if (!given.is_object()) return InvalidArgument(std::string("the ") + driver + " driver's options must be an object");
  *mine = nlohmann::json::object();
  *s3 = nlohmann::json::object();
  for (const auto& [k, v] : given.items()) {
    bool ours = false;
    for (const char* c : own) ours |= k == c;
    (ours ? (*mine)[k] : (*s3)[k]) = v;
  }
  return ReadS3Options(*s3, driver).status();
}

nlohmann::json S3OptionsJson(const S3Options& o) {
  return {{"endpoint", o.endpoint},
          {"region", o.region},
          {"profile", o.profile},
          {"addressing", o.addressing},
          {"unsigned", o.unsigned_requests},
          {"max_attempts", o.max_attempts}};
}

Result<nlohmann::json> ResolveS3Options(const nlohmann::json& given, bool /*cached*/) {
  NOSTALL_ASSIGN_OR_RETURN(S3Options o, ReadS3Options(given, "S3"));
  return S3OptionsJson(o);
}

Result<S3Config> ResolveS3Config(const nlohmann::json& given, const char* driver) {
  NOSTALL_ASSIGN_OR_RETURN(S3Options s3, ReadS3Options(given, driver));
  return ResolveS3Config(s3, [](const char* name) { return static_cast<const char*>(std::getenv(name)); });
}

Result<S3Config> PlainHttpConfig(const std::string& base, int max_attempts, const EnvLookup& getenv) {
  S3Config c;
  c.plain = true;
  c.endpoint = base;
  while (!c.endpoint.empty() && c.endpoint.back() == '/') c.endpoint.pop_back();
  S3Options o;
  o.max_attempts = max_attempts;
  NOSTALL_RETURN_IF_ERROR(ReadRetries(o, getenv, nullptr, &c));
  return c;
}

std::string S3Config::BucketUrl(const std::string& bucket) const {
  if (path_style) return endpoint + "/" + bucket;
  const size_t scheme = endpoint.find("://") + 3;
  return endpoint.substr(0, scheme) + bucket + "." + endpoint.substr(scheme);
}

std::string S3Config::ObjectUrl(const std::string& bucket, const std::string& key) const {
  if (plain) return endpoint + "/" + UriEncode(key, /*keep_slash=*/true);
  return BucketUrl(bucket) + "/" + UriEncode(key, /*keep_slash=*/true);
}

std::string S3Config::ObjectName(const std::string& bucket, const std::string& key) const {
  return plain ? endpoint + "/" + key : "s3://" + bucket + "/" + key;
}

std::string S3Config::Describe() const {
  if (plain) return "web server " + endpoint;
  return "endpoint " + endpoint + ", region " + region + ", " +
         (path_style ? "path-style" : "virtual-hosted") + ", " +
         (sign ? "signed (credentials from " + credentials_from + ")"
               : credentials_from == "none found" ? "unsigned (no credentials found)"
                                                  : "unsigned (asked for)");
}

// A web server's options: the tries of a request (the rest are S3's, refused here).
Result<nlohmann::json> ResolveHttpOptions(const nlohmann::json& given, bool) {
  if (!given.is_object()) return InvalidArgument("an http(s):// dataset's options must be an object");
  for (const auto& [k, v] : given.items()) {
    if (k != "max_attempts") {
      return InvalidArgument("source.options." + k + ": not an option of an http(s):// dataset (its one "
                             "option: max_attempts)");
    }
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 100) {
      return InvalidArgument("source.options.max_attempts must be an integer in [0, 100]");
    }
  }
  return nlohmann::json{{"max_attempts", given.value("max_attempts", 0)}};
}

}  // namespace nostall
