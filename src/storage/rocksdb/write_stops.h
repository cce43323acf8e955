// WriteStops: what RocksDbStorage tells about the times RocksDB stops taking writes (after a failed
// write or flush) and resumes. The cause of the last stop, the lines that report a stop and its
// end (at most one a minute while a nearly full disk stops the store again and again), and the
// errors calls get until it resumes. Not thread-safe: the storage's resume_mu_ guards it.

#ifndef IDEM_STORAGE_ROCKSDB_WRITE_STOPS_H_
#define IDEM_STORAGE_ROCKSDB_WRITE_STOPS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "idem/log.h"
#include "idem/status.h"

namespace rocksdb {
class Status;
}  // namespace rocksdb

namespace idem::storage {

class WriteStops {
 public:
  using Clock = std::chrono::steady_clock;

  // Reports through `report` (RocksDbConfig::log; may be empty), naming the store at `path`.
  //
  // RocksDB resumes by itself after a full disk once `resume_free_bytes` are free (room for the
  // largest memtable): its SstFileManager checks the free space at once and then every 5
  // seconds. Resuming from idem's next write instead would be sooner, but breaks RocksDB 7.8: a
  // flush queued before the error that runs before the resume loses its scheduling slot, and
  // the resume then waits forever for a flush never scheduled (seen on a full tmpfs). RocksDB's
  // own recovery counts as in progress from the error on, so no flush runs in that window.
  WriteStops(std::string path, LogSink report, std::size_t resume_free_bytes)
      : path_(std::move(path)), report_(std::move(report)), resume_free_bytes_(resume_free_bytes) {}
  // Keeps `cause` as the last one, and reports (rate-limited) that writes stopped, once per stop.
  void NoteStopped(const rocksdb::Status& cause);
  // Writes are taken again at `now`: reports the end of a stop that was reported.
  void NoteResumed(Clock::time_point now);
  // The error a failed DB::Resume (`resume`) leaves calls with, saying whether the store writes
  // again by itself or must be reopened.
  Status ResumeFailure(const rocksdb::Status& resume) const;
  // The error of a store that cannot resume in place: a write to its log file failed.
  Status LogFailed() const;

 private:
  // At most one "stopped writing" line per interval.
  static constexpr std::chrono::seconds kStopReportInterval{60};

  std::string FreeSpaceAdvice() const;
  void Report(LogSeverity severity, std::string_view event, const std::string& message) const {
    if (report_) report_({severity, event, message});
  }

  const std::string path_;
  const LogSink report_;
  const std::size_t resume_free_bytes_;
  std::string last_cause_;  // what made the last write fail
  bool last_cause_no_space_ = false;
  bool stop_noted_ = false;     // this stop was noted (reported or counted)
  bool stop_reported_ = false;  // and reported: its end is reported too
  bool stop_reported_ever_ = false;
  Clock::time_point stopped_since_;
  Clock::time_point last_stop_report_;
  uint64_t unreported_stops_ = 0;
};

}  // namespace idem::storage

#endif  // IDEM_STORAGE_ROCKSDB_WRITE_STOPS_H_
