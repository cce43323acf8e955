// Tests of idem::Store through its public API: the Begin state machine, the fencing of
// Complete/Fail/Extend/SaveCheckpoint, tokens, checkpoints, retention and purge, reopening,
// sharing one directory between handles, and Execute.

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
#include "test_util.h"

namespace {

using namespace std::chrono_literals;
using idem::BeginOptions;
using idem::Outcome;
using idem::Record;
using idem::State;
using idem_test::ManualClock;
using idem_test::TempDir;
using idem_test::TestOptions;
using idem_test::WithoutHolder;

// A store on a manual clock, for the state machine tests.
struct ClockedStore {
  TempDir dir;
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  std::unique_ptr<idem::Store> store;

  explicit ClockedStore(idem::Options options = TestOptions()) {
    options.clock = clock;
    store = idem_test::OpenStore(dir.StorePath(), options);
  }
  idem::Options Opts() const { return TestOptions(clock); }
};

std::vector<std::string> ScanKeys(idem::Store& store, const idem::ScanOptions& options = {}) {
  std::vector<std::string> keys;
  const idem::Status status = store.Scan(options, [&](const Record& record) {
    keys.push_back(record.key);
    return true;
  });
  EXPECT_TRUE(status.ok()) << status.ToString();
  return keys;
}

// ---- Begin: the state machine ----------------------------------------------------------------

TEST(Store, AcquiresANewKey) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  const auto now = s.clock->Now();
  ASSERT_OK_AND_ASSIGN(auto claim,
                       s.store->Begin("order-1", {.type = "pay", .lease = 5s, .retention = 1h}));
  EXPECT_EQ(claim.outcome, Outcome::kAcquired);
  EXPECT_GT(claim.token, 0u);
  EXPECT_FALSE(claim.took_over);
  EXPECT_EQ(claim.record.key, "order-1");
  EXPECT_EQ(claim.record.type, "pay");
  EXPECT_EQ(claim.record.state, State::kPending);
  EXPECT_FALSE(claim.record.timed_out);
  EXPECT_EQ(claim.record.token, claim.token);
  EXPECT_EQ(claim.record.attempts, 1u);
  EXPECT_EQ(claim.record.result, "");
  EXPECT_EQ(claim.record.checkpoint, "");
  EXPECT_EQ(claim.record.created, now);
  EXPECT_EQ(claim.record.updated, now);
  EXPECT_EQ(claim.record.lease_deadline, now + 5s);
  EXPECT_EQ(claim.record.expires, now + 1h);

  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("order-1"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(WithoutHolder(*got), WithoutHolder(claim.record));
}

TEST(Store, GetReturnsTheHolderBeginStored) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin("k"));
  ASSERT_EQ(claim.outcome, Outcome::kAcquired);
  EXPECT_EQ(claim.record.holder.pid, static_cast<uint32_t>(::getpid()));
  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->holder, claim.record.holder);
  EXPECT_EQ(*got, claim.record);
}

TEST(Store, UsesDefaultLeaseAndRetention) {
  idem::Options options = TestOptions();
  options.default_lease = 7s;
  options.default_retention = 3h;
  ClockedStore s(options);
  ASSERT_NE(s.store, nullptr);
  const auto now = s.clock->Now();
  ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin("k"));
  ASSERT_EQ(claim.outcome, Outcome::kAcquired);
  EXPECT_EQ(claim.record.lease_deadline, now + 7s);
  EXPECT_EQ(claim.record.expires, now + 3h);
}

TEST(Store, ReportsInProgressWhileTheLeaseIsLive) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto first, s.store->Begin("k", {.lease = 10s}));
  ASSERT_EQ(first.outcome, Outcome::kAcquired);
  s.clock->Advance(3s);

  ASSERT_OK_AND_ASSIGN(auto second, s.store->Begin("k", {.lease = 10s}));
  EXPECT_EQ(second.outcome, Outcome::kInProgress);
  EXPECT_GE(second.retry_after, 6999ms);
  EXPECT_LE(second.retry_after, 7000ms);
  EXPECT_EQ(second.record.token, first.token);
  EXPECT_EQ(second.record.attempts, 1u);
  EXPECT_FALSE(second.record.timed_out);

  // Nothing was stored.
  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(WithoutHolder(*got), WithoutHolder(first.record));
}

TEST(Store, TakesOverAnExpiredLease) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto first, s.store->Begin("k", {.lease = 1s}));
  ASSERT_EQ(first.outcome, Outcome::kAcquired);

  s.clock->Advance(999ms);
  ASSERT_OK_AND_ASSIGN(auto before, s.store->Get("k"));
  ASSERT_TRUE(before.has_value());
  EXPECT_FALSE(before->timed_out);

  s.clock->Advance(2s);
  ASSERT_OK_AND_ASSIGN(auto expired, s.store->Get("k"));
  ASSERT_TRUE(expired.has_value());
  EXPECT_EQ(expired->state, State::kPending);
  EXPECT_TRUE(expired->timed_out);
  EXPECT_EQ(idem::DisplayState(*expired), "timeout");

  const auto now = s.clock->Now();
  ASSERT_OK_AND_ASSIGN(auto second, s.store->Begin("k", {.lease = 4s}));
  EXPECT_EQ(second.outcome, Outcome::kAcquired);
  EXPECT_TRUE(second.took_over);
  EXPECT_GT(second.token, first.token);
  EXPECT_EQ(second.record.token, second.token);
  EXPECT_EQ(second.record.attempts, 2u);
  EXPECT_EQ(second.record.state, State::kPending);
  EXPECT_FALSE(second.record.timed_out);
  EXPECT_EQ(second.record.lease_deadline, now + 4s);
  EXPECT_EQ(second.record.created, first.record.created);
}

