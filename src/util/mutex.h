// util::Mutex, MutexLock and CondVar: std::mutex, std::unique_lock and std::condition_variable
// with Clang's thread-safety attributes (libstdc++'s carry none), and SharedMutex with its
// WriterMutexLock and ReaderMutexLock over std::shared_mutex, so that the clang-thread-safety
// build checks every member declared IDEM_GUARDED_BY(mu_) is used under mu_. Everything is
// inline and compiles to the std:: calls. There is no lower-case lock(): a std::lock_guard left
// on a util::Mutex does not compile.
//
// A wait predicate that reads guarded members is a lambda of its own to the analysis: declare it
// [&]() IDEM_REQUIRES(mu_) { ... }.

#ifndef IDEM_UTIL_MUTEX_H_
#define IDEM_UTIL_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>
#include <utility>

#include "util/thread_annotations.h"

namespace idem::util {

class IDEM_CAPABILITY("mutex") Mutex {
 public:
  void Lock() IDEM_ACQUIRE() { mu_.lock(); }
  void Unlock() IDEM_RELEASE() { mu_.unlock(); }
  bool TryLock() IDEM_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis that the caller holds this mutex (it checks nothing at run time).
  void AssertHeld() const IDEM_ASSERT_CAPABILITY(this) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds `mu` from construction to destruction, and may let it go and take it again meanwhile.
class IDEM_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) IDEM_ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() IDEM_RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() IDEM_RELEASE() { lock_.unlock(); }
  void Lock() IDEM_ACQUIRE() { lock_.lock(); }

 private:
  friend class CondVar;
  std::unique_lock<std::mutex> lock_;
};

class CondVar {
 public:
  void Wait(MutexLock& lock) { cv_.wait(lock.lock_); }
  template <class Predicate>
  void Wait(MutexLock& lock, Predicate done) {
    cv_.wait(lock.lock_, std::move(done));
  }
  template <class Clock, class Duration>
  std::cv_status WaitUntil(MutexLock& lock,
                           const std::chrono::time_point<Clock, Duration>& deadline) {
    return cv_.wait_until(lock.lock_, deadline);
  }
  template <class Clock, class Duration, class Predicate>
  bool WaitUntil(MutexLock& lock, const std::chrono::time_point<Clock, Duration>& deadline,
                 Predicate done) {
    return cv_.wait_until(lock.lock_, deadline, std::move(done));
  }
  template <class Rep, class Period, class Predicate>
  bool WaitFor(MutexLock& lock, const std::chrono::duration<Rep, Period>& timeout, Predicate done) {
    return cv_.wait_for(lock.lock_, timeout, std::move(done));
  }
  void NotifyOne() noexcept { cv_.notify_one(); }
  void NotifyAll() noexcept { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

// A reader/writer mutex, for state read far more often than it changes: many holders in shared
// mode (LockShared, ReaderMutexLock) or one in exclusive mode (Lock, WriterMutexLock). A member
// IDEM_GUARDED_BY it may be read under either and written only under the exclusive one.
class IDEM_CAPABILITY("mutex") SharedMutex {
 public:
  void Lock() IDEM_ACQUIRE() { mu_.lock(); }
  void Unlock() IDEM_RELEASE() { mu_.unlock(); }
  void LockShared() IDEM_ACQUIRE_SHARED() { mu_.lock_shared(); }
  void UnlockShared() IDEM_RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Holds a SharedMutex exclusively for its scope.
class IDEM_SCOPED_CAPABILITY WriterMutexLock {
 public:
  explicit WriterMutexLock(SharedMutex& mu) IDEM_ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~WriterMutexLock() IDEM_RELEASE() { mu_.Unlock(); }
  WriterMutexLock(const WriterMutexLock&) = delete;
  WriterMutexLock& operator=(const WriterMutexLock&) = delete;

 private:
  SharedMutex& mu_;
};

// Holds a SharedMutex in shared mode for its scope.
class IDEM_SCOPED_CAPABILITY ReaderMutexLock {
 public:
  explicit ReaderMutexLock(SharedMutex& mu) IDEM_ACQUIRE_SHARED(mu) : mu_(mu) { mu_.LockShared(); }
  ~ReaderMutexLock() IDEM_RELEASE() { mu_.UnlockShared(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  SharedMutex& mu_;
};

}  // namespace idem::util

#endif  // IDEM_UTIL_MUTEX_H_
