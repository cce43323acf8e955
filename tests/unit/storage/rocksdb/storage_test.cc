// The storage layer under EngineBackend, with an injected clock: what only shows below the Store
// API (compaction dropping expired records, the per-stripe copy of the last record written).

#include <gtest/gtest.h>
#include <rocksdb/perf_context.h>
#include <rocksdb/perf_level.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "backend/engine_backend.h"
#include "storage/rocksdb/rocksdb_storage.h"
#include "support/owner_backend.h"
#include "support/test_util.h"

namespace {

using namespace std::chrono_literals;
using idem::Outcome;
using idem_test::TempDir;

class StorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    idem::storage::RocksDbConfig config;
    config.path = dir_.Sub("db");
    config.clock = clock_;
    auto storage = idem::storage::RocksDbStorage::Open(config);
    ASSERT_TRUE(storage.ok()) << storage.status().ToString();
    storage_ = storage->get();
    backend_ = idem_test::OwnerBackend(std::move(storage).value(), idem_test::TestOptions(clock_));
  }

  idem::Result<idem::Claim> Begin(std::string_view key) {
    return backend_->Begin({.key = key, .lease = 1s, .retention = 1s, .request_id = ++request_id_},
                           idem::Holder{});
  }

  idem::Status Complete(std::string_view key, uint64_t token) {
    return backend_->Transition({.key = key,
                                 .request = {.kind = idem::engine::TransitionKind::kComplete,
                                             .token = token,
                                             .payload = "result"}});
  }

  // Moves the clock on by `later`, lets compaction filters drop what expired a day before,
  // and runs them over every table file.
  void DropExpiredByCompaction(std::chrono::seconds later) {
    clock_->Advance(later);
    ASSERT_OK(storage_->AdvanceFilterHorizon(clock_->Now()));
    ASSERT_OK(storage_->Flush());
    ASSERT_OK(storage_->CompactRecords());
  }

  TempDir dir_;
  std::shared_ptr<idem_test::ManualClock> clock_ = std::make_shared<idem_test::ManualClock>();
  idem::storage::RocksDbStorage* storage_ = nullptr;
  std::unique_ptr<idem::backend::EngineBackend> backend_;
  uint64_t request_id_ = 0;
};

// A claim whose retention ran out is dropped by compaction; then the wall clock steps back to
// within the claim's lease. Completing the claim must find no record, not the copy the storage
// kept from writing it, which would still look live and take the result.
TEST_F(StorageTest, ARecordDroppedByCompactionStaysGoneWhenTheClockStepsBack) {
  const auto start = clock_->Now();
  ASSERT_OK_AND_ASSIGN(auto claim, Begin("k"));
  ASSERT_EQ(claim.outcome, Outcome::kAcquired);
  DropExpiredByCompaction(48h);
  clock_->Set(start + 500ms);
  ASSERT_OK_AND_ASSIGN(auto stored, backend_->Get("k"));
  EXPECT_FALSE(stored.has_value()) << "compaction kept an expired record";
  EXPECT_FALSE(Complete("k", claim.token).ok()) << "completed a record compaction had dropped";
  ASSERT_OK_AND_ASSIGN(stored, backend_->Get("k"));
  EXPECT_FALSE(stored.has_value());
}

// The same with a purge in place of the compaction: purged records stay purged.
TEST_F(StorageTest, APurgedRecordStaysGoneWhenTheClockStepsBack) {
  const auto start = clock_->Now();
  ASSERT_OK_AND_ASSIGN(auto claim, Begin("k"));
  clock_->Advance(2s);
  ASSERT_OK_AND_ASSIGN(uint64_t purged, storage_->Purge({}));
  EXPECT_EQ(purged, 1u);
  clock_->Set(start + 500ms);
  EXPECT_FALSE(Complete("k", claim.token).ok()) << "completed a purged record";
  ASSERT_OK_AND_ASSIGN(auto stored, backend_->Get("k"));
  EXPECT_FALSE(stored.has_value());
}

