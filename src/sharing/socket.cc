#include "sharing/socket.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "storage/record_codec.h"

namespace idem::sharing {
namespace {

constexpr char kSocketName[] = "socket";

std::string ErrnoText(int error) { return std::strerror(error); }

// Fills `addr` from `address`; returns the length to pass to bind/connect.
socklen_t ToSockaddr(const SocketAddress& address, sockaddr_un& addr) {
  std::memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, address.path.data(), address.path.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address.path.size() +
                                (address.abstract() ? 0 : 1));
}

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
      IDEM_RETURN_IF_ERROR(
          WaitFor(fd, POLLIN, deadline, "the peer stalled in the middle of a frame"));
    } else if (errno != EINTR) {
      return Status::Unavailable("receiving: " + ErrnoText(errno));
    }
  }
  return Status::OK();
}

}  // namespace

std::string SocketAddress::ToString() const {
  if (!abstract()) return path;
  // Built by append, not "@" + substr(): GCC 12 warns (-Wrestrict) about that inlined form.
  std::string shown = "@";
  shown.append(path, 1);
  return shown;
}

SocketAddress SocketAddressFor(const std::string& directory, unsigned long device,
                               unsigned long inode) {
  std::string path = directory + "/" + kSocketName;
  if (path.size() < sizeof(sockaddr_un::sun_path)) return {path};
  return {std::string(1, '\0') + "idem-" + std::to_string(device) + "-" + std::to_string(inode)};
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
  FileDescriptor fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Status::IOError("socket: " + ErrnoText(errno));
  if (!address.abstract()) ::unlink(address.path.c_str());  // a dead owner's socket file
  sockaddr_un addr;
  const socklen_t length = ToSockaddr(address, addr);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), length) != 0) {
    return Status::IOError("cannot bind the store socket " + address.ToString() + ": " +
                           ErrnoText(errno));
  }
  // Only the owning user may connect; the directory is 0700 too, and the server checks each
  // peer's credentials besides.
  if (!address.abstract()) ::chmod(address.path.c_str(), S_IRUSR | S_IWUSR);
  if (::listen(fd.get(), 128) != 0) {
    return Status::IOError("cannot listen on " + address.ToString() + ": " + ErrnoText(errno));
  }
  return fd.release();
}

Result<int> Connect(const SocketAddress& address, std::chrono::milliseconds timeout) {
  FileDescriptor fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Status::IOError("socket: " + ErrnoText(errno));
  // connect() on a UNIX socket waits for room in the listener's backlog, which a stopped owner
  // never makes; the send timeout bounds that wait (frames are sent without blocking anyway).
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
      std::max(timeout, std::chrono::milliseconds(1)));
  const timeval limit{static_cast<time_t>(micros.count() / 1'000'000),
                      static_cast<suseconds_t>(micros.count() % 1'000'000)};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
  sockaddr_un addr;
  const socklen_t length = ToSockaddr(address, addr);
  while (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), length) != 0) {
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      return Status::TimedOut("the store's owner at " + address.ToString() +
                              " accepted no connection within " + std::to_string(timeout.count()) +
                              " ms");
    }
    return Status::Unavailable("cannot connect to the store's owner at " + address.ToString() +
                               ": " + ErrnoText(errno));
  }
  return fd.release();
}

std::string EncodeFrame(std::string_view payload) {
  std::string frame;
  frame.reserve(kFrameHeaderSize + payload.size());
  storage::PutFixed32(frame, static_cast<uint32_t>(payload.size()));
  frame.append(payload);
  return frame;
}

uint32_t FrameLength(const char* header) { return storage::GetFixed32(header); }

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
      return Status::Unavailable("sending: " + ErrnoText(errno));
    }
  }
  return Status::OK();
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
      return Status::Unavailable("receiving: " + ErrnoText(errno));
    }
  }
  const uint32_t size = FrameLength(first);
  if (size > max_size) {
    return Status::InvalidArgument("frame of " + std::to_string(size) +
                                   " bytes is over the limit of " + std::to_string(max_size));
  }
  // Each side sends one frame and waits for the answer: bytes past this frame mean a peer that
  // does not follow the protocol.
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
