#include "sharing/socket.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "storage/record_codec.h"
#include "util/escape.h"

namespace idem::sharing {
namespace {

std::string ErrnoText(int error) { return std::strerror(error); }

// Fills `addr` with `path`; returns the length to pass to bind/connect. The caller made sure
// that `path` fits.
socklen_t ToSockaddr(const std::string& path, sockaddr_un& addr) {
  std::memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
}

bool Fits(const std::string& path) { return path.size() < sizeof(sockaddr_un::sun_path); }

// The longest store directory path whose socket is bound by its own path.
constexpr std::size_t kMaxDirectLength =
    sizeof(sockaddr_un::sun_path) - 1 -
    (1 + sizeof(kSocketFile) - 1 + sizeof(kSocketBindSuffix) - 1);

// Waits until `fd` is readable or `deadline` passes.
Status WaitReadable(int fd, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Status::TimedOut("the peer stalled in the middle of a frame");
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready > 0) return Status::OK();
    if (ready < 0 && errno != EINTR) return Status::Unavailable("poll: " + ErrnoText(errno));
  }
}

// Reads exactly `size` bytes by `deadline`. Reads first and waits only when nothing is there
// yet: bytes that have arrived cost one system call, not a poll and a read.
Status ReadExactly(int fd, char* out, std::size_t size,
                   std::chrono::steady_clock::time_point deadline) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::recv(fd, out + done, size - done, MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n == 0) {
      return Status::Unavailable("connection closed by the peer");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      IDEM_RETURN_IF_ERROR(WaitReadable(fd, deadline));
    } else if (errno != EINTR) {
      return Status::Unavailable("receiving: " + ErrnoText(errno));
    }
  }
  return Status::OK();
}

}  // namespace

SocketAddress SocketAddressFor(const std::string& directory, unsigned long device,
                               unsigned long inode) {
  SocketAddress address;
  const std::string direct = directory + "/" + kSocketFile;
  address.shown = EscapeControls(direct);
  if (Fits(direct + kSocketBindSuffix)) {
    address.path = direct;
    return address;
  }
  // Too long for a socket address: through a descriptor of the directory.
  const int fd = ::open(directory.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    address.unusable =
        "cannot open the store directory " + EscapeControls(directory) + ": " + ErrnoText(errno);
    return address;
  }
  auto held = std::make_shared<const FileDescriptor>(fd);
  const std::string via = "/proc/self/fd/" + std::to_string(fd);
  struct stat opened {};
  struct stat seen {};
  if (::fstat(fd, &opened) != 0 || opened.st_dev != device || opened.st_ino != inode) {
    address.unusable = "the store directory " + EscapeControls(directory) +
                       " was replaced while it was being opened";
  } else if (::stat(via.c_str(), &seen) != 0 || seen.st_dev != device || seen.st_ino != inode) {
    address.unusable =
        "the store path " + EscapeControls(directory) + " is " + std::to_string(directory.size()) +
        " bytes, too long for its socket's address (at most " + std::to_string(kMaxDirectLength) +
        " bytes), and /proc/self/fd, through which idem reaches the socket of such a store, "
        "is not available in this process (is /proc mounted, for this PID namespace?): use a "
        "shorter store path, or mount /proc";
  } else {
    address.path = via + "/" + kSocketFile;
    address.directory = std::move(held);
  }
  return address;
}

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

Result<int> Listen(const SocketAddress& address) {
  if (!address.unusable.empty()) return Status::IOError(address.unusable);
  FileDescriptor fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Status::IOError("socket: " + ErrnoText(errno));
  // bind() creates the file with the process's umask: under a temporary name, so that nobody
  // can connect before it is 0600 (the directory is the owner's only as well). A dead owner may
  // have left the temporary name behind.
  const std::string bound = address.path + kSocketBindSuffix;
  ::unlink(bound.c_str());
  sockaddr_un addr;
  const socklen_t length = ToSockaddr(bound, addr);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), length) != 0) {
    return Status::IOError("cannot bind the store socket " + address.shown + kSocketBindSuffix +
                           ": " + ErrnoText(errno));
  }
  if (::chmod(bound.c_str(), S_IRUSR | S_IWUSR) != 0) {
    const int error = errno;
    ::unlink(bound.c_str());
    return Status::IOError("cannot restrict the store socket " + address.shown + ": " +
                           ErrnoText(error));
  }
  if (::listen(fd.get(), 128) != 0) {
    const int error = errno;
    ::unlink(bound.c_str());
    return Status::IOError("cannot listen on " + address.shown + ": " + ErrnoText(error));
  }
  // Replaces a dead owner's socket file in one step (rename never follows a symbolic link).
  if (::rename(bound.c_str(), address.path.c_str()) != 0) {
    const int error = errno;
    ::unlink(bound.c_str());
    return Status::IOError("cannot put the store socket in place at " + address.shown + ": " +
                           ErrnoText(error));
  }
  return fd.release();
}

