// The SQL of the PostgreSQL store that restates an engine rule (docs/design/
// pg-one-decision-plan.md, section 2) against the engine itself, case by case: the one-statement
// transition (TransitionApplies, ApplyTransition), the transition inside the application's
// transaction (CompleteIn), purge and its dry-run count (IsExpired), the fresh claim inserted on
// the first read (FreshClaim), Begin decided on that read (DecideBegin), both in every shape of a
// Begin's first round trip (PgBeginShape), and Forget's one DELETE (MakeVisible on the row it
// returns; an undecodable row is still forgotten).
// Every record is planted whole, at the store's time to the microsecond either side of each
// boundary, with both values of a holder's took_over, and each statement runs hundreds of times
// (past PostgreSQL's switch from custom to generic plans).

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/state_machine.h"
#include "idem/record.h"
#include "idem/status.h"
#include "idem/store.h"
#include "storage/postgres/pg_pool.h"
#include "storage/postgres/pg_storage.h"
#include "support/pg_engine_store.h"
#include "support/pg_server.h"
#include "support/test_util.h"

namespace {

using namespace std::chrono_literals;
using idem::Claim;
using idem::Durability;
using idem::Record;
using idem::State;
using idem::engine::TransitionKind;
using idem::engine::TransitionRequest;
using idem_test::PgStore;
using idem_test::ReadBack;
using TimePoint = Record::TimePoint;
constexpr std::chrono::microseconds kMicro{1};
constexpr uint64_t kStoredToken = 5000;

struct Stored {
  std::string name;
  Record record;
};

Record Planted(State state, TimePoint now, TimePoint lease_deadline, TimePoint expires,
               bool took_over) {
  Record r;
  r.type = "pay";
  r.fingerprint = "fp";
  r.checkpoint = std::string("step\0001", 6);
  r.result = state == State::kPending ? "" : "earlier";
  r.state = state;
  r.token = kStoredToken;
  r.attempts = 3;
  // As a store holds them: only a pending record names its holder; took_over stays with every
  // record (engine::ForgetHolder keeps it).
  r.holder.took_over = took_over;
  if (state == State::kPending) {
    r.holder.pid = 7;
    r.holder.process_start = 8;
    r.holder.pid_scope = 9;
    r.holder.request_id = 10;
  }
  r.created = now - 1h;
  r.updated = now - 1s;
  r.lease_deadline = lease_deadline;
  r.expires = expires;
  return r;
}

// Every situation a stored record can be in at `now`, each with took_over false and true.
std::vector<Stored> EveryStored(TimePoint now) {
  std::vector<Stored> all;
  for (const bool took_over : {false, true}) {
    const std::string suffix = took_over ? "-took-over" : "";
    const auto add = [&](std::string name, State state, TimePoint lease, TimePoint expires) {
      all.push_back({name + suffix, Planted(state, now, lease, expires, took_over)});
    };
    add("pending-lease-ends-in-1us", State::kPending, now + kMicro, now + 1h);
    add("pending-lease-ends-now", State::kPending, now, now + 1h);
    add("pending-lease-ended-1us-ago", State::kPending, now - kMicro, now + 1h);
    add("pending-expires-in-1us", State::kPending, now - 1s, now + kMicro);
    add("pending-expires-now", State::kPending, now - 1s, now);
    add("pending-expired-1us-ago", State::kPending, now - 1s, now - kMicro);
    add("pending-live-expires-in-1us", State::kPending, now + kMicro, now + kMicro);
    add("done", State::kDone, now - 5s, now + 1h);
    add("done-expires-now", State::kDone, now - 5s, now);
    Record retryable = Planted(State::kFailed, now, now - 5s, now + 1h, took_over);
    retryable.retryable = true;
    all.push_back({"failed-retryable" + suffix, retryable});
    add("failed-terminal", State::kFailed, now - 5s, now + 1h);
  }
  return all;
}

// Writes `record` under `key` as it is (a decide that returns it), alternating the durability.
void Plant(PgStore& store, const std::string& key, Record record, int n) {
  record.key = key;
  const auto decide = [&](std::optional<Record>&, TimePoint, idem::engine::NextToken) {
    return static_cast<const Record*>(&record);
  };
  ASSERT_OK(store.storage().Update(key, decide, n % 2 ? Durability::kBuffered : Durability::kSync,
                                   std::nullopt));
}

std::optional<Record> ReadRow(PgStore& store, std::string_view key) {
  auto read = store.storage().Read(key);
  EXPECT_TRUE(read.ok()) << read.status().ToString();
  return read.ok() ? read->record : std::nullopt;
}

std::vector<TransitionRequest> EveryTransition() {
  std::vector<TransitionRequest> all;
  for (const std::string_view payload :
       {std::string_view(), std::string_view("a\0b", 3), std::string_view("earlier")}) {
    all.push_back({.kind = TransitionKind::kComplete, .payload = payload});
    all.push_back(
        {.kind = TransitionKind::kFail, .payload = payload, .failure = idem::Failure::kTerminal});
    all.push_back(
        {.kind = TransitionKind::kFail, .payload = payload, .failure = idem::Failure::kRetryable});
    all.push_back({.kind = TransitionKind::kSaveCheckpoint, .payload = payload});
  }
  all.push_back({.kind = TransitionKind::kExtend, .lease = 30s});
  all.push_back({.kind = TransitionKind::kExtend, .lease = 2h});
  return all;
}

constexpr uint64_t kTokens[] = {kStoredToken, kStoredToken - 1, kStoredToken + 1, 0};

TEST(PgEquivalence, TheTransitionStatementAppliesExactlyWhenAndWhatTheEngineDoes) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = PgStore::Open(server->Uri());
  ASSERT_NE(store, nullptr);
  const TimePoint now = store->Now();
  const std::vector<TransitionRequest> requests = EveryTransition();
  int n = 0;
  int applied_count = 0;
  for (const Stored& stored : EveryStored(now)) {
    for (std::size_t r = 0; r < requests.size(); ++r) {
      for (const uint64_t token : kTokens) {
        const std::string key = fmt::format("{}/{}/{}", stored.name, r, token);
        SCOPED_TRACE(key);
        ASSERT_NO_FATAL_FAILURE(Plant(*store, key, stored.record, n++));
        Record placed = stored.record;
        placed.key = key;
        TransitionRequest request = requests[r];
        request.token = token;
        ASSERT_OK_AND_ASSIGN(const bool applied,
                             store->storage().TransitionIfCurrent(
                                 key, request, n % 3 ? Durability::kSync : Durability::kBuffered));
        EXPECT_EQ(applied, idem::engine::TransitionApplies(placed, request, now));
        Record expected = placed;
        if (applied) {
          idem::engine::ApplyTransition(expected, request, now);
          ++applied_count;
        }
        EXPECT_EQ(ReadBack(*store, key), expected);
      }
    }
  }
  // Four live pending situations (lease ends in 1 us, now, 1 us ago; expires in 1 us) and the
  // one live both ways, twice (took_over), with the stored token only.
  EXPECT_EQ(applied_count, 2 * 5 * static_cast<int>(requests.size()));
  // An absent key: nothing applies, nothing is written.
  ASSERT_OK_AND_ASSIGN(
      const bool applied,
      store->storage().TransitionIfCurrent(
          "absent", {.kind = TransitionKind::kComplete, .token = kStoredToken}, Durability::kSync));
  EXPECT_FALSE(applied);
  EXPECT_FALSE(ReadRow(*store, "absent").has_value());
}

