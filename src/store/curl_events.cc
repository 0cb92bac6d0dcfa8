#include "store/curl_events.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "common/clock.h"

namespace nostall {

Result<std::unique_ptr<CurlEvents>> CurlEvents::Create() {
  std::unique_ptr<CurlEvents> e(new CurlEvents);
  e->multi_ = curl_multi_init();
  if (e->multi_ == nullptr) return Internal("libcurl could not make a multi handle");
  e->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  e->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (e->epoll_fd_ < 0 || e->wake_fd_ < 0) {
    return ResourceExhausted(std::string("the S3 client could not make its event loop: ") +
                             std::strerror(errno));
  }
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.fd = e->wake_fd_;
  epoll_ctl(e->epoll_fd_, EPOLL_CTL_ADD, e->wake_fd_, &wake);
  curl_multi_setopt(e->multi_, CURLMOPT_SOCKETFUNCTION, &CurlEvents::OnSocket);
  curl_multi_setopt(e->multi_, CURLMOPT_SOCKETDATA, e.get());
  curl_multi_setopt(e->multi_, CURLMOPT_TIMERFUNCTION, &CurlEvents::OnTimer);
  curl_multi_setopt(e->multi_, CURLMOPT_TIMERDATA, e.get());
  return e;
}

CurlEvents::~CurlEvents() {
  if (multi_ != nullptr) curl_multi_cleanup(multi_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void CurlEvents::Wake() {
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

// curl's socket callback: which sockets to watch, for what.
int CurlEvents::OnSocket(CURL*, curl_socket_t fd, int what, void* user, void*) {
  auto* self = static_cast<CurlEvents*>(user);
  if (what == CURL_POLL_REMOVE) {
    epoll_ctl(self->epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);  // may be closed already: fine
    return 0;
  }
  epoll_event ev{};
  ev.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0u) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u);
  ev.data.fd = fd;
  if (epoll_ctl(self->epoll_fd_, EPOLL_CTL_MOD, fd, &ev) != 0 && errno == ENOENT) {
    epoll_ctl(self->epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
  return 0;
}

// curl's timer callback: when to call it back with CURL_SOCKET_TIMEOUT.
int CurlEvents::OnTimer(CURLM*, long timeout_ms, void* user) {
  auto* self = static_cast<CurlEvents*>(user);
  self->timer_due_ns_ = timeout_ms < 0 ? -1 : NowNs() + static_cast<int64_t>(timeout_ms) * 1000000;
  return 0;
}

void CurlEvents::RunDueTimers() {
  if (timer_due_ns_ >= 0 && timer_due_ns_ <= NowNs()) {
    timer_due_ns_ = -1;
    curl_multi_socket_action(multi_, CURL_SOCKET_TIMEOUT, 0, &running_);
  }
}

void CurlEvents::Wait(int64_t due_ns) {
  if (timer_due_ns_ >= 0) due_ns = std::min(due_ns, timer_due_ns_);
  const int64_t now = NowNs();
  const int wait_ms =
      due_ns <= now ? 0 : static_cast<int>(std::min<int64_t>(100, (due_ns - now + 999999) / 1000000));
  epoll_event events[64];
  const int n = epoll_wait(epoll_fd_, events, 64, wait_ms);
  for (int k = 0; k < n; ++k) {
    const int fd = events[k].data.fd;
    if (fd == wake_fd_) {
      uint64_t count;
      (void)!read(wake_fd_, &count, sizeof count);
      continue;
    }
    const uint32_t ev = events[k].events;
    const int flags = ((ev & EPOLLIN) ? CURL_CSELECT_IN : 0) | ((ev & EPOLLOUT) ? CURL_CSELECT_OUT : 0) |
                      ((ev & (EPOLLERR | EPOLLHUP)) ? CURL_CSELECT_ERR : 0);
    curl_multi_socket_action(multi_, fd, flags, &running_);
  }
}

}  // namespace nostall
