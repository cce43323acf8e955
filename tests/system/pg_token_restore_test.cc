// Tokens after a restore never repeat, at any reopen rate, in a store kept in PostgreSQL
// (storage/postgres/pg_storage_tokens.cc): tables restored from a backup (their rows and the
// sequence as the backup holds them, as pg_restore leaves them) start above every token the
// original handed out after the backup, however fast it was reopened and however many of its
// processes reserved blocks at once; a store of the release before the lead gets its margin and
// keeps rising.
//
// Each "process" is a PgStorage of its own on the server's clock, as separate processes or hosts
// would have; a claim is what Begin stores for a new key (ReadOrCreate).

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/state_machine.h"
#include "storage/postgres/pg_storage.h"
#include "support/pg_engine_store.h"
#include "support/pg_server.h"
#include "support/test_util.h"

namespace {

using namespace std::chrono_literals;
using idem::storage::PgConninfo;
using idem::storage::PgStorage;
using idem::storage::PgStorageConfig;

constexpr char kTable[] = "restored";
constexpr char kRecords[] = "idem.restored";
constexpr char kMeta[] = "idem.restored_meta";
constexpr char kSequence[] = "idem.restored_token_seq";

// A process's store: one connection, the server's clock (or `clock`'s, a test clock).
std::unique_ptr<PgStorage> OpenProcess(const idem_test::PgServer& server,
                                       std::shared_ptr<const idem::Clock> clock = nullptr) {
  auto conninfo = PgConninfo::Parse(server.Uri());
  EXPECT_TRUE(conninfo.ok()) << conninfo.status().ToString();
  if (!conninfo.ok()) return nullptr;
  PgStorageConfig config;
  config.table = kTable;
  config.pool.size = 1;
  config.clock = std::move(clock);
  auto storage = PgStorage::Open(*conninfo, std::move(config));
  EXPECT_TRUE(storage.ok()) << storage.status().ToString();
  return storage.ok() ? std::move(storage).value() : nullptr;
}

// Claims a new key, as Begin does; its token (0 when it failed).
uint64_t Claim(PgStorage& storage, const std::string& key) {
  const idem::engine::BeginRequest request{
      .key = key, .lease = 10s, .retention = 1h, .holder = {.pid = 1, .process_start = 2}};
  auto claimed = storage.ReadOrCreate(key, request, idem::Durability::kSync);
  EXPECT_TRUE(claimed.ok()) << claimed.status().ToString();
  if (!claimed.ok()) return 0;
  EXPECT_TRUE(claimed->created.has_value()) << key << " was claimed before";
  return claimed->created ? claimed->created->token : 0;
}

// A superuser's connection, for the backup and the restore.
class Admin {
 public:
  explicit Admin(const idem_test::PgServer& server)
      : conn_(PQconnectdb(server.AdminConninfo().c_str())) {
    EXPECT_EQ(PQstatus(conn_), CONNECTION_OK) << PQerrorMessage(conn_);
  }
  ~Admin() { PQfinish(conn_); }
  Admin(const Admin&) = delete;
  Admin& operator=(const Admin&) = delete;

  // The first column of the first row of `sql`, the last statement's (empty when none).
  std::string Value(const std::string& sql) { return idem_test::Exec(conn_, sql); }
  // The same as a number (0, a failure, when there is none).
  uint64_t Number(const std::string& sql) {
    const std::string value = Value(sql);
    if (value.empty()) ADD_FAILURE() << sql << " returned nothing";
    return value.empty() ? 0 : std::stoull(value);
  }

  // The store's rows, meta table and sequence, as pg_dump takes them.
  void BackUp() {
    Value(
        fmt::format("DROP TABLE IF EXISTS idem.backup_records, idem.backup_meta; "
                    "CREATE TABLE idem.backup_records AS SELECT * FROM {}; "
                    "CREATE TABLE idem.backup_meta AS SELECT * FROM {}",
                    kRecords, kMeta));
    sequence_ = Value(fmt::format("SELECT last_value || ', ' || is_called FROM {}", kSequence));
  }
  // Puts the backup back in place of the store's tables, as pg_restore --clean does.
  void Restore() {
    Value(
        fmt::format("BEGIN; DELETE FROM {0}; INSERT INTO {0} SELECT * FROM idem.backup_records; "
                    "DELETE FROM {1}; INSERT INTO {1} SELECT * FROM idem.backup_meta; "
                    "SELECT setval('{2}', {3}); COMMIT",
                    kRecords, kMeta, kSequence, sequence_));
  }
  // The server's time in microseconds since the epoch.
  uint64_t Now() { return Number("SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint"); }
  uint64_t Lead() {
    return Number(fmt::format("SELECT value FROM {} WHERE name = 'token_lead'", kMeta));
  }

