// Write groups (storage/storage.h): the owner writes the buffered Begins and Transitions of a
// client's requests that arrived together as one RocksDB batch. Each call is decided under its
// key's lock as if alone; the group's writes are invisible until the group is written, a call of
// a key the group holds sees the group's write, another thread waits for a key the group holds,
// a failed batch fails every call in it and leaves none of them stored, and groups never
// deadlock with each other, with single writes or with a purge.

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "storage/rocksdb/rocksdb_storage.h"
#include "support/fault_backend.h"
#include "support/index_check.h"

namespace {

using idem::Outcome;
using idem::Status;
using idem_test::FaultFs;
using idem_test::TempDir;
using namespace std::chrono_literals;

class WriteGroupTest : public idem_test::FaultBackendTest {
 protected:
  std::optional<idem::Record> Stored(std::string_view key) {
    auto stored = backend_->Get(key);
    EXPECT_TRUE(stored.ok()) << stored.status().ToString();
    return stored.ok() ? std::move(*stored) : std::nullopt;
  }

  // Closes the store and checks that each record has its one index entry (no half-written batch).
  void ExpectIndexMatchesRecords() {
    backend_.reset();
    storage_ = nullptr;
    static_cast<void>(idem_test::CheckIndexMatchesRecords(dir_.Sub("db")));
  }
};

TEST_F(WriteGroupTest, AGroupsWritesAreStoredTogetherWhenItEnds) {
  backend_->StartWriteGroup();
  ASSERT_OK_AND_ASSIGN(auto a, Begin("a"));
  ASSERT_OK_AND_ASSIGN(auto b, Begin("b"));
  EXPECT_EQ(a.outcome, Outcome::kAcquired);
  EXPECT_EQ(b.outcome, Outcome::kAcquired);
  EXPECT_EQ(backend_->GroupedWrites(), 2u);
  EXPECT_FALSE(Stored("a").has_value()) << "a grouped write was visible before the group ended";
  EXPECT_FALSE(Stored("b").has_value());
  const std::vector<Status> outcomes = backend_->FinishWriteGroup();
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_OK(outcomes[0]);
  EXPECT_OK(outcomes[1]);
  ASSERT_TRUE(Stored("a").has_value());
  EXPECT_EQ(Stored("a")->token, a.token);
  ASSERT_TRUE(Stored("b").has_value());
  EXPECT_EQ(backend_->GroupedWrites(), 0u);
  ExpectIndexMatchesRecords();
}

// A Begin and its Complete in one group: the Complete finds the claim (the group wrote it
// first), and a second Begin of the key after them is a replay.
TEST_F(WriteGroupTest, ACallOfAKeyTheGroupHoldsSeesTheGroupsWrite) {
  backend_->StartWriteGroup();
  ASSERT_OK_AND_ASSIGN(auto claim, Begin("k"));
  ASSERT_EQ(claim.outcome, Outcome::kAcquired);
  ASSERT_OK(Complete("k", claim.token));
  ASSERT_OK_AND_ASSIGN(auto again, Begin("k"));
  EXPECT_EQ(again.outcome, Outcome::kReplay);
  const std::vector<Status> outcomes = backend_->FinishWriteGroup();
  ASSERT_EQ(outcomes.size(), 2u);  // the Begin and the Complete; the replay wrote nothing
  EXPECT_OK(outcomes[0]);
  EXPECT_OK(outcomes[1]);
  ASSERT_TRUE(Stored("k").has_value());
  EXPECT_EQ(Stored("k")->state, idem::State::kDone);
}

// A synced write in a group writes the group's others first, then itself at once.
TEST_F(WriteGroupTest, ASyncedCallWritesTheGroupFirstAndItselfAtOnce) {
  backend_->StartWriteGroup();
  ASSERT_OK_AND_ASSIGN(auto buffered, Begin("buffered"));
  ASSERT_OK_AND_ASSIGN(auto synced, Begin("synced", idem::Durability::kSync));
  EXPECT_EQ(synced.outcome, Outcome::kAcquired);
  EXPECT_TRUE(Stored("buffered").has_value());
  EXPECT_TRUE(Stored("synced").has_value());
  EXPECT_EQ(backend_->GroupedWrites(), 1u);
  const std::vector<Status> outcomes = backend_->FinishWriteGroup();
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_OK(outcomes[0]);
  static_cast<void>(buffered);
}

// Another thread's call of a key the group holds waits until the group is written, then
// decides on what it wrote.
TEST_F(WriteGroupTest, AnotherThreadWaitsForAKeyTheGroupHolds) {
  backend_->StartWriteGroup();
  ASSERT_OK_AND_ASSIGN(auto claim, Begin("k"));
  ASSERT_EQ(claim.outcome, Outcome::kAcquired);
  std::atomic<bool> done = false;
  idem::Result<idem::Claim> other = Status::Unavailable("not run");
  std::thread thread([&] {
    other = Begin("k");
    done = true;
  });
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(done) << "a call went ahead of a grouped write of its key";
  const std::vector<Status> outcomes = backend_->FinishWriteGroup();
  thread.join();
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_OK(outcomes[0]);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(other->outcome, Outcome::kInProgress);
}

// The group's batch fails to reach the log: every call in it gets the error, and none is stored
// (RocksDB stops at a failed log write: the store is reopened once the disk is back).
TEST_F(WriteGroupTest, AFailedBatchFailsEveryCallInItAndStoresNone) {
  backend_->StartWriteGroup();
  ASSERT_OK_AND_ASSIGN(auto a, Begin("a"));
  ASSERT_OK_AND_ASSIGN(auto b, Begin("b"));
  fs_->FailWrites(FaultFs::kEio);
  const std::vector<Status> outcomes = backend_->FinishWriteGroup();
  ASSERT_EQ(outcomes.size(), 2u);
  for (const Status& outcome : outcomes) {
    EXPECT_EQ(outcome.code(), Status::Code::kIOError) << outcome.ToString();
  }
  fs_->Clear();
  Open();
  EXPECT_FALSE(Stored("a").has_value()) << "a write of a failed group was stored";
  EXPECT_FALSE(Stored("b").has_value());
  ASSERT_OK_AND_ASSIGN(auto again, Begin("a"));
  EXPECT_EQ(again.outcome, Outcome::kAcquired);
  EXPECT_GT(again.token, a.token);
  static_cast<void>(b);
}

// Threads each grouping keys in a different order, single writes and purges all at once: they
// all finish (a group waits for a key only while it holds none), and every key ends done once.
TEST_F(WriteGroupTest, GroupsSingleWritesAndPurgesNeverDeadlock) {
  constexpr int kKeys = 64;
  constexpr int kRounds = 200;
  std::vector<std::thread> threads;
  std::atomic<int> completed = 0;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        const bool grouped = t != 3;  // one thread writes alone
        if (grouped) backend_->StartWriteGroup();
        std::vector<std::pair<std::string, uint64_t>> claims;
        for (int i = 0; i < 8; ++i) {
          const int index = (t % 2 == 0 ? i : 7 - i) * 8 + (round % 8);
          const std::string key = "k" + std::to_string(index % kKeys) + "-" + std::to_string(round);
          auto claim = Begin(key);
          ASSERT_TRUE(claim.ok()) << claim.status().ToString();
          if (claim->outcome == Outcome::kAcquired) claims.emplace_back(key, claim->token);
        }
        for (const auto& [key, token] : claims) {
          ASSERT_OK(Complete(key, token));
          ++completed;
        }
        if (grouped) {
          for (const Status& outcome : backend_->FinishWriteGroup()) ASSERT_OK(outcome);
        }
      }
    });
  }
  // Purges of due records whose keys share stripes with the groups' (a purge locks many).
  std::atomic<uint64_t> purged = 0;
  threads.emplace_back([&] {
    for (int i = 0; i < 50; ++i) {
      for (int index = 0; index < kKeys; ++index) {
        auto claim = backend_->Begin({.key = "due" + std::to_string(index),
                                      .lease = 1ms,
                                      .retention = 1ms,
                                      .request_id = ++request_id_,
                                      .durability = idem::Durability::kBuffered},
                                     idem::Holder{});
        ASSERT_TRUE(claim.ok()) << claim.status().ToString();
      }
      clock_->Advance(2ms);
      auto count = backend_->Purge({});
      ASSERT_TRUE(count.ok()) << count.status().ToString();
      purged += *count;
    }
  });
  for (std::thread& thread : threads) thread.join();
  // Each key was acquired by exactly one thread, and completed by it.
  int done = 0;
  for (int round = 0; round < kRounds; ++round) {
    for (int index = 0; index < kKeys; ++index) {
      if (auto stored = Stored("k" + std::to_string(index) + "-" + std::to_string(round))) {
        EXPECT_EQ(stored->state, idem::State::kDone);
        EXPECT_EQ(stored->attempts, 1u);
        ++done;
      }
    }
  }
  EXPECT_EQ(done, completed.load());
  EXPECT_GT(purged.load(), 0u);
  ExpectIndexMatchesRecords();
}

}  // namespace