TEST(Store, ReplaysADoneRecord) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto first, s.store->Begin("k", {.type = "pay"}));
  ASSERT_EQ(first.outcome, Outcome::kAcquired);
  s.clock->Advance(1s);
  ASSERT_OK(s.store->Complete("k", first.token, "receipt-42"));

  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->state, State::kDone);
  EXPECT_EQ(got->result, "receipt-42");
  EXPECT_EQ(got->token, first.token);
  EXPECT_EQ(got->updated, first.record.created + 1s);
  EXPECT_EQ(idem::DisplayState(*got), "done");

  // Long after the lease: still a replay, never a takeover.
  s.clock->Advance(24h);
  ASSERT_OK_AND_ASSIGN(auto replay, s.store->Begin("k", {.type = "pay"}));
  EXPECT_EQ(replay.outcome, Outcome::kReplay);
  EXPECT_EQ(replay.record.result, "receipt-42");
  EXPECT_EQ(replay.record.state, State::kDone);
  EXPECT_EQ(replay.record.attempts, 1u);
  EXPECT_FALSE(replay.record.timed_out);
}

TEST(Store, ReacquiresARetryableFailure) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto first, s.store->Begin("k"));
  ASSERT_EQ(first.outcome, Outcome::kAcquired);
  ASSERT_OK(s.store->Fail("k", first.token, "connection reset", idem::Failure::kRetryable));

  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->state, State::kFailed);
  EXPECT_TRUE(got->retryable);
  EXPECT_EQ(got->result, "connection reset");

  ASSERT_OK_AND_ASSIGN(auto second, s.store->Begin("k"));
  EXPECT_EQ(second.outcome, Outcome::kAcquired);
  EXPECT_FALSE(second.took_over);
  EXPECT_GT(second.token, first.token);
  EXPECT_EQ(second.record.state, State::kPending);
  EXPECT_EQ(second.record.attempts, 2u);
  ASSERT_OK(s.store->Complete("k", second.token, "ok"));
}

TEST(Store, FailsADefaultKindFailureRetryably) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto first, s.store->Begin("k"));
  ASSERT_OK(s.store->Fail("k", first.token, "oops"));
  ASSERT_OK_AND_ASSIGN(auto second, s.store->Begin("k"));
  EXPECT_EQ(second.outcome, Outcome::kAcquired);
}

TEST(Store, ReportsATerminalFailure) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto first, s.store->Begin("k"));
  ASSERT_OK(s.store->Fail("k", first.token, "card declined", idem::Failure::kTerminal));

  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->state, State::kFailed);
  EXPECT_FALSE(got->retryable);
  EXPECT_EQ(idem::DisplayState(*got), "failed");

  s.clock->Advance(1h);
  ASSERT_OK_AND_ASSIGN(auto second, s.store->Begin("k"));
  EXPECT_EQ(second.outcome, Outcome::kFailed);
  EXPECT_EQ(second.record.result, "card declined");
  EXPECT_EQ(second.record.attempts, 1u);
  EXPECT_EQ(second.record.token, first.token);
}

TEST(Store, DetectsAFingerprintMismatch) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  const std::string a = idem::Fingerprint("amount=10");
  const std::string b = idem::Fingerprint("amount=11");
  ASSERT_OK_AND_ASSIGN(auto first, s.store->Begin("k", {.fingerprint = a}));
  ASSERT_EQ(first.outcome, Outcome::kAcquired);
  EXPECT_EQ(first.record.fingerprint, a);

  // Pending, lease live: a different fingerprint is a mismatch, and nothing is stored.
  ASSERT_OK_AND_ASSIGN(auto mismatch, s.store->Begin("k", {.fingerprint = b}));
  EXPECT_EQ(mismatch.outcome, Outcome::kMismatch);
  EXPECT_EQ(mismatch.record.fingerprint, a);
  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(WithoutHolder(*got), WithoutHolder(first.record));

  // Pending, lease expired: still a mismatch, not a takeover.
  s.clock->Advance(1h);
  ASSERT_OK_AND_ASSIGN(auto expired_mismatch, s.store->Begin("k", {.fingerprint = b}));
  EXPECT_EQ(expired_mismatch.outcome, Outcome::kMismatch);
  ASSERT_OK_AND_ASSIGN(auto still, s.store->Get("k"));
  ASSERT_TRUE(still.has_value());
  EXPECT_EQ(still->token, first.token);
  EXPECT_EQ(still->attempts, 1u);

  ASSERT_OK_AND_ASSIGN(auto takeover, s.store->Begin("k", {.fingerprint = a}));
  ASSERT_EQ(takeover.outcome, Outcome::kAcquired);
  ASSERT_OK(s.store->Complete("k", takeover.token, "done"));

  // Done: mismatch for a different fingerprint, replay for the same one or an empty one.
  ASSERT_OK_AND_ASSIGN(auto done_mismatch, s.store->Begin("k", {.fingerprint = b}));
  EXPECT_EQ(done_mismatch.outcome, Outcome::kMismatch);
  ASSERT_OK_AND_ASSIGN(auto same, s.store->Begin("k", {.fingerprint = a}));
  EXPECT_EQ(same.outcome, Outcome::kReplay);
  EXPECT_EQ(same.record.result, "done");
  ASSERT_OK_AND_ASSIGN(auto unchecked, s.store->Begin("k"));
  EXPECT_EQ(unchecked.outcome, Outcome::kReplay);

  // Failed terminal: a mismatch too.
  ASSERT_OK_AND_ASSIGN(auto other, s.store->Begin("t", {.fingerprint = a}));
  ASSERT_OK(s.store->Fail("t", other.token, "no", idem::Failure::kTerminal));
  ASSERT_OK_AND_ASSIGN(auto failed_mismatch, s.store->Begin("t", {.fingerprint = b}));
  EXPECT_EQ(failed_mismatch.outcome, Outcome::kMismatch);
}

