#include "sharing/socket_address.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "sharing/runtime_directory.h"
#include "util/escape.h"

namespace idem::sharing {
namespace {

// Fills `addr` with `path`; returns the length to pass to bind/connect. The caller made sure
// that `path` fits.
socklen_t ToSockaddr(const std::string& path, sockaddr_un& addr) {
  std::memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
}

bool Fits(const std::string& path) { return path.size() < sizeof(sockaddr_un::sun_path); }

// Whether a bind that failed with `error` says that the directory cannot hold a socket inode:
// vfat and other kernel file systems without mknod (EPERM), a FUSE file system without mknod
// (ENOSYS), one that says so (EOPNOTSUPP), and Debian's exfat-fuse, whose mknod makes a regular
// file that the kernel then refuses as the socket (EIO; the file is removed after). A real disk
// error is not hidden by serving elsewhere: the store's own files meet it.
bool NoSocketInodes(int error) {
  return error == EPERM || error == ENOSYS || error == EOPNOTSUPP || error == EIO;
}

// `name` in the directory `directory_path`, open as `directory`.
SocketPlace PlaceIn(const std::string& directory_path,
                    std::shared_ptr<const FileDescriptor> directory, const std::string& name) {
  SocketPlace place;
  place.name = name;
  place.directory = std::move(directory);
  const std::string direct = directory_path + "/" + name;
  place.shown = EscapeControls(direct);
  if (Fits(direct + kSocketBindSuffix)) {
    place.path = direct;
    return place;
  }
  // Too long for a socket address: through the descriptor of the directory.
  const std::string via = fmt::format("/proc/self/fd/{}", place.directory->get());
  struct stat opened {};
  struct stat seen {};
  if (::fstat(place.directory->get(), &opened) != 0 || ::stat(via.c_str(), &seen) != 0 ||
      seen.st_dev != opened.st_dev || seen.st_ino != opened.st_ino) {
    place.unusable = fmt::format(
        "the path {} is {} bytes, too long for a socket's address (at most {} bytes), and "
        "/proc/self/fd, through which idem reaches such a socket, is not available in this process "
        "(is /proc mounted, for this PID namespace?)",
        place.shown, direct.size(), sizeof(sockaddr_un::sun_path) - 1 - sizeof(kSocketBindSuffix));
  } else {
    place.path = via + "/" + name;
  }
  return place;
}

// True when `name` in `directory` is a socket of this process's user: the only kind of file idem
// removes or replaces in a store or runtime directory (even one reached through a path that
// another user pointed at this user's files).
bool IsOwnSocket(int directory, const std::string& name) {
  struct stat info {};
  return ::fstatat(directory, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0 &&
         S_ISSOCK(info.st_mode) && info.st_uid == ::geteuid();
}

// Removes the socket file `name` in `directory`, if it is this user's (never anything else).
void RemoveSocketFile(int directory, const std::string& name) {
  if (IsOwnSocket(directory, name)) ::unlinkat(directory, name.c_str(), 0);
}

// Listen at `place`; `bind_error` is errno when bind failed.
Result<Listener> ListenAt(const SocketPlace& place, int* bind_error) {
  if (!place.unusable.empty()) return Status::IOError(place.unusable);
  const int directory = place.directory->get();
  FileDescriptor fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Status::IOError(fmt::format("socket: {}", std::strerror(errno)));
  // bind() creates the file with the process's umask: under a temporary name, so that nobody
  // can connect before it is 0600 (the directory is the owner's only as well). A dead owner may
  // have left the temporary name behind.
  const std::string temporary = place.name + kSocketBindSuffix;
  RemoveSocketFile(directory, temporary);
  // Anything else in the socket's place is not idem's to replace.
  for (const std::string& name : {temporary, place.name}) {
    struct stat info {};
    if (::fstatat(directory, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0 &&
        !IsOwnSocket(directory, name)) {
      return Status::IOError(fmt::format(
          "{}/{} is {} of uid {}, not a socket of uid {}, the user of this process: idem replaces "
          "only its own sockets. Remove it if it is left over",
          place.shown.substr(0, place.shown.rfind('/')), EscapeControls(name),
          S_ISSOCK(info.st_mode) ? "a socket" : "a file", info.st_uid, ::geteuid()));
    }
  }
  sockaddr_un addr;
  const socklen_t length = ToSockaddr(place.path + kSocketBindSuffix, addr);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), length) != 0) {
    *bind_error = errno;
    // What a FUSE file system may have made before failing (nothing was there: checked above).
    struct stat made {};
    if (::fstatat(directory, temporary.c_str(), &made, AT_SYMLINK_NOFOLLOW) == 0 &&
        made.st_uid == ::geteuid()) {
      ::unlinkat(directory, temporary.c_str(), 0);
    }
    return Status::IOError(fmt::format("cannot bind the store socket {}{}: {}", place.shown,
                                       kSocketBindSuffix, std::strerror(*bind_error)));
  }
  // From here on the file is reached through the directory checked, whatever its path is now.
  struct stat bound {};
  if (::fstatat(directory, temporary.c_str(), &bound, AT_SYMLINK_NOFOLLOW) != 0 ||
      !S_ISSOCK(bound.st_mode)) {
    return Status::IOError(
        fmt::format("the store socket {}{} is not where it was bound: was its directory replaced?",
                    place.shown, kSocketBindSuffix));
  }
  const auto fail = [&](std::string_view what) {
    const int error = errno;
    ::unlinkat(directory, temporary.c_str(), 0);
    return Status::IOError(
        fmt::format("cannot {} the store socket {}: {}", what, place.shown, std::strerror(error)));
  };
  if (::fchmodat(directory, temporary.c_str(), S_IRUSR | S_IWUSR, 0) != 0) return fail("restrict");
  if (::listen(fd.get(), 128) != 0) return fail("listen on");
  // Replaces a dead owner's socket file in one step (rename never follows a symbolic link).
  if (::renameat(directory, temporary.c_str(), directory, place.name.c_str()) != 0) {
    return fail("put in place");
  }
  return Listener{.fd = std::move(fd), .place = place, .inode = bound.st_ino, .not_in_store = {}};
}

// A connection to the owner listening at `place`, as Connect.
Result<OwnerConnection> ConnectAt(const SocketPlace& place, std::chrono::milliseconds timeout) {
  if (!place.unusable.empty()) return Status::IOError(place.unusable);
  // Only the owner's user can put anything in the store directory (or the runtime directory),
  // and the peer's credentials are checked below; a symbolic link in place of the socket is
  // refused all the same.
  struct stat info {};
  if (::fstatat(place.directory->get(), place.name.c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0 &&
      S_ISLNK(info.st_mode)) {
    return Status::IOError(
        fmt::format("the store socket {} is a symbolic link; idem never follows one", place.shown));
  }
  FileDescriptor fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Status::IOError(fmt::format("socket: {}", std::strerror(errno)));
  // connect() on a UNIX socket waits for room in the listener's backlog, which a stopped owner
  // never makes; the send timeout bounds that wait (frames are sent without blocking anyway).
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
      std::max(timeout, std::chrono::milliseconds(1)));
  const timeval limit{static_cast<time_t>(micros.count() / 1'000'000),
                      static_cast<suseconds_t>(micros.count() % 1'000'000)};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
  sockaddr_un addr;
  const socklen_t length = ToSockaddr(place.path, addr);
  while (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), length) != 0) {
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      return Status::TimedOut(
          fmt::format("the store's owner at {} accepted no connection within {} ms", place.shown,
                      timeout.count()));
    }
    return Status::Unavailable(fmt::format("cannot connect to the store's owner at {}: {}",
                                           place.shown, std::strerror(errno)));
  }
  // The kernel's record of who listens (as of its listen()), not anything the peer says.
  ucred peer{};
  socklen_t size = sizeof(peer);
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0) {
    return Status::IOError(fmt::format("cannot read the credentials of the process serving {}: {}",
                                       place.shown, std::strerror(errno)));
  }
  if (peer.uid != ::geteuid()) {
    return Status::IOError(fmt::format(
        "the store socket {} is served by pid {} of uid {}, not by this process's user (uid {}): "
        "refusing to send it anything",
        place.shown, peer.pid, peer.uid, ::geteuid()));
  }
  return OwnerConnection{std::move(fd), peer.pid};
}

}  // namespace

