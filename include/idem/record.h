// A stored idempotency record and its states.

#ifndef IDEM_RECORD_H_
#define IDEM_RECORD_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "idem/export.h"

namespace idem {

// The stored state of a key. Never change these values: they are persisted.
enum class State : uint8_t { kPending = 0, kDone = 1, kFailed = 2 };

// Who acquired a record's current attempt, and how. Recorded by Begin so that a claim whose
// process has died can be taken over without waiting for its lease, and so that a Begin resent
// after a lost reply gets its own claim back instead of kInProgress.
//
// Part of the API, to read: it tells an operator or a tool which process holds a pending claim.
// Kept only while the record is pending: a Complete or Fail leaves all of it 0 but `took_over`.
// The pid and start time mean something only on the host, and in the PID and time namespaces,
// that `pid_scope` names. Set by idem; a value a caller puts in a Record changes nothing stored.
struct Holder {
  uint32_t pid = 0;            // the acquiring process (0: unknown)
  uint64_t process_start = 0;  // its start time (clock ticks after boot), so a reused pid differs
  // Where `pid` and `process_start` mean something: a digest of the boot id and of the PID and
  // time namespaces of the process that read them (the store's owner). A holder is judged dead
  // only by a process of the same scope. 0: unknown, never judged dead.
  uint64_t pid_scope = 0;
  uint64_t request_id = 0;  // random id of the acquiring Begin call
  bool took_over = false;   // the attempt took over an expired or abandoned one

  friend bool operator==(const Holder&, const Holder&) = default;
};

struct Record {
  using TimePoint = std::chrono::system_clock::time_point;

  std::string key;
  std::string type;  // label such as "pay", "refund"; for filtering and stats
  State state = State::kPending;
  // Derived on read, never stored: kPending and lease_deadline has passed ("timeout").
  bool timed_out = false;
  // kDone: the stored result; kFailed: the error text; kPending: empty.
  std::string result;
  // Digest of the request payload; empty: not checked.
  std::string fingerprint;
  // Recovery point saved by the owner while pending; kept across takeovers so that the next
  // owner can reconcile.
  std::string checkpoint;
  // Fencing token of the latest attempt, 1 to 2^63-1. Strictly increasing per key while the
  // record lives, and never reused by a store even after the key is forgotten or purged (in a
  // store directory it keeps increasing across those too; docs/semantics.md, "Complete, Fail,
  // Extend, SaveCheckpoint: fencing tokens").
  uint64_t token = 0;
  // How many times the key was acquired.
  uint32_t attempts = 0;
  // kFailed: whether the failure was Failure::kRetryable, so the next Begin acquires the key
  // again (true), or Failure::kTerminal, final (false). The C API reads it as
  // idem_record_retryable. False in other states.
  bool retryable = false;
  // The holder of the pending attempt (all 0 but took_over once done or failed).
  Holder holder;
  // Times are stored with microsecond precision. `expires` is the end of retention.
  TimePoint created, updated, lease_deadline, expires;

  friend bool operator==(const Record&, const Record&) = default;
};

// "pending", "done", "failed".
IDEM_EXPORT std::string_view StateName(State state);

// The state as the tools show it: "pending", "done", "failed", or "timeout" for a pending record
// whose lease has passed.
IDEM_EXPORT std::string_view DisplayState(const Record& record);

}  // namespace idem

#endif  // IDEM_RECORD_H_
