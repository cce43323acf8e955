#include "sharing/runtime_directory.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "util/escape.h"

namespace idem::sharing {
namespace {

constexpr mode_t kRuntimeDirectoryMode = 0700;

// What to do about a refused runtime directory, after its own fix.
constexpr char kOrElse[] =
    "or set XDG_RUNTIME_DIR to a directory of this user's that nobody else can reach (the same "
    "for every process that uses the store)";

bool OwnedDirectory(const std::string& path, uid_t user) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode) && info.st_uid == user;
}

// The refusal of `path`, whose lstat is `info`, or OK.
Status CheckRuntimeDirectory(const std::string& path, const struct stat& info) {
  const std::string shown = EscapeControls(path);
  if (S_ISLNK(info.st_mode)) {
    return Status::IOError(fmt::format(
        "the runtime directory {} is a symbolic link; idem never follows one there (it would "
        "send the store's socket wherever the link points): remove it, and idem makes the "
        "directory again, {}",
        shown, kOrElse));
  }
  if (!S_ISDIR(info.st_mode)) {
    return Status::IOError(fmt::format(
        "the runtime directory {} is not a directory: remove it, and idem makes the directory, {}",
        shown, kOrElse));
  }
  const uid_t user = ::geteuid();
  if (info.st_uid != user) {
    return Status::IOError(fmt::format(
        "the runtime directory {} belongs to uid {}, not to uid {}, the user of this process: "
        "another user could put a socket in the store's owner's place there. Remove it (it holds "
        "only sockets), {}",
        shown, info.st_uid, user, kOrElse));
  }
  if ((info.st_mode & 077) != 0) {
    return Status::IOError(fmt::format(
        "the runtime directory {} has mode {:04o}: group or others may reach the store's socket "
        "in it. Fix it with: chmod 0700 {} (idem makes it with mode 0700), {}",
        shown, info.st_mode & 07777, shown, kOrElse));
  }
  return Status::OK();
}

}  // namespace

std::string ChooseRuntimeDirectory(const char* xdg_runtime_dir, uid_t user,
                                   FunctionRef<bool(const std::string&)> owned_directory) {
  if (xdg_runtime_dir != nullptr && xdg_runtime_dir[0] == '/' && owned_directory(xdg_runtime_dir)) {
    std::string base = xdg_runtime_dir;
    while (base.size() > 1 && base.back() == '/') base.pop_back();
    return base == "/" ? "/idem" : base + "/idem";
  }
  const std::string user_runtime = fmt::format("/run/user/{}", user);
  if (owned_directory(user_runtime)) return user_runtime + "/idem";
  if (user == 0) return "/run/idem";
  return fmt::format("/tmp/idem-{}", user);
}

Result<RuntimeDirectory> OpenRuntimeDirectory(bool create) {
  const uid_t user = ::geteuid();
  RuntimeDirectory directory;
  directory.path =
      ChooseRuntimeDirectory(std::getenv("XDG_RUNTIME_DIR"), user,
                             [&](const std::string& path) { return OwnedDirectory(path, user); });
  const std::string shown = EscapeControls(directory.path);
  // The mode is given to mkdir itself: never wider than 0700, not for an instant.
  const bool created = create && ::mkdir(directory.path.c_str(), kRuntimeDirectoryMode) == 0;
  if (create && !created && errno != EEXIST) {
    return Status::IOError(fmt::format("cannot make the runtime directory {}: {}; {}", shown,
                                       std::strerror(errno), kOrElse));
  }
  struct stat seen {};
  if (::lstat(directory.path.c_str(), &seen) != 0) {
    if (errno == ENOENT) {
      return Status::NotFound(fmt::format("the runtime directory {} does not exist", shown));
    }
    return Status::IOError(
        fmt::format("cannot look at the runtime directory {}: {}", shown, std::strerror(errno)));
  }
  IDEM_RETURN_IF_ERROR(CheckRuntimeDirectory(directory.path, seen));
  // Checked again through the descriptor kept: the path may have been replaced since the lstat.
  auto fd = std::make_shared<const FileDescriptor>(
      ::open(directory.path.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat opened {};
  if (fd->get() < 0 || ::fstat(fd->get(), &opened) != 0) {
    return Status::IOError(
        fmt::format("cannot open the runtime directory {}: {}", shown, std::strerror(errno)));
  }
  if (opened.st_dev != seen.st_dev || opened.st_ino != seen.st_ino) {
    return Status::IOError(
        fmt::format("the runtime directory {} was replaced while it was being opened", shown));
  }
  // A umask that removes owner bits (0277, say) left a new directory unusable to its owner.
  if (created && (opened.st_mode & 07777) != kRuntimeDirectoryMode) {
    if (::chmod(fmt::format("/proc/self/fd/{}", fd->get()).c_str(), kRuntimeDirectoryMode) != 0 &&
        ::chmod(directory.path.c_str(), kRuntimeDirectoryMode) != 0) {
      return Status::IOError(fmt::format("cannot set the mode of the runtime directory {}: {}",
                                         shown, std::strerror(errno)));
    }
  }
  directory.fd = std::move(fd);
  return directory;
}

std::string RuntimeSocketName(unsigned long device, unsigned long inode) {
  return fmt::format("idem-{:x}-{:x}.socket", device, inode);
}

}  // namespace idem::sharing
