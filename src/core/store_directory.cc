#include "core/store_directory.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <rocksdb/file_system.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "core/disk_reserve.h"
#include "sharing/owner_lock.h"
#include "sharing/socket_address.h"
#include "storage/rocksdb/format_file.h"
#include "util/escape.h"
#include "util/links.h"
#include "util/sync_directory.h"

namespace idem::core {
namespace {

namespace fs = std::filesystem;
using storage::RocksDbStorage;

// Where a new store's database is built before it is renamed to `db`.
constexpr char kNewDatabaseDir[] = "db.new";
constexpr mode_t kStoreDirectoryMode = 0700;
// Missing parents of a new store directory: as `mkdir -p` makes them, never writable by group
// or others (the umask may narrow them further).
constexpr mode_t kParentDirectoryMode = 0755;

std::string Shown(const fs::path& path) { return EscapeControls(path.string()); }

std::string ErrnoText(int error) { return std::strerror(error); }

// The rule for the store directory and its database directory (see the header).
Status CheckOwnerAndMode(const struct stat& info, const fs::path& path, std::string_view what) {
  const uid_t user = ::geteuid();
  if (info.st_uid != user) {
    return Status::IOError(fmt::format(
        "{what} {path} belongs to uid {owner}, not to uid {user}, the user of this process: a "
        "store is used only by the user who owns it (any other could read its records or answer "
        "in its place). Run this as uid {owner} (for example with sudo -u '#{owner}'), or, if the "
        "store is this user's, give it back with: chown -R {user} {path}",
        fmt::arg("what", what), fmt::arg("path", Shown(path)), fmt::arg("owner", info.st_uid),
        fmt::arg("user", user)));
  }
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return Status::IOError(fmt::format(
        "{what} {path} has mode {mode:04o}: group or others may write in it, and so replace its "
        "socket or its files. Fix it with: chmod go-w {path} (idem makes store directories with "
        "mode 0700)",
        fmt::arg("what", what), fmt::arg("path", Shown(path)),
        fmt::arg("mode", info.st_mode & 07777)));
  }
  return Status::OK();
}

Status SymbolicLinkInside(const fs::path& path) {
  return Status::IOError(fmt::format(
      "{} is a symbolic link; idem never follows one inside a store (remove it)", Shown(path)));
}

Status NotAnIdemStore(const fs::path& path, const std::string& why) {
  return Status::InvalidArgument(fmt::format(
      "store {} is not an idem store: {}; idem changes nothing in it", Shown(path), why));
}

// Makes `path` (mode 0700) and its missing parents. `created`: whether `path` was made now.
Status MakeStoreDirectory(const fs::path& path, bool* created) {
  std::vector<fs::path> missing;
  for (fs::path parent = path.parent_path(); !parent.empty() && parent != parent.root_path();
       parent = parent.parent_path()) {
    struct stat info {};
    if (::stat(parent.c_str(), &info) == 0) break;
    if (errno != ENOENT) {
      return Status::IOError(fmt::format("cannot create store {}: {}: {}", Shown(path),
                                         Shown(parent), ErrnoText(errno)));
    }
    missing.push_back(parent);
  }
  for (auto parent = missing.rbegin(); parent != missing.rend(); ++parent) {
    if (::mkdir(parent->c_str(), kParentDirectoryMode) != 0 && errno != EEXIST) {
      return Status::IOError(fmt::format("cannot create store {}: {}: {}", Shown(path),
                                         Shown(*parent), ErrnoText(errno)));
    }
  }
  // The mode is given to mkdir itself: the directory is never wider than 0700, not for an
  // instant (the umask can only narrow it).
  *created = ::mkdir(path.c_str(), kStoreDirectoryMode) == 0;
  if (!*created && errno != EEXIST) {
    return Status::IOError(
        fmt::format("cannot create store {}: {}", Shown(path), ErrnoText(errno)));
  }
  if (!*created) return Status::OK();
  // A new directory's entry is durable only once its parent is synced: without this a power
  // cut could take the whole store away, fsynced records and all, on a file system that does
  // not order its metadata (ext4 and XFS happen to; POSIX does not promise it).
  std::vector<fs::path> made = {path};
  made.insert(made.end(), missing.begin(), missing.end());  // deepest first
  for (const fs::path& directory : made) {
    const fs::path parent = directory.parent_path().empty() ? "." : directory.parent_path();
    if (const int error = util::SyncDirectory(parent); error != 0) {
      return Status::IOError(fmt::format("cannot sync {} after creating store {}: {}",
                                         Shown(parent), Shown(path), ErrnoText(error)));
    }
  }
  return Status::OK();
}

// Whether `name` is something idem itself leaves in a store directory that has no database
// yet (an owner died while creating it; the reserve of a database removed since), or
// lost+found.
bool LeftByCreation(std::string_view name) {
  static const std::array<std::string, 7> kNames = {
      sharing::kOwnerLockFile,
      sharing::kSocketFile,
      std::string(sharing::kSocketFile) + sharing::kSocketBindSuffix,
      kNewDatabaseDir,
      kReserveFile,
      std::string(kReserveFile) + ".new",
      "lost+found"};
  return std::find(kNames.begin(), kNames.end(), name) != kNames.end();
}

// What `directory`, which holds no database, holds that idem did not put there.
Result<std::vector<std::string>> ForeignEntries(const fs::path& directory) {
  std::vector<std::string> foreign;
  std::error_code error;
  for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name != kDatabaseDir && !LeftByCreation(name)) foreign.push_back(name);
  }
  if (error) {
    return Status::IOError(
        fmt::format("cannot list store {}: {}", Shown(directory), error.message()));
  }
  std::sort(foreign.begin(), foreign.end());
  return foreign;
}

