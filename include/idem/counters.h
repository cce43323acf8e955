// Counters: how a store's calls came out, counted by the process that owns the store.

#ifndef IDEM_COUNTERS_H_
#define IDEM_COUNTERS_H_

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string_view>

namespace idem {

// Counts kept by the process that owns the store (docs/semantics.md, "Several processes, one
// store"): a process sharing the store through that owner reads the owner's counts, which include
// every process's calls. In a store directory they go on across owners: each owner keeps them in
// the store every 5 s and when it closes, and the next owner starts from them (an owner killed
// loses its last 5 s). In PostgreSQL each process counts its own, from zero. A read-only handle
// that reads the files itself (no owner running) counts nothing: all zeros. Each field is
// described in kCounters.
struct Counters {
  uint64_t claims = 0;
  uint64_t replays = 0;
  uint64_t in_progress = 0;
  uint64_t takeovers = 0;
  uint64_t failed = 0;
  uint64_t mismatches = 0;
  uint64_t lease_lost = 0;
  uint64_t purged = 0;
  uint64_t quota_refusals = 0;
  uint64_t quota_exceeded = 0;
  uint64_t completes = 0;
  uint64_t fails = 0;
  uint64_t terminal_fails = 0;
  uint64_t io_errors = 0;
  uint64_t corruption_errors = 0;
  uint64_t timeout_errors = 0;
  uint64_t busy_errors = 0;
  uint64_t unavailable_errors = 0;
  uint64_t stalls = 0;

  friend bool operator==(const Counters&, const Counters&) = default;
};

// The upper bounds of the latency histograms' buckets, the same in every release (a bucket's
// meaning never moves under a dashboard). Log-spaced from 50 us (a buffered write) to 1 s.
inline constexpr std::chrono::nanoseconds kLatencyBounds[] = {
    std::chrono::microseconds(50),  std::chrono::microseconds(100), std::chrono::microseconds(250),
    std::chrono::microseconds(500), std::chrono::milliseconds(1),   std::chrono::microseconds(2500),
    std::chrono::milliseconds(5),   std::chrono::milliseconds(10),  std::chrono::milliseconds(25),
    std::chrono::milliseconds(50),  std::chrono::milliseconds(100), std::chrono::milliseconds(250),
    std::chrono::seconds(1),
};
// One bucket per bound, and the last for the calls that took longer than every bound.
inline constexpr std::size_t kLatencyBucketCount = std::size(kLatencyBounds) + 1;

// How long the calls of one kind took, counted as Counters are (by the store's owner, kept
// across owners). Each call is in one bucket: buckets[i] counts the calls that took at most
// kLatencyBounds[i] and more than the bound before it (not cumulative: Prometheus's `le`
// buckets are the running sums).
struct LatencyHistogram {
  std::array<uint64_t, kLatencyBucketCount> buckets{};
  uint64_t sum_nanoseconds = 0;  // of every call counted (wraps after 584 years of calls)

  uint64_t count() const {
    uint64_t calls = 0;
    for (uint64_t bucket : buckets) calls += bucket;
    return calls;
  }
  friend bool operator==(const LatencyHistogram&, const LatencyHistogram&) = default;
};

// The owner's time from taking a call to having its answer: the checks, the decision and the
// write (a group's write included, for calls whose writes are grouped), not the trip over a
// socket to a client process. Each field is described in kLatencies.
struct Latencies {
  LatencyHistogram begin;
  LatencyHistogram complete;

