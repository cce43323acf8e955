// PeriodicSync: makes the writes of Durability::kPeriodic durable within an interval, as Redis's
// `appendfsync everysec` does. A writer notes its write once it has returned from RocksDB (its
// bytes are in the OS); a background thread syncs the log once the oldest write not yet synced
// is `interval` old, and sleeps, without waking, while nothing is written (an idle device).

#ifndef IDEM_STORAGE_ROCKSDB_PERIODIC_SYNC_H_
#define IDEM_STORAGE_ROCKSDB_PERIODIC_SYNC_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include "idem/log.h"
#include "idem/status.h"
#include "util/mutex.h"

namespace idem::storage {

class PeriodicSync {
 public:
  // `sync` makes every write that returned before it was called durable (RocksDB's SyncWAL);
  // `log` hears a failed sync, once until a sync works again, and then that it works again.
  // `interval` must be positive.
  PeriodicSync(std::chrono::milliseconds interval, std::function<Status()> sync, LogSink log);
  // Stop().
  ~PeriodicSync();
  PeriodicSync(const PeriodicSync&) = delete;
  PeriodicSync& operator=(const PeriodicSync&) = delete;

  // A write that must be durable within the interval has returned. Lock-free unless nothing was
  // due: then it wakes the thread.
  void Note();
  // Syncs what is due, at once, and ends the thread. Later notes are not synced.
  void Stop();

  // What the thread has done (tests and the benchmark).
  struct Counts {
    uint64_t syncs = 0;     // syncs made, successful or not
    uint64_t failures = 0;  // of which failed
  };
  Counts counts() const;

 private:
  void Run();
  // Syncs when a write is due. On failure the writes stay due, and the thread retries after an
  // interval.
  void SyncDue();

  const std::chrono::milliseconds interval_;
  const std::function<Status()> sync_;
  const LogSink log_;
  // Set by a write (Note), cleared by the thread just before it syncs: a write noted after the
  // clear is synced by the next sync. Both sides exchange it, so that a write whose note found it
  // set happened before the clear, and its bytes before the sync that follows.
  std::atomic<bool> due_{false};

  mutable util::Mutex mu_;
  util::CondVar wake_;
  bool stopping_ IDEM_GUARDED_BY(mu_) = false;
  // A write became due, or a failed sync must be retried.
  bool woken_ IDEM_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point due_since_ IDEM_GUARDED_BY(mu_);
  bool failing_ IDEM_GUARDED_BY(mu_) = false;  // the last sync failed (it was logged)
  Counts counts_ IDEM_GUARDED_BY(mu_);

  std::thread thread_;  // last: started once the rest is ready
};

}  // namespace idem::storage

#endif  // IDEM_STORAGE_ROCKSDB_PERIODIC_SYNC_H_
