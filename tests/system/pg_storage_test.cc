// PgStorage (storage/postgres/pg_storage.h) under the engine, against a real PostgreSQL server: the
// lifecycle, fencing, time from the server (moved by the test hook), tokens from the sequence,
// scans of binary keys, purge in batches, and writers racing from several "processes" (one
// PgStorage each, as separate processes or hosts would have).

#include "storage/postgres/pg_storage.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <atomic>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend/engine_backend.h"
#include "support/pg_engine_store.h"
#include "support/pg_server.h"
#include "support/test_util.h"

namespace {

using namespace std::chrono_literals;
using idem::Claim;
using idem::Outcome;
using idem::Record;
using idem::Status;
using idem::engine::TransitionKind;
using idem::storage::PgConninfo;
using idem::storage::PgStorage;
using idem::storage::PgStorageConfig;
using idem_test::Exec;
using idem_test::PgStore;
using idem_test::ReadBack;

TEST(PgStorage, ALifecycleIsStoredWholeAndReplayed) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = PgStore::Open(server->Uri());
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(Claim claim, store->Begin("pay-1"));
  EXPECT_EQ(claim.outcome, Outcome::kAcquired);
  EXPECT_GE(claim.token, PgStorage::kTokenBlock);
  EXPECT_EQ(claim.record.holder.pid_scope, 3u);
  ASSERT_OK(store->End("pay-1", claim.token, TransitionKind::kSaveCheckpoint, "step-1"));
  ASSERT_OK(store->End("pay-1", claim.token, TransitionKind::kComplete, "receipt"));
  ASSERT_OK_AND_ASSIGN(Claim replay, store->Begin("pay-1"));
  EXPECT_EQ(replay.outcome, Outcome::kReplay);
  EXPECT_EQ(replay.record.result, "receipt");
  EXPECT_EQ(replay.record.checkpoint, "step-1");
  // A done record keeps no holder (engine::ApplyTransition): the UPDATE clears it as well.
  EXPECT_EQ(replay.record.holder, idem::Holder{});
  ASSERT_OK_AND_ASSIGN(auto got, store->backend().Get("pay-1"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, replay.record);

  // Another process opening the same store sees the same record.
  auto other = PgStore::Open(server->Uri(), "idem_records", /*create=*/false);
  ASSERT_NE(other, nullptr);
  ASSERT_OK_AND_ASSIGN(auto seen, other->backend().Get("pay-1"));
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(*seen, *got);
}

TEST(PgStorage, AStaleHolderCannotOverwriteItsSuccessor) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = PgStore::Open(server->Uri());
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(Claim first, store->Begin("k", 1s));
  ASSERT_OK_AND_ASSIGN(Claim busy, store->Begin("k"));
  EXPECT_EQ(busy.outcome, Outcome::kInProgress);
  store->Advance(2s);  // the server's time, not this host's
  ASSERT_OK_AND_ASSIGN(Claim second, store->Begin("k"));
  EXPECT_EQ(second.outcome, Outcome::kAcquired);
  EXPECT_TRUE(second.took_over);
  EXPECT_GT(second.token, first.token);
  EXPECT_CODE(store->End("k", first.token, TransitionKind::kComplete, "late"), kLeaseLost);
  ASSERT_OK(store->End("k", second.token, TransitionKind::kComplete, "right"));
  ASSERT_OK_AND_ASSIGN(auto got, store->backend().Get("k"));
  EXPECT_EQ(got->result, "right");
  EXPECT_EQ(got->attempts, 2u);
}

TEST(PgStorage, KeysAreBytesAndScansFollowTheirOrder) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = PgStore::Open(server->Uri());
  ASSERT_NE(store, nullptr);
  // In memcmp order, which bytea keeps.
  const std::vector<std::string> keys = {std::string("a\0b", 3), "ab", "a\xff", "a\xff\xff", "b",
                                         std::string(1, '\xff')};
  for (const std::string& key : keys) ASSERT_OK(store->Begin(key).status());
  std::vector<std::string> all;
  ASSERT_OK(store->storage().Scan({}, [&](Record&& record, auto) {
    all.push_back(record.key);
    return true;
  }));
  EXPECT_EQ(all, keys);
  std::vector<std::string> prefixed;
  ASSERT_OK(store->storage().Scan({.prefix = "a\xff"}, [&](Record&& record, auto) {
    prefixed.push_back(record.key);
    return true;
  }));
  EXPECT_EQ(prefixed, (std::vector<std::string>{"a\xff", "a\xff\xff"}));
  // Pages of EngineBackend::Scan go on after start_after.
  ASSERT_OK_AND_ASSIGN(auto page, store->backend().Scan({.start_after = "ab"}, 2));
  ASSERT_EQ(page.records.size(), 2u);
  EXPECT_EQ(page.records[0].key, "a\xff");
  EXPECT_TRUE(page.more);
}

