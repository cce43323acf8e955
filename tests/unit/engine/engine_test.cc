// The state machine, exhaustively: every stored situation crossed with every request, at times
// before and after the lease and the retention, with and without fingerprints.

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "engine/state_machine.h"

namespace idem::engine {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const TimePoint kStart = TimePoint(std::chrono::hours(24 * 365 * 50));
constexpr milliseconds kLease = seconds(10);
constexpr milliseconds kRetention = std::chrono::hours(1);
constexpr uint64_t kStoredToken = 40;
constexpr uint64_t kFreshToken = 1000;

// A token source that hands out `token` (kFreshToken by default).
auto Fresh(uint64_t token = kFreshToken) {
  return [token](uint64_t /*above*/) -> idem::Result<uint64_t> { return token; };
}

// The situations a stored record can be in, as seen at time `kStart + 1s`.
enum class Situation {
  kNone,
  kRetentionExpired,
  kPendingLive,
  kPendingTimedOut,
  kDone,
  kFailedRetryable,
  kFailedTerminal,
};

const std::vector<Situation> kSituations = {Situation::kNone,          Situation::kRetentionExpired,
                                            Situation::kPendingLive,   Situation::kPendingTimedOut,
                                            Situation::kDone,          Situation::kFailedRetryable,
                                            Situation::kFailedTerminal};

std::string Name(Situation s) {
  switch (s) {
    case Situation::kNone:
      return "none";
    case Situation::kRetentionExpired:
      return "retention-expired";
    case Situation::kPendingLive:
      return "pending-live";
    case Situation::kPendingTimedOut:
      return "pending-timed-out";
    case Situation::kDone:
      return "done";
    case Situation::kFailedRetryable:
      return "failed-retryable";
    case Situation::kFailedTerminal:
      return "failed-terminal";
  }
  return "?";
}

const TimePoint kNow = kStart + seconds(1);

// The decisions take the stored record to move from (no copy on the hot path); a test that
// reads its stored record again passes a copy.
std::optional<Record> Copy(const std::optional<Record>& stored) { return stored; }

// What a backend found out about `stored`'s holder: its process is dead.
ClaimFacts DeadHolder(const std::optional<Record>& stored) {
  return {.judged = stored ? stored->holder : Holder{}, .holder_is_dead = true};
}

std::optional<Record> Stored(Situation situation, std::string_view fingerprint) {
  if (situation == Situation::kNone) return std::nullopt;
  Record r;
  r.key = "k";
  r.type = "pay";
  r.fingerprint = std::string(fingerprint);
  r.checkpoint = "step-1";
  r.token = kStoredToken;
  r.attempts = 3;
  r.created = kStart - seconds(100);
  r.updated = kStart - seconds(1);
  r.lease_deadline = kNow + seconds(5);
  r.expires = kNow + kRetention;
  switch (situation) {
    case Situation::kNone:
      break;
    case Situation::kRetentionExpired:
      r.state = State::kDone;
      r.result = "old";
      r.expires = kNow;  // expiry is inclusive: at `expires` the record is gone
      break;
    case Situation::kPendingLive:
      r.state = State::kPending;
      break;
    case Situation::kPendingTimedOut:
      r.state = State::kPending;
      r.lease_deadline = kNow;  // a lease ends at its deadline
      break;
    case Situation::kDone:
      r.state = State::kDone;
      r.result = "receipt";
      break;
    case Situation::kFailedRetryable:
      r.state = State::kFailed;
      r.result = "bank unreachable";
      r.retryable = true;
      break;
    case Situation::kFailedTerminal:
      r.state = State::kFailed;
      r.result = "card declined";
      break;
  }
  return r;
}

BeginRequest Request(std::string_view fingerprint) {
  return {.key = "k",
          .type = "pay",
          .fingerprint = fingerprint,
          .lease = kLease,
          .retention = kRetention};
}

// The api.md table, written out row by row.
struct BeginExpectation {
  Outcome outcome;
  bool took_over = false;
  bool write = false;
};

BeginExpectation ExpectedBegin(Situation situation) {
  switch (situation) {
    case Situation::kNone:
    case Situation::kRetentionExpired:
      return {Outcome::kAcquired, false, true};
    case Situation::kPendingLive:
      return {Outcome::kInProgress};
    case Situation::kPendingTimedOut:
      return {Outcome::kAcquired, true, true};
    case Situation::kDone:
      return {Outcome::kReplay};
    case Situation::kFailedRetryable:
      return {Outcome::kAcquired, false, true};
    case Situation::kFailedTerminal:
      return {Outcome::kFailed};
  }
  return {Outcome::kMismatch};
}

bool HasLiveRecord(Situation s) {
  return s != Situation::kNone && s != Situation::kRetentionExpired;
}

TEST(Engine, BeginFollowsTheTableForEverySituationAndFingerprint) {
  // (stored fingerprint, requested fingerprint, mismatch expected when a live record exists)
  const std::vector<std::tuple<std::string, std::string, bool>> fingerprints = {{"", "", false},
                                                                                {"", "aa", false},
                                                                                {"aa", "", false},
                                                                                {"aa", "aa", false},
                                                                                {"aa", "bb", true}};
  for (Situation situation : kSituations) {
    for (const auto& [stored_fp, requested_fp, differ] : fingerprints) {
      SCOPED_TRACE(Name(situation) + " stored fp '" + stored_fp + "' requested '" + requested_fp +
                   "'");
      const std::optional<Record> stored = Stored(situation, stored_fp);
      int draws = 0;
      uint64_t drawn_above = 0;
      const BeginDecision d = DecideBegin(Copy(stored), Request(requested_fp), kNow,
                                          [&](uint64_t above) -> idem::Result<uint64_t> {
                                            ++draws;
                                            drawn_above = above;
                                            return kFreshToken;
                                          });
      // A token is drawn for a write, and only then, above the stored record's token.
      EXPECT_EQ(draws, d.write ? 1 : 0);
      if (d.write) {
        EXPECT_EQ(drawn_above, HasLiveRecord(situation) ? kStoredToken : 0u);
      }
      BeginExpectation want = ExpectedBegin(situation);
      if (differ && HasLiveRecord(situation)) want = {Outcome::kMismatch};
      EXPECT_EQ(d.claim.outcome, want.outcome);
      EXPECT_EQ(d.claim.took_over, want.took_over);
      EXPECT_EQ(d.write, want.write);

      const Record& r = d.claim.record;
      switch (d.claim.outcome) {
        case Outcome::kAcquired: {
          EXPECT_EQ(d.claim.token, kFreshToken);
          EXPECT_EQ(r.token, kFreshToken);
          EXPECT_EQ(r.state, State::kPending);
          EXPECT_FALSE(r.timed_out);
          EXPECT_TRUE(r.result.empty());
          EXPECT_EQ(r.lease_deadline, kNow + kLease);
          EXPECT_EQ(r.expires, kNow + kRetention);
          EXPECT_EQ(r.updated, kNow);
          const bool fresh = !HasLiveRecord(situation);
          EXPECT_EQ(r.attempts, fresh ? 1u : 4u);
          EXPECT_EQ(r.created, fresh ? kNow : kStart - seconds(100));
          // The checkpoint survives a takeover and a retry; a fresh record has none.
          EXPECT_EQ(r.checkpoint, fresh ? "" : "step-1");
          // The first non-empty fingerprint sticks.
          const std::string want_fp =
              fresh ? requested_fp : (stored_fp.empty() ? requested_fp : stored_fp);
          EXPECT_EQ(r.fingerprint, want_fp);
          break;
        }
        case Outcome::kInProgress:
          EXPECT_EQ(d.claim.retry_after, seconds(5));
          EXPECT_EQ(r.token, kStoredToken);
          break;
        case Outcome::kReplay:
          EXPECT_EQ(r.result, "receipt");
          break;
        case Outcome::kFailed:
          EXPECT_EQ(r.result, "card declined");
          break;
        case Outcome::kMismatch:
          EXPECT_EQ(r.fingerprint, stored_fp);
          EXPECT_EQ(d.claim.token, 0u);
          break;
      }
    }
  }
}

TEST(Engine, BeginKeepsTokensIncreasingPerKeyEvenWithASmallFreshToken) {
  const auto stored = Stored(Situation::kFailedRetryable, "");
  const BeginDecision d = DecideBegin(Copy(stored), Request(""), kNow, Fresh(7));
  EXPECT_EQ(d.claim.token, kStoredToken + 1);
}

TEST(Engine, BeginThatCannotDrawATokenWritesNothingAndSaysWhy) {
  for (Situation situation : {Situation::kNone, Situation::kFailedRetryable}) {
    const BeginDecision d =
        DecideBegin(Stored(situation, ""), Request(""), kNow,
                    [](uint64_t) -> idem::Result<uint64_t> { return Status::IOError("disk"); });
    EXPECT_FALSE(d.write) << Name(situation);
    EXPECT_EQ(d.status.code(), Status::Code::kIOError) << Name(situation);
  }
}

TEST(Engine, AcquiringRecordsTheHolder) {
  BeginRequest request = Request("");
  request.holder = {.pid = 12, .process_start = 34, .request_id = 56, .took_over = true};
  const BeginDecision fresh = DecideBegin(std::nullopt, request, kNow, Fresh());
  EXPECT_EQ(fresh.claim.record.holder,
            (Holder{.pid = 12, .process_start = 34, .request_id = 56, .took_over = false}));
  const BeginDecision taken =
      DecideBegin(Stored(Situation::kPendingTimedOut, ""), request, kNow, Fresh());
  EXPECT_TRUE(taken.claim.record.holder.took_over);
  EXPECT_EQ(taken.claim.record.holder.request_id, 56u);
}

TEST(Engine, AResentBeginGetsItsOwnClaimBack) {
  auto stored = Stored(Situation::kPendingLive, "");
  stored->holder = {.pid = 1, .process_start = 2, .request_id = 77, .took_over = true};
  BeginRequest request = Request("");
  request.holder = {.pid = 1, .process_start = 2, .request_id = 77};
  const BeginDecision d = DecideBegin(Copy(stored), request, kNow, Fresh());
  EXPECT_EQ(d.claim.outcome, Outcome::kAcquired);
  EXPECT_EQ(d.claim.token, kStoredToken);
  EXPECT_TRUE(d.claim.took_over);
  EXPECT_FALSE(d.write);
  // Another call from the same process is a different request: it must wait.
  request.holder.request_id = 78;
  EXPECT_EQ(DecideBegin(Copy(stored), request, kNow, Fresh()).claim.outcome, Outcome::kInProgress);
  // Request id 0 means "unknown" and never matches.
  stored->holder.request_id = 0;
  request.holder.request_id = 0;
  EXPECT_EQ(DecideBegin(Copy(stored), request, kNow, Fresh()).claim.outcome, Outcome::kInProgress);
}

TEST(Engine, ALiveLeaseOfADeadHolderIsTakenOver) {
  const auto stored = Stored(Situation::kPendingLive, "");
  const BeginDecision d = DecideBegin(Copy(stored), Request(""), kNow, Fresh(), DeadHolder(stored));
  EXPECT_EQ(d.claim.outcome, Outcome::kAcquired);
  EXPECT_TRUE(d.claim.took_over);
  EXPECT_EQ(d.claim.record.attempts, 4u);
  // A dead holder changes nothing for records that are not pending.
  for (Situation s : {Situation::kDone, Situation::kFailedTerminal}) {
    const auto other = Stored(s, "");
    EXPECT_EQ(DecideBegin(Copy(other), Request(""), kNow, Fresh(), DeadHolder(other)).claim.outcome,
              ExpectedBegin(s).outcome);
  }
}

// A renewal grace keeps a timed-out claim for its holder when it covers it: a lease that ended
// after the grace's start, on a record not written since renewals became possible.
TEST(Engine, ARenewalGraceKeepsATimedOutClaimItCovers) {
  const auto stored = Stored(Situation::kPendingTimedOut, "");
  ASSERT_TRUE(stored.has_value());
  RenewalGrace grace{.lease_ended_after = stored->lease_deadline - std::chrono::seconds(1),
                     .written_before = stored->updated + std::chrono::microseconds(1),
                     .left = std::chrono::milliseconds(1500)};
  const ClaimFacts graces{.graces = {RenewalGrace{}, grace}};
  BeginDecision d = DecideBegin(Copy(stored), Request(""), kNow, Fresh(), graces);
  EXPECT_EQ(d.claim.outcome, Outcome::kInProgress);
  EXPECT_EQ(d.claim.retry_after, std::chrono::milliseconds(1500));
  EXPECT_FALSE(d.write);
  // A holder proven dead gives its claim up at once, grace or not.
  ClaimFacts dead = graces;
  dead.judged = stored->holder;
  dead.holder_is_dead = true;
  d = DecideBegin(Copy(stored), Request(""), kNow, Fresh(), dead);
  EXPECT_EQ(d.claim.outcome, Outcome::kAcquired);
  EXPECT_TRUE(d.claim.took_over);
  // Not covered: the lease ended before the grace's start, the record was written since (its
  // holder renewed or wrote after renewals became possible again), or the grace is over.
  RenewalGrace ended_before = grace, written_since = grace, over = grace;
  ended_before.lease_ended_after = stored->lease_deadline;
  written_since.written_before = stored->updated;
  over.left = std::chrono::milliseconds(0);
  for (const RenewalGrace& other : {ended_before, written_since, over}) {
    d = DecideBegin(Copy(stored), Request(""), kNow, Fresh(), ClaimFacts{.graces = {other}});
    EXPECT_EQ(d.claim.outcome, Outcome::kAcquired);
  }
  // A grace changes nothing for a live lease or a record that is not pending.
  for (Situation s : {Situation::kPendingLive, Situation::kDone, Situation::kFailedRetryable}) {
    EXPECT_EQ(DecideBegin(Stored(s, ""), Request(""), kNow, Fresh(), graces).claim.outcome,
              ExpectedBegin(s).outcome);
  }
}

// A backend judges a holder before it locks the key: a claim taken over since then has another
// holder, and the judgement says nothing about it.
TEST(Engine, AHolderJudgedDeadGivesUpOnlyAClaimItStillHolds) {
  auto stored = Stored(Situation::kPendingLive, "");
  stored->holder = {.pid = 10, .process_start = 20, .pid_scope = 30, .request_id = 40};
  ClaimFacts facts = DeadHolder(stored);
  stored->holder.request_id = 41;  // another Begin of the same process took it over since
  BeginDecision d = DecideBegin(Copy(stored), Request(""), kNow, Fresh(), facts);
  EXPECT_EQ(d.claim.outcome, Outcome::kInProgress);
  EXPECT_FALSE(d.write);
  facts.judged = stored->holder;
  d = DecideBegin(Copy(stored), Request(""), kNow, Fresh(), facts);
  EXPECT_EQ(d.claim.outcome, Outcome::kAcquired);
  EXPECT_TRUE(d.claim.took_over);
}

// The graces are looked for only when a read found the lease over: a lease that ran out between
// that read and the decision is answered kInProgress, asking for them, and nothing is written.
TEST(Engine, ALeaseThatRanOutWithoutItsGracesGatheredAsksForThem) {
  const ClaimFacts not_gathered{.graces_gathered = false};
  int draws = 0;
  const auto count_draws = [&](uint64_t) -> idem::Result<uint64_t> {
    ++draws;
    return kFreshToken;
  };
  BeginDecision d = DecideBegin(Stored(Situation::kPendingTimedOut, ""), Request(""), kNow,
                                count_draws, not_gathered);
  EXPECT_EQ(d.claim.outcome, Outcome::kInProgress);
  EXPECT_TRUE(d.needs_graces);
  EXPECT_FALSE(d.write);
  EXPECT_EQ(draws, 0);
  EXPECT_EQ(d.claim.record.token, kStoredToken);  // the claim to gather them for
  // Every other situation is decided as with the graces known.
  for (Situation s : kSituations) {
    if (s == Situation::kPendingTimedOut) continue;
    SCOPED_TRACE(Name(s));
    d = DecideBegin(Stored(s, ""), Request(""), kNow, Fresh(), not_gathered);
    EXPECT_FALSE(d.needs_graces);
    EXPECT_EQ(d.claim.outcome, ExpectedBegin(s).outcome);
  }
}

// A backend answers settled records from a plain read, without the key's lock: that answer is
// the one DecideBegin gives, for every situation and fingerprint, and there is none for a record
// DecideBegin would write or keep waiting.
TEST(Engine, TheSettledAnswerIsDecideBeginsWhereNothingIsWritten) {
  for (Situation situation : kSituations) {
    for (const auto& [stored_fp, requested_fp] :
         std::vector<std::pair<std::string, std::string>>{{"", ""}, {"aa", "aa"}, {"aa", "bb"}}) {
      SCOPED_TRACE(Name(situation) + " " + stored_fp + " " + requested_fp);
      const std::optional<Record> stored = Stored(situation, stored_fp);
      const BeginDecision d = DecideBegin(Copy(stored), Request(requested_fp), kNow, Fresh());
      std::optional<Record> visible = Copy(stored);
      MakeVisible(visible, kNow);
      const std::optional<Claim> settled = SettledAnswer(visible, Request(requested_fp));
      const Outcome o = d.claim.outcome;
      EXPECT_EQ(settled.has_value(),
                o == Outcome::kReplay || o == Outcome::kFailed || o == Outcome::kMismatch);
      if (!settled) continue;
      EXPECT_FALSE(d.write);
      EXPECT_EQ(settled->outcome, o);
      EXPECT_TRUE(settled->record == d.claim.record);
    }
  }
}

TEST(Engine, RetryAfterRoundsUpAndIsAtLeastOneMillisecond) {
  auto stored = Stored(Situation::kPendingLive, "");
  stored->lease_deadline = kNow + std::chrono::microseconds(1500);
  EXPECT_EQ(DecideBegin(Copy(stored), Request(""), kNow, Fresh()).claim.retry_after,
            milliseconds(2));
  stored->lease_deadline = kNow + std::chrono::microseconds(1);
  EXPECT_EQ(DecideBegin(Copy(stored), Request(""), kNow, Fresh()).claim.retry_after,
            milliseconds(1));
}

TEST(Engine, RetentionNeverEndsBeforeTheLease) {
  BeginRequest request = Request("");
  request.retention = milliseconds(5);
  const BeginDecision d = DecideBegin(std::nullopt, request, kNow, Fresh());
  EXPECT_EQ(d.claim.record.expires, kNow + kLease);
}

enum class Call { kComplete, kFail, kFailTerminal, kExtend, kCheckpoint };
const std::vector<Call> kCalls = {Call::kComplete, Call::kFail, Call::kFailTerminal, Call::kExtend,
                                  Call::kCheckpoint};

TransitionRequest MakeTransition(Call call, uint64_t token, std::string_view payload) {
  TransitionRequest request;
  request.token = token;
  request.payload = payload;
  request.lease = seconds(30);
  switch (call) {
    case Call::kComplete:
      request.kind = TransitionKind::kComplete;
      break;
    case Call::kFail:
      request.kind = TransitionKind::kFail;
      break;
    case Call::kFailTerminal:
      request.kind = TransitionKind::kFail;
      request.failure = Failure::kTerminal;
      break;
    case Call::kExtend:
      request.kind = TransitionKind::kExtend;
      break;
    case Call::kCheckpoint:
      request.kind = TransitionKind::kSaveCheckpoint;
      break;
  }
  return request;
}

TEST(Engine, TransitionsNeedTheCurrentTokenOnAPendingRecord) {
  for (Situation situation : kSituations) {
    for (Call call : kCalls) {
      for (uint64_t token : {kStoredToken, kStoredToken - 1, kStoredToken + 1}) {
        SCOPED_TRACE(Name(situation) + " call " + std::to_string(static_cast<int>(call)) +
                     " token " + std::to_string(token));
        const auto stored = Stored(situation, "");
        const TransitionDecision d =
            DecideTransition(Copy(stored), MakeTransition(call, token, "payload"), kNow);
        if (!HasLiveRecord(situation)) {
          EXPECT_EQ(d.status.code(), Status::Code::kNotFound);
          EXPECT_FALSE(d.write);
          continue;
        }
        const bool pending =
            situation == Situation::kPendingLive || situation == Situation::kPendingTimedOut;
        if (!pending || token != kStoredToken) {
          EXPECT_EQ(d.status.code(), Status::Code::kLeaseLost) << d.status.ToString();
          EXPECT_FALSE(d.write);
          continue;
        }
        // The owner may still finish after its lease passed, as long as nobody took over.
        ASSERT_TRUE(d.status.ok()) << d.status.ToString();
        ASSERT_TRUE(d.write);
        const Record& r = *d.write;
        EXPECT_EQ(r.updated, kNow);
        EXPECT_EQ(r.token, kStoredToken);
        EXPECT_EQ(r.attempts, 3u);
        switch (call) {
          case Call::kComplete:
            EXPECT_EQ(r.state, State::kDone);
            EXPECT_EQ(r.result, "payload");
            break;
          case Call::kFail:
          case Call::kFailTerminal:
            EXPECT_EQ(r.state, State::kFailed);
            EXPECT_EQ(r.result, "payload");
            EXPECT_EQ(r.retryable, call == Call::kFail);
            break;
          case Call::kExtend:
            EXPECT_EQ(r.state, State::kPending);
            EXPECT_EQ(r.lease_deadline, kNow + seconds(30));
            EXPECT_FALSE(r.timed_out);
            break;
          case Call::kCheckpoint:
            EXPECT_EQ(r.state, State::kPending);
            EXPECT_EQ(r.checkpoint, "payload");
            break;
        }
      }
    }
  }
}

// The holder serves a pending claim only: a record that leaves pending keeps none but whether
// its attempt took over another; a claim that stays pending keeps its holder.
TEST(Engine, ARecordThatLeavesPendingKeepsNoHolder) {
  const Holder holder = {
      .pid = 7, .process_start = 8, .pid_scope = 9, .request_id = 10, .took_over = true};
  for (Call call : kCalls) {
    SCOPED_TRACE("call " + std::to_string(static_cast<int>(call)));
    auto stored = Stored(Situation::kPendingLive, "");
    stored->holder = holder;
    const TransitionDecision d =
        DecideTransition(Copy(stored), MakeTransition(call, kStoredToken, "payload"), kNow);
    ASSERT_TRUE(d.write);
    const bool ends = call != Call::kExtend && call != Call::kCheckpoint;
    EXPECT_EQ(d.write->holder, ends ? Holder{.took_over = true} : holder);
  }
}

TEST(Engine, RepeatingTheFinalCallWithTheSameTokenAndPayloadIsOk) {
  auto done = Stored(Situation::kDone, "");
  auto same =
      DecideTransition(Copy(done), MakeTransition(Call::kComplete, kStoredToken, "receipt"), kNow);
  EXPECT_TRUE(same.status.ok());
  EXPECT_FALSE(same.write);
  auto other =
      DecideTransition(Copy(done), MakeTransition(Call::kComplete, kStoredToken, "x"), kNow);
  EXPECT_EQ(other.status.code(), Status::Code::kLeaseLost);
  auto stale = DecideTransition(Copy(done), MakeTransition(Call::kComplete, 1, "receipt"), kNow);
  EXPECT_EQ(stale.status.code(), Status::Code::kLeaseLost);

  auto failed = Stored(Situation::kFailedTerminal, "");
  EXPECT_TRUE(DecideTransition(Copy(failed),
                               MakeTransition(Call::kFailTerminal, kStoredToken, "card declined"),
                               kNow)
                  .status.ok());
  // The same error as retryable is a different call.
  EXPECT_EQ(DecideTransition(Copy(failed),
                             MakeTransition(Call::kFail, kStoredToken, "card declined"), kNow)
                .status.code(),
            Status::Code::kLeaseLost);
}

TEST(Engine, ExtendPushesRetentionPastTheNewLease) {
  auto stored = Stored(Situation::kPendingLive, "");
  stored->expires = kNow + seconds(20);
  auto d = DecideTransition(Copy(stored), MakeTransition(Call::kExtend, kStoredToken, ""), kNow);
  ASSERT_TRUE(d.write);
  EXPECT_EQ(d.write->expires, kNow + seconds(30));
}

// A storage that writes a fresh claim in one step sends the record made at the epoch and lets its
// server add its own time to every time in it (storage/postgres/pg_storage.cc), then moves its
// copy by ShiftTimes: that is only the engine's record if each time is `now` plus an offset that
// does not depend on `now`.
TEST(Engine, AFreshClaimIsBeginsAnswerOnAnAbsentKeyWithTimesThatAreNowPlusFixedOffsets) {
  const TimePoint epoch{};
  using Times = std::pair<milliseconds, milliseconds>;  // lease, retention
  for (const auto& [lease, retention] :
       {Times{kLease, kRetention}, Times{kLease, kLease}, Times{seconds(30), seconds(5)}}) {
    BeginRequest request = Request("fp");
    request.lease = lease;
    request.retention = retention;
    request.holder = {.pid = 7, .process_start = 8, .pid_scope = 9, .request_id = 10};
    const Record at_epoch = FreshClaim(request, epoch, kFreshToken).record;
    for (const TimePoint now : {kNow, kNow + std::chrono::microseconds(1), kStart + kRetention}) {
      const Claim claim = FreshClaim(request, now, kFreshToken);
      // What DecideBegin answers and writes on an absent key and on a retention-expired one.
      for (Situation absent : {Situation::kNone, Situation::kRetentionExpired}) {
        std::optional<Record> stored = Stored(absent, "fp");
        if (stored) stored->expires = now;
        const BeginDecision decided = DecideBegin(Copy(stored), request, now, Fresh());
        ASSERT_TRUE(decided.write);
        EXPECT_EQ(decided.claim.record, claim.record);
        EXPECT_EQ(decided.claim.outcome, claim.outcome);
        EXPECT_EQ(decided.claim.token, claim.token);
        EXPECT_EQ(decided.claim.took_over, claim.took_over);
      }
      EXPECT_EQ(claim.outcome, Outcome::kAcquired);
      EXPECT_EQ(claim.token, kFreshToken);
      Record shifted = at_epoch;
      ShiftTimes(shifted, now);
      EXPECT_EQ(claim.record, shifted);
    }
  }
}

// A storage that writes a transition in one step guards it by TransitionApplies and writes what
// ApplyTransition does; it must be exactly what DecideTransition writes, in every situation.
TEST(Engine, DecideTransitionWritesExactlyWhenTransitionAppliesWhatApplyTransitionDoes) {
  int applied = 0;
  for (Situation situation : kSituations) {
    if (situation == Situation::kNone) continue;
    for (Call call : kCalls) {
      for (uint64_t token : {kStoredToken, kStoredToken + 1}) {
        SCOPED_TRACE(Name(situation) + " call " + std::to_string(static_cast<int>(call)) +
                     " token " + std::to_string(token));
        const std::optional<Record> stored = Stored(situation, "");
        const TransitionRequest request = MakeTransition(call, token, "payload");
        const TransitionDecision decided = DecideTransition(Copy(stored), request, kNow);
        ASSERT_EQ(decided.write.has_value(), TransitionApplies(*stored, request, kNow));
        if (!decided.write) continue;
        Record patched = *stored;
        ApplyTransition(patched, request, kNow);
        EXPECT_EQ(*decided.write, patched);
        ++applied;
      }
    }
  }
  EXPECT_EQ(applied, 2 * static_cast<int>(kCalls.size()));  // the two pending situations
}

TEST(Engine, VisibleHidesExpiredRecordsAndDerivesTimeout) {
  EXPECT_FALSE(Visible(Stored(Situation::kRetentionExpired, ""), kNow));
  EXPECT_FALSE(Visible(std::nullopt, kNow));
  EXPECT_TRUE(Visible(Stored(Situation::kPendingTimedOut, ""), kNow)->timed_out);
  EXPECT_FALSE(Visible(Stored(Situation::kPendingLive, ""), kNow)->timed_out);
  // A done record whose lease deadline passed is not "timed out": only pending ones are.
  EXPECT_FALSE(Visible(Stored(Situation::kDone, ""), kNow + seconds(60))->timed_out);
}

}  // namespace
}  // namespace idem::engine
