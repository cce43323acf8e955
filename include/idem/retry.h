// The caller's side of idempotency: retrying a request with the same idempotency key.
//
// A key makes a retry safe; a RetryPolicy decides when to retry and how long to wait. The
// helpers below retry only what another attempt can fix (an I/O error, an unreachable store
// owner, a lost lease, a retryable failure of the operation itself), wait out another owner's
// lease instead of running the request a second time, and never retry a client error
// (kInvalidArgument, kMismatch), a terminal failure (kFailed) or corruption.
//
//   idem::RetryPolicy policy{.max_attempts = 4};
//   auto execution = idem::RetryExecute(*store, request_id, {.type = "pay"}, policy,
//       [&](idem::Attempt&) -> idem::Result<std::string> { return bank.Charge(card, amount); });
//
// Between attempts the helpers sleep "exponential backoff with full jitter": the n-th retry
// waits a random time in [0, min(max_backoff, first_backoff * multiplier^(n-1))), which spreads
// the retries of many clients that failed together.
//
// The helpers are thread-safe as far as the operation and the hooks they are given are: they
// keep no state between calls.

#ifndef IDEM_RETRY_H_
#define IDEM_RETRY_H_

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "idem/options.h"
#include "idem/status.h"
#include "idem/store.h"

namespace idem {

struct RetryPolicy {
  // How many times the operation runs at most, the first one included; 1 disables retries.
  // More attempts ride out longer outages but keep the caller (and its own caller) waiting
  // longer. Must be at least 1. Default: 5.
  int max_attempts = 5;

  // The backoff before the first retry (before jitter). Shorter recovers sooner from brief
  // glitches; longer takes less from an overloaded dependency. Must not be negative.
  // Default: 100 ms.
  std::chrono::milliseconds first_backoff{100};

  // Each further retry's backoff is the previous one times this. 1 retries at a constant
  // interval; larger backs off faster. Must be at least 1. Default: 2.
  double multiplier = 2.0;

  // The backoff never exceeds this, however many retries came before. Bounds the wait of one
  // retry (the whole wait is at most about max_attempts * max_backoff). Must not be negative.
  // Default: 10 s.
  std::chrono::milliseconds max_backoff{std::chrono::seconds(10)};