TEST(Store, AnEmptyStoredFingerprintIsNotChecked) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto first, s.store->Begin("k"));
  ASSERT_OK(s.store->Complete("k", first.token, "r"));
  ASSERT_OK_AND_ASSIGN(auto second, s.store->Begin("k", {.fingerprint = idem::Fingerprint("x")}));
  EXPECT_EQ(second.outcome, Outcome::kReplay);
  EXPECT_EQ(second.record.result, "r");
}

// ---- Complete / Fail / Extend / SaveCheckpoint: fencing ---------------------------------------

TEST(Store, CompleteRequiresTheCurrentToken) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin("k"));
  ASSERT_EQ(claim.outcome, Outcome::kAcquired);
  EXPECT_CODE(s.store->Complete("k", claim.token + 1, "x"), kLeaseLost);
  EXPECT_CODE(s.store->Complete("k", 0, "x"), kLeaseLost);
  if (claim.token > 1) EXPECT_CODE(s.store->Complete("k", claim.token - 1, "x"), kLeaseLost);
  EXPECT_CODE(s.store->Fail("k", claim.token + 1, "x"), kLeaseLost);
  EXPECT_CODE(s.store->Extend("k", claim.token + 1, 1s), kLeaseLost);
  EXPECT_CODE(s.store->SaveCheckpoint("k", claim.token + 1, "x"), kLeaseLost);

  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(WithoutHolder(*got), WithoutHolder(claim.record));
  ASSERT_OK(s.store->Complete("k", claim.token, "ok"));
}

TEST(Store, CompleteIsIdempotentForTheSameResult) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin("k"));
  ASSERT_OK(s.store->Complete("k", claim.token, "result-1"));
  EXPECT_OK(s.store->Complete("k", claim.token, "result-1"));
  EXPECT_CODE(s.store->Complete("k", claim.token, "result-2"), kLeaseLost);
  EXPECT_CODE(s.store->Fail("k", claim.token, "late failure"), kLeaseLost);
  EXPECT_CODE(s.store->Extend("k", claim.token, 1s), kLeaseLost);
  EXPECT_CODE(s.store->SaveCheckpoint("k", claim.token, "cp"), kLeaseLost);

  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->state, State::kDone);
  EXPECT_EQ(got->result, "result-1");
  EXPECT_EQ(got->checkpoint, "");
}

TEST(Store, FailIsIdempotentForTheSameError) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin("k"));
  ASSERT_OK(s.store->Fail("k", claim.token, "boom", idem::Failure::kTerminal));
  EXPECT_OK(s.store->Fail("k", claim.token, "boom", idem::Failure::kTerminal));
  EXPECT_CODE(s.store->Fail("k", claim.token, "other", idem::Failure::kTerminal), kLeaseLost);
  EXPECT_CODE(s.store->Fail("k", claim.token, "boom", idem::Failure::kRetryable), kLeaseLost);
  EXPECT_CODE(s.store->Complete("k", claim.token, "late result"), kLeaseLost);

  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->state, State::kFailed);
  EXPECT_FALSE(got->retryable);
  EXPECT_EQ(got->result, "boom");
}

TEST(Store, CallsOnAnAbsentKeyReturnNotFound) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  EXPECT_CODE(s.store->Complete("absent", 1, "x"), kNotFound);
  EXPECT_CODE(s.store->Fail("absent", 1, "x"), kNotFound);
  EXPECT_CODE(s.store->Extend("absent", 1, 1s), kNotFound);
  EXPECT_CODE(s.store->SaveCheckpoint("absent", 1, "x"), kNotFound);
  EXPECT_CODE(s.store->Forget("absent"), kNotFound);
  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("absent"));
  EXPECT_FALSE(got.has_value());
}

TEST(Store, AStaleTokenCannotOverwriteTheNewOwner) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto old_owner, s.store->Begin("k", {.lease = 1s}));
  ASSERT_OK(s.store->SaveCheckpoint("k", old_owner.token, "old-cp"));
  s.clock->Advance(2s);
  ASSERT_OK_AND_ASSIGN(auto new_owner, s.store->Begin("k", {.lease = 1s}));
  ASSERT_EQ(new_owner.outcome, Outcome::kAcquired);
  ASSERT_TRUE(new_owner.took_over);
  ASSERT_GT(new_owner.token, old_owner.token);

  const uint64_t lease_lost_before = s.store->GetCounters()->lease_lost;
  EXPECT_CODE(s.store->Complete("k", old_owner.token, "old result"), kLeaseLost);
  EXPECT_CODE(s.store->Fail("k", old_owner.token, "old error"), kLeaseLost);
  EXPECT_CODE(s.store->Extend("k", old_owner.token, 1h), kLeaseLost);
  EXPECT_CODE(s.store->SaveCheckpoint("k", old_owner.token, "old-cp-2"), kLeaseLost);
  EXPECT_EQ(s.store->GetCounters()->lease_lost, lease_lost_before + 4);

  ASSERT_OK_AND_ASSIGN(auto pending, s.store->Get("k"));
  ASSERT_TRUE(pending.has_value());
  EXPECT_EQ(WithoutHolder(*pending), WithoutHolder(new_owner.record));

  ASSERT_OK(s.store->Complete("k", new_owner.token, "new result"));
  EXPECT_CODE(s.store->Complete("k", old_owner.token, "old result"), kLeaseLost);
  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->result, "new result");
  EXPECT_EQ(got->token, new_owner.token);
}

