// Uses every part of src/util/mutex.h the way src/ does; must compile without a thread-safety
// finding (tests/thread_safety/check_thread_safety.cmake).
#include "util/mutex.h"

namespace {

class Counter {
 public:
  void Add() {
    idem::util::MutexLock lock(mu_);
    ++value_;
    cv_.NotifyAll();
  }

  int WaitAtLeast(int wanted) {
    idem::util::MutexLock lock(mu_);
    cv_.Wait(lock, [&]() IDEM_REQUIRES(mu_) { return value_ >= wanted; });
    const int seen = value_;
    lock.Unlock();
    Report(seen);
    lock.Lock();
    return value_;
  }

  bool TryAdd() {
    if (!mu_.TryLock()) {
      return false;
    }
    AddLocked();
    mu_.Unlock();
    return true;
  }

  template <class Attempt>
  static bool Retry(Attempt attempt) {
    return attempt();
  }

  bool AddThroughTemplate() {
    idem::util::MutexLock lock(mu_);
    return Retry([&] {
      mu_.AssertHeld();
      AddLocked();
      return true;
    });
  }

  void AddInOrder() {
    idem::util::MutexLock first(mu_);
    idem::util::MutexLock second(after_mu_);
    ++value_;
  }

 private:
  void AddLocked() IDEM_REQUIRES(mu_) { ++value_; }
  static void Report(int) {}

  idem::util::Mutex mu_;
  idem::util::CondVar cv_;
  int value_ IDEM_GUARDED_BY(mu_) = 0;
  idem::util::Mutex after_mu_ IDEM_ACQUIRED_AFTER(mu_);
};

class Names {
 public:
  bool Has(int name) {
    idem::util::ReaderMutexLock lock(mu_);
    return name < count_;
  }

  void Add() {
    idem::util::WriterMutexLock lock(mu_);
    ++count_;
  }

 private:
  idem::util::SharedMutex mu_;
  int count_ IDEM_GUARDED_BY(mu_) = 0;
};

}  // namespace

bool UseNames() {
  Names names;
  names.Add();
  return names.Has(0);
}

int UseCounter() {
  Counter counter;
  counter.Add();
  counter.TryAdd();
  counter.AddThroughTemplate();
  counter.AddInOrder();
  return counter.WaitAtLeast(1);
}
