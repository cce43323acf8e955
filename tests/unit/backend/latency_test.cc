// The latency histograms of Begin and Complete (idem/counters.h, Latencies): each call in the
// bucket its time falls in, a grouped call timed when its group is written (and not counted when
// that write fails), the counts equal to the counters', and the histograms kept for the next
// owner. A slow disk (FaultFs's delay) gives times with a known floor; no test asserts a ceiling.

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "backend/latency_recorder.h"
#include "support/fault_backend.h"
#include "support/raw_db.h"
#include "util/coding.h"

namespace {

using idem::Latencies;
using idem::LatencyHistogram;
using idem::Outcome;
using idem::Status;
using idem::backend::LatencyBucket;
using idem::backend::LatencyRecorder;
using idem::backend::LatencyRow;
using idem_test::FaultFs;
using namespace std::chrono_literals;

constexpr std::size_t kBegin = LatencyRow(&Latencies::begin);
constexpr std::size_t kComplete = LatencyRow(&Latencies::complete);

// The calls of `histogram` in buckets whose bound is below `floor`: none may be there when every
// call took at least `floor`.
uint64_t CallsBelow(const LatencyHistogram& histogram, std::chrono::nanoseconds floor) {
  uint64_t calls = 0;
  for (std::size_t b = 0; b < std::size(idem::kLatencyBounds); ++b) {
    if (idem::kLatencyBounds[b] < floor) calls += histogram.buckets[b];
  }
  return calls;
}

TEST(LatencyBucketTest, ABucketHoldsTimesUpToItsBound) {
  EXPECT_EQ(LatencyBucket(0ns), 0u);
  EXPECT_EQ(LatencyBucket(50us), 0u);
  EXPECT_EQ(LatencyBucket(50us + 1ns), 1u);
  EXPECT_EQ(LatencyBucket(2500us), 5u);
  EXPECT_EQ(LatencyBucket(3ms), 6u);
  EXPECT_EQ(LatencyBucket(1s), 12u);
  EXPECT_EQ(LatencyBucket(1s + 1ns), 13u);
  EXPECT_EQ(LatencyBucket(std::chrono::hours(24)), idem::kLatencyBucketCount - 1);
}

// Calls observed from several threads at once are each counted once (the shards add up).
TEST(LatencyRecorderTest, ThreadsCountIntoShardsThatAddUp) {
  LatencyRecorder recorder;
  constexpr int kThreads = 8;
  constexpr int kCalls = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&recorder] {
      for (int i = 0; i < kCalls; ++i) recorder.Observe(kBegin, LatencyRecorder::Clock::now());
    });
  }
  for (std::thread& thread : threads) thread.join();
  const Latencies latencies = recorder.Snapshot();
  EXPECT_EQ(latencies.begin.count(), uint64_t{kThreads * kCalls});
  EXPECT_EQ(latencies.complete.count(), 0u);
}

// A deferred call is counted when its group's write succeeded, not when it failed, and a group
// abandoned without being settled leaves nothing behind for the thread's next one.
TEST(LatencyRecorderTest, ADeferredCallCountsOnlyIfItsWriteSucceeded) {
  LatencyRecorder recorder;
  const auto started = LatencyRecorder::Clock::now() - 3ms;
  recorder.StartGroup();
  recorder.Defer(kBegin, started, 0);
  recorder.Defer(kComplete, started, 1);
  recorder.Defer(kBegin, started, 2);
  const std::vector<Status> outcomes = {Status::OK(), Status::OK(), Status::IOError("disk")};
  recorder.Settle(outcomes);
  Latencies latencies = recorder.Snapshot();
  EXPECT_EQ(latencies.begin.count(), 1u);
  EXPECT_EQ(latencies.complete.count(), 1u);
  EXPECT_EQ(CallsBelow(latencies.begin, 3ms), 0u);
  EXPECT_GE(latencies.begin.sum_nanoseconds, uint64_t{3'000'000});

  recorder.StartGroup();
  recorder.Defer(kBegin, started, 0);
  recorder.StartGroup();  // the storage wrote that group on its own
  recorder.Settle(std::vector<Status>{Status::OK()});
  EXPECT_EQ(recorder.Snapshot().begin.count(), 1u);
}

