#include "storage/rocksdb/write_stops.h"

#include <fmt/format.h>
#include <rocksdb/status.h>

#include <iterator>

namespace idem::storage {

void WriteStops::NoteStopped(const rocksdb::Status& cause) {
  last_cause_ = cause.ToString();
  last_cause_no_space_ = cause.IsNoSpace();
  if (stop_noted_) return;
  stop_noted_ = true;
  const auto now = Clock::now();
  stopped_since_ = now;
  // A disk that stays nearly full may stop and resume the store many times a minute: one line
  // a minute says so.
  if (stop_reported_ever_ && now - last_stop_report_ < kStopReportInterval) {
    ++unreported_stops_;
    stop_reported_ = false;
    return;
  }
  const std::string until = last_cause_no_space_
                                ? fmt::format("space is freed on its disk: {}", FreeSpaceAdvice())
                                : "the disk is fixed and the store reopened";
  std::string line =
      fmt::format("store {} stopped writing ({}); calls that write fail with kIOError until {}",
                  path_, last_cause_, until);
  if (unreported_stops_ > 0) {
    fmt::format_to(std::back_inserter(line),
                   " (it stopped {} more times since the last such message)", unreported_stops_);
  }
  Report(LogSeverity::kError, "writes_stopped", line);
  stop_reported_ever_ = true;
  stop_reported_ = true;
  last_stop_report_ = now;
  unreported_stops_ = 0;
}

void WriteStops::NoteResumed(Clock::time_point now) {
  // A stop that was reported has its end reported too.
  if (stop_noted_ && stop_reported_) {
    const auto stopped_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - stopped_since_).count();
    Report(LogSeverity::kInfo, "writes_resumed",
           fmt::format("store {} writes again, after {} ms stopped by a disk error", path_,
                       stopped_ms));
  }
  stop_noted_ = false;
}

Status WriteStops::ResumeFailure(const rocksdb::Status& resume) const {
  if (resume.IsNoSpace() || (resume.IsBusy() && last_cause_no_space_)) {
    return Status::IOError(fmt::format(
        "store {} cannot write: its disk is full ({}); {}, and keeps every acknowledged record",
        path_, last_cause_, FreeSpaceAdvice()));
  }
  if (resume.IsBusy()) {
    return Status::IOError(fmt::format(
        "store {} is recovering from a disk error ({}); retry the call", path_, last_cause_));
  }
  return Status::IOError(fmt::format(
      "store {} stopped writing after a disk error and cannot resume ({}); fix the disk, then "
      "close and reopen the store: every acknowledged record is kept",
      path_, resume.ToString()));
}

Status WriteStops::LogFailed() const {
  return Status::IOError(fmt::format(
      "store {} stopped writing after a write to its log file failed ({}), and cannot resume "
      "in place: RocksDB would write to that file again. Close and reopen the store once its "
      "disk has space and works: every acknowledged record is kept",
      path_, last_cause_));
}

std::string WriteStops::FreeSpaceAdvice() const {
  return fmt::format("it writes again by itself within 5 seconds of {} MiB being free",
                     resume_free_bytes_ >> 20);
}

}  // namespace idem::storage