TEST(PgStorage, PurgeDeletesWhatExpiredByTheServersClockInBatches) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = PgStore::Open(server->Uri());
  ASSERT_NE(store, nullptr);
  const int due = PgStorage::kPurgeBatch + 10;  // more than one batch
  for (int i = 0; i < due; ++i) ASSERT_OK(store->Begin("due-" + std::to_string(i), 1s).status());
  store->Advance(30min);
  for (int i = 0; i < 5; ++i) ASSERT_OK(store->Begin("kept-" + std::to_string(i)).status());
  store->Advance(31min);  // the first ones' retention (1 h) ended; not the others'
  ASSERT_OK_AND_ASSIGN(uint64_t would, store->backend().Purge({.dry_run = true}));
  EXPECT_EQ(would, static_cast<uint64_t>(due));
  uint64_t last_progress = 0;
  ASSERT_OK_AND_ASSIGN(uint64_t purged, store->backend().Purge(
                                            {.progress = [&](uint64_t n) { last_progress = n; }}));
  EXPECT_EQ(purged, static_cast<uint64_t>(due));
  EXPECT_EQ(last_progress, purged);
  ASSERT_OK_AND_ASSIGN(auto page, store->backend().Scan({}, 100));
  EXPECT_EQ(page.records.size(), 5u);
}

// Four "processes" (a PgStorage each, as on four hosts), four threads each, race to acquire 200
// keys: each key is acquired exactly once, and every token is distinct. Their Begins start in
// every shape, and as a store chooses, so each shape races the others and itself.
TEST(PgStorage, RacingProcessesAcquireEachKeyExactlyOnce) {
  IDEM_START_PG_OR_SKIP(server);
  std::vector<std::unique_ptr<PgStore>> stores;
  for (int i = 0; i < 4; ++i) {
    std::optional<idem::storage::PgBeginShape> shape;
    if (i < 3) shape = idem_test::kEveryBeginShape[i];
    stores.push_back(PgStore::Open(server->Uri(), "idem_records", true, {}, shape));
    ASSERT_NE(stores.back(), nullptr);
  }
  constexpr int kKeys = 200;
  std::mutex mu;
  std::map<std::string, int> acquired;
  std::set<uint64_t> tokens;
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      PgStore& store = *stores[t % stores.size()];
      for (int k = 0; k < kKeys; ++k) {
        const std::string key = "key-" + std::to_string((k * 7 + t) % kKeys);
        auto claim = store.Begin(key, 1h);
        ASSERT_TRUE(claim.ok()) << claim.status().ToString();
        if (claim->outcome != Outcome::kAcquired) continue;
        std::lock_guard lock(mu);
        ++acquired[key];
        EXPECT_TRUE(tokens.insert(claim->token).second) << "token " << claim->token << " twice";
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(acquired.size(), static_cast<std::size_t>(kKeys));
  for (const auto& [key, count] : acquired) EXPECT_EQ(count, 1) << key;
}

TEST(PgStorage, ForgetRemovesAndTokensStayUnique) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = PgStore::Open(server->Uri());
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(Claim first, store->Begin("k"));
  ASSERT_OK(store->backend().Forget("k", idem::Durability::kSync, nullptr));
  EXPECT_CODE(store->backend().Forget("k", idem::Durability::kSync, nullptr), kNotFound);
  ASSERT_OK_AND_ASSIGN(Claim again, store->Begin("k"));
  EXPECT_EQ(again.outcome, Outcome::kAcquired);
  EXPECT_NE(again.token, first.token);
  EXPECT_CODE(store->End("k", first.token, TransitionKind::kComplete), kLeaseLost);
}

// A Begin resent with the same request id (its first reply lost) gets its own claim back.
TEST(PgStorage, AResentBeginGetsItsOwnClaim) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = PgStore::Open(server->Uri());
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(Claim claim, store->Begin("k", 10s, /*request_id=*/77));
  ASSERT_OK_AND_ASSIGN(Claim resent, store->Begin("k", 10s, /*request_id=*/77));
  EXPECT_EQ(resent.outcome, Outcome::kAcquired);
  EXPECT_EQ(resent.token, claim.token);
}

