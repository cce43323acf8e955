#include "storage/rocksdb/fs/private_files.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <rocksdb/file_system.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace idem::storage {
namespace {

// As RocksDB's POSIX file system reports errno: a full disk is a retryable NoSpace, which
// RocksDB's error handler knows to recover from once space is back.
rocksdb::IOStatus PosixError(const std::string& context, int error) {
  const std::string reason = std::strerror(error);
  switch (error) {
    case ENOSPC: {
      rocksdb::IOStatus status = rocksdb::IOStatus::NoSpace(context, reason);
      status.SetRetryable(true);
      return status;
    }
    case ENOENT:
      return rocksdb::IOStatus::PathNotFound(context, reason);
    default:
      return rocksdb::IOStatus::IOError(context, reason);
  }
}

rocksdb::IOStatus SymbolicLinkError(const std::string& name) {
  return rocksdb::IOStatus::IOError(
      name, "is a symbolic link; idem never follows one inside a store (remove it)");
}

// Makes `name` exist as a regular file of mode 0600 (when `create`), or narrows an existing
// one to it. An existing file is never opened here: closing a descriptor of a file would drop
// the fcntl lock this process may hold on it (RocksDB locks LOCK that way).
rocksdb::IOStatus MakePrivateFile(const std::string& name, bool create) {
  if (create) {
    int fd;
    do {
      fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                  kPrivateFileMode);
    } while (fd < 0 && errno == EINTR);
    if (fd >= 0) {
      // A umask that removes owner bits made it narrower than 0600: widen it to exactly that,
      // through the descriptor (nobody else could open it meanwhile).
      struct stat info {};
      int error = 0;
      if (::fstat(fd, &info) != 0) {
        error = errno;
      } else if ((info.st_mode & 07777) != kPrivateFileMode &&
                 ::fchmod(fd, kPrivateFileMode) != 0) {
        error = errno;
      }
      ::close(fd);
      return error == 0 ? rocksdb::IOStatus::OK()
                        : PosixError(fmt::format("setting the mode of {}", name), error);
    }
    if (errno != EEXIST) return PosixError(fmt::format("creating {}", name), errno);
  }
  struct stat info {};
  if (::lstat(name.c_str(), &info) != 0) {
    if (errno == ENOENT && !create) return rocksdb::IOStatus::OK();
    return PosixError(fmt::format("reading the mode of {}", name), errno);
  }
  if (S_ISLNK(info.st_mode)) return SymbolicLinkError(name);
  if (S_ISREG(info.st_mode) && (info.st_mode & 077) != 0 &&
      ::chmod(name.c_str(), kPrivateFileMode) != 0) {
    return PosixError(fmt::format("setting the mode of {}", name), errno);
  }
  return rocksdb::IOStatus::OK();
}

// Makes directory `name` with mode 0700, or narrows an existing one to it. `created` (may be
// null) tells whether it was made now.
rocksdb::IOStatus MakePrivateDirectory(const std::string& name, bool* created) {
  if (created != nullptr) *created = false;
  if (::mkdir(name.c_str(), kPrivateDirectoryMode) == 0) {
    if (created != nullptr) *created = true;
    struct stat info {};
    if (::lstat(name.c_str(), &info) != 0) {
      return PosixError(fmt::format("reading the mode of {}", name), errno);
    }
    if ((info.st_mode & 07777) != kPrivateDirectoryMode &&
        ::chmod(name.c_str(), kPrivateDirectoryMode) != 0) {
      return PosixError(fmt::format("setting the mode of {}", name), errno);
    }
    return rocksdb::IOStatus::OK();
  }
  if (errno != EEXIST) return PosixError(fmt::format("creating directory {}", name), errno);
  struct stat info {};
  if (::lstat(name.c_str(), &info) != 0) {
    return PosixError(fmt::format("reading the mode of {}", name), errno);
  }
  if (S_ISLNK(info.st_mode)) return SymbolicLinkError(name);
  if (!S_ISDIR(info.st_mode)) {
    return rocksdb::IOStatus::IOError(name, "exists and is not a directory");
  }
  if ((info.st_mode & 077) != 0 && ::chmod(name.c_str(), kPrivateDirectoryMode) != 0) {
    return PosixError(fmt::format("setting the mode of {}", name), errno);
  }
  return rocksdb::IOStatus::OK();
}

class PrivateFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  explicit PrivateFileSystem(std::shared_ptr<rocksdb::FileSystem> base)
      : FileSystemWrapper(std::move(base)) {}

  static const char* kClassName() { return "idem.PrivateFileSystem"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus made = MakePrivateFile(name, /*create=*/true);
    if (!made.ok()) return made;
    return target()->NewWritableFile(name, options, result, debug);
  }

  rocksdb::IOStatus ReopenWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus made = MakePrivateFile(name, /*create=*/true);
    if (!made.ok()) return made;
    return target()->ReopenWritableFile(name, options, result, debug);
  }

  rocksdb::IOStatus ReuseWritableFile(const std::string& name, const std::string& old_name,
                                      const rocksdb::FileOptions& options,
                                      std::unique_ptr<rocksdb::FSWritableFile>* result,
                                      rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus made = MakePrivateFile(old_name, /*create=*/false);
    if (!made.ok()) return made;
    return target()->ReuseWritableFile(name, old_name, options, result, debug);
  }

  rocksdb::IOStatus NewRandomRWFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSRandomRWFile>* result,
                                    rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus made = MakePrivateFile(name, /*create=*/true);
    if (!made.ok()) return made;
    return target()->NewRandomRWFile(name, options, result, debug);
  }

  rocksdb::IOStatus NewLogger(const std::string& name, const rocksdb::IOOptions& options,
                              std::shared_ptr<rocksdb::Logger>* result,
                              rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus made = MakePrivateFile(name, /*create=*/true);
    if (!made.ok()) return made;
    return target()->NewLogger(name, options, result, debug);
  }

  rocksdb::IOStatus LockFile(const std::string& name, const rocksdb::IOOptions& options,
                             rocksdb::FileLock** lock, rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus made = MakePrivateFile(name, /*create=*/true);
    if (!made.ok()) return made;
    return target()->LockFile(name, options, lock, debug);
  }

  rocksdb::IOStatus CreateDir(const std::string& name, const rocksdb::IOOptions& /*options*/,
                              rocksdb::IODebugContext* /*debug*/) override {
    bool created = false;
    rocksdb::IOStatus made = MakePrivateDirectory(name, &created);
    if (made.ok() && !created)
      return PosixError(fmt::format("creating directory {}", name), EEXIST);
    return made;
  }

  rocksdb::IOStatus CreateDirIfMissing(const std::string& name,
                                       const rocksdb::IOOptions& /*options*/,
                                       rocksdb::IODebugContext* /*debug*/) override {
    return MakePrivateDirectory(name, nullptr);
  }
};

}  // namespace

std::shared_ptr<rocksdb::FileSystem> NewPrivateFileSystem(
    std::shared_ptr<rocksdb::FileSystem> base) {
  return std::make_shared<PrivateFileSystem>(std::move(base));
}

}  // namespace idem::storage
