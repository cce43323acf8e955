// Status and Result<T>: how every idem call reports success or failure.
//
// No exception crosses the idem API (except one thrown by the caller's own callable inside
// Store::Execute, which is rethrown after the attempt is recorded). Instead every call returns a
// Status, or a Result<T> that holds either a T or a non-OK Status.
//
// Status and Result are values: copy and move them freely. They are not synchronized.

#ifndef IDEM_STATUS_H_
#define IDEM_STATUS_H_

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "idem/export.h"

namespace idem {

class [[nodiscard]] Status {
 public:
  // Callers may switch on these. The meaning of each is fixed; new codes may be added at the end.
  //
  // Besides the codes a call's comment names, any call on a store may return kIOError (the file
  // system failed), kCorruption (stored bytes cannot be decoded), kUnavailable (the store is
  // closing, its owner cannot be reached, or the handle was opened before fork()), kTimedOut (the
  // owner did not answer within Options::request_timeout) and kBusy (a failover found the store
  // held by a process that excludes this one). IsRetryable (idem/retry.h) tells which of them a
  // retry may cure. Opening a store, and reading a record, may return kNewerVersion: a newer
  // release of idem wrote it, in a format this one does not know; nothing is damaged, and a
  // release that knows the format reads it (docs/operations.md, "Upgrades and downgrades").
  enum class Code {
    kOk = 0,
    kInvalidArgument,  // the caller passed a bad value (empty key, oversized result, ...)
    kNotFound,         // no such record or store
    kInProgress,       // another owner holds a live lease on the key
    kMismatch,         // the key was used before with a different request fingerprint
    kFailed,           // the request failed terminally (also: a terminal error made by Terminal())
    kLeaseLost,        // the token is not the record's current token, or the record is not pending
    kBusy,             // the store is held by another process or handle that excludes this one
    kTimedOut,         // a bounded wait ran out
    kIOError,          // the file system failed (EIO, ENOSPC, permissions, ...)
    kCorruption,       // stored bytes cannot be decoded, or are of an unknown format version
    kUnavailable,      // the store is closing, or its owner cannot be reached
    kNewerVersion,     // the store or a record was written by a newer idem: upgrade to read it
    kConflict,         // a conditional table write found its key changed (idem/tables.h): retry
  };

  // An OK status.
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string message) {
    return Status(Code::kInvalidArgument, std::move(message));
  }
  static Status NotFound(std::string message) {
    return Status(Code::kNotFound, std::move(message));
  }
  static Status InProgress(std::string message) {
    return Status(Code::kInProgress, std::move(message));
  }
  static Status Mismatch(std::string message) {
    return Status(Code::kMismatch, std::move(message));
  }
  static Status Failed(std::string message) { return Status(Code::kFailed, std::move(message)); }
  static Status LeaseLost(std::string message) {
    return Status(Code::kLeaseLost, std::move(message));
  }
  static Status Busy(std::string message) { return Status(Code::kBusy, std::move(message)); }
  static Status TimedOut(std::string message) {
    return Status(Code::kTimedOut, std::move(message));
  }
  static Status IOError(std::string message) { return Status(Code::kIOError, std::move(message)); }
  static Status Corruption(std::string message) {
    return Status(Code::kCorruption, std::move(message));
  }
  static Status Unavailable(std::string message) {
    return Status(Code::kUnavailable, std::move(message));
  }
  static Status NewerVersion(std::string message) {
    return Status(Code::kNewerVersion, std::move(message));
  }
  static Status Conflict(std::string message) {
    return Status(Code::kConflict, std::move(message));
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // "OK", or "<CodeName>: <message>", for example "InvalidArgument: key is empty".
  IDEM_EXPORT std::string ToString() const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// "Ok", "InvalidArgument", ... : the enumerator's name without its leading 'k'.
IDEM_EXPORT std::string_view CodeName(Status::Code code);

// A terminal failure for the callable given to Store::Execute: it is recorded as
// Failure::kTerminal, so later Begin calls on the key return Outcome::kFailed instead of
// running the request again. Any other non-OK status from the callable is retryable.
inline Status Terminal(std::string message) { return Status::Failed(std::move(message)); }

// Holds a T or a non-OK Status.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(const T& value) : value_(value) {}             // NOLINT: implicit by design
  Result(T&& value) : value_(std::move(value)) {}       // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    assert(!status_.ok() && "a Result made from a Status must hold an error");
    if (status_.ok()) status_ = Status(Status::Code::kUnavailable, "Result built from OK status");
  }

  bool ok() const { return value_.has_value(); }
  // Status::OK() when it holds a value.
  const Status& status() const { return status_; }

  // Precondition: ok() (asserted in debug builds; undefined behaviour otherwise).
  T& value() & {
    assert(ok() && "Result::value() called on an error");
    return *value_;
  }
  const T& value() const& {
    assert(ok() && "Result::value() called on an error");
    return *value_;
  }
  T&& value() && {
    assert(ok() && "Result::value() called on an error");
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace idem

// Returns from the enclosing function when `expr` (a Status) is not OK.
#define IDEM_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::idem::Status idem_status_ = (expr);        \
    if (!idem_status_.ok()) return idem_status_; \
  } while (false)

#define IDEM_CONCAT_INNER_(a, b) a##b
#define IDEM_CONCAT_(a, b) IDEM_CONCAT_INNER_(a, b)

// `IDEM_ASSIGN_OR_RETURN(auto x, ResultExpr());` declares x from the value or returns the status.
#define IDEM_ASSIGN_OR_RETURN(lhs, expr) \
  IDEM_ASSIGN_OR_RETURN_IMPL_(IDEM_CONCAT_(idem_result_, __LINE__), lhs, expr)
#define IDEM_ASSIGN_OR_RETURN_IMPL_(result, lhs, expr) \
  auto result = (expr);                                \
  if (!result.ok()) return result.status();            \
  lhs = std::move(result).value()

#endif  // IDEM_STATUS_H_