// Compaction drops an expired claim but not its expiry-index entry; the key is claimed again.
// A purge reaching the old entry must leave the new record alone: entries at or before the
// filter horizon are checked against the record before it is deleted.
TEST_F(StorageTest, AnIndexEntryLeftByCompactionDoesNotPurgeANewerRecord) {
  ASSERT_OK_AND_ASSIGN(auto first, Begin("k"));
  DropExpiredByCompaction(48h);
  ASSERT_OK_AND_ASSIGN(auto stored, backend_->Get("k"));
  ASSERT_FALSE(stored.has_value()) << "compaction kept an expired record";
  ASSERT_OK_AND_ASSIGN(
      auto second,
      backend_->Begin({.key = "k", .lease = 1s, .retention = 96h, .request_id = ++request_id_},
                      idem::Holder{}));
  ASSERT_EQ(second.outcome, Outcome::kAcquired);
  ASSERT_OK_AND_ASSIGN(uint64_t purged, storage_->Purge({}));
  EXPECT_EQ(purged, 0u);
  ASSERT_OK_AND_ASSIGN(stored, backend_->Get("k"));
  EXPECT_TRUE(stored.has_value()) << "a purge deleted a record that expires in four days";
}

// Due records after the horizon are deleted without being read; all of them, and nothing else.
TEST_F(StorageTest, APurgeDeletesExactlyTheDueRecords) {
  for (int i = 0; i < 100; ++i) {
    ASSERT_OK_AND_ASSIGN(auto claim, backend_->Begin({.key = "due-" + std::to_string(i),
                                                      .lease = 1s,
                                                      .retention = 1s,
                                                      .request_id = ++request_id_},
                                                     idem::Holder{}));
    ASSERT_OK_AND_ASSIGN(auto kept, backend_->Begin({.key = "kept-" + std::to_string(i),
                                                     .lease = 1s,
                                                     .retention = 1h,
                                                     .request_id = ++request_id_},
                                                    idem::Holder{}));
  }
  clock_->Advance(2s);
  ASSERT_OK_AND_ASSIGN(uint64_t purged, storage_->Purge({}));
  EXPECT_EQ(purged, 100u);
  for (int i = 0; i < 100; ++i) {
    ASSERT_OK_AND_ASSIGN(auto due, storage_->Read("due-" + std::to_string(i)));
    EXPECT_FALSE(due.record.has_value()) << i;
    ASSERT_OK_AND_ASSIGN(auto kept, storage_->Read("kept-" + std::to_string(i)));
    EXPECT_TRUE(kept.record.has_value()) << i;
  }
}

// idem turns RocksDB's per-thread perf counters off during its calls (they cost a replay a
// fifth of its time) and leaves the thread's level as it found it, for a caller that counts its
// own use of RocksDB.
TEST_F(StorageTest, CallsCountNothingAndLeaveTheThreadsPerfLevelAsItWas) {
  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kEnableCount);
  rocksdb::get_perf_context()->Reset();
  ASSERT_OK_AND_ASSIGN(auto claim, Begin("k"));
  ASSERT_OK(Complete("k", claim.token));
  ASSERT_OK_AND_ASSIGN(auto replay, Begin("k"));
  EXPECT_EQ(replay.outcome, Outcome::kReplay);
  ASSERT_OK_AND_ASSIGN(auto stored, storage_->Read("k"));
  ASSERT_OK(storage_->Purge({}).status());
  EXPECT_EQ(rocksdb::get_perf_context()->get_from_memtable_count, 0u);
  EXPECT_EQ(rocksdb::get_perf_context()->write_wal_time, 0u);
  EXPECT_EQ(rocksdb::GetPerfLevel(), rocksdb::PerfLevel::kEnableCount);
  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable);
  ASSERT_OK(storage_->Read("k").status());
  EXPECT_EQ(rocksdb::GetPerfLevel(), rocksdb::PerfLevel::kDisable);
}

