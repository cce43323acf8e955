// PgPool (storage/postgres/pg_pool.h) against a real PostgreSQL 15 (tests/support/pg_server.h) and
// through PgBouncer: binary values, one round trip per transaction (counted by a proxy, not timed),
// a full pool, and what SQLSTATEs mean. The faults are in pg_pool_fault_test.cc.

#include "storage/postgres/pg_pool.h"

#include <semaphore>
#include <thread>

#include "storage/postgres/pg_session.h"
#include "support/pg_pool_test_util.h"
#include "support/tcp_proxy.h"
#include "util/time.h"

namespace idem::storage {
namespace {

using idem_test::TcpProxy;

TEST(PgSession, SqlStatesMapAsTheDesignSays) {
  EXPECT_EQ(ClassifySqlState("08006"), PgFailure::kConnectionLost);
  EXPECT_EQ(ClassifySqlState("08P01"), PgFailure::kConnectionLost);
  EXPECT_EQ(ClassifySqlState("57P01"), PgFailure::kConnectionLost);
  EXPECT_EQ(ClassifySqlState("57P02"), PgFailure::kConnectionLost);
  EXPECT_EQ(ClassifySqlState("57P03"), PgFailure::kConnectionLost);
  EXPECT_EQ(ClassifySqlState("25006"), PgFailure::kConnectionLost);
  EXPECT_EQ(ClassifySqlState("57014"), PgFailure::kStatementTimeout);
  EXPECT_EQ(ClassifySqlState("40001"), PgFailure::kRetry);
  EXPECT_EQ(ClassifySqlState("40P01"), PgFailure::kRetry);
  EXPECT_EQ(ClassifySqlState("28P01"), PgFailure::kRefused);
  EXPECT_EQ(ClassifySqlState("28000"), PgFailure::kRefused);
  EXPECT_EQ(ClassifySqlState("3D000"), PgFailure::kRefused);
  EXPECT_EQ(ClassifySqlState("23505"), PgFailure::kOther);
  EXPECT_EQ(ClassifySqlState(""), PgFailure::kOther);
  const std::string verbose =
      "connection to server at \"127.0.0.1\", port 5 failed: FATAL:  28P01: password "
      "authentication failed for user \"idem\"\nLOCATION:  auth_failed, auth.c:335\n";
  EXPECT_EQ(SqlStateInMessage(verbose), "28P01");
  EXPECT_EQ(SqlStateInMessage("connection refused"), "");
  EXPECT_EQ(OneLine(verbose),
            "connection to server at \"127.0.0.1\", port 5 failed: FATAL:  28P01: password "
            "authentication failed for user \"idem\"");
}

TEST(PgPool, RoundTripsBinaryValues) {
  IDEM_START_PG_OR_SKIP(server);
  PgPool pool(Conninfo(server->Uri()), {.size = 2});
  const std::string bytes("a\0b\xff\x00\xff", 6);
  const int64_t when = util::ToMicros(idem_test::ManualClock::DefaultStart());
  const int64_t big = -4611686018427387905;
  ASSERT_OK_AND_ASSIGN(
      std::vector<PgRows> rows,
      pool.Run(Transaction({{"SELECT $1, $2, $3, $4, $5, $6, $7, length($1), "
                             "$4 = '2026-03-01 00:00:00.123456+00'::timestamptz, $2::text, "
                             "'infinity'::timestamptz",
                             {PgParam::Bytea(bytes), PgParam::Int8(big), PgParam::Bool(true),
                              PgParam::Timestamp(when), PgParam::Int2(-2), PgParam::Text("text"),
                              PgParam::Null(kPgByteaOid)}}})));
  ASSERT_EQ(rows.size(), 1u);
  const PgRows& row = rows[0];
  ASSERT_EQ(row.size(), 1);
  EXPECT_EQ(row.Bytes(0, 0), bytes);
  EXPECT_EQ(row.Int(0, 1).value(), big);
  EXPECT_TRUE(row.Bool(0, 2).value());
  EXPECT_EQ(row.Timestamp(0, 3).value(), when);
  EXPECT_EQ(row.Int(0, 4).value(), -2);
  EXPECT_EQ(row.Bytes(0, 5), "text");
  EXPECT_TRUE(row.IsNull(0, 6));
  EXPECT_EQ(row.Int(0, 7).value(), 6);  // the server saw every byte, NUL and 0xFF included
  EXPECT_TRUE(row.Bool(0, 8).value());  // and the time as it was meant
  EXPECT_EQ(row.Bytes(0, 9), "-4611686018427387905");
  EXPECT_EQ(row.Int(0, 0).status().code(), Status::Code::kCorruption);  // bytea is no integer
  EXPECT_EQ(row.Timestamp(0, 1).status().code(), Status::Code::kCorruption);
  EXPECT_EQ(row.Int(0, 6).status().code(), Status::Code::kCorruption);  // NULL
  EXPECT_EQ(row.Timestamp(0, 10).status().code(), Status::Code::kCorruption);

  ASSERT_OK_AND_ASSIGN(
      std::vector<PgRows> written,
      pool.Run(Transaction(
          {{"CREATE TABLE kv (k bytea PRIMARY KEY, v bigint NOT NULL)", {}},
           {"INSERT INTO kv VALUES ($1, 1), ($2, 2), ($3, 3)",
            {PgParam::Bytea(std::string("\xff", 1)), PgParam::Bytea(std::string("\0", 1)),
             PgParam::Bytea(std::string("\0\1", 2))}},
           {"UPDATE kv SET v = v + 10 WHERE v >= $1", {PgParam::Int8(2)}},
           {"SELECT k, v FROM kv ORDER BY k", {}}})));
  ASSERT_EQ(written.size(), 4u);
  EXPECT_EQ(written[0].affected(), 0u);
  EXPECT_EQ(written[1].affected(), 3u);
  EXPECT_EQ(written[2].affected(), 2u);
  ASSERT_EQ(written[3].size(), 3);
  EXPECT_EQ(written[3].Bytes(0, 0), std::string("\0", 1));  // bytea orders like memcmp
  EXPECT_EQ(written[3].Bytes(1, 0), std::string("\0\1", 2));
  EXPECT_EQ(written[3].Bytes(2, 0), std::string("\xff", 1));
  EXPECT_EQ(written[3].Int(1, 1).value(), 13);
}

// Values larger than the socket's buffers go out while the answers come in (nonblocking sends).
TEST(PgPool, SendsAndReceivesLargeValues) {
  IDEM_START_PG_OR_SKIP(server);
  PgPool pool(Conninfo(server->Uri()), {.size = 1});
  std::string large(8 << 20, '\0');
  for (std::size_t i = 0; i < large.size(); ++i) large[i] = static_cast<char>(i * 131 % 251);
  ASSERT_OK_AND_ASSIGN(std::vector<PgRows> rows,
                       pool.Run(Transaction({{"SELECT length($1), $1", {PgParam::Bytea(large)}}})));
  EXPECT_EQ(rows[0].Int(0, 0).value(), static_cast<int64_t>(large.size()));
  EXPECT_TRUE(rows[0].Bytes(0, 1) == large);  // not printed: 8 MiB
}

// A write in a read-only transaction is the caller's mistake, not a demoted primary: refused
// at once, not retried for the failover timeout.
TEST(PgPool, ReadOnlyTransactionsCannotWrite) {
  IDEM_START_PG_OR_SKIP(server);
  PgPool pool(Conninfo(server->Uri()), {.size = 1, .failover_timeout = seconds(20)});
  const Clock::time_point start = Clock::now();
  Result<std::vector<PgRows>> refused = pool.Run(
      {.statements = {{"CREATE TABLE never (k int)", {}}}, .read_only = true, .resendable = true});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Status::Code::kInvalidArgument) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("(SQLSTATE 25006)"), std::string::npos)
      << refused.status().message();
  EXPECT_LT(Since(start), seconds(5));
  ASSERT_OK_AND_ASSIGN(std::vector<PgRows> rows,
                       pool.Run({.statements = {{"SELECT 1::bigint", {}}}, .read_only = true}));
  EXPECT_EQ(rows[0].Int(0, 0).value(), 1);
}

