// The format file: the store format version, in a plain file read before RocksDB opens anything.
//
// The meta column family holds the format version too (layout.h), but it can be read only once
// RocksDB has opened the database, and a read-write DB::Open already writes: a new MANIFEST, a
// new log, an OPTIONS file. A store written by a newer release must be refused before that, with
// every file as it was, so the version is also kept in db/IDEM-FORMAT (RocksDB ignores names it
// does not know), which RocksDbStorage reads first and the store directory check reads before
// the owner lock is taken. The file holds the version in decimal and a newline ("1\n"); it is
// written (atomically, file and directory fsynced) when a store is created and when a store
// without it (made by a release before the file existed) is opened for writing. The meta column
// family's version stays the second check: a store whose file was lost (copied without it) is
// still refused once RocksDB has opened it.

#ifndef IDEM_STORAGE_ROCKSDB_FORMAT_FILE_H_
#define IDEM_STORAGE_ROCKSDB_FORMAT_FILE_H_

#include <cstdint>
#include <string>

#include "idem/status.h"

namespace rocksdb {
class FileSystem;
}

namespace idem::storage {

// The format file's name inside the RocksDB directory.
inline constexpr char kFormatFile[] = "IDEM-FORMAT";

// Reads the format file of the database in `db_path`. Returns false when there is none;
// kNewerVersion when it names a version above `supported`; kCorruption when it is unreadable
// as a version, or names version 0 (no release wrote it).
// Reads only.
Result<bool> CheckFormatFile(rocksdb::FileSystem& fs, const std::string& db_path,
                             uint32_t supported);

// Writes `version` as the format file of `db_path`: through a temporary file, fsynced, renamed
// into place, the directory fsynced.
Status WriteFormatFile(rocksdb::FileSystem& fs, const std::string& db_path, uint32_t version);

}  // namespace idem::storage

#endif  // IDEM_STORAGE_ROCKSDB_FORMAT_FILE_H_
