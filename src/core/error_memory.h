// ErrorMemory: the last failure of a store that a call in this process met (StoreHealth's
// last_error), kept by the store's core for every handle on it.

#ifndef IDEM_CORE_ERROR_MEMORY_H_
#define IDEM_CORE_ERROR_MEMORY_H_

#include <chrono>
#include <utility>

#include "idem/status.h"
#include "util/mutex.h"

namespace idem::core {

class ErrorMemory {
 public:
  // Whether `status` is a failure of the store (its files, its owner, its server), as opposed to
  // a call's outcome (kNotFound, kInProgress, kMismatch, kFailed, kLeaseLost, kConflict) or the
  // caller's mistake (kInvalidArgument).
  static bool IsStoreFailure(const Status& status) {
    switch (status.code()) {
      case Status::Code::kIOError:
      case Status::Code::kCorruption:
      case Status::Code::kUnavailable:
      case Status::Code::kTimedOut:
      case Status::Code::kBusy:
      case Status::Code::kNewerVersion:
        return true;
      default:
        return false;
    }
  }

  // Keeps `status` when it is a store's failure. An OK status costs one branch: this runs after
  // every call.
  void Note(const Status& status) {
    if (status.ok() || !IsStoreFailure(status)) return;
    util::MutexLock lock(mu_);
    last_ = status;
    at_ = std::chrono::system_clock::now();
  }
  template <class T>
  void Note(const Result<T>& result) {
    if (!result.ok()) Note(result.status());
  }

  // The last failure kept and when it happened; OK at the epoch when none was.
  std::pair<Status, std::chrono::system_clock::time_point> Last() const {
    util::MutexLock lock(mu_);
    return {last_, at_};
  }

 private:
  mutable util::Mutex mu_;
  Status last_ IDEM_GUARDED_BY(mu_);
  std::chrono::system_clock::time_point at_ IDEM_GUARDED_BY(mu_){};
};

}  // namespace idem::core

#endif  // IDEM_CORE_ERROR_MEMORY_H_