 private:
  PGconn* const conn_;
  std::string sequence_;  // "last_value, is_called" at the backup
};

// Starts the server with room for more processes than its default 100 connections.
#define IDEM_START_ROOMY_PG_OR_SKIP(server)                           \
  IDEM_START_PG_OR_SKIP(server);                                      \
  ASSERT_OK(server->Admin("ALTER SYSTEM SET max_connections = 300")); \
  ASSERT_OK(server->Restart(idem_test::PgServer::Shutdown::kFast))

// Each of `processes` claims `key_prefix`-i at once, on a thread of its own: each reserves its
// first block, none waiting for another's. The largest token handed out.
uint64_t ClaimAtOnce(std::vector<std::unique_ptr<PgStorage>>& processes,
                     const std::string& key_prefix) {
  std::vector<uint64_t> tokens(processes.size());
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < processes.size(); ++i) {
    threads.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();
      tokens[i] = Claim(*processes[i], fmt::format("{}-{}", key_prefix, i));
    });
  }
  go = true;
  for (std::thread& thread : threads) thread.join();
  return *std::max_element(tokens.begin(), tokens.end());
}

// The original, after the backup: reopened `reopens` times as fast as it opens, one claim each;
// then `processes` processes, opened first, claiming at once. The largest token handed out.
uint64_t HandOutAfterTheBackup(const idem_test::PgServer& server, int round, int reopens,
                               int processes) {
  uint64_t largest = 0;
  for (int i = 0; i < reopens; ++i) {
    auto storage = OpenProcess(server);
    if (storage == nullptr) return largest;
    largest = std::max(largest, Claim(*storage, fmt::format("reopened-{}-{}", round, i)));
  }
  std::vector<std::unique_ptr<PgStorage>> opened;
  for (int i = 0; i < processes; ++i) {
    opened.push_back(OpenProcess(server));
    if (opened.back() == nullptr) return largest;
  }
  return std::max(largest, ClaimAtOnce(opened, fmt::format("at-once-{}", round)));
}

// Restored tables reopened as fast as they open start above every token handed out after the
// backup: the original's fast reopens, and the first blocks of 120 processes reserved at once
// (all the slack allows without raising the lead), which used to run the sequence 120 ms ahead
// of the clock in a fraction of that, so that tables restored and reopened right after them
// handed the same tokens out again.
TEST(PgTokensAfterRestore, RestoredTablesStartAboveEveryTokenHandedOutAfterTheBackup) {
  IDEM_START_ROOMY_PG_OR_SKIP(server);
  Admin admin(*server);
  const int processes = PgStorage::kTokenLeadSlack / PgStorage::kTokenBlock - 8;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(fmt::format("round {}", round));
    {
      auto original = OpenProcess(*server);
      ASSERT_NE(original, nullptr);
      Claim(*original, fmt::format("before-{}", round));
      admin.BackUp();
    }
    const uint64_t later = HandOutAfterTheBackup(*server, round, /*reopens=*/20, processes);
    ASSERT_GT(later, 0u);
    // Every token was handed out at or below the server's time plus the lead: what a restore
    // starts above.
    EXPECT_LE(later, admin.Now() + admin.Lead());
    admin.Restore();
    for (int i = 0; i < 20; ++i) {
      auto restored = OpenProcess(*server);
      ASSERT_NE(restored, nullptr);
      EXPECT_GT(Claim(*restored, fmt::format("after-restore-{}-{}", round, i)), later)
          << "a token handed out after the backup came again, at reopen " << i;
    }
    // No raise of the lead was needed: the backup's lead bounds the tokens handed out after it.
    EXPECT_EQ(admin.Lead(), 0u);
  }
}