TEST(Store, ExtendKeepsTheLeaseLive) {
  idem::Options options = TestOptions();
  options.default_lease = 3s;
  ClockedStore s(options);
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin("k", {.lease = 1s}));
  s.clock->Advance(800ms);
  ASSERT_OK(s.store->Extend("k", claim.token, 5s));
  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->lease_deadline, s.clock->Now() + 5s);
  EXPECT_EQ(got->token, claim.token);

  s.clock->Advance(2s);  // past the original lease, within the extended one
  ASSERT_OK_AND_ASSIGN(auto second, s.store->Begin("k"));
  EXPECT_EQ(second.outcome, Outcome::kInProgress);
  EXPECT_GE(second.retry_after, 2999ms);
  EXPECT_LE(second.retry_after, 3000ms);

  // 0 means Options::default_lease.
  ASSERT_OK(s.store->Extend("k", claim.token, 0ms));
  ASSERT_OK_AND_ASSIGN(auto defaulted, s.store->Get("k"));
  ASSERT_TRUE(defaulted.has_value());
  EXPECT_EQ(defaulted->lease_deadline, s.clock->Now() + 3s);

  // Extending an expired lease that nobody took over is allowed: the token is still current.
  s.clock->Advance(10s);
  EXPECT_OK(s.store->Extend("k", claim.token, 1s));
  ASSERT_OK_AND_ASSIGN(auto third, s.store->Begin("k"));
  EXPECT_EQ(third.outcome, Outcome::kInProgress);
}

TEST(Store, ACheckpointSurvivesATakeover) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto first, s.store->Begin("k", {.lease = 1s}));
  ASSERT_OK(s.store->SaveCheckpoint("k", first.token, "step-1"));
  ASSERT_OK(s.store->SaveCheckpoint("k", first.token, "step-2"));
  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->checkpoint, "step-2");
  EXPECT_EQ(got->state, State::kPending);

  s.clock->Advance(5s);
  ASSERT_OK_AND_ASSIGN(auto second, s.store->Begin("k"));
  ASSERT_EQ(second.outcome, Outcome::kAcquired);
  EXPECT_TRUE(second.took_over);
  EXPECT_EQ(second.record.checkpoint, "step-2");

  // And across a retryable failure.
  ASSERT_OK(s.store->Fail("k", second.token, "transient"));
  ASSERT_OK_AND_ASSIGN(auto third, s.store->Begin("k"));
  ASSERT_EQ(third.outcome, Outcome::kAcquired);
  EXPECT_EQ(third.record.checkpoint, "step-2");
  EXPECT_EQ(third.record.attempts, 3u);
}

// ---- Tokens ----------------------------------------------------------------------------------

TEST(Store, TokensIncreaseAcrossKeys) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  std::set<uint64_t> tokens;
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin("key-" + std::to_string(i)));
    ASSERT_EQ(claim.outcome, Outcome::kAcquired);
    EXPECT_TRUE(tokens.insert(claim.token).second) << "token reused: " << claim.token;
  }
}

TEST(Store, TokensAreNeverReusedAfterForget) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto first, s.store->Begin("k"));
  ASSERT_OK(s.store->Forget("k"));
  ASSERT_OK_AND_ASSIGN(auto gone, s.store->Get("k"));
  EXPECT_FALSE(gone.has_value());
  EXPECT_CODE(s.store->Complete("k", first.token, "x"), kNotFound);

  ASSERT_OK_AND_ASSIGN(auto second, s.store->Begin("k"));
  ASSERT_EQ(second.outcome, Outcome::kAcquired);
  EXPECT_GT(second.token, first.token);
  EXPECT_EQ(second.record.attempts, 1u);
  EXPECT_FALSE(second.took_over);
  EXPECT_CODE(s.store->Complete("k", first.token, "stale"), kLeaseLost);
  ASSERT_OK(s.store->Complete("k", second.token, "fresh"));
  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->result, "fresh");
}

TEST(Store, TokensAreNeverReusedAfterRetentionExpiry) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto first, s.store->Begin("k", {.retention = 1h}));
  s.clock->Advance(2h);
  ASSERT_OK_AND_ASSIGN(auto second, s.store->Begin("k", {.retention = 1h}));
  ASSERT_EQ(second.outcome, Outcome::kAcquired);
  EXPECT_GT(second.token, first.token);
  EXPECT_EQ(second.record.attempts, 1u);
  EXPECT_FALSE(second.took_over);
  EXPECT_CODE(s.store->Complete("k", first.token, "stale"), kLeaseLost);

  // And after a purge.
  s.clock->Advance(2h);
  ASSERT_OK_AND_ASSIGN(auto purged, s.store->Purge());
  EXPECT_EQ(purged, 1u);
  ASSERT_OK_AND_ASSIGN(auto third, s.store->Begin("k"));
  ASSERT_EQ(third.outcome, Outcome::kAcquired);
  EXPECT_GT(third.token, second.token);
  EXPECT_CODE(s.store->Complete("k", second.token, "stale"), kLeaseLost);
  EXPECT_CODE(s.store->Complete("k", first.token, "stale"), kLeaseLost);
}

TEST(Store, TokensAreNeverReusedAfterForgetAndReopen) {
  TempDir dir;
  auto clock = std::make_shared<ManualClock>();
  uint64_t first_token = 0;
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath(), TestOptions(clock));
    ASSERT_OK_AND_ASSIGN(auto first, store->Begin("k"));
    first_token = first.token;
    ASSERT_OK(store->Forget("k"));
  }
  IDEM_ASSERT_OPEN(store, dir.StorePath(), TestOptions(clock));
  ASSERT_OK_AND_ASSIGN(auto second, store->Begin("k"));
  ASSERT_EQ(second.outcome, Outcome::kAcquired);
  EXPECT_GT(second.token, first_token);
  EXPECT_CODE(store->Complete("k", first_token, "stale"), kLeaseLost);
}

// ---- Retention and purge ----------------------------------------------------------------------