class LatencyTest : public idem_test::FaultBackendTest {
 protected:
  idem::OwnerCounters Owner() {
    auto owner = backend_->GetOwnerCounters();
    EXPECT_TRUE(owner.ok()) << owner.status().ToString();
    return owner.ok() ? *owner : idem::OwnerCounters{};
  }
};

// On a disk where each write and sync takes 3 ms, a synced claim and its Complete take at least
// 6 ms; a replay reads and writes nothing. Every call is counted in its histogram, and the
// histograms' counts are the counters'.
TEST_F(LatencyTest, SyncedCallsOnASlowDiskFallInSlowBuckets) {
  fs_->DelayWritesAndSyncs(3ms);
  for (int i = 0; i < 4; ++i) {
    const std::string key = "k" + std::to_string(i);
    ASSERT_OK_AND_ASSIGN(auto claim, Begin(key, idem::Durability::kSync));
    ASSERT_EQ(claim.outcome, Outcome::kAcquired);
    ASSERT_OK(Complete(key, claim.token, idem::Durability::kSync));
  }
  idem::OwnerCounters owner = Owner();
  EXPECT_EQ(owner.latencies.begin.count(), 4u);
  EXPECT_EQ(owner.latencies.complete.count(), 4u);
  EXPECT_EQ(CallsBelow(owner.latencies.begin, 6ms), 0u);
  EXPECT_EQ(CallsBelow(owner.latencies.complete, 6ms), 0u);
  EXPECT_GE(owner.latencies.begin.sum_nanoseconds, uint64_t{4 * 6'000'000});

  for (int i = 0; i < 4; ++i) {
    ASSERT_OK_AND_ASSIGN(auto replay, Begin("k" + std::to_string(i), idem::Durability::kSync));
    EXPECT_EQ(replay.outcome, Outcome::kReplay);
  }
  owner = Owner();
  EXPECT_EQ(owner.latencies.begin.count(), 8u);
  EXPECT_EQ(owner.latencies.begin.count(), owner.counters.claims + owner.counters.replays);
  EXPECT_EQ(owner.latencies.complete.count(), owner.counters.completes);
  fs_->Clear();
}

// Grouped buffered claims write nothing until the group is written, which takes 3 ms here: their
// times include that write. A group whose write fails counts none of its calls.
TEST_F(LatencyTest, AGroupedCallIsTimedUntilItsGroupIsWritten) {
  fs_->DelayWritesAndSyncs(3ms);
  backend_->StartWriteGroup();
  for (const char* key : {"a", "b", "c"}) {
    ASSERT_OK_AND_ASSIGN(auto claim, Begin(key, idem::Durability::kBuffered));
    ASSERT_EQ(claim.outcome, Outcome::kAcquired);
  }
  EXPECT_EQ(Owner().latencies.begin.count(), 0u) << "counted before the group was written";
  for (const Status& written : backend_->FinishWriteGroup()) ASSERT_OK(written);
  idem::OwnerCounters owner = Owner();
  EXPECT_EQ(owner.latencies.begin.count(), 3u);
  EXPECT_EQ(CallsBelow(owner.latencies.begin, 3ms), 0u);

  fs_->Clear();
  fs_->FailWrites(FaultFs::kEio);
  backend_->StartWriteGroup();
  for (const char* key : {"d", "e"}) ASSERT_OK(Begin(key, idem::Durability::kBuffered).status());
  for (const Status& written : backend_->FinishWriteGroup()) EXPECT_FALSE(written.ok());
  EXPECT_EQ(Owner().latencies.begin.count(), 3u);
  fs_->Clear();
}

// The histograms go on across owners, as the counters do: the next owner starts from them.
TEST_F(LatencyTest, TheHistogramsAreKeptForTheNextOwner) {
  for (int i = 0; i < 5; ++i) {
    const std::string key = "k" + std::to_string(i);
    ASSERT_OK_AND_ASSIGN(auto claim, Begin(key, idem::Durability::kBuffered));
    ASSERT_OK(Complete(key, claim.token, idem::Durability::kBuffered));
  }
  const Latencies before = Owner().latencies;
  EXPECT_EQ(before.begin.count(), 5u);
  EXPECT_EQ(before.complete.count(), 5u);
  Open();
  EXPECT_EQ(Owner().latencies, before);
  ASSERT_OK(Begin("k0", idem::Durability::kBuffered).status());  // a replay
  const Latencies after = Owner().latencies;
  EXPECT_EQ(after.begin.count(), 6u);
  EXPECT_GE(after.begin.sum_nanoseconds, before.begin.sum_nanoseconds);
  EXPECT_EQ(after.complete, before.complete);
}

