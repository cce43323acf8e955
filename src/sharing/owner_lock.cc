#include "sharing/owner_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

namespace idem::sharing {
namespace {

constexpr char kLockName[] = "owner.lock";

std::string LockPath(const std::string& directory) { return directory + "/" + kLockName; }

}  // namespace

Result<std::unique_ptr<OwnerLock>> OwnerLock::TryAcquire(const std::string& directory,
                                                         Sharing sharing) {
  const std::string path = LockPath(directory);
  FileDescriptor fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (fd.get() < 0) {
    return Status::IOError("cannot open the lock file " + path + ": " + std::strerror(errno));
  }
  while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) return std::unique_ptr<OwnerLock>();
    return Status::IOError("cannot lock " + path + ": " + std::strerror(errno));
  }
  // Informational only: the lock itself is the truth.
  const std::string info = "pid " + std::to_string(::getpid()) + "\nsharing " +
                           (sharing == Sharing::kExclusive ? "exclusive" : "auto") + "\n";
  if (::ftruncate(fd.get(), 0) != 0 ||
      ::pwrite(fd.get(), info.data(), info.size(), 0) != static_cast<ssize_t>(info.size())) {
    return Status::IOError("cannot write the lock file " + path + ": " + std::strerror(errno));
  }
  return std::unique_ptr<OwnerLock>(new OwnerLock(std::move(fd)));
}

std::optional<OwnerInfo> OwnerLock::ReadOwner(const std::string& directory) {
  std::ifstream file(LockPath(directory));
  std::string word, mode;
  OwnerInfo info;
  if (!(file >> word >> info.pid) || word != "pid") return std::nullopt;
  if (file >> word >> mode && word == "sharing") info.exclusive = mode == "exclusive";
  return info;
}

}  // namespace idem::sharing
