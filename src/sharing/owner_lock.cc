#include "sharing/owner_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <set>
#include <sstream>

#include "util/escape.h"
#include "util/mutex.h"

namespace idem::sharing {
namespace {

constexpr mode_t kLockFileMode = 0600;

std::string LockPath(const std::string& directory) { return directory + "/" + kOwnerLockFile; }

// The descriptors of the owner locks this process holds. A child made by fork() shares their
// open file descriptions, and so the locks: if it kept them, the store would stay locked after
// the owner died, with nobody serving it. The fork handler closes them in the child.
util::Mutex held_mu;
std::set<int>& HeldLocks() IDEM_REQUIRES(held_mu) {
  static std::set<int> fds;
  return fds;
}

void InstallForkHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    // The analysis cannot follow a lock taken in one handler and released in another.
    pthread_atfork([]() IDEM_NO_THREAD_SAFETY_ANALYSIS { held_mu.Lock(); },
                   []() IDEM_NO_THREAD_SAFETY_ANALYSIS { held_mu.Unlock(); },
                   []() IDEM_NO_THREAD_SAFETY_ANALYSIS {
                     for (int fd : HeldLocks()) ::close(fd);
                     HeldLocks().clear();
                     held_mu.Unlock();
                   });
  });
}

}  // namespace

Result<std::unique_ptr<OwnerLock>> OwnerLock::TryAcquire(const std::string& directory,
                                                         Sharing sharing) {
  const std::string path = LockPath(directory);
  // Never through a symbolic link (a planted one would make this process truncate and write
  // whatever file it names), and created 0600 whatever the umask.
  FileDescriptor fd(
      ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, kLockFileMode));
  if (fd.get() < 0) {
    if (errno == ELOOP) {
      return Status::IOError(fmt::format(
          "the lock file {} is a symbolic link; idem never follows one inside a store (remove it)",
          EscapeControls(path)));
    }
    return Status::IOError(fmt::format("cannot open the lock file {}: {}", EscapeControls(path),
                                       std::strerror(errno)));
  }
  struct stat file {};
  if (::fstat(fd.get(), &file) != 0) {
    return Status::IOError(fmt::format("cannot stat the lock file {}: {}", EscapeControls(path),
                                       std::strerror(errno)));
  }
  // Written below: it must be this user's own file, and no other name of some other file.
  if (!S_ISREG(file.st_mode) || file.st_uid != ::geteuid() || file.st_nlink != 1) {
    return Status::IOError(fmt::format(
        "the lock file {} is not a regular file of this user (uid {}) with one name; remove it",
        EscapeControls(path), ::geteuid()));
  }
  if ((file.st_mode & 07777) != kLockFileMode && ::fchmod(fd.get(), kLockFileMode) != 0) {
    return Status::IOError(fmt::format("cannot set the mode of the lock file {}: {}",
                                       EscapeControls(path), std::strerror(errno)));
  }
  while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) return std::unique_ptr<OwnerLock>();
    return Status::IOError(
        fmt::format("cannot lock {}: {}", EscapeControls(path), std::strerror(errno)));
  }
  // Informational only: the lock itself is the truth.
  const std::string info = fmt::format("pid {}\nsharing {}\n", ::getpid(),
                                       sharing == Sharing::kExclusive ? "exclusive" : "auto");
  if (::ftruncate(fd.get(), 0) != 0 ||
      ::pwrite(fd.get(), info.data(), info.size(), 0) != static_cast<ssize_t>(info.size())) {
    return Status::IOError(fmt::format("cannot write the lock file {}: {}", EscapeControls(path),
                                       std::strerror(errno)));
  }
  InstallForkHandler();
  {
    util::MutexLock lock(held_mu);
    HeldLocks().insert(fd.get());
  }
  return std::unique_ptr<OwnerLock>(new OwnerLock(std::move(fd)));
}

OwnerLock::~OwnerLock() {
  util::MutexLock lock(held_mu);
  // After a fork the child's handler has closed it already; the number may have been reused.
  if (HeldLocks().erase(fd_.get()) == 0) static_cast<void>(fd_.release());
}

Result<bool> OwnerLock::IsHeld(const std::string& directory) {
  const std::string path = LockPath(directory);
  const auto cannot_tell = [&](std::string_view what, int error) {
    return Status::Unavailable(
        fmt::format("cannot tell whether a process owns store {}: cannot {} its lock file {}: {}",
                    EscapeControls(directory), what, EscapeControls(path), std::strerror(error)));
  };
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (fd.get() < 0) {
    if (errno == ENOENT) return false;  // no lock file: nobody ever owned the store
    return cannot_tell("open", errno);
  }
  while (::flock(fd.get(), LOCK_SH | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) return true;
    return cannot_tell("lock", errno);
  }
  ::flock(fd.get(), LOCK_UN);
  return false;
}

std::optional<OwnerInfo> OwnerLock::ReadOwner(const std::string& directory) {
  FileDescriptor fd(
      ::open(LockPath(directory).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (fd.get() < 0) return std::nullopt;
  char buffer[128];
  const ssize_t n = ::pread(fd.get(), buffer, sizeof buffer, 0);
  if (n <= 0) return std::nullopt;
  std::istringstream file(std::string(buffer, static_cast<std::size_t>(n)));
  std::string word, mode;
  OwnerInfo info;
  if (!(file >> word >> info.pid) || word != "pid") return std::nullopt;
  if (file >> word >> mode && word == "sharing") info.exclusive = mode == "exclusive";
  return info;
}

}  // namespace idem::sharing
