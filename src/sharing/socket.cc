#include "sharing/socket.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "util/coding.h"
#include "util/escape.h"
#include "util/process.h"

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

// The longest store directory path whose socket is bound by its own path.
constexpr std::size_t kMaxDirectLength =
    sizeof(sockaddr_un::sun_path) - 1 -
    (1 + sizeof(kSocketFile) - 1 + sizeof(kSocketBindSuffix) - 1);

// Waits until `fd` is ready for `events` or `deadline` passes (kTimedOut: `what`).
Status WaitFor(int fd, short events, std::chrono::steady_clock::time_point deadline,
               std::string_view what) {
  for (;;) {
    const auto left = std::max(
        std::chrono::milliseconds(0),
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()));
    pollfd p{fd, events, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready > 0) return Status::OK();
    if (ready == 0 && left.count() == 0) return Status::TimedOut(std::string(what));
    if (ready < 0 && errno != EINTR)
      return Status::Unavailable(fmt::format("poll: {}", std::strerror(errno)));
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
      IDEM_RETURN_IF_ERROR(
          WaitFor(fd, POLLIN, deadline, "the peer stalled in the middle of a frame"));
    } else if (errno != EINTR) {
      return Status::Unavailable(fmt::format("receiving: {}", std::strerror(errno)));
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
    address.unusable = fmt::format("cannot open the store directory {}: {}",
                                   EscapeControls(directory), std::strerror(errno));
    return address;
  }
  auto held = std::make_shared<const FileDescriptor>(fd);
  const std::string via = fmt::format("/proc/self/fd/{}", fd);
  struct stat opened {};
  struct stat seen {};
  if (::fstat(fd, &opened) != 0 || opened.st_dev != device || opened.st_ino != inode) {
    address.unusable = fmt::format("the store directory {} was replaced while it was being opened",
                                   EscapeControls(directory));
  } else if (::stat(via.c_str(), &seen) != 0 || seen.st_dev != device || seen.st_ino != inode) {
    address.unusable = fmt::format(
        "the store path {} is {} bytes, too long for its socket's address (at most {} bytes), "
        "and /proc/self/fd, through which idem reaches the socket of such a store, is not "
        "available in this process (is /proc mounted, for this PID namespace?): use a shorter "
        "store path, or mount /proc",
        EscapeControls(directory), directory.size(), kMaxDirectLength);
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
  if (fd.get() < 0) return Status::IOError(fmt::format("socket: {}", std::strerror(errno)));
  // bind() creates the file with the process's umask: under a temporary name, so that nobody
  // can connect before it is 0600 (the directory is the owner's only as well). A dead owner may
  // have left the temporary name behind.
  const std::string bound = address.path + kSocketBindSuffix;
  ::unlink(bound.c_str());
  sockaddr_un addr;
  const socklen_t length = ToSockaddr(bound, addr);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), length) != 0) {
    return Status::IOError(fmt::format("cannot bind the store socket {}{}: {}", address.shown,
                                       kSocketBindSuffix, std::strerror(errno)));
  }
  if (::chmod(bound.c_str(), S_IRUSR | S_IWUSR) != 0) {
    const int error = errno;
    ::unlink(bound.c_str());
    return Status::IOError(fmt::format("cannot restrict the store socket {}: {}", address.shown,
                                       std::strerror(error)));
  }
  if (::listen(fd.get(), 128) != 0) {
    const int error = errno;
    ::unlink(bound.c_str());
    return Status::IOError(
        fmt::format("cannot listen on {}: {}", address.shown, std::strerror(error)));
  }
  // Replaces a dead owner's socket file in one step (rename never follows a symbolic link).
  if (::rename(bound.c_str(), address.path.c_str()) != 0) {
    const int error = errno;
    ::unlink(bound.c_str());
    return Status::IOError(fmt::format("cannot put the store socket in place at {}: {}",
                                       address.shown, std::strerror(error)));
  }
  return fd.release();
}

