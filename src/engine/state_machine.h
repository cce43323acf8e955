// The idempotency state machine as pure functions:
//   (stored record?, request, now) -> (answer, record to write?)
// No I/O, no locks, no clock reads: the storage layer reads the stored record under the key's
// lock, calls one of these, and writes what it returns in one atomic batch. Any storage backend
// (RocksDB here; a distributed engine later) reuses this unchanged.

#ifndef IDEM_ENGINE_STATE_MACHINE_H_
#define IDEM_ENGINE_STATE_MACHINE_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#include "idem/record.h"
#include "idem/status.h"
#include "idem/store.h"

namespace idem::engine {

using TimePoint = std::chrono::system_clock::time_point;

// True when the record's retention has passed: it is absent for every read.
inline bool IsExpired(const Record& record, TimePoint now) { return record.expires <= now; }

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

struct BeginDecision {
  Claim claim;         // claim.record: the record as stored after the call
  bool write = false;  // true: store claim.record
};

// Decides Begin. `fresh_token` is a token the store has never handed out; it is used when the
// key is acquired. `holder_is_dead`: the process holding the stored pending claim is known to
// have died, so its claim is taken over without waiting for the lease.
BeginDecision DecideBegin(std::optional<Record> stored, const BeginRequest& request, TimePoint now,
                          uint64_t fresh_token, bool holder_is_dead = false);

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
TransitionDecision DecideTransition(std::optional<Record> stored, const TransitionRequest& request,
                                    TimePoint now);

}  // namespace idem::engine

#endif  // IDEM_ENGINE_STATE_MACHINE_H_
