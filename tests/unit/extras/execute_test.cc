// Tests of Store::Execute: runs once then replays, records errors and exceptions, takes over
// with the checkpoint, renews the lease while the function runs, waits for another owner.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "idem/idem.h"
#include "support/test_util.h"

namespace {

using namespace std::chrono_literals;
using idem::Outcome;
using idem::State;
using idem_test::ClockedStore;
using idem_test::NewStoreLocation;
using idem_test::TempDir;
using idem_test::TestOptions;

// ---- Execute ---------------------------------------------------------------------------------

// Every test runs on each backend (backend.h).
class Execute : public idem_test::OnEachBackend {};

TEST_P(Execute, RunsOnceAndThenReplays) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  int runs = 0;
  auto fn = [&](idem::Attempt& attempt) -> idem::Result<std::string> {
    ++runs;
    EXPECT_GT(attempt.token, 0u);
    EXPECT_FALSE(attempt.took_over);
    EXPECT_EQ(attempt.attempts, 1u);
    EXPECT_EQ(attempt.checkpoint, "");
    EXPECT_EQ(attempt.key, "k");
    return std::string("charged");
  };
  ASSERT_OK_AND_ASSIGN(auto first, s.store->Execute("k", {.type = "pay"}, fn));
  EXPECT_EQ(first.result, "charged");
  EXPECT_FALSE(first.replayed);
  EXPECT_EQ(first.attempts, 1u);
  EXPECT_EQ(runs, 1);

  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->state, State::kDone);
  EXPECT_EQ(got->result, "charged");
  EXPECT_EQ(got->type, "pay");

  ASSERT_OK_AND_ASSIGN(auto second, s.store->Execute("k", fn));
  EXPECT_EQ(second.result, "charged");
  EXPECT_TRUE(second.replayed);
  EXPECT_EQ(second.attempts, 1u);
  EXPECT_EQ(runs, 1);
}

TEST_P(Execute, AcceptsAFunctionReturningAString) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto execution,
                       s.store->Execute("k", [](idem::Attempt&) { return std::string("plain"); }));
  EXPECT_EQ(execution.result, "plain");
}

TEST_P(Execute, RecordsARetryableErrorAndRunsAgain) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  int runs = 0;
  auto first = s.store->Execute("k", {}, [&](idem::Attempt&) -> idem::Result<std::string> {
    ++runs;
    return idem::Status::IOError("bank unreachable");
  });
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), idem::Status::Code::kIOError) << first.status().ToString();
  EXPECT_EQ(runs, 1);
  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->state, State::kFailed);
  EXPECT_TRUE(got->retryable);
  EXPECT_NE(got->result.find("bank unreachable"), std::string::npos) << got->result;

  ASSERT_OK_AND_ASSIGN(
      auto second,
      s.store->Execute("k", {}, [&](idem::Attempt& attempt) -> idem::Result<std::string> {
        ++runs;
        EXPECT_EQ(attempt.attempts, 2u);
        EXPECT_FALSE(attempt.took_over);
        return std::string("ok");
      }));
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(second.result, "ok");
  EXPECT_FALSE(second.replayed);
  EXPECT_EQ(second.attempts, 2u);
}

// kConflict from fn (its own optimistic check failed) runs it again in the same claim, as a
// conflict of its staged writes does; past Options::conflict_retries it is recorded as a
// retryable failure and returned.
TEST_P(Execute, RunsFnAgainWhenItReturnsAConflict) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  int runs = 0;
  ASSERT_OK_AND_ASSIGN(
      auto done,
      s.store->Execute("k", {}, [&](idem::Attempt& attempt) -> idem::Result<std::string> {
        ++runs;
        EXPECT_EQ(attempt.attempts, 1u);  // the same claim each time
        if (runs < 3) return idem::Status::Conflict("the order moved on meanwhile");
        return std::string("ok");
      }));
  EXPECT_EQ(runs, 3);
  EXPECT_EQ(done.result, "ok");

  runs = 0;
  auto gave_up = s.store->Execute("k2", {}, [&](idem::Attempt&) -> idem::Result<std::string> {
    ++runs;
    return idem::Status::Conflict("the order moved on meanwhile");
  });
  EXPECT_CODE(gave_up.status(), kConflict);
  EXPECT_EQ(runs, s.store->options().conflict_retries + 1);
  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k2"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->state, State::kFailed);
  EXPECT_TRUE(got->retryable);
}

