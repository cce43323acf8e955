// Application tables (idem/tables.h): writes committed with a record's Complete, in one atomic
// write and behind the same fence; versions and conflicts; tables made on first write, found
// again at reopen, and the store's format version raised for them.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "idem/idem.h"
#include "support/child_awaiting_go.h"
#include "support/test_util.h"

namespace {

using namespace std::chrono_literals;
using idem::Outcome;
using idem::Status;
using idem::TableValue;
using idem::WriteSet;
using idem_test::ChildAwaitingGo;
using idem_test::TempDir;
using idem_test::TestOptions;

// The value of `key` in `table`, or a test failure.
TableValue ValueOf(idem::Store& store, std::string_view table, std::string_view key) {
  auto value = store.GetValue(table, key);
  EXPECT_TRUE(value.ok()) << value.status().ToString();
  return value.ok() ? *value : TableValue{};
}

std::string FormatFile(const TempDir& dir) {
  std::ifstream in(dir.StorePath() + "/db/IDEM-FORMAT");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(Tables, AWriteAppliesWithTheCompleteAndRaisesTheVersion) {
  TempDir dir;
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  // Never written: absent at version 0, the table too.
  EXPECT_EQ(ValueOf(*store, "balances", "alice"), TableValue{});

  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("m1"));
  WriteSet writes;
  writes.Put("balances", "alice", "10", /*if_version=*/0);
  writes.Put("balances", "bob", "5");  // blind
  writes.Put("log", "m1", "alice+10");
  ASSERT_OK(store->Complete("m1", claim.token, "ok", writes));
  EXPECT_EQ(ValueOf(*store, "balances", "alice"), (TableValue{"10", 1}));
  EXPECT_EQ(ValueOf(*store, "balances", "bob"), (TableValue{"5", 1}));
  EXPECT_EQ(ValueOf(*store, "log", "m1"), (TableValue{"alice+10", 1}));
  ASSERT_OK_AND_ASSIGN(auto record, store->Get("m1"));
  EXPECT_EQ(record->state, idem::State::kDone);

  // The same Complete again (a lost reply): OK, and nothing applied a second time.
  ASSERT_OK(store->Complete("m1", claim.token, "ok", writes));
  EXPECT_EQ(ValueOf(*store, "balances", "alice").version, 1u);

  // A delete keeps the version rising: absent at version 2, then written at 3.
  ASSERT_OK_AND_ASSIGN(auto second, store->Begin("m2"));
  WriteSet remove;
  remove.Delete("balances", "alice", 1);
  remove.Put("balances", "bob", "6", 1);
  remove.Put("balances", "bob", "7", 1);  // twice: the last value, one version up
  ASSERT_OK(store->Complete("m2", second.token, "ok", remove));
  EXPECT_EQ(ValueOf(*store, "balances", "alice"), (TableValue{std::nullopt, 2}));
  EXPECT_EQ(ValueOf(*store, "balances", "bob"), (TableValue{"7", 2}));
  ASSERT_OK_AND_ASSIGN(auto third, store->Begin("m3"));
  WriteSet again;
  again.Put("balances", "alice", "1", 2);
  ASSERT_OK(store->Complete("m3", third.token, "ok", again));
  EXPECT_EQ(ValueOf(*store, "balances", "alice"), (TableValue{"1", 3}));

  // ScanTable: present keys in order, deleted ones left out; prefix and start_after as Scan's.
  ASSERT_OK_AND_ASSIGN(auto fourth, store->Begin("m4"));
  WriteSet more;
  more.Put("balances", "carol", "3");
  more.Delete("balances", "bob");
  ASSERT_OK(store->Complete("m4", fourth.token, "ok", more));
  std::vector<std::pair<std::string, TableValue>> seen;
  ASSERT_OK(store->ScanTable("balances", {}, [&](std::string_view key, const TableValue& value) {
    seen.emplace_back(std::string(key), value);
    return true;
  }));
  EXPECT_EQ(seen, (std::vector<std::pair<std::string, TableValue>>{{"alice", {"1", 3}},
                                                                   {"carol", {"3", 1}}}));
  seen.clear();
  ASSERT_OK(store->ScanTable("balances", {.start_after = "alice"},
                             [&](std::string_view key, const TableValue& value) {
                               seen.emplace_back(std::string(key), value);
                               return true;
                             }));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].first, "carol");
  ASSERT_OK(store->ScanTable("never-written", {}, [](std::string_view, const TableValue&) {
    ADD_FAILURE() << "a table never written has no keys";
    return true;
  }));
}

