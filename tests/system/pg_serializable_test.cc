// The isolation level of Store::ExecuteInTransaction (docs/postgresql.md, "Isolation"), against a
// real server: PostgreSQL's default, READ COMMITTED, lets two transactions that each read two
// rows and write one commit a write skew; `SET TRANSACTION ISOLATION LEVEL SERIALIZABLE` as fn's
// first statement is the first of its transaction (idem sends none before it that takes a
// snapshot), and then the server refuses one of the two (SQLSTATE 40001), which runs fn again.

#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "idem/idem.h"
#include "support/pg_server.h"
#include "support/test_util.h"

namespace {

using namespace std::chrono_literals;
using idem::Attempt;
using idem::Result;
using idem::SqlRows;
using idem::SqlTransaction;
using idem::Store;
using idem_test::OpenStore;
using idem_test::TestOptions;

constexpr std::string_view kSerializable = "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE";

// Runs `sql` in a transaction of its own (under a fresh key), for setting up and checking.
Result<SqlRows> RunSql(Store& store, const std::string& sql) {
  static std::atomic<int> next{0};
  SqlRows rows;
  IDEM_ASSIGN_OR_RETURN(auto ran,
                        store.ExecuteInTransaction(
                            "sql-" + std::to_string(next++),
                            [&](Attempt&, SqlTransaction& sql_transaction) -> Result<std::string> {
                              IDEM_ASSIGN_OR_RETURN(rows, sql_transaction.Exec(sql));
                              return std::string();
                            }));
  static_cast<void>(ran);
  return rows;
}

// One side of the write skew in `round`: doctor `own` goes off call if both are on call. The
// first run meets the other side between its read and its write, so that both read before
// either commits.
Result<idem::Execution> GoOffCall(Store& store, bool serializable, int round,
                                  const std::string& own, const std::function<void()>& meet,
                                  int& runs) {
  return store.ExecuteInTransaction(
      "off-" + std::to_string(serializable) + "-" + std::to_string(round) + own,
      [&](Attempt&, SqlTransaction& sql) -> Result<std::string> {
        if (serializable) {
          IDEM_RETURN_IF_ERROR(sql.Exec(std::string(kSerializable)).status());
          IDEM_ASSIGN_OR_RETURN(SqlRows level, sql.Exec("SHOW transaction_isolation"));
          if (level.Get(0, 0) != "serializable") {
            return idem::Terminal("the transaction is not serializable");
          }
        }
        IDEM_ASSIGN_OR_RETURN(SqlRows on_call,
                              sql.Exec("SELECT count(*) FROM doctors WHERE round = $1 AND on_call",
                                       {std::to_string(round)}));
        if (++runs == 1) meet();
        if (on_call.Get(0, 0) != "2") return std::string("stayed");
        IDEM_RETURN_IF_ERROR(
            sql.Exec("UPDATE doctors SET on_call = false WHERE round = $1 AND name = $2",
                     {std::to_string(round), own})
                .status());
        return std::string("off");
      });
}

// Both sides of `rounds` rounds, each in a thread; returns in how many rounds both doctors went
// off call, and adds to `runs` how many times fn ran.
int SkewedRounds(Store& store, bool serializable, int rounds, int& runs) {
  EXPECT_OK(RunSql(store, "DELETE FROM doctors").status());
  EXPECT_OK(RunSql(store, "INSERT INTO doctors SELECT r, n, true FROM generate_series(0, " +
                              std::to_string(rounds - 1) + ") r, (VALUES ('x'), ('y')) AS names(n)")
                .status());
  std::barrier meeting(2);
  const auto meet = [&] { meeting.arrive_and_wait(); };
  for (int round = 0; round < rounds; ++round) {
    int runs_x = 0;
    int runs_y = 0;
    std::thread other(
        [&] { EXPECT_OK(GoOffCall(store, serializable, round, "y", meet, runs_y).status()); });
    EXPECT_OK(GoOffCall(store, serializable, round, "x", meet, runs_x).status());
    other.join();
    runs += runs_x + runs_y;
  }
  auto both_off = RunSql(store,
                         "SELECT count(*) FROM (SELECT round FROM doctors GROUP BY round "
                         "HAVING bool_or(on_call) = false) AS skewed");
  EXPECT_TRUE(both_off.ok()) << both_off.status().ToString();
  return both_off.ok() ? std::stoi(std::string(*both_off->Get(0, 0))) : -1;
}

TEST(PgSerializable, SetTransactionFirstPreventsTheWriteSkewThatReadCommittedAllows) {
  IDEM_START_PG_OR_SKIP(server);
  idem::Options options = TestOptions();
  options.pool_size = 6;  // two transactions, their renewals, and the checks
  auto store = OpenStore(server->Uri(), options);
  ASSERT_NE(store, nullptr);
  ASSERT_OK(RunSql(*store,
                   "CREATE TABLE doctors (round int, name text, on_call bool NOT NULL, "
                   "PRIMARY KEY (round, name))")
                .status());
  constexpr int kRounds = 10;
  // The default level, READ COMMITTED: both read two on call, both go off, every round.
  int runs = 0;
  EXPECT_EQ(SkewedRounds(*store, /*serializable=*/false, kRounds, runs), kRounds);
  EXPECT_EQ(runs, 2 * kRounds);
  // SERIALIZABLE: the server refuses one side (40001, at its UPDATE or its COMMIT), which runs
  // again, finds one doctor on call, and stays.
  runs = 0;
  EXPECT_EQ(SkewedRounds(*store, /*serializable=*/true, kRounds, runs), 0);
  // At least one run again a round; the server may refuse a run again too (its predicate locks
  // are coarser than rows).
  EXPECT_GE(runs, 3 * kRounds);
}

// The lease's renewals update the record's row while fn runs (every third of the lease), and a
// SERIALIZABLE transaction may not update a row changed since its first statement: its commit,
// which completes that row, fails (40001) and fn runs again, every time fn outlasts a third of
// the lease; a lease long enough for fn avoids it. READ COMMITTED does not mind.
TEST(PgSerializable, ARenewalWhileFnRunsFailsTheCommitUnlessTheLeaseOutlastsFn) {
  IDEM_START_PG_OR_SKIP(server);
  idem::Options options = TestOptions();
  options.conflict_retries = 2;
  auto store = OpenStore(server->Uri(), options);
  ASSERT_NE(store, nullptr);
  ASSERT_OK(RunSql(*store, "CREATE TABLE done (key text)").status());
  const auto run = [&](const std::string& key, bool serializable, std::chrono::milliseconds lease,
                       int& runs) {
    return store->ExecuteInTransaction(
        key, {.lease = lease}, [&](Attempt&, SqlTransaction& sql) -> Result<std::string> {
          ++runs;
          if (serializable) IDEM_RETURN_IF_ERROR(sql.Exec(std::string(kSerializable)).status());
          IDEM_RETURN_IF_ERROR(sql.Exec("SELECT count(*) FROM done").status());
          std::this_thread::sleep_for(400ms);  // renewed at least once meanwhile
          IDEM_RETURN_IF_ERROR(sql.Exec("INSERT INTO done VALUES ($1)", {key}).status());
          return std::string("ok");
        });
  };
  int runs = 0;
  EXPECT_OK(run("read-committed", false, 300ms, runs).status());
  EXPECT_EQ(runs, 1);
  runs = 0;
  const auto refused = run("serializable", true, 300ms, runs);
  EXPECT_CODE(refused.status(), kConflict);
  EXPECT_NE(refused.status().message().find("40001"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(runs, 3);  // conflict_retries + 1
  runs = 0;
  EXPECT_OK(run("serializable-long-lease", true, 5s, runs).status());
  EXPECT_EQ(runs, 1);
  ASSERT_OK_AND_ASSIGN(SqlRows done, RunSql(*store,
                                            "SELECT string_agg(key, ',' ORDER BY key) "
                                            "FROM done"));
  EXPECT_EQ(done.Get(0, 0), "read-committed,serializable-long-lease");
}

}  // namespace