// Opens at any rate leave the lead as it is, and keep the tokens near the server's clock: each
// open's first token waits (a millisecond at most) for the clock rather than raising the lead.
TEST(PgTokensAfterRestore, FastReopensLeaveTheLeadAsItIs) {
  IDEM_START_PG_OR_SKIP(server);
  Admin admin(*server);
  uint64_t last = 0;
  for (int i = 0; i < 100; ++i) {
    auto storage = OpenProcess(*server);
    ASSERT_NE(storage, nullptr);
    const uint64_t token = Claim(*storage, fmt::format("k{}", i));
    EXPECT_GT(token, last);
    last = token;
  }
  EXPECT_EQ(admin.Lead(), 0u);
  EXPECT_LE(last, admin.Now());
}

// More processes reserving at once than the slack allows raise the lead, in the reservation's
// own transaction: every token handed out stays at or below the server's time plus the lead, so
// a restore of a backup taken after the raise starts above them all. "At once": the server's
// time stands still for them (the test clock, set to the server's time).
TEST(PgTokensAfterRestore, BlocksReservedBeyondTheSlackRaiseTheLeadBeforeTheirTokens) {
  IDEM_START_ROOMY_PG_OR_SKIP(server);
  Admin admin(*server);
  const auto clock = std::make_shared<idem_test::ManualClock>(idem_test::ManualClock::TimePoint(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::microseconds(admin.Now()))));
  const int processes = PgStorage::kTokenLeadSlack / PgStorage::kTokenBlock + 32;
  std::vector<std::unique_ptr<PgStorage>> opened;
  for (int i = 0; i < processes; ++i) {
    opened.push_back(OpenProcess(*server, clock));
    ASSERT_NE(opened.back(), nullptr);
  }
  const uint64_t largest = ClaimAtOnce(opened, "at-once");
  EXPECT_GT(admin.Lead(), 0u) << processes << " blocks at once left the lead as it was";
  EXPECT_LE(largest, admin.Now() + admin.Lead());
  admin.BackUp();
  opened.clear();
  admin.Restore();
  auto restored = OpenProcess(*server);
  ASSERT_NE(restored, nullptr);
  EXPECT_GT(Claim(*restored, "after-restore"), largest);
}

// A store of the release before the lead (no token_lead row; its processes may have run the
// sequence ahead of the clock, here by 10 minutes after the backup) is given the margin at its
// first open by this release: restored from its backup, it starts above those tokens; and it
// keeps working, its tokens rising.
TEST(PgTokensAfterRestore, AStoreOfTheReleaseBeforeTheLeadGetsTheMarginAndKeepsRising) {
  IDEM_START_PG_OR_SKIP(server);
  Admin admin(*server);
  uint64_t before = 0;
  {
    auto made = OpenProcess(*server);
    ASSERT_NE(made, nullptr);
    before = Claim(*made, "made-before");
  }
  // The tables as the release before the lead made them: the meta table without the row.
  admin.Value(fmt::format("DELETE FROM {} WHERE name = 'token_lead'", kMeta));
  admin.BackUp();
  // Its processes, after the backup: blocks up to 10 minutes ahead of the clock.
  const uint64_t ahead_block = (admin.Now() + 600'000'000) / PgStorage::kTokenBlock;
  admin.Value(fmt::format("SELECT setval('{}', {})", kSequence, ahead_block));
  const uint64_t handed_out = ahead_block * PgStorage::kTokenBlock + PgStorage::kTokenBlock - 1;
  admin.Restore();
  ASSERT_EQ(admin.Value(fmt::format("SELECT count(*) FROM {} WHERE name = 'token_lead'", kMeta)),
            "0");

  uint64_t last = 0;
  for (int i = 0; i < 3; ++i) {
    auto storage = OpenProcess(*server);
    ASSERT_NE(storage, nullptr);
    const uint64_t token = Claim(*storage, fmt::format("migrated-{}", i));
    EXPECT_GT(token, handed_out) << "a token of the release before came again";
    EXPECT_GT(token, last);
    last = token;
    EXPECT_EQ(admin.Lead(), idem::storage::kUnknownLeadMargin);
    // Its records are read as they were.
    auto kept = storage->Read("made-before");
    ASSERT_TRUE(kept.ok()) << kept.status().ToString();
    ASSERT_TRUE(kept->record.has_value());
    EXPECT_EQ(kept->record->token, before);
  }
  EXPECT_LE(last, admin.Now() + admin.Lead());
}

}  // namespace
