// EngineBackend's counters (idem/counters.h: sharded as they are counted, added to the earlier
// owners' and kept in the storage for the next one) and its stats (Store::GetStats). The calls
// are in engine_backend.cc.

#include <unistd.h>

#include "backend/engine_backend.h"
#include "util/thread_shard.h"

namespace idem::backend {

void EngineBackend::AtomicCounters::Count(const engine::TransitionRequest& request) {
  if (request.kind == engine::TransitionKind::kComplete) {
    Add<&Counters::completes>(1);
  } else if (request.kind == engine::TransitionKind::kFail) {
    if (request.failure == Failure::kTerminal) {
      Add<&Counters::terminal_fails>(1);
    } else {
      Add<&Counters::fails>(1);
    }
  }
}

const Status& EngineBackend::CountedError(const Status& status) {
  switch (status.code()) {
    case Status::Code::kIOError:
      counters_.Add<&Counters::io_errors>(1);
      break;
    case Status::Code::kCorruption:
      counters_.Add<&Counters::corruption_errors>(1);
      break;
    case Status::Code::kTimedOut:
      counters_.Add<&Counters::timeout_errors>(1);
      break;
    case Status::Code::kBusy:
      counters_.Add<&Counters::busy_errors>(1);
      break;
    case Status::Code::kUnavailable:
      counters_.Add<&Counters::unavailable_errors>(1);
      break;
    default:
      break;
  }
  return status;
}

void EngineBackend::AtomicCounters::Count(const Claim& claim) {
  switch (claim.outcome) {
    case Outcome::kAcquired:
      Add<&Counters::claims>(1);
      if (claim.took_over) Add<&Counters::takeovers>(1);
      break;
    case Outcome::kReplay:
      Add<&Counters::replays>(1);
      break;
    case Outcome::kInProgress:
      Add<&Counters::in_progress>(1);
      break;
    case Outcome::kFailed:
      Add<&Counters::failed>(1);
      break;
    case Outcome::kMismatch:
      Add<&Counters::mismatches>(1);
      break;
  }
}

EngineBackend::AtomicCounters::Shard& EngineBackend::AtomicCounters::ThreadShard() {
  return shards_[util::ThreadShard(kShards)];
}

Counters EngineBackend::AtomicCounters::Snapshot() const {
  Counters counters;
  for (std::size_t i = 0; i < kCounterCount; ++i) {
    uint64_t total = 0;
    for (const Shard& shard : shards_) total += shard.values[i].load(std::memory_order_relaxed);
    counters.*kCounters[i].field = total;
  }
  return counters;
}

void EngineBackend::SaveCounters() {
  const storage::KeptCounters now = CountersNow();
  if (now == last_saved_) return;
  // Not saved (a full disk, say): tried again at the next interval.
  if (storage_->SaveCounters(now).ok()) last_saved_ = now;
}

storage::KeptCounters EngineBackend::CountersNow() const {
  storage::KeptCounters now{.counters = counters_.Snapshot(), .latencies = latencies_.Snapshot()};
  Counters& counters = now.counters;
  if (disk_quota_) counters.quota_exceeded = disk_quota_->crossings();
  if (stall_watch_) counters.stalls = stall_watch_->stalls();
  for (const CounterInfo& counter : kCounters) {
    counters.*counter.field += saved_.counters.*counter.field;
  }
  for (const LatencyInfo& latency : kLatencies) {
    LatencyHistogram& histogram = now.latencies.*latency.field;
    const LatencyHistogram& saved = saved_.latencies.*latency.field;
    for (std::size_t bucket = 0; bucket < kLatencyBucketCount; ++bucket) {
      histogram.buckets[bucket] += saved.buckets[bucket];
    }
    histogram.sum_nanoseconds += saved.sum_nanoseconds;
  }
  return now;
}

void EngineBackend::TimeCall(std::size_t row, LatencyRecorder::Clock::time_point started,
                             std::size_t grouped_before) {
  if (storage_->GroupedWrites() > grouped_before) {
    latencies_.Defer(row, started, grouped_before);
  } else {
    latencies_.Observe(row, started);
  }
}

Result<Counters> EngineBackend::GetCounters() { return CountersNow().counters; }

Result<OwnerCounters> EngineBackend::GetOwnerCounters() {
  OwnerCounters answer;
  const storage::KeptCounters now = CountersNow();
  answer.counters = now.counters;
  answer.latencies = now.latencies;
  if (!options_.read_only) {
    answer.live = true;
    answer.pid = ::getpid();
    answer.since = created_;
  }
  return answer;
}

Result<EngineBackend::Stats> EngineBackend::GetStats() {
  Stats answer;
  answer.stats.engine = storage_->ReadEngineHealth();
  const TimePoint now = options_.clock ? options_.clock->Now() : std::chrono::system_clock::now();
  if (live_counts_ && live_counts_->CountInto(now, answer.stats)) {
    answer.counted = true;
    answer.stats.at = now;
    answer.stats.precision = RecordCounts::kBucket;
  }
  return answer;
}

}  // namespace idem::backend
