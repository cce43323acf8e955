// Length-prefixed frames over UNIX stream sockets, for the owner's server and its clients. Where
// the owner's socket is, and connecting to it: socket_address.h.

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
#include "util/coding.h"

namespace idem::sharing {

// Frames: u32 little-endian length, then that many bytes.
inline constexpr std::size_t kFrameHeaderSize = 4;
// The frame carrying `payload`.
std::string EncodeFrame(std::string_view payload);
// Whether `available` bytes, from a frame's header on, hold the whole frame of a payload of
// `length` bytes. Never adds to `length`: kFrameHeaderSize + length wraps a 32-bit size_t.
inline bool FrameIsWhole(std::size_t available, uint32_t length) {
  return available >= kFrameHeaderSize && available - kFrameHeaderSize >= length;
}

// The first frame of a buffer, as CutFrame finds it.
struct FrameCut {
  enum class State {
    kPartial,    // not all of it has arrived (not even its header, perhaps)
    kWhole,      // `payload` and `size` are set
    kOversized,  // its header announces a payload over the limit: known before its body comes
  };
  State state = State::kPartial;
  uint32_t length = 0;       // the payload length its header announces, once the header is there
  std::string_view payload;  // kWhole: the payload, inside the buffer
  std::size_t size = 0;      // kWhole: header and payload, what the frame takes of the buffer
};

// The first frame in `in`, of a payload of at most `max_payload` bytes. The only code that reads
// a frame's header: the owner's server, both clients and the tests split frames with it.
inline FrameCut CutFrame(std::string_view in, std::size_t max_payload) {
  FrameCut cut;
  if (in.size() < kFrameHeaderSize) return cut;
  cut.length = util::GetFixed32(in.data());
  if (cut.length > max_payload) {
    cut.state = FrameCut::State::kOversized;
  } else if (FrameIsWhole(in.size(), cut.length)) {
    cut.state = FrameCut::State::kWhole;
    cut.payload = in.substr(kFrameHeaderSize, cut.length);
    cut.size = kFrameHeaderSize + cut.length;  // fits: the buffer holds it
  }
  return cut;
}

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
// machine whose idle cores halt, about as long as a whole request (docs/design/speed.md,
// increment 2); a kBuffered request is answered well within this budget.
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

}  // namespace idem::sharing

#endif  // IDEM_SHARING_SOCKET_H_