// Begin on a fresh key writes exactly the engine's fresh claim, with the server's time, in one
// round trip (the read and insert); on a key with a row (live or retention-expired) it writes
// nothing and returns the row for the engine to decide on, in one.
TEST(PgStorage, ReadOrCreateWritesTheEnginesFreshClaimOrReadsTheRow) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = PgStore::Open(server->Uri());
  ASSERT_NE(store, nullptr);
  idem::engine::BeginRequest request{
      .key = "fresh",
      .type = "pay",
      .fingerprint = "fp",
      .lease = 10s,
      .retention = 1h,
      .holder = {.pid = 7, .process_start = 8, .pid_scope = 9, .request_id = 10}};
  PgStorage& storage = store->storage();
  // The process's first token reserves a block from the sequence: a round trip of its own, once
  // per PgStorage::kTokenBlock tokens.
  ASSERT_OK(store->Begin("first").status());
  const uint64_t sent = storage.pool_stats().sent;
  ASSERT_OK_AND_ASSIGN(auto created,
                       storage.ReadOrCreate("fresh", request, idem::Durability::kSync));
  EXPECT_EQ(storage.pool_stats().sent, sent + 1);
  ASSERT_TRUE(created.created.has_value());
  EXPECT_FALSE(created.record.has_value());
  EXPECT_EQ(created.now, store->Now());
  const Record expected =
      idem::engine::FreshClaim(request, store->Now(), created.created->token).record;
  EXPECT_EQ(ReadBack(*store, "fresh"), expected);
  EXPECT_EQ(created.created->record, expected);

  // Again, and once the retention is over: the row as it is, nothing written.
  store->Advance(30min);
  for (int round = 0; round < 2; ++round) {
    request.holder.request_id = 11;
    const uint64_t sent_before = storage.pool_stats().sent;
    ASSERT_OK_AND_ASSIGN(auto again,
                         storage.ReadOrCreate("fresh", request, idem::Durability::kBuffered));
    EXPECT_EQ(storage.pool_stats().sent, sent_before + 1);
    EXPECT_FALSE(again.created.has_value());
    ASSERT_TRUE(again.record.has_value());
    EXPECT_EQ(*again.record, expected);
    EXPECT_EQ(again.now, store->Now());
    EXPECT_EQ(ReadBack(*store, "fresh"), expected);
    store->Advance(1h);
  }
  // A retention shorter than the lease is made as long as the lease, as the engine does.
  request.key = "short";
  request.retention = 1s;
  ASSERT_OK_AND_ASSIGN(auto short_claim,
                       storage.ReadOrCreate("short", request, idem::Durability::kBuffered));
  ASSERT_TRUE(short_claim.created.has_value());
  // The reads that created nothing drew no token.
  EXPECT_EQ(short_claim.created->token, created.created->token + 1);
  EXPECT_EQ(ReadBack(*store, "short"),
            idem::engine::FreshClaim(request, store->Now(), short_claim.created->token).record);
}

// A fresh key's Begin is one round trip (the read and insert), its Complete one (the fenced
// UPDATE); a replay is one; a refused Complete reads the row to say why.
TEST(PgStorage, AFreshBeginAReplayAndACompleteAreOneRoundTripEach) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = PgStore::Open(server->Uri());
  ASSERT_NE(store, nullptr);
  const auto sent = [&] { return store->storage().pool_stats().sent; };
  ASSERT_OK(store->Begin("first").status());  // reserves this process's block of tokens
  uint64_t before = sent();
  ASSERT_OK_AND_ASSIGN(Claim claim, store->Begin("k"));
  EXPECT_EQ(claim.outcome, Outcome::kAcquired);
  EXPECT_EQ(sent() - before, 1u);
  before = sent();
  ASSERT_OK(store->End("k", claim.token, TransitionKind::kComplete));
  EXPECT_EQ(sent() - before, 1u);
  before = sent();
  ASSERT_OK_AND_ASSIGN(Claim replay, store->Begin("k"));
  EXPECT_EQ(replay.outcome, Outcome::kReplay);
  EXPECT_EQ(sent() - before, 1u);
  EXPECT_EQ(replay.record, ReadBack(*store, "k"));
  // The same Complete again (its reply lost) is OK; a stale token is refused; both after a read.
  ASSERT_OK(store->End("k", claim.token, TransitionKind::kComplete));
  EXPECT_CODE(store->End("k", claim.token + 1, TransitionKind::kComplete), kLeaseLost);
  EXPECT_CODE(store->End("absent", claim.token, TransitionKind::kComplete), kNotFound);
}

class PgStorageBeginShape : public testing::TestWithParam<idem::storage::PgBeginShape> {};
INSTANTIATE_TEST_SUITE_P(Shapes, PgStorageBeginShape,
                         testing::ValuesIn(idem_test::kEveryBeginShape), idem_test::BeginShapeName);