// BEGIN, SET LOCALs, the statements and COMMIT travel together: the client speaks once per
// transaction. A failed statement costs exactly one more turn (the ROLLBACK), which shows that
// the proxy's count would see a second round trip.
TEST(PgPool, SendsATransactionInOneRoundTrip) {
  IDEM_START_PG_OR_SKIP(server);
  TcpProxy proxy(server->port());
  PgPool pool(Conninfo(UriAtPort(*server, proxy.port())), {.size = 1});
  ASSERT_OK(pool.Run(Transaction({{"CREATE TABLE counted (n bigint)", {}}})).status());

  proxy.ResetTurns();
  ASSERT_OK_AND_ASSIGN(std::vector<PgRows> rows,
                       pool.Run(Transaction({{"SET LOCAL synchronous_commit = off", {}},
                                             {"INSERT INTO counted VALUES ($1), ($2)",
                                              {PgParam::Int8(1), PgParam::Int8(2)}},
                                             {"SELECT count(*) FROM counted", {}}})));
  EXPECT_EQ(proxy.client_turns(), 1u);
  EXPECT_EQ(rows[1].affected(), 2u);
  EXPECT_EQ(rows[2].Int(0, 0).value(), 2);

  proxy.ResetTurns();
  Result<std::vector<PgRows>> failed =
      pool.Run(Transaction({{"INSERT INTO counted VALUES ($1)", {PgParam::Int8(3)}},
                            {"SELECT 1 / $1", {PgParam::Int8(0)}}}));
  EXPECT_EQ(proxy.client_turns(), 2u);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(failed.status().message(),
            "postgresql://idem@127.0.0.1:" + std::to_string(proxy.port()) +
                "/postgres: statement 2 of 2 failed (SELECT 1 / $1): division by zero "
                "(SQLSTATE 22012)");
  // Rolled back as a whole, on the same connection.
  ASSERT_OK_AND_ASSIGN(rows, pool.Run(Transaction({{"SELECT count(*) FROM counted", {}}})));
  EXPECT_EQ(rows[0].Int(0, 0).value(), 2);
  EXPECT_EQ(pool.stats().connections_made, 1u);
}

