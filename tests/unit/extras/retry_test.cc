// Tests of idem/retry.h: backoff arithmetic, the retry loop with an injected sleep and random
// source, and RetryBegin / RetryExecute against a real store on a manual clock.

#include "idem/retry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/test_util.h"

namespace {

using namespace std::chrono_literals;
using idem::Outcome;
using idem::Result;
using idem::RetryHooks;
using idem::RetryPolicy;
using idem::Status;
using idem_test::ManualClock;
using idem_test::TestOptions;
using std::chrono::milliseconds;

using Code = Status::Code;

// Hooks that record the waits instead of sleeping, with a fixed "random" value.
struct FakeTime {
  std::vector<milliseconds> waits;
  std::vector<int> retried_attempts;
  double random = 0.5;

  RetryHooks Hooks() {
    return RetryHooks{
        .sleep = [this](milliseconds wait) { waits.push_back(wait); },
        .random01 = [this] { return random; },
        .on_retry = [this](int attempt, const Status&,
                           milliseconds) { retried_attempts.push_back(attempt); },
    };
  }
};

RetryPolicy NoJitter(int max_attempts = 5) {
  return RetryPolicy{.max_attempts = max_attempts,
                     .first_backoff = 100ms,
                     .multiplier = 2.0,
                     .max_backoff = 10s,
                     .full_jitter = false};
}

TEST(RetryPolicy, DefaultsAreDocumented) {
  const RetryPolicy policy;
  EXPECT_EQ(policy.max_attempts, 5);
  EXPECT_EQ(policy.first_backoff, 100ms);
  EXPECT_EQ(policy.multiplier, 2.0);
  EXPECT_EQ(policy.max_backoff, 10s);
  EXPECT_TRUE(policy.full_jitter);
  EXPECT_OK(idem::CheckRetryPolicy(policy));
}

TEST(RetryPolicy, BackoffGrowsByTheMultiplierUpToTheCap) {
  const RetryPolicy policy{.first_backoff = 100ms, .multiplier = 3.0, .max_backoff = 2s};
  EXPECT_EQ(idem::BackoffBefore(policy, 1), 100ms);
  EXPECT_EQ(idem::BackoffBefore(policy, 2), 300ms);
  EXPECT_EQ(idem::BackoffBefore(policy, 3), 900ms);
  EXPECT_EQ(idem::BackoffBefore(policy, 4), 2s);
  EXPECT_EQ(idem::BackoffBefore(policy, 5), 2s);
  // No overflow however many retries came before.
  EXPECT_EQ(idem::BackoffBefore(policy, 100000), 2s);
}

TEST(RetryPolicy, MultiplierOneRetriesAtAConstantInterval) {
  const RetryPolicy policy{.first_backoff = 40ms, .multiplier = 1.0};
  for (int retry = 1; retry < 10; ++retry) EXPECT_EQ(idem::BackoffBefore(policy, retry), 40ms);
}

TEST(RetryPolicy, FullJitterWaitsAFractionOfTheBackoff) {
  const RetryPolicy policy{.first_backoff = 100ms, .multiplier = 2.0, .max_backoff = 1s};
  EXPECT_EQ(idem::RetryDelay(policy, 1, 0.0), 0ms);
  EXPECT_EQ(idem::RetryDelay(policy, 1, 0.5), 50ms);
  EXPECT_EQ(idem::RetryDelay(policy, 3, 0.25), 100ms);
  EXPECT_LT(idem::RetryDelay(policy, 1, 0.9999), 100ms);
  // A hook returning 1.0 (outside [0, 1)) still never exceeds the backoff.
  EXPECT_EQ(idem::RetryDelay(policy, 1, 1.0), 100ms);
  EXPECT_EQ(idem::RetryDelay(policy, 10, 1.0), 1s);

  const RetryPolicy fixed{.first_backoff = 100ms, .full_jitter = false};
  EXPECT_EQ(idem::RetryDelay(fixed, 1, 0.0), 100ms);
  EXPECT_EQ(idem::RetryDelay(fixed, 2, 0.3), 200ms);
}

TEST(RetryPolicy, DefaultRandomSourceKeepsJitterWithinBounds) {
  const RetryPolicy policy{.max_attempts = 8, .first_backoff = 50ms, .max_backoff = 400ms};
  for (int round = 0; round < 50; ++round) {
    std::vector<milliseconds> waits;
    RetryHooks hooks{.sleep = [&](milliseconds wait) { waits.push_back(wait); }};
    Status last = idem::Retry(
        policy, [] { return Status::IOError("disk"); }, hooks);
    EXPECT_CODE(last, kIOError);
    ASSERT_EQ(waits.size(), 7u);
    for (size_t i = 0; i < waits.size(); ++i) {
      EXPECT_GE(waits[i], 0ms);
      EXPECT_LE(waits[i], idem::BackoffBefore(policy, static_cast<int>(i) + 1));
    }
  }
}

TEST(RetryPolicy, RejectsUnusablePolicies) {
  EXPECT_CODE(idem::CheckRetryPolicy({.max_attempts = 0}), kInvalidArgument);
  EXPECT_CODE(idem::CheckRetryPolicy({.first_backoff = -1ms}), kInvalidArgument);
  EXPECT_CODE(idem::CheckRetryPolicy({.multiplier = 0.5}), kInvalidArgument);
  EXPECT_CODE(idem::CheckRetryPolicy({.multiplier = std::nan("")}), kInvalidArgument);
  EXPECT_CODE(idem::CheckRetryPolicy({.max_backoff = -5ms}), kInvalidArgument);

  int calls = 0;
  Status status = idem::Retry(RetryPolicy{.max_attempts = 0}, [&] {
    ++calls;
    return Status::OK();
  });
  EXPECT_CODE(status, kInvalidArgument);
  EXPECT_NE(status.message().find("max_attempts"), std::string::npos) << status.ToString();
  EXPECT_EQ(calls, 0);
}

TEST(IsRetryable, ClassifiesEveryCode) {
  for (Code code : {Code::kIOError, Code::kUnavailable, Code::kTimedOut, Code::kBusy,
                    Code::kLeaseLost, Code::kInProgress}) {
    EXPECT_TRUE(idem::IsRetryable(Status(code, "x"))) << idem::CodeName(code);
  }
  for (Code code : {Code::kOk, Code::kInvalidArgument, Code::kNotFound, Code::kMismatch,
                    Code::kFailed, Code::kCorruption}) {
    EXPECT_FALSE(idem::IsRetryable(Status(code, "x"))) << idem::CodeName(code);
  }
}

TEST(Retry, RetriesRetryableErrorsWithTheBackoffSequence) {
  FakeTime time;
  int calls = 0;
  Status status = idem::Retry(
      NoJitter(),
      [&] {
        ++calls;
        return calls < 4 ? Status::Unavailable("owner restarting") : Status::OK();
      },
      time.Hooks());
  EXPECT_OK(status);
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(time.waits, (std::vector<milliseconds>{100ms, 200ms, 400ms}));
  EXPECT_EQ(time.retried_attempts, (std::vector<int>{1, 2, 3}));
}

TEST(Retry, StopsAfterMaxAttemptsAndReturnsTheLastError) {
  FakeTime time;
  int calls = 0;
  Status status = idem::Retry(
      NoJitter(3),
      [&] {
        ++calls;
        return Status::TimedOut("attempt " + std::to_string(calls));
      },
      time.Hooks());
  EXPECT_EQ(status, Status::TimedOut("attempt 3"));
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(time.waits.size(), 2u);
}

TEST(Retry, OneAttemptNeverWaits) {
  FakeTime time;
  int calls = 0;
  Status status = idem::Retry(
      NoJitter(1),
      [&] {
        ++calls;
        return Status::IOError("disk");
      },
      time.Hooks());
  EXPECT_CODE(status, kIOError);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(time.waits.empty());
}

TEST(Retry, CapsTheBackoff) {
  FakeTime time;
  RetryPolicy policy = NoJitter(6);
  policy.max_backoff = 250ms;
  Status status = idem::Retry(
      policy, [] { return Status::Busy("held"); }, time.Hooks());
  EXPECT_CODE(status, kBusy);
  EXPECT_EQ(time.waits, (std::vector<milliseconds>{100ms, 200ms, 250ms, 250ms, 250ms}));
}

TEST(Retry, AppliesTheJitterFromTheRandomSource) {
  FakeTime time;
  time.random = 0.25;
  RetryPolicy policy = NoJitter(4);
  policy.full_jitter = true;
  Status status = idem::Retry(
      policy, [] { return Status::LeaseLost("taken over"); }, time.Hooks());
  EXPECT_CODE(status, kLeaseLost);
  EXPECT_EQ(time.waits, (std::vector<milliseconds>{25ms, 50ms, 100ms}));
}

TEST(Retry, NeverRetriesErrorsThatWouldRepeat) {
  for (Status error : {Status::Mismatch("other payload"), Status::InvalidArgument("key is empty"),
                       Status::Corruption("bad bytes"), Status::Failed("card declined"),
                       Status::NotFound("no store")}) {
    FakeTime time;
    int calls = 0;
    Status status = idem::Retry(
        NoJitter(),
        [&] {
          ++calls;
          return error;
        },
        time.Hooks());
    EXPECT_EQ(status, error);
    EXPECT_EQ(calls, 1) << error.ToString();
    EXPECT_TRUE(time.waits.empty());
  }
}

TEST(Retry, ReturnsTheValueOfAResult) {
  FakeTime time;
  int calls = 0;
  Result<int> result = idem::Retry(
      NoJitter(),
      [&]() -> Result<int> {
        if (++calls < 2) return Status::IOError("flaky");
        return 42;
      },
      time.Hooks());
  ASSERT_OK(result.status());
  EXPECT_EQ(*result, 42);
  EXPECT_EQ(calls, 2);
}

// ---- Against a store ----

// Every test runs on each backend (backend.h).
class RetryStoreTest : public idem_test::OnEachBackend {
 protected:
  void SetUp() override {
    OnEachBackend::SetUp();
    if (IsSkipped()) return;
    clock_ = std::make_shared<ManualClock>();
    here_ = std::make_unique<idem_test::TestStore>(GetParam());
    store_ = here_->Open(Options());
    ASSERT_NE(store_, nullptr);
  }