  // Wait a uniformly random time in [0, backoff) rather than the backoff itself ("full
  // jitter"). Clients that failed together then retry at different times instead of in a
  // burst; a given retry may come sooner than the backoff. Default: true.
  bool full_jitter = true;
};

// Seams for tests and for observing retries. Null members take the defaults.
struct RetryHooks {
  // Waits the given time. Default: std::this_thread::sleep_for.
  std::function<void(std::chrono::milliseconds)> sleep;
  // Returns a uniformly random number in [0, 1) for full jitter. Default: a per-thread
  // pseudo-random generator seeded from std::random_device.
  std::function<double()> random01;
  // Called before each wait: the attempt that just ended (1 for the first), why it is retried,
  // and how long the helper will wait. Default: nothing.
  std::function<void(int attempt, const Status& why, std::chrono::milliseconds wait)> on_retry;
};

// True for the errors that a later attempt may not meet: kIOError, kUnavailable, kTimedOut,
// kBusy, kLeaseLost and kInProgress. False for OK and for the errors that repeat on every
// attempt: kInvalidArgument, kNotFound, kMismatch, kFailed (terminal) and kCorruption.
IDEM_EXPORT bool IsRetryable(const Status& status);

// The policy's backoff before retry number `retry` (1 for the first retry), before jitter:
// min(max_backoff, first_backoff * multiplier^(retry-1)).
IDEM_EXPORT std::chrono::milliseconds BackoffBefore(const RetryPolicy& policy, int retry);

// The wait before retry number `retry`: BackoffBefore, scaled by `random01` (in [0, 1)) when
// the policy has full_jitter.
IDEM_EXPORT std::chrono::milliseconds RetryDelay(const RetryPolicy& policy, int retry,
                                                 double random01);

// kInvalidArgument naming the field when the policy is unusable (see each field's limits).
IDEM_EXPORT Status CheckRetryPolicy(const RetryPolicy& policy);

namespace retry_internal {

// What to do after an attempt: stop and return it, or wait and try again. `wait` replaces the
// policy's backoff when set (another owner's retry_after).
struct Step {
  bool retry = false;
  Status why;
  std::optional<std::chrono::milliseconds> wait;
};

// The hooks with the defaults filled in.
IDEM_EXPORT RetryHooks WithDefaults(RetryHooks hooks);

template <class R>
const Status& StatusOf(const R& result) {
  if constexpr (std::is_same_v<R, Status>) {
    return result;
  } else {
    return result.status();
  }
}

// Runs `attempt(n)` for n = 1, 2, ... until `decide` says stop or the policy's attempts are
// used up, and returns the last result.
template <class Attempt, class Decide>
auto Loop(const RetryPolicy& policy, RetryHooks hooks, Attempt&& attempt, Decide&& decide)
    -> std::invoke_result_t<Attempt&, int> {
  if (Status invalid = CheckRetryPolicy(policy); !invalid.ok()) return invalid;
  hooks = WithDefaults(std::move(hooks));
  for (int n = 1;; ++n) {
    auto result = attempt(n);
    Step step = decide(result);
    if (!step.retry || n >= policy.max_attempts) return result;
    const std::chrono::milliseconds wait =
        step.wait ? *step.wait : RetryDelay(policy, n, hooks.random01());
    if (hooks.on_retry) hooks.on_retry(n, step.why, wait);
    hooks.sleep(wait);
  }
}

}  // namespace retry_internal

// Calls fn() until it succeeds, returns an error that is not retryable (IsRetryable), or has
// been called policy.max_attempts times, sleeping the policy's backoff in between; returns what
// the last call returned. fn returns Status or Result<T>. Use it for calls that are safe to
// repeat: Store::Open, Get, or a whole request made idempotent by its key.
// kInvalidArgument (without calling fn) when the policy is unusable.
template <class Fn>
auto Retry(const RetryPolicy& policy, Fn&& fn, RetryHooks hooks = {}) -> std::invoke_result_t<Fn&> {
  return retry_internal::Loop(
      policy, std::move(hooks), [&fn](int) { return fn(); },
      [](const auto& result) {
        const Status& status = retry_internal::StatusOf(result);
        return retry_internal::Step{.retry = IsRetryable(status), .why = status, .wait = {}};
      });
}

// Store::Begin with retries: retryable errors are retried after the policy's backoff, and a
// kInProgress claim is asked again after its retry_after (the time left on the other owner's
// lease) rather than after the backoff. Each Begin call counts as an attempt. Returns the
// first claim that is not kInProgress, the last kInProgress claim when the attempts are used
// up, or the last error.
Result<Claim> RetryBegin(Store& store, std::string_view key, const BeginOptions& options,
                         const RetryPolicy& policy, RetryHooks hooks = {});

// Store::Execute with retries, under the same key: runs `op` at most once per successful
// execution however often it is retried. Retried, after the policy's backoff:
//   - a retryable error (IsRetryable), including kInProgress when Execute gave up waiting for
//     another owner (the retry waits for it again; it does not run op beside it);
//   - an error returned by op, which Execute recorded as a retryable failure, whatever its
//     code (the next attempt acquires the key again and runs op again).
// Returned at once: success (a fresh result or a replay), kMismatch, a terminal failure
// (kFailed: op returned idem::Terminal(...) now or before), and every other error.
// An exception thrown by op propagates after Execute recorded it; it is not retried.
// op: Result<std::string>(Attempt&), as for Store::Execute.
template <class Op>
Result<Execution> RetryExecute(Store& store, std::string_view key, const BeginOptions& options,
                               const RetryPolicy& policy, Op&& op, RetryHooks hooks = {}) {
  // The error op returned in the latest attempt, when Execute recorded it as retryable.
  std::optional<Status> op_error;
  return retry_internal::Loop(
      policy, std::move(hooks),
      [&](int) -> Result<Execution> {
        op_error.reset();
        return store.Execute(key, options, [&](Attempt& attempt) -> Result<std::string> {
          Result<std::string> result = op(attempt);
          if (!result.ok() && result.status().code() != Status::Code::kFailed) {
            op_error = result.status();
          }
          return result;
        });
      },
      [&](const Result<Execution>& result) {
        const Status& status = result.status();
        const bool recorded_retryable = op_error && *op_error == status;
        return retry_internal::Step{
            .retry = IsRetryable(status) || recorded_retryable, .why = status, .wait = {}};
      });
}

}  // namespace idem

#endif  // IDEM_RETRY_H_