TEST(Store, RetentionExpiryHidesTheRecord) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto first, s.store->Begin("k", {.retention = 1h}));
  ASSERT_OK(s.store->Complete("k", first.token, "r"));
  ASSERT_OK_AND_ASSIGN(auto keep, s.store->Begin("keep", {.retention = 10h}));
  ASSERT_OK(s.store->Complete("keep", keep.token, "r"));

  s.clock->Advance(59min);
  ASSERT_OK_AND_ASSIGN(auto still, s.store->Get("k"));
  EXPECT_TRUE(still.has_value());

  s.clock->Advance(2min);
  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  EXPECT_FALSE(got.has_value());
  EXPECT_EQ(ScanKeys(*s.store), std::vector<std::string>{"keep"});
  // An expired record behaves as absent for the token calls too: no live record to fence.
  EXPECT_NE(s.store->Complete("k", first.token, "r").code(), idem::Status::Code::kOk);

  ASSERT_OK_AND_ASSIGN(auto fresh, s.store->Begin("k", {.retention = 1h}));
  EXPECT_EQ(fresh.outcome, Outcome::kAcquired);
  EXPECT_FALSE(fresh.took_over);
  EXPECT_EQ(fresh.record.attempts, 1u);
  EXPECT_EQ(fresh.record.result, "");
  EXPECT_EQ(fresh.record.created, s.clock->Now());
  EXPECT_EQ(fresh.record.expires, s.clock->Now() + 1h);
}

TEST(Store, PurgeReportsProgressAsItGoes) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  constexpr int kExpiring = 300;
  for (int i = 0; i < kExpiring; ++i) {
    const std::string key = "k-" + std::to_string(i);
    ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin(key, {.retention = 1h}));
    ASSERT_OK(s.store->Complete(key, claim.token, "r"));
  }
  s.clock->Advance(2h);
  for (bool dry_run : {true, false}) {
    std::vector<uint64_t> reports;
    idem::PurgeOptions options{.dry_run = dry_run};
    options.progress = [&](uint64_t so_far) { reports.push_back(so_far); };
    ASSERT_OK_AND_ASSIGN(auto count, s.store->Purge(options));
    EXPECT_EQ(count, static_cast<uint64_t>(kExpiring));
    ASSERT_GE(reports.size(), 2u) << "dry run " << dry_run;
    EXPECT_TRUE(std::is_sorted(reports.begin(), reports.end()));
    EXPECT_LE(reports.back(), count);
  }
}

TEST(Store, PurgeRemovesExpiredRecords) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  for (int i = 0; i < 10; ++i) {
    const std::string key = "short-" + std::to_string(i);
    ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin(key, {.retention = 1h}));
    if (i % 3 == 0) ASSERT_OK(s.store->Complete(key, claim.token, "r"));
    if (i % 3 == 1) ASSERT_OK(s.store->Fail(key, claim.token, "e", idem::Failure::kTerminal));
  }
  for (int i = 0; i < 5; ++i) {
    const std::string key = "long-" + std::to_string(i);
    ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin(key, {.retention = 100h}));
    ASSERT_OK(s.store->Complete(key, claim.token, "r"));
  }
  ASSERT_OK_AND_ASSIGN(auto nothing, s.store->Purge());
  EXPECT_EQ(nothing, 0u);

  s.clock->Advance(2h);
  ASSERT_OK_AND_ASSIGN(auto dry, s.store->Purge({.dry_run = true}));
  EXPECT_EQ(dry, 10u);
  ASSERT_OK_AND_ASSIGN(auto dry_again, s.store->Purge({.dry_run = true}));
  EXPECT_EQ(dry_again, 10u);
  EXPECT_EQ(s.store->GetCounters()->purged, 0u);

  ASSERT_OK_AND_ASSIGN(auto purged, s.store->Purge());
  EXPECT_EQ(purged, 10u);
  EXPECT_EQ(s.store->GetCounters()->purged, 10u);
  ASSERT_OK_AND_ASSIGN(auto again, s.store->Purge());
  EXPECT_EQ(again, 0u);
  ASSERT_OK_AND_ASSIGN(auto compacted, s.store->Purge({.compact = true}));
  EXPECT_EQ(compacted, 0u);

  EXPECT_EQ(ScanKeys(*s.store).size(), 5u);
  EXPECT_CODE(s.store->Forget("short-0"), kNotFound);
  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("long-0"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->result, "r");

  // The rest expire later.
  s.clock->Advance(200h);
  ASSERT_OK_AND_ASSIGN(auto rest, s.store->Purge({.compact = true}));
  EXPECT_EQ(rest, 5u);
  EXPECT_TRUE(ScanKeys(*s.store).empty());
}

TEST(Store, PurgeKeepsARecordReacquiredAfterExpiry) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto first, s.store->Begin("k", {.retention = 1h}));
  ASSERT_OK(s.store->Complete("k", first.token, "old"));
  s.clock->Advance(2h);
  ASSERT_OK_AND_ASSIGN(auto second, s.store->Begin("k", {.retention = 1h}));
  ASSERT_EQ(second.outcome, Outcome::kAcquired);
  ASSERT_OK_AND_ASSIGN(auto purged, s.store->Purge());
  EXPECT_EQ(purged, 0u);
  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->token, second.token);
  ASSERT_OK(s.store->Complete("k", second.token, "new"));
}