TEST_P(Execute, RecordsATerminalErrorAsFinal) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  int runs = 0;
  auto fn = [&](idem::Attempt&) -> idem::Result<std::string> {
    ++runs;
    return idem::Terminal("card declined");
  };
  auto first = s.store->Execute("k", {}, fn);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), idem::Status::Code::kFailed) << first.status().ToString();
  EXPECT_NE(first.status().message().find("card declined"), std::string::npos);
  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->state, State::kFailed);
  EXPECT_FALSE(got->retryable);
  EXPECT_EQ(got->result, "card declined");

  auto second = s.store->Execute("k", {}, fn);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), idem::Status::Code::kFailed) << second.status().ToString();
  EXPECT_NE(second.status().message().find("card declined"), std::string::npos)
      << second.status().ToString();
  EXPECT_EQ(runs, 1);
}

TEST_P(Execute, RecordsAnExceptionAndRethrowsIt) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  int runs = 0;
  EXPECT_THROW((void)s.store->Execute("k", {},
                                      [&](idem::Attempt& attempt) -> idem::Result<std::string> {
                                        ++runs;
                                        EXPECT_OK(attempt.SaveCheckpoint("half-way"));
                                        throw std::runtime_error("boom");
                                      }),
               std::runtime_error);
  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->state, State::kFailed);
  EXPECT_TRUE(got->retryable);
  EXPECT_EQ(got->checkpoint, "half-way");

  // The next attempt runs, sees the checkpoint, and is not a takeover (the failure was recorded).
  ASSERT_OK_AND_ASSIGN(
      auto second,
      s.store->Execute("k", {}, [&](idem::Attempt& attempt) -> idem::Result<std::string> {
        ++runs;
        EXPECT_EQ(attempt.checkpoint, "half-way");
        EXPECT_FALSE(attempt.took_over);
        EXPECT_EQ(attempt.attempts, 2u);
        return std::string("finished");
      }));
  EXPECT_EQ(second.result, "finished");
  EXPECT_EQ(runs, 2);
}

TEST_P(Execute, ReportsAFingerprintMismatch) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  const std::string a = idem::Fingerprint("a");
  const std::string b = idem::Fingerprint("b");
  ASSERT_OK_AND_ASSIGN(
      auto first,
      s.store->Execute("k", {.fingerprint = a}, [](idem::Attempt&) -> idem::Result<std::string> {
        return std::string("r");
      }));
  bool ran = false;
  auto second =
      s.store->Execute("k", {.fingerprint = b}, [&](idem::Attempt&) -> idem::Result<std::string> {
        ran = true;
        return std::string("r2");
      });
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), idem::Status::Code::kMismatch) << second.status().ToString();
  EXPECT_FALSE(ran);
}

TEST_P(Execute, TakesOverAnAbandonedAttemptWithItsCheckpoint) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto abandoned, s.store->Begin("k", {.lease = 1s}));
  ASSERT_OK(s.store->SaveCheckpoint("k", abandoned.token, "sent-to-bank"));
  s.clock->Advance(2s);
  ASSERT_OK_AND_ASSIGN(
      auto execution,
      s.store->Execute("k", {}, [&](idem::Attempt& attempt) -> idem::Result<std::string> {
        EXPECT_TRUE(attempt.took_over);
        EXPECT_EQ(attempt.checkpoint, "sent-to-bank");
        EXPECT_GT(attempt.token, abandoned.token);
        EXPECT_EQ(attempt.attempts, 2u);
        return std::string("reconciled");
      }));
  EXPECT_EQ(execution.result, "reconciled");
  EXPECT_EQ(execution.attempts, 2u);
  EXPECT_CODE(s.store->Complete("k", abandoned.token, "stale"), kLeaseLost);
}

TEST_P(Execute, SavesCheckpointsThroughTheAttempt) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(
      auto execution,
      s.store->Execute("k", {}, [&](idem::Attempt& attempt) -> idem::Result<std::string> {
        EXPECT_OK(attempt.SaveCheckpoint("one"));
        auto got = s.store->Get("k");
        EXPECT_TRUE(got.ok() && got->has_value() && (*got)->checkpoint == "one");
        return std::string("done");
      }));
  EXPECT_EQ(execution.result, "done");
}

