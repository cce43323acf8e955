#include "backend/live_record_counts.h"

namespace idem::backend {

std::unique_ptr<LiveRecordCounts> LiveRecordCounts::Start(storage::Storage& storage) {
  std::unique_ptr<LiveRecordCounts> counts(new LiveRecordCounts(storage));
  {
    // The writes told from now on are counted apart from the records the view holds.
    util::MutexLock lock(counts->mu_);
    counts->counts_.StartDelta();
  }
  Result<std::unique_ptr<storage::ReadView>> view = storage.WatchWrites(counts.get());
  if (!view.ok()) return nullptr;
  // Nothing was written since they were kept: they are the records of the view's moment.
  if (const std::optional<std::string> kept = storage.TakeKeptRecordCounts()) {
    if (std::optional<RecordCounts> base = RecordCounts::Decode(*kept)) {
      util::MutexLock lock(counts->mu_);
      counts->counts_.MergeBase(std::move(*base));
      counts->counted_ = true;
      return counts;
    }
  }
  counts->view_ = std::move(*view);
  return counts;
}

LiveRecordCounts::LiveRecordCounts(storage::Storage& storage) : storage_(storage) {}

LiveRecordCounts::~LiveRecordCounts() { static_cast<void>(storage_.WatchWrites(nullptr)); }

void LiveRecordCounts::Stop() { stopping_.store(true, std::memory_order_relaxed); }

void LiveRecordCounts::Keep() {
  util::MutexLock lock(mu_);
  if (!counted_ || gave_up_) return;
  const std::string encoded = counts_.Encode();
  if (encoded.size() <= kMostKeptBytes) static_cast<void>(storage_.KeepRecordCounts(encoded));
}

void LiveRecordCounts::CountStored(const std::function<void()>& meanwhile) {
  if (view_ == nullptr) return;  // counted already: the kept counts
  constexpr std::uint64_t kRecordsBetweenBreaks = 4096;
  RecordCounts base;
  std::uint64_t scanned_records = 0;
  const Status scanned = storage_.Scan(
      ScanOptions{},
      [&](Record&& record, TimePoint now) {
        base.Move(record.key, nullptr, &record, now);
        if (++scanned_records % kRecordsBetweenBreaks == 0) meanwhile();
        return !stopping_.load(std::memory_order_relaxed);
      },
      view_.get());
  view_.reset();  // lets compaction drop what was overwritten since
  util::MutexLock lock(mu_);
  if (!scanned.ok() || stopping_.load(std::memory_order_relaxed)) {
    gave_up_ = true;
    counts_ = RecordCounts();
    return;
  }
  counts_.MergeBase(std::move(base));
  counted_ = true;
}

void LiveRecordCounts::Written(std::string_view key, const storage::RecordSummary* before,
                               const storage::RecordSummary* after, TimePoint now) {
  util::MutexLock lock(mu_);
  if (!gave_up_) counts_.Move(key, before, after, now);
}

bool LiveRecordCounts::CountInto(TimePoint now, StoreStats& stats) {
  util::MutexLock lock(mu_);
  if (!counted_) return false;
  counts_.CountInto(now, stats);
  return true;
}

}  // namespace idem::backend