// A statement sent alone is its own transaction: no BEGIN or COMMIT reach the server, a setting
// it makes with set_config(..., true) holds until its commit and no later, an error leaves the
// connection idle for the next call, and several statements are one transaction. Its time bound
// is the client's: past it the query is cancelled and the connection closed.
TEST(PgPool, SendsAStatementAloneAsItsOwnTransaction) {
  IDEM_START_PG_OR_SKIP(server);
  TcpProxy proxy(server->port());
  PgPool pool(Conninfo(UriAtPort(*server, proxy.port())), {.size = 1});
  ASSERT_OK(pool.Run(Transaction({{"CREATE TABLE alone (n bigint)", {}}})).status());
  const auto alone = [](std::string sql, std::vector<PgParam> params = {}) {
    return PgTransaction{.statements = {{std::move(sql), std::move(params)}},
                         .resendable = true,
                         .timeout = milliseconds(500),
                         .alone = true};
  };
  proxy.ResetTurns();
  ASSERT_OK_AND_ASSIGN(
      std::vector<PgRows> rows,
      pool.Run(alone("WITH s AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', "
                     "true) AS v) INSERT INTO alone SELECT $1 FROM s RETURNING "
                     "current_setting('synchronous_commit'), current_setting('statement_timeout')",
                     {PgParam::Int8(1)})));
  EXPECT_EQ(proxy.client_turns(), 1u);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].affected(), 1u);
  EXPECT_EQ(rows[0].Bytes(0, 0), "off");
  // No SET LOCAL statement_timeout went before it.
  EXPECT_EQ(rows[0].Bytes(0, 1), "0");
  // The setting ended with that transaction.
  ASSERT_OK_AND_ASSIGN(rows, pool.Run(alone("SELECT current_setting('synchronous_commit')")));
  EXPECT_EQ(rows[0].Bytes(0, 0), "on");

  Result<std::vector<PgRows>> failed = pool.Run(alone("SELECT 1 / $1", {PgParam::Int8(0)}));
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("statement 1 of 1 failed (SELECT 1 / $1): division "
                                           "by zero (SQLSTATE 22012)"),
            std::string::npos)
      << failed.status().message();
  ASSERT_OK_AND_ASSIGN(rows, pool.Run(alone("SELECT count(*) FROM alone")));
  EXPECT_EQ(rows[0].Int(0, 0).value(), 1);
  EXPECT_EQ(pool.stats().connections_made, 1u);

  // Several statements alone are one transaction, in one round trip: a failure in the second
  // takes back the first, and a setting the first makes holds for the second.
  PgTransaction two = alone("INSERT INTO alone VALUES (2)");
  two.statements.push_back({"INSERT INTO alone VALUES (3 / $1)", {PgParam::Int8(0)}});
  Result<std::vector<PgRows>> second_failed = pool.Run(two);
  ASSERT_FALSE(second_failed.ok());
  EXPECT_NE(second_failed.status().message().find("statement 2 of 2 failed"), std::string::npos)
      << second_failed.status().message();
  ASSERT_OK_AND_ASSIGN(rows, pool.Run(alone("SELECT count(*) FROM alone")));
  EXPECT_EQ(rows[0].Int(0, 0).value(), 1);
  PgTransaction pair = alone("SELECT set_config('synchronous_commit', 'off', true)");
  pair.statements.push_back({"SELECT current_setting('synchronous_commit')", {}});
  proxy.ResetTurns();
  ASSERT_OK_AND_ASSIGN(rows, pool.Run(pair));
  EXPECT_EQ(proxy.client_turns(), 1u);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].Bytes(0, 0), "off");

  const Clock::time_point start = Clock::now();
  Result<std::vector<PgRows>> slow = pool.Run(alone("SELECT pg_sleep(5)"));
  ASSERT_FALSE(slow.ok());
  EXPECT_EQ(slow.status().code(), Status::Code::kTimedOut) << slow.status().ToString();
  EXPECT_LT(Since(start), seconds(3));
  EXPECT_EQ(pool.stats().cancels, 1u);
  ASSERT_OK_AND_ASSIGN(rows, pool.Run(alone("SELECT count(*) FROM alone")));
  EXPECT_EQ(rows[0].Int(0, 0).value(), 1);
}