// Every Begin is decided on the row its first round trip read (Storage::DecideOnRead), so it costs
// that read, the write of a claim when it makes one, and the server's incarnation when it is to
// take over a claim whose lease ran out (renewal_grace): never a second read of the row. Read
// first adds the insert to a fresh key; insert first adds the read to a key with a row.
TEST_P(PgStorageBeginShape, EveryBeginIsTheRoundTripsItNeeds) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = PgStore::Open(server->Uri(), "idem_records", true, {}, GetParam());
  ASSERT_NE(store, nullptr);
  const uint64_t fresh = GetParam() == idem::storage::PgBeginShape::kReadFirst ? 2 : 1;
  const uint64_t row = GetParam() == idem::storage::PgBeginShape::kInsertFirst ? 1 : 0;
  const auto sent = [&] { return store->storage().pool_stats().sent; };
  ASSERT_OK(store->Begin("first").status());  // reserves this process's block of tokens
  const auto round_trips = [&](std::string_view key, Outcome outcome, uint64_t request_id = 0) {
    const uint64_t before = sent();
    auto claim = store->Begin(key, 10s, request_id);
    EXPECT_TRUE(claim.ok() && claim->outcome == outcome)
        << key << ": "
        << (claim.ok() ? idem::OutcomeName(claim->outcome) : claim.status().ToString());
    return sent() - before;
  };
  EXPECT_EQ(round_trips("k", Outcome::kAcquired, 77), fresh) << "a fresh key: the read and insert";
  EXPECT_EQ(round_trips("k", Outcome::kAcquired, 77), 1 + row) << "the same Begin resent";
  EXPECT_EQ(round_trips("k", Outcome::kInProgress), 1 + row) << "a live claim";
  store->Advance(11s);
  EXPECT_EQ(round_trips("k", Outcome::kAcquired), 3 + row)
      << "a takeover: the read, the grace, the write";
  ASSERT_OK_AND_ASSIGN(idem::Claim failing, store->Begin("failed"));
  ASSERT_OK(store->backend().Transition({.key = "failed",
                                         .request = {.kind = TransitionKind::kFail,
                                                     .token = failing.token,
                                                     .payload = "declined",
                                                     .failure = idem::Failure::kRetryable}}));
  EXPECT_EQ(round_trips("failed", Outcome::kAcquired), 2 + row) << "a retry: the read, the write";
  EXPECT_CODE(store->End("failed", failing.token, TransitionKind::kComplete), kLeaseLost);
  store->Advance(2h);
  EXPECT_EQ(round_trips("k", Outcome::kAcquired), 2 + row)
      << "a row whose retention is over: the read, the write over it";
  EXPECT_EQ(round_trips("k", Outcome::kInProgress), 1 + row);
}

// A store chooses how its Begins start by what its recent Begins found (PgBeginShapeChooser): new
// keys make it insert first (a new key one round trip, a key with a row two), a storm of Begins
// on keys with rows makes it read first (the reverse), and new keys bring it back.
TEST(PgStorage, AStoreStartsItsBeginsAsWhatTheyFindMakesCheapest) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = PgStore::Open(server->Uri(), "idem_records", true, {}, /*shape=*/std::nullopt);
  ASSERT_NE(store, nullptr);
  idem::storage::PgStorage& storage = store->storage();
  EXPECT_EQ(storage.next_begin_shape(), idem::storage::PgBeginShape::kReadOrInsert);
  const auto round_trips = [&](const std::string& key, Outcome outcome) {
    const uint64_t before = storage.pool_stats().sent;
    auto claim = store->Begin(key);
    EXPECT_TRUE(claim.ok() && claim->outcome == outcome)
        << key << ": "
        << (claim.ok() ? idem::OutcomeName(claim->outcome) : claim.status().ToString());
    return storage.pool_stats().sent - before;
  };
  for (int k = 0; k < 100; ++k) round_trips(fmt::format("k{}", k), Outcome::kAcquired);
  EXPECT_EQ(storage.next_begin_shape(), idem::storage::PgBeginShape::kInsertFirst);
  EXPECT_EQ(round_trips("new-1", Outcome::kAcquired), 1u);
  EXPECT_EQ(round_trips("k0", Outcome::kInProgress), 2u) << "the insert, then the read";
  // A storm on the keys already claimed.
  for (int k = 0; k < 100; ++k) round_trips(fmt::format("k{}", k), Outcome::kInProgress);
  EXPECT_EQ(storage.next_begin_shape(), idem::storage::PgBeginShape::kReadFirst);
  EXPECT_EQ(round_trips("k1", Outcome::kInProgress), 1u);
  EXPECT_EQ(round_trips("new-2", Outcome::kAcquired), 2u) << "the read, then the insert";
  // New keys again.
  for (int k = 0; k < 100; ++k) round_trips(fmt::format("n{}", k), Outcome::kAcquired);
  EXPECT_EQ(storage.next_begin_shape(), idem::storage::PgBeginShape::kInsertFirst);
}

