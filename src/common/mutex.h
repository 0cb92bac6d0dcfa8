// A mutex and its lock with clang's thread-safety annotations, so that
// `make check-locks` (-Wthread-safety -Werror) proves at compile time that
// every GUARDED_BY member is touched only with its mutex held. libstdc++'s
// std::mutex carries no annotations; this is a thin wrapper around it.
//
//   class Queue {
//     Mutex mu_;
//     std::deque<int> items_ GUARDED_BY(mu_);
//     void Push(int v) EXCLUDES(mu_) { MutexLock lock(&mu_); items_.push_back(v); }
//   };
//
// Condition variables wait on lock.native(); write the wait as a loop in the
// function that holds the lock (`while (!ready()) cv.wait(lock.native());`),
// so the analysis sees the condition read under the lock.
#ifndef NOSTALL_COMMON_MUTEX_H_
#define NOSTALL_COMMON_MUTEX_H_

#include <mutex>

#if defined(__clang__)
#define NOSTALL_TSA(x) __attribute__((x))
#else
#define NOSTALL_TSA(x)
#endif

#define CAPABILITY(x) NOSTALL_TSA(capability(x))
#define SCOPED_CAPABILITY NOSTALL_TSA(scoped_lockable)
#define GUARDED_BY(x) NOSTALL_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) NOSTALL_TSA(pt_guarded_by(x))
#define REQUIRES(...) NOSTALL_TSA(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) NOSTALL_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE(...) NOSTALL_TSA(release_capability(__VA_ARGS__))
#define EXCLUDES(...) NOSTALL_TSA(locks_excluded(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS NOSTALL_TSA(no_thread_safety_analysis)

namespace nostall {

class CAPABILITY("mutex") Mutex {
 public:
  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  std::mutex& native() { return mu_; }

 private:
  std::mutex mu_;
};

// Holds `mu` for its scope; Unlock/Lock let go of it and take it again in
// between (for I/O or decoding done without the lock).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : lock_(mu->native()) {}
  ~MutexLock() RELEASE() {}
  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }
  // For std::condition_variable waits.
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace nostall

#endif  // NOSTALL_COMMON_MUTEX_H_
