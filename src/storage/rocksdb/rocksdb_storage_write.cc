// Every write of RocksDbStorage, and what a failed one leaves to do: RocksDB stops taking writes
// after a failed write or flush, and resumes by itself after a full disk, or must be reopened
// (docs/operations.md, "A full or failing disk"; docs/reliability.md, "Disk faults").

#include <fmt/format.h>
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "storage/rocksdb/fs/log_failure_watch.h"
#include "storage/rocksdb/fs/rocksdb_status.h"
#include "storage/rocksdb/layout.h"
#include "storage/rocksdb/periodic_sync.h"
#include "storage/rocksdb/record_codec.h"
#include "storage/rocksdb/rocksdb_storage.h"
#include "storage/rocksdb/table_file_verifier.h"
#include "storage/rocksdb/write_stops.h"
#include "util/escape.h"

namespace idem::storage {

Status RocksDbStorage::Writable() {
  // failed_log is set during a failing log write, before RocksDB stops: a write that starts
  // meanwhile checks too.
  if (disk_errors_->stopped.load(std::memory_order_acquire) ||
      disk_errors_->failed_log.load(std::memory_order_acquire) != 0) {
    return ResumeAfterDiskError();
  }
  return Status::OK();
}

std::optional<EngineHealth> RocksDbStorage::ReadEngineHealth() {
  EngineHealth engine;
  uint64_t stopped = 0;
  // A property RocksDB cannot give stays 0: these are a monitor's figures, not a decision's.
  static_cast<void>(db_->GetIntProperty(rocksdb::DB::Properties::kIsWriteStopped, &stopped));
  engine.writes_stopped = stopped != 0 || disk_errors_->stopped.load(std::memory_order_acquire);
  static_cast<void>(db_->GetAggregatedIntProperty(
      rocksdb::DB::Properties::kEstimatePendingCompactionBytes, &engine.pending_compaction_bytes));
  static_cast<void>(db_->GetAggregatedIntProperty(rocksdb::DB::Properties::kLiveSstFilesSize,
                                                  &engine.live_table_bytes));
  static_cast<void>(db_->GetAggregatedIntProperty(rocksdb::DB::Properties::kTotalSstFilesSize,
                                                  &engine.total_table_bytes));
  if (verifier_) {
    engine.damaged_table_files = verifier_->damaged_files();
    engine.damage = verifier_->Damage().message();
  }
  return engine;
}

Status RocksDbStorage::Write(Durability durability, rocksdb::WriteBatch* batch,
                             std::string_view what, std::string_view key) {
  IDEM_RETURN_IF_ERROR(Writable());
  if (disk_errors_->guard_needed.load(std::memory_order_acquire)) WriteResumeGuard();
  const rocksdb::Status s = db_->Write(WriteOptionsFor(durability), batch);
  if (s.ok()) {
    if (durability == Durability::kPeriodic) periodic_sync_->Note();
    return Status::OK();
  }
  // The batch is one write-ahead log record: either all of it (the record and its expiry-index
  // entry) or none of it is ever visible. It is not visible now; a log record that reached the
  // disk before a failed sync may reappear when the store is reopened, whole.
  // The message is built only on failure: a successful write formats nothing.
  Status failed =
      FromRocksDb(s, key.empty() ? fmt::format("{} in store {}", what, path_)
                                 : fmt::format("{} {} in store {}", what, EscapeKey(key), path_));
  if (s.IsIOError() || s.IsCorruption() || s.severity() >= rocksdb::Status::Severity::kSoftError) {
    disk_errors_->stopped.store(true, std::memory_order_release);
    disk_errors_->guard_needed.store(true, std::memory_order_release);
    util::MutexLock lock(resume_mu_);
    write_stops_->NoteStopped(s);
  }
  return failed;
}

void RocksDbStorage::WriteResumeGuard() {
  // A resume flushes every memtable and starts a new log file. If the next log write failed with
  // every memtable still empty, the resume after it would keep that file (see LogFailureWatch)
  // and the store could only be reopened. An unlogged deletion of a key never written makes the
  // meta memtable non-empty at no I/O: that resume flushes it and replaces the file. It is
  // never in a log file, and flushed, it is a tombstone of nothing. Fails while RocksDB is
  // stopped, and is then tried again by the next write.
  rocksdb::WriteOptions unlogged;
  unlogged.disableWAL = true;
  if (db_->Delete(unlogged, meta_, kResumeGuardKey).ok()) {
    disk_errors_->guard_needed.store(false, std::memory_order_release);
  }
}

void RocksDbStorage::Report(const LogLine& line) const {
  if (log_) log_(line);
}

std::optional<uint64_t> RocksDbStorage::CurrentLogNumber() {
  std::unique_ptr<rocksdb::LogFile> log;
  if (!db_->GetCurrentWalFile(&log).ok() || !log) return std::nullopt;
  return log->LogNumber();
}

Status RocksDbStorage::ResumeAfterDiskError() {
  util::MutexLock lock(resume_mu_);
  if (!disk_errors_->stopped.load(std::memory_order_acquire)) return CheckFailedLogLocked();
  const auto now = std::chrono::steady_clock::now();
  // A failed attempt is not repeated at once: callers retrying in a loop would otherwise make
  // RocksDB try to flush for each call.
  if (now < next_resume_) return last_resume_error_;
  next_resume_ = now + kResumeInterval;
  // OK at once when RocksDB is not stopped (it resumed by itself), Busy while it is recovering
  // by itself from a full disk; otherwise flushes the memtables to new table files and starts a
  // new log file, which fails again while the disk still does.
  const rocksdb::Status s = db_->Resume();
  if (!s.ok()) {
    last_resume_error_ = write_stops_->ResumeFailure(s);
    return last_resume_error_;
  }
  // Resumed. On a new log file, unless the one whose write failed is still current (or the
  // current one cannot be told, which is taken for the same).
  if (uint64_t failed = disk_errors_->failed_log.load(std::memory_order_acquire); failed != 0) {
    const std::optional<uint64_t> current = CurrentLogNumber();
    if (!current || *current == failed) {
      last_resume_error_ = write_stops_->LogFailed();
      next_resume_ = std::chrono::steady_clock::time_point::max();  // for good
      Report({LogSeverity::kError, "log_write_failed", last_resume_error_.message()});
      return last_resume_error_;
    }
    // Unless another log write failed meanwhile.
    disk_errors_->failed_log.compare_exchange_strong(failed, 0);
  }
  disk_errors_->stopped.store(false, std::memory_order_release);
  next_resume_ = {};
  last_resume_error_ = Status::OK();
  write_stops_->NoteResumed(now);
  return Status::OK();
}

Status RocksDbStorage::CheckFailedLogLocked() {
  uint64_t failed = disk_errors_->failed_log.load(std::memory_order_acquire);
  if (failed == 0) return Status::OK();
  // A log write failed, in a call that has not returned yet (it stops the store) or before a
  // resume that replaced the file.
  const std::optional<uint64_t> current = CurrentLogNumber();
  if (current && *current != failed) {
    disk_errors_->failed_log.compare_exchange_strong(failed, 0);
    return Status::OK();
  }
  return Status::IOError(
      fmt::format("store {}: a write to its log file failed just now; retry the call", path_));
}

Status RocksDbStorage::CompactAll() {
  for (rocksdb::ColumnFamilyHandle* family : handles_) {
    IDEM_RETURN_IF_ERROR(
        FromRocksDb(db_->CompactRange(rocksdb::CompactRangeOptions(), family, nullptr, nullptr),
                    fmt::format("compacting store {}", path_)));
  }
  return Status::OK();
}

}  // namespace idem::storage
