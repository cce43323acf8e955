#include "core/disk_reserve.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "sharing/socket.h"

namespace idem::core {

bool IsNoSpace(const Status& status) {
  return status.code() == Status::Code::kIOError &&
         status.message().find("No space left on device") != std::string::npos;
}

bool SpendReserve(const std::filesystem::path& directory) {
  return ::unlink((directory / kReserveFile).c_str()) == 0;
}

void KeepReserve(const std::filesystem::path& directory) {
  const std::filesystem::path reserve = directory / kReserveFile;
  struct stat seen {};
  if (::lstat(reserve.c_str(), &seen) == 0) return;
  const std::string staged = reserve.string() + ".new";
  bool made = false;
  {
    sharing::FileDescriptor fd(
        ::open(staged.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (fd.get() < 0) return;
    // Allocated blocks, not a sparse length: the space is really taken until it is spent.
    made = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(kReserveBytes)) == 0 &&
           ::fsync(fd.get()) == 0;
  }
  if (!made || ::rename(staged.c_str(), reserve.c_str()) != 0) {
    ::unlink(staged.c_str());
    return;
  }
  // The directory's entry need not be synced: a reserve lost to a power cut is made again by
  // the next open.
}

}  // namespace idem::core
