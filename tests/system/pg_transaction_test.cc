// Store::ExecuteInTransaction (idem/sql.h): the application's own SQL in the transaction that
// completes the record, against a real server. The application's rows and the record commit
// together or not at all: replays, errors, exceptions, a stale attempt, conflicts, racing
// threads, and processes killed with SIGKILL at random.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "idem/idem.h"
#include "support/pg_server.h"
#include "support/test_util.h"

namespace {

using namespace std::chrono_literals;
using idem::Attempt;
using idem::Result;
using idem::SqlRows;
using idem::SqlTransaction;
using idem::Status;
using idem::Store;
using idem_test::OpenStore;
using idem_test::TestOptions;

// Runs `sql` in a transaction of its own (under a fresh key), for setting up and checking.
Result<SqlRows> RunSql(Store& store, const std::string& sql) {
  static std::atomic<int> next{0};
  SqlRows rows;
  IDEM_ASSIGN_OR_RETURN(auto ran,
                        store.ExecuteInTransaction(
                            "sql-" + std::to_string(getpid()) + "-" + std::to_string(next++),
                            [&](Attempt&, SqlTransaction& sql_transaction) -> Result<std::string> {
                              IDEM_ASSIGN_OR_RETURN(rows, sql_transaction.Exec(sql));
                              return std::string();
                            }));
  static_cast<void>(ran);
  return rows;
}

void MakeAccounts(Store& store) {
  ASSERT_OK(RunSql(store,
                   "CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL, "
                   "version bigint NOT NULL)")
                .status());
}

// Every account's balance and version.
std::map<std::string, std::pair<long long, long long>> Accounts(Store& store) {
  std::map<std::string, std::pair<long long, long long>> accounts;
  auto rows = RunSql(store, "SELECT id, balance, version FROM accounts ORDER BY id");
  EXPECT_TRUE(rows.ok()) << rows.status().ToString();
  if (!rows.ok()) return accounts;
  for (int row = 0; row < rows->size(); ++row) {
    accounts[std::string(*rows->Get(row, "id"))] = {std::stoll(std::string(*rows->Get(row, 1))),
                                                    std::stoll(std::string(*rows->Get(row, 2)))};
  }
  return accounts;
}

// Adds `amount` to `account` with the seed's optimistic UPDATE: read the version, write only if
// it is still that one; kConflict (run again) when another commit moved it.
Result<std::string> Credit(SqlTransaction& sql, const std::string& account, long long amount) {
  IDEM_ASSIGN_OR_RETURN(SqlRows now,
                        sql.Exec("SELECT balance, version FROM accounts WHERE id = $1", {account}));
  if (now.size() == 0) {
    IDEM_ASSIGN_OR_RETURN(SqlRows inserted,
                          sql.Exec("INSERT INTO accounts VALUES ($1, $2, 1) ON CONFLICT DO NOTHING",
                                   {account, std::to_string(amount)}));
    if (inserted.affected() != 1) return Status::Conflict("the account was made meanwhile");
    return std::string("credited");
  }
  const long long balance = std::stoll(std::string(*now.Get(0, "balance")));
  IDEM_ASSIGN_OR_RETURN(
      SqlRows updated,
      sql.Exec("UPDATE accounts SET balance = $2, version = version + 1 WHERE id = $1 AND "
               "version = $3",
               {account, std::to_string(balance + amount), std::string(*now.Get(0, "version"))}));
  if (updated.affected() != 1) return Status::Conflict("the account moved on meanwhile");
  return std::string("credited");
}

// `threads` threads each credit 1 to one of `accounts` accounts per message, `messages` times,
// under keys `prefix`<thread>-<message>; then every account's balance adds up to one per message,
// and so do their versions. Returns how many times fn ran.
int CreditFromThreads(Store& store, const std::string& prefix, int threads, int messages,
                      int accounts) {
  std::atomic<int> runs{0};
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t) {
    running.emplace_back([&, t] {
      for (int m = 0; m < messages; ++m) {
        const std::string account = "acct" + std::to_string((t + m) % accounts);
        auto done =
            store.ExecuteInTransaction(prefix + std::to_string(t) + "-" + std::to_string(m),
                                       [&](Attempt&, SqlTransaction& sql) -> Result<std::string> {
                                         ++runs;
                                         return Credit(sql, account, 1);
                                       });
        EXPECT_TRUE(done.ok()) << done.status().ToString();
      }
    });
  }
  for (auto& thread : running) thread.join();
  long long sum = 0, versions = 0;
  for (const auto& [id, account] : Accounts(store)) {
    sum += account.first;
    versions += account.second;
  }
  EXPECT_EQ(sum, threads * messages);
  EXPECT_EQ(versions, threads * messages);
  return runs.load();
}

