// Pauses that double up to a limit: for polling something that is usually ready soon (an owner
// starting up, another attempt finishing) without spinning when it is not. util/deadline.h
// bounds such polling by a deadline.

#ifndef IDEM_UTIL_BACKOFF_H_
#define IDEM_UTIL_BACKOFF_H_

#include <algorithm>
#include <chrono>

namespace idem::util {

class Backoff {
 public:
  // The first pause is `first`; each next one twice the last, up to `longest`.
  constexpr Backoff(std::chrono::milliseconds first, std::chrono::milliseconds longest)
      : pause_(first), longest_(longest) {}

  // The pause to take now; the next call returns the following one.
  std::chrono::milliseconds Next() {
    const std::chrono::milliseconds pause = pause_;
    pause_ = std::min(pause_ * 2, longest_);
    return pause;
  }

 private:
  std::chrono::milliseconds pause_;
  std::chrono::milliseconds longest_;
};

}  // namespace idem::util

#endif  // IDEM_UTIL_BACKOFF_H_
