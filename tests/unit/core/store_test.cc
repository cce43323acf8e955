// Tests of idem::Store through its public API: the Begin state machine, and the fencing of
// Complete/Fail/Extend/SaveCheckpoint. Tokens and retention: store_retention_test.cc; scan,
// forget, counters, reopening and sharing: store_records_test.cc; Execute: execute_test.cc.

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
using idem_test::TestOptions;
using idem_test::WithoutHolder;

// Every test runs on each backend (backend.h).
class Store : public idem_test::OnEachBackend {};

// ---- Begin: the state machine ----------------------------------------------------------------

TEST_P(Store, AcquiresANewKey) {
  ClockedStore s(GetParam());
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

TEST_P(Store, GetReturnsTheHolderBeginStored) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin("k"));
  ASSERT_EQ(claim.outcome, Outcome::kAcquired);
  EXPECT_EQ(claim.record.holder.pid, static_cast<uint32_t>(::getpid()));
  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->holder, claim.record.holder);
  EXPECT_EQ(*got, claim.record);
}

// The holder serves a pending claim only: once done or failed, a record keeps none (only whether
// its attempt took over), on every backend, and a later attempt of a retryable failure records
// its own.
TEST_P(Store, ARecordThatLeavesPendingKeepsNoHolder) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  for (const bool complete : {true, false}) {
    const std::string key = complete ? "done" : "failed";
    ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin(key));
    ASSERT_NE(claim.record.holder.request_id, 0u);
    if (complete) {
      ASSERT_OK(s.store->Complete(key, claim.token, "receipt"));
    } else {
      ASSERT_OK(s.store->Fail(key, claim.token, "declined", idem::Failure::kRetryable));
    }
    ASSERT_OK_AND_ASSIGN(auto got, s.store->Get(key));
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->holder, idem::Holder{}) << key;
    EXPECT_EQ(got->token, claim.token);
  }
  ASSERT_OK_AND_ASSIGN(auto again, s.store->Begin("failed"));
  ASSERT_EQ(again.outcome, Outcome::kAcquired);
  EXPECT_EQ(again.record.holder.pid, static_cast<uint32_t>(::getpid()));
  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("failed"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->holder, again.record.holder);
}

TEST_P(Store, UsesDefaultLeaseAndRetention) {
  idem::Options options = TestOptions();
  options.default_lease = 7s;
  options.default_retention = 3h;
  ClockedStore s(GetParam(), options);
  ASSERT_NE(s.store, nullptr);
  const auto now = s.clock->Now();
  ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin("k"));
  ASSERT_EQ(claim.outcome, Outcome::kAcquired);
  EXPECT_EQ(claim.record.lease_deadline, now + 7s);
  EXPECT_EQ(claim.record.expires, now + 3h);
}

TEST_P(Store, ReportsInProgressWhileTheLeaseIsLive) {
  ClockedStore s(GetParam());
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

TEST_P(Store, TakesOverAnExpiredLease) {
  ClockedStore s(GetParam());
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

TEST_P(Store, ReplaysADoneRecord) {
  ClockedStore s(GetParam());
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

TEST_P(Store, ReacquiresARetryableFailure) {
  ClockedStore s(GetParam());
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

TEST_P(Store, FailsADefaultKindFailureRetryably) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto first, s.store->Begin("k"));
  ASSERT_OK(s.store->Fail("k", first.token, "oops"));
  ASSERT_OK_AND_ASSIGN(auto second, s.store->Begin("k"));
  EXPECT_EQ(second.outcome, Outcome::kAcquired);
}

TEST_P(Store, ReportsATerminalFailure) {
  ClockedStore s(GetParam());
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

TEST_P(Store, DetectsAFingerprintMismatch) {
  ClockedStore s(GetParam());
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

TEST_P(Store, AnEmptyStoredFingerprintIsNotChecked) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto first, s.store->Begin("k"));
  ASSERT_OK(s.store->Complete("k", first.token, "r"));
  ASSERT_OK_AND_ASSIGN(auto second, s.store->Begin("k", {.fingerprint = idem::Fingerprint("x")}));
  EXPECT_EQ(second.outcome, Outcome::kReplay);
  EXPECT_EQ(second.record.result, "r");
}

// ---- Complete / Fail / Extend / SaveCheckpoint: fencing ---------------------------------------

TEST_P(Store, CompleteRequiresTheCurrentToken) {
  ClockedStore s(GetParam());
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

TEST_P(Store, CompleteIsIdempotentForTheSameResult) {
  ClockedStore s(GetParam());
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

TEST_P(Store, FailIsIdempotentForTheSameError) {
  ClockedStore s(GetParam());
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

TEST_P(Store, CallsOnAnAbsentKeyReturnNotFound) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  EXPECT_CODE(s.store->Complete("absent", 1, "x"), kNotFound);
  EXPECT_CODE(s.store->Fail("absent", 1, "x"), kNotFound);
  EXPECT_CODE(s.store->Extend("absent", 1, 1s), kNotFound);
  EXPECT_CODE(s.store->SaveCheckpoint("absent", 1, "x"), kNotFound);
  EXPECT_CODE(s.store->Forget("absent"), kNotFound);
  ASSERT_OK_AND_ASSIGN(auto got, s.store->Get("absent"));
  EXPECT_FALSE(got.has_value());
}

TEST_P(Store, AStaleTokenCannotOverwriteTheNewOwner) {
  ClockedStore s(GetParam());
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

TEST_P(Store, ExtendKeepsTheLeaseLive) {
  idem::Options options = TestOptions();
  options.default_lease = 3s;
  ClockedStore s(GetParam(), options);
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

TEST_P(Store, ACheckpointSurvivesATakeover) {
  ClockedStore s(GetParam());
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

IDEM_ON_EACH_BACKEND(Store);

}  // namespace
