// libcurl's multi interface on an epoll loop: curl says which sockets to
// watch and when its next timeout is due; the loop waits for exactly those
// (and for Wake from another thread) and steps only the transfers that are
// ready (with curl_multi_perform every wake-up stepped every transfer in
// flight, a cost that grew with the reads in flight a distant store needs).
// One thread runs it (s3_client.cc's I/O thread); Wake may be called from
// any.
#ifndef NOSTALL_STORE_CURL_EVENTS_H_
#define NOSTALL_STORE_CURL_EVENTS_H_

#include <curl/curl.h>

#include <cstdint>
#include <memory>

#include "nostall/status.h"

namespace nostall {

class CurlEvents {
 public:
  static Result<std::unique_ptr<CurlEvents>> Create();
  ~CurlEvents();
  CurlEvents(const CurlEvents&) = delete;
  CurlEvents& operator=(const CurlEvents&) = delete;

  CURLM* multi() const { return multi_; }
  // Ends a Wait early (new requests, a cancel, a stop). Any thread.
  void Wake();
  // Runs curl's timeouts when due (and the first step of transfers just added).
  void RunDueTimers();
  // Waits for a ready socket, Wake, curl's next timeout or `due_ns`
  // (at most 100 ms), and steps the transfers whose sockets are ready.
  void Wait(int64_t due_ns);
  // Each transfer curl has finished since the last call: fn(easy, result).
  template <typename F>
  void TakeFinished(F fn) {
    int left = 0;
    while (CURLMsg* m = curl_multi_info_read(multi_, &left)) {
      if (m->msg == CURLMSG_DONE) fn(m->easy_handle, m->data.result);
    }
  }

 private:
  CurlEvents() = default;
  static int OnSocket(CURL*, curl_socket_t fd, int what, void* user, void*);
  static int OnTimer(CURLM*, long timeout_ms, void* user);

  CURLM* multi_ = nullptr;
  int epoll_fd_ = -1;  // the sockets curl asks to watch, and wake_fd_
  int wake_fd_ = -1;   // an eventfd
  int64_t timer_due_ns_ = -1;  // when curl wants its timeout handled (-1: no timer)
  int running_ = 0;
};

}  // namespace nostall

#endif  // NOSTALL_STORE_CURL_EVENTS_H_
