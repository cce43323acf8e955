// Each WRONG_* case is one misuse of a lock that clang's thread-safety analysis must refuse
// (tests/thread_safety/check_thread_safety.cmake compiles this file once per case, with that
// case defined, and expects the diagnostic on the `// expect:` line under the case, whole).
#include "util/mutex.h"

namespace {

class Counter {
 public:
  // clang-format off (an expected diagnostic must stay on one line)
#if defined(WRONG_UNLOCKED_READ)
  // expect: reading variable 'value_' requires holding mutex 'mu_'
  int Read() { return value_; }
#elif defined(WRONG_UNLOCKED_WRITE)
  // expect: writing variable 'value_' requires holding mutex 'mu_' exclusively
  void Write() { value_ = 1; }
#elif defined(WRONG_REQUIRES_CALL)
  // expect: calling function 'AddLocked' requires holding mutex 'mu_' exclusively
  void Add() { AddLocked(); }
#elif defined(WRONG_USE_AFTER_UNLOCK)
  // expect: writing variable 'value_' requires holding mutex 'mu_' exclusively
  void Add() {
    idem::util::MutexLock lock(mu_);
    lock.Unlock();
    ++value_;
  }
#elif defined(WRONG_LOCK_LEAKED)
  // expect: mutex 'mu_' is still held at the end of function
  void Add() {
    mu_.Lock();
    AddLocked();
  }
#elif defined(WRONG_DOUBLE_LOCK)
  // expect: acquiring mutex 'mu_' that is already held
  void Add() {
    idem::util::MutexLock outer(mu_);
    idem::util::MutexLock inner(mu_);
  }
#elif defined(WRONG_UNANNOTATED_PREDICATE)
  // expect: reading variable 'value_' requires holding mutex 'mu_'
  void WaitPositive() {
    idem::util::MutexLock lock(mu_);
    cv_.Wait(lock, [&] { return value_ > 0; });
  }
#elif defined(WRONG_WRITE_UNDER_READER_LOCK)
  // expect: writing variable 'names_' requires holding mutex 'names_mu_' exclusively
  void Add() {
    idem::util::ReaderMutexLock lock(names_mu_);
    ++names_;
  }
#elif defined(WRONG_UNLOCKED_SHARED_READ)
  // expect: reading variable 'names_' requires holding mutex 'names_mu_'
  int Names() { return names_; }
#elif defined(WRONG_LOCK_ORDER)
  // expect: mutex 'mu_' must be acquired before 'after_mu_'
  void Add() {
    idem::util::MutexLock after(after_mu_);
    idem::util::MutexLock before(mu_);
  }
#else
#error "define one WRONG_* case"
#endif
  // clang-format on

 private:
  void AddLocked() IDEM_REQUIRES(mu_) { ++value_; }

  idem::util::Mutex mu_;
  idem::util::CondVar cv_;
  int value_ IDEM_GUARDED_BY(mu_) = 0;
  idem::util::SharedMutex names_mu_;
  int names_ IDEM_GUARDED_BY(names_mu_) = 0;
  idem::util::Mutex after_mu_ IDEM_ACQUIRED_AFTER(mu_);
};

}  // namespace
