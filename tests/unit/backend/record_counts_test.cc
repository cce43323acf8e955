// RecordCounts (backend/record_counts.h): the live records by state and type as writes move them,
// against the same figures counted from every record (as `idem stats` counts by a scan); a record
// whose retention passes leaves the count with no call; pending and timed out are exact.

#include "backend/record_counts.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <random>
#include <string>

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
RecordCounts::Figures Scan(const std::map<std::string, Record>& stored, TimePoint now) {
  RecordCounts::Figures figures;
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
        (!figures.oldest_pending || record.created < figures.oldest_pending->second)) {
      figures.oldest_pending.emplace(key, record.created);
    }
  }
  return figures;
}

void ExpectSame(const RecordCounts::Figures& counted, const RecordCounts::Figures& scanned) {
  EXPECT_EQ(counted.records, scanned.records);
  EXPECT_EQ(counted.by_state, scanned.by_state);
  EXPECT_EQ(counted.by_type, scanned.by_type);
  ASSERT_EQ(counted.oldest_pending.has_value(), scanned.oldest_pending.has_value());
  if (counted.oldest_pending) {
    EXPECT_EQ(counted.oldest_pending->second, scanned.oldest_pending->second);
  }
}

TEST(RecordCounts, ALifecycleMovesOneRecordAndItsExpiryTakesItOut) {
  RecordCounts counts;
  TimePoint now = kStart;
  const Record claimed = MakeRecord(State::kPending, "pay", now, 10s, 1h);
  counts.Move("order-1", nullptr, &claimed);
  RecordCounts::Figures figures = counts.Count(now);
  EXPECT_EQ(figures.records, 1u);
  EXPECT_EQ(figures.by_state["pending"], 1u);
  EXPECT_EQ(figures.by_type["pay"], 1u);
  ASSERT_TRUE(figures.oldest_pending.has_value());
  EXPECT_EQ(figures.oldest_pending->first, "order-1");

  EXPECT_EQ(counts.Count(now + 11s).by_state["timeout"], 1u) << "the lease passed: exact";

  now += 5s;
  Record done = claimed;
  done.state = State::kDone;
  done.updated = now;
  counts.Move("order-1", &claimed, &done);
  figures = counts.Count(now);
  EXPECT_EQ(figures.by_state.count("pending"), 0u);
  EXPECT_EQ(figures.by_state["done"], 1u);
  EXPECT_FALSE(figures.oldest_pending.has_value());

  // No call when its retention passes: counted until the end of its minute, then not.
  EXPECT_EQ(counts.Count(done.expires - 1s).records, 1u);
  EXPECT_EQ(counts.Count(RecordCounts::BucketEnd(done.expires) - 1us).records, 1u);
  EXPECT_EQ(counts.Count(RecordCounts::BucketEnd(done.expires)).records, 0u);
  EXPECT_LT(RecordCounts::BucketEnd(done.expires) - done.expires, RecordCounts::kBucket + 1us);

  counts.Move("order-1", &done, nullptr);  // forgotten
  EXPECT_EQ(counts.Count(now).records, 0u);
}

TEST(RecordCounts, APendingRecordPastItsRetentionIsNotLive) {
  RecordCounts counts;
  const Record claimed = MakeRecord(State::kPending, "pay", kStart, 1h, 10s);
  counts.Move("k", nullptr, &claimed);
  EXPECT_EQ(counts.Count(kStart + 9s).records, 1u);
  EXPECT_EQ(counts.Count(kStart + 10s).records, 0u) << "pending records are exact";
}

// Random writes of a few keys, with the clock moving and DropExpired now and then: the counts
// equal a scan of the stored records at every step, and at later times too.
TEST(RecordCounts, RandomWritesAgreeWithAScanOfTheRecords) {
  std::mt19937_64 random(20261206);
  RecordCounts counts;
  std::map<std::string, Record> stored;
  TimePoint now = kStart;
  const std::string types[] = {"pay", "refund", ""};
  for (int step = 0; step < 20000; ++step) {
    now += std::chrono::milliseconds(random() % 5000);
    const std::string key = "k" + std::to_string(random() % 50);
    const auto found = stored.find(key);
    const Record* before = found == stored.end() ? nullptr : &found->second;
    std::optional<Record> after;
    switch (random() % 6) {
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
          counts.Move(key, before, nullptr);
          stored.erase(found);
        }
        break;
      case 5:
        counts.DropExpired(now);
        break;
    }
    if (after) {
      counts.Move(key, before, &*after);
      stored[key] = *after;
    }
    if (step % 97 == 0) {
      SCOPED_TRACE(step);
      ExpectSame(counts.Count(now), Scan(stored, now));
      ExpectSame(counts.Count(now + 45s), Scan(stored, now + 45s));
    }
  }
}

}  // namespace
}  // namespace idem::backend
