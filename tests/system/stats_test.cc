// Store::GetStats: the live records by state and type and the oldest pending one, equal to what a
// Scan of the same store counts. In a store directory the owner keeps the counts as it writes
// (precision: a minute for done and failed records), counts what it found at start-up by a
// background scan while writes go on, and answers a client process over its socket; a read-only
// reader of the files and a store in PostgreSQL count by reading (precision 0). Also the counters
// of transitions and the engine's health.

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "idem/idem.h"
#include "storage/rocksdb/record_codec.h"
#include "support/owner_process.h"
#include "support/raw_db.h"
#include "support/store_stats.h"
#include "support/test_util.h"
#include "util/time.h"

namespace {

using idem::Record;
using idem::State;
using idem::StoreStats;
using idem_test::Backend;
using idem_test::ClockedStore;
using idem_test::TempDir;
using idem_test::TestOptions;
using namespace std::chrono_literals;

// The figures a Scan of `store` gives: every live record read.
StoreStats Scanned(idem::Store& store) {
  StoreStats stats;
  const idem::Status status = store.Scan({}, [&stats](const Record& record) {
    const std::string state = record.state == State::kPending
                                  ? (record.timed_out ? "timeout" : "pending")
                                  : std::string(idem::StateName(record.state));
    ++stats.records;
    ++stats.by_state[state];
    ++stats.by_type[record.type];
    if (record.state == State::kPending &&
        (!stats.oldest_pending || record.created < stats.oldest_pending->created)) {
      stats.oldest_pending = record;
    }
    return true;
  });
  EXPECT_TRUE(status.ok()) << status.ToString();
  return stats;
}

// GetStats once the owner's counts answer (its start-up count done); on a backend that keeps
// none, its first answer.
StoreStats Counted(idem::Store& store, Backend backend = Backend::kRocksDb) {
  StoreStats stats;
  EXPECT_TRUE(idem_test::WaitFor([&] {
    idem::Result<StoreStats> got = store.GetStats();
    if (!got.ok()) {
      ADD_FAILURE() << got.status().ToString();
      return true;
    }
    stats = *got;
    return backend != Backend::kRocksDb || stats.precision > 0ms;
  })) << "the owner's start-up count did not end";
  return stats;
}

class Stats : public idem_test::OnEachBackend {};

TEST_P(Stats, CountEveryStateAndTypeAsAScanDoes) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  idem::Store& store = *s.store;
  const StoreStats empty = Counted(store, GetParam());
  EXPECT_EQ(empty.records, 0u);
  EXPECT_TRUE(empty.by_state.empty());
  EXPECT_FALSE(empty.oldest_pending.has_value());
  if (GetParam() == Backend::kRocksDb) {
    EXPECT_EQ(empty.precision, 60s) << "the owner keeps them";
    ASSERT_TRUE(empty.engine.has_value());
    EXPECT_FALSE(empty.engine->writes_stopped);
  } else {
    EXPECT_EQ(empty.precision, 0ms) << "PostgreSQL's are read";
    EXPECT_FALSE(empty.engine.has_value());
  }

  ASSERT_OK_AND_ASSIGN(auto paid, store.Begin("order-1", {.type = "pay"}));
  ASSERT_OK(store.Complete("order-1", paid.token, "charged"));
  ASSERT_OK(store.Complete("order-1", paid.token, "charged"));  // a repeat, answered OK
  ASSERT_OK_AND_ASSIGN(auto declined, store.Begin("order-2", {.type = "pay"}));
  ASSERT_OK(store.Fail("order-2", declined.token, "card declined", idem::Failure::kRetryable));
  ASSERT_OK_AND_ASSIGN(auto refund, store.Begin("refund-1", {.type = "refund"}));
  ASSERT_OK(store.Fail("refund-1", refund.token, "no such order", idem::Failure::kTerminal));
  ASSERT_OK_AND_ASSIGN(auto first, store.Begin("refund-2", {.type = "refund"}));
  ASSERT_OK_AND_ASSIGN(auto second, store.Begin("ship-1", {.type = "ship"}));
  ASSERT_OK(store.Extend("ship-1", second.token, 30s));
  ASSERT_OK_AND_ASSIGN(auto forgotten, store.Begin("gone", {.type = "ship"}));
  ASSERT_OK(store.Forget("gone"));

