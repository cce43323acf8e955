// PipelinedConnection: one connection to the store's owner that several threads of a client
// process share, each sending its request without waiting for the answers to the others'. The
// owner runs a connection's requests one at a time in the order sent and answers in that order
// (protocol version 9), so answers are matched to their callers by their order alone.
//
// Why: with a connection per caller, every answer wakes one client thread and costs the owner a
// wake-up of its own, and those wake-ups were most of the owner's work per request from 16
// client threads on (docs/design/speed.md, increment 9). Here one caller at a time reads
// (the reader), takes whatever answers have arrived at once and hands each to its caller; the
// owner reads and answers the requests that came together in one go.
//
// Only for requests that do not wait on the disk (OwnerClient decides): a synced write behind
// another on one connection would not share its fsync with it.
//
// When the connection ends before a caller's answer came (the owner closed it, said goodbye or
// refused it, a send failed, or another caller's request timed out on it), the caller learns
// that its request may or may not have been carried out, and sends it again on another
// connection (every request can be resent: sharing/protocol.h). A caller whose own deadline
// passes gets kTimedOut and ends the connection for the others: the answers behind its own
// would have waited for it, and an owner that saw the connection close drops the Begins it had
// not run yet (as it does for a connection per caller).

#ifndef IDEM_SHARING_PIPELINED_CONNECTION_H_
#define IDEM_SHARING_PIPELINED_CONNECTION_H_

#include <chrono>
#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sharing/socket.h"
#include "util/mutex.h"

namespace idem::sharing {

class PipelinedConnection {
 public:
  using Clock = std::chrono::steady_clock;

  // At most this many requests wait for their answers on one connection; more go elsewhere.
  static constexpr std::size_t kMaxWaiting = 64;

  enum class Exchanged {
    kAnswered,  // `answer` holds the response frame's payload
    kTimedOut,  // no answer by the deadline; the connection has ended
    kEnded,     // the connection ended before the answer came: the request may or may not
                // have been carried out, and can be sent again elsewhere
    kFull,      // kMaxWaiting requests are waiting here already; nothing was sent
  };

  explicit PipelinedConnection(FileDescriptor fd) : fd_(std::move(fd)) {}
  PipelinedConnection(const PipelinedConnection&) = delete;
  PipelinedConnection& operator=(const PipelinedConnection&) = delete;

  // Sends `frame` (a whole request frame) and waits for its answer by `deadline`.
  Exchanged Exchange(std::string_view frame, Clock::time_point deadline, std::string& answer);
  // Whether the connection has ended (a new one is needed).
  bool ended() const;

 private:
  struct Waiter {
    std::string answer;
    bool answered = false;
    util::CondVar turn;  // answered, the connection ended, or its turn to read
  };
  // Waiters to wake once mu_ is released: a thread woken while the waker still holds mu_ would
  // at once sleep again on mu_ (docs/design/speed.md, increment 10). Shared, so that a waiter that
  // sees its answer and leaves before the wake-up does not take the condition variable with it.
  using Woken = std::vector<std::shared_ptr<Waiter>>;
  enum class Read { kSome, kNothingInTime, kClosed };

  // Ends the connection: the waiters left learn it, and the reader's poll returns.
  void End() IDEM_REQUIRES(mu_);
  // Waits (at most until `deadline`) for bytes and reads what has arrived into in_; reader only.
  Read ReadArrived(Clock::time_point deadline);
  // Hands each whole answer in in_ to the waiter at the front of the queue, in order, adding
  // each to `woken`; ends the connection at a refusal, a goodbye or a malformed answer. Reader
  // only.
  void HandOutAnswers(Woken& woken) IDEM_REQUIRES(mu_);

  const FileDescriptor fd_;
  // One sender at a time, from queueing its waiter to the end of its send: the order of the
  // queue is the order on the wire. Never held while waiting for an answer, so a sender blocked
  // on a full socket does not keep the reader from taking the answers that free it.
  util::Mutex send_mu_;
  mutable util::Mutex mu_ IDEM_ACQUIRED_AFTER(send_mu_);
  // In the order their requests were sent.
  std::deque<std::shared_ptr<Waiter>> waiting_ IDEM_GUARDED_BY(mu_);
  bool reading_ IDEM_GUARDED_BY(mu_) = false;  // a waiter is reading (outside mu_)
  bool ended_ IDEM_GUARDED_BY(mu_) = false;
  // Bytes read and not yet handed out: touched only by the reader (reading_ hands it over).
  std::string in_;
};

}  // namespace idem::sharing

#endif  // IDEM_SHARING_PIPELINED_CONNECTION_H_
