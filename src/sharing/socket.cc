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
#include "util/deadline.h"
#include "util/escape.h"
#include "util/process.h"

namespace idem::sharing {
namespace {

// Waits until `fd` is ready for `events` or `deadline` passes (kTimedOut: `what`).
Status WaitFor(int fd, short events, std::chrono::steady_clock::time_point deadline,
               std::string_view what) {
  for (;;) {
    const std::chrono::milliseconds left = util::TimeLeft(deadline);
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

std::string EncodeFrame(std::string_view payload) {
  std::string frame;
  frame.reserve(kFrameHeaderSize + payload.size());
  util::PutFixed32(frame, static_cast<uint32_t>(payload.size()));
  frame.append(payload);
  return frame;
}

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
  const FrameCut cut = CutFrame(std::string_view(first, got), max_size);
  if (cut.state == FrameCut::State::kOversized) {
    return Status::InvalidArgument(
        fmt::format("frame of {} bytes is over the limit of {}", cut.length, max_size));
  }
  // The caller sent one request on this connection and waits for its answer: bytes past this
  // frame mean a peer that does not follow the protocol.
  if (cut.state == FrameCut::State::kWhole && cut.size < got) {
    return Status::InvalidArgument("the peer sent another frame before the answer to this one");
  }
  const uint32_t size = cut.length;
  std::string payload(first + kFrameHeaderSize, got - kFrameHeaderSize);
  payload.resize(size);
  IDEM_RETURN_IF_ERROR(ReadExactly(fd, payload.data() + (got - kFrameHeaderSize),
                                   size - (got - kFrameHeaderSize), deadline));
  return payload;
}

}  // namespace idem::sharing