TEST(PgTransaction, TheApplicationsRowsCommitWithTheRecordOnce) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = OpenStore(server->Uri());
  ASSERT_NE(store, nullptr);
  MakeAccounts(*store);
  ASSERT_OK_AND_ASSIGN(const idem::OwnerCounters before, store->GetOwnerCounters());
  int runs = 0;
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(auto paid,
                         store->ExecuteInTransaction(
                             "pay-1", {.type = "pay"},
                             [&](Attempt& attempt, SqlTransaction& sql) -> Result<std::string> {
                               ++runs;
                               EXPECT_GT(attempt.token, 0u);
                               return Credit(sql, "alice", 10);
                             }));
    EXPECT_EQ(paid.result, "credited");
    EXPECT_EQ(paid.replayed, i > 0);
  }
  EXPECT_EQ(runs, 1);
  // The commit is counted and timed as a Complete is; the replays as Begins.
  ASSERT_OK_AND_ASSIGN(const idem::OwnerCounters after, store->GetOwnerCounters());
  EXPECT_EQ(after.counters.completes, before.counters.completes + 1);
  EXPECT_EQ(after.latencies.complete.count(), before.latencies.complete.count() + 1);
  EXPECT_EQ(after.counters.replays, before.counters.replays + 2);
  EXPECT_EQ(Accounts(*store)["alice"], std::make_pair(10LL, 1LL));
  ASSERT_OK_AND_ASSIGN(auto record, store->Get("pay-1"));
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->state, idem::State::kDone);
  EXPECT_EQ(record->type, "pay");

  // Values: NULL both ways, binary-looking text, and the columns by name and by number.
  ASSERT_OK_AND_ASSIGN(SqlRows values, RunSql(*store, "SELECT NULL::text AS a, 'x''y' AS b"));
  EXPECT_EQ(values.size(), 1);
  EXPECT_EQ(values.columns(), 2);
  EXPECT_EQ(values.Get(0, "a"), std::nullopt);
  EXPECT_EQ(values.Get(0, 1), "x'y");
  EXPECT_EQ(values.Get(1, 0), std::nullopt);
  EXPECT_EQ(values.Get(0, "nope"), std::nullopt);
}

// An error or an exception from fn, a bad statement, or a result over the limit: nothing of the
// transaction applies, and the record says why (retryable, so the next caller runs it again).
TEST(PgTransaction, AnErrorOrAnExceptionAppliesNothing) {
  IDEM_START_PG_OR_SKIP(server);
  idem::Options options = TestOptions();
  options.max_result_size = 100;
  auto store = OpenStore(server->Uri(), options);
  ASSERT_NE(store, nullptr);
  MakeAccounts(*store);

  auto failed =
      store->ExecuteInTransaction("m1", [&](Attempt&, SqlTransaction& sql) -> Result<std::string> {
        IDEM_RETURN_IF_ERROR(Credit(sql, "alice", 5).status());
        return Result<std::string>(Status::Unavailable("the card network is down"));
      });
  EXPECT_CODE(failed.status(), kUnavailable);
  EXPECT_TRUE(Accounts(*store).empty());
  ASSERT_OK_AND_ASSIGN(auto record, store->Get("m1"));
  EXPECT_EQ(record->state, idem::State::kFailed);
  EXPECT_TRUE(record->retryable);

  EXPECT_THROW(static_cast<void>(store->ExecuteInTransaction(
                   "m2",
                   [&](Attempt&, SqlTransaction& sql) -> Result<std::string> {
                     IDEM_RETURN_IF_ERROR(Credit(sql, "alice", 5).status());
                     throw std::runtime_error("boom");
                   })),
               std::runtime_error);
  EXPECT_TRUE(Accounts(*store).empty());

  auto bad =
      store->ExecuteInTransaction("m3", [&](Attempt&, SqlTransaction& sql) -> Result<std::string> {
        IDEM_RETURN_IF_ERROR(Credit(sql, "alice", 5).status());
        // After an error the transaction is over: the next statement gets the same error.
        const Status first = sql.Exec("SELEC 1").status();
        EXPECT_CODE(first, kInvalidArgument);
        EXPECT_NE(first.message().find("42601"), std::string::npos) << first.ToString();
        EXPECT_EQ(sql.Exec("SELECT 1").status(), first);
        return Result<std::string>(first);
      });
  EXPECT_CODE(bad.status(), kInvalidArgument);
  EXPECT_TRUE(Accounts(*store).empty());

  auto oversized =
      store->ExecuteInTransaction("m4", [&](Attempt&, SqlTransaction& sql) -> Result<std::string> {
        IDEM_RETURN_IF_ERROR(Credit(sql, "alice", 5).status());
        return Result<std::string>(std::string(101, 'r'));
      });
  EXPECT_CODE(oversized.status(), kInvalidArgument);
  EXPECT_NE(oversized.status().message().find("101 bytes"), std::string::npos);
  EXPECT_TRUE(Accounts(*store).empty());

  // Run again (retryable), it applies once.
  ASSERT_OK_AND_ASSIGN(
      auto again,
      store->ExecuteInTransaction("m1", [&](Attempt&, SqlTransaction& sql) -> Result<std::string> {
        return Credit(sql, "alice", 5);
      }));
  EXPECT_EQ(Accounts(*store)["alice"], std::make_pair(5LL, 1LL));
}