// Raising the sequence above imported tokens (ReserveTokensAbove) waits for every token
// reservation in flight, here another process's, holding the reservation lock while it draws
// blocks; then it raises the sequence only upwards, and this process's own block is dropped when
// it lies below: every token drawn after is above the imported ones and above every block drawn.
TEST(PgStorage, RaisingTheTokenSequenceWaitsForReservationsInFlightAndNeverLowersIt) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = PgStore::Open(server->Uri());
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(Claim first, store->Begin("first"));  // this process's block
  const std::string sequence = store->storage().names().sequence;
  PGconn* other = PQconnectdb(server->AdminConninfo().c_str());
  ASSERT_EQ(PQstatus(other), CONNECTION_OK) << PQerrorMessage(other);
  Exec(other, "BEGIN");
  Exec(other, fmt::format("SELECT pg_advisory_xact_lock_shared({})", PgStorage::kTokenLockKey),
       sequence);
  const uint64_t imported = first.token + 3 * PgStorage::kTokenBlock;
  std::future<Status> raised =
      std::async(std::launch::async, [&] { return store->storage().ReserveTokensAbove(imported); });
  const auto waiting = [&] {
    return Exec(other, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted");
  };
  EXPECT_TRUE(idem_test::WaitFor([&] { return waiting() == "1"; }))
      << "the raise does not wait for the reservation lock";
  // Meanwhile the other process draws blocks past the raise's floor; then it commits.
  std::string last;
  for (int i = 0; i < 8; ++i) last = Exec(other, "SELECT nextval($1::regclass)", sequence);
  Exec(other, "COMMIT");
  ASSERT_OK(raised.get());
  const uint64_t drawn_above = (std::stoull(last) + 1) * PgStorage::kTokenBlock;
  ASSERT_OK_AND_ASSIGN(Claim after, store->Begin("after"));
  EXPECT_GE(after.token, drawn_above) << "the sequence went back below a block handed out";
  EXPECT_GT(after.token, imported);

  // A raise far above moves every later block above it, in this process and in others.
  const uint64_t far = after.token + 1000 * PgStorage::kTokenBlock + 5;
  ASSERT_OK(store->storage().ReserveTokensAbove(far));
  ASSERT_OK_AND_ASSIGN(Claim mine, store->Begin("mine"));
  EXPECT_GT(mine.token, far);
  auto another = PgStore::Open(server->Uri());
  ASSERT_NE(another, nullptr);
  ASSERT_OK_AND_ASSIGN(Claim theirs, another->Begin("theirs"));
  EXPECT_GT(theirs.token, far);
  // And a raise below the sequence leaves it as it is.
  const std::string query = fmt::format("SELECT last_value FROM {}", sequence);
  const std::string before = Exec(other, query);
  ASSERT_OK(store->storage().ReserveTokensAbove(first.token));
  EXPECT_EQ(Exec(other, query), before);
  PQfinish(other);
}

// Tables restored from a backup hold the sequence as it was then, below blocks handed out
// after. A store opened on them later starts its tokens at the time in microseconds plus the
// lead, above those (more in pg_token_restore_test.cc).
TEST(PgStorage, TokensAfterARestoreOfTheTablesAreAboveThoseHandedOutAfterTheBackup) {
  IDEM_START_PG_OR_SKIP(server);
  auto before = PgStore::Open(server->Uri());
  ASSERT_NE(before, nullptr);
  ASSERT_OK_AND_ASSIGN(Claim first, before->Begin("first"));
  const std::string sequence = before->storage().names().sequence;
  PGconn* admin = PQconnectdb(server->AdminConninfo().c_str());
  ASSERT_EQ(PQstatus(admin), CONNECTION_OK) << PQerrorMessage(admin);
  const std::string backed_up = Exec(admin, fmt::format("SELECT last_value FROM {}", sequence));
  auto after_backup = PgStore::Open(server->Uri());  // another process, after the backup
  ASSERT_NE(after_backup, nullptr);
  ASSERT_OK_AND_ASSIGN(Claim later, after_backup->Begin("later"));
  EXPECT_GT(later.token, first.token);
  // The restore, as pg_restore does it: the sequence as the backup holds it.
  Exec(admin, "SELECT setval($1::regclass, " + backed_up + ")", sequence);
  PQfinish(admin);
  auto restored = PgStore::Open(server->Uri(), "idem_records", true, /*ahead=*/1s);
  ASSERT_NE(restored, nullptr);
  ASSERT_OK_AND_ASSIGN(Claim again, restored->Begin("again"));
  EXPECT_GT(again.token, later.token) << "a token handed out after the backup came again";
}

// The rows the meta table keeps of server incarnations.
std::string IncarnationRows(const idem_test::PgServer& server, const PgStorage& storage) {
  PGconn* conn = PQconnectdb(server.Uri().c_str());
  const std::string count =
      Exec(conn, fmt::format("SELECT count(*) FROM {} WHERE name LIKE 'server started %'",
                             storage.names().meta));
  PQfinish(conn);
  return count;
}

