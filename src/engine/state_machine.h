// The idempotency state machine as pure functions:
//   (stored record?, request, now) -> (answer, record to write?)
// No I/O, no locks, no clock reads: the storage layer reads the stored record under the key's
// lock, calls one of these, and writes what it returns in one atomic batch. RocksDB and
// PostgreSQL use these unchanged: under the key's stripe lock, or as an UPDATE conditional on the
// row's version and token (TransitionApplies).

#ifndef IDEM_ENGINE_STATE_MACHINE_H_
#define IDEM_ENGINE_STATE_MACHINE_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "idem/function_ref.h"
#include "idem/record.h"
#include "idem/status.h"
#include "idem/store.h"

namespace idem::engine {

using TimePoint = std::chrono::system_clock::time_point;

// True when the record's retention has passed: it is absent for every read.
inline bool IsExpired(const Record& record, TimePoint now) { return record.expires <= now; }

// The record a conditional Forget may remove (Store::ForgetIfUnchanged): the one that was read,
// told by its token and its updated time, which every write of a record changes.
struct AsRead {
  uint64_t token = 0;
  TimePoint updated{};
};
inline bool StillAsRead(const Record& stored, const AsRead& as_read) {
  return stored.token == as_read.token && stored.updated == as_read.updated;
}
// What a conditional Forget returns when the record changed since it was read.
Status ChangedSinceRead(std::string_view key);

// The stored record as a reader sees it: nullopt when retention expired, else with timed_out
// derived.
std::optional<Record> Visible(std::optional<Record> stored, TimePoint now);
// The same in place (the decisions below use it: a record is large to move).
void MakeVisible(std::optional<Record>& stored, TimePoint now);

struct BeginRequest {
  std::string_view key;
  std::string_view type;
  std::string_view fingerprint;
  std::chrono::milliseconds lease;      // > 0, defaults already applied
  std::chrono::milliseconds retention;  // > 0, defaults already applied
  // The caller's process and this Begin call's random id (took_over is ignored). A request id
  // equal to the stored holder's marks a resent Begin: it gets the same claim back.
  Holder holder;
};

// A time when claims whose lease ran out stay reserved for their holders, because the holders
// could not renew: the owner was stalled (stopped, frozen), or there was no owner (a failover).
// Such a claim answers kInProgress until the grace ends or its holder renews, ends or is proven
// dead (docs/semantics.md, "Stalls and the renewal grace").
struct RenewalGrace {
  // Covers pending records whose lease ended after this (they were live when renewals became
  // impossible) ...
  TimePoint lease_ended_after = TimePoint::min();
  // ... and that were last written before this (not renewed since renewals became possible).
  TimePoint written_before = TimePoint::max();
  // How much longer the grace lasts; > 0 while it is in force.
  std::chrono::milliseconds left{0};

