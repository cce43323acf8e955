// LatencyRecorder: the latency histograms of an EngineBackend's calls (idem/counters.h,
// Latencies), counted in per-thread shards as its counters are. A call whose write goes into a
// write group (storage::Storage::StartWriteGroup) is timed when the group is written, since its
// answer waits for that write.

#ifndef IDEM_BACKEND_LATENCY_RECORDER_H_
#define IDEM_BACKEND_LATENCY_RECORDER_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <span>

#include "idem/counters.h"
#include "idem/status.h"

namespace idem::backend {

// The row of kLatencies whose field is `field`.
constexpr std::size_t LatencyRow(LatencyHistogram Latencies::*field) {
  std::size_t row = 0;
  while (kLatencies[row].field != field) ++row;
  return row;
}

// The bucket of a call that took `took`: the first whose bound is at least `took`, else the last.
std::size_t LatencyBucket(std::chrono::nanoseconds took);

class LatencyRecorder {
 public:
  using Clock = std::chrono::steady_clock;

  // A call of histogram `row` answered now, taken at `started`.
  void Observe(std::size_t row, Clock::time_point started);
  // The calling thread starts a write group: what it deferred and never settled (a group the
  // storage wrote on its own, to start another) is dropped.
  void StartGroup();
  // A call of histogram `row`, taken at `started`, whose write went into the calling thread's
  // write group as its `write_index`-th write (0-based): timed when the group is written.
  void Defer(std::size_t row, Clock::time_point started, std::size_t write_index);
  // The calling thread's group was written: `outcomes` has one status per write, in order (as
  // Storage::FinishWriteGroup). Each deferred call whose write succeeded is observed now; one
  // whose write failed was answered with the error and is not counted.
  void Settle(std::span<const Status> outcomes);

  // The histograms counted so far.
  Latencies Snapshot() const;

 private:
  static constexpr std::size_t kShards = 16;
  // Per histogram: the buckets, then the sum of the calls' nanoseconds.
  using Row = std::array<std::atomic<uint64_t>, kLatencyBucketCount + 1>;
  struct alignas(64) Shard {
    std::array<Row, kLatencyCount> rows{};
  };

  void Add(std::size_t row, std::chrono::nanoseconds took);

  std::array<Shard, kShards> shards_{};
};

}  // namespace idem::backend

#endif  // IDEM_BACKEND_LATENCY_RECORDER_H_
