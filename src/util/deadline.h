// Deadlines: the time left until a moment, as a poll() or a wait takes it, and polling bounded
// by a budget (RetryUntil) for calls that keep trying while an owner starts up or a server fails
// over, for the whole of the caller's budget and not past it.

#ifndef IDEM_UTIL_DEADLINE_H_
#define IDEM_UTIL_DEADLINE_H_

#include <algorithm>
#include <chrono>
#include <thread>
#include <type_traits>
#include <utility>

#include "util/backoff.h"

namespace idem::util {

// The time left until `until`, rounded up to a whole millisecond: zero only once it has passed,
// and a wait of that long never ends before it.
inline std::chrono::milliseconds TimeLeft(std::chrono::steady_clock::time_point until) {
  return std::max(std::chrono::milliseconds(0), std::chrono::ceil<std::chrono::milliseconds>(
                                                    until - std::chrono::steady_clock::now()));
}

// A moment on the steady clock, and the budget it was made from (for the messages of whoever
// gives up at it).
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  // Now plus `budget`.
  explicit Deadline(std::chrono::milliseconds budget)
      : at_(Clock::now() + budget), budget_(budget) {}

  Clock::time_point at() const { return at_; }
  std::chrono::milliseconds budget() const { return budget_; }

  // TimeLeft(at()).
  std::chrono::milliseconds Left() const { return TimeLeft(at_); }
  bool Passed() const { return Clock::now() >= at_; }
  // The time since the deadline was made, rounded down.
  std::chrono::milliseconds Elapsed() const {
    return std::chrono::floor<std::chrono::milliseconds>(Clock::now() - (at_ - budget_));
  }

 private:
  Clock::time_point at_;
  std::chrono::milliseconds budget_;
};

// Calls `attempt()`, which returns a std::optional (empty: try again), until it returns a value,
// and returns that value. Between attempts it pauses `backoff.Next()`, cut short at `deadline`;
// once an attempt has failed at or past the deadline, it returns `give_up(attempts)` instead (the
// number of attempts made). So the budget is used whole: the last attempt is made at the
// deadline (a caller whose owner or server comes back just before it still gets through), and
// the whole ends by the deadline plus the length of one attempt. The first attempt is always
// made, whatever the deadline.
template <class Attempt, class GiveUp>
auto RetryUntil(const Deadline& deadline, Backoff backoff, Attempt&& attempt, GiveUp&& give_up)
    -> std::invoke_result_t<GiveUp&, int> {
  for (int attempts = 1;; ++attempts) {
    if (auto done = attempt()) return std::move(*done);
    const Deadline::Clock::duration left = deadline.at() - Deadline::Clock::now();
    if (left <= Deadline::Clock::duration::zero()) return give_up(attempts);
    std::this_thread::sleep_for(std::min<Deadline::Clock::duration>(backoff.Next(), left));
  }
}

}  // namespace idem::util

#endif  // IDEM_UTIL_DEADLINE_H_
