// The store directory: what Store::Open checks before it uses one, and how a new store's
// database comes into being.
//
// Who may use a store. A store directory must belong to the user of the process (its
// effective uid) and must not be writable by group or others: whoever can write in it can
// replace its socket and answer in the owner's place, or read the records through files they
// put there. So an existing directory that fails either test is refused with a message saying
// how to fix it (as ssh's StrictModes refuses a ~/.ssh others can write). Root gets no
// exception: a store of another user opened by root would get root-owned files the user can no
// longer open, and a process of that user serving it would be talking to root. Run the command
// as the store's user instead. A new store directory is made with mode 0700 by mkdir itself
// (no wider moment), and missing parents as `mkdir -p` would but never writable by group or
// others. Inside the directory nothing is followed through a symbolic link: `db`, `owner.lock`
// and `socket` must be what they claim.
//
// What is an idem store. A directory whose `db/` holds a RocksDB database with idem's column
// families (RocksDbStorage::Inspect). A new store is created only in a directory that is
// missing, empty, or holds nothing but what an interrupted creation leaves (`owner.lock`,
// `socket`, `db.new`, an empty `db/`; and `lost+found`, for a store at the root of its own file
// system). Anything else (a plain RocksDB database, someone's files) is refused before anything
// is written: not even the lock file is created. The database itself is built under `db.new`
// and renamed to `db` once complete, so `db/` never holds a half-made database that could not be
// told from someone else's.

#ifndef IDEM_STORE_DIRECTORY_H_
#define IDEM_STORE_DIRECTORY_H_

#include <sys/types.h>

#include <filesystem>

#include "idem/status.h"
#include "storage/rocksdb/rocksdb_storage.h"

namespace idem::core {

// Where a store directory keeps its RocksDB files; the owner lock and socket sit beside it.
inline constexpr char kDatabaseDir[] = "db";

struct StoreDirectory {
  dev_t device = 0;  // identity of the directory, however its path is spelled
  ino_t inode = 0;
  bool has_database = false;  // false: a store not created yet (allowed only with `create`)
};

// Checks `path` as described above, creating the directory when it is missing and `create`
// is true. Changes nothing else. Errors: kNotFound (missing, or no database, without
// `create`), kInvalidArgument (not a directory, or not an idem store), kIOError (wrong owner or
// mode, a symbolic link inside, or the file system failed).
Result<StoreDirectory> PrepareStoreDirectory(const std::filesystem::path& path, bool create);

// Opens the database of the store in `directory`, first creating it (under `db.new`, then
// renamed into place) when the store has none yet and `config.create_if_missing` allows.
// `config.path` is set here. The caller holds the owner lock when it may create.
Result<std::unique_ptr<storage::RocksDbStorage>> OpenStoreDatabase(
    const std::filesystem::path& directory, storage::RocksDbConfig config);

// Store::Backup of the store whose database `storage` holds: makes the directory `destination`
// (absolute; mode 0700 by mkdir itself; it must not exist and its parent must), writes a
// consistent copy of the database into `destination`/db (Storage::Checkpoint), and syncs the
// parent, so that a store Store::Open opens as it is is durable there when this returns. The
// lock file and socket are not copied: the first process to open the copy makes its own. On an
// error, what was made at `destination` is removed. Errors: kInvalidArgument (destination
// exists, or has no parent directory), kIOError.
Status WriteBackup(storage::Storage& storage, const std::filesystem::path& destination);

}  // namespace idem::core

#endif  // IDEM_STORE_DIRECTORY_H_
