// What failed writes tell RocksDbStorage, and the file system that notes which write-ahead log
// failed.

#ifndef IDEM_STORAGE_ROCKSDB_FS_LOG_FAILURE_WATCH_H_
#define IDEM_STORAGE_ROCKSDB_FS_LOG_FAILURE_WATCH_H_

#include <atomic>
#include <cstdint>
#include <memory>

namespace rocksdb {
class FileSystem;
}

namespace idem::storage {

struct DiskErrorFlags {
  // A write failed: RocksDB refuses writes until it resumes (by itself after a full disk), and
  // the next write asks it first (ResumeAfterDiskError).
  std::atomic<bool> stopped{false};
  // The number of the last write-ahead log file whose append or sync failed (0: none since the
  // last check). RocksDB's writer of that file remembers the error and asserts when it is
  // written again (see LogFailureWatch).
  std::atomic<uint64_t> failed_log{0};
  // A resume flushes every memtable; the next write first makes one non-empty again (see
  // WriteResumeGuard).
  std::atomic<bool> guard_needed{false};
};

// Notes which write-ahead log file last failed an append or a sync (DiskErrorFlags::failed_log):
// RocksDB 7.8's writer of that file remembers the error, and appending to it again asserts
// (SIGABRT with Debian's build). RocksDB replaces the file when it resumes after the error, but
// only if some memtable holds data then (DBImpl::FlushMemTable switches only a non-empty one;
// fixed in RocksDB 9.5, pull request 12873): with every memtable empty it resumes on the failed
// file. Passes every call through; wraps only the log files.
std::shared_ptr<rocksdb::FileSystem> NewLogFailureWatch(std::shared_ptr<rocksdb::FileSystem> base,
                                                        std::shared_ptr<DiskErrorFlags> flags);

}  // namespace idem::storage

#endif  // IDEM_STORAGE_ROCKSDB_FS_LOG_FAILURE_WATCH_H_