  bool Covers(const Record& record) const {
    return left.count() > 0 && record.state == State::kPending &&
           record.lease_deadline > lease_ended_after && record.updated < written_before;
  }
};

// How much longer one of `graces` keeps `record` for its holder (the longest, when several
// cover it); 0 when none does.
std::chrono::milliseconds GraceLeft(const Record& record, std::span<const RenewalGrace> graces);

// The time a pending claim (`record`, visible) is kept for its holder: the lease left while it
// is live, else the longest of `graces` that covers it. Nullopt when neither holds: the claim may
// be taken over. Only while it is kept does it matter whether the holder's process died.
std::optional<std::chrono::milliseconds> KeptFor(const Record& record,
                                                 std::span<const RenewalGrace> graces,
                                                 TimePoint now);

// What a Begin on a pending claim may need besides the record, found out with I/O (the holder's
// process in /proc; the database server's incarnation for its outage grace). A backend gathers
// it before it locks the key, for the claim its first read found, so that no decision waits on
// I/O under a lock; DecideBegin only reads it. The defaults: every holder alive, no grace.
struct ClaimFacts {
  // The holder whose process was judged: `holder_is_dead` holds only for a claim it still holds
  // (a claim taken over since the judgement has another holder, counted alive).
  std::optional<Holder> judged;
  bool holder_is_dead = false;
  // The renewal graces in force. False when they were not looked for (the claim's lease was live
  // when it was read): a claim found timed out is then answered kInProgress, and the decision
  // asks for them (BeginDecision::needs_graces).
  bool graces_gathered = true;
  std::vector<RenewalGrace> graces;
};

struct BeginDecision {
  Claim claim;         // claim.record: the record as stored after the call
  bool write = false;  // true: store claim.record
  // Not OK when the key was to be acquired but no token could be drawn (`write` is false).
  Status status;
  // The claim's lease ran out and the graces were not gathered: the answer is kInProgress for
  // want of them. Gather them for claim.record and decide again.
  bool needs_graces = false;
};

// Draws a fencing token the storage has never handed out, above `above` (the stored record's
// token when the key has a record, else 0). It may fail: the storage could not reserve tokens.
using NextToken = FunctionRef<Result<uint64_t>(uint64_t above)>;

// The claim a Begin makes on a key without a record, at `now`, with `token`: what DecideBegin
// answers and stores then. Every time in its record is `now` plus an offset that does not depend
// on `now` (created and updated: none; lease_deadline: the lease; expires: the retention, at least
// the lease), so a storage whose server keeps the clock may send the record made at the epoch and
// let the server add its own time to each (storage/postgres/pg_storage.cc).
Claim FreshClaim(const BeginRequest& request, TimePoint now, uint64_t token);
// Moves a record that FreshClaim made at the epoch to `now`: each of its times gains `now`'s
// distance from the epoch. By the property above, FreshClaim(request, TimePoint{}, token)'s
// record so moved is FreshClaim(request, now, token)'s.
void ShiftTimes(Record& at_epoch, TimePoint now);

// A record that leaves pending keeps no holder: the holder serves a pending claim only (judging
// whether its process died, giving a resent Begin its own claim back), and a done record is
// most of what a store holds, so its 20-odd bytes are paid on every read, flush and compaction.
// Whether the attempt took over another stays: it is one flag bit. Used by the transitions out
// of pending, and by an import of a record that is not pending.
void ForgetHolder(Record& record);
// Whether `record` keeps what ForgetHolder leaves: true of every record a store writes (checked
// by IDEM_DCHECK where the storages write one).
bool KeepsNoHolder(const Record& record);

// Begin's answer on a record that no Begin changes, only Forget or expiry: a mismatch, a replay,
// a terminal failure. `visible` (MakeVisible applied) is moved into the claim then. Nullopt for
// every other record: DecideBegin decides it under the key's lock. A backend answers these from
// a plain read, without the lock; DecideBegin answers them the same way, by this.
std::optional<Claim> SettledAnswer(std::optional<Record>& visible, const BeginRequest& request);

// Decides Begin. `stored` is moved from (the claim takes the record where the read left it: a
// replay is little more than that read). `next_token` is called once when the key is acquired,
// and only then. `facts`: what the backend found out about a pending claim's holder and the
// renewal graces (ClaimFacts): a pending claim whose lease ran out and that a grace covers is
// still in progress; a holder proven dead gives its claim up without waiting for either.
BeginDecision DecideBegin(std::optional<Record>&& stored, const BeginRequest& request,
                          TimePoint now, NextToken next_token, const ClaimFacts& facts = {});

enum class TransitionKind { kComplete, kFail, kExtend, kSaveCheckpoint };

struct TransitionRequest {
  TransitionKind kind = TransitionKind::kComplete;
  uint64_t token = 0;
  std::string_view payload;               // kComplete: result; kFail: error; kSaveCheckpoint: data
  Failure failure = Failure::kRetryable;  // kFail only
  std::chrono::milliseconds lease{0};     // kExtend only: > 0, defaults already applied
};

struct TransitionDecision {
  Status status;
  std::optional<Record> write;  // the record to store, when the transition changes it
};

// Decides Complete, Fail, Extend and SaveCheckpoint: each needs the current token on a pending
// record (fencing), else kLeaseLost; kNotFound on an absent or retention-expired record.
// `stored` is moved from.
TransitionDecision DecideTransition(std::optional<Record>&& stored,
                                    const TransitionRequest& request, TimePoint now);

// The two halves of a transition that DecideTransition writes, for a storage that writes in one
// step (a guarded UPDATE) and asks DecideTransition only when the guard fails:
// whether `request` changes the stored record at `now` (pending, its token, retention not over)
// ...
bool TransitionApplies(const Record& stored, const TransitionRequest& request, TimePoint now);
// ... and what it then does to it.
void ApplyTransition(Record& record, const TransitionRequest& request, TimePoint now);

}  // namespace idem::engine

#endif  // IDEM_ENGINE_STATE_MACHINE_H_