// Histograms kept by another release (docs/format.md, meta owner_latency): one this release does
// not know (number 9) and one whose buckets are not this release's (begin, with 20) are skipped;
// complete, in this release's layout, is read.
TEST_F(LatencyTest, KeptHistogramsOfAnotherLayoutAreSkipped) {
  backend_.reset();
  std::string kept;
  idem::util::PutFixed32(kept, 3);
  const auto histogram = [&kept](uint8_t number, uint8_t buckets, uint64_t each) {
    kept += static_cast<char>(number);
    kept += static_cast<char>(buckets);
    for (uint8_t b = 0; b < buckets; ++b) idem::util::PutFixed64(kept, each);
    idem::util::PutFixed64(kept, 1000);  // the sum
  };
  histogram(9, idem::kLatencyBucketCount, 5);
  histogram(1, 20, 6);
  histogram(2, idem::kLatencyBucketCount, 7);
  idem_test::PutRaw(dir_.path(), "meta", "owner_latency", kept);
  Open();
  const Latencies loaded = Owner().latencies;
  EXPECT_EQ(loaded.begin, LatencyHistogram{});
  EXPECT_EQ(loaded.complete.count(), idem::kLatencyBucketCount * 7);
  EXPECT_EQ(loaded.complete.sum_nanoseconds, 1000u);
}

// The counters and the histograms are kept under two keys, each read alone: a damaged one starts
// its own figures again from zero, said once in the log, and the other's go on. The next save
// writes it whole again.
TEST_F(LatencyTest, ADamagedKeptPartLeavesTheOther) {
  for (int i = 0; i < 3; ++i) {
    const std::string key = "k" + std::to_string(i);
    ASSERT_OK_AND_ASSIGN(auto claim, Begin(key, idem::Durability::kBuffered));
    ASSERT_OK(Complete(key, claim.token, idem::Durability::kBuffered));
  }
  const idem::OwnerCounters before = Owner();
  ASSERT_EQ(before.counters.completes, 3u);
  ASSERT_EQ(before.latencies.complete.count(), 3u);
  backend_.reset();  // saves both
  idem_test::PutRaw(dir_.path(), "meta", "owner_latency", "bad");
  Open();
  EXPECT_EQ(Owner().counters, before.counters);
  EXPECT_EQ(Owner().latencies, Latencies{});
  EXPECT_EQ(log_.CountEvent("saved_counters_unreadable", idem::LogSeverity::kWarning), 1)
      << log_.All();
  EXPECT_TRUE(log_.Contains("latency histograms (meta owner_latency, 3 bytes)")) << log_.All();

  ASSERT_OK_AND_ASSIGN(auto claim, Begin("k8", idem::Durability::kBuffered));
  ASSERT_OK(Complete("k8", claim.token, idem::Durability::kBuffered));
  const Latencies kept = Owner().latencies;
  ASSERT_EQ(kept.complete.count(), 1u);
  backend_.reset();  // saves both again
  idem_test::PutRaw(dir_.path(), "meta", "owner_counters", std::string(7, '\xff'));
  Open();
  EXPECT_EQ(Owner().counters, idem::Counters{});
  EXPECT_EQ(Owner().latencies, kept);
  EXPECT_EQ(log_.CountEvent("saved_counters_unreadable", idem::LogSeverity::kWarning), 2)
      << log_.All();
  ASSERT_OK_AND_ASSIGN(claim, Begin("k9", idem::Durability::kBuffered));
  ASSERT_OK(Complete("k9", claim.token, idem::Durability::kBuffered));
  const idem::OwnerCounters after = Owner();
  EXPECT_EQ(after.counters.completes, 1u);
  backend_.reset();
  Open();  // both whole again
  EXPECT_EQ(Owner().counters, after.counters);
  EXPECT_EQ(Owner().latencies, after.latencies);
  EXPECT_EQ(log_.CountEvent("saved_counters_unreadable", idem::LogSeverity::kWarning), 2);
}

}  // namespace