// A conditional write whose key moved on applies nothing, the record's Complete included: the
// claim stays pending with its token, and a Complete on fresh reads then succeeds.
// A version never wraps (issue 40): a key imported at the largest version takes no more writes,
// so a write conditional on "never written" (version 0) can never apply to it; an import above
// the largest is refused.
TEST(Tables, AKeyAtTheLargestVersionTakesNoMoreWritesAndNothingAboveItIsImported) {
  TempDir dir;
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  const uint64_t largest = TableValue::kLargestVersion;
  const std::vector<std::pair<std::string, TableValue>> above = {{"k", {"v", largest + 1}}};
  EXPECT_CODE(store->ImportValues("t", above).status(), kInvalidArgument);
  const std::vector<std::pair<std::string, TableValue>> at = {{"k", {"v", largest}}};
  ASSERT_OK(store->ImportValues("t", at).status());
  EXPECT_EQ(ValueOf(*store, "t", "k"), (TableValue{"v", largest}));

  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("m"));
  for (const std::optional<uint64_t> if_version :
       {std::optional<uint64_t>(), std::optional<uint64_t>(0), std::optional<uint64_t>(largest)}) {
    WriteSet writes;
    writes.Put("t", "k", "wrapped", if_version);
    const idem::Status refused = store->Complete("m", claim.token, "ok", writes);
    EXPECT_FALSE(refused.ok());
    EXPECT_EQ(ValueOf(*store, "t", "k"), (TableValue{"v", largest}));
  }
  ASSERT_OK_AND_ASSIGN(auto record, store->Get("m"));
  EXPECT_EQ(record->state, idem::State::kPending);
}

TEST(Tables, AConflictWritesNothingAndLeavesTheClaimToCompleteAgain) {
  TempDir dir;
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  ASSERT_OK_AND_ASSIGN(auto first, store->Begin("m1"));
  WriteSet opening;
  opening.Put("balances", "alice", "10");
  ASSERT_OK(store->Complete("m1", first.token, "ok", opening));

  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("m2"));
  const TableValue read = ValueOf(*store, "balances", "alice");
  // Another request commits in between.
  ASSERT_OK_AND_ASSIGN(auto other, store->Begin("m3"));
  WriteSet others;
  others.Put("balances", "alice", "15", read.version);
  ASSERT_OK(store->Complete("m3", other.token, "ok", others));

  WriteSet stale;
  stale.Put("balances", "alice", "30", read.version);
  stale.Put("log", "m2", "alice+20");
  const Status conflict = store->Complete("m2", claim.token, "ok", stale);
  EXPECT_CODE(conflict, kConflict);
  EXPECT_NE(conflict.message().find("key \"alice\" of table balances is at version 2, not 1"),
            std::string::npos)
      << conflict.message();
  EXPECT_TRUE(idem::IsRetryable(conflict));
  EXPECT_EQ(ValueOf(*store, "balances", "alice"), (TableValue{"15", 2}));
  EXPECT_EQ(ValueOf(*store, "log", "m2"), TableValue{});
  ASSERT_OK_AND_ASSIGN(auto pending, store->Get("m2"));
  EXPECT_EQ(pending->state, idem::State::kPending);
  EXPECT_EQ(pending->token, claim.token);

  const TableValue fresh = ValueOf(*store, "balances", "alice");
  WriteSet retried;
  retried.Put("balances", "alice", "35", fresh.version);
  ASSERT_OK(store->Complete("m2", claim.token, "ok", retried));
  EXPECT_EQ(ValueOf(*store, "balances", "alice"), (TableValue{"35", 3}));
}