// Builds a new database under db.new, then renames it to db.
Status CreateDatabase(const fs::path& directory, storage::RocksDbConfig config) {
  const fs::path staging = directory / kNewDatabaseDir;
  std::error_code error;
  fs::remove_all(staging, error);  // what an interrupted creation left; never follows a link
  if (error) {
    return Status::IOError(fmt::format("cannot remove {} (left by an interrupted creation): {}",
                                       Shown(staging), error.message()));
  }
  config.path = staging.string();
  config.create_if_missing = true;
  config.read_only = false;
  {
    // Opening creates the column families and writes the format version; closing syncs.
    IDEM_ASSIGN_OR_RETURN(auto created, RocksDbStorage::Open(config));
  }
  // Replaces an empty db/ as well.
  return RocksDbStorage::Install(config, staging.string(), (directory / kDatabaseDir).string());
}

// Opens the store directory `path`, first making it when it is missing and `create` allows
// (`created` then says so). The store path itself may be a symbolic link (the user's own
// choice); nothing inside it is followed.
Result<sharing::FileDescriptor> OpenStoreDirectory(const fs::path& path, bool create,
                                                   bool* created) {
  *created = false;
  // A link another user owns could point the store anywhere, at this user's other files
  // included, whose `socket` the owner would replace (as protected_symlinks refuses in sticky
  // directories, refused on the whole path).
  if (const auto link = util::FindForeignLink(path.string(), ::geteuid())) {
    return Status::IOError(fmt::format(
        "store path {} passes through the symbolic link {} (to {}), which belongs to uid {}, not "
        "to uid {}, the user of this process, nor to root: its owner could point it anywhere. "
        "Give the path it points to, if you trust it",
        Shown(path), EscapeControls(link->link), EscapeControls(link->target), link->owner,
        ::geteuid()));
  }
  sharing::FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0 && errno == ENOENT) {
    if (!create) return Status::NotFound(fmt::format("store {} does not exist", Shown(path)));
    IDEM_RETURN_IF_ERROR(MakeStoreDirectory(path, created));
    fd = sharing::FileDescriptor(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  }
  if (fd.get() < 0) {
    if (errno == ENOTDIR) {
      return Status::InvalidArgument(fmt::format("store {} is not a directory", Shown(path)));
    }
    return Status::IOError(fmt::format("cannot open store {}: {}", Shown(path), ErrnoText(errno)));
  }
  return fd;
}