// Statements are prepared on a connection the first time it sends them and reused after: the
// server parses and plans each once per session. A transaction that fails after preparing one
// keeps it (the server skips only what follows the error), so the pool does not prepare it twice
// and keeps preparing.
TEST(PgPool, PreparesEachStatementOncePerConnection) {
  IDEM_START_PG_OR_SKIP(server);
  PgPool pool(Conninfo(server->Uri()), {.size = 1});
  const std::string count =
      "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'idem\\_%' AND $1::int2 = 1";
  const auto prepared = [&]() -> int64_t {
    auto rows = pool.Run(Transaction({{count, {PgParam::Int2(1)}}}));
    EXPECT_TRUE(rows.ok()) << rows.status().ToString();
    return rows.ok() ? rows->at(0).Int(0, 0).value() : -1;
  };
  EXPECT_EQ(prepared(), 1);  // itself, prepared in the same pipeline before it runs
  EXPECT_EQ(prepared(), 1);
  const PgStatement square{"SELECT $1::bigint * $1::bigint", {PgParam::Int8(12)}};
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(std::vector<PgRows> rows, pool.Run(Transaction({square})));
    EXPECT_EQ(rows[0].Int(0, 0).value(), 144);
  }
  EXPECT_EQ(prepared(), 2);
  const PgStatement cube{"SELECT $1::bigint * $1::bigint * $1::bigint", {PgParam::Int8(3)}};
  ASSERT_FALSE(pool.Run(Transaction({cube, {"SELECT 1 / $1", {PgParam::Int8(0)}}})).ok());
  ASSERT_OK_AND_ASSIGN(std::vector<PgRows> rows, pool.Run(Transaction({cube})));
  EXPECT_EQ(rows[0].Int(0, 0).value(), 27);
  EXPECT_EQ(prepared(), 4);  // the count, the square, the cube and the division
  EXPECT_TRUE(pool.stats().prepares);
  EXPECT_EQ(pool.stats().retries, 0u);
  EXPECT_EQ(pool.stats().connections_made, 1u);
}