// The fence: a holder whose lease was taken over writes nothing, and neither do Fail, nor a
// Complete on a key with no record.
TEST(Tables, AStaleHolderWritesNothing) {
  idem_test::ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto stale, s.store->Begin("m1", {.lease = 1s}));
  s.clock->Advance(2s);
  ASSERT_OK_AND_ASSIGN(auto successor, s.store->Begin("m1", {.lease = 10s}));
  ASSERT_EQ(successor.outcome, Outcome::kAcquired);
  WriteSet writes;
  writes.Put("balances", "alice", "10");
  EXPECT_CODE(s.store->Complete("m1", stale.token, "ok", writes), kLeaseLost);
  EXPECT_EQ(ValueOf(*s.store, "balances", "alice"), TableValue{});
  EXPECT_CODE(s.store->Complete("absent", successor.token, "ok", writes), kNotFound);
  EXPECT_EQ(ValueOf(*s.store, "balances", "alice"), TableValue{});
  // Writes ride only on a Complete; the successor's own Complete applies them.
  ASSERT_OK(s.store->Complete("m1", successor.token, "ok", writes));
  EXPECT_EQ(ValueOf(*s.store, "balances", "alice"), (TableValue{"10", 1}));
}

TEST(Tables, BadTableNamesKeysAndValuesAreRefusedAndNothingIsWritten) {
  TempDir dir;
  idem::Options options = TestOptions();
  options.max_key_size = 16;
  options.max_result_size = 32;
  IDEM_ASSERT_OPEN(store, dir.StorePath(), options);
  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("m1"));
  const auto refused = [&](WriteSet writes, std::string_view expected) {
    writes.Put("balances", "fine", "1");  // a good write beside the bad one: not applied either
    const Status status = store->Complete("m1", claim.token, "ok", writes);
    EXPECT_CODE(status, kInvalidArgument);
    EXPECT_NE(status.message().find(expected), std::string::npos) << status.message();
  };
  for (const std::string& table : {std::string(), std::string("has space"), std::string("a/b"),
                                   std::string(65, 't'), std::string("nul\0", 4)}) {
    WriteSet writes;
    writes.Put(table, "k", "v");
    refused(writes, "must be 1 to 64 letters, digits");
  }
  WriteSet empty_key;
  empty_key.Put("balances", "", "v");
  refused(empty_key, "a write to table balances has an empty key");
  WriteSet long_key;
  long_key.Put("balances", std::string(17, 'k'), "v");
  refused(long_key, "key of a write to table balances is 17 bytes; the limit is 16");
  WriteSet large;
  large.Put("balances", "k", std::string(33, 'v'));
  refused(large, "value for table balances is 33 bytes; the limit is 32");
  EXPECT_EQ(ValueOf(*store, "balances", "fine"), TableValue{});
  ASSERT_OK_AND_ASSIGN(auto record, store->Get("m1"));
  EXPECT_EQ(record->state, idem::State::kPending);
  EXPECT_CODE(store->GetValue("bad name", "k").status(), kInvalidArgument);
  EXPECT_CODE(store->GetValue("balances", "").status(), kInvalidArgument);
  // Binary keys and values are kept as they are.
  WriteSet binary;
  binary.Put("balances", std::string("\0\xff", 2), std::string("\0\x01", 2));
  ASSERT_OK(store->Complete("m1", claim.token, "ok", binary));
  EXPECT_EQ(ValueOf(*store, "balances", std::string("\0\xff", 2)),
            (TableValue{std::string("\0\x01", 2), 1}));
}

