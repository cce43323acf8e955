// A wall clock that jumps (idem::Options::clock, a ManualClock here). What a jump can and cannot
// cause is documented in docs/semantics.md ("Clock") and docs/reliability.md; each test below
// pins one of those sentences down.

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "idem/idem.h"
#include "support/test_util.h"

namespace {

using idem::Outcome;
using idem::Status;
using idem_test::ManualClock;
using idem_test::TempDir;
using idem_test::TestOptions;
using namespace std::chrono_literals;

struct Fixture {
  TempDir dir;
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  std::unique_ptr<idem::Store> store;

  explicit Fixture(std::chrono::milliseconds execute_wait = 30s) {
    idem::Options options = TestOptions(clock);
    options.execute_wait = execute_wait;
    store = idem_test::OpenStore(dir.StorePath(), options);
  }
};

const idem::BeginOptions kLease30s{.lease = 30s, .retention = 24h};

// Forward: a live lease expires early and the next Begin takes the key over. The old owner's
// fencing token is stale, so it cannot overwrite the new owner's outcome: the key still has one
// answer.
TEST(Clock, AForwardJumpExpiresALiveLeaseButFencingKeepsOneAnswer) {
  Fixture f;
  ASSERT_NE(f.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto first, f.store->Begin("k", kLease30s));
  ASSERT_EQ(first.outcome, Outcome::kAcquired);
  f.clock->Advance(1h);  // the owner is still alive and working
  ASSERT_OK_AND_ASSIGN(auto second, f.store->Begin("k", kLease30s));
  EXPECT_EQ(second.outcome, Outcome::kAcquired);
  EXPECT_TRUE(second.took_over);
  EXPECT_GT(second.token, first.token);
  EXPECT_CODE(f.store->Complete("k", first.token, "first"), kLeaseLost);
  ASSERT_OK(f.store->Complete("k", second.token, "second"));
  EXPECT_CODE(f.store->Complete("k", first.token, "first"), kLeaseLost);
  ASSERT_OK_AND_ASSIGN(auto replay, f.store->Begin("k", kLease30s));
  EXPECT_EQ(replay.outcome, Outcome::kReplay);
  EXPECT_EQ(replay.record.result, "second");
}

// Backward: leases get longer by the size of the jump; a live lease is never taken over. The
// key is taken over only once the clock has come back past the stored deadline.
TEST(Clock, ABackwardJumpLengthensLeasesAndNeverLetsALiveOneBeTakenOver) {
  Fixture f;
  ASSERT_NE(f.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto first, f.store->Begin("k", kLease30s));
  f.clock->Advance(-1h);
  ASSERT_OK_AND_ASSIGN(auto waiting, f.store->Begin("k", kLease30s));
  EXPECT_EQ(waiting.outcome, Outcome::kInProgress);
  EXPECT_EQ(waiting.retry_after, 1h + 30s);  // the lease is now the jump longer
  f.clock->Advance(1h);                      // back to where it was: 30 s left
  ASSERT_OK_AND_ASSIGN(waiting, f.store->Begin("k", kLease30s));
  EXPECT_EQ(waiting.outcome, Outcome::kInProgress);
  // The owner works on throughout, and its token stays good.
  ASSERT_OK(f.store->Extend("k", first.token, 30s));
  f.clock->Advance(31s);
  ASSERT_OK_AND_ASSIGN(auto next, f.store->Begin("k", kLease30s));
  EXPECT_EQ(next.outcome, Outcome::kAcquired);
  EXPECT_TRUE(next.took_over);
}

// A backward jump can revive a lease that had already run out (it is a stored deadline compared
// with now): the key waits again instead of being taken over. Never the other way round.
TEST(Clock, ABackwardJumpCanReviveAnExpiredLeaseButTheOwnerKeepsItsToken) {
  Fixture f;
  ASSERT_NE(f.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto first, f.store->Begin("k", kLease30s));
  f.clock->Advance(40s);
  ASSERT_OK_AND_ASSIGN(auto record, f.store->Get("k"));
  ASSERT_TRUE(record.has_value());
  EXPECT_TRUE(record->timed_out);
  f.clock->Advance(-20s);  // 10 s of lease "left" again
  ASSERT_OK_AND_ASSIGN(auto waiting, f.store->Begin("k", kLease30s));
  EXPECT_EQ(waiting.outcome, Outcome::kInProgress);
  EXPECT_EQ(waiting.retry_after, 10s);
  ASSERT_OK(f.store->Complete("k", first.token, "done"));
}

// Retention follows the clock too: a forward jump past the retention makes a done record absent
// (a retry then runs the request again); a backward jump keeps records longer.
TEST(Clock, RetentionEndsEarlyOnAForwardJumpAndLateOnABackwardOne) {
  Fixture f;
  ASSERT_NE(f.store, nullptr);
  const idem::BeginOptions options{.lease = 30s, .retention = 1h};
  ASSERT_OK_AND_ASSIGN(auto claim, f.store->Begin("early", options));
  ASSERT_OK(f.store->Complete("early", claim.token, "r"));
  ASSERT_OK_AND_ASSIGN(claim, f.store->Begin("late", options));
  ASSERT_OK(f.store->Complete("late", claim.token, "r"));

  f.clock->Advance(-2h);  // backward: "late" now has 3 h of retention left
  ASSERT_OK_AND_ASSIGN(auto purged, f.store->Purge());
  EXPECT_EQ(purged, 0u);
  ASSERT_OK_AND_ASSIGN(auto replay, f.store->Begin("late", options));
  EXPECT_EQ(replay.outcome, Outcome::kReplay);

  f.clock->Advance(2h + 1h + 1s);  // forward past the retention of both
  ASSERT_OK_AND_ASSIGN(auto gone, f.store->Get("early"));
  EXPECT_FALSE(gone.has_value());
  ASSERT_OK_AND_ASSIGN(auto again, f.store->Begin("early", options));
  EXPECT_EQ(again.outcome, Outcome::kAcquired);  // the request runs again
  EXPECT_FALSE(again.took_over);
  ASSERT_OK_AND_ASSIGN(purged, f.store->Purge());
  EXPECT_EQ(purged, 1u);  // "late"; "early" was re-acquired with a new retention
}

// Purge after the clock went back: records due by the old "now" but not by the new one stay;
// they are purged once the clock passes their expiry again. Nothing live is ever purged.
TEST(Clock, PurgeNeverRemovesWhatIsLiveByTheCurrentClock) {
  Fixture f;
  ASSERT_NE(f.store, nullptr);
  for (int i = 0; i < 10; ++i) {
    const std::string key = "k" + std::to_string(i);
    ASSERT_OK_AND_ASSIGN(auto claim,
                         f.store->Begin(key, {.lease = 1s, .retention = 1h + i * 1min}));
    ASSERT_OK(f.store->Complete(key, claim.token, "r"));
  }
  f.clock->Advance(1h + 4min + 30s);  // k0..k4 expired
  f.clock->Advance(-1h);              // before any expiry
  ASSERT_OK_AND_ASSIGN(auto purged, f.store->Purge());
  EXPECT_EQ(purged, 0u);
  f.clock->Advance(1h);
  ASSERT_OK_AND_ASSIGN(purged, f.store->Purge());
  EXPECT_EQ(purged, 5u);
  for (int i = 5; i < 10; ++i) {
    ASSERT_OK_AND_ASSIGN(auto kept, f.store->Get("k" + std::to_string(i)));
    EXPECT_TRUE(kept.has_value()) << i;
  }
  f.clock->Advance(10min);
  ASSERT_OK_AND_ASSIGN(purged, f.store->Purge());
  EXPECT_EQ(purged, 5u);
}

// Execute waits in real time (Options::execute_wait, a steady clock), not in wall-clock time:
// a backward jump that lengthens another owner's lease by an hour does not make Execute hang
// for an hour; it gives up after execute_wait with kInProgress and runs nothing.
TEST(Clock, ExecuteWaitsInRealTimeWhateverTheWallClockDoes) {
  Fixture f(300ms);
  ASSERT_NE(f.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto holder, f.store->Begin("k", kLease30s));
  f.clock->Advance(-1h);
  bool ran = false;
  const auto started = std::chrono::steady_clock::now();
  auto result = f.store->Execute("k", kLease30s, [&](idem::Attempt&) {
    ran = true;
    return std::string("x");
  });
  const auto waited = std::chrono::steady_clock::now() - started;
  EXPECT_FALSE(ran);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), Status::Code::kInProgress) << result.status().ToString();
  EXPECT_LT(waited, 5s);
  ASSERT_OK(f.store->Complete("k", holder.token, "holder's"));
  ASSERT_OK_AND_ASSIGN(
      auto replay, f.store->Execute("k", kLease30s, [](idem::Attempt&) { return std::string(); }));
  EXPECT_TRUE(replay.replayed);
  EXPECT_EQ(replay.result, "holder's");
}