// Behind PgBouncer in transaction pooling, the sessions a pool's transactions run on change:
// a statement prepared on one is missing on another, or prepared there already by another
// client. The pool then sends every statement unnamed, and the transaction that found out runs
// again: every call still gets its answer.
TEST(PgPool, StopsPreparingBehindAPoolerThatMovesItsTransactions) {
  if (const std::optional<std::string> unavailable = idem_test::PgBouncer::Unavailable()) {
    GTEST_SKIP() << *unavailable;
  }
  IDEM_START_PG_OR_SKIP(server);
  IDEM_START_PGBOUNCER_OR_SKIP(bouncer, server, /*pool_size=*/1);
  // Two client pools on PgBouncer's one server session: the second finds the first's statement
  // there, prepared under the same name.
  PgPool first(Conninfo(bouncer->Uri()), {.size = 1});
  PgPool second(Conninfo(bouncer->Uri()), {.size = 1});
  const PgStatement square{"SELECT $1::bigint * $1::bigint", {PgParam::Int8(12)}};
  for (PgPool* pool : {&first, &second, &first, &second}) {
    ASSERT_OK_AND_ASSIGN(std::vector<PgRows> rows, pool->Run(Transaction({square})));
    EXPECT_EQ(rows[0].Int(0, 0).value(), 144);
  }
  EXPECT_FALSE(second.stats().prepares);
  EXPECT_EQ(second.stats().retries, 1u);
}

TEST(PgPool, AFullPoolIsTimedOutNamingItsSize) {
  IDEM_START_PG_OR_SKIP(server);
  PgPool pool(Conninfo(server->Uri()), {.size = 1});
  Result<std::vector<PgRows>> held = Status::Unavailable("not run");
  std::thread holder([&] { held = pool.Run(Transaction({{"SELECT pg_sleep(3)", {}}})); });
  ASSERT_TRUE(WaitUntilRunning(*server, "SELECT pg_sleep(3)"));
  const Clock::time_point start = Clock::now();
  Result<std::vector<PgRows>> waited =
      pool.Run({.statements = {{"SELECT 1", {}}}, .timeout = milliseconds(300)});
  const milliseconds took = Since(start);
  holder.join();
  ASSERT_FALSE(waited.ok());
  EXPECT_EQ(waited.status().code(), Status::Code::kTimedOut);
  EXPECT_NE(waited.status().message().find("all 1 connections of the pool are busy"),
            std::string::npos)
      << waited.status().message();
  EXPECT_GE(took, milliseconds(300));
  EXPECT_LT(took, seconds(3));
  EXPECT_TRUE(held.ok()) << held.status().ToString();
}

// A caller that gives its connection back and asks for one again at once does not take it
// before a caller already waiting: connections go to waiters in the order they came (otherwise
// a busy thread could take it first every time, until the waiter timed out with "all
// connections busy"). The server's own order of the two inserts shows who went first.
TEST(PgPool, AWaitingCallerIsServedBeforeOneThatAsksLater) {
  IDEM_START_PG_OR_SKIP(server);
  PgPool pool(Conninfo(server->Uri()), {.size = 1});
  ASSERT_OK(pool.Run(Transaction({{"CREATE TABLE turns (id bigserial, who text)", {}}})).status());
  std::unique_ptr<PgOpenTransaction> held = pool.Begin(milliseconds(0));
  ASSERT_OK(held->Run({{"SELECT 1", {}}}).status());  // the pool's only connection
  Result<std::vector<PgRows>> waited = Status::Unavailable("not run");
  // Joined on the way out too, should an assertion below end the test early.
  std::jthread waiter([&] {
    waited = pool.Run(Transaction({{"INSERT INTO turns (who) VALUES ('waiter')", {}}}));
  });
  for (const auto until = Clock::now() + seconds(10);
       pool.stats().waiting == 0 && Clock::now() < until;) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  ASSERT_EQ(pool.stats().waiting, 1u);
  held.reset();  // rolled back, and the connection given back
  ASSERT_OK(pool.Run(Transaction({{"INSERT INTO turns (who) VALUES ('later')", {}}})).status());
  waiter.join();
  ASSERT_OK(waited.status());
  EXPECT_EQ(pool.stats().waiting, 0u);
  ASSERT_OK_AND_ASSIGN(std::vector<PgRows> rows,
                       pool.Run(Transaction({{"SELECT who FROM turns ORDER BY id", {}}})));
  ASSERT_EQ(rows[0].size(), 2);
  EXPECT_EQ(rows[0].Bytes(0, 0), "waiter");
  EXPECT_EQ(rows[0].Bytes(1, 0), "later");
}

