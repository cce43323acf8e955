#include "sharing/log_limiter.h"

#include <fmt/format.h>

namespace idem::sharing {

void LogLimiter::Log(std::string_view cause, std::string message) {
  const auto now = std::chrono::steady_clock::now();
  {
    util::MutexLock lock(mu_);
    auto it = causes_.find(cause);
    if (it == causes_.end()) it = causes_.emplace(std::string(cause), Cause{}).first;
    Cause& seen = it->second;
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
  sink_(message);
}

}  // namespace idem::sharing