// A stale attempt: while fn runs, its record is forgotten and the key claimed anew. Its commit
// finds the claim gone: kLeaseLost (counted in lease_lost), and its rows vanish with it.
TEST(PgTransaction, AStaleAttemptWritesNothing) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = OpenStore(server->Uri());
  auto other = OpenStore(server->Uri());  // the same store, through a handle of its own
  ASSERT_TRUE(store && other);
  MakeAccounts(*store);
  ASSERT_OK_AND_ASSIGN(const idem::Counters before, store->GetCounters());
  uint64_t successor = 0;
  auto stale = store->ExecuteInTransaction(
      "m1", [&](Attempt& attempt, SqlTransaction& sql) -> Result<std::string> {
        IDEM_RETURN_IF_ERROR(Credit(sql, "alice", 7).status());
        EXPECT_OK(other->Forget("m1"));
        auto taken = other->Begin("m1");
        EXPECT_TRUE(taken.ok() && taken->outcome == idem::Outcome::kAcquired);
        if (taken.ok()) successor = taken->token;
        EXPECT_GT(successor, attempt.token);
        return Result<std::string>(std::string("late"));
      });
  EXPECT_CODE(stale.status(), kLeaseLost);
  // Counted as every other call with a stale token is.
  ASSERT_OK_AND_ASSIGN(const idem::Counters after, store->GetCounters());
  EXPECT_EQ(after.lease_lost, before.lease_lost + 1);
  EXPECT_TRUE(Accounts(*store).empty());
  ASSERT_OK_AND_ASSIGN(auto record, store->Get("m1"));
  EXPECT_EQ(record->state, idem::State::kPending);
  EXPECT_EQ(record->token, successor);
}

// 8 threads add 1 to 3 shared accounts, 25 messages each, with the optimistic UPDATE: every
// conflict runs fn again, and no update is lost. Row locks alone (balance = balance + 1) and a
// deadlock between two orders of locking are run again too.
TEST(PgTransaction, RacingThreadsLoseNoUpdate) {
  IDEM_START_PG_OR_SKIP(server);
  idem::Options options = TestOptions();
  options.conflict_retries = 1000;
  options.pool_size = 12;
  auto store = OpenStore(server->Uri(), options);
  ASSERT_NE(store, nullptr);
  MakeAccounts(*store);
  constexpr int kThreads = 8;
  constexpr int kMessages = 25;
  const int runs = CreditFromThreads(*store, "t", kThreads, kMessages, 3);
  std::cout << runs - kThreads * kMessages << " runs again after conflicts\n";

  // Two transactions that lock two rows in opposite orders: the server breaks the deadlock
  // (40P01), the loser runs again, and both apply.
  std::vector<std::thread> lockers;
  std::atomic<int> deadlock_runs{0};
  std::atomic<int> first_locks{0};  // first runs holding their first row
  for (int t = 0; t < 2; ++t) {
    lockers.emplace_back([&, t] {
      const std::string first = t == 0 ? "acct0" : "acct1";
      const std::string second = t == 0 ? "acct1" : "acct0";
      bool first_run = true;
      auto done = store->ExecuteInTransaction(
          "lock-" + std::to_string(t), [&](Attempt&, SqlTransaction& sql) -> Result<std::string> {
            ++deadlock_runs;
            const std::string add =
                "UPDATE accounts SET balance = balance + 100, version = version + 1 WHERE id = $1";
            IDEM_RETURN_IF_ERROR(sql.Exec(add, {first}).status());
            if (std::exchange(first_run, false)) {
              // Both hold their first row before either asks for its second: a deadlock.
              ++first_locks;
              const auto until = std::chrono::steady_clock::now() + 10s;
              while (first_locks.load() < 2 && std::chrono::steady_clock::now() < until) {
                std::this_thread::sleep_for(1ms);
              }
            }
            IDEM_RETURN_IF_ERROR(sql.Exec(add, {second}).status());
            return std::string("locked");
          });
      EXPECT_TRUE(done.ok()) << done.status().ToString();
    });
  }
  for (auto& thread : lockers) thread.join();
  EXPECT_GE(deadlock_runs.load(), 3);  // the loser of the deadlock ran again
  long long sum = 0;
  for (const auto& [id, account] : Accounts(*store)) sum += account.first;
  EXPECT_EQ(sum, kThreads * kMessages + 400);
}

