// A real S3-compatible server for tests: moto's server mode (PyPI moto, in
// the environment `make test` builds) on a free loopback port, one per test
// binary, with buckets and objects put over HTTP, signed with the test keys
// below (moto takes any). Fails the calling test when it cannot start.
#ifndef NOSTALL_TESTING_S3_SERVER_H_
#define NOSTALL_TESTING_S3_SERVER_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace nostall::testing {

// The keys requests are signed with; a driver under test finds them in
// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (S3Server::Shared sets them).
inline constexpr const char* kAccessKey = "testing";
inline constexpr const char* kSecretKey = "testing";

class S3Server {
 public:
  // The binary's one server, started on first use.
  static S3Server& Shared();
  ~S3Server();

  bool started() const { return pid_ > 0; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // Each returns true on a 2xx answer (a test failure says why otherwise).
  bool MakeBucket(const std::string& bucket);
  bool Put(const std::string& bucket, const std::string& key, const std::vector<uint8_t>& bytes);
  bool Delete(const std::string& bucket, const std::string& key);

 private:
  S3Server();
  bool Request(const char* method, const std::string& path, const std::vector<uint8_t>* body);
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace nostall::testing

#endif  // NOSTALL_TESTING_S3_SERVER_H_
