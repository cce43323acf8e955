// RocksDB's info log for a store: the LOG file in the database directory, written by idem.
//
// RocksDB's own LOG writer cannot survive a failed write. It buffers lines and flushes them
// every few seconds through a WritableFileWriter, which remembers a failed flush and asserts on
// the next append; Debian's librocksdb keeps its assertions, so the process aborts (SIGABRT) on
// the first log line after the disk fills up or turns read-only, and on every open after that
// (opening logs a lot). This logger writes each line with one write(2) and drops a line that
// cannot be written: it never fails, never retries, never syncs, and holds no state that a
// failed write could corrupt. Like RocksDB's, it starts a new LOG at each open (the previous one
// becomes LOG.old.<micros>), and it starts another when the file reaches its size limit. RocksDB
// deletes the old files beyond DBOptions::keep_log_file_num, but only once an open succeeds: on
// a full disk every failed open would leave one more. So each start also deletes all but the
// newest kKeptInfoLogFiles of them.
//
// It also remembers the last file that recovery reported damaged: RocksDB's status for a damaged
// write-ahead log is a bare "Corruption: checksum mismatch", and the file is named only in the
// info log ("PATH/000012.log: dropping 512 bytes; Corruption: ...").

#ifndef IDEM_STORAGE_ROCKSDB_FS_INFO_LOG_H_
#define IDEM_STORAGE_ROCKSDB_FS_INFO_LOG_H_

#include <rocksdb/env.h>

#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <string>

#include "util/mutex.h"

namespace idem::storage {

// How many LOG.old files a store keeps (DBOptions::keep_log_file_num too).
inline constexpr std::size_t kKeptInfoLogFiles = 4;
// A new LOG file is started only with this much free on its disk.
inline constexpr uint64_t kLeastFreeBytes = 256 << 10;

class InfoLog final : public rocksdb::Logger {
 public:
  // Writes to `db_path`/LOG, keeping each file under `max_file_size` bytes. When the file
  // cannot be created (full or read-only disk, or less than kLeastFreeBytes free), lines are
  // dropped until the next rotation manages to create one. Empty `db_path`: writes nothing
  // (read-only instances), and still notes damaged files.
  InfoLog(std::string db_path, std::size_t max_file_size);
  ~InfoLog() override;
  InfoLog(const InfoLog&) = delete;
  InfoLog& operator=(const InfoLog&) = delete;

  using rocksdb::Logger::Logv;
  void Logv(rocksdb::InfoLogLevel level, const char* format, va_list ap) override;
  void Logv(const char* format, va_list ap) override;
  std::size_t GetLogFileSize() const override;

  // The file that WAL recovery last reported damaged, if any.
  std::string damaged_file() const;

  // How many lines were dropped because they could not be written.
  uint64_t dropped_lines() const;

 private:
  // Renames the current LOG (if any) to LOG.old.<micros> and opens a new one, unless the disk
  // has less than kLeastFreeBytes free.
  void StartFileLocked() IDEM_REQUIRES(mu_);
  // Deletes the LOG.old files but the newest kKeptInfoLogFiles.
  void DeleteOldFiles() const;
  void WriteLine(rocksdb::InfoLogLevel level, const char* format, va_list ap);

  // Constant after construction.
  const std::string db_path_;  // empty: no file
  const std::size_t max_file_size_;

  mutable util::Mutex mu_;
  int fd_ IDEM_GUARDED_BY(mu_) = -1;
  std::size_t file_size_ IDEM_GUARDED_BY(mu_) = 0;
  std::string damaged_file_ IDEM_GUARDED_BY(mu_);
  uint64_t dropped_lines_ IDEM_GUARDED_BY(mu_) = 0;
};

}  // namespace idem::storage

#endif  // IDEM_STORAGE_ROCKSDB_FS_INFO_LOG_H_
