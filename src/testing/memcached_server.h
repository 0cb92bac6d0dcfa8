// A real memcached for tests: started on a free loopback port with -M (a
// full server refuses instead of evicting), stopped (or SIGKILLed) by the
// test. Debian's memcached, installed by `make test`.
#ifndef NOSTALL_TESTING_MEMCACHED_SERVER_H_
#define NOSTALL_TESTING_MEMCACHED_SERVER_H_

#include <sys/types.h>

#include <string>

namespace nostall::testing {

class MemcachedServer {
 public:
  // memcached -M -m `megabytes`, items up to 4 MiB (at most half of it); fails the calling test
  // (a GoogleTest fatal failure) when it cannot start.
  // On a free port, or on `port` (a server started again where one was).
  explicit MemcachedServer(int megabytes = 64, int port = 0);
  ~MemcachedServer();
  MemcachedServer(const MemcachedServer&) = delete;
  MemcachedServer& operator=(const MemcachedServer&) = delete;

  bool started() const { return pid_ > 0; }
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // SIGKILL, as a node that dies: its items are gone, its port refuses.
  void Kill();
  // SIGSTOP / SIGCONT: a server that takes connections but does not answer.
  void Pause();
  void Resume();

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace nostall::testing

#endif  // NOSTALL_TESTING_MEMCACHED_SERVER_H_
