#include "storage/rocksdb/periodic_sync.h"

#include <fmt/format.h>

namespace idem::storage {

PeriodicSync::PeriodicSync(std::chrono::milliseconds interval, std::function<Status()> sync,
                           LogSink log)
    : interval_(interval), sync_(std::move(sync)), log_(std::move(log)) {
  thread_ = std::thread([this] { Run(); });
}

PeriodicSync::~PeriodicSync() { Stop(); }

void PeriodicSync::Note() {
  if (due_.exchange(true, std::memory_order_acq_rel)) return;
  util::MutexLock lock(mu_);
  if (woken_) return;  // a retry is pending already, from an earlier due_since_
  woken_ = true;
  due_since_ = std::chrono::steady_clock::now();
  wake_.NotifyOne();
}

void PeriodicSync::Stop() {
  {
    util::MutexLock lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    wake_.NotifyOne();
  }
  thread_.join();
}

PeriodicSync::Counts PeriodicSync::counts() const {
  util::MutexLock lock(mu_);
  return counts_;
}

void PeriodicSync::Run() {
  util::MutexLock lock(mu_);
  while (!stopping_) {
    wake_.Wait(lock, [&]() IDEM_REQUIRES(mu_) { return woken_ || stopping_; });
    if (stopping_) break;
    // The oldest write not yet synced was noted at due_since_: it is synced an interval later.
    wake_.WaitUntil(lock, due_since_ + interval_, [&]() IDEM_REQUIRES(mu_) { return stopping_; });
    woken_ = false;
    lock.Unlock();
    SyncDue();
    lock.Lock();
  }
  lock.Unlock();
  SyncDue();  // what was written before Stop
}

void PeriodicSync::SyncDue() {
  if (!due_.exchange(false, std::memory_order_acq_rel)) return;
  const Status synced = sync_();
  util::MutexLock lock(mu_);
  ++counts_.syncs;
  if (synced.ok()) {
    if (failing_ && log_) {
      log_({LogSeverity::kInfo, "periodic_sync_recovered",
            "the periodic sync of its log works again"});
    }
    failing_ = false;
    return;
  }
  ++counts_.failures;
  // The writes stay due; the next attempt comes an interval from now.
  due_.store(true, std::memory_order_release);
  woken_ = true;
  due_since_ = std::chrono::steady_clock::now();
  if (!failing_ && log_) {
    const std::string message = fmt::format(
        "a periodic sync of its log failed ({}): calls made with kPeriodic since the last sync "
        "are not durable yet; retrying every {} ms",
        synced.ToString(), interval_.count());
    log_({LogSeverity::kError, "periodic_sync_failed", message});
  }
  failing_ = true;
}

}  // namespace idem::storage