TEST(Store, AutoPurgeRemovesExpiredRecords) {
  TempDir dir;
  auto clock = std::make_shared<ManualClock>();
  idem::Options options = TestOptions(clock);
  options.auto_purge_interval = 50ms;
  IDEM_ASSERT_OPEN(store, dir.StorePath(), options);
  for (int i = 0; i < 20; ++i) {
    const std::string key = "k" + std::to_string(i);
    ASSERT_OK_AND_ASSIGN(auto claim, store->Begin(key, {.retention = 1h}));
    ASSERT_OK(store->Complete(key, claim.token, "r"));
  }
  ASSERT_OK_AND_ASSIGN(auto keep, store->Begin("keep", {.retention = 100h}));
  clock->Advance(2h);
  const bool purged = idem_test::WaitFor([&] { return store->GetCounters()->purged >= 20; });
  EXPECT_TRUE(purged) << "purged " << store->GetCounters()->purged;
  EXPECT_EQ(store->GetCounters()->purged, 20u);
  ASSERT_OK_AND_ASSIGN(auto left, store->Purge({.dry_run = true}));
  EXPECT_EQ(left, 0u);
  ASSERT_OK_AND_ASSIGN(auto got, store->Get("keep"));
  EXPECT_TRUE(got.has_value());
  EXPECT_OK(store->Complete("keep", keep.token, "r"));
}

// ---- Scan, Forget, counters ------------------------------------------------------------------

TEST(Store, ScanVisitsLiveRecordsInKeyOrder) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  for (const char* key : {"b/2", "a/1", "b/1", "c", "b/3", "a/2"}) {
    ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin(key, {.type = "t"}));
    ASSERT_EQ(claim.outcome, Outcome::kAcquired);
  }
  EXPECT_EQ(ScanKeys(*s.store), (std::vector<std::string>{"a/1", "a/2", "b/1", "b/2", "b/3", "c"}));
  EXPECT_EQ(ScanKeys(*s.store, {.prefix = "b/"}), (std::vector<std::string>{"b/1", "b/2", "b/3"}));
  EXPECT_EQ(ScanKeys(*s.store, {.start_after = "b/1"}),
            (std::vector<std::string>{"b/2", "b/3", "c"}));
  EXPECT_EQ(ScanKeys(*s.store, {.prefix = "b/", .start_after = "b/2"}),
            (std::vector<std::string>{"b/3"}));
  EXPECT_TRUE(ScanKeys(*s.store, {.prefix = "zz"}).empty());

  // Stops when visit returns false.
  std::vector<std::string> first_two;
  ASSERT_OK(s.store->Scan({}, [&](const Record& record) {
    first_two.push_back(record.key);
    return first_two.size() < 2;
  }));
  EXPECT_EQ(first_two, (std::vector<std::string>{"a/1", "a/2"}));

  // Records are complete.
  ASSERT_OK(s.store->Scan({.prefix = "c"}, [&](const Record& record) {
    EXPECT_EQ(record.type, "t");
    EXPECT_EQ(record.state, State::kPending);
    EXPECT_EQ(record.attempts, 1u);
    EXPECT_GT(record.token, 0u);
    return true;
  }));

  ASSERT_OK(s.store->Forget("b/2"));
  EXPECT_EQ(ScanKeys(*s.store, {.prefix = "b/"}), (std::vector<std::string>{"b/1", "b/3"}));
}

TEST(Store, ScanReportsTimedOutRecords) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin("k", {.lease = 1s}));
  s.clock->Advance(2s);
  int seen = 0;
  ASSERT_OK(s.store->Scan({}, [&](const Record& record) {
    ++seen;
    EXPECT_TRUE(record.timed_out);
    return true;
  }));
  EXPECT_EQ(seen, 1);
}

TEST(Store, ForgetRemovesARecordInAnyState) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto pending, s.store->Begin("pending"));
  ASSERT_OK_AND_ASSIGN(auto done, s.store->Begin("done"));
  ASSERT_OK(s.store->Complete("done", done.token, "r"));
  ASSERT_OK_AND_ASSIGN(auto failed, s.store->Begin("failed"));
  ASSERT_OK(s.store->Fail("failed", failed.token, "e", idem::Failure::kTerminal));
  for (const char* key : {"pending", "done", "failed"}) {
    ASSERT_OK(s.store->Forget(key));
    ASSERT_OK_AND_ASSIGN(auto got, s.store->Get(key));
    EXPECT_FALSE(got.has_value()) << key;
    EXPECT_CODE(s.store->Forget(key), kNotFound);
    ASSERT_OK_AND_ASSIGN(auto again, s.store->Begin(key));
    EXPECT_EQ(again.outcome, Outcome::kAcquired) << key;
  }
}

TEST(Store, CountsOutcomes) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(const idem::Counters zero, s.store->GetCounters());
  EXPECT_EQ(zero.claims, 0u);
  EXPECT_EQ(zero.replays, 0u);

  ASSERT_OK_AND_ASSIGN(auto a, s.store->Begin("a", {.fingerprint = "f1", .lease = 1s}));
  ASSERT_OK_AND_ASSIGN(auto a2, s.store->Begin("a"));                         // in progress
  ASSERT_OK_AND_ASSIGN(auto a3, s.store->Begin("a", {.fingerprint = "f2"}));  // mismatch
  EXPECT_EQ(a3.outcome, Outcome::kMismatch);
  s.clock->Advance(2s);
  ASSERT_OK_AND_ASSIGN(auto a4, s.store->Begin("a"));  // takeover
  ASSERT_TRUE(a4.took_over);
  EXPECT_CODE(s.store->Complete("a", a.token, "stale"), kLeaseLost);
  ASSERT_OK(s.store->Complete("a", a4.token, "r"));
  ASSERT_OK_AND_ASSIGN(auto a5, s.store->Begin("a"));  // replay
  ASSERT_OK_AND_ASSIGN(auto b, s.store->Begin("b"));
  ASSERT_OK(s.store->Fail("b", b.token, "e", idem::Failure::kTerminal));
  ASSERT_OK_AND_ASSIGN(auto b2, s.store->Begin("b"));  // failed
  EXPECT_EQ(b2.outcome, Outcome::kFailed);

  ASSERT_OK_AND_ASSIGN(const idem::Counters c, s.store->GetCounters());
  EXPECT_EQ(c.claims, 3u);
  EXPECT_EQ(c.takeovers, 1u);
  EXPECT_EQ(c.in_progress, 1u);
  EXPECT_EQ(c.mismatches, 1u);
  EXPECT_EQ(c.replays, 1u);
  EXPECT_EQ(c.failed, 1u);
  EXPECT_EQ(c.lease_lost, 1u);
  EXPECT_EQ(c.purged, 0u);
}

