// The non-template parts of idem/retry.h: classification, backoff, defaults and RetryBegin.

#include "idem/retry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

#include "util/random.h"

namespace idem {
namespace {

using std::chrono::milliseconds;

double ThreadRandom01() {
  thread_local std::mt19937_64 generator{util::RandomSeed()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(generator);
}

}  // namespace

bool IsRetryable(const Status& status) {
  switch (status.code()) {
    case Status::Code::kIOError:
    case Status::Code::kUnavailable:
    case Status::Code::kTimedOut:
    case Status::Code::kBusy:
    case Status::Code::kLeaseLost:
    case Status::Code::kInProgress:
    case Status::Code::kConflict:
      return true;
    case Status::Code::kOk:
    case Status::Code::kInvalidArgument:
    case Status::Code::kNotFound:
    case Status::Code::kMismatch:
    case Status::Code::kFailed:
    case Status::Code::kCorruption:
    case Status::Code::kNewerVersion:
      return false;
  }
  return false;
}

milliseconds BackoffBefore(const RetryPolicy& policy, int retry) {
  const double cap = static_cast<double>(policy.max_backoff.count());
  double backoff = static_cast<double>(policy.first_backoff.count());
  // Stop multiplying once past the cap: no overflow however many retries.
  for (int i = 1; i < retry && backoff < cap; ++i) backoff *= policy.multiplier;
  return milliseconds(static_cast<milliseconds::rep>(std::max(0.0, std::min(backoff, cap))));
}

milliseconds RetryDelay(const RetryPolicy& policy, int retry, double random01) {
  const milliseconds backoff = BackoffBefore(policy, retry);
  if (!policy.full_jitter) return backoff;
  const double fraction = std::clamp(random01, 0.0, 1.0);
  const auto jittered =
      static_cast<milliseconds::rep>(static_cast<double>(backoff.count()) * fraction);
  // random01 is below 1, but guard against a hook that returns 1.0 exactly.
  return std::min(milliseconds(jittered), backoff);
}

Status CheckRetryPolicy(const RetryPolicy& policy) {
  if (policy.max_attempts < 1) {
    return Status::InvalidArgument(
        fmt::format("RetryPolicy::max_attempts is {}; it must be at least 1", policy.max_attempts));
  }
  if (policy.first_backoff < milliseconds(0)) {
    return Status::InvalidArgument(
        fmt::format("RetryPolicy::first_backoff is {} ms; it must not be negative",
                    policy.first_backoff.count()));
  }
  if (policy.max_backoff < milliseconds(0)) {
    return Status::InvalidArgument(fmt::format(
        "RetryPolicy::max_backoff is {} ms; it must not be negative", policy.max_backoff.count()));
  }
  if (!(policy.multiplier >= 1.0) || !std::isfinite(policy.multiplier)) {
    return Status::InvalidArgument(
        fmt::format("RetryPolicy::multiplier is {}; it must be at least 1", policy.multiplier));
  }
  return Status::OK();
}

namespace retry_internal {

RetryHooks WithDefaults(RetryHooks hooks) {
  if (!hooks.sleep) hooks.sleep = [](milliseconds wait) { std::this_thread::sleep_for(wait); };
  if (!hooks.random01) hooks.random01 = ThreadRandom01;
  return hooks;
}

}  // namespace retry_internal

Result<Claim> RetryBegin(Store& store, std::string_view key, const BeginOptions& options,
                         const RetryPolicy& policy, RetryHooks hooks) {
  return retry_internal::Loop(
      policy, std::move(hooks), [&](int) { return store.Begin(key, options); },
      [](const Result<Claim>& result) {
        if (!result.ok()) {
          return retry_internal::Step{
              .retry = IsRetryable(result.status()), .why = result.status(), .wait = {}};
        }
        if (result->outcome != Outcome::kInProgress) return retry_internal::Step{};
        return retry_internal::Step{
            .retry = true,
            .why = Status::InProgress("another owner holds a live lease on the key"),
            .wait = result->retry_after};
      });
}

}  // namespace idem