  friend bool operator==(const Latencies&, const Latencies&) = default;
};

// A Counters value and whose counts they are (Store::GetOwnerCounters).
struct OwnerCounters {
  Counters counters;
  // Counted alongside `counters`, by the same processes.
  Latencies latencies;
  // True when the store's owner answered: this process when it owns the store, otherwise the
  // owner it shares the store through. False for a read-only handle that reads the files itself
  // because no owner runs: nobody is counting, and `counters` are zeros.
  bool live = false;
  // The owner's pid as this process sees it; 0 when !live, or when the owner runs in a PID
  // namespace this process cannot see.
  int64_t pid = 0;
  // When that process became the store's owner. The epoch when !live.
  std::chrono::system_clock::time_point since{};
};

// One counter: its name (in `idem stats` output and metric names), what it counts, its field.
struct CounterInfo {
  std::string_view name;
  std::string_view help;
  uint64_t Counters::*field;
};

// Every counter, in the order tools list them. To add a counter, add a field above and a row
// at the end here: every place that lists, sends or prints counters reads this table. Never
// reorder or remove a row: processes sharing a store number counters by their row (the wire
// protocol, docs/format.md).
inline constexpr CounterInfo kCounters[] = {
    {"claims", "Begin calls that acquired a key (takeovers included).", &Counters::claims},
    {"replays", "Begin calls answered with a stored result.", &Counters::replays},
    {"in_progress", "Begin calls answered in progress (a live lease elsewhere).",
     &Counters::in_progress},
    {"takeovers", "Begin calls that took over an expired lease.", &Counters::takeovers},
    {"failed", "Begin calls answered with a terminal failure.", &Counters::failed},
    {"mismatches", "Begin calls whose fingerprint differed from the stored one.",
     &Counters::mismatches},
    {"lease_lost", "Complete/Fail/Extend/SaveCheckpoint calls with a stale token.",
     &Counters::lease_lost},
    {"purged", "Records removed by purge.", &Counters::purged},
    {"quota_refusals", "Begin calls refused because the store was over max_disk_bytes.",
     &Counters::quota_refusals},
    {"quota_exceeded", "Times the store's database went over max_disk_bytes.",
     &Counters::quota_exceeded},
    {"completes", "Complete calls that stored a result.", &Counters::completes},
    {"fails", "Fail calls that recorded a retryable failure.", &Counters::fails},
    {"terminal_fails", "Fail calls that recorded a terminal failure.", &Counters::terminal_fails},
    {"io_errors", "Calls that failed reading or writing the store (kIOError).",
     &Counters::io_errors},
    {"corruption_errors", "Calls that met a record or file they could not decode (kCorruption).",
     &Counters::corruption_errors},
    {"timeout_errors", "Calls that ran out of time on the database server (kTimedOut).",
     &Counters::timeout_errors},
    {"busy_errors", "Calls refused for lack of a free resource (kBusy).", &Counters::busy_errors},
    {"unavailable_errors", "Calls that could not reach the database server (kUnavailable).",
     &Counters::unavailable_errors},
    {"stalls", "Stalls of the owner process it noticed: no tick of its watch for over 1 s.",
     &Counters::stalls},
};

inline constexpr std::size_t kCounterCount = std::size(kCounters);

// A field without a row, or a field with two, fails to compile here.
static_assert(sizeof(Counters) == kCounterCount * sizeof(uint64_t),
              "every field of Counters needs a row in kCounters");
static_assert(
    [] {
      for (std::size_t i = 0; i < kCounterCount; ++i) {
        for (std::size_t j = i + 1; j < kCounterCount; ++j) {
          if (kCounters[i].field == kCounters[j].field) return false;
        }
      }
      return true;
    }(),
    "a field of Counters has two rows in kCounters");

// One latency histogram: its name (in `idem stats` output; the metric is
// idem_<name>_duration_seconds), what it times, its field. Rows are numbered as kCounters' are:
// add at the end, never reorder or remove.
struct LatencyInfo {
  std::string_view name;
  std::string_view help;
  LatencyHistogram Latencies::*field;
};

inline constexpr LatencyInfo kLatencies[] = {
    {"begin", "Time the owner took to answer a Begin with an outcome.", &Latencies::begin},
    {"complete", "Time the owner took to answer a Complete with OK (stored or repeated).",
     &Latencies::complete},
};

inline constexpr std::size_t kLatencyCount = std::size(kLatencies);

static_assert(sizeof(Latencies) == kLatencyCount * sizeof(LatencyHistogram),
              "every field of Latencies needs a row in kLatencies");

}  // namespace idem

#endif  // IDEM_COUNTERS_H_
