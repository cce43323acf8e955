// Store::Execute: the whole lifecycle of one request in one call.

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <optional>
#include <thread>

#include "extras/lease_keeper.h"
#include "idem/store.h"
#include "util/backoff.h"

namespace idem {
namespace {

using std::chrono::milliseconds;

// Polling an in-progress owner starts fast (most requests finish in milliseconds) and backs
// off to this, so a long wait costs a few Begin calls a second.
constexpr milliseconds kFirstPoll{1};
constexpr milliseconds kLongestPoll{100};

std::string ExceptionText(std::exception_ptr error) {
  try {
    std::rethrow_exception(std::move(error));
  } catch (const std::exception& e) {
    return fmt::format("exception: {}", e.what());
  } catch (...) {
    return "exception of a type not derived from std::exception";
  }
}

// Runs fn for an acquired claim, whose Begin was sent at `sent`, and records its outcome.
Result<Execution> RunAttempt(Store& store, std::string_view key, const BeginOptions& options,
                             const Claim& claim, std::chrono::steady_clock::time_point sent,
                             FunctionRef<Result<std::string>(Attempt&)> fn) {
  const milliseconds lease = store.options().LeaseOrDefault(options.lease);
  LeaseStatus lease_status(sent + lease);
  Attempt attempt{.token = claim.token,
                  .took_over = claim.took_over,
                  .checkpoint = claim.record.checkpoint,
                  .attempts = claim.record.attempts,
                  .store = &store,
                  .key = key,
                  .lease = &lease_status};
  std::optional<Result<std::string>> outcome;
  std::exception_ptr error;
  {
    LeaseKeeper::Guard renewal =
        LeaseKeeper::Instance().Keep(&store, key, claim.token, lease, &lease_status);
    try {
      outcome.emplace(fn(attempt));
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (error) {
    // Recorded so that the next caller retries at once instead of waiting for the lease; the
    // caller's exception matters more than a failure to record it.
    static_cast<void>(store.Fail(key, claim.token, ExceptionText(error), Failure::kRetryable));
    std::rethrow_exception(error);
  }
  if (!outcome->ok()) {
    const Status& status = outcome->status();
    const Failure kind =
        status.code() == Status::Code::kFailed ? Failure::kTerminal : Failure::kRetryable;
    IDEM_RETURN_IF_ERROR(store.Fail(key, claim.token, status.message(), kind));
    return status;
  }
  IDEM_RETURN_IF_ERROR(store.Complete(key, claim.token, outcome->value()));
  return Execution{
      .result = std::move(outcome->value()), .replayed = false, .attempts = claim.record.attempts};
}

}  // namespace

bool Attempt::LeaseHeld() const { return lease != nullptr && lease->Held(); }

Result<Execution> Store::ExecuteAttempts(std::string_view key, const BeginOptions& options,
                                         FunctionRef<Result<std::string>(Attempt&)> fn) {
  const auto give_up_at = std::chrono::steady_clock::now() + this->options().execute_wait;
  util::Backoff poll(kFirstPoll, kLongestPoll);
  for (;;) {
    // An acquired lease runs from the owner's answer, which comes after this.
    const auto sent = std::chrono::steady_clock::now();
    IDEM_ASSIGN_OR_RETURN(Claim claim, Begin(key, options));
    switch (claim.outcome) {
      case Outcome::kAcquired:
        return RunAttempt(*this, key, options, claim, sent, fn);
      case Outcome::kReplay:
        return Execution{.result = std::move(claim.record.result),
                         .replayed = true,
                         .attempts = claim.record.attempts};
      case Outcome::kFailed:
        return Status::Failed(std::move(claim.record.result));
      case Outcome::kMismatch:
        return Status::Mismatch(
            "the key was used before for a request with a different fingerprint");
      case Outcome::kInProgress:
        break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= give_up_at) {
      return Status::InProgress(
          fmt::format("another attempt still holds the key after waiting {} ms",
                      this->options().execute_wait.count()));
    }
    const auto left = std::chrono::ceil<milliseconds>(give_up_at - now);
    std::this_thread::sleep_for(std::min({poll.Next(), claim.retry_after, left}));
  }
}

}  // namespace idem