  StoreStats stats = Counted(store, GetParam());
  idem_test::ExpectSameRecordFigures(stats, Scanned(store));
  EXPECT_EQ(stats.records, 5u);
  EXPECT_EQ(stats.by_state, (std::map<std::string, uint64_t, std::less<>>{
                                {"done", 1}, {"failed", 2}, {"pending", 2}}));
  EXPECT_EQ(stats.by_type,
            (std::map<std::string, uint64_t, std::less<>>{{"pay", 2}, {"refund", 2}, {"ship", 1}}));
  ASSERT_TRUE(stats.oldest_pending.has_value());
  EXPECT_EQ(stats.oldest_pending->key, "refund-2");
  EXPECT_EQ(stats.oldest_pending->created, first.record.created);

  // A record claimed again after its failure moves back to pending.
  ASSERT_OK_AND_ASSIGN(auto retried, store.Begin("order-2", {.type = "pay"}));
  EXPECT_EQ(retried.outcome, idem::Outcome::kAcquired);
  idem_test::ExpectSameRecordFigures(Counted(store, GetParam()), Scanned(store));

  ASSERT_OK_AND_ASSIGN(const idem::Counters counters, store.GetCounters());
  EXPECT_EQ(counters.completes, 1u) << "the repeated Complete wrote nothing";
  EXPECT_EQ(counters.fails, 1u);
  EXPECT_EQ(counters.terminal_fails, 1u);
  EXPECT_EQ(counters.io_errors + counters.corruption_errors + counters.timeout_errors +
                counters.busy_errors + counters.unavailable_errors,
            0u);
  static_cast<void>(forgotten);
}

IDEM_ON_EACH_BACKEND(Stats);

// The owner's clock moves: a lease that passes makes a pending record timed out at once, and a
// record whose retention passes leaves the counts, a done one by the end of its minute.
TEST(StatsOfADirectory, PassingLeasesAndRetentionsMoveTheCountsWithoutAWrite) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  idem::Store& store = *s.store;
  ASSERT_OK_AND_ASSIGN(auto done, store.Begin("done", {.lease = 5s, .retention = 1h}));
  ASSERT_OK(store.Complete("done", done.token, "ok"));
  ASSERT_OK_AND_ASSIGN(auto stuck, store.Begin("stuck", {.lease = 5s, .retention = 2h}));
  EXPECT_EQ(Counted(store).by_state.at("pending"), 1u);

  s.clock->Advance(6s);
  StoreStats stats = Counted(store);
  EXPECT_EQ(stats.by_state.at("timeout"), 1u);
  EXPECT_EQ(stats.by_state.count("pending"), 0u);
  idem_test::ExpectSameRecordFigures(stats, Scanned(store));

  s.clock->Advance(1h);  // past the done record's retention, within its minute at most
  stats = Counted(store);
  EXPECT_LE(stats.records, 2u);
  s.clock->Advance(61s);
  stats = Counted(store);
  idem_test::ExpectSameRecordFigures(stats, Scanned(store));
  EXPECT_EQ(stats.records, 1u);
  EXPECT_EQ(stats.by_state.count("done"), 0u);
  s.clock->Advance(2h);
  idem_test::ExpectSameRecordFigures(Counted(store), Scanned(store));
  EXPECT_EQ(Counted(store).records, 0u);
  static_cast<void>(stuck);
}

// Reopened, the owner counts the records it finds in the background while others write: a write
// of a record it has yet to read, or has read already, is counted once either way.
TEST(StatsOfADirectory, TheOwnerCountsWhatItFoundWhileWritesGoOn) {
  TempDir dir;
  constexpr int kRecords = 20000;
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    for (int i = 0; i < kRecords; ++i) {
      const std::string key = "old-" + std::to_string(i);
      // Leases that outlast the test: a lease running out between the counts and the scan
      // would move a record from pending to timeout between them.
      ASSERT_OK_AND_ASSIGN(auto claim,
                           store->Begin(key, {.type = i % 3 == 0 ? "pay" : "ship", .lease = 1h}));
      if (i % 2 == 0) ASSERT_OK(store->Complete(key, claim.token, "ok"));
    }
  }
  // Without the counts the closing owner kept, the next one counts by a scan.
  idem_test::WithRawDb(dir.StorePath(), "meta", [](rocksdb::DB& db, auto* meta) {
    EXPECT_TRUE(db.Delete(rocksdb::WriteOptions(), meta, "record_counts").ok());
  });
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  std::vector<std::thread> writers;
  std::atomic<bool> failed{false};
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      for (int i = w; i < kRecords; i += 40) {
        const std::string old_key = "old-" + std::to_string(i);
        const std::string new_key = "new-" + std::to_string(i);
        auto claim = store->Begin(new_key, {.type = "refund", .lease = 1h});
        bool ok = claim.ok() && store->Complete(new_key, claim->token, "ok").ok();
        // Old records: forgotten, or taken over and completed when still pending.
        if (i % 4 == 0) ok = ok && store->Forget(old_key).ok();
        failed = failed || !ok;
      }
    });
  }
  for (std::thread& writer : writers) writer.join();
  ASSERT_FALSE(failed);
  const StoreStats stats = Counted(*store);
  EXPECT_EQ(stats.precision, 60s);
  idem_test::ExpectSameRecordFigures(stats, Scanned(*store));
}

