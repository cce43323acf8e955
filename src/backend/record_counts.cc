#include "backend/record_counts.h"

#include <algorithm>
#include <tuple>

#include "util/check.h"
#include "util/coding.h"
#include "util/time.h"

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

namespace {

constexpr char kEncodingVersion = 1;

void PutString(std::string& out, std::string_view text) {
  util::PutFixed32(out, static_cast<uint32_t>(text.size()));
  out += text;
}

void PutTime(std::string& out, RecordCounts::TimePoint time) {
  util::PutFixed64(out, static_cast<uint64_t>(util::ToMicros(time)));
}

// Reads what Encode wrote, each read checked against the bytes left.
struct Reader {
  std::string_view in;
  bool ok = true;

  std::string_view Bytes(std::size_t size) {
    if (!ok || in.size() < size) {
      ok = false;
      return {};
    }
    const std::string_view taken = in.substr(0, size);
    in.remove_prefix(size);
    return taken;
  }
  uint32_t Fixed32() {
    const std::string_view bytes = Bytes(4);
    return ok ? util::GetFixed32(bytes.data()) : 0;
  }
  uint64_t Fixed64() {
    const std::string_view bytes = Bytes(8);
    return ok ? util::GetFixed64(bytes.data()) : 0;
  }
  std::string_view String() { return Bytes(Fixed32()); }
  RecordCounts::TimePoint Time() {
    const auto micros = static_cast<int64_t>(Fixed64());
    if (!util::MicrosFitTimePoint(micros)) ok = false;
    return ok ? util::FromMicros(micros) : RecordCounts::TimePoint();
  }
};

}  // namespace

std::string RecordCounts::Encode() const {
  IDEM_DCHECK(!delta_);
  std::string out(1, kEncodingVersion);
  PutTime(out, ended_until_);
  util::PutFixed32(out, static_cast<uint32_t>(cells_.size()));
  for (const auto& [state, type] : cells_) {
    out += static_cast<char>(state);
    PutString(out, type);
  }
  util::PutFixed32(out, static_cast<uint32_t>(ending_.size()));
  for (const auto& [bucket_end, cells] : ending_) {
    PutTime(out, bucket_end);
    util::PutFixed32(out, static_cast<uint32_t>(cells.size()));
    for (const auto& [cell, delta] : cells) {
      util::PutFixed32(out, cell);
      util::PutFixed64(out, static_cast<uint64_t>(delta));
    }
  }
  util::PutFixed32(out, static_cast<uint32_t>(pending_.size()));
  for (const auto& [key, pending] : pending_) {
    PutString(out, key);
    PutString(out, pending->type);
    PutTime(out, pending->created);
    PutTime(out, pending->lease_deadline);
    PutTime(out, pending->expires);
  }
  return out;
}

std::optional<RecordCounts> RecordCounts::Decode(std::string_view encoded) {
  Reader in{encoded};
  if (in.Bytes(1) != std::string_view(&kEncodingVersion, 1)) return std::nullopt;
  RecordCounts counts;
  counts.ended_until_ = in.Time();
  const uint32_t cells = in.Fixed32();
  for (uint32_t i = 0; in.ok && i < cells; ++i) {
    const std::string_view state_byte = in.Bytes(1);
    const std::string_view type = in.String();
    if (!in.ok) return std::nullopt;
    const auto state = static_cast<State>(state_byte.front());
    const bool finished = state == State::kDone || state == State::kFailed;
    if (!finished || counts.Cell(state, type) != i) return std::nullopt;
  }
  // Damaged bytes must not make the sums overflow: at most 2^22 entries of at most 2^40 records
  // each (no store holds more) add up to less than 2^63. Entries of one cell and bucket add up
  // into one, which must be within the bound too, so that Encode writes what Decode reads.
  constexpr int64_t kMostDelta = int64_t{1} << 40;
  uint64_t entries_read = 0;
  const uint32_t buckets = in.Fixed32();
  for (uint32_t b = 0; in.ok && b < buckets; ++b) {
    const TimePoint bucket_end = in.Time();
    const uint32_t entries = in.Fixed32();
    for (uint32_t e = 0; in.ok && e < entries; ++e) {
      const CellId cell = in.Fixed32();
      const auto delta = static_cast<int64_t>(in.Fixed64());
      if (!in.ok || cell >= cells || bucket_end <= counts.ended_until_ || delta > kMostDelta ||
          delta < -kMostDelta || ++entries_read > (uint64_t{1} << 22)) {
        return std::nullopt;
      }
      counts.AddFinished(cell, bucket_end, delta);
    }
  }
  for (const auto& [bucket_end, bucket] : counts.ending_) {
    for (const auto& [cell, delta] : bucket) {
      if (delta > kMostDelta || delta < -kMostDelta) return std::nullopt;
    }
  }
  const uint32_t pending = in.Fixed32();
  for (uint32_t i = 0; in.ok && i < pending; ++i) {
    const std::string_view key = in.String();
    Pending record{std::string(in.String()), in.Time(), in.Time(), in.Time()};
    if (in.ok) counts.pending_.insert_or_assign(std::string(key), std::move(record));
  }
  if (!in.ok || !in.in.empty()) return std::nullopt;
  return counts;
}

}  // namespace idem::backend
