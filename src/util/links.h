// Symbolic links along a path that another user controls: what the kernel's protected_symlinks
// refuses in sticky directories, refused anywhere on a store's path.

#ifndef IDEM_UTIL_LINKS_H_
#define IDEM_UTIL_LINKS_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

namespace idem::util {

// A symbolic link met while resolving a path, and whose it is.
struct ForeignLink {
  std::string link;    // the link's own path, as resolved up to it
  std::string target;  // what it points to
  uid_t owner = 0;
};

// Resolves `path` (relative to the working directory) one component at a time, as the kernel
// does, and returns the first symbolic link on the way that belongs to neither `user` nor root:
// its owner could point it anywhere, at another user's files included. Nothing when there is
// none, and for a path that cannot be resolved (missing components, a loop): opening it then
// reports that.
std::optional<ForeignLink> FindForeignLink(std::string_view path, uid_t user);

}  // namespace idem::util

#endif  // IDEM_UTIL_LINKS_H_
