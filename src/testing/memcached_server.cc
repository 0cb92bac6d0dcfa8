#include "testing/memcached_server.h"

#include "testing/ports.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace nostall::testing {

MemcachedServer::MemcachedServer(int megabytes, int port_wanted) {
  const char* binary = "/usr/bin/memcached";
  if (access(binary, X_OK) != 0) {
    ADD_FAILURE() << binary << " is not installed (make test installs Debian's memcached)";
    return;
  }
  port_ = port_wanted > 0 ? port_wanted : FreePort();
  const std::string port = std::to_string(port_), mb = std::to_string(megabytes);
  // Items up to 4 MiB, at most half the memory (memcached's own rule).
  const std::string item = std::to_string(std::min(4096, megabytes * 512)) + "k";
  pid_ = fork();
  if (pid_ == 0) {
    execl(binary, binary, "-l", "127.0.0.1", "-p", port.c_str(), "-U", "0", "-M", "-m", mb.c_str(),
          "-I", item.c_str(), "-t", "2", "-u", "root", static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 500; ++i) {  // up to 5 s
    if (Accepts(port_)) return;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      ADD_FAILURE() << "memcached exited at start (status " << status << ")";
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Kill();
  ADD_FAILURE() << "memcached did not accept connections on port " << port_;
}

void MemcachedServer::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void MemcachedServer::Pause() {
  if (pid_ > 0) kill(pid_, SIGSTOP);
}

void MemcachedServer::Resume() {
  if (pid_ > 0) kill(pid_, SIGCONT);
}

MemcachedServer::~MemcachedServer() {
  Resume();
  Kill();
}

}  // namespace nostall::testing