// A forward jump while Execute's function runs: the lease can expire before the keeper renews
// it, and another caller takes the key over. Fencing decides: the first function's result is
// refused (kLeaseLost), so the key keeps the one answer the new owner stores.
TEST(Clock, AForwardJumpDuringExecuteLosesTheLeaseToFencing) {
  Fixture f;
  ASSERT_NE(f.store, nullptr);
  uint64_t other_token = 0;
  auto result = f.store->Execute("k", kLease30s, [&](idem::Attempt&) -> idem::Result<std::string> {
    f.clock->Advance(2h);  // past the lease and any renewal
    auto other = f.store->Begin("k", kLease30s);
    if (!other.ok()) return other.status();
    EXPECT_EQ(other->outcome, Outcome::kAcquired);
    EXPECT_TRUE(other->took_over);
    other_token = other->token;
    return std::string("first");
  });
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), Status::Code::kLeaseLost) << result.status().ToString();
  ASSERT_OK(f.store->Complete("k", other_token, "second"));
  ASSERT_OK_AND_ASSIGN(auto replay, f.store->Begin("k", kLease30s));
  EXPECT_EQ(replay.outcome, Outcome::kReplay);
  EXPECT_EQ(replay.record.result, "second");
}

// Tokens do not come from the clock: after a backward jump they still increase, across a
// reopen too.
TEST(Clock, TokensIncreaseWhateverTheClockDoes) {
  Fixture f;
  ASSERT_NE(f.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto a, f.store->Begin("a", kLease30s));
  f.clock->Advance(-24h * 365);
  ASSERT_OK_AND_ASSIGN(auto b, f.store->Begin("b", kLease30s));
  EXPECT_GT(b.token, a.token);
  f.store.reset();
  f.store = idem_test::OpenStore(f.dir.StorePath(), TestOptions(f.clock));
  ASSERT_NE(f.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto c, f.store->Begin("c", kLease30s));
  EXPECT_GT(c.token, b.token);
}

}  // namespace
