// A real web server for tests: nginx (Debian's nginx-light, which `make
// test` installs) serving a fresh folder on a free loopback port, one per
// test binary, with autoindex on (folders answer with their index page)
// and Range requests answered as nginx answers them. Files are written
// into root(); nginx serves them as they are. Fails the calling test when
// it cannot start.
#ifndef NOSTALL_TESTING_HTTP_SERVER_H_
#define NOSTALL_TESTING_HTTP_SERVER_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace nostall::testing {

class HttpServer {
 public:
  // The binary's one server, started on first use.
  static HttpServer& Shared();
  ~HttpServer();

  bool started() const { return pid_ > 0; }
  // http://127.0.0.1:PORT (no trailing slash).
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // The folder served at url()/.
  const std::string& root() const { return root_; }
  // Writes `bytes` as root()/path, folders made as needed; true when written.
  bool Put(const std::string& path, const std::vector<uint8_t>& bytes);
  bool Delete(const std::string& path);

 private:
  HttpServer();
  pid_t pid_ = -1;
  int port_ = 0;
  std::string root_, conf_dir_;
};

}  // namespace nostall::testing

#endif  // NOSTALL_TESTING_HTTP_SERVER_H_