// ---- Reopen and sharing ----------------------------------------------------------------------

TEST(Store, ReopenKeepsEverything) {
  TempDir dir;
  auto clock = std::make_shared<ManualClock>();
  const std::string binary_key("bin\0\xff\x01", 6);
  std::vector<Record> before;
  uint64_t pending_token = 0;
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath(), TestOptions(clock));
    ASSERT_OK_AND_ASSIGN(auto done, store->Begin("done", {.type = "pay", .fingerprint = "fp"}));
    ASSERT_OK(store->Complete("done", done.token, std::string("result\0with nul", 15)));
    ASSERT_OK_AND_ASSIGN(auto failed, store->Begin("failed", {.type = "refund"}));
    ASSERT_OK(store->Fail("failed", failed.token, "declined", idem::Failure::kTerminal));
    ASSERT_OK_AND_ASSIGN(auto retry, store->Begin("retry"));
    ASSERT_OK(store->Fail("retry", retry.token, "transient"));
    ASSERT_OK_AND_ASSIGN(auto pending, store->Begin("pending", {.lease = 1h}));
    ASSERT_OK(store->SaveCheckpoint("pending", pending.token, "cp"));
    pending_token = pending.token;
    ASSERT_OK_AND_ASSIGN(auto bin, store->Begin(binary_key));
    ASSERT_OK(store->Complete(binary_key, bin.token, "binary"));
    clock->Advance(1s);
    ASSERT_OK(store->Scan({}, [&](const Record& record) {
      before.push_back(record);
      return true;
    }));
    ASSERT_EQ(before.size(), 5u);
  }
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath(), TestOptions(clock));
    std::vector<Record> after;
    ASSERT_OK(store->Scan({}, [&](const Record& record) {
      after.push_back(record);
      return true;
    }));
    EXPECT_EQ(after, before);
    for (const Record& record : before) {
      ASSERT_OK_AND_ASSIGN(auto got, store->Get(record.key));
      ASSERT_TRUE(got.has_value());
      EXPECT_EQ(*got, record);
    }
    ASSERT_OK_AND_ASSIGN(auto bin, store->Get(binary_key));
    ASSERT_TRUE(bin.has_value());
    EXPECT_EQ(bin->key, binary_key);
    EXPECT_EQ(bin->result, "binary");

    // The pending owner can still finish after the reopen; the states behave as before.
    ASSERT_OK_AND_ASSIGN(auto in_progress, store->Begin("pending"));
    EXPECT_EQ(in_progress.outcome, Outcome::kInProgress);
    ASSERT_OK(store->Complete("pending", pending_token, "finished"));
    ASSERT_OK_AND_ASSIGN(auto replay, store->Begin("done", {.fingerprint = "fp"}));
    EXPECT_EQ(replay.outcome, Outcome::kReplay);
    EXPECT_EQ(replay.record.result, std::string("result\0with nul", 15));
    ASSERT_OK_AND_ASSIGN(auto failed, store->Begin("failed"));
    EXPECT_EQ(failed.outcome, Outcome::kFailed);
    ASSERT_OK_AND_ASSIGN(auto retry, store->Begin("retry"));
    EXPECT_EQ(retry.outcome, Outcome::kAcquired);
    EXPECT_EQ(retry.record.attempts, 2u);
  }
  {
    // Tokens keep increasing after a reopen.
    IDEM_ASSERT_OPEN(store, dir.StorePath(), TestOptions(clock));
    ASSERT_OK_AND_ASSIGN(auto fresh, store->Begin("fresh"));
    for (const Record& record : before) EXPECT_GT(fresh.token, record.token);
  }
}

TEST(Store, OpensTheSameDirectoryTwiceAsOneStore) {
  TempDir dir;
  const std::string path = dir.StorePath();
  IDEM_ASSERT_OPEN(a, path);
  IDEM_ASSERT_OPEN(b, path);
  IDEM_ASSERT_OPEN(c, path + "/");
  IDEM_ASSERT_OPEN(
      d, dir.path() + "/../" + std::filesystem::path(dir.path()).filename().string() + "/./store");

  ASSERT_OK_AND_ASSIGN(auto claim, a->Begin("k"));
  ASSERT_EQ(claim.outcome, Outcome::kAcquired);
  for (idem::Store* other : {b.get(), c.get(), d.get()}) {
    ASSERT_OK_AND_ASSIGN(auto seen, other->Begin("k"));
    EXPECT_EQ(seen.outcome, Outcome::kInProgress);
    EXPECT_EQ(seen.record.token, claim.token);
  }
  ASSERT_OK(d->Complete("k", claim.token, "via d"));
  ASSERT_OK_AND_ASSIGN(auto via_a, a->Get("k"));
  ASSERT_TRUE(via_a.has_value());
  EXPECT_EQ(via_a->result, "via d");

  // Closing one handle leaves the others working.
  a.reset();
  ASSERT_OK_AND_ASSIGN(auto via_b, b->Begin("k"));
  EXPECT_EQ(via_b.outcome, Outcome::kReplay);
  ASSERT_OK_AND_ASSIGN(auto other, c->Begin("other"));
  ASSERT_OK(b->Complete("other", other.token, "x"));

  // When every handle is closed, the directory can be opened again.
  b.reset();
  c.reset();
  d.reset();
  IDEM_ASSERT_OPEN(e, path);
  ASSERT_OK_AND_ASSIGN(auto got, e->Get("other"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->result, "x");
}

TEST(Store, OpensASymlinkedDirectoryAsTheSameStore) {
  TempDir dir;
  IDEM_ASSERT_OPEN(a, dir.StorePath());
  std::error_code ec;
  std::filesystem::create_directory_symlink(dir.StorePath(), dir.Sub("link"), ec);
  ASSERT_FALSE(ec) << ec.message();
  IDEM_ASSERT_OPEN(b, dir.Sub("link"));
  ASSERT_OK_AND_ASSIGN(auto claim, b->Begin("k"));
  ASSERT_OK(a->Complete("k", claim.token, "r"));
  ASSERT_OK_AND_ASSIGN(auto got, b->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->result, "r");
}

TEST(Store, OpensManyStoresSideBySide) {
  TempDir dir;
  std::vector<std::unique_ptr<idem::Store>> stores;
  for (int i = 0; i < 4; ++i) {
    stores.push_back(idem_test::OpenStore(dir.Sub("s" + std::to_string(i))));
    ASSERT_NE(stores.back(), nullptr);
  }
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK_AND_ASSIGN(auto claim, stores[i]->Begin("k"));
    EXPECT_EQ(claim.outcome, Outcome::kAcquired) << i;  // separate stores: no sharing
  }
}

