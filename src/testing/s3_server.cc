#include "testing/s3_server.h"

#include <curl/curl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "testing/ports.h"

namespace nostall::testing {
namespace {

struct Upload {
  const std::vector<uint8_t>* body;
  size_t at = 0;
};

size_t ReadBody(char* to, size_t size, size_t n, void* p) {
  auto* u = static_cast<Upload*>(p);
  const size_t k = std::min(size * n, u->body->size() - u->at);
  std::memcpy(to, u->body->data() + u->at, k);
  u->at += k;
  return k;
}

size_t Discard(char*, size_t size, size_t n, void*) { return size * n; }

}  // namespace

S3Server& S3Server::Shared() {
  static S3Server* server = new S3Server();  // lives until exit; its destructor is atexit's
  static const bool registered = [] {
    std::atexit([] { delete server; });
    return true;
  }();
  (void)registered;
  return *server;
}

S3Server::S3Server() {
  setenv("AWS_ACCESS_KEY_ID", kAccessKey, 1);
  setenv("AWS_SECRET_ACCESS_KEY", kSecretKey, 1);
  port_ = FreePort();
  const std::string port = std::to_string(port_);
  pid_ = fork();
  if (pid_ == 0) {
    // NOSTALL_TEST_PYTHON: the interpreter CMake found (the project's venv).
    execl(NOSTALL_TEST_PYTHON, NOSTALL_TEST_PYTHON, "-m", "moto.server", "-H", "127.0.0.1", "-p",
          port.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 3000; ++i) {  // up to 30 s (moto imports a lot)
    if (Accepts(port_)) return;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      ADD_FAILURE() << NOSTALL_TEST_PYTHON << " -m moto.server exited at start (status " << status
                    << "); make test installs moto[server]";
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << "moto's server did not accept connections on port " << port_;
}

S3Server::~S3Server() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

bool S3Server::Request(const char* method, const std::string& path,
                       const std::vector<uint8_t>* body) {
  CURL* curl = curl_easy_init();
  const std::string url = endpoint() + path;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Discard);
  // Signed as the drivers sign (moto takes any keys, but answers reads of
  // an unsigned request 403).
  curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, "aws:amz:us-east-1:s3");
  curl_easy_setopt(curl, CURLOPT_USERNAME, kAccessKey);
  curl_easy_setopt(curl, CURLOPT_PASSWORD, kSecretKey);
  Upload up{body};
  if (body != nullptr) {
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_READFUNCTION, ReadBody);
    curl_easy_setopt(curl, CURLOPT_READDATA, &up);
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(body->size()));
  }
  const CURLcode code = curl_easy_perform(curl);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(curl);
  const bool ok = code == CURLE_OK && status / 100 == 2;
  EXPECT_TRUE(ok) << method << " " << url << ": " << curl_easy_strerror(code) << ", HTTP " << status;
  return ok;
}

bool S3Server::MakeBucket(const std::string& bucket) {
  static const std::vector<uint8_t> none;
  return Request("PUT", "/" + bucket, &none);
}

bool S3Server::Put(const std::string& bucket, const std::string& key,
                   const std::vector<uint8_t>& bytes) {
  return Request("PUT", "/" + bucket + "/" + key, &bytes);
}

bool S3Server::Delete(const std::string& bucket, const std::string& key) {
  return Request("DELETE", "/" + bucket + "/" + key, nullptr);
}

}  // namespace nostall::testing