  idem::Options Options() {
    idem::Options options = TestOptions(clock_);
    options.default_lease = 5s;
    options.execute_wait = 0ms;  // Execute reports kInProgress at once: the helper retries
    return options;
  }

  // Hooks whose sleep moves the store's clock.
  RetryHooks ClockHooks() {
    return RetryHooks{.sleep =
                          [this](milliseconds wait) {
                            waits_.push_back(wait);
                            clock_->Advance(wait);
                          },
                      .random01 = [] { return 0.5; },
                      .on_retry = {}};
  }

  std::unique_ptr<idem_test::TestStore> here_;
  std::shared_ptr<ManualClock> clock_;
  std::unique_ptr<idem::Store> store_;
  std::vector<milliseconds> waits_;
};

TEST_P(RetryStoreTest, RetryBeginWaitsRetryAfterThenTakesOver) {
  auto holder = store_->Begin("order-1");
  ASSERT_OK(holder.status());
  ASSERT_EQ(holder->outcome, Outcome::kAcquired);

  clock_->Advance(1s);
  auto claim = idem::RetryBegin(*store_, "order-1", {}, NoJitter(), ClockHooks());
  ASSERT_OK(claim.status());
  EXPECT_EQ(claim->outcome, Outcome::kAcquired);
  EXPECT_TRUE(claim->took_over);
  EXPECT_EQ(claim->record.attempts, 2u);
  // It waited the 4 s left on the holder's lease, not the 100 ms backoff.
  EXPECT_EQ(waits_, (std::vector<milliseconds>{4s}));
}

TEST_P(RetryStoreTest, RetryBeginReturnsTheLastInProgressClaimWhenAttemptsRunOut) {
  ASSERT_OK(store_->Begin("order-1").status());
  FakeTime time;  // does not move the clock: the lease stays live
  auto claim = idem::RetryBegin(*store_, "order-1", {}, NoJitter(3), time.Hooks());
  ASSERT_OK(claim.status());
  EXPECT_EQ(claim->outcome, Outcome::kInProgress);
  EXPECT_EQ(time.waits, (std::vector<milliseconds>{5s, 5s}));
}

TEST_P(RetryStoreTest, RetryBeginReturnsReplayAndErrorsAtOnce) {
  auto first = store_->Begin("order-1");
  ASSERT_OK(first.status());
  ASSERT_OK(store_->Complete("order-1", first->token, "receipt"));
  FakeTime time;
  auto replay = idem::RetryBegin(*store_, "order-1", {}, NoJitter(), time.Hooks());
  ASSERT_OK(replay.status());
  EXPECT_EQ(replay->outcome, Outcome::kReplay);
  EXPECT_EQ(replay->record.result, "receipt");

  auto empty = idem::RetryBegin(*store_, "", {}, NoJitter(), time.Hooks());
  EXPECT_CODE(empty.status(), kInvalidArgument);
  EXPECT_TRUE(time.waits.empty());
}

TEST_P(RetryStoreTest, RetryExecuteRunsTheOperationAgainAfterARetryableFailure) {
  int runs = 0;
  std::vector<uint32_t> attempts_seen;
  auto execution = idem::RetryExecute(
      *store_, "pay-1", {.type = "pay"}, NoJitter(),
      [&](idem::Attempt& attempt) -> Result<std::string> {
        attempts_seen.push_back(attempt.attempts);
        if (++runs < 3) return Status::Unavailable("bank timeout");
        return std::string("charged");
      },
      ClockHooks());
  ASSERT_OK(execution.status());
  EXPECT_EQ(execution->result, "charged");
  EXPECT_FALSE(execution->replayed);
  EXPECT_EQ(execution->attempts, 3u);
  EXPECT_EQ(attempts_seen, (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_EQ(waits_, (std::vector<milliseconds>{100ms, 200ms}));

  // A later retry of the same request replays.
  auto replay = idem::RetryExecute(
      *store_, "pay-1", {.type = "pay"}, NoJitter(),
      [&](idem::Attempt&) -> Result<std::string> {
        ADD_FAILURE() << "ran again";
        return std::string("twice");
      },
      ClockHooks());
  ASSERT_OK(replay.status());
  EXPECT_TRUE(replay->replayed);
  EXPECT_EQ(replay->result, "charged");
}

TEST_P(RetryStoreTest, RetryExecuteRetriesAnyErrorTheOperationRecordedAsRetryable) {
  // kInvalidArgument is not retryable when the store says it, but an operation's own error is
  // recorded as a retryable failure, so the next attempt runs it again.
  int runs = 0;
  auto execution = idem::RetryExecute(
      *store_, "pay-1", {}, NoJitter(),
      [&](idem::Attempt&) -> Result<std::string> {
        if (++runs == 1) return Status::InvalidArgument("upstream said 400, try again");
        return std::string("ok");
      },
      ClockHooks());
  ASSERT_OK(execution.status());
  EXPECT_EQ(runs, 2);
}

TEST_P(RetryStoreTest, RetryExecuteGivesUpAfterMaxAttempts) {
  int runs = 0;
  auto execution = idem::RetryExecute(
      *store_, "pay-1", {}, NoJitter(3),
      [&](idem::Attempt&) -> Result<std::string> {
        ++runs;
        return Status::IOError("bank down");
      },
      ClockHooks());
  EXPECT_EQ(execution.status(), Status::IOError("bank down"));
  EXPECT_EQ(runs, 3);
  auto record = store_->Get("pay-1");
  ASSERT_OK(record.status());
  ASSERT_TRUE(record->has_value());
  EXPECT_EQ((*record)->state, idem::State::kFailed);
  EXPECT_TRUE((*record)->retryable);
}

TEST_P(RetryStoreTest, RetryExecuteNeverRetriesATerminalFailure) {
  int runs = 0;
  auto op = [&](idem::Attempt&) -> Result<std::string> {
    ++runs;
    return idem::Terminal("card declined");
  };
  auto first = idem::RetryExecute(*store_, "pay-1", {}, NoJitter(), op, ClockHooks());
  EXPECT_EQ(first.status(), Status::Failed("card declined"));
  auto again = idem::RetryExecute(*store_, "pay-1", {}, NoJitter(), op, ClockHooks());
  EXPECT_EQ(again.status(), Status::Failed("card declined"));
  EXPECT_EQ(runs, 1);
  EXPECT_TRUE(waits_.empty());
}

TEST_P(RetryStoreTest, RetryExecuteNeverRetriesAMismatch) {
  auto first =
      store_->Execute("pay-1", {.fingerprint = "aaaa"},
                      [](idem::Attempt&) -> Result<std::string> { return std::string("one"); });
  ASSERT_OK(first.status());
  int runs = 0;
  auto second = idem::RetryExecute(
      *store_, "pay-1", {.fingerprint = "bbbb"}, NoJitter(),
      [&](idem::Attempt&) -> Result<std::string> {
        ++runs;
        return std::string("two");
      },
      ClockHooks());
  EXPECT_CODE(second.status(), kMismatch);
  EXPECT_EQ(runs, 0);
  EXPECT_TRUE(waits_.empty());
}

TEST_P(RetryStoreTest, RetryExecuteWaitsForTheOtherOwnerInsteadOfRunningAgain) {
  auto holder = store_->Begin("pay-1");
  ASSERT_OK(holder.status());
  int runs = 0;
  int sleeps = 0;
  RetryHooks hooks{.sleep =
                       [&](milliseconds wait) {
                         waits_.push_back(wait);
                         // The other owner finishes while this caller waits.
                         if (++sleeps == 2) {
                           EXPECT_OK(store_->Complete("pay-1", holder->token, "theirs"));
                         }
                       },
                   .random01 = {},
                   .on_retry = {}};
  auto execution = idem::RetryExecute(
      *store_, "pay-1", {}, NoJitter(),
      [&](idem::Attempt&) -> Result<std::string> {
        ++runs;
        return std::string("mine");
      },
      hooks);
  ASSERT_OK(execution.status());
  EXPECT_EQ(execution->result, "theirs");
  EXPECT_TRUE(execution->replayed);
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(waits_, (std::vector<milliseconds>{100ms, 200ms}));
}

TEST_P(RetryStoreTest, RetryExecuteDoesNotRetryAnException) {
  int runs = 0;
  EXPECT_THROW(static_cast<void>(idem::RetryExecute(
                   *store_, "pay-1", {}, NoJitter(),
                   [&](idem::Attempt&) -> Result<std::string> {
                     ++runs;
                     throw std::runtime_error("bug");
                   },
                   ClockHooks())),
               std::runtime_error);
  EXPECT_EQ(runs, 1);
  EXPECT_TRUE(waits_.empty());
}

TEST_P(RetryStoreTest, RetryExecuteReportsAnEmptyKeyWithoutRetrying) {
  auto execution = idem::RetryExecute(
      *store_, "", {}, NoJitter(),
      [](idem::Attempt&) -> Result<std::string> { return std::string("x"); }, ClockHooks());
  EXPECT_CODE(execution.status(), kInvalidArgument);
  EXPECT_TRUE(waits_.empty());
}

IDEM_ON_EACH_BACKEND(RetryStoreTest);

}  // namespace
