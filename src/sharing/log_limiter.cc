#include "sharing/log_limiter.h"

#include <fmt/format.h>

namespace idem::sharing {

void LogLimiter::Log(LogSeverity severity, std::string_view event, std::string message) {
  const auto now = std::chrono::steady_clock::now();
  {
    util::MutexLock lock(mu_);
    auto it = events_.find(event);
    if (it == events_.end()) it = events_.emplace(std::string(event), Event{}).first;
    Event& seen = it->second;
    if (seen.last && now - *seen.last < interval_) {
      ++seen.skipped;
      return;
    }
    if (seen.skipped > 0) {
      message += fmt::format(" (and {} more like it since the last)", seen.skipped);
    }
    seen.last = now;
    seen.skipped = 0;
  }
  sink_({severity, event, message});
}

}  // namespace idem::sharing
