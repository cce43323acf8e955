// The private runtime directory of this process's user: where a store's owner serves its socket
// when the store directory cannot hold one (a file system without socket inodes: vfat, exFAT,
// a FUSE file system without mknod; or a store path too long for a socket address where /proc
// is not mounted), and where the other processes look for it next.
//
// Which directory. `$XDG_RUNTIME_DIR/idem` when XDG_RUNTIME_DIR is set, absolute, and a
// directory of this user; else `/run/user/<uid>/idem` when /run/user/<uid> is a directory of
// this user; else `/run/idem` for root; else `/tmp/idem-<uid>`. Every process that shares a store
// through it must see the same one (the same user, the same XDG_RUNTIME_DIR).
//
// Who may use it. Only this user: whoever could write in it could put a socket of their own in
// the owner's place (clients would refuse it: they check the peer's user, but the store would be
// unusable), and whoever could reach it could try the owner's. So it is made with mode 0700, and
// refused, with a message saying how to fix it, when it is a symbolic link, not a directory, not
// owned by this process's effective user (root included: compared with geteuid(), not
// bypassed), or reachable by group or others. It is opened without following a link and checked
// through that descriptor, and the socket is put in place relative to it, so a link planted
// after the check cannot redirect it.

#ifndef IDEM_SHARING_RUNTIME_DIRECTORY_H_
#define IDEM_SHARING_RUNTIME_DIRECTORY_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "idem/function_ref.h"
#include "idem/status.h"
#include "sharing/socket.h"

namespace idem::sharing {

// The runtime directory, open.
struct RuntimeDirectory {
  std::string path;
  std::shared_ptr<const FileDescriptor> fd;  // O_PATH | O_DIRECTORY, checked
};

// The runtime directory's path for `user`, given XDG_RUNTIME_DIR's value (null when unset) and
// `owned_directory(path)`: whether `path` is a directory (not a link) owned by `user`. Pure.
std::string ChooseRuntimeDirectory(const char* xdg_runtime_dir, uid_t user,
                                   FunctionRef<bool(const std::string&)> owned_directory);

// The runtime directory of this process's effective user, opened and checked as described
// above; made first (mode 0700) when missing and `create`. kNotFound when it is missing and not
// `create`; kIOError naming the path, what is wrong and what to do when it is refused or cannot
// be made.
Result<RuntimeDirectory> OpenRuntimeDirectory(bool create);

// The name of the socket of the store directory identified by (`device`, `inode`) in the runtime
// directory: `idem-<device hex>-<inode hex>.socket`.
std::string RuntimeSocketName(unsigned long device, unsigned long inode);

}  // namespace idem::sharing

#endif  // IDEM_SHARING_RUNTIME_DIRECTORY_H_