// OutageGrace notes each incarnation of the server (its postmaster's start) once, when first
// seen, and measures the grace from then in the server's time (here the test clock's); an open
// prunes the rows of other incarnations first seen over kIncarnationsKept ago.
TEST(PgStorage, EachServerIncarnationIsNotedOnceAndTheGraceRunsFromThen) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = PgStore::Open(server->Uri());
  ASSERT_NE(store, nullptr);
  const auto opened = store->Now();  // the open noted the incarnation
  ASSERT_OK_AND_ASSIGN(auto grace, store->storage().OutageGrace(5s));
  EXPECT_EQ(grace.written_before, opened);
  EXPECT_EQ(grace.left, 5s);
  store->Advance(3s);
  ASSERT_OK_AND_ASSIGN(grace, store->storage().OutageGrace(5s));
  EXPECT_EQ(grace.written_before, opened);
  EXPECT_EQ(grace.left, 2s);
  store->Advance(3s);
  ASSERT_OK_AND_ASSIGN(grace, store->storage().OutageGrace(5s));
  EXPECT_EQ(grace.left, 0s);

  // The note is committed asynchronously (an open waits for no synchronous standby): a crash
  // right after it may lose it, harmlessly, as it names the incarnation the crash ends. Flushed
  // here, to count the rows.
  ASSERT_OK(store->storage().Sync());
  ASSERT_OK(server->Restart(idem_test::PgServer::Shutdown::kImmediate));
  store->Advance(1s);
  const auto restarted = store->Now();
  ASSERT_OK_AND_ASSIGN(grace, store->storage().OutageGrace(5s));
  EXPECT_EQ(grace.written_before, restarted);
  EXPECT_EQ(grace.left, 5s);
  EXPECT_EQ(IncarnationRows(*server, store->storage()), "2");

  // A month later, an open forgets the incarnation before the restart, and keeps the current one
  // however old.
  auto later = PgStore::Open(
      server->Uri(), "idem_records", /*create=*/true,
      std::chrono::duration_cast<std::chrono::microseconds>(PgStorage::kIncarnationsKept + 1h));
  ASSERT_NE(later, nullptr);
  EXPECT_EQ(IncarnationRows(*server, later->storage()), "1");
  ASSERT_OK_AND_ASSIGN(grace, later->storage().OutageGrace(5s));
  EXPECT_EQ(grace.written_before, restarted);
  EXPECT_EQ(grace.left, 0s);
}

// A Begin that reads no row, then inserts its claim while another process's insert of the same
// key is uncommitted, waits on it; once it commits, the insert does nothing, and the Begin reads
// the row it lost to and gives its token back.
TEST_P(PgStorageBeginShape, ABeginThatWaitedOnAnotherInsertOfItsKeyReadsTheRowItLostTo) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = PgStore::Open(server->Uri(), "idem_records", true, {}, GetParam());
  ASSERT_NE(store, nullptr);
  PgStorage& storage = store->storage();
  ASSERT_OK_AND_ASSIGN(Claim first, store->Begin("first"));  // reserves this process's block
  PGconn* other = PQconnectdb(server->Uri().c_str());
  Exec(other, "BEGIN");
  Exec(other, fmt::format("INSERT INTO {} VALUES ('\\x6b'::bytea, '', '', '', '', 0, false, 42, "
                          "1, 1, 2, 3, 4, false, now(), now(), now() + interval '1 hour', "
                          "now() + interval '1 day', 1)",
                          storage.names().records));
  idem::engine::BeginRequest request{.key = "k", .lease = 10s, .retention = 1h};
  const uint64_t sent = storage.pool_stats().sent;
  auto waiting = std::async(std::launch::async, [&] {
    return storage.ReadOrCreate("k", request, idem::Durability::kSync);
  });
  EXPECT_EQ(waiting.wait_for(500ms), std::future_status::timeout);  // on the other's insert
  Exec(other, "COMMIT");
  PQfinish(other);
  auto lost = waiting.get();
  ASSERT_OK(lost.status());
  EXPECT_FALSE(lost->created.has_value());
  ASSERT_TRUE(lost->record.has_value());
  EXPECT_EQ(lost->record->token, 42u);
  // The read and insert (read first: the read, the insert), the read again.
  EXPECT_EQ(storage.pool_stats().sent,
            sent + (GetParam() == idem::storage::PgBeginShape::kReadFirst ? 3 : 2));
  request.key = "next";
  ASSERT_OK_AND_ASSIGN(auto next, storage.ReadOrCreate("next", request, idem::Durability::kSync));
  ASSERT_TRUE(next.created.has_value());
  EXPECT_EQ(next.created->token, first.token + 1);
}