TEST(PgEquivalence, CompleteInTheApplicationsTransactionAppliesExactlyWhenTheEngineDoes) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = PgStore::Open(server->Uri());
  ASSERT_NE(store, nullptr);
  PGconn* admin = PQconnectdb(server->AdminConninfo().c_str());
  ASSERT_EQ(PQstatus(admin), CONNECTION_OK) << PQerrorMessage(admin);
  idem_test::Exec(admin, "CREATE TABLE app_marks (key text PRIMARY KEY)");
  idem_test::Exec(admin, "GRANT ALL ON app_marks TO PUBLIC");
  const TimePoint now = store->Now();
  int n = 0;
  for (const Stored& stored : EveryStored(now)) {
    for (const std::string_view result : {std::string_view(), std::string_view("a\0b", 3)}) {
      for (const uint64_t token : kTokens) {
        const std::string key = fmt::format("{}/{}/{}", stored.name, result.size(), token);
        SCOPED_TRACE(key);
        ASSERT_NO_FATAL_FAILURE(Plant(*store, key, stored.record, n++));
        Record placed = stored.record;
        placed.key = key;
        const TransitionRequest request = {
            .kind = TransitionKind::kComplete, .token = token, .payload = result};
        ASSERT_OK_AND_ASSIGN(auto transaction, store->storage().OpenTransaction());
        ASSERT_OK(
            transaction
                ->Run({{"INSERT INTO app_marks VALUES ($1)", {idem::storage::PgParam::Text(key)}}})
                .status());
        ASSERT_OK_AND_ASSIGN(
            const bool completed,
            store->storage().CompleteIn(*transaction, key, token, result, Durability::kSync));
        const bool applies = idem::engine::TransitionApplies(placed, request, now);
        EXPECT_EQ(completed, applies);
        Record expected = placed;
        if (applies) idem::engine::ApplyTransition(expected, request, now);
        EXPECT_EQ(ReadBack(*store, key), expected);
        // The application's row committed with the record, or rolled back with it.
        EXPECT_EQ(idem_test::Exec(admin, "SELECT count(*) FROM app_marks WHERE key = $1", key),
                  applies ? "1" : "0");
      }
    }
  }
  PQfinish(admin);
}