// The record counts an owner kept (meta key record_counts) in the store directory `path`, read
// without opening it for writing (which could change them); empty when there are none.
std::string KeptCounts(const std::string& path) {
  std::string value;
  idem_test::WithRawDbOpened(path, "meta", /*read_only=*/true, [&](rocksdb::DB& db, auto* meta) {
    const rocksdb::Status read = db.Get(rocksdb::ReadOptions(), meta, "record_counts", &value);
    EXPECT_TRUE(read.ok() || read.IsNotFound()) << read.ToString();
  });
  return value;
}

// Records of every state and type, with leases and retentions that outlast the test.
void WriteEveryState(idem::Store& store) {
  for (int i = 0; i < 30; ++i) {
    const std::string key = "k-" + std::to_string(i);
    ASSERT_OK_AND_ASSIGN(auto claim,
                         store.Begin(key, {.type = i % 2 == 0 ? "pay" : "ship", .lease = 1h}));
    if (i % 3 == 1) ASSERT_OK(store.Complete(key, claim.token, "ok"));
    if (i % 3 == 2) ASSERT_OK(store.Fail(key, claim.token, "no", idem::Failure::kTerminal));
  }
}

// A clean close keeps the owner's record counts in the store; the next owner takes them (once)
// instead of counting the records by a scan, and they are the store's.
TEST(StatsOfADirectory, TheNextOwnerTakesTheCountsKeptAtACleanClose) {
  TempDir dir;
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    WriteEveryState(*store);
    Counted(*store);
  }
  EXPECT_FALSE(KeptCounts(dir.StorePath()).empty()) << "the closing owner kept its counts";
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  ASSERT_OK_AND_ASSIGN(const StoreStats first, store->GetStats());
  EXPECT_EQ(first.precision, 60s) << "answered from the kept counts, at once";
  idem_test::ExpectSameRecordFigures(first, Scanned(*store));
  EXPECT_EQ(first.records, 30u);
  EXPECT_TRUE(KeptCounts(dir.StorePath()).empty()) << "taken, not left to be used again";
}

// Counts that would take more than LiveRecordCounts::kMostKeptBytes (pending records are kept
// with their keys) are not kept: the next owner counts by a scan.
TEST(StatsOfADirectory, CountsOfVeryManyPendingRecordsAreNotKept) {
  TempDir dir;
  const std::string padding(400, 'p');  // 11,000 pending records of ~440 bytes each
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    for (int i = 0; i < 11000; ++i) {
      ASSERT_OK(store->Begin("k-" + std::to_string(i) + padding, {.lease = 1h}).status());
    }
    Counted(*store);
  }
  EXPECT_TRUE(KeptCounts(dir.StorePath()).empty());
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  const StoreStats stats = Counted(*store);
  EXPECT_EQ(stats.by_state.at("pending"), 11000u);
  idem_test::ExpectSameRecordFigures(stats, Scanned(*store));
}

// Counts kept before the store was written by other means (here RocksDB itself) are not used:
// the next owner counts by a scan, and finds the record written behind its back.
TEST(StatsOfADirectory, CountsKeptBeforeAnotherWriteAreNotUsed) {
  TempDir dir;
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    WriteEveryState(*store);
    Counted(*store);
  }
  idem::Record extra;
  extra.key = "written-behind";
  extra.type = "refund";
  extra.state = State::kDone;
  extra.token = 1;
  extra.attempts = 1;
  extra.created = extra.updated = extra.lease_deadline =
      idem::util::TruncateToMicros(std::chrono::system_clock::now());
  extra.expires = extra.created + 24h;
  idem_test::PutRaw(dir.StorePath(), "default", extra.key, idem::storage::EncodeRecord(extra));
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  const StoreStats stats = Counted(*store);
  idem_test::ExpectSameRecordFigures(stats, Scanned(*store));
  EXPECT_EQ(stats.records, 31u);
  EXPECT_EQ(stats.by_type.at("refund"), 1u);
}

