// What lets a store be copied and filled from outside: a consistent copy of the database
// (Checkpoint, for `idem backup`) and one sync
// for a batch of buffered writes (`idem import`).

#include <fmt/format.h>
#include <rocksdb/db.h>
#include <rocksdb/file_system.h>
#include <rocksdb/utilities/checkpoint.h>

#include <filesystem>
#include <limits>
#include <memory>

#include "storage/rocksdb/format_file.h"
#include "storage/rocksdb/fs/rocksdb_status.h"
#include "storage/rocksdb/rocksdb_storage.h"
#include "util/escape.h"

namespace idem::storage {

Status RocksDbStorage::Checkpoint(const std::string& destination) {
  rocksdb::Checkpoint* made = nullptr;
  IDEM_RETURN_IF_ERROR(FromRocksDb(rocksdb::Checkpoint::Create(db_.get(), &made),
                                   fmt::format("backing up store {}", path_)));
  const std::unique_ptr<rocksdb::Checkpoint> checkpoint(made);
  // log_size_for_flush 0: the memtables are always flushed first, so the copy holds table files
  // and, in its log, only what was written while the copy was made. RocksDB builds the copy in
  // `destination`.tmp and renames it into place, so `destination` is whole or absent.
  IDEM_RETURN_IF_ERROR(
      FromRocksDb(checkpoint->CreateCheckpoint(destination, /*log_size_for_flush=*/0),
                  fmt::format("backing up store {} to {}", path_, EscapeControls(destination))));
  // A checkpoint copies RocksDB's files only: the format file goes in too, so that a newer
  // release's backup is refused before anything in it changes (format_file.h).
  rocksdb::FileSystem* const file_system = db_->GetFileSystem();
  IDEM_RETURN_IF_ERROR(WriteFormatFile(*file_system, destination, format_version_.load()));
  // RocksDB syncs the files it copies or creates; the names it linked, and the rename, are
  // durable once their directories are synced.
  for (const std::string& directory :
       {destination, std::filesystem::path(destination).parent_path().string()}) {
    std::unique_ptr<rocksdb::FSDirectory> handle;
    rocksdb::IOStatus synced =
        file_system->NewDirectory(directory, rocksdb::IOOptions(), &handle, nullptr);
    if (synced.ok()) synced = handle->Fsync(rocksdb::IOOptions(), nullptr);
    IDEM_RETURN_IF_ERROR(
        FromRocksDb(synced, fmt::format("syncing the backup {}", EscapeControls(directory))));
  }
  return Status::OK();
}

Status RocksDbStorage::Sync() {
  return FromRocksDb(db_->SyncWAL(), fmt::format("syncing the log of store {}", path_));
}

}  // namespace idem::storage
