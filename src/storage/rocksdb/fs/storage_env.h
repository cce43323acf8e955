// The Env each RocksDB instance of the store runs on: the given file system, and background
// thread pools of its own.
//
// RocksDB's default Env keeps one process-wide set of flush and compaction threads, started
// once. A child of fork() inherits that pool's bookkeeping but not its threads: a store the
// child opens (a prefork worker taking over from a dead owner, a process that had used a store
// before forking) schedules flushes that never run, and its writes stall for good once the
// memtables fill. Restarting the inherited pool is no fix, since its queue may hold the parent's
// jobs, which would run on the child's copy of the parent's database. So each instance gets
// fresh pools, created by the process that opens it.

#ifndef IDEM_STORAGE_ROCKSDB_FS_STORAGE_ENV_H_
#define IDEM_STORAGE_ROCKSDB_FS_STORAGE_ENV_H_

#include <memory>

namespace rocksdb {
class Env;
class FileSystem;
}  // namespace rocksdb

namespace idem::storage {

std::shared_ptr<rocksdb::Env> NewStorageEnv(std::shared_ptr<rocksdb::FileSystem> file_system);

}  // namespace idem::storage

#endif  // IDEM_STORAGE_ROCKSDB_FS_STORAGE_ENV_H_