TEST(PgEquivalence, PurgeAndItsCountJudgeExpiryAsTheEngineDoes) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = PgStore::Open(server->Uri(), "idem_purge_equivalence");
  ASSERT_NE(store, nullptr);
  const TimePoint now = store->Now();
  std::vector<Record> planted;
  int n = 0;
  for (const Stored& stored : EveryStored(now)) {
    for (int copy = 0; copy < 3; ++copy) {
      const std::string key = fmt::format("{}/{}", stored.name, copy);
      ASSERT_NO_FATAL_FAILURE(Plant(*store, key, stored.record, n++));
      planted.push_back(stored.record);
      planted.back().key = key;
    }
  }
  uint64_t expired = 0;
  for (const Record& record : planted) expired += idem::engine::IsExpired(record, now) ? 1 : 0;
  ASSERT_GT(expired, 0u);
  ASSERT_LT(expired, planted.size());
  ASSERT_OK_AND_ASSIGN(const uint64_t counted, store->storage().Purge({.dry_run = true}));
  EXPECT_EQ(counted, expired);
  ASSERT_OK_AND_ASSIGN(const uint64_t purged, store->storage().Purge({}));
  EXPECT_EQ(purged, expired);
  for (const Record& record : planted) {
    SCOPED_TRACE(record.key);
    const std::optional<Record> row = ReadRow(*store, record.key);
    if (idem::engine::IsExpired(record, now)) {
      EXPECT_FALSE(row.has_value());
    } else {
      ASSERT_TRUE(row.has_value());
      EXPECT_EQ(*row, record);
    }
  }
}

class PgEquivalenceBeginShape : public testing::TestWithParam<idem::storage::PgBeginShape> {};
INSTANTIATE_TEST_SUITE_P(Shapes, PgEquivalenceBeginShape,
                         testing::ValuesIn(idem_test::kEveryBeginShape), idem_test::BeginShapeName);

