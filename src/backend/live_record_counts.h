// LiveRecordCounts: the owner of a store directory counts its live records by state and type as
// it writes them (RecordCounts), so that Store::GetStats answers without reading a record
// (docs/design/stats-plan.md). The records the store holds when the owner takes it are the counts
// its predecessor kept at a clean close, when nothing was written since; otherwise they are
// counted by a scan, run by the owner's housekeeping thread, of a view taken at the moment the
// watch of writes began, the writes meanwhile counted apart and added when the scan ends.
// Thread-safe.

#ifndef IDEM_BACKEND_LIVE_RECORD_COUNTS_H_
#define IDEM_BACKEND_LIVE_RECORD_COUNTS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "backend/record_counts.h"
#include "storage/storage.h"
#include "util/mutex.h"

namespace idem::backend {

class LiveRecordCounts final : public storage::WriteWatcher {
 public:
  // Watches `storage`'s writes (before any is made: see Storage::WatchWrites) and takes the view
  // of what it holds that CountStored counts. Null when the storage cannot be watched (other
  // processes write it too).
  static std::unique_ptr<LiveRecordCounts> Start(storage::Storage& storage);
  // Stops the watch.
  ~LiveRecordCounts() override;
  LiveRecordCounts(const LiveRecordCounts&) = delete;
  LiveRecordCounts& operator=(const LiveRecordCounts&) = delete;

  void Written(std::string_view key, const storage::RecordSummary* before,
               const storage::RecordSummary* after, TimePoint now) override;

  // Sets stats' record figures to the live records at `now`; false while the start-up count
  // runs, or when it failed (a record it could not decode): the caller counts by a scan.
  bool CountInto(TimePoint now, StoreStats& stats);

  // The start-up count: every record of the view Start took, then the writes told since. Called
  // once, by the owner's background thread (no thread of its own: a process that ends without
  // closing its store leaves no finished thread unjoined), which `meanwhile` lets do its own
  // work every few thousand records. Returns early, and the counts give up, after Stop.
  void CountStored(const std::function<void()>& meanwhile);
  // Makes a running CountStored return soon. Thread-safe.
  void Stop();
  // At a clean close, once nothing more is written: keeps the counts in the storage for the next
  // owner (Storage::KeepRecordCounts), when they are complete and at most kMostKeptBytes.
  void Keep();
  // The kept counts go through the log into a memtable, which every process that opens the store
  // next reads back into memory (a dump's included): with them at most this size, a store that
  // holds very many pending records (each kept with its key) is counted by a scan instead.
  static constexpr std::size_t kMostKeptBytes = 4 << 20;

 private:
  explicit LiveRecordCounts(storage::Storage& storage);

  storage::Storage& storage_;
  // Taken by Start, released by CountStored.
  std::unique_ptr<storage::ReadView> view_;
  std::atomic<bool> stopping_{false};
  util::Mutex mu_;
  RecordCounts counts_ IDEM_GUARDED_BY(mu_);
  bool counted_ IDEM_GUARDED_BY(mu_) = false;
  // The start-up count failed: writes are no longer counted, and stats are counted by a scan.
  bool gave_up_ IDEM_GUARDED_BY(mu_) = false;
};

}  // namespace idem::backend

#endif  // IDEM_BACKEND_LIVE_RECORD_COUNTS_H_
