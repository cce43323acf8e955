// Store::Open with a postgresql:// URI: the public API on a store kept in PostgreSQL, against a
// real server. The behaviour tests of the RocksDB store are to run on this backend too
// (docs/design/postgresql.md, increment 7); these check the wiring: routing, sharing of one
// store by the handles of a process, the server's clock, errors without secrets.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "idem/c.h"
#include "idem/idem.h"
#include "support/pg_server.h"
#include "support/test_util.h"

namespace {

using namespace std::chrono_literals;
using idem::Outcome;
using idem::Status;
using idem::Store;

std::unique_ptr<Store> Open(const std::string& uri, idem::Options options = {}) {
  options.auto_purge_interval = 0ms;
  auto store = Store::Open(uri, options);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

bool Contains(const Status& status, std::string_view text) {
  return status.message().find(text) != std::string::npos;
}

TEST(PgStore, TheApiWorksOnAStoreInPostgres) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = Open(server->Uri());
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("pay-1", {.type = "pay"}));
  ASSERT_EQ(claim.outcome, Outcome::kAcquired);
  ASSERT_OK(store->Complete("pay-1", claim.token, "receipt"));
  ASSERT_OK_AND_ASSIGN(auto replay, store->Begin("pay-1"));
  EXPECT_EQ(replay.outcome, Outcome::kReplay);
  EXPECT_EQ(replay.record.result, "receipt");
  EXPECT_EQ(replay.record.type, "pay");

  int runs = 0;
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(auto execution, store->Execute("pay-2", [&](idem::Attempt&) {
      ++runs;
      return idem::Result<std::string>(std::string("charged"));
    }));
    EXPECT_EQ(execution.result, "charged");
  }
  EXPECT_EQ(runs, 1);

  ASSERT_OK_AND_ASSIGN(std::string token, store->IssueToken(1min));
  EXPECT_OK(store->ConsumeToken(token));
  EXPECT_CODE(store->ConsumeToken(token), kFailed);

  int listed = 0;
  ASSERT_OK(store->Scan({.prefix = "pay-"}, [&](const idem::Record&) { return ++listed, true; }));
  EXPECT_EQ(listed, 2);
  ASSERT_OK(store->Forget("pay-1"));
  ASSERT_OK_AND_ASSIGN(auto gone, store->Get("pay-1"));
  EXPECT_FALSE(gone.has_value());
  ASSERT_OK_AND_ASSIGN(uint64_t due, store->Purge({.dry_run = true}));
  EXPECT_EQ(due, 0u);
}

// Store::Health on PostgreSQL: the server answers and takes writes; no owner process. When the
// server runs transactions read-only, the probe says so and nothing else changes.
TEST(PgStore, HealthSaysWhetherTheServerTakesWrites) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = Open(server->Uri());
  ASSERT_NE(store, nullptr);
  const idem::StoreHealth health = store->Health();
  EXPECT_TRUE(health.can_read);
  EXPECT_TRUE(health.can_write) << health.problem.ToString();
  EXPECT_FALSE(health.owner_live) << "no process owns a store in PostgreSQL";
  EXPECT_TRUE(health.last_error.ok()) << health.last_error.ToString();

  ASSERT_OK(server->Admin("ALTER SYSTEM SET default_transaction_read_only = on"));
  ASSERT_OK(server->Admin("SELECT pg_reload_conf()"));
  // Each server process applies the reloaded setting once it has read the signal: the probe is
  // asked until it says so.
  idem::StoreHealth read_only;
  for (int i = 0; i < 50; ++i) {
    read_only = store->Health();
    if (!read_only.can_write) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(read_only.can_read) << read_only.problem.ToString();
  EXPECT_FALSE(read_only.can_write);
  EXPECT_EQ(read_only.problem.code(), Status::Code::kUnavailable);
  EXPECT_TRUE(Contains(read_only.problem, "read-only")) << read_only.problem.ToString();
  EXPECT_FALSE(Contains(read_only.problem, "password"));

  ASSERT_OK(server->Admin("ALTER SYSTEM RESET default_transaction_read_only"));
  ASSERT_OK(server->Admin("SELECT pg_reload_conf()"));
  // Back to writable before the next test.
  for (int i = 0; i < 50 && !store->Health().can_write; ++i) std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(store->Health().can_write);
}

