// UNIX stream sockets and length-prefixed frames, for the owner's server and its clients.

#ifndef IDEM_SHARING_SOCKET_H_
#define IDEM_SHARING_SOCKET_H_

#include <chrono>
#include <cstddef>
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
Result<int> Connect(const SocketAddress& address);

// Frames: u32 little-endian length, then that many bytes.
Status WriteFrame(int fd, std::string_view payload);
// Reads one frame of at most `max_size` bytes. Once its first byte has arrived, the rest must
// arrive within `body_timeout`, so a peer that stalls mid-frame cannot hold a reader forever.
// kUnavailable when the peer closed or the connection failed; kInvalidArgument for an
// oversized frame, or for bytes past the frame (each side sends one frame, then waits for the
// answer); kTimedOut for a stalled one.
Result<std::string> ReadFrame(int fd, std::size_t max_size, std::chrono::milliseconds body_timeout);

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