Result<OwnerConnection> Connect(const SocketAddress& address, std::chrono::milliseconds timeout) {
  if (!address.unusable.empty()) return Status::IOError(address.unusable);
  // Only the owner's user can put anything in the store directory, and the peer's credentials
  // are checked below; a symbolic link in place of the socket is refused all the same.
  struct stat info {};
  if (::lstat(address.path.c_str(), &info) == 0 && S_ISLNK(info.st_mode)) {
    return Status::IOError(
        fmt::format("the store socket {} is a symbolic link; idem never follows one inside a store",
                    address.shown));
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
  const socklen_t length = ToSockaddr(address.path, addr);
  while (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), length) != 0) {
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      return Status::TimedOut(
          fmt::format("the store's owner at {} accepted no connection within {} ms", address.shown,
                      timeout.count()));
    }
    return Status::Unavailable(fmt::format("cannot connect to the store's owner at {}: {}",
                                           address.shown, std::strerror(errno)));
  }
  // The kernel's record of who listens (as of its listen()), not anything the peer says.
  ucred peer{};
  socklen_t size = sizeof(peer);
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0) {
    return Status::IOError(fmt::format("cannot read the credentials of the process serving {}: {}",
                                       address.shown, std::strerror(errno)));
  }
  if (peer.uid != ::geteuid()) {
    return Status::IOError(fmt::format(
        "the store socket {} is served by pid {} of uid {}, not by this process's user (uid {}): "
        "refusing to send it anything",
        address.shown, peer.pid, peer.uid, ::geteuid()));
  }
  return OwnerConnection{std::move(fd), peer.pid};
}

std::string EncodeFrame(std::string_view payload) {
  std::string frame;
  frame.reserve(kFrameHeaderSize + payload.size());
  util::PutFixed32(frame, static_cast<uint32_t>(payload.size()));
  frame.append(payload);
  return frame;
}

uint32_t FrameLength(const char* header) { return util::GetFixed32(header); }

Status SendFrame(int fd, std::string_view frame, std::chrono::steady_clock::time_point deadline) {
  std::size_t done = 0;
  while (done < frame.size()) {
    const ssize_t n =
        ::send(fd, frame.data() + done, frame.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      IDEM_RETURN_IF_ERROR(WaitFor(fd, POLLOUT, deadline, "the peer stopped reading"));
    } else if (errno != EINTR) {
      return Status::Unavailable(fmt::format("sending: {}", std::strerror(errno)));
    }
  }
  return Status::OK();
}

short SpinUntilReady(int fd, short events, std::chrono::microseconds budget,
                     FunctionRef<bool()> worth_it) {
  static const int allowed = std::max(1, static_cast<int>(util::UsableCores() / 2));
  static std::atomic<int> spinning{0};
  if (spinning.fetch_add(1, std::memory_order_relaxed) >= allowed) {
    spinning.fetch_sub(1, std::memory_order_relaxed);
    return 0;
  }
  const auto until = std::chrono::steady_clock::now() + budget;
  short ready = 0;
  do {
    pollfd p{fd, events, 0};
    if (::poll(&p, 1, 0) > 0) ready = p.revents;
  } while (ready == 0 && std::chrono::steady_clock::now() < until && worth_it());
  spinning.fetch_sub(1, std::memory_order_relaxed);
  return ready;
}

Result<std::string> ReadFrame(int fd, std::size_t max_size,
                              std::chrono::steady_clock::time_point deadline) {
  // A frame is read after a request was sent, so it is rarely there yet: wait first. The
  // first read then usually takes the header and the whole body.
  char first[4096];
  std::size_t got = 0;
  while (got < kFrameHeaderSize) {
    IDEM_RETURN_IF_ERROR(WaitFor(fd, POLLIN, deadline, "no answer"));
    const ssize_t n = ::recv(fd, first + got, sizeof first - got, MSG_DONTWAIT);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (n == 0) {
      return Status::Unavailable("connection closed by the peer");
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return Status::Unavailable(fmt::format("receiving: {}", std::strerror(errno)));
    }
  }
  const uint32_t size = FrameLength(first);
  if (size > max_size) {
    return Status::InvalidArgument(
        fmt::format("frame of {} bytes is over the limit of {}", size, max_size));
  }
  // The caller sent one request on this connection and waits for its answer: bytes past this
  // frame mean a peer that does not follow the protocol.
  if (got - kFrameHeaderSize > size) {
    return Status::InvalidArgument("the peer sent another frame before the answer to this one");
  }
  std::string payload(first + kFrameHeaderSize, got - kFrameHeaderSize);
  payload.resize(size);
  IDEM_RETURN_IF_ERROR(ReadExactly(fd, payload.data() + (got - kFrameHeaderSize),
                                   size - (got - kFrameHeaderSize), deadline));
  return payload;
}

}  // namespace idem::sharing