// A client process gets the owner's counts over its socket.
TEST(StatsOfADirectory, AClientProcessGetsTheOwnersCounts) {
  TempDir dir;
  idem_test::OwnerProcess owner(dir.StorePath());
  ASSERT_TRUE(owner.ready());
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  for (int i = 0; i < 50; ++i) {
    ASSERT_OK_AND_ASSIGN(auto claim,
                         store->Begin("k" + std::to_string(i), {.type = "pay", .lease = 1h}));
    if (i % 5 != 0) ASSERT_OK(store->Complete("k" + std::to_string(i), claim.token, "ok"));
  }
  const StoreStats stats = Counted(*store);
  EXPECT_EQ(stats.precision, 60s) << "the owner's kept counts";
  idem_test::ExpectSameRecordFigures(stats, Scanned(*store));
  EXPECT_EQ(stats.by_state.at("done"), 40u);
  ASSERT_TRUE(stats.engine.has_value());
}

// Nobody owns the store: a read-only handle counts the files' records by reading them; the engine
// is the files'. A backup flushes the memtables: table files then hold the records.
TEST(StatsOfADirectory, AReaderOfTheFilesCountsByReading) {
  TempDir dir;
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    for (int i = 0; i < 100; ++i) {
      ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("k" + std::to_string(i)));
      ASSERT_OK(store->Complete("k" + std::to_string(i), claim.token, std::string(100, 'x')));
    }
    ASSERT_OK(store->Backup(dir.path() + "/backup"));
  }
  idem::Options options = TestOptions();
  options.read_only = true;
  IDEM_ASSERT_OPEN(reader, dir.StorePath(), options);
  ASSERT_OK_AND_ASSIGN(const StoreStats stats, reader->GetStats());
  EXPECT_EQ(stats.precision, 0ms);
  EXPECT_EQ(stats.records, 100u);
  idem_test::ExpectSameRecordFigures(stats, Scanned(*reader));
  ASSERT_TRUE(stats.engine.has_value());
  EXPECT_GT(stats.engine->live_table_bytes, 1000u) << "the records are in table files";
  EXPECT_GE(stats.engine->total_table_bytes, stats.engine->live_table_bytes);
  EXPECT_FALSE(stats.engine->writes_stopped);
}

// The counters go on across owners: the one that closes keeps them in the store, and the next
// starts from them.
TEST(CountersOfADirectory, GoOnFromOneOwnerToTheNext) {
  TempDir dir;
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    for (int i = 0; i < 3; ++i) {
      ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("k" + std::to_string(i)));
      ASSERT_OK(store->Complete("k" + std::to_string(i), claim.token, "ok"));
    }
    ASSERT_OK_AND_ASSIGN(auto replay, store->Begin("k0"));
    EXPECT_EQ(replay.outcome, idem::Outcome::kReplay);
  }
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("k3"));
  ASSERT_OK(store->Fail("k3", claim.token, "declined"));
  ASSERT_OK_AND_ASSIGN(const idem::Counters counters, store->GetCounters());
  EXPECT_EQ(counters.claims, 4u);
  EXPECT_EQ(counters.replays, 1u);
  EXPECT_EQ(counters.completes, 3u);
  EXPECT_EQ(counters.fails, 1u);
}

// An owner killed with SIGKILL saved its counters a few seconds before (every 5 s): the next
// owner goes on from them.
TEST(CountersOfADirectory, AKilledOwnerLosesAtMostItsLastSeconds) {
  TempDir dir;
  idem_test::OwnerProcess owner(dir.StorePath());
  ASSERT_TRUE(owner.ready());
  {
    IDEM_ASSERT_OPEN(client, dir.StorePath());
    for (int i = 0; i < 5; ++i) {
      ASSERT_OK_AND_ASSIGN(auto claim, client->Begin("k" + std::to_string(i)));
      ASSERT_OK(client->Complete("k" + std::to_string(i), claim.token, "ok"));
    }
  }
  std::this_thread::sleep_for(6500ms);  // past the owner's next save
  owner.Kill();
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  ASSERT_OK_AND_ASSIGN(const idem::Counters counters, store->GetCounters());
  EXPECT_GE(counters.claims, 5u);
  EXPECT_GE(counters.completes, 5u);
}

}  // namespace
