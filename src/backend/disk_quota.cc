#include "backend/disk_quota.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/escape.h"

namespace idem::backend {

DiskQuota::DiskQuota(uint64_t limit, std::filesystem::path database, LogSink log)
    : limit_(limit), database_(std::move(database)), log_(std::move(log)) {}

bool DiskQuota::Exceeded() {
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  const int64_t interval = std::chrono::nanoseconds(kMeasureInterval).count();
  const int64_t last = measured_at_.load(std::memory_order_relaxed);
  if (last == kNever || now - last >= interval) {
    if (measure_mu_.TryLock()) {
      const std::optional<bool> crossed = Measure(now);
      measure_mu_.Unlock();
      // The log is the application's: called without the lock, so that what it does (or throws)
      // cannot keep the next call from measuring.
      if (crossed) LogCrossing(*crossed);
    }
  }
  return exceeded_.load(std::memory_order_relaxed);
}

std::optional<bool> DiskQuota::Measure(int64_t now) {
  const Result<uint64_t> used = MeasureBytes(database_);
  measured_at_.store(now, std::memory_order_relaxed);
  // A directory that cannot be read now keeps the last measure: the next write would fail on it
  // anyway, with its own error.
  if (!used.ok()) return std::nullopt;
  used_.store(*used, std::memory_order_relaxed);
  const bool over = *used >= limit_;
  if (over == exceeded_.load(std::memory_order_relaxed)) return std::nullopt;
  exceeded_.store(over, std::memory_order_relaxed);
  if (over) crossings_.fetch_add(1, std::memory_order_relaxed);
  return over;
}

void DiskQuota::LogCrossing(bool over) const {
  if (!log_) return;
  const uint64_t used = used_.load(std::memory_order_relaxed);
  const std::string message =
      over ? fmt::format(
                 "store {} reached its disk quota: its database takes {} bytes of "
                 "max_disk_bytes {}; new claims are refused (kUnavailable) until "
                 "expired records are purged (`idem purge` gives their space back at "
                 "once) or the quota is raised; replays, Complete, Fail, Extend and "
                 "Forget still work",
                 EscapeControls(database_.parent_path().string()), used, limit_)
           : fmt::format(
                 "store {} is back under its disk quota: its database takes {} bytes of "
                 "max_disk_bytes {}; new claims are taken again",
                 EscapeControls(database_.parent_path().string()), used, limit_);
  log_({over ? LogSeverity::kWarning : LogSeverity::kInfo,
        over ? "disk_quota_reached" : "disk_quota_cleared", message});
}

Status DiskQuota::Refusal() const {
  return Status::Unavailable(fmt::format(
      "store {} is over its disk quota: its database takes {} bytes of max_disk_bytes {}; new "
      "claims are refused until expired records are purged or the quota is raised (retry later)",
      EscapeControls(database_.parent_path().string()), used_.load(std::memory_order_relaxed),
      limit_));
}

Result<uint64_t> DiskQuota::MeasureBytes(const std::filesystem::path& database) {
  DIR* dir = ::opendir(database.c_str());
  if (dir == nullptr) {
    return Status::IOError(fmt::format("cannot read directory {}: {}",
                                       EscapeControls(database.string()), std::strerror(errno)));
  }
  uint64_t bytes = 0;
  const int fd = ::dirfd(dir);
  while (const dirent* entry = ::readdir(dir)) {
    struct stat seen {};
    // A file deleted between the listing and the stat takes nothing any more.
    if (::fstatat(fd, entry->d_name, &seen, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISREG(seen.st_mode)) bytes += static_cast<uint64_t>(seen.st_size);
  }
  ::closedir(dir);
  return bytes;
}

}  // namespace idem::backend