// The handles of one process share one store per (connection, table); another table is another
// store, and a read-only handle cannot write.
TEST(PgStore, HandlesShareAStorePerConnectionAndTable) {
  IDEM_START_PG_OR_SKIP(server);
  auto first = Open(server->Uri());
  auto second = Open(server->Uri());
  idem::Options other_table;
  other_table.table = "other_records";
  auto other = Open(server->Uri(), other_table);
  ASSERT_TRUE(first && second && other);
  ASSERT_OK_AND_ASSIGN(auto claim, first->Begin("k"));
  ASSERT_OK_AND_ASSIGN(auto busy, second->Begin("k"));
  EXPECT_EQ(busy.outcome, Outcome::kInProgress);
  ASSERT_OK_AND_ASSIGN(auto elsewhere, other->Begin("k"));
  EXPECT_EQ(elsewhere.outcome, Outcome::kAcquired);  // tokens are per store: it may be the same
  ASSERT_OK(first->Complete("k", claim.token, "done"));
  ASSERT_OK_AND_ASSIGN(auto in_other, other->Get("k"));
  ASSERT_TRUE(in_other.has_value());
  EXPECT_EQ(in_other->state, idem::State::kPending);
}

// Leases and retention run on the server's clock: a host whose clock is an hour off (an
// Options::clock, as tests inject it) changes nothing.
TEST(PgStore, TheServersClockJudgesNotTheHosts) {
  IDEM_START_PG_OR_SKIP(server);
  for (auto skew : {1h, -1h}) {
    idem::Options options;
    options.clock =
        std::make_shared<idem_test::ManualClock>(std::chrono::system_clock::now() + skew);
    options.table = skew > 0h ? "ahead" : "behind";
    auto store = Open(server->Uri(), options);
    ASSERT_NE(store, nullptr);
    const auto before = std::chrono::system_clock::now();
    ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("k", {.lease = 10s}));
    const auto after = std::chrono::system_clock::now();
    // The server runs on this host: its clock is the system clock.
    EXPECT_GE(claim.record.lease_deadline, before + 10s - 1s);
    EXPECT_LE(claim.record.lease_deadline, after + 10s + 1s);
    ASSERT_OK_AND_ASSIGN(auto busy, store->Begin("k"));
    EXPECT_EQ(busy.outcome, Outcome::kInProgress);
  }
}

// The C API opens a store in PostgreSQL from a URI too, with its table and pool size, and its
// errors never show the password.
TEST(PgStore, TheCApiOpensAStoreInPostgres) {
  IDEM_START_PG_OR_SKIP(server);
  idem_options_t* options = idem_options_create();
  idem_options_set_table(options, "from_c");
  idem_options_set_pool_size(options, 2);
  idem_options_set_auto_purge_interval_ms(options, 0);
  char* err = nullptr;
  idem_store_t* store = idem_open(server->Uri().c_str(), options, &err);
  ASSERT_NE(store, nullptr) << err;
  idem_claim_t* claim = idem_begin(store, "pay-1", 5, "pay", nullptr, 0, 0, &err);
  ASSERT_NE(claim, nullptr) << err;
  EXPECT_EQ(idem_claim_outcome(claim), IDEM_ACQUIRED);
  EXPECT_EQ(idem_complete(store, "pay-1", 5, idem_claim_token(claim), "ok", 2, &err), IDEM_OK);
  idem_claim_destroy(claim);
  idem_close(store);

  // The table was the one asked for.
  idem::Options in_table;
  in_table.table = "from_c";
  auto reader = Open(server->Uri(), in_table);
  ASSERT_NE(reader, nullptr);
  ASSERT_OK_AND_ASSIGN(auto record, reader->Get("pay-1"));
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->result, "ok");

  idem_options_set_pool_size(options, 0);
  EXPECT_EQ(idem_open(server->Uri().c_str(), options, &err), nullptr);
  EXPECT_EQ(idem_last_error_code(), IDEM_INVALID_ARGUMENT);
  ASSERT_NE(err, nullptr);
  EXPECT_NE(std::string(err).find("pool_size"), std::string::npos) << err;
  idem_free(err);
  err = nullptr;
  const std::string wrong = server->UriWithPassword("not-the-password-42");
  EXPECT_EQ(idem_open(wrong.c_str(), nullptr, &err), nullptr);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(std::string(err).find("not-the-password-42"), std::string::npos) << err;
  idem_free(err);
  idem_options_destroy(options);
}

TEST(PgStore, OpenErrorsNameTheStoreAndNeverThePassword) {
  IDEM_START_PG_OR_SKIP(server);
  const std::string wrong = "not-the-password-7c1f";
  auto refused = Store::Open(server->UriWithPassword(wrong), {});
  EXPECT_FALSE(refused.ok());
  EXPECT_FALSE(Contains(refused.status(), wrong)) << refused.status().ToString();

  idem::Options existing_only;
  existing_only.create_if_missing = false;
  existing_only.table = "never_created";
  auto missing = Store::Open(server->Uri(), existing_only);
  EXPECT_CODE(missing.status(), kNotFound);
  EXPECT_TRUE(Contains(missing.status(), "idem.never_created")) << missing.status().ToString();
  EXPECT_FALSE(Contains(missing.status(), server->password())) << missing.status().ToString();

  idem::Options bad_pool;
  bad_pool.pool_size = 0;
  EXPECT_CODE(Store::Open(server->Uri(), bad_pool).status(), kInvalidArgument);
}

}  // namespace
