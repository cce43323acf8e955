// Files only their owner can read, whatever the process's umask.
//
// RocksDB 7.8's POSIX file system creates every file with mode 0644 and every directory with
// 0755, minus the umask (its allow_non_owner_access switch is never read by the file system
// that creates the files; Env::SetAllowNonOwnerAccess sets a flag nothing uses). Under a
// permissive umask the records would be readable by every local user. A umask set around the
// open would be no fix: it is process-wide, and RocksDB creates files from its background
// threads while the application's threads create theirs.
//
// So the file system below creates each file itself first, with mode 0600, not following a
// symbolic link (O_NOFOLLOW), and only then lets RocksDB open it (RocksDB opens an existing file
// without changing its mode); directories are made with mode 0700. An existing file or
// directory whose mode gives group or others more is set to 0600/0700 before RocksDB reuses it.
// The mode never passes through a wider state: a new file is 0600 (or narrower, under a umask
// that removes owner bits, and then widened to exactly 0600 through its own descriptor) from
// the moment it exists. Cost: one open, fstat and close per created file (RocksDB creates a
// handful per flush or compaction), nothing per write.

#ifndef IDEM_STORAGE_ROCKSDB_FS_PRIVATE_FILES_H_
#define IDEM_STORAGE_ROCKSDB_FS_PRIVATE_FILES_H_

#include <memory>

namespace rocksdb {
class FileSystem;
}

namespace idem::storage {

// The modes of everything a store creates.
inline constexpr unsigned kPrivateFileMode = 0600;
inline constexpr unsigned kPrivateDirectoryMode = 0700;

// A file system passing everything to `base` (which must create files on the local POSIX file
// system, by the names given), that makes every file and directory it creates private as
// described above.
std::shared_ptr<rocksdb::FileSystem> NewPrivateFileSystem(
    std::shared_ptr<rocksdb::FileSystem> base);

}  // namespace idem::storage

#endif  // IDEM_STORAGE_ROCKSDB_FS_PRIVATE_FILES_H_