// A thread that asks again gets the connection it gave back, when that one is idle, rather than
// the one given back last: its server process is then woken by the same thread as before. The
// two threads here each gave theirs back, one after the other, and each gets its own again.
TEST(PgPool, AThreadGetsBackTheConnectionItGaveBack) {
  IDEM_START_PG_OR_SKIP(server);
  PgPool pool(Conninfo(server->Uri()), {.size = 2});
  std::binary_semaphore holding(0), main_gave_back(0), worker_gave_back(0), main_asked_again(0);
  int64_t worker_first = -1;
  int64_t worker_again = -1;
  std::jthread worker([&] {
    {
      std::unique_ptr<PgOpenTransaction> held = pool.Begin(milliseconds(0));
      Result<std::vector<PgRows>> rows = held->Run({{"SELECT pg_backend_pid()", {}}});
      if (rows.ok()) worker_first = rows->at(0).Int(0, 0).value();
      holding.release();
      main_gave_back.acquire();
    }  // rolled back, and given back after the main thread's
    worker_gave_back.release();
    main_asked_again.acquire();
    worker_again = BackendPid(pool);
  });
  holding.acquire();
  const int64_t main_first = BackendPid(pool);  // a second connection: one is held
  main_gave_back.release();
  worker_gave_back.acquire();
  const int64_t main_again = BackendPid(pool);
  main_asked_again.release();
  worker.join();
  ASSERT_GT(worker_first, 0);
  ASSERT_GT(main_first, 0);
  ASSERT_NE(worker_first, main_first);
  EXPECT_EQ(main_again, main_first);
  EXPECT_EQ(worker_again, worker_first);
}

// Behind PgBouncer in transaction pooling, with one server connection for two pools: the
// pipeline goes through whole, its SET LOCALs stay in it, binary values arrive intact.
TEST(PgPool, WorksBehindPgBouncerInTransactionPooling) {
  if (const std::optional<std::string> unavailable = idem_test::PgBouncer::Unavailable()) {
    GTEST_SKIP() << *unavailable;
  }
  IDEM_START_PG_OR_SKIP(server);
  IDEM_START_PGBOUNCER_OR_SKIP(bouncer, server, /*pool_size=*/1);
  PgPool first(Conninfo(bouncer->Uri()), {.size = 1, .request_timeout = seconds(5)});
  PgPool second(Conninfo(bouncer->Uri()), {.size = 1, .request_timeout = seconds(5)});
  const std::string bytes("\0\xff", 2);
  const std::string settings =
      "SELECT current_setting('synchronous_commit'), current_setting('statement_timeout'), "
      "pg_backend_pid(), $1";
  ASSERT_OK_AND_ASSIGN(std::vector<PgRows> rows,
                       first.Run(Transaction({{"SET LOCAL synchronous_commit = off", {}},
                                              {settings, {PgParam::Bytea(bytes)}}})));
  EXPECT_EQ(rows[1].Bytes(0, 0), "off");
  EXPECT_EQ(rows[1].Bytes(0, 1), "5s");
  EXPECT_EQ(rows[1].Bytes(0, 3), bytes);
  const int64_t backend = rows[1].Int(0, 2).value();
  ASSERT_OK_AND_ASSIGN(rows, second.Run(Transaction({{settings, {PgParam::Bytea(bytes)}}})));
  EXPECT_EQ(rows[0].Bytes(0, 0), "on");           // first's SET LOCAL ended with its transaction
  EXPECT_EQ(rows[0].Int(0, 2).value(), backend);  // on the same server connection

  // A wrong password: refused by PgBouncer, never shown.
  PgPool refused(Conninfo(bouncer->UriWithPassword("Sup3rKept5ecret")),
                 {.size = 1, .failover_timeout = seconds(1)});
  const Status status = refused.Run(Transaction({{"SELECT 1", {}}})).status();
  std::cout << "wrong password through PgBouncer: " << status.ToString() << "\n";
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.message().find("Sup3rKept5ecret"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace idem::storage
