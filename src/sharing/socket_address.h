// Where a store's owner listens, and connecting to it.
//
// The owner's socket is the file `socket` in the store directory, mode 0600, when the store
// directory can hold it. When it cannot (bind refuses a socket inode there: vfat and exFAT, a
// FUSE file system without mknod; or the store path is too long for a socket address and /proc,
// the way around that, is missing), the owner serves it in its user's runtime directory
// (runtime_directory.h) as `idem-<device hex>-<inode hex>.socket`, named after the store
// directory's identity, and logs once where. Clients try the store directory's socket first,
// then the runtime directory's. Whichever answers is the owner: only the holder of the owner lock
// listens, and a socket file left by a dead owner refuses connections (kUnavailable: tried
// next). When the owner has put its socket in one place it removes a socket file in the other,
// left by an earlier owner, so that a store has one socket file at a time.
//
// Never a name in Linux's abstract namespace: that has no permissions (any local user could
// connect to it) and no owner (after the owner died, any local user could bind the name and
// answer the other processes).
//
// A socket address holds at most 107 bytes. For a longer path this process reaches the same file
// through a descriptor of its directory that the address keeps open: `/proc/self/fd/N/socket`.

#ifndef IDEM_SHARING_SOCKET_ADDRESS_H_
#define IDEM_SHARING_SOCKET_ADDRESS_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>

#include "idem/status.h"
#include "sharing/socket.h"

namespace idem::sharing {

// The socket's name in the store directory, and the suffix of the name Listen binds first.
inline constexpr char kSocketFile[] = "socket";
inline constexpr char kSocketBindSuffix[] = ".new";

// One place for a socket file: `name` in a directory held open.
struct SocketPlace {
  std::string path;      // what bind and connect use: `directory`/`name` or /proc/self/fd/N/`name`
  std::string shown;     // `directory`/`name`, for messages (control characters escaped)
  std::string unusable;  // not empty: why this process cannot use this place
  std::string name;
  std::shared_ptr<const FileDescriptor> directory;  // O_PATH
};

// Where the owner of a store listens, as the header says.
struct SocketAddress {
  SocketPlace in_store;      // the store directory's `socket`
  std::string runtime_name;  // its name in the runtime directory
  const std::string& ToString() const { return in_store.shown; }
};
// `device` and `inode` identify `directory` (as the caller checked it): the directory descriptor
// must be that directory, not one put in its place since.
SocketAddress SocketAddressFor(const std::string& directory, unsigned long device,
                               unsigned long inode);

// A listening socket and where it is.
struct Listener {
  FileDescriptor fd;
  SocketPlace place;
  ino_t inode = 0;           // of the socket file
  std::string not_in_store;  // why it is not in the store directory; empty when it is
};

// A listening socket at `address`, mode 0600 from the moment anyone can connect to it: it is
// bound under a temporary name, restricted, then renamed over the socket's name (which also
// replaces a stale socket file left by a dead owner). In the store directory when it can hold it,
// else in the runtime directory (made when missing). kIOError when neither can take it, saying
// why for both. Call only while holding the owner lock.
Result<Listener> Listen(const SocketAddress& address);

// Removes the socket file of `listener` when it is in the runtime directory (shared by every
// store of the user, it is not left behind) and still the one `listener` put there. Call while
// holding the owner lock.
void RemoveRuntimeSocket(const Listener& listener);

// A connection to a store's owner, and the owner's pid as the kernel names it (from the same
// SO_PEERCRED read that checked its user; 0 when it runs in a PID namespace this process cannot
// see).
struct OwnerConnection {
  FileDescriptor fd;
  pid_t owner_pid = 0;
};

// A connection to the owner at `address` (the store directory's socket, then the runtime
// directory's). Before anything is sent, checks that the process serving it runs as this
// process's effective user (SO_PEERCRED): kIOError otherwise, so that no request (or result) ever
// reaches another user's process. Waits at most `timeout` for room in the owner's queue of
// connections to accept (it fills up while the owner is stopped): kTimedOut then. kUnavailable
// when nobody listens in either place (a runtime directory that is missing or refused counts as
// nobody there; the message says why). Any other error is final for the callers (OwnerClient,
// DirectoryStoreCore): they do not fail over for it.
Result<OwnerConnection> Connect(const SocketAddress& address, std::chrono::milliseconds timeout);

}  // namespace idem::sharing

#endif  // IDEM_SHARING_SOCKET_ADDRESS_H_
