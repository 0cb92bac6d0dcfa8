#include "testing/http_server.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "testing/ports.h"

namespace nostall::testing {

HttpServer& HttpServer::Shared() {
  static HttpServer* server = new HttpServer();
  static const bool registered = [] {
    std::atexit([] { delete server; });
    return true;
  }();
  (void)registered;
  return *server;
}

HttpServer::HttpServer() {
  char tmpl[] = "/tmp/nostall-http-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    ADD_FAILURE() << "cannot make a folder for nginx";
    return;
  }
  conf_dir_ = tmpl;
  root_ = conf_dir_ + "/www";
  std::filesystem::create_directories(root_);
  std::filesystem::create_directories(conf_dir_ + "/tmp");
  port_ = FreePort();
  {
    std::ofstream conf(conf_dir_ + "/nginx.conf");
    // One process in the foreground, everything in conf_dir_ (no root needed).
    conf << "daemon off;\nmaster_process off;\nworker_processes 1;\npid " << conf_dir_ << "/nginx.pid;\n"
         << "error_log " << conf_dir_ << "/error.log;\n"
         << "events { worker_connections 256; }\n"
         << "http {\n  access_log off;\n  client_body_temp_path " << conf_dir_ << "/tmp;\n"
         << "  proxy_temp_path " << conf_dir_ << "/tmp;\n  fastcgi_temp_path " << conf_dir_ << "/tmp;\n"
         << "  uwsgi_temp_path " << conf_dir_ << "/tmp;\n  scgi_temp_path " << conf_dir_ << "/tmp;\n"
         << "  server {\n    listen 127.0.0.1:" << port_ << ";\n    root " << root_ << ";\n"
         << "    autoindex on;\n  }\n}\n";
  }
  const char* nginx = std::getenv("NOSTALL_TEST_NGINX");
  const std::string binary = nginx != nullptr && *nginx ? nginx : "/usr/sbin/nginx";
  const std::string conf = conf_dir_ + "/nginx.conf";
  pid_ = fork();
  if (pid_ == 0) {
    execl(binary.c_str(), binary.c_str(), "-p", conf_dir_.c_str(), "-c", conf.c_str(), "-e",
          (conf_dir_ + "/error.log").c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 1000; ++i) {  // up to 10 s
    if (Accepts(port_)) return;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      ADD_FAILURE() << binary << " exited at start (status " << status
                    << "); make test installs nginx-light; see " << conf_dir_ << "/error.log";
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << "nginx did not accept connections on port " << port_;
}

HttpServer::~HttpServer() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (!conf_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(conf_dir_, ec);
  }
}

bool HttpServer::Put(const std::string& path, const std::vector<uint8_t>& bytes) {
  const std::filesystem::path p = std::filesystem::path(root_) / path;
  std::error_code ec;
  std::filesystem::create_directories(p.parent_path(), ec);
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  EXPECT_TRUE(out.good()) << "cannot write " << p;
  return out.good();
}

bool HttpServer::Delete(const std::string& path) {
  std::error_code ec;
  return std::filesystem::remove(std::filesystem::path(root_) / path, ec);
}

}  // namespace nostall::testing
