#include "backend/record_counts.h"

namespace idem::backend {

RecordCounts::TimePoint RecordCounts::BucketEnd(TimePoint expires) {
  // The bucket [start, end) holding `expires`, on whole minutes since the epoch (floor, not
  // truncation, for times before it).
  static_assert(kBucket == std::chrono::minutes(1), "buckets are whole minutes");
  const auto start = std::chrono::floor<std::chrono::minutes>(expires.time_since_epoch());
  return TimePoint(std::chrono::duration_cast<TimePoint::duration>(start + kBucket));
}

void RecordCounts::Move(std::string_view key, const Record* before, const Record* after) {
  if (before != nullptr) Add(key, *before, -1);
  if (after != nullptr) Add(key, *after, +1);
}

void RecordCounts::Add(std::string_view key, const Record& record, int64_t delta) {
  if (record.state == State::kPending) {
    if (delta > 0) {
      pending_[std::string(key)] =
          Pending{record.type, record.created, record.lease_deadline, record.expires};
    } else {
      pending_.erase(std::string(key));
    }
    return;
  }
  const Cell cell{BucketEnd(record.expires), record.state, record.type};
  if (delta > 0) {
    ++finished_[cell];
    return;
  }
  const auto found = finished_.find(cell);
  // A record counted in, moved out: its cell holds it, unless the cell was dropped as expired.
  if (found == finished_.end()) return;
  if (--found->second == 0) finished_.erase(found);
}

RecordCounts::Figures RecordCounts::Count(TimePoint now) const {
  Figures figures;
  for (const auto& [cell, count] : finished_) {
    const auto& [bucket_end, state, type] = cell;
    if (bucket_end <= now) continue;
    figures.records += count;
    figures.by_state[std::string(idem::StateName(state))] += count;
    figures.by_type[type] += count;
  }
  for (const auto& [key, pending] : pending_) {
    if (pending.expires <= now) continue;
    ++figures.records;
    ++figures.by_state[pending.lease_deadline <= now ? "timeout" : "pending"];
    ++figures.by_type[pending.type];
    if (!figures.oldest_pending || pending.created < figures.oldest_pending->second) {
      figures.oldest_pending.emplace(key, pending.created);
    }
  }
  return figures;
}

void RecordCounts::DropExpired(TimePoint now) {
  std::erase_if(finished_, [now](const auto& entry) { return std::get<0>(entry.first) <= now; });
  std::erase_if(pending_, [now](const auto& entry) { return entry.second.expires <= now; });
}

}  // namespace idem::backend