// Writes and reads reuse per-thread and per-stripe buffers; a large record between small ones
// (which makes them grow, then be let go) must not leave bytes behind in either.
TEST_F(StorageTest, ALargeRecordBetweenSmallOnesLeavesNothingBehind) {
  const std::string large(300'000, 'L');
  for (const std::string& payload : {std::string("small"), large, std::string("tiny")}) {
    const std::string key = "k-" + std::to_string(payload.size());
    ASSERT_OK_AND_ASSIGN(auto claim, Begin(key));
    ASSERT_OK(backend_->Transition({.key = key,
                                    .request = {.kind = idem::engine::TransitionKind::kComplete,
                                                .token = claim.token,
                                                .payload = payload}}));
  }
  for (const std::string& payload : {std::string("small"), large, std::string("tiny")}) {
    ASSERT_OK_AND_ASSIGN(auto stored, storage_->Read("k-" + std::to_string(payload.size())));
    ASSERT_TRUE(stored.record.has_value());
    EXPECT_EQ(stored.record->result, payload);
    EXPECT_EQ(stored.record->state, idem::State::kDone);
  }
  ASSERT_OK(storage_->Flush());  // and once more from a table file
  ASSERT_OK_AND_ASSIGN(auto stored, storage_->Read("k-4"));
  ASSERT_TRUE(stored.record.has_value());
  EXPECT_EQ(stored.record->result, "tiny");
}

// A token is drawn only for a claim written: answers that write nothing (in progress, a resent
// Begin) use none, so consecutive claims get consecutive tokens.
TEST_F(StorageTest, OnlyAClaimWrittenDrawsAToken) {
  ASSERT_OK_AND_ASSIGN(auto first, Begin("a"));
  ASSERT_EQ(first.outcome, Outcome::kAcquired);
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(auto busy, Begin("a"));
    EXPECT_EQ(busy.outcome, Outcome::kInProgress);
  }
  ASSERT_OK_AND_ASSIGN(auto second, Begin("b"));
  ASSERT_EQ(second.outcome, Outcome::kAcquired);
  EXPECT_EQ(second.token, first.token + 1);
}

// A compaction holds the index of the table file it writes in memory, outside the block cache,
// until the file is finished, so the records' files are sized from the memory budget: 8 MiB at
// a 48 MiB budget, where RocksDB's own default (64 MiB) would put this test's 24 MiB of
// records into one file.
TEST(StorageTableFiles, ACompactionWritesFilesSizedFromTheMemoryBudget) {
  TempDir dir;
  auto clock = std::make_shared<idem_test::ManualClock>();
  idem::storage::RocksDbConfig config;
  config.path = dir.Sub("db");
  config.clock = clock;
  config.memory_budget = 48 << 20;
  ASSERT_OK_AND_ASSIGN(auto opened, idem::storage::RocksDbStorage::Open(config));
  idem::storage::RocksDbStorage* storage = opened.get();
  auto backend = idem_test::OwnerBackend(std::move(opened), idem_test::TestOptions(clock));
  // Results that do not compress: what is written is what the files hold.
  std::mt19937_64 random(7);
  std::string result(4096, '\0');
  for (int i = 0; i < 6000; ++i) {
    for (char& byte : result) byte = static_cast<char>(random());
    const std::string key = "key-" + std::to_string(i);
    ASSERT_OK_AND_ASSIGN(auto claim,
                         backend->Begin({.key = key, .lease = 1s, .retention = 1h, .request_id = 1},
                                        idem::Holder{}));
    ASSERT_OK(backend->Transition({.key = key,
                                   .request = {.kind = idem::engine::TransitionKind::kComplete,
                                               .token = claim.token,
                                               .payload = result}}));
  }
  ASSERT_OK(storage->Flush());
  ASSERT_OK(storage->CompactRecords());
  std::vector<std::uintmax_t> sizes;
  for (const auto& entry : std::filesystem::directory_iterator(config.path)) {
    if (entry.path().extension() == ".sst") sizes.push_back(entry.file_size());
  }
  const std::uintmax_t largest = sizes.empty() ? 0 : *std::ranges::max_element(sizes);
  const auto large = std::ranges::count_if(sizes, [](auto size) { return size > (4u << 20); });
  EXPECT_LE(largest, 10u << 20) << "a table file of " << largest << " bytes";
  EXPECT_GE(large, 2) << "24 MiB of records compacted into " << sizes.size() << " table files";
}

}  // namespace
