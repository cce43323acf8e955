// RecordCounts: a store's live records counted by state and type without reading them, kept by
// the process that writes every record (a store directory's owner) as it writes them
// (docs/design/stats-plan.md, increment 1: the structure; it is not yet kept by the owner).
//
// Done and failed records are counted in buckets of their expiry (kBucket wide): a record whose
// retention passes leaves the count at the end of its bucket, with no call, so that a purge, the
// compaction filter or anything else that removes expired records need not be seen. The price is
// precision: a done or failed record is still counted for less than kBucket after its expiry.
// Pending records are kept one by one (the requests in flight), so their split into pending and
// timed out, and the oldest one, are exact at the moment asked.
//
// Not thread-safe.

#ifndef IDEM_BACKEND_RECORD_COUNTS_H_
#define IDEM_BACKEND_RECORD_COUNTS_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "idem/record.h"

namespace idem::backend {

class RecordCounts {
 public:
  using TimePoint = std::chrono::system_clock::time_point;
  static constexpr std::chrono::minutes kBucket{1};

  // What `idem stats` prints of the records.
  struct Figures {
    uint64_t records = 0;
    // "pending" (lease live), "timeout" (lease passed), "done", "failed": those with a record.
    std::map<std::string, uint64_t, std::less<>> by_state;
    std::map<std::string, uint64_t, std::less<>> by_type;
    // The pending record created first, and its key: none when nothing is pending.
    std::optional<std::pair<std::string, TimePoint>> oldest_pending;
  };

  // A write of `key`: the record stored before it (null: none) becomes `after` (null: removed,
  // as by Forget). Records are taken as stored, whether or not their retention has passed.
  void Move(std::string_view key, const Record* before, const Record* after);

  // The live records (retention not passed at `now`, to kBucket for done and failed).
  Figures Count(TimePoint now) const;

  // Drops what can no longer count at `now` or later (the buckets that ended, the pending
  // records whose retention passed): called now and then, so that memory follows the live
  // records.
  void DropExpired(TimePoint now);

  // The end of the bucket a done or failed record expiring at `expires` is counted in.
  static TimePoint BucketEnd(TimePoint expires);

 private:
  struct Pending {
    std::string type;
    TimePoint created;
    TimePoint lease_deadline;
    TimePoint expires;
  };
  // (bucket end, state, type) -> how many done or failed records.
  using Cell = std::tuple<TimePoint, State, std::string>;

  void Add(std::string_view key, const Record& record, int64_t delta);

  std::map<Cell, uint64_t> finished_;
  std::unordered_map<std::string, Pending> pending_;
};

}  // namespace idem::backend

#endif  // IDEM_BACKEND_RECORD_COUNTS_H_