TEST_P(PgEquivalenceBeginShape, TheClaimInsertedOnTheFirstReadIsTheEnginesFreshClaim) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = PgStore::Open(server->Uri(), "idem_records", true, {}, GetParam());
  ASSERT_NE(store, nullptr);
  const TimePoint now = store->Now();
  const std::vector<std::pair<std::chrono::milliseconds, std::chrono::milliseconds>> times = {
      {10s, 1h}, {10s, 10s}, {30s, 5s}};
  const std::string_view texts[] = {std::string_view(), std::string_view("a\0b", 3)};
  enum class Before { kNoRow, kLiveRow, kExpiredRow };
  int n = 0;
  for (const Before before : {Before::kNoRow, Before::kLiveRow, Before::kExpiredRow}) {
    for (const std::string_view type : texts) {
      for (const std::string_view fingerprint : texts) {
        for (const auto& [lease, retention] : times) {
          const std::string key =
              fmt::format("fresh/{}/{}/{}/{}/{}", static_cast<int>(before), type.size(),
                          fingerprint.size(), lease.count(), retention.count());
          SCOPED_TRACE(key);
          std::optional<Record> row;
          if (before != Before::kNoRow) {
            const TimePoint expires = before == Before::kLiveRow ? now + 1h : now;
            row = Planted(State::kDone, now, now - 5s, expires, false);
            ASSERT_NO_FATAL_FAILURE(Plant(*store, key, *row, n++));
            row->key = key;
          }
          // took_over in the request is the engine's to set, never the caller's: ignored.
          const idem::engine::BeginRequest request{.key = key,
                                                   .type = type,
                                                   .fingerprint = fingerprint,
                                                   .lease = lease,
                                                   .retention = retention,
                                                   .holder = {.pid = 7,
                                                              .process_start = 8,
                                                              .pid_scope = 9,
                                                              .request_id = 10,
                                                              .took_over = true}};
          ASSERT_OK_AND_ASSIGN(
              auto read, store->storage().ReadOrCreate(
                             key, request, n % 2 ? Durability::kSync : Durability::kBuffered));
          EXPECT_EQ(read.now, now);
          if (before == Before::kNoRow) {
            ASSERT_TRUE(read.created.has_value());
            EXPECT_FALSE(read.record.has_value());
            const Claim expected = idem::engine::FreshClaim(request, now, read.created->token);
            EXPECT_EQ(ReadBack(*store, key), expected.record);
            // The claim answered is the one written, and the engine's.
            EXPECT_EQ(read.created->record, expected.record);
            EXPECT_EQ(read.created->outcome, expected.outcome);
            EXPECT_EQ(read.created->took_over, expected.took_over);
          } else {
            EXPECT_FALSE(read.created.has_value());
            EXPECT_EQ(read.record, row);
            EXPECT_EQ(ReadBack(*store, key), *row);
          }
        }
      }
    }
  }
}

// What a Begin may know of a pending claim besides the record (engine::ClaimFacts), as
// EngineBackend::GatherFacts finds it out before the decision.
enum class Facts { kNone, kHolderDead, kAnotherHolderDead, kGraceCovers, kGraceOver, kNoGraces };

idem::engine::ClaimFacts FactsOf(Facts facts, const Record& stored, TimePoint now) {
  idem::engine::ClaimFacts made;
  switch (facts) {
    case Facts::kNone:
      break;
    case Facts::kHolderDead:
      made.judged = stored.holder;
      made.holder_is_dead = true;
      break;
    case Facts::kAnotherHolderDead:
      made.judged = idem::Holder{.pid = 99, .process_start = 98};
      made.holder_is_dead = true;
      break;
    case Facts::kGraceCovers:
      made.graces.push_back({.written_before = now, .left = 5s});
      break;
    case Facts::kGraceOver:
      made.graces.push_back({.written_before = now, .left = 0s});
      break;
    case Facts::kNoGraces:
      made.graces_gathered = false;
      break;
  }
  return made;
}