// ---- Helpers ---------------------------------------------------------------------------------

TEST(Store, FingerprintIsTheHexSha256) {
  EXPECT_EQ(idem::Fingerprint(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(idem::Fingerprint("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(idem::Fingerprint(std::string("a\0b", 3)).size(), 64u);
  EXPECT_NE(idem::Fingerprint(std::string("a\0b", 3)), idem::Fingerprint("a"));
}

TEST(Store, NewRequestIdIsAUuidV7) {
  std::set<std::string> ids;
  std::string previous_ms_id;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = idem::NewRequestId();
    ASSERT_EQ(id.size(), 36u) << id;
    for (int dash : {8, 13, 18, 23}) EXPECT_EQ(id[dash], '-') << id;
    EXPECT_EQ(id[14], '7') << id;
    EXPECT_NE(std::string("89ab").find(id[19]), std::string::npos) << id;
    for (char ch : id) {
      const bool lower_hex = (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f');
      EXPECT_TRUE(ch == '-' || lower_hex) << id;
    }
    EXPECT_TRUE(ids.insert(id).second) << "duplicate " << id;
  }
  // Time-ordered: ids made milliseconds apart sort in order.
  const std::string first = idem::NewRequestId();
  std::this_thread::sleep_for(3ms);
  const std::string second = idem::NewRequestId();
  EXPECT_LT(first, second);
}

TEST(Store, NamesItsEnums) {
  EXPECT_EQ(idem::OutcomeName(Outcome::kAcquired), "acquired");
  EXPECT_EQ(idem::OutcomeName(Outcome::kReplay), "replay");
  EXPECT_EQ(idem::OutcomeName(Outcome::kInProgress), "in_progress");
  EXPECT_EQ(idem::OutcomeName(Outcome::kFailed), "failed");
  EXPECT_EQ(idem::OutcomeName(Outcome::kMismatch), "mismatch");
  EXPECT_EQ(idem::StateName(State::kPending), "pending");
  EXPECT_EQ(idem::StateName(State::kDone), "done");
  EXPECT_EQ(idem::StateName(State::kFailed), "failed");
  EXPECT_EQ(idem::Status::OK().ToString(), "OK");
  EXPECT_EQ(idem::Status::InvalidArgument("key is empty").ToString(),
            "InvalidArgument: key is empty");
  EXPECT_EQ(idem::CodeName(idem::Status::Code::kLeaseLost), "LeaseLost");
}

// ---- Execute ---------------------------------------------------------------------------------

TEST(Execute, RunsOnceAndThenReplays) {
  ClockedStore s;
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

TEST(Execute, AcceptsAFunctionReturningAString) {
  ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto execution,
                       s.store->Execute("k", [](idem::Attempt&) { return std::string("plain"); }));
  EXPECT_EQ(execution.result, "plain");
}

TEST(Execute, RecordsARetryableErrorAndRunsAgain) {
  ClockedStore s;
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

TEST(Execute, RecordsATerminalErrorAsFinal) {
  ClockedStore s;
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

TEST(Execute, RecordsAnExceptionAndRethrowsIt) {
  ClockedStore s;
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

TEST(Execute, ReportsAFingerprintMismatch) {
  ClockedStore s;
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

TEST(Execute, TakesOverAnAbandonedAttemptWithItsCheckpoint) {
  ClockedStore s;
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

TEST(Execute, SavesCheckpointsThroughTheAttempt) {
  ClockedStore s;
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

TEST(Execute, RenewsTheLeaseWhileTheFunctionRuns) {
  TempDir dir;
  idem::Options options = TestOptions();  // the real clock
  // Renewed every 300 ms: a renewal must be late by 600 ms for the lease to pass, which a busy
  // shared machine can cause with a shorter lease (seen with 300 ms: a renewal 200 ms late).
  options.default_lease = 900ms;
  IDEM_ASSERT_OPEN(store, dir.StorePath(), options);

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

TEST(Execute, WaitsForAnotherOwnerAndReturnsItsResult) {
  TempDir dir;
  IDEM_ASSERT_OPEN(store, dir.StorePath(), TestOptions());
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

TEST(Execute, GivesUpWaitingAfterExecuteWait) {
  TempDir dir;
  idem::Options options = TestOptions();
  options.execute_wait = 300ms;
  IDEM_ASSERT_OPEN(store, dir.StorePath(), options);
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

TEST(Execute, ReturnsATerminalFailureLeftByBegin) {
  ClockedStore s;
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

}  // namespace