// Behind PgBouncer in transaction pooling, with more of idem's connections than the pooler has
// server sessions: each transaction may land on another session, where what idem prepared
// elsewhere is missing; it falls back to unnamed statements (running fn again if that happened
// mid-transaction), and every credit applies once.
TEST(PgTransaction, WorksBehindPgBouncerInTransactionMode) {
  IDEM_START_PG_OR_SKIP(server);
  IDEM_START_PGBOUNCER_OR_SKIP(bouncer, server, 2);
  idem::Options options = TestOptions();
  options.conflict_retries = 1000;
  options.pool_size = 6;
  auto store = OpenStore(bouncer->Uri(), options);
  ASSERT_NE(store, nullptr);
  MakeAccounts(*store);
  CreditFromThreads(*store, "b", /*threads=*/4, /*messages=*/20, /*accounts=*/2);
}

TEST(PgTransaction, AStoreDirectoryRefusesWithoutClaiming) {
  idem_test::TempDir dir;
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  int runs = 0;
  auto refused = store->ExecuteInTransaction("m1", [&](Attempt&, SqlTransaction&) {
    ++runs;
    return Result<std::string>(std::string("x"));
  });
  EXPECT_CODE(refused.status(), kInvalidArgument);
  EXPECT_NE(refused.status().message().find("not kept in PostgreSQL"), std::string::npos);
  EXPECT_EQ(runs, 0);
  ASSERT_OK_AND_ASSIGN(auto record, store->Get("m1"));
  EXPECT_FALSE(record.has_value());
}