// Begin's decision on PostgreSQL is made once, on the row its first round trip read
// (Storage::DecideOnRead): for every stored state, fingerprint, request id and set of facts, the
// claim answered and the row left are engine::DecideBegin's on the stored record at the store's
// time, in one round trip when nothing is written and two when a claim is, plus the insert of read
// first on a key without a row and the read of insert first on a key with one. (About 560 keys:
// the tokens drawn stay within the block the first Begin reserved, so no round trip reserves one.)
void CheckBeginOnTheFirstReadIsDecideBegin(const std::string& uri,
                                           idem::storage::PgBeginShape shape) {
  auto store = PgStore::Open(uri, fmt::format("idem_begin_equivalence_{}", static_cast<int>(shape)),
                             true, {}, shape);
  ASSERT_NE(store, nullptr);
  ASSERT_OK(store->Begin("first").status());  // reserves this process's block of tokens
  idem::storage::PgStorage& storage = store->storage();
  const TimePoint now = store->Now();
  std::vector<Stored> states = EveryStored(now);
  states.push_back({"none", Record()});
  int n = 0;
  for (const Stored& stored : states) {
    const bool planted = stored.name != "none";
    const bool pending = planted && stored.record.state == State::kPending;
    for (const std::string_view fingerprint : {"", "fp", "other"}) {
      for (const uint64_t request_id : {uint64_t{10}, uint64_t{11}}) {  // 10: the holder's
        for (const Facts facts_kind : {Facts::kNone, Facts::kHolderDead, Facts::kAnotherHolderDead,
                                       Facts::kGraceCovers, Facts::kGraceOver, Facts::kNoGraces}) {
          if (!pending && facts_kind != Facts::kNone) continue;  // facts concern a pending claim
          const std::string key = fmt::format("{}/{}/{}/{}", stored.name, fingerprint, request_id,
                                              static_cast<int>(facts_kind));
          SCOPED_TRACE(key);
          std::optional<Record> before;
          if (planted) {
            before = stored.record;
            before->key = key;
            ASSERT_NO_FATAL_FAILURE(Plant(*store, key, *before, n));
          }
          const Durability durability = n++ % 2 ? Durability::kSync : Durability::kBuffered;
          const idem::engine::BeginRequest request{
              .key = key,
              .type = "pay",
              .fingerprint = fingerprint,
              .lease = 10s,
              .retention = 1h,
              .holder = {.pid = 21, .process_start = 22, .pid_scope = 9, .request_id = request_id}};
          const idem::engine::ClaimFacts facts = FactsOf(facts_kind, stored.record, now);

          const uint64_t sent = storage.pool_stats().sent;
          ASSERT_OK_AND_ASSIGN(idem::storage::Storage::ReadResult read,
                               storage.ReadOrCreate(key, request, durability));
          std::optional<uint64_t> drawn;
          idem::engine::BeginDecision decision;
          if (read.created) {
            drawn = read.created->token;
            decision.claim = *read.created;
            decision.write = true;
          } else {
            idem::engine::MakeVisible(read.record, read.now);  // as EngineBackend::Begin does
            const auto decide = [&](std::optional<Record>& record, TimePoint at,
                                    idem::engine::NextToken next_token) -> const Record* {
              decision = idem::engine::DecideBegin(
                  std::move(record), request, at,
                  [&](uint64_t above) -> idem::Result<uint64_t> {
                    idem::Result<uint64_t> token = next_token(above);
                    if (token.ok()) drawn = *token;
                    return token;
                  },
                  facts);
              return decision.write ? &decision.claim.record : nullptr;
            };
            ASSERT_OK(storage.DecideOnRead(key, read, decide, durability, std::nullopt));
          }
          const uint64_t round_trips = storage.pool_stats().sent - sent;

          // The engine on the stored record, drawing the token the storage drew.
          const idem::engine::BeginDecision expected = idem::engine::DecideBegin(
              std::optional<Record>(before), request, now,
              [&](uint64_t) -> idem::Result<uint64_t> {
                if (drawn) return *drawn;
                return idem::Status::InvalidArgument(
                    "the engine draws a token the storage did not");
              },
              facts);
          ASSERT_OK(expected.status);
          EXPECT_EQ(decision.write, expected.write);
          EXPECT_EQ(decision.needs_graces, expected.needs_graces);
          EXPECT_EQ(decision.claim.outcome, expected.claim.outcome);
          EXPECT_EQ(decision.claim.token, expected.claim.token);
          EXPECT_EQ(decision.claim.took_over, expected.claim.took_over);
          EXPECT_EQ(decision.claim.retry_after, expected.claim.retry_after);
          EXPECT_EQ(decision.claim.record, expected.claim.record);
          EXPECT_EQ(drawn.has_value(), expected.write) << "a token is drawn only to be written";
          // The row: the claim when written, else as planted.
          EXPECT_EQ(ReadRow(*store, key),
                    expected.write ? std::optional<Record>(expected.claim.record) : before);
          const uint64_t first_round_trips =
              shape == idem::storage::PgBeginShape::kReadFirst     ? (planted ? 1 : 2)
              : shape == idem::storage::PgBeginShape::kInsertFirst ? (planted ? 2 : 1)
                                                                   : 1;
          EXPECT_EQ(round_trips, first_round_trips + (expected.write && !read.created ? 1 : 0));
        }
      }
    }
  }
}