// The store directory's status, once it passed CheckOwnerAndMode.
Result<struct stat> CheckStoreDirectory(int fd, const fs::path& path, bool created) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    return Status::IOError(fmt::format("cannot stat store {}: {}", Shown(path), ErrnoText(errno)));
  }
  // A umask that removes owner bits (0277, say) left the new directory unusable to its owner.
  if (created && info.st_uid == ::geteuid() && (info.st_mode & 07777) != kStoreDirectoryMode) {
    if (::fchmod(fd, kStoreDirectoryMode) != 0) {
      return Status::IOError(
          fmt::format("cannot set the mode of store {}: {}", Shown(path), ErrnoText(errno)));
    }
    info.st_mode = (info.st_mode & ~07777) | kStoreDirectoryMode;
  }
  IDEM_RETURN_IF_ERROR(CheckOwnerAndMode(info, path, "store"));
  return info;
}

// Whether the store directory `path` (open as `fd`) holds an idem database. Refuses a symbolic
// link in the place of the owner lock, the socket or the database, and a database directory
// that is not idem's or fails CheckOwnerAndMode.
Result<bool> HasIdemDatabase(int fd, const fs::path& path) {
  for (const char* name : {sharing::kOwnerLockFile, sharing::kSocketFile}) {
    struct stat entry {};
    if (::fstatat(fd, name, &entry, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(entry.st_mode)) {
      return SymbolicLinkInside(path / name);
    }
  }
  const fs::path database = path / kDatabaseDir;
  struct stat entry {};
  if (::fstatat(fd, kDatabaseDir, &entry, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return false;
    return Status::IOError(fmt::format("cannot stat {}: {}", Shown(database), ErrnoText(errno)));
  }
  if (S_ISLNK(entry.st_mode)) return SymbolicLinkInside(database);
  if (!S_ISDIR(entry.st_mode)) {
    return NotAnIdemStore(path, fmt::format("{} is not a directory", Shown(database)));
  }
  IDEM_RETURN_IF_ERROR(CheckOwnerAndMode(entry, database, "the database directory"));
  IDEM_ASSIGN_OR_RETURN(const RocksDbStorage::Contents contents,
                        RocksDbStorage::Inspect(database.string()));
  if (contents.kind == RocksDbStorage::Contents::Kind::kOther) {
    return NotAnIdemStore(path, fmt::format("{} holds {}", Shown(database), contents.detail));
  }
  if (contents.kind != RocksDbStorage::Contents::Kind::kIdem) return false;
  // A newer release's store is refused here, before the owner lock file is written; opening the
  // database checks again (a store may change hands meanwhile).
  IDEM_RETURN_IF_ERROR(storage::CheckFormatFile(*rocksdb::FileSystem::Default(), database.string(),
                                                RocksDbStorage::kStoreFormatVersion)
                           .status());
  return true;
}

// Refuses the store directory `path`, which holds no database, when it holds anything idem did
// not put there: a new store is never created among someone else's files.
Status RefuseForeignEntries(const fs::path& path, bool create) {
  IDEM_ASSIGN_OR_RETURN(const std::vector<std::string> foreign, ForeignEntries(path));
  if (foreign.empty()) return Status::OK();
  const bool rocksdb = std::find(foreign.begin(), foreign.end(), "CURRENT") != foreign.end();
  constexpr std::size_t kNamesShown = 3;
  const auto shown = foreign.begin() + std::min(foreign.size(), kNamesShown);
  std::string names = EscapeControls(fmt::to_string(fmt::join(foreign.begin(), shown, ", ")));
  if (foreign.size() > kNamesShown) {
    fmt::format_to(std::back_inserter(names), " and {} more", foreign.size() - kNamesShown);
  }
  return NotAnIdemStore(
      path,
      fmt::format("it holds {} but no idem database ({}){}{}", names, Shown(path / kDatabaseDir),
                  rocksdb ? ", and looks like a RocksDB database itself (an idem store "
                            "keeps its database in db/)"
                          : "",
                  create ? "; a new store is created only in a new or empty directory" : ""));
}

}  // namespace

Result<StoreDirectory> PrepareStoreDirectory(const fs::path& path, bool create) {
  bool created = false;
  IDEM_ASSIGN_OR_RETURN(const sharing::FileDescriptor fd,
                        OpenStoreDirectory(path, create, &created));
  IDEM_ASSIGN_OR_RETURN(const struct stat info, CheckStoreDirectory(fd.get(), path, created));
  StoreDirectory result{.device = info.st_dev, .inode = info.st_ino};
  IDEM_ASSIGN_OR_RETURN(result.has_database, HasIdemDatabase(fd.get(), path));
  if (result.has_database) return result;
  IDEM_RETURN_IF_ERROR(RefuseForeignEntries(path, create));
  if (!create) return Status::NotFound(fmt::format("store {} holds no database", Shown(path)));
  return result;
}

Result<std::unique_ptr<storage::RocksDbStorage>> OpenStoreDatabase(const fs::path& directory,
                                                                   storage::RocksDbConfig config) {
  const fs::path database = directory / kDatabaseDir;
  if (!config.read_only && config.create_if_missing) {
    // Looked at again under the owner lock: another process may have created it meanwhile.
    IDEM_ASSIGN_OR_RETURN(const RocksDbStorage::Contents contents,
                          RocksDbStorage::Inspect(database.string()));
    if (contents.kind == RocksDbStorage::Contents::Kind::kOther) {
      return NotAnIdemStore(directory,
                            fmt::format("{} holds {}", Shown(database), contents.detail));
    }
    if (contents.kind == RocksDbStorage::Contents::Kind::kNothing) {
      IDEM_RETURN_IF_ERROR(CreateDatabase(directory, config));
    }
  }
  config.path = database.string();
  config.create_if_missing = false;
  if (config.read_only) return RocksDbStorage::Open(config);
  // An open that fails for want of space leaves files that would take more of the space freed
  // for the next attempt.
  const auto open = [&] {
    Result<std::unique_ptr<RocksDbStorage>> opened = RocksDbStorage::Open(config);
    if (!opened.ok() && IsNoSpace(opened.status())) {
      RocksDbStorage::DeleteLeftoversOfAFailedOpen(config.path);
    }
    return opened;
  };
  Result<std::unique_ptr<RocksDbStorage>> opened = open();
  if (!opened.ok() && IsNoSpace(opened.status()) && SpendReserve(directory)) {
    if (config.log) {
      const std::string message = fmt::format(
          "store {}: the disk is full ({}); deleted the store's reserve {} ({} bytes) to open it, "
          "and it is made again by an open with room: free space on the disk",
          Shown(directory), opened.status().message(), Shown(directory / kReserveFile),
          kReserveBytes);
      config.log({LogSeverity::kWarning, "disk_reserve_used", message});
    }
    opened = open();
  }
  if (opened.ok()) KeepReserve(directory);
  return opened;
}

Status WriteBackup(storage::Storage& storage, const fs::path& destination) {
  if (::mkdir(destination.c_str(), kStoreDirectoryMode) != 0) {
    const int error = errno;
    if (error == EEXIST) {
      return Status::InvalidArgument(
          fmt::format("backup destination {} exists; a backup never overwrites anything: give a "
                      "path that does not exist",
                      Shown(destination)));
    }
    if (error == ENOENT) {
      return Status::InvalidArgument(
          fmt::format("backup destination {}: its parent directory {} does not exist",
                      Shown(destination), Shown(destination.parent_path())));
    }
    return Status::IOError(
        fmt::format("cannot create backup {}: {}", Shown(destination), ErrnoText(error)));
  }
  Status written = storage.Checkpoint((destination / kDatabaseDir).string());
  if (written.ok()) {
    // The new directory's entry, durable once its parent is synced.
    const fs::path parent = destination.parent_path();
    if (const int error = util::SyncDirectory(parent); error != 0) {
      written = Status::IOError(fmt::format("cannot sync {} after writing backup {}: {}",
                                            Shown(parent), Shown(destination), ErrnoText(error)));
    }
  }
  if (!written.ok()) {
    // Made by this call, so nobody else's: a half-made backup must not pass for one.
    std::error_code ignored;
    fs::remove_all(destination, ignored);
  }
  return written;
}

}  // namespace idem::core