// Issue 39, item 1: an Update reads a row, lets the engine decide, and writes only if the row is
// unchanged. When, in that window, the row is deleted (Forget, a purge) and the key claimed afresh
// by another process, the new row starts again at version 1: a write decided on the old row must
// apply to nothing, and the engine decide again on the new one. `decided` names the decision;
// `on_first_read`: made by DecideOnRead on what Begin's first round trip read, not by Update.
enum class Decided { kTakeover, kClaimOverExpiredRecord, kComplete };

void CheckADecisionOnARowRecreatedInItsWindowIsMadeAgain(Decided decided,
                                                         bool on_first_read = false) {
  IDEM_START_PG_OR_SKIP(server);
  auto deciding = PgStore::Open(server->Uri());
  auto other = PgStore::Open(server->Uri());
  ASSERT_TRUE(deciding && other);
  ASSERT_OK_AND_ASSIGN(Claim first, deciding->Begin("k", 1s));
  ASSERT_EQ(first.outcome, Outcome::kAcquired);
  // The lease ran out (a takeover is due), or the whole retention did (a fresh claim is due); a
  // Complete is decided while the claim is current. Both processes' servers agree on the time.
  const std::chrono::microseconds later = decided == Decided::kTakeover                 ? 2s
                                          : decided == Decided::kClaimOverExpiredRecord ? 1h + 2s
                                                                                        : 0s;
  deciding->Advance(later);
  other->Advance(later);

  const idem::engine::BeginRequest request{
      .key = "k", .lease = 10s, .retention = 1h, .holder = {.pid = 7, .process_start = 8}};
  int decisions = 0;
  Claim successor;
  idem::engine::BeginDecision begin;
  idem::engine::TransitionDecision transition;
  const auto decide = [&](std::optional<Record>& stored, Record::TimePoint now,
                          idem::engine::NextToken next_token) -> const Record* {
    if (++decisions == 1) {
      // The window: the row removed, and the key claimed afresh by another process.
      if (on_first_read && decided == Decided::kClaimOverExpiredRecord) {
        EXPECT_FALSE(stored.has_value()) << "Begin made the expired record invisible";
      } else {
        EXPECT_TRUE(stored.has_value() && stored->token == first.token);
      }
      auto removed = other->storage().Remove("k", idem::Durability::kSync, nullptr);
      EXPECT_TRUE(removed.ok() && *removed);
      auto claimed = other->Begin("k", 10s);
      EXPECT_TRUE(claimed.ok() && claimed->outcome == Outcome::kAcquired && !claimed->took_over);
      if (claimed.ok()) successor = *claimed;
    }
    if (decided == Decided::kComplete) {
      transition = idem::engine::DecideTransition(std::move(stored),
                                                  {.kind = TransitionKind::kComplete,
                                                   .token = first.token,
                                                   .payload = "decided on the old row"},
                                                  now);
      return transition.write ? &*transition.write : nullptr;
    }
    begin = idem::engine::DecideBegin(std::move(stored), request, now, next_token);
    return begin.write ? &begin.claim.record : nullptr;
  };
  if (on_first_read) {
    ASSERT_OK_AND_ASSIGN(auto read,
                         deciding->storage().ReadOrCreate("k", request, idem::Durability::kSync));
    ASSERT_FALSE(read.created.has_value());
    idem::engine::MakeVisible(read.record, read.now);  // as EngineBackend::Begin does
    ASSERT_OK(
        deciding->storage().DecideOnRead("k", read, decide, idem::Durability::kSync, std::nullopt));
  } else {
    ASSERT_OK(deciding->storage().Update("k", decide, idem::Durability::kSync, std::nullopt));
  }

  // Decided again on the successor's claim, which is current: nothing is written over it.
  EXPECT_EQ(decisions, 2);
  if (decided == Decided::kComplete) {
    EXPECT_CODE(transition.status, kLeaseLost);
  } else {
    EXPECT_EQ(begin.claim.outcome, Outcome::kInProgress);
  }
  ASSERT_OK_AND_ASSIGN(auto stored, other->backend().Get("k"));
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->token, successor.token);
  EXPECT_EQ(stored->state, idem::State::kPending);
  EXPECT_EQ(stored->holder, successor.record.holder);
  ASSERT_OK(other->End("k", successor.token, TransitionKind::kComplete, "the successor's"));
}

TEST(PgStorage, ATakeoverDecidedOnARowRecreatedInItsWindowIsDecidedAgain) {
  CheckADecisionOnARowRecreatedInItsWindowIsMadeAgain(Decided::kTakeover);
}

TEST(PgStorage, AClaimOverAnExpiredRecordRecreatedInItsWindowIsDecidedAgain) {
  CheckADecisionOnARowRecreatedInItsWindowIsMadeAgain(Decided::kClaimOverExpiredRecord);
}

