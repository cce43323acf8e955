// The one place where rocksdb::Status becomes idem::Status.

#ifndef IDEM_STORAGE_ROCKSDB_FS_ROCKSDB_STATUS_H_
#define IDEM_STORAGE_ROCKSDB_FS_ROCKSDB_STATUS_H_

#include <rocksdb/status.h>

#include <string>

#include "idem/status.h"

namespace idem::storage {

// `context` says what was being done, e.g. "writing record \"k1\"".
Status FromRocksDb(const rocksdb::Status& status, const std::string& context);

// The same for DB::Open of `path`, where a held LOCK file means another process has the store.
Status FromRocksDbOpen(const rocksdb::Status& status, const std::string& path);

}  // namespace idem::storage

#endif  // IDEM_STORAGE_ROCKSDB_FS_ROCKSDB_STATUS_H_
