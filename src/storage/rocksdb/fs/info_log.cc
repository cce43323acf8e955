#include "storage/rocksdb/fs/info_log.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

namespace idem::storage {
namespace {

constexpr std::string_view kDamageMarker = ": dropping ";
constexpr std::string_view kOldPrefix = "LOG.old.";

const char* LevelPrefix(rocksdb::InfoLogLevel level) {
  switch (level) {
    case rocksdb::InfoLogLevel::DEBUG_LEVEL:
      return "[DEBUG] ";
    case rocksdb::InfoLogLevel::WARN_LEVEL:
      return "[WARN] ";
    case rocksdb::InfoLogLevel::ERROR_LEVEL:
      return "[ERROR] ";
    case rocksdb::InfoLogLevel::FATAL_LEVEL:
      return "[FATAL] ";
    default:
      return "";  // INFO and HEADER lines carry no level, as in RocksDB's LOG
  }
}

}  // namespace

InfoLog::InfoLog(std::string db_path, std::size_t max_file_size)
    : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL),
      db_path_(std::move(db_path)),
      max_file_size_(max_file_size) {
  util::MutexLock lock(mu_);
  StartFileLocked();
  DeleteOldFiles();
}

void InfoLog::DeleteOldFiles() const {
  if (db_path_.empty()) return;
  DIR* dir = ::opendir(db_path_.c_str());
  if (dir == nullptr) return;
  std::vector<std::string> old_files;
  while (const dirent* entry = ::readdir(dir)) {
    if (std::string_view(entry->d_name).starts_with(kOldPrefix))
      old_files.emplace_back(entry->d_name);
  }
  ::closedir(dir);
  if (old_files.size() <= kKeptInfoLogFiles) return;
  // Named by the microsecond they were started at, with as many digits until the year 2286:
  // the names sort as their times do.
  std::sort(old_files.begin(), old_files.end());
  for (std::size_t i = 0; i + kKeptInfoLogFiles < old_files.size(); ++i) {
    (void)::unlink((db_path_ + "/" + old_files[i]).c_str());
  }
}

InfoLog::~InfoLog() {
  if (fd_ >= 0) ::close(fd_);
}

void InfoLog::StartFileLocked() {
  if (db_path_.empty()) return;
  // Counted from here even when no file could be opened: the next attempt comes after as many
  // bytes of lines, not at every line.
  file_size_ = 0;
  // On a nearly full disk the lines would take the space an operator frees before RocksDB's own
  // files could (an open writes some 50 KiB of them): no new file then, and lines go on into
  // the current one, if any, or are dropped.
  struct statvfs disk {};
  if (::statvfs(db_path_.c_str(), &disk) == 0 &&
      static_cast<uint64_t>(disk.f_bavail) * disk.f_frsize < kLeastFreeBytes) {
    return;
  }
  const std::string name = db_path_ + "/LOG";
  struct timeval now {};
  ::gettimeofday(&now, nullptr);
  char old_name[64];
  std::snprintf(old_name, sizeof old_name, "/LOG.old.%" PRId64,
                int64_t{now.tv_sec} * 1'000'000 + now.tv_usec);
  // A failed rename (no LOG yet, or a read-only disk) leaves the current file: lines are then
  // appended to it, or dropped.
  (void)::rename(name.c_str(), (db_path_ + old_name).c_str());
  const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd >= 0) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
}

void InfoLog::Logv(rocksdb::InfoLogLevel level, const char* format, va_list ap) {
  if (level < GetInfoLogLevel()) return;
  WriteLine(level, format, ap);
}

void InfoLog::Logv(const char* format, va_list ap) {
  WriteLine(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
}

void InfoLog::WriteLine(rocksdb::InfoLogLevel level, const char* format, va_list ap) {
  // "2026/03/01-00:00:00.123456 1234 [WARN] message\n", as RocksDB's LOG lines.
  char head_buffer[96];
  struct timeval now {};
  ::gettimeofday(&now, nullptr);
  struct tm t {};
  const time_t seconds = now.tv_sec;
  ::localtime_r(&seconds, &t);
  const int head_size = std::snprintf(
      head_buffer, sizeof head_buffer, "%04d/%02d/%02d-%02d:%02d:%02d.%06ld %ld %s",
      t.tm_year + 1900, t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec,
      static_cast<long>(now.tv_usec), static_cast<long>(::gettid()), LevelPrefix(level));
  const std::string_view head(
      head_buffer, head_size < 0 ? 0 : std::min<std::size_t>(head_size, sizeof head_buffer - 1));
  std::string line(head);
  va_list copy;
  va_copy(copy, ap);
  char body[512];
  const int body_size = std::vsnprintf(body, sizeof body, format, copy);
  va_end(copy);
  if (body_size < 0) return;
  if (static_cast<std::size_t>(body_size) < sizeof body) {
    line.append(body, static_cast<std::size_t>(body_size));
  } else {
    const std::size_t offset = line.size();
    line.resize(offset + static_cast<std::size_t>(body_size) + 1);
    va_copy(copy, ap);
    std::vsnprintf(line.data() + offset, static_cast<std::size_t>(body_size) + 1, format, copy);
    va_end(copy);
    line.resize(offset + static_cast<std::size_t>(body_size));
  }
  if (line.empty() || line.back() != '\n') line += '\n';

  util::MutexLock lock(mu_);
  if (level >= rocksdb::InfoLogLevel::WARN_LEVEL) {
    // The message starts with the file's path: "PATH: dropping N bytes; Corruption: ...".
    const std::string_view message = std::string_view(line).substr(head.size());
    if (const auto at = message.find(kDamageMarker); at != std::string_view::npos) {
      damaged_file_.assign(message.substr(0, at));
    }
  }
  if (db_path_.empty()) return;
  if (file_size_ >= max_file_size_) StartFileLocked();
  if (fd_ < 0) {
    ++dropped_lines_;
    file_size_ += line.size();
    return;
  }
  // One write per line, whatever it returns: a full or read-only disk loses the line, nothing
  // else. A short write leaves part of the line; the next line follows it.
  const ssize_t written = ::write(fd_, line.data(), line.size());
  if (written != static_cast<ssize_t>(line.size())) ++dropped_lines_;
  file_size_ += line.size();
}

std::size_t InfoLog::GetLogFileSize() const {
  util::MutexLock lock(mu_);
  return file_size_;
}

std::string InfoLog::damaged_file() const {
  util::MutexLock lock(mu_);
  return damaged_file_;
}

uint64_t InfoLog::dropped_lines() const {
  util::MutexLock lock(mu_);
  return dropped_lines_;
}

}  // namespace idem::storage