TEST(PgStorage, ACompleteDecidedOnARowRecreatedInItsWindowIsDecidedAgain) {
  CheckADecisionOnARowRecreatedInItsWindowIsMadeAgain(Decided::kComplete);
}

TEST(PgStorage, ATakeoverDecidedOnTheFirstReadOfARowRecreatedSinceIsDecidedAgain) {
  CheckADecisionOnARowRecreatedInItsWindowIsMadeAgain(Decided::kTakeover, /*on_first_read=*/true);
}

TEST(PgStorage, AClaimOverAnExpiredRecordReadFirstAndRecreatedSinceIsDecidedAgain) {
  CheckADecisionOnARowRecreatedInItsWindowIsMadeAgain(Decided::kClaimOverExpiredRecord,
                                                      /*on_first_read=*/true);
}

// ExecuteInTransaction's fenced UPDATE (CompleteIn) names the token: a row recreated while the
// application's transaction ran is not completed by it, and the transaction rolls back.
TEST(PgStorage, AFencedCompleteInTheApplicationsTransactionSkipsARowRecreatedMeanwhile) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = PgStore::Open(server->Uri());
  auto other = PgStore::Open(server->Uri());
  ASSERT_TRUE(store && other);
  ASSERT_OK_AND_ASSIGN(Claim first, store->Begin("k"));
  ASSERT_OK_AND_ASSIGN(auto transaction, store->storage().OpenTransaction());
  ASSERT_OK(transaction->Run({{"SELECT 1", {}}}).status());
  ASSERT_OK_AND_ASSIGN(bool removed,
                       other->storage().Remove("k", idem::Durability::kSync, nullptr));
  ASSERT_TRUE(removed);
  ASSERT_OK_AND_ASSIGN(Claim successor, other->Begin("k"));
  ASSERT_EQ(successor.outcome, Outcome::kAcquired);
  ASSERT_OK_AND_ASSIGN(bool completed,
                       store->storage().CompleteIn(*transaction, "k", first.token, "stale",
                                                   idem::Durability::kSync));
  EXPECT_FALSE(completed);
  ASSERT_OK_AND_ASSIGN(auto stored, other->backend().Get("k"));
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->token, successor.token);
  EXPECT_EQ(stored->state, idem::State::kPending);
}

// A row holding a value that no idem writes (edited by hand, or by a broken tool) is refused with
// kCorruption naming the record and the column, never read as a wrapped or truncated number; a
// holder's 64-bit digest is stored bit-cast, so every bigint is one.
TEST(PgStorage, AValueNoIdemWritesIsRefusedNamingItsColumn) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = PgStore::Open(server->Uri());
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(Claim claim, store->Begin("edited"));
  ASSERT_OK(store->End("edited", claim.token, TransitionKind::kComplete));
  PGconn* admin = PQconnectdb(server->AdminConninfo().c_str());
  ASSERT_EQ(PQstatus(admin), CONNECTION_OK) << PQerrorMessage(admin);
  struct Case {
    std::string assignment;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"state = 3", "record \"edited\" has state 3, which no idem writes"},
      {"attempts = -1", "record \"edited\" has attempts -1, out of range (0 to 4294967295)"},
      {"attempts = 4294967296",
       "record \"edited\" has attempts 4294967296, out of range (0 to 4294967295)"},
      {"holder_pid = -2", "record \"edited\" has holder_pid -2, out of range (0 to 4294967295)"},
      {"token = -5", "record \"edited\" has token -5, out of range (0 to 9223372036854775807)"},
  };
  const std::string restore =
      "UPDATE idem.idem_records SET state = 1, attempts = 1, holder_pid = 0, "
      "token = " +
      std::to_string(claim.token) + ", holder_scope = 0";
  for (const Case& c : cases) {
    Exec(admin, "UPDATE idem.idem_records SET " + c.assignment + " WHERE key = 'edited'::bytea");
    const auto got = store->backend().Get("edited");
    ASSERT_FALSE(got.ok()) << c.assignment;
    EXPECT_EQ(got.status().code(), idem::Status::Code::kCorruption) << c.assignment;
    EXPECT_NE(got.status().message().find(c.message), std::string::npos)
        << c.assignment << ": " << got.status().message();
    Exec(admin, restore + " WHERE key = 'edited'::bytea");
  }
  Exec(admin, "UPDATE idem.idem_records SET holder_scope = -1 WHERE key = 'edited'::bytea");
  ASSERT_OK_AND_ASSIGN(auto read, store->backend().Get("edited"));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->holder.pid_scope, std::numeric_limits<uint64_t>::max());
  PQfinish(admin);
}

}  // namespace