Result<int> Connect(const SocketAddress& address) {
  if (!address.unusable.empty()) return Status::IOError(address.unusable);
  // Only the owner's user can put anything in the store directory, and the peer's credentials
  // are checked below; a symbolic link in place of the socket is refused all the same.
  struct stat info {};
  if (::lstat(address.path.c_str(), &info) == 0 && S_ISLNK(info.st_mode)) {
    return Status::IOError("the store socket " + address.shown +
                           " is a symbolic link; idem never follows one inside a store");
  }
  FileDescriptor fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Status::IOError("socket: " + ErrnoText(errno));
  sockaddr_un addr;
  const socklen_t length = ToSockaddr(address.path, addr);
  while (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), length) != 0) {
    if (errno == EINTR) continue;
    return Status::Unavailable("cannot connect to the store's owner at " + address.shown + ": " +
                               ErrnoText(errno));
  }
  // The kernel's record of who listens (as of its listen()), not anything the peer says.
  ucred peer{};
  socklen_t size = sizeof(peer);
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0) {
    return Status::IOError("cannot read the credentials of the process serving " + address.shown +
                           ": " + ErrnoText(errno));
  }
  if (peer.uid != ::geteuid()) {
    return Status::IOError("the store socket " + address.shown + " is served by pid " +
                           std::to_string(peer.pid) + " of uid " + std::to_string(peer.uid) +
                           ", not by this process's user (uid " + std::to_string(::geteuid()) +
                           "): refusing to send it anything");
  }
  return fd.release();
}

Status WriteFrame(int fd, std::string_view payload) {
  std::string frame;
  frame.reserve(4 + payload.size());
  storage::PutFixed32(frame, static_cast<uint32_t>(payload.size()));
  frame.append(payload);
  std::size_t done = 0;
  while (done < frame.size()) {
    const ssize_t n = ::send(fd, frame.data() + done, frame.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      return Status::Unavailable("sending: " + ErrnoText(errno));
    }
  }
  return Status::OK();
}

Result<std::string> ReadFrame(int fd, std::size_t max_size,
                              std::chrono::milliseconds body_timeout) {
  // The wait for a frame to start is unbounded (an idle connection); once it has started, the
  // rest must arrive within `body_timeout`. The first read takes the header and, usually, the
  // whole body: one system call per frame.
  char first[4096];
  std::size_t got = 0;
  while (got == 0) {
    const ssize_t n = ::recv(fd, first, sizeof first, 0);
    if (n > 0) {
      got = static_cast<std::size_t>(n);
    } else if (n == 0) {
      return Status::Unavailable("connection closed by the peer");
    } else if (errno != EINTR) {
      return Status::Unavailable("receiving: " + ErrnoText(errno));
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + body_timeout;
  if (got < 4) {
    IDEM_RETURN_IF_ERROR(ReadExactly(fd, first + got, 4 - got, deadline));
    got = 4;
  }
  const uint32_t size = storage::GetFixed32(first);
  if (size > max_size) {
    return Status::InvalidArgument("frame of " + std::to_string(size) +
                                   " bytes is over the limit of " + std::to_string(max_size));
  }
  // Each side sends one frame and waits for the answer: bytes past this frame mean a peer that
  // does not follow the protocol.
  if (got - 4 > size) {
    return Status::InvalidArgument("the peer sent another frame before the answer to this one");
  }
  std::string payload(first + 4, got - 4);
  payload.resize(size);
  IDEM_RETURN_IF_ERROR(ReadExactly(fd, payload.data() + (got - 4), size - (got - 4), deadline));
  return payload;
}

}  // namespace idem::sharing
