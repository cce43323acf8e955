#include "backend/record_counts.h"

#include <algorithm>
#include <tuple>

namespace idem::backend {

RecordCounts::TimePoint RecordCounts::BucketEnd(TimePoint expires) {
  // The bucket [start, end) holding `expires`, on whole minutes since the epoch (floor, not
  // truncation, for times before it).
  static_assert(kBucket == std::chrono::minutes(1), "buckets are whole minutes");
  const auto start = std::chrono::floor<std::chrono::minutes>(expires.time_since_epoch());
  return TimePoint(std::chrono::duration_cast<TimePoint::duration>(start + kBucket));
}

void RecordCounts::Move(std::string_view key, const storage::RecordSummary* before,
                        const storage::RecordSummary* after, TimePoint now) {
  EndBuckets(now);
  if (before != nullptr) Add(key, *before, -1);
  if (after != nullptr) Add(key, *after, +1);
}

void RecordCounts::Move(std::string_view key, const Record* before, const Record* after,
                        TimePoint now) {
  std::optional<storage::RecordSummary> was, is;
  if (before != nullptr) was = storage::RecordSummary::Of(*before);
  if (after != nullptr) is = storage::RecordSummary::Of(*after);
  Move(key, was ? &*was : nullptr, is ? &*is : nullptr, now);
}

void RecordCounts::Add(std::string_view key, const storage::RecordSummary& record, int64_t delta) {
  if (record.state != State::kPending) {
    AddFinished(Cell(record.state, record.type), BucketEnd(record.expires), delta);
    return;
  }
  // Found by the key as it is: no copy of it unless it is new.
  const auto found = pending_.find(key);
  if (found == pending_.end()) {
    if (delta > 0) {
      pending_.emplace(std::string(key),
                       Pending{record.type, record.created, record.lease_deadline, record.expires});
    } else if (delta_) {
      pending_.emplace(std::string(key), std::nullopt);
    }
  } else if (delta > 0) {  // an Extend, a takeover
    found->second = Pending{record.type, record.created, record.lease_deadline, record.expires};
  } else if (delta_) {
    found->second.reset();
  } else {
    pending_.erase(found);
  }
}

RecordCounts::CellId RecordCounts::Cell(State state, std::string_view type) {
  auto& ids = cell_ids_[state == State::kDone ? 0 : 1];
  if (const auto found = ids.find(type); found != ids.end()) return found->second;
  const auto id = static_cast<CellId>(cells_.size());
  cells_.emplace_back(state, std::string(type));
  totals_.push_back(0);
  ids.emplace(std::string(type), id);
  return id;
}

void RecordCounts::AddFinished(CellId cell, TimePoint bucket_end, int64_t delta) {
  // A bucket that ended has left the totals: a record in it counts no more, in or out.
  if (bucket_end <= ended_until_) return;
  totals_[cell] += delta;
  auto& bucket = ending_[bucket_end];
  const auto found = std::ranges::find(bucket, cell, &std::pair<CellId, int64_t>::first);
  if (found == bucket.end()) {
    bucket.emplace_back(cell, delta);
  } else if ((found->second += delta) == 0) {
    bucket.erase(found);
    if (bucket.empty()) ending_.erase(bucket_end);
  }
}

void RecordCounts::EndBuckets(TimePoint now) {
  if (now <= ended_until_) return;
  ended_until_ = now;
  while (!ending_.empty() && ending_.begin()->first <= now) {
    for (const auto& [cell, count] : ending_.begin()->second) totals_[cell] -= count;
    ending_.erase(ending_.begin());
  }
}

void RecordCounts::CountInto(TimePoint now, StoreStats& stats) {
  EndBuckets(now);
  stats.records = 0;
  stats.by_state.clear();
  stats.by_type.clear();
  stats.oldest_pending.reset();
  const auto count = [&stats](std::string_view state, const std::string& type, uint64_t n) {
    if (n == 0) return;
    stats.records += n;
    stats.by_state[std::string(state)] += n;
    stats.by_type[type] += n;
  };
  for (CellId cell = 0; cell < cells_.size(); ++cell) {
    // Negative only while a delta waits for its base.
    if (totals_[cell] > 0) {
      count(idem::StateName(cells_[cell].first), cells_[cell].second,
            static_cast<uint64_t>(totals_[cell]));
    }
  }
  // The oldest by creation, then by key (as a scan in key order finds it first).
  const std::pair<const std::string, std::optional<Pending>>* oldest = nullptr;
  for (auto it = pending_.begin(); it != pending_.end();) {
    const std::optional<Pending>& pending = it->second;
    if (pending && pending->expires <= now && !delta_) {
      it = pending_.erase(it);
      continue;
    }
    if (pending && pending->expires > now) {
      count(pending->lease_deadline <= now ? "timeout" : "pending", pending->type, 1);
      if (oldest == nullptr || std::tie(pending->created, it->first) <
                                   std::tie(oldest->second->created, oldest->first)) {
        oldest = &*it;
      }
    }
    ++it;
  }
  if (oldest != nullptr) {
    Record& record = stats.oldest_pending.emplace();
    record.key = oldest->first;
    record.created = oldest->second->created;
  }
}

void RecordCounts::StartDelta() { delta_ = true; }

void RecordCounts::MergeBase(RecordCounts&& base) {
  for (const auto& [bucket_end, cells] : base.ending_) {
    for (const auto& [cell, count] : cells) {
      const auto& [state, type] = base.cells_[cell];
      AddFinished(Cell(state, type), bucket_end, count);
    }
  }
  // What was written since the base's moment replaces what the base holds of the same key.
  for (auto& [key, pending] : pending_) base.pending_.insert_or_assign(key, std::move(pending));
  std::erase_if(base.pending_, [](const auto& entry) { return !entry.second.has_value(); });
  pending_ = std::move(base.pending_);
  delta_ = false;
}

}  // namespace idem::backend
