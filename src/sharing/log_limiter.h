// Log lines rate-limited by event, so that a storm (a crowd of refused connections, a client
// failing over again and again) costs a few lines, not thousands: the first line of a cause goes
// out at once, later ones at most once per interval, each saying how many were left out since.

#ifndef IDEM_SHARING_LOG_LIMITER_H_
#define IDEM_SHARING_LOG_LIMITER_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "idem/log.h"
#include "util/mutex.h"

namespace idem::sharing {

class LogLimiter {
 public:
  // `sink` receives the lines that go out; it is called without the limiter's lock held.
  explicit LogLimiter(LogSink sink, std::chrono::milliseconds interval = std::chrono::seconds(10))
      : sink_(std::move(sink)), interval_(interval) {}

  // Logs `message` unless a line of `event` went out less than an interval ago. Messages of one
  // event may differ in detail (the pid refused).
  void Log(LogSeverity severity, std::string_view event, std::string message);

 private:
  struct Event {
    std::optional<std::chrono::steady_clock::time_point> last;
    uint64_t skipped = 0;
  };

  // Constant after construction.
  const LogSink sink_;
  const std::chrono::milliseconds interval_;

  util::Mutex mu_;
  std::map<std::string, Event, std::less<>> events_ IDEM_GUARDED_BY(mu_);
};

}  // namespace idem::sharing

#endif  // IDEM_SHARING_LOG_LIMITER_H_
