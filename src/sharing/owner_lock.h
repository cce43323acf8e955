// The lock that makes one process the owner of a store directory.
//
// It is flock(2) on the dedicated file `owner.lock`, opened once per ownership. Why flock and
// not Boost.Interprocess file_lock (fcntl): an fcntl lock is dropped when the process closes
// ANY descriptor of the file, and is not exclusive between threads of one process; flock
// belongs to the open file description, so it is held until that description is closed, is
// exclusive against every other open of the file (this process's included), and the kernel
// releases it when the holder dies, SIGKILL included. Named mutexes and semaphores are not used
// because a holder killed mid-operation leaves them locked for everyone.

#ifndef IDEM_SHARING_OWNER_LOCK_H_
#define IDEM_SHARING_OWNER_LOCK_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

#include "idem/options.h"
#include "idem/status.h"
#include "sharing/socket.h"

namespace idem::sharing {

// The lock file's name in the store directory.
inline constexpr char kOwnerLockFile[] = "owner.lock";

// What the owner wrote into the lock file, for messages and for clients to tell an exclusive
// owner (which serves no socket) from a sharing one.
struct OwnerInfo {
  pid_t pid = 0;
  bool exclusive = false;
};

class OwnerLock {
 public:
  // Takes the lock of store `directory` without waiting. Returns null (and OK) when another
  // open file description holds it.
  static Result<std::unique_ptr<OwnerLock>> TryAcquire(const std::string& directory,
                                                       Sharing sharing);

  // True when some process holds the lock of `directory` now (it may be starting up, not yet
  // serving); false when none does, or there is no lock file (nobody ever owned the store).
  // Takes a shared lock for an instant to find out; creates nothing. kUnavailable when it cannot
  // tell: the lock file exists but cannot be opened (another user's, say) or locked. Never
  // "nobody" for a lock it could not look at.
  static Result<bool> IsHeld(const std::string& directory);

  // What the current owner of `directory` wrote, if anything is readable.
  static std::optional<OwnerInfo> ReadOwner(const std::string& directory);

  // Closing the descriptor releases the lock. A child made by fork() does not inherit it.
  ~OwnerLock();

 private:
  explicit OwnerLock(FileDescriptor fd) : fd_(std::move(fd)) {}
  FileDescriptor fd_;
};

}  // namespace idem::sharing

#endif  // IDEM_SHARING_OWNER_LOCK_H_
