// RecordCounts: a store's live records counted by state and type without reading them, kept by
// the process that writes every record (a store directory's owner) as it writes them
// (docs/design/stats-plan.md; LiveRecordCounts keeps one for the owner).
//
// Done and failed records are counted in buckets of their expiry (kBucket wide): a record whose
// retention passes leaves the count at the end of its bucket, with no call, so that a purge, the
// compaction filter or anything else that removes expired records need not be seen. The price is
// precision: a done or failed record is still counted for less than kBucket after its expiry.
// Pending records are kept one by one (the requests in flight), so their split into pending and
// timed out, and the oldest one, are exact at the moment asked.
//
// Counts are signed, so that the writes made after a moment can be counted apart (a delta:
// StartDelta) while the records as of that moment are counted by a scan, and added up at the end
// (MergeBase), whatever the order of the two.
//
// Not thread-safe.

#ifndef IDEM_BACKEND_RECORD_COUNTS_H_
#define IDEM_BACKEND_RECORD_COUNTS_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "idem/record.h"
#include "idem/store.h"
#include "storage/write_watcher.h"

namespace idem::backend {

class RecordCounts {
 public:
  using TimePoint = std::chrono::system_clock::time_point;
  static constexpr std::chrono::minutes kBucket{1};

  // A write of `key` at `now`: the record stored before it (null: none) becomes `after` (null:
  // removed, as by Forget). Records are taken as stored, whether or not their retention has
  // passed.
  void Move(std::string_view key, const storage::RecordSummary* before,
            const storage::RecordSummary* after, TimePoint now);
  void Move(std::string_view key, const Record* before, const Record* after, TimePoint now);

  // Sets stats' records, by_state, by_type and oldest_pending to the live records at `now`
  // (retention not passed; to kBucket for done and failed). Drops what ended by `now`.
  void CountInto(TimePoint now, StoreStats& stats);

  // From now on, a pending record moved out that this does not hold is remembered as gone, to
  // be taken out of the base that MergeBase adds.
  void StartDelta();
  // Adds `base`, the records as of the moment StartDelta was called (counted by a scan, by Move
  // with no `before`), to this, which then holds the writes made since: the sum is the store
  // now. Ends the delta.
  void MergeBase(RecordCounts&& base);

  // The counts as bytes, to be kept while no owner runs (LiveRecordCounts::Keep), and back:
  // nullopt when `encoded` is not what Encode wrote. Not during a delta.
  std::string Encode() const;
  static std::optional<RecordCounts> Decode(std::string_view encoded);

  // The end of the bucket a done or failed record expiring at `expires` is counted in.
  static TimePoint BucketEnd(TimePoint expires);

  // How many buckets and pending records are kept (for tests and the benchmark's memory figure).
  std::size_t Buckets() const { return ending_.size(); }
  std::size_t PendingKept() const { return pending_.size(); }

 private:
  struct Pending {
    std::string type;
    TimePoint created;
    TimePoint lease_deadline;
    TimePoint expires;
  };
  // A (state, type) of done or failed records, numbered in the order first seen.
  using CellId = uint32_t;

  void Add(std::string_view key, const storage::RecordSummary& record, int64_t delta);
  CellId Cell(State state, std::string_view type);
  void AddFinished(CellId cell, TimePoint bucket_end, int64_t delta);
  // Takes the buckets that ended by `now` out of the totals.
  void EndBuckets(TimePoint now);

  // Index 0: done, 1: failed; type -> cell.
  std::array<std::map<std::string, CellId, std::less<>>, 2> cell_ids_;
  std::vector<std::pair<State, std::string>> cells_;
  // By cell: the done and failed records whose bucket has not ended (the sum of ending_).
  std::vector<int64_t> totals_;
  // By bucket end: what leaves the totals then.
  std::map<TimePoint, std::vector<std::pair<CellId, int64_t>>> ending_;
  // Every bucket ending at or before this has left the totals.
  TimePoint ended_until_{};
  // Looked up by a string_view (a write's key), with no copy of it.
  struct KeyHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view key) const {
      return std::hash<std::string_view>{}(key);
    }
  };
  // nullopt: removed during a delta, to be taken out of the base.
  std::unordered_map<std::string, std::optional<Pending>, KeyHash, std::equal_to<>> pending_;
  bool delta_ = false;
};

}  // namespace idem::backend

#endif  // IDEM_BACKEND_RECORD_COUNTS_H_