TEST_P(Execute, RenewsTheLeaseWhileTheFunctionRuns) {
  TempDir dir;
  idem::Options options = TestOptions();  // the real clock
  // Renewed every 300 ms: a renewal must be late by 600 ms for the lease to pass, which a busy
  // shared machine can cause with a shorter lease (seen with 300 ms: a renewal 200 ms late).
  options.default_lease = 900ms;
  const std::string location = NewStoreLocation(GetParam(), dir.StorePath(), &options);
  IDEM_ASSERT_OPEN(store, location, options);

  std::atomic<bool> started{false};
  std::atomic<bool> finished{false};
  std::atomic<int> acquired{0};
  std::atomic<int> probes{0};
  std::thread prober([&] {
    while (!started.load()) std::this_thread::sleep_for(1ms);
    while (!finished.load()) {
      auto claim = store->Begin("slow");
      if (!claim.ok()) {
        ADD_FAILURE() << claim.status().ToString();
        break;
      }
      if (claim->outcome == Outcome::kAcquired) {
        acquired.fetch_add(1);
        break;
      }
      if (claim->outcome == Outcome::kReplay) break;  // Execute has completed
      if (claim->outcome != Outcome::kInProgress) {
        ADD_FAILURE() << "unexpected outcome " << idem::OutcomeName(claim->outcome);
        break;
      }
      probes.fetch_add(1);
      std::this_thread::sleep_for(20ms);
    }
  });
  auto execution = store->Execute("slow", {}, [&](idem::Attempt&) -> idem::Result<std::string> {
    started.store(true);
    std::this_thread::sleep_for(2700ms);  // three leases
    return std::string("slow result");
  });
  finished.store(true);
  prober.join();
  ASSERT_TRUE(execution.ok()) << execution.status().ToString();
  EXPECT_EQ(execution->result, "slow result");
  EXPECT_FALSE(execution->replayed);
  EXPECT_EQ(acquired.load(), 0) << "the lease was taken over while its function ran";
  EXPECT_GT(probes.load(), 10);
  ASSERT_OK_AND_ASSIGN(auto got, store->Get("slow"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->state, State::kDone);
  EXPECT_EQ(got->attempts, 1u);
}

TEST_P(Execute, WaitsForAnotherOwnerAndReturnsItsResult) {
  TempDir dir;
  idem::Options options = TestOptions();
  const std::string location = NewStoreLocation(GetParam(), dir.StorePath(), &options);
  IDEM_ASSERT_OPEN(store, location, options);
  std::atomic<bool> started{false};
  std::thread owner([&] {
    auto execution = store->Execute("k", {}, [&](idem::Attempt&) -> idem::Result<std::string> {
      started.store(true);
      std::this_thread::sleep_for(400ms);
      return std::string("owner's result");
    });
    EXPECT_TRUE(execution.ok()) << execution.status().ToString();
  });
  while (!started.load()) std::this_thread::sleep_for(1ms);
  bool ran = false;
  auto waiter = store->Execute("k", {}, [&](idem::Attempt&) -> idem::Result<std::string> {
    ran = true;
    return std::string("waiter's result");
  });
  owner.join();
  ASSERT_TRUE(waiter.ok()) << waiter.status().ToString();
  EXPECT_FALSE(ran);
  EXPECT_TRUE(waiter->replayed);
  EXPECT_EQ(waiter->result, "owner's result");
}

TEST_P(Execute, GivesUpWaitingAfterExecuteWait) {
  TempDir dir;
  idem::Options options = TestOptions();
  options.execute_wait = 300ms;
  const std::string location = NewStoreLocation(GetParam(), dir.StorePath(), &options);
  IDEM_ASSERT_OPEN(store, location, options);
  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("k", {.lease = 1h}));
  ASSERT_EQ(claim.outcome, Outcome::kAcquired);
  bool ran = false;
  const auto start = std::chrono::steady_clock::now();
  auto execution = store->Execute("k", {}, [&](idem::Attempt&) -> idem::Result<std::string> {
    ran = true;
    return std::string("x");
  });
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(execution.ok());
  EXPECT_EQ(execution.status().code(), idem::Status::Code::kInProgress)
      << execution.status().ToString();
  EXPECT_FALSE(ran);
  EXPECT_GE(waited, 250ms);
  EXPECT_LT(waited, 5s);
}

TEST_P(Execute, ReturnsATerminalFailureLeftByBegin) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin("k"));
  ASSERT_OK(s.store->Fail("k", claim.token, "insufficient funds", idem::Failure::kTerminal));
  bool ran = false;
  auto execution = s.store->Execute("k", {}, [&](idem::Attempt&) -> idem::Result<std::string> {
    ran = true;
    return std::string("x");
  });
  ASSERT_FALSE(execution.ok());
  EXPECT_EQ(execution.status().code(), idem::Status::Code::kFailed);
  EXPECT_NE(execution.status().message().find("insufficient funds"), std::string::npos)
      << execution.status().ToString();
  EXPECT_FALSE(ran);
}

IDEM_ON_EACH_BACKEND(Execute);

}  // namespace