// 4 processes consume the same 300 messages (each credits one of 8 accounts an amount of its
// own) in orders of their own, and are killed with SIGKILL at random and started again. At the
// end every account holds exactly the sum of its distinct messages, and every message's record
// is done: none was applied twice, none lost. IDEM_PG_KILL_SECONDS sets how long the kills go
// on (default 4), with 100 messages a second of it.
TEST(PgTransaction, ConsumersKilledAtRandomCountEveryMessageOnce) {
  IDEM_START_PG_OR_SKIP(server);
  constexpr int kProcesses = 4;
  constexpr int kAccounts = 8;
  const char* seconds_text = std::getenv("IDEM_PG_KILL_SECONDS");
  const int seconds = seconds_text ? std::max(1, std::atoi(seconds_text)) : 4;
  const auto kill_for = std::chrono::seconds(seconds);
  // Enough that the consumers are still at work when the kills end (about 100 a second each).
  const int kMessageCount = std::max(300, 100 * seconds);
  const std::string uri = server->Uri();
  {
    // Made in a child: this process opens no store, so that its children fork from a process
    // without a store's threads.
    const pid_t maker = fork();
    if (maker == 0) {
      auto store = Store::Open(uri, {});
      if (!store.ok()) _exit(10);
      _exit(RunSql(**store,
                   "CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL, "
                   "version bigint NOT NULL)")
                    .ok()
                ? 0
                : 11);
    }
    int status = 0;
    waitpid(maker, &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const auto consume = [&](int seed) -> int {
    idem::Options options = TestOptions();
    options.conflict_retries = 1000;
    auto store = Store::Open(uri, options);
    if (!store.ok()) return 20;
    std::vector<int> order(kMessageCount);
    for (int m = 0; m < kMessageCount; ++m) order[m] = m;
    std::shuffle(order.begin(), order.end(), std::mt19937(seed));
    for (const int m : order) {
      for (int tries = 0;; ++tries) {
        auto done = (*store)->ExecuteInTransaction(
            "msg-" + std::to_string(m), {.lease = 2s},
            [&](Attempt&, SqlTransaction& sql) -> Result<std::string> {
              return Credit(sql, "acct" + std::to_string(m % kAccounts), m + 1);
            });
        if (done.ok()) break;
        // Another consumer holds it (or was killed holding it: its lease runs out), or failed
        // with a retryable error: try again.
        if (tries > 200) return 21;
        std::this_thread::sleep_for(50ms);
      }
    }
    return 0;
  };
  std::vector<pid_t> consumers(kProcesses, -1);
  int started = 0;
  const auto start = [&](int slot) {
    const int seed = ++started;
    const pid_t pid = fork();
    if (pid == 0) _exit(consume(seed));
    consumers[slot] = pid;
  };
  for (int slot = 0; slot < kProcesses; ++slot) start(slot);
  std::mt19937 random(std::random_device{}());
  int kills = 0;
  const auto kill_until = std::chrono::steady_clock::now() + kill_for;
  while (std::chrono::steady_clock::now() < kill_until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50 + random() % 250));
    const int slot = static_cast<int>(random() % kProcesses);
    int status = 0;
    if (waitpid(consumers[slot], &status, WNOHANG) == consumers[slot]) {
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
    } else {
      kill(consumers[slot], SIGKILL);
      waitpid(consumers[slot], nullptr, 0);
      ++kills;
    }
    start(slot);
  }
  for (const pid_t pid : consumers) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  std::cout << kills << " consumers killed, " << started << " started\n";

  auto store = OpenStore(uri);
  ASSERT_NE(store, nullptr);
  std::map<std::string, long long> expected;
  for (int m = 0; m < kMessageCount; ++m) expected["acct" + std::to_string(m % kAccounts)] += m + 1;
  const auto accounts = Accounts(*store);
  ASSERT_EQ(accounts.size(), expected.size());
  for (const auto& [id, account] : accounts) {
    EXPECT_EQ(account.first, expected[id]) << id;
    EXPECT_EQ(account.second,
              kMessageCount / kAccounts + (std::stoi(id.substr(4)) < kMessageCount % kAccounts))
        << id;
  }
  for (int m = 0; m < kMessageCount; ++m) {
    ASSERT_OK_AND_ASSIGN(auto record, store->Get("msg-" + std::to_string(m)));
    ASSERT_TRUE(record.has_value());
    EXPECT_EQ(record->state, idem::State::kDone) << m;
  }
}

#ifdef IDEM_QUEUE_CONSUMER
// The queue consumer example with its store in PostgreSQL, and its balances in its own table:
// 4 consumers, one SIGKILLed about every 200 ms, 1,000 messages delivered at least once. The
// example checks that every message took effect exactly once and every balance is the exact sum
// of its messages. IDEM_PG_KILL_SECONDS (a minute, say) runs the storm on more messages.
TEST(PgTransaction, TheQueueConsumerExampleCountsEveryMessageOnceInAKillStorm) {
  IDEM_START_PG_OR_SKIP(server);
  idem_test::TempDir dir;
  const char* seconds_text = std::getenv("IDEM_PG_KILL_SECONDS");
  // About 600 messages a second get through a storm on this kind of machine.
  const int messages = seconds_text ? std::max(1000, 600 * std::atoi(seconds_text)) : 1000;
  const std::string command = std::string(IDEM_QUEUE_CONSUMER) + " run '" + dir.Sub("queue") +
                              "' --store '" + server->Uri() + "' --consumers 4 --messages " +
                              std::to_string(messages) +
                              " --kill-every-ms 200 --timeout-s 300 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char chunk[4096];
  while (const std::size_t got = std::fread(chunk, 1, sizeof chunk, pipe))
    output.append(chunk, got);
  const int status = ::pclose(pipe);
  const std::string tail = output.substr(output.size() > 3000 ? output.size() - 3000 : 0);
  const std::size_t summary = output.find("== Deliveries against effects");
  if (summary != std::string::npos) std::cout << output.substr(summary);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << tail;
  EXPECT_NE(output.find("OK: every message took effect exactly once"), std::string::npos) << tail;
  EXPECT_NE(output.find("accounts whose balance is exactly the sum of their messages 8 of 8"),
            std::string::npos)
      << tail;
}
#endif

}  // namespace
