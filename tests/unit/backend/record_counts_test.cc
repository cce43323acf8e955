// RecordCounts (backend/record_counts.h): the live records by state and type as writes move them,
// against the same figures counted from every record (as `idem stats` counts by a scan); a record
// whose retention passes leaves the count with no call; pending and timed out are exact.

#include "backend/record_counts.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <random>
#include <string>

#include "support/store_stats.h"

namespace idem::backend {
namespace {

using namespace std::chrono_literals;
using TimePoint = RecordCounts::TimePoint;

const TimePoint kStart = TimePoint(std::chrono::sys_days(std::chrono::year(2026) / 12 / 6)) + 30s;

Record MakeRecord(State state, std::string type, TimePoint now, std::chrono::milliseconds lease,
                  std::chrono::milliseconds retention) {
  Record record;
  record.state = state;
  record.type = std::move(type);
  record.created = now;
  record.updated = now;
  record.lease_deadline = now + lease;
  record.expires = now + retention;
  return record;
}

// The figures counted from every stored record, by the rule RecordCounts keeps: pending records
// exactly, done and failed ones until the end of their expiry's bucket.
StoreStats Scan(const std::map<std::string, Record>& stored, TimePoint now) {
  StoreStats figures;
  for (const auto& [key, record] : stored) {
    const bool live = record.state == State::kPending
                          ? record.expires > now
                          : RecordCounts::BucketEnd(record.expires) > now;
    if (!live) continue;
    ++figures.records;
    std::string state = record.state == State::kDone     ? "done"
                        : record.state == State::kFailed ? "failed"
                        : record.lease_deadline <= now   ? "timeout"
                                                         : "pending";
    ++figures.by_state[state];
    ++figures.by_type[record.type];
    if (record.state == State::kPending &&
        (!figures.oldest_pending || record.created < figures.oldest_pending->created)) {
      figures.oldest_pending.emplace();
      figures.oldest_pending->key = key;
      figures.oldest_pending->created = record.created;
    }
  }
  return figures;
}

StoreStats Count(RecordCounts& counts, TimePoint now) {
  StoreStats stats;
  counts.CountInto(now, stats);
  return stats;
}

TEST(RecordCounts, ALifecycleMovesOneRecordAndItsExpiryTakesItOut) {
  RecordCounts counts;
  TimePoint now = kStart;
  const Record claimed = MakeRecord(State::kPending, "pay", now, 10s, 1h);
  counts.Move("order-1", nullptr, &claimed, now);
  StoreStats figures = Count(counts, now);
  EXPECT_EQ(figures.records, 1u);
  EXPECT_EQ(figures.by_state["pending"], 1u);
  EXPECT_EQ(figures.by_type["pay"], 1u);
  ASSERT_TRUE(figures.oldest_pending.has_value());
  EXPECT_EQ(figures.oldest_pending->key, "order-1");

  EXPECT_EQ(Count(counts, now + 11s).by_state["timeout"], 1u) << "the lease passed: exact";

  now += 5s;
  Record done = claimed;
  done.state = State::kDone;
  done.updated = now;
  counts.Move("order-1", &claimed, &done, now);
  figures = Count(counts, now);
  EXPECT_EQ(figures.by_state.count("pending"), 0u);
  EXPECT_EQ(figures.by_state["done"], 1u);
  EXPECT_FALSE(figures.oldest_pending.has_value());

  counts.Move("order-1", &done, nullptr, now);  // forgotten
  EXPECT_EQ(Count(counts, now).records, 0u);
  counts.Move("order-1", nullptr, &done, now);

  // No call when its retention passes: counted until the end of its minute, then not.
  EXPECT_EQ(Count(counts, done.expires - 1s).records, 1u);
  EXPECT_EQ(Count(counts, RecordCounts::BucketEnd(done.expires) - 1us).records, 1u);
  EXPECT_EQ(Count(counts, RecordCounts::BucketEnd(done.expires)).records, 0u);
  EXPECT_LT(RecordCounts::BucketEnd(done.expires) - done.expires, RecordCounts::kBucket + 1us);
  EXPECT_EQ(counts.Buckets(), 0u) << "an ended bucket is let go";
  // Moving a record whose bucket ended changes nothing: it already left the count.
  Record claimed_again = MakeRecord(State::kPending, "pay", done.expires + 1h, 10s, 1h);
  counts.Move("order-1", &done, &claimed_again, claimed_again.created);
  figures = Count(counts, claimed_again.created);
  EXPECT_EQ(figures.records, 1u);
  EXPECT_EQ(figures.by_state["pending"], 1u);
}

TEST(RecordCounts, APendingRecordPastItsRetentionIsNotLive) {
  RecordCounts counts;
  const Record claimed = MakeRecord(State::kPending, "pay", kStart, 1h, 10s);
  counts.Move("k", nullptr, &claimed, kStart);
  EXPECT_EQ(Count(counts, kStart + 9s).records, 1u);
  EXPECT_EQ(Count(counts, kStart + 10s).records, 0u) << "pending records are exact";
  EXPECT_EQ(counts.PendingKept(), 0u) << "and let go once their retention passed";
}

// Random writes of a few keys, with the clock moving: each step changes `stored` and tells
// `counts` (Begin, Complete, Fail, Extend, Forget).
struct RandomWrites {
  std::mt19937_64 random{20261206};
  std::map<std::string, Record> stored;
  TimePoint now = kStart;

