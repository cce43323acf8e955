// UNIX stream sockets and length-prefixed frames, for the owner's server and its clients.

#ifndef IDEM_SHARING_SOCKET_H_
#define IDEM_SHARING_SOCKET_H_

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "idem/function_ref.h"
#include "idem/status.h"

namespace idem::sharing {

class FileDescriptor;

// The socket's name in the store directory, and the suffix of the name Listen binds first.
inline constexpr char kSocketFile[] = "socket";
inline constexpr char kSocketBindSuffix[] = ".new";

// Where a store's owner listens: the socket file `socket` in the store directory, mode 0600.
// Never a name in Linux's abstract namespace: that has no permissions (any local user could
// connect to it) and no owner (after the owner died, any local user could bind the name and
// answer the other processes).
//
// A socket address holds at most 107 bytes. For a longer store path this process reaches the
// same file through a descriptor of the store directory that the address keeps open:
// `/proc/self/fd/N/socket`. Where /proc is not mounted (or belongs to another PID namespace),
// such an address is unusable and says why: Listen and Connect then fail with that reason (a
// Sharing::kExclusive store, which serves no socket, still opens).
struct SocketAddress {
  std::string path;      // what bind and connect use
  std::string shown;     // `directory`/socket, for messages (control characters escaped)
  std::string unusable;  // not empty: why this process cannot use the socket
  std::shared_ptr<const FileDescriptor> directory;  // held open for a /proc/self/fd path
  const std::string& ToString() const { return shown; }
};
// `device` and `inode` identify `directory` (as the caller checked it): a long path's directory
// descriptor must be that directory, not one put in its place since.
SocketAddress SocketAddressFor(const std::string& directory, unsigned long device,
                               unsigned long inode);

// A listening socket at `address`, mode 0600 from the moment anyone can connect to it: it is
// bound under a temporary name, restricted, then renamed over `socket` (which also replaces a
// stale socket file left by a dead owner). Call only while holding the owner lock.
Result<int> Listen(const SocketAddress& address);

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
// failed; kInvalidArgument for an oversized frame, or for bytes past the frame (a connection of
// one caller carries one request at a time; a shared one reads its answers itself:
// pipelined_connection.h); kTimedOut when it did not arrive in time. An oversized
// frame is refused at its header, without waiting for its body. After any error the connection
// is no longer at the start of a frame: its callers close it.
Result<std::string> ReadFrame(int fd, std::size_t max_size,
                              std::chrono::steady_clock::time_point deadline);

// How long a thread that expects bytes on a socket soon polls it without sleeping before it
// blocks (SpinUntilReady). Waking a thread that slept costs tens of microseconds on a virtual
// machine whose idle cores halt, about as long as a whole request: measured on the benchmark's
// 2-core VM, a client process's lifecycle took 95 us (p50) when both sides slept between the
// request and its answer, and 20 us when both spun; a kBuffered request is answered well within
// this budget.
inline constexpr std::chrono::microseconds kSpinBudget{50};

// Polls `fd` without sleeping until one of `events` (POLLIN, POLLRDHUP, ...) is ready, `budget`
// has passed or `worth_it` turns false (asked between polls), and returns the ready events (0
// when none came). Spinning takes a core: at most half of the cores this process may use
// (util::UsableCores; at least one) spin at once in it, and a thread that finds them taken
// returns 0 at once, to block as it would have.
short SpinUntilReady(int fd, short events, std::chrono::microseconds budget,
                     FunctionRef<bool()> worth_it);

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

// A connection to a store's owner, and the owner's pid as the kernel names it (from the same
// SO_PEERCRED read that checked its user; 0 when it runs in a PID namespace this process cannot
// see).
struct OwnerConnection {
  FileDescriptor fd;
  pid_t owner_pid = 0;
};

// A connection to the owner at `address`. Before anything is sent, checks that the process
// serving it runs as this process's effective user (SO_PEERCRED): kIOError otherwise, so that
// no request (or result) ever reaches another user's process. Waits at most `timeout` for room
// in the owner's queue of connections to accept (it fills up while the owner is stopped):
// kTimedOut then. kUnavailable when nobody listens there. Any other error is final for the
// callers (RemoteBackend, StoreCore): they do not fail over for it.
Result<OwnerConnection> Connect(const SocketAddress& address, std::chrono::milliseconds timeout);

}  // namespace idem::sharing

#endif  // IDEM_SHARING_SOCKET_H_
