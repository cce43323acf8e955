// WriteWatcher: told of every record a storage writes, as it writes it (Storage::WatchWrites), so
// that the process that writes every record of a store directory (its owner) keeps their counts
// without reading them (backend::LiveRecordCounts).

#ifndef IDEM_STORAGE_WRITE_WATCHER_H_
#define IDEM_STORAGE_WRITE_WATCHER_H_

#include <chrono>
#include <string>
#include <string_view>

#include "idem/record.h"

namespace idem::storage {

// What the counts need of a record: its state, type and times (a copy of those, so that a write
// can take it before the record is moved from).
struct RecordSummary {
  State state = State::kPending;
  std::string type;
  std::chrono::system_clock::time_point created{};
  std::chrono::system_clock::time_point lease_deadline{};
  std::chrono::system_clock::time_point expires{};

  static RecordSummary Of(const Record& record) {
    return RecordSummary{record.state, record.type, record.created, record.lease_deadline,
                         record.expires};
  }
};

class WriteWatcher {
 public:
  using TimePoint = std::chrono::system_clock::time_point;
  virtual ~WriteWatcher() = default;
  // `key`'s record `before` (null: none, or one that could not be decoded) was replaced by
  // `after` (null: removed), written at `now` by the storage's clock. Called after the write
  // succeeded, while the key's lock is still held: two writes of one key are told in their order.
  // Not called for removals of records whose retention had passed (purge, compaction).
  virtual void Written(std::string_view key, const RecordSummary* before,
                       const RecordSummary* after, TimePoint now) = 0;
};

}  // namespace idem::storage

#endif  // IDEM_STORAGE_WRITE_WATCHER_H_