  void Step(RecordCounts& counts) {
    const std::string types[] = {"pay", "refund", ""};
    now += std::chrono::milliseconds(random() % 5000);
    const std::string key = "k" + std::to_string(random() % 50);
    const auto found = stored.find(key);
    const Record* before = found == stored.end() ? nullptr : &found->second;
    std::optional<Record> after;
    switch (random() % 5) {
      case 0:  // a claim, fresh or over whatever was there
        after = MakeRecord(State::kPending, types[random() % 3], now,
                           std::chrono::seconds(1 + random() % 30),
                           std::chrono::seconds(1 + random() % 600));
        break;
      case 1:
      case 2:  // Complete or Fail of what is there, keeping its expiry
        if (before != nullptr) {
          after = *before;
          after->state = random() % 2 == 0 ? State::kDone : State::kFailed;
          after->updated = now;
        }
        break;
      case 3:  // Extend: a new lease, maybe a later expiry
        if (before != nullptr && before->state == State::kPending) {
          after = *before;
          after->lease_deadline = now + std::chrono::seconds(random() % 30);
          after->expires = std::max(after->expires, after->lease_deadline);
        }
        break;
      case 4:  // Forget
        if (before != nullptr) {
          counts.Move(key, before, nullptr, now);
          stored.erase(found);
        }
        break;
    }
    if (after) {
      counts.Move(key, before, &*after, now);
      stored[key] = *after;
    }
  }
};

// The counts equal a scan of the stored records at every step, and at later times too.
TEST(RecordCounts, RandomWritesAgreeWithAScanOfTheRecords) {
  RandomWrites writes;
  RecordCounts counts;
  for (int step = 0; step < 20000; ++step) {
    writes.Step(counts);
    if (step % 97 == 0) {
      SCOPED_TRACE(step);
      idem_test::ExpectSameRecordFigures(Count(counts, writes.now),
                                         Scan(writes.stored, writes.now));
      // Counting ends buckets for good: a look ahead is taken on a copy.
      RecordCounts ahead = counts;
      idem_test::ExpectSameRecordFigures(Count(ahead, writes.now + 45s),
                                         Scan(writes.stored, writes.now + 45s));
    }
  }
}

// The owner's start: the records as of a moment counted apart (a scan), the writes after it
// counted as a delta, whatever they did to the records of that moment; the sum is the store.
TEST(RecordCounts, ADeltaAndTheBaseOfItsMomentAddUpToTheStore) {
  RandomWrites writes;
  RecordCounts before_the_moment;
  for (int step = 0; step < 3000; ++step) writes.Step(before_the_moment);
  const std::map<std::string, Record> at_the_moment = writes.stored;
  const TimePoint moment = writes.now;

  RecordCounts live;
  live.StartDelta();
  for (int step = 0; step < 500; ++step) writes.Step(live);

  RecordCounts base;
  for (const auto& [key, record] : at_the_moment) base.Move(key, nullptr, &record, moment);
  live.MergeBase(std::move(base));
  idem_test::ExpectSameRecordFigures(Count(live, writes.now), Scan(writes.stored, writes.now));
  for (int step = 0; step < 3000; ++step) {
    writes.Step(live);
    if (step % 97 == 0) {
      SCOPED_TRACE(step);
      idem_test::ExpectSameRecordFigures(Count(live, writes.now), Scan(writes.stored, writes.now));
    }
  }
}

// Kept at a clean close and taken by the next owner: the counts read back are the same counts, now
// and later; anything but what Encode wrote, a part of it included, is refused.
TEST(RecordCounts, EncodedCountsReadBackTheSameAndNothingElseDoes) {
  RandomWrites writes;
  RecordCounts counts;
  for (int step = 0; step < 3000; ++step) writes.Step(counts);
  Count(counts, writes.now);  // drops what ended, as an owner's counts have
  const std::string encoded = counts.Encode();
  std::optional<RecordCounts> decoded = RecordCounts::Decode(encoded);
  ASSERT_TRUE(decoded.has_value());
  idem_test::ExpectSameRecordFigures(Count(*decoded, writes.now), Scan(writes.stored, writes.now));
  for (int step = 0; step < 1000; ++step) {
    writes.Step(*decoded);
    if (step % 97 == 0) {
      SCOPED_TRACE(step);
      idem_test::ExpectSameRecordFigures(Count(*decoded, writes.now),
                                         Scan(writes.stored, writes.now));
    }
  }
  for (std::size_t size = 0; size < encoded.size(); size += 1 + size / 64) {
    EXPECT_FALSE(RecordCounts::Decode(encoded.substr(0, size)).has_value()) << size;
  }
  EXPECT_FALSE(RecordCounts::Decode(encoded + "x").has_value());
  EXPECT_FALSE(RecordCounts::Decode("\x02" + encoded.substr(1)).has_value());
}

// Damaged bytes that would make the sums overflow are refused: a count of more records than any
// store holds (2^40), as fuzz_record_counts under UBSan would find.
TEST(RecordCounts, ACountNoStoreCouldHoldIsRefused) {
  RecordCounts counts;
  const Record done = MakeRecord(State::kDone, "pay", kStart, 10s, 1h);
  counts.Move("k", static_cast<const Record*>(nullptr), &done, kStart);
  std::string encoded = counts.Encode();
  // version, ended_until, 1 cell (state, "pay"), 1 bucket (end, 1 entry: cell 0, then its count).
  const std::size_t delta_at = 1 + 8 + 4 + 1 + 4 + 3 + 4 + 8 + 4 + 4;
  ASSERT_EQ(encoded.size(), delta_at + 8 + 4);
  ASSERT_EQ(encoded[delta_at], '\x01');
  ASSERT_TRUE(RecordCounts::Decode(encoded).has_value());
  encoded[delta_at + 5] = '\x02';  // 2^41 + 1
  EXPECT_FALSE(RecordCounts::Decode(encoded).has_value());
  encoded[delta_at + 5] = '\x00';
  encoded[delta_at + 7] = '\x80';  // negative, far below any store's
  EXPECT_FALSE(RecordCounts::Decode(encoded).has_value());
}

}  // namespace
}  // namespace idem::backend