// A store is made at format version 1, which releases before tables read; its first table
// raises it to 2 (the format file and the meta value), and a reopen finds every table again.
TEST(Tables, TablesSurviveAReopenAndRaiseTheFormatVersion) {
  TempDir dir;
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("m0"));
    ASSERT_OK(store->Complete("m0", claim.token, "ok"));
    // Reading a table makes none.
    EXPECT_EQ(ValueOf(*store, "balances", "alice"), TableValue{});
  }
  EXPECT_EQ(FormatFile(dir), "1\n");
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("m1"));
    WriteSet writes;
    writes.Put("balances", "alice", "10");
    writes.Put("inventory", "widget", "3");
    ASSERT_OK(store->Complete("m1", claim.token, "ok", writes));
    EXPECT_EQ(FormatFile(dir), "2\n");
  }
  for (const bool read_only : {false, true}) {
    idem::Options options = TestOptions();
    options.read_only = read_only;
    IDEM_ASSERT_OPEN(store, dir.StorePath(), options);
    EXPECT_EQ(ValueOf(*store, "balances", "alice"), (TableValue{"10", 1}));
    EXPECT_EQ(ValueOf(*store, "inventory", "widget"), (TableValue{"3", 1}));
  }
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("m2"));
  WriteSet writes;
  writes.Put("balances", "alice", "11", 1);
  ASSERT_OK(store->Complete("m2", claim.token, "ok", writes));
  EXPECT_EQ(ValueOf(*store, "balances", "alice"), (TableValue{"11", 2}));
}