TEST_P(PgEquivalenceBeginShape, BeginOnTheFirstReadIsDecideBegin) {
  IDEM_START_PG_OR_SKIP(server);
  CheckBeginOnTheFirstReadIsDecideBegin(server->Uri(), GetParam());
}

// The same through PgBouncer in transaction pooling: statements sent unnamed, no session state
// between the read and the write.
TEST_P(PgEquivalenceBeginShape, BeginOnTheFirstReadIsDecideBeginThroughPgBouncer) {
  IDEM_START_PG_OR_SKIP(server);
  IDEM_START_PGBOUNCER_OR_SKIP(bouncer, server, /*pool_size=*/2);
  CheckBeginOnTheFirstReadIsDecideBegin(bouncer->Uri(), GetParam());
}

TEST(PgEquivalence, ForgetRemovesWhatIsVisibleAndWhatCannotBeDecoded) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = PgStore::Open(server->Uri(), "idem_forget_equivalence");
  ASSERT_NE(store, nullptr);
  const TimePoint now = store->Now();
  int n = 0;
  for (const Stored& stored : EveryStored(now)) {
    SCOPED_TRACE(stored.name);
    ASSERT_NO_FATAL_FAILURE(Plant(*store, stored.name, stored.record, n++));
    const bool visible = idem::engine::Visible(stored.record, now).has_value();
    const uint64_t sent = store->storage().pool_stats().sent;
    const idem::Status forgotten = store->backend().Forget(stored.name, Durability::kSync, nullptr);
    EXPECT_EQ(store->storage().pool_stats().sent - sent, 1u) << "one DELETE";
    if (visible) {
      EXPECT_OK(forgotten);
    } else {
      EXPECT_CODE(forgotten, kNotFound);
    }
    // Gone either way: a record whose retention was over is deleted as a purge would.
    EXPECT_FALSE(ReadRow(*store, stored.name).has_value());
  }
  EXPECT_CODE(store->backend().Forget("never-written", Durability::kSync, nullptr), kNotFound);
  // A row no idem writes (state 7): unreadable, and still forgotten.
  ASSERT_NO_FATAL_FAILURE(Plant(*store, "undecodable", EveryStored(now).front().record, n++));
  PGconn* admin = PQconnectdb(server->AdminConninfo().c_str());
  ASSERT_EQ(PQstatus(admin), CONNECTION_OK) << PQerrorMessage(admin);
  idem_test::Exec(
      admin, "UPDATE idem.idem_forget_equivalence SET state = 7 WHERE key = convert_to($1, 'UTF8')",
      "undecodable");
  PQfinish(admin);
  EXPECT_CODE(store->storage().Read("undecodable").status(), kCorruption);
  EXPECT_OK(store->backend().Forget("undecodable", Durability::kSync, nullptr));
  ASSERT_OK_AND_ASSIGN(auto gone, store->storage().Read("undecodable"));
  EXPECT_FALSE(gone.record.has_value());
}

}  // namespace
