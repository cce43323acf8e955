#include "engine/state_machine.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "util/check.h"
#include "util/escape.h"

namespace idem::engine {
namespace {

using std::chrono::milliseconds;

// Time left until `deadline`, rounded up so a caller never retries a moment too early.
milliseconds TimeLeft(TimePoint deadline, TimePoint now) {
  auto left = std::chrono::ceil<milliseconds>(deadline - now);
  return std::max(left, milliseconds(1));
}

// The end of retention: never before the lease ends, so a live claim cannot vanish.
TimePoint RetentionEnd(TimePoint now, const BeginRequest& request) {
  return std::max(now + request.retention, now + request.lease);
}

std::string StaleTokenMessage(const Record& record, uint64_t token) {
  if (record.token != token) {
    return fmt::format("token {} is not the current token {}", token, record.token);
  }
  return fmt::format("token {} is current but the record is already {}", token,
                     StateName(record.state));
}

// Makes `next` (its token already set) the pending claim of `request`'s holder at `now`, and
// `claim` (whose took_over is set) the answer that acquired it.
void Acquire(Record next, const BeginRequest& request, TimePoint now, Claim& claim) {
  next.state = State::kPending;
  next.timed_out = false;
  next.updated = now;
  next.lease_deadline = now + request.lease;
  next.expires = RetentionEnd(now, request);

  next.holder = request.holder;
  next.holder.took_over = claim.took_over;

  claim.outcome = Outcome::kAcquired;
  claim.token = next.token;
  claim.record = std::move(next);
}

}  // namespace

void ForgetHolder(Record& record) { record.holder = Holder{.took_over = record.holder.took_over}; }

bool KeepsNoHolder(const Record& record) {
  return record.state == State::kPending ||
         record.holder == Holder{.took_over = record.holder.took_over};
}

Claim FreshClaim(const BeginRequest& request, TimePoint now, uint64_t token) {
  Record next;
  next.key = std::string(request.key);
  next.type = std::string(request.type);
  next.fingerprint = std::string(request.fingerprint);
  next.token = token;
  next.attempts = 1;
  next.created = now;
  Claim claim;
  Acquire(std::move(next), request, now, claim);
  return claim;
}

void ShiftTimes(Record& at_epoch, TimePoint now) {
  for (TimePoint* time :
       {&at_epoch.created, &at_epoch.updated, &at_epoch.lease_deadline, &at_epoch.expires}) {
    *time += now.time_since_epoch();
  }
}

void MakeVisible(std::optional<Record>& stored, TimePoint now) {
  if (!stored) return;
  if (IsExpired(*stored, now)) {
    stored.reset();
  } else {
    stored->timed_out = stored->state == State::kPending && stored->lease_deadline <= now;
  }
}

Status ChangedSinceRead(std::string_view key) {
  return Status::Conflict(fmt::format(
      "record {} changed since it was read (another token or a later write); nothing forgotten",
      EscapeKey(key)));
}

std::optional<Record> Visible(std::optional<Record> stored, TimePoint now) {
  MakeVisible(stored, now);
  return stored;
}

milliseconds GraceLeft(const Record& record, std::span<const RenewalGrace> graces) {
  milliseconds left{0};
  for (const RenewalGrace& grace : graces) {
    if (grace.Covers(record)) left = std::max(left, grace.left);
  }
  return left;
}

std::optional<milliseconds> KeptFor(const Record& record, std::span<const RenewalGrace> graces,
                                    TimePoint now) {
  if (!record.timed_out) return TimeLeft(record.lease_deadline, now);
  const milliseconds grace_left = GraceLeft(record, graces);
  if (grace_left.count() > 0) return grace_left;
  return std::nullopt;
}

std::optional<Claim> SettledAnswer(std::optional<Record>& visible, const BeginRequest& request) {
  if (!visible) return std::nullopt;
  Claim claim;
  if (!request.fingerprint.empty() && !visible->fingerprint.empty() &&
      request.fingerprint != visible->fingerprint) {
    claim.outcome = Outcome::kMismatch;
  } else if (visible->state == State::kDone) {
    claim.outcome = Outcome::kReplay;
  } else if (visible->state == State::kFailed && !visible->retryable) {
    claim.outcome = Outcome::kFailed;
  } else {
    return std::nullopt;
  }
  claim.record = std::move(*visible);
  return claim;
}

namespace {

// A Begin on a pending `record`: answered (true) when it is the same Begin resent, or the holder
// keeps it (its lease, or a grace, has not run out: kInProgress; or graces are needed first);
// false when the claim is to be taken over.
bool AnswerPending(Record& record, const BeginRequest& request, TimePoint now,
                   const ClaimFacts& facts, BeginDecision& decision) {
  Claim& claim = decision.claim;
  if (request.holder.request_id != 0 && request.holder.request_id == record.holder.request_id) {
    // The same Begin again, its first reply lost (a client resends after a failover).
    claim.outcome = Outcome::kAcquired;
    claim.token = record.token;
    claim.took_over = record.holder.took_over;
    claim.record = std::move(record);
    return true;
  }
  if (record.timed_out && !facts.graces_gathered) {
    decision.needs_graces = true;
    claim.outcome = Outcome::kInProgress;
    claim.retry_after = milliseconds(1);
    claim.record = std::move(record);
    return true;
  }
  const std::optional<milliseconds> kept = KeptFor(record, facts.graces, now);
  const bool holder_is_dead = facts.holder_is_dead && facts.judged == record.holder;
  if (kept && !holder_is_dead) {
    claim.outcome = Outcome::kInProgress;
    claim.retry_after = *kept;
    claim.record = std::move(record);
    return true;
  }
  return false;
}

}  // namespace

BeginDecision DecideBegin(std::optional<Record>&& stored, const BeginRequest& request,
                          TimePoint now, NextToken next_token, const ClaimFacts& facts) {
  BeginDecision decision;
  Claim& claim = decision.claim;
  MakeVisible(stored, now);

  if (!stored) {
    Result<uint64_t> token = next_token(0);
    if (!token.ok()) {
      decision.status = token.status();
      return decision;
    }
    decision.claim = FreshClaim(request, now, *token);
    decision.write = true;
    return decision;
  }
  if (std::optional<Claim> settled = SettledAnswer(stored, request)) {
    decision.claim = std::move(*settled);
    return decision;
  }
  Record& record = *stored;
  if (record.state == State::kPending) {
    if (AnswerPending(record, request, now, facts, decision)) return decision;
    claim.took_over = true;
  }
  const uint64_t stored_token = record.token;
  Result<uint64_t> token = next_token(stored_token);
  if (!token.ok()) {
    decision.status = token.status();
    claim.record = std::move(record);
    return decision;
  }
  Record next = std::move(record);
  next.result.clear();
  next.retryable = false;
  if (next.fingerprint.empty()) next.fingerprint = std::string(request.fingerprint);
  if (next.type.empty()) next.type = std::string(request.type);
  // The fresh token is already above every token handed out; max() keeps the per-key order
  // even if a store were ever restored from an older counter.
  next.token = std::max(*token, stored_token + 1);
  next.attempts += 1;
  Acquire(std::move(next), request, now, claim);
  decision.write = true;
  return decision;
}

TransitionDecision DecideTransition(std::optional<Record>&& stored,
                                    const TransitionRequest& request, TimePoint now) {
  MakeVisible(stored, now);
  if (!stored) return {Status::NotFound("no record for this key"), std::nullopt};
  Record& record = *stored;

  if (!TransitionApplies(record, request, now)) {
    // A repeat of the call that ended this attempt (its reply was lost) succeeds unchanged.
    const bool same_token = record.token == request.token;
    const bool repeated_complete = request.kind == TransitionKind::kComplete &&
                                   record.state == State::kDone && record.result == request.payload;
    const bool repeated_fail = request.kind == TransitionKind::kFail &&
                               record.state == State::kFailed && record.result == request.payload &&
                               record.retryable == (request.failure == Failure::kRetryable);
    if (same_token && (repeated_complete || repeated_fail)) return {Status::OK(), std::nullopt};
    return {Status::LeaseLost(StaleTokenMessage(record, request.token)), std::nullopt};
  }

  ApplyTransition(record, request, now);
  return {Status::OK(), std::move(record)};
}

bool TransitionApplies(const Record& stored, const TransitionRequest& request, TimePoint now) {
  return stored.state == State::kPending && stored.token == request.token &&
         !IsExpired(stored, now);
}

void ApplyTransition(Record& record, const TransitionRequest& request, TimePoint now) {
  switch (request.kind) {
    case TransitionKind::kComplete:
      record.state = State::kDone;
      record.result = std::string(request.payload);
      ForgetHolder(record);
      break;
    case TransitionKind::kFail:
      record.state = State::kFailed;
      record.result = std::string(request.payload);
      record.retryable = request.failure == Failure::kRetryable;
      ForgetHolder(record);
      break;
    case TransitionKind::kExtend:
      record.lease_deadline = now + request.lease;
      record.expires = std::max(record.expires, record.lease_deadline);
      break;
    case TransitionKind::kSaveCheckpoint:
      record.checkpoint = std::string(request.payload);
      break;
  }
  record.updated = now;
  record.timed_out = false;
  IDEM_DCHECK(KeepsNoHolder(record));
}

}  // namespace idem::engine