SocketAddress SocketAddressFor(const std::string& directory, unsigned long device,
                               unsigned long inode) {
  SocketAddress address;
  address.runtime_name = RuntimeSocketName(device, inode);
  auto held = std::make_shared<const FileDescriptor>(
      ::open(directory.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  struct stat opened {};
  if (held->get() < 0) {
    address.in_store.unusable = fmt::format("cannot open the store directory {}: {}",
                                            EscapeControls(directory), std::strerror(errno));
  } else if (::fstat(held->get(), &opened) != 0 || opened.st_dev != device ||
             opened.st_ino != inode) {
    address.in_store.unusable = fmt::format(
        "the store directory {} was replaced while it was being opened", EscapeControls(directory));
  } else {
    address.in_store = PlaceIn(directory, std::move(held), kSocketFile);
    return address;
  }
  address.in_store.name = kSocketFile;
  address.in_store.shown = EscapeControls(directory + "/" + kSocketFile);
  return address;
}

Result<Listener> Listen(const SocketAddress& address) {
  int bind_error = 0;
  Result<Listener> in_store = ListenAt(address.in_store, &bind_error);
  if (in_store.ok()) {
    // A socket an earlier owner served in the runtime directory is not this owner's. Looked for
    // only: a runtime directory that is missing or refused is none of this store's business.
    if (Result<RuntimeDirectory> runtime = OpenRuntimeDirectory(/*create=*/false); runtime.ok()) {
      RemoveSocketFile(runtime->fd->get(), address.runtime_name);
    }
    return in_store;
  }
  // Too long for an address without /proc: the directory is there (and held), only unreachable.
  // A store directory that could not be opened, or was replaced, is an error of its own.
  const bool unreachable = !address.in_store.unusable.empty() && address.in_store.directory;
  if (!unreachable && !NoSocketInodes(bind_error)) return in_store.status();
  const std::string why = in_store.status().message();
  const auto neither = [&](const Status& runtime) {
    return Status::IOError(fmt::format(
        "the store's socket cannot be in its directory ({}), and the runtime directory cannot "
        "take it: {}",
        why, runtime.message()));
  };
  Result<RuntimeDirectory> runtime = OpenRuntimeDirectory(/*create=*/true);
  if (!runtime.ok()) return neither(runtime.status());
  int ignored = 0;
  Result<Listener> there =
      ListenAt(PlaceIn(runtime->path, runtime->fd, address.runtime_name), &ignored);
  if (!there.ok()) return neither(there.status());
  there->not_in_store = why;
  // Nor is one an earlier owner served in the store directory (when /proc was there, say).
  if (address.in_store.directory) RemoveSocketFile(address.in_store.directory->get(), kSocketFile);
  return there;
}

void RemoveRuntimeSocket(const Listener& listener) {
  if (listener.not_in_store.empty() || !listener.place.directory) return;
  const int directory = listener.place.directory->get();
  struct stat info {};
  if (::fstatat(directory, listener.place.name.c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0 &&
      S_ISSOCK(info.st_mode) && info.st_ino == listener.inode) {
    ::unlinkat(directory, listener.place.name.c_str(), 0);
  }
}

Result<OwnerConnection> Connect(const SocketAddress& address, std::chrono::milliseconds timeout) {
  std::string nobody = address.in_store.unusable;
  if (nobody.empty()) {
    Result<OwnerConnection> connection = ConnectAt(address.in_store, timeout);
    if (connection.ok() || connection.status().code() != Status::Code::kUnavailable) {
      return connection;
    }
    nobody = connection.status().message();
  }
  // A runtime directory that is missing or refused holds no owner of this user's: nobody there
  // (an owner that needs it fails to start, and says why).
  Result<RuntimeDirectory> runtime = OpenRuntimeDirectory(/*create=*/false);
  if (!runtime.ok()) {
    return Status::Unavailable(fmt::format("{}; {}", nobody, runtime.status().message()));
  }
  const SocketPlace place = PlaceIn(runtime->path, runtime->fd, address.runtime_name);
  if (!place.unusable.empty()) {
    return Status::Unavailable(fmt::format("{}; {}", nobody, place.unusable));
  }
  Result<OwnerConnection> connection = ConnectAt(place, timeout);
  if (connection.ok() || connection.status().code() != Status::Code::kUnavailable) {
    return connection;
  }
  return Status::Unavailable(fmt::format("{}; {}", nobody, connection.status().message()));
}

}  // namespace idem::sharing