// Threads add to shared balances with conditional writes, each message once: every conflict is
// retried on fresh reads, and no update is lost.
TEST(Tables, RacingCommitsOnSharedBalancesLoseNoUpdate) {
  TempDir dir;
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  constexpr int kThreads = 8;
  constexpr int kMessages = 100;  // per thread
  constexpr int kAccounts = 3;
  std::atomic<int> conflicts{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int m = 0; m < kMessages; ++m) {
        const std::string message = "t" + std::to_string(t) + "-m" + std::to_string(m);
        auto claim = store->Begin(message);
        ASSERT_TRUE(claim.ok()) << claim.status().ToString();
        for (;;) {
          // Each message adds 1 to one account and 1 to the total.
          const std::string account = "acct" + std::to_string((t + m) % kAccounts);
          const TableValue balance = ValueOf(*store, "balances", account);
          const TableValue total = ValueOf(*store, "totals", "all");
          WriteSet writes;
          writes.Put("balances", account,
                     std::to_string(std::stoi(balance.value.value_or("0")) + 1), balance.version);
          writes.Put("totals", "all", std::to_string(std::stoi(total.value.value_or("0")) + 1),
                     total.version);
          const Status done = store->Complete(message, claim->token, "ok", writes);
          if (done.code() == Status::Code::kConflict) {
            ++conflicts;
            continue;
          }
          ASSERT_TRUE(done.ok()) << done.ToString();
          break;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  int sum = 0;
  for (int a = 0; a < kAccounts; ++a) {
    sum += std::stoi(ValueOf(*store, "balances", "acct" + std::to_string(a)).value.value_or("0"));
  }
  EXPECT_EQ(sum, kThreads * kMessages);
  const TableValue total = ValueOf(*store, "totals", "all");
  EXPECT_EQ(total.value, std::to_string(kThreads * kMessages));
  EXPECT_EQ(total.version, static_cast<uint64_t>(kThreads * kMessages));
  std::cout << conflicts.load() << " conflicts retried\n";
}

// Execute: fn stages its writes through its Attempt; they apply with the Complete, once. A
// replay runs nothing and writes nothing; an error or an exception from fn writes nothing.
TEST(Tables, ExecuteAppliesTheStagedWritesOnceWithTheResult) {
  TempDir dir;
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  const auto add = [&](std::string_view message, int amount) {
    return store->Execute(message, [&](idem::Attempt& attempt) -> idem::Result<std::string> {
      IDEM_ASSIGN_OR_RETURN(TableValue balance, attempt.Read("balances", "alice"));
      const int next = std::stoi(balance.value.value_or("0")) + amount;
      IDEM_RETURN_IF_ERROR(attempt.Put("balances", "alice", std::to_string(next)));
      IDEM_RETURN_IF_ERROR(attempt.Put("log", message, std::to_string(amount)));
      // Read after Put: what this attempt put, at the version it read.
      IDEM_ASSIGN_OR_RETURN(TableValue staged, attempt.Read("balances", "alice"));
      if (staged.value != std::to_string(next) || staged.version != balance.version) {
        return idem::Terminal("a read after a put does not see the put");
      }
      return std::to_string(next);
    });
  };
  ASSERT_OK_AND_ASSIGN(auto first, add("m1", 10));
  EXPECT_EQ(first.result, "10");
  ASSERT_OK_AND_ASSIGN(auto replay, add("m1", 10));
  EXPECT_TRUE(replay.replayed);
  EXPECT_EQ(replay.result, "10");
  ASSERT_OK_AND_ASSIGN(auto second, add("m2", 5));
  EXPECT_EQ(second.result, "15");
  EXPECT_EQ(ValueOf(*store, "balances", "alice"), (TableValue{"15", 2}));
  EXPECT_EQ(ValueOf(*store, "log", "m2"), (TableValue{"5", 1}));

  auto failed = store->Execute("m3", [&](idem::Attempt& attempt) -> idem::Result<std::string> {
    IDEM_RETURN_IF_ERROR(attempt.Put("balances", "alice", "0"));
    return Status::Unavailable("the downstream system is down");
  });
  EXPECT_CODE(failed.status(), kUnavailable);
  EXPECT_THROW(
      static_cast<void>(store->Execute("m4",
                                       [&](idem::Attempt& attempt) -> idem::Result<std::string> {
                                         static_cast<void>(attempt.Put("balances", "alice", "0"));
                                         throw std::runtime_error("boom");
                                       })),
      std::runtime_error);
  EXPECT_EQ(ValueOf(*store, "balances", "alice"), (TableValue{"15", 2}));

  // Outside Execute there is nothing to stage into.
  idem::Attempt loose;
  EXPECT_CODE(loose.Read("balances", "alice").status(), kInvalidArgument);
  EXPECT_CODE(loose.Put("balances", "alice", "1"), kInvalidArgument);
}

// A conflict runs fn again on fresh reads, in the same claim; past conflict_retries, Execute
// records a retryable failure and returns kConflict, and the next Execute runs it again.
TEST(Tables, ExecuteRunsFnAgainOnAConflictAndGivesUpAfterConflictRetries) {
  TempDir dir;
  for (const int retries : {8, 0}) {
    idem::Options options = TestOptions();
    options.conflict_retries = retries;
    IDEM_ASSERT_OPEN(store, dir.StorePath() + std::to_string(retries), options);
    int runs = 0;
    const std::string message = "m";
    auto execution =
        store->Execute(message, [&](idem::Attempt& attempt) -> idem::Result<std::string> {
          ++runs;
          IDEM_ASSIGN_OR_RETURN(TableValue balance, attempt.Read("balances", "alice"));
          if (runs == 1) {
            // Another request commits to the same balance while this one runs.
            IDEM_ASSIGN_OR_RETURN(auto other, store->Begin("other"));
            WriteSet writes;
            writes.Put("balances", "alice", "100");
            IDEM_RETURN_IF_ERROR(store->Complete("other", other.token, "ok", writes));
          }
          const int next = std::stoi(balance.value.value_or("0")) + 1;
          IDEM_RETURN_IF_ERROR(attempt.Put("balances", "alice", std::to_string(next)));
          return std::to_string(next);
        });
    if (retries == 0) {
      EXPECT_CODE(execution.status(), kConflict);
      EXPECT_NE(execution.status().message().find("fn ran 1 times"), std::string::npos)
          << execution.status().message();
      EXPECT_EQ(runs, 1);
      EXPECT_EQ(ValueOf(*store, "balances", "alice"), (TableValue{"100", 1}));
      ASSERT_OK_AND_ASSIGN(auto record, store->Get(message));
      EXPECT_EQ(record->state, idem::State::kFailed);
      EXPECT_TRUE(idem::IsRetryable(execution.status()));
      // The next Execute acquires it again and, unopposed, commits.
      runs = 1;  // no other request this time
      ASSERT_OK_AND_ASSIGN(
          auto again,
          store->Execute(message, [&](idem::Attempt& attempt) -> idem::Result<std::string> {
            IDEM_ASSIGN_OR_RETURN(TableValue balance, attempt.Read("balances", "alice"));
            const int next = std::stoi(balance.value.value_or("0")) + 1;
            IDEM_RETURN_IF_ERROR(attempt.Put("balances", "alice", std::to_string(next)));
            return std::to_string(next);
          }));
      EXPECT_EQ(again.result, "101");
    } else {
      ASSERT_OK(execution.status());
      EXPECT_EQ(runs, 2);
      EXPECT_EQ(execution->result, "101");
      EXPECT_EQ(execution->attempts, 1u);  // the same attempt, run again
      EXPECT_EQ(ValueOf(*store, "balances", "alice"), (TableValue{"101", 2}));
    }
  }
}

// 8 threads Execute distinct messages that each add 1 to one of 3 shared balances: conflicts
// are run again, and every message is counted exactly once.
TEST(Tables, RacingExecutesOnSharedBalancesCountEveryMessageOnce) {
  TempDir dir;
  idem::Options options = TestOptions();
  options.conflict_retries = 1000;  // 8 threads on 3 keys: conflicts are the point here
  IDEM_ASSERT_OPEN(store, dir.StorePath(), options);
  constexpr int kThreads = 8;
  constexpr int kMessages = 50;
  std::atomic<int> runs{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int m = 0; m < kMessages; ++m) {
        const std::string account = "acct" + std::to_string((t + m) % 3);
        auto execution = store->Execute(
            "t" + std::to_string(t) + "-m" + std::to_string(m),
            [&](idem::Attempt& attempt) -> idem::Result<std::string> {
              ++runs;
              IDEM_ASSIGN_OR_RETURN(TableValue balance, attempt.Read("balances", account));
              IDEM_RETURN_IF_ERROR(attempt.Put(
                  "balances", account, std::to_string(std::stoi(balance.value.value_or("0")) + 1)));
              return std::string("ok");
            });
        ASSERT_TRUE(execution.ok()) << execution.status().ToString();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  int sum = 0;
  for (int a = 0; a < 3; ++a) {
    sum += std::stoi(ValueOf(*store, "balances", "acct" + std::to_string(a)).value.value_or("0"));
  }
  EXPECT_EQ(sum, kThreads * kMessages);
  std::cout << runs.load() - kThreads * kMessages << " runs again after conflicts\n";
}

// SIGKILL at random moments while a child adds messages to a balance through Execute: after
// each kill the balance is exactly the sum of the messages whose records are done, each of which
// is in the log table, every acknowledged one among them; the child then resends from its last
// acknowledged message (the unacknowledged one included), and nothing is counted twice.
TEST(Tables, StateAndRecordSurviveSigkillTogether) {
  TempDir dir;
  std::mt19937 random(std::random_device{}());
  int next = 1;  // the first message the next child sends
  for (int round = 0; round < 6; ++round) {
    int pipe_fds[2];
    ASSERT_EQ(pipe(pipe_fds), 0);
    const pid_t child = fork();
    if (child == 0) {
      close(pipe_fds[0]);
      auto store = idem::Store::Open(dir.StorePath(), TestOptions());
      if (!store.ok()) _exit(10);
      for (int m = next;; ++m) {
        auto execution = (*store)->Execute(
            "m" + std::to_string(m), [&](idem::Attempt& attempt) -> idem::Result<std::string> {
              IDEM_ASSIGN_OR_RETURN(TableValue balance, attempt.Read("balances", "alice"));
              IDEM_RETURN_IF_ERROR(
                  attempt.Put("balances", "alice",
                              std::to_string(std::stoll(balance.value.value_or("0")) + m)));
              IDEM_RETURN_IF_ERROR(attempt.Put("log", "m" + std::to_string(m), "added"));
              return std::string("ok");
            });
        if (!execution.ok()) _exit(11);
        if (write(pipe_fds[1], &m, sizeof m) != sizeof m) _exit(12);
      }
    }
    close(pipe_fds[1]);
    const int acks_before_kill = std::uniform_int_distribution<int>(3, 40)(random);
    int acked = next - 1;
    for (int i = 0; i < acks_before_kill; ++i) {
      int m = 0;
      ASSERT_EQ(read(pipe_fds[0], &m, sizeof m), static_cast<ssize_t>(sizeof m));
      acked = m;
    }
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    close(pipe_fds[0]);

    // Checked in a child too: this process never opens the store, so that each child forks
    // from a process without a store's threads.
    const pid_t checker = fork();
    if (checker == 0) {
      auto store = idem::Store::Open(dir.StorePath(), TestOptions());
      if (!store.ok()) _exit(20);
      long long done_sum = 0;
      int done_count = 0;
      int bad = 0;
      const Status scanned = (*store)->Scan({}, [&](const idem::Record& record) {
        auto logged = (*store)->GetValue("log", record.key);
        if (!logged.ok()) bad = 21;
        if (record.state == idem::State::kDone) {
          done_sum += std::stoll(record.key.substr(1));
          ++done_count;
          if (logged.ok() && *logged != TableValue{"added", 1}) bad = 22;
        } else if (logged.ok() && *logged != TableValue{}) {
          bad = 23;  // killed between Begin and Complete, yet a write applied
        }
        return true;
      });
      if (!scanned.ok()) _exit(24);
      if (bad != 0) _exit(bad);
      auto balance = (*store)->GetValue("balances", "alice");
      if (!balance.ok()) _exit(25);
      if (std::stoll(balance->value.value_or("0")) != done_sum) _exit(26);
      if (balance->version != static_cast<uint64_t>(done_count)) _exit(27);
      if (done_count < acked) _exit(28);  // every acknowledged message, perhaps one more
      _exit(0);
    }
    int status = 0;
    waitpid(checker, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0) << "round " << round << ", acknowledged up to m" << acked;
    next = acked + 1;
  }
}

// A process that shares the store with its owner reads and writes tables through it: its
// Complete's writes travel with the Complete, conflicts come back as kConflict, and Execute
// stages and reruns as in the owner.
TEST(Tables, AProcessThatDoesNotOwnTheStoreWritesThroughTheOwner) {
  TempDir dir;
  const pid_t parent = getpid();
  // Gets the token of the parent's claim of m1.
  ChildAwaitingGo child([&](uint64_t token) {
    auto store = idem::Store::Open(dir.StorePath(), TestOptions());
    if (!store.ok()) return 10;
    auto counters = (*store)->GetOwnerCounters();
    if (!counters.ok() || counters->pid != parent) return 11;  // a client of the parent
    auto balance = (*store)->GetValue("balances", "alice");
    if (!balance.ok() || *balance != TableValue{"10", 1}) return 12;
    WriteSet stale;
    stale.Put("balances", "alice", "30", 0);
    if ((*store)->Complete("m1", token, "ok", stale).code() != Status::Code::kConflict) return 13;
    WriteSet writes;
    writes.Put("balances", "alice", "30", balance->version);
    writes.Delete("balances", "nobody");
    writes.Put("log", std::string("\0m1", 3), std::string("\xff", 1));
    if (!(*store)->Complete("m1", token, "ok", writes).ok()) return 14;
    auto execution =
        (*store)->Execute("m2", [&](idem::Attempt& attempt) -> idem::Result<std::string> {
          IDEM_ASSIGN_OR_RETURN(TableValue now, attempt.Read("balances", "alice"));
          IDEM_RETURN_IF_ERROR(attempt.Put("balances", "alice",
                                           std::to_string(std::stoi(now.value.value_or("0")) + 1)));
          return std::string("ok");
        });
    if (!execution.ok()) return 15;
    int seen = 0;
    const Status scanned =
        (*store)->ScanTable("balances", {}, [&](std::string_view key, const TableValue& value) {
          seen += key == "alice" && value == TableValue{"31", 3};
          return true;
        });
    if (!scanned.ok() || seen != 1) return 16;
    if ((*store)->GetValue("bad name", "k").status().code() != Status::Code::kInvalidArgument) {
      return 17;
    }
    auto tables = (*store)->ListTables();
    if (!tables.ok() || *tables != std::vector<std::string>{"balances", "log"}) return 18;
    return 0;
  });
  IDEM_ASSERT_OPEN(owner, dir.StorePath());
  ASSERT_OK_AND_ASSIGN(auto claim, owner->Begin("m1"));
  WriteSet opening;
  opening.Put("balances", "alice", "10");
  ASSERT_OK_AND_ASSIGN(auto first, owner->Begin("m0"));
  ASSERT_OK(owner->Complete("m0", first.token, "ok", opening));
  child.Go(claim.token);
  EXPECT_EQ(child.Wait(), 0);
  EXPECT_EQ(ValueOf(*owner, "balances", "alice"), (TableValue{"31", 3}));
  EXPECT_EQ(ValueOf(*owner, "balances", "nobody"), (TableValue{std::nullopt, 1}));
  EXPECT_EQ(ValueOf(*owner, "log", std::string("\0m1", 3)),
            (TableValue{std::string("\xff", 1), 1}));
  ASSERT_OK_AND_ASSIGN(auto record, owner->Get("m1"));
  EXPECT_EQ(record->state, idem::State::kDone);
}

// 8 threads in each of 2 processes (the owner and a process sharing the store through it) add 1
// to 10 shared balances through Execute, 50 messages a thread: conflicts are run again, across
// the processes too, and no update is lost.
TEST(Tables, EightThreadsInEachOfTwoProcessesLoseNoUpdate) {
  TempDir dir;
  constexpr int kThreads = 8;
  constexpr int kMessages = 50;
  constexpr int kBalances = 10;
  const auto add_all = [&](idem::Store& store, const std::string& process) {
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 random(static_cast<unsigned>(t) * 7919u + process.size());
        for (int m = 0; m < kMessages; ++m) {
          const std::string balance = "b" + std::to_string(random() % kBalances);
          auto execution = store.Execute(
              process + "-t" + std::to_string(t) + "-m" + std::to_string(m),
              [&](idem::Attempt& attempt) -> idem::Result<std::string> {
                IDEM_ASSIGN_OR_RETURN(TableValue now, attempt.Read("balances", balance));
                IDEM_RETURN_IF_ERROR(attempt.Put(
                    "balances", balance, std::to_string(std::stoi(now.value.value_or("0")) + 1)));
                return std::string("ok");
              });
          if (!execution.ok()) ++failures;
        }
      });
    }
    for (auto& thread : threads) thread.join();
    return failures.load();
  };
  idem::Options options = TestOptions();
  options.conflict_retries = 1000;  // 16 threads on 10 keys: conflicts are the point here
  ChildAwaitingGo child([&](uint64_t) {
    auto store = idem::Store::Open(dir.StorePath(), options);
    if (!store.ok()) return 10;
    return add_all(**store, "client") == 0 ? 0 : 11;
  });
  IDEM_ASSERT_OPEN(owner, dir.StorePath(), options);
  child.Go();
  EXPECT_EQ(add_all(*owner, "owner"), 0);
  EXPECT_EQ(child.Wait(), 0);
  int sum = 0;
  uint64_t versions = 0;
  for (int b = 0; b < kBalances; ++b) {
    const TableValue value = ValueOf(*owner, "balances", "b" + std::to_string(b));
    sum += std::stoi(value.value.value_or("0"));
    versions += value.version;
  }
  EXPECT_EQ(sum, 2 * kThreads * kMessages);
  EXPECT_EQ(versions, static_cast<uint64_t>(2 * kThreads * kMessages));  // one write a message
}

}  // namespace
