// UNIX stream sockets and length-prefixed frames, for the owner's server and its clients.

#ifndef IDEM_SHARING_SOCKET_H_
#define IDEM_SHARING_SOCKET_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "idem/status.h"

namespace idem::sharing {

// Where a store's owner listens: `directory`/socket when that path fits in a socket address
// (108 bytes), else a name in Linux's abstract namespace derived from the directory's device
// and inode (no file; only processes of this network namespace can reach it, and the peer
// credential check still applies). Both ends compute the same address.
struct SocketAddress {
  std::string path;  // for an abstract address, starts with '\0'
  bool abstract() const { return !path.empty() && path[0] == '\0'; }
  std::string ToString() const;  // printable
};
SocketAddress SocketAddressFor(const std::string& directory, unsigned long device,
                               unsigned long inode);

// A listening socket at `address` (a stale socket file left by a dead owner is replaced; call
// only while holding the owner lock), mode 0600.
Result<int> Listen(const SocketAddress& address);
// Waits at most `timeout` for room in the owner's queue of connections to accept (it fills up
// while the owner is stopped): kTimedOut then. kUnavailable when nobody listens. Any other
// error is final for the callers (RemoteBackend, StoreCore): they do not fail over for it.
Result<int> Connect(const SocketAddress& address, std::chrono::milliseconds timeout);

// Frames: u32 little-endian length, then that many bytes.
inline constexpr std::size_t kFrameHeaderSize = 4;
// The frame carrying `payload`.
std::string EncodeFrame(std::string_view payload);
// The payload length announced by a frame header (kFrameHeaderSize bytes at `header`).
uint32_t FrameLength(const char* header);

// Sends a whole frame (from EncodeFrame) by `deadline`. kTimedOut when the peer does not take
// it in time (it stopped reading); kUnavailable when the connection failed or was closed.
Status SendFrame(int fd, std::string_view frame, std::chrono::steady_clock::time_point deadline);
// Reads one frame of at most `max_size` bytes, whole, by `deadline`; reads what has arrived even
// when the deadline has passed already. kUnavailable when the peer closed or the connection
// failed; kInvalidArgument for an oversized frame, or for bytes past the frame (each side sends
// one frame, then waits for the answer); kTimedOut when it did not arrive in time.
Result<std::string> ReadFrame(int fd, std::size_t max_size,
                              std::chrono::steady_clock::time_point deadline);

// Closes `fd` on destruction.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.release()) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor();

  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace idem::sharing

#endif  // IDEM_SHARING_SOCKET_H_
