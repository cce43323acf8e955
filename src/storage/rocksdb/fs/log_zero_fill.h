// Write-ahead logs written into space already written with zeros, so that a sync of a record is
// a sync of data alone.
//
// RocksDB appends to its log: each synced write (kSync) makes the file longer, and on ext4 its
// fdatasync then also commits the new length (and, into fallocate'd space, the extent turning
// from unwritten to written) through the journal. Over blocks already written, the same
// fdatasync writes only the data, and takes about two thirds of the time (docs/design/speed.md,
// increment 6). SQLite's log is overwritten from its start for the same reason.
//
// So every `*.log` file RocksDB creates is, from its first sync on, written with zeros ahead of
// its records, a chunk at a time (kZeroFillChunk), and the records are written into them at
// their offsets: the first sync after a chunk commits the chunk's length once, the syncs after it
// only data. Before its first sync a log is appended to (a log written only with kBuffered is
// never synced, and zeros would only double its writes). The file's size as RocksDB asks it
// (GetFileSize) is the records' end; Close truncates the file to it.
//
// A log therefore ends in zeros after anything but a clean close: after a crash, a kill, a power
// cut, or while its writer is still writing. RocksDB 7.8 reads zeros after whole records as the
// end; a record never completed with zeros after it, it would read as damage.
// storage/rocksdb/fs/log_tail.h cuts such tails before a read-write open and hides them from a
// read-only one.
//
// When zeros cannot be written (a full disk, a quota), the log is appended to as RocksDB would
// from then on: the record may still fit where a chunk of zeros did not.

#ifndef IDEM_STORAGE_ROCKSDB_FS_LOG_ZERO_FILL_H_
#define IDEM_STORAGE_ROCKSDB_FS_LOG_ZERO_FILL_H_

#include <cstdint>
#include <memory>

namespace rocksdb {
class FileSystem;
}

namespace idem::storage {

// Zeros are written this far ahead at a time (and the last chunk is what a log may end in).
inline constexpr uint64_t kZeroFillChunk = 1 << 20;

// A file system passing everything to `base`, whose write-ahead log files are zero-filled ahead
// as described above. `base` must support PositionedAppend and Truncate on writable files.
std::shared_ptr<rocksdb::FileSystem> NewZeroFilledLogs(std::shared_ptr<rocksdb::FileSystem> base);

}  // namespace idem::storage

#endif  // IDEM_STORAGE_ROCKSDB_FS_LOG_ZERO_FILL_H_
