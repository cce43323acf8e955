// LatencyRecorder (latency_recorder.h).

#include "backend/latency_recorder.h"

#include <algorithm>
#include <iterator>
#include <vector>

#include "util/thread_shard.h"

namespace idem::backend {
namespace {

// A call timed when its thread's write group is written.
struct Deferred {
  const LatencyRecorder* recorder;
  std::size_t row;
  LatencyRecorder::Clock::time_point started;
  std::size_t write_index;
};

// The calling thread's deferred calls: a thread runs one write group at a time.
std::vector<Deferred>& ThreadDeferred() {
  thread_local std::vector<Deferred> deferred;
  return deferred;
}

}  // namespace

std::size_t LatencyBucket(std::chrono::nanoseconds took) {
  return static_cast<std::size_t>(
      std::lower_bound(std::begin(kLatencyBounds), std::end(kLatencyBounds), took) -
      std::begin(kLatencyBounds));
}

void LatencyRecorder::Add(std::size_t row, std::chrono::nanoseconds took) {
  took = std::max(took, std::chrono::nanoseconds::zero());
  Row& values = shards_[util::ThreadShard(kShards)].rows[row];
  values[LatencyBucket(took)].fetch_add(1, std::memory_order_relaxed);
  values[kLatencyBucketCount].fetch_add(static_cast<uint64_t>(took.count()),
                                        std::memory_order_relaxed);
}

void LatencyRecorder::Observe(std::size_t row, Clock::time_point started) {
  Add(row, Clock::now() - started);
}

void LatencyRecorder::StartGroup() { ThreadDeferred().clear(); }

void LatencyRecorder::Defer(std::size_t row, Clock::time_point started, std::size_t write_index) {
  ThreadDeferred().push_back(
      {.recorder = this, .row = row, .started = started, .write_index = write_index});
}

void LatencyRecorder::Settle(std::span<const Status> outcomes) {
  std::vector<Deferred>& deferred = ThreadDeferred();
  const Clock::time_point now = Clock::now();
  for (const Deferred& call : deferred) {
    if (call.recorder == this && call.write_index < outcomes.size() &&
        outcomes[call.write_index].ok()) {
      Add(call.row, now - call.started);
    }
  }
  deferred.clear();
}

Latencies LatencyRecorder::Snapshot() const {
  Latencies latencies;
  for (std::size_t row = 0; row < kLatencyCount; ++row) {
    LatencyHistogram& histogram = latencies.*kLatencies[row].field;
    for (const Shard& shard : shards_) {
      const Row& values = shard.rows[row];
      for (std::size_t bucket = 0; bucket < kLatencyBucketCount; ++bucket) {
        histogram.buckets[bucket] += values[bucket].load(std::memory_order_relaxed);
      }
      histogram.sum_nanoseconds += values[kLatencyBucketCount].load(std::memory_order_relaxed);
    }
  }
  return latencies;
}

}  // namespace idem::backend
