// The owner's side of sharing: serves the store's socket, passing each request to the owner's
// EngineBackend.
//
// Connections cost a descriptor and a few bytes, not a thread: a few threads take turns waiting
// on one epoll set ("leader/followers"); the thread that is woken reads the requests that have
// arrived, runs them in the order sent, writes their answers in that order and goes back to
// waiting (a client may send several before the first answer: protocol version 9). Each
// connection is armed one-shot, so exactly one thread works on it at a time. While a request runs,
// another thread waits on the set; when none is left, the pool grows (up to
// OwnerServerOptions::max_threads), so a slow request (a Scan page, a purge poll) never keeps the
// others, new connections or timeouts waiting.
//
// A connection from another user is refused. A frame over OwnerServerOptions::max_frame is refused
// too (kInvalidArgument naming its size and the limit), so that a client whose limits are larger
// than the owner's does not take the owner for lost; a malformed or truncated frame drops its
// connection without a word; both are logged. A peer that stalls in the middle of a frame, or
// does not read its answer, is dropped after frame_timeout; an idle connection is closed after
// idle_timeout. Refusals and goodbyes are sent as responses before the close
// (sharing/protocol.h), so a client never mistakes them for a lost owner. At the connection cap,
// a new connection displaces the longest idle one; it is refused only when every connection has
// a request running.

#ifndef IDEM_SHARING_OWNER_SERVER_H_
#define IDEM_SHARING_OWNER_SERVER_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/backend.h"
#include "idem/log.h"
#include "sharing/log_limiter.h"
#include "sharing/protocol.h"
#include "sharing/socket_address.h"
#include "util/mutex.h"

namespace idem::sharing {

// The largest request frame an owner with these size limits needs to take: a key, two labels
// (a type and a fingerprint) and one payload, and room for the rest. Saturates where the limits
// add up past what a size_t holds (4 GiB on a 32-bit target) instead of wrapping to a small one.
inline std::size_t MaxRequestFrame(std::size_t max_key, std::size_t max_label,
                                   std::size_t max_payload) {
  constexpr std::size_t kMost = std::numeric_limits<std::size_t>::max();
  std::size_t total = 4096;  // the request's other fields and its framing
  for (const std::size_t part : {max_key, max_label, max_label, max_payload}) {
    if (part > kMost - total) return kMost;
    total += part;
  }
  return total;
}

struct OwnerServerOptions {
  std::size_t max_frame = 4 << 20;  // bytes; larger request frames are refused
  // A request must arrive whole, and an answer be taken by its client, within this time once
  // begun.
  std::chrono::milliseconds frame_timeout{std::chrono::seconds(10)};
  // A connection with no request for this long is closed (with a goodbye). Clients reconnect
  // transparently; this only reclaims the connections of callers that went quiet.
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(60)};
  // At most this many connections, and never more than half of the process's descriptor limit
  // (RLIMIT_NOFILE at Start): the rest is left to RocksDB and the application.
  std::size_t max_connections = 1024;
  // Threads serving requests: two at first, more while every one is busy, up to this many.
  std::size_t max_threads = 16;
  LogSink log;  // never null
};

class OwnerServer {
 public:
  // Listens at `address` (the caller holds the owner lock; Listen) and serves `backend`, which
  // must outlive the server. Logs where it serves when that is not the store directory.
  static Result<std::unique_ptr<OwnerServer>> Start(const SocketAddress& address,
                                                    engine::Backend& backend,
                                                    OwnerServerOptions options);
  // Stops serving, lets running requests and jobs (purges, backups) finish, closes every
  // connection, and removes a socket it served in the runtime directory (RemoveRuntimeSocket: the
  // caller still holds the owner lock).
  ~OwnerServer();

  OwnerServer(const OwnerServer&) = delete;
  OwnerServer& operator=(const OwnerServer&) = delete;

 private:
  struct Connection;
  struct Job;
  class JobProgress;
  using Clock = std::chrono::steady_clock;
  // Where a connection stands between requests.
  enum class Phase {
    kIdle,     // waiting for a request
    kReading,  // part of a request has arrived
    kWriting,  // an answer is partly sent; the client has not taken the rest yet
  };

  OwnerServer(engine::Backend& backend, OwnerServerOptions options);
  void RunThread();
  void AddThreadIfAllBusy();
  // Accepts every connection waiting on the listening socket, then arms it again.
  void AcceptAll();
  // Out of descriptors: closes the longest idle connection or, when none is idle, refuses one
  // waiting peer with a word. Whether accepting may go on (a descriptor was freed, or a peer
  // refused).
  bool ShedForDescriptors();
  // Serves the connection `fd` just accepted, or refuses it and closes `fd`. False when the
  // server is stopping.
  bool Admit(int fd);
  // Adds `fd` (from `pid`) to the set of connections.
  void AddConnection(int fd, pid_t pid, Holder holder) IDEM_REQUIRES(mu_);
  // Refuses `fd` (from `pid`): every connection has a request running.
  void RefuseAtCap(int fd, pid_t pid) IDEM_REQUIRES(mu_);
  void Sweep();
  void Serve(uint64_t id, uint32_t events);
  // Reads what has arrived and runs every request that is whole, in order, then sends their
  // answers in that order. Returns the connection's next phase, or nullopt when it must be
  // closed.
  std::optional<Phase> ServeRequest(Connection& connection, uint32_t events);
  // Reads what has arrived on the connection into its buffer (requests, whole or not, read
  // ahead up to kReadAhead); `closed` is set when the peer closed its side. False when the
  // connection must be dropped: an oversized frame (refused) or a failed connection.
  bool ReceiveRequest(Connection& connection, bool& closed);
  // Runs every request whole in the connection's buffer and puts their answers in its `out`
  // (none when `abandoned`: the client is gone). The bytes of the buffer used, or nullopt when
  // the connection must be dropped: an oversized or malformed request (refused).
  std::optional<std::size_t> RunWholeRequests(Connection& connection, bool abandoned);
  // Logs a request frame of `size` bytes, over OwnerServerOptions::max_frame, and refuses it with
  // a word (the caller closes the connection next).
  void RefuseOversized(Connection& connection, uint32_t size);
  // Sends, without waiting, the answers not sent yet, before a refusal and a close.
  static void SendBeforeClosing(Connection& connection);
  // Logs why a request `frame` could not be decoded and, for a peer of another protocol version,
  // refuses it with a word (the caller closes the connection next).
  void TurnAway(const Connection& connection, std::string_view frame, const Status& why);
  // Sends what is left of the answer; the next phase, or nullopt when the connection failed.
  std::optional<Phase> SendAnswer(Connection& connection);
  // Hands the connection back to the epoll set in `phase`, or closes it (nullopt).
  void Release(const std::shared_ptr<Connection>& connection, std::optional<Phase> phase);
  // Sends a refusal or a goodbye on a connection nobody else uses any more (the caller closes
  // it next).
  static void Say(int fd, ResponseKind kind, const Status& why);
  // The longest idle connection, taken out of the set; null if every one is busy.
  std::shared_ptr<Connection> TakeLongestIdle() IDEM_REQUIRES(mu_);
  void ArmTimer(bool on) IDEM_REQUIRES(mu_);
  // Runs `request` for `connection`'s client (the holder of its claims, the owner of its views
  // and reservations): the response's payload.
  std::string Handle(const Request& request, Connection& connection);
  // Runs one op: its CallOn, or, for an op that changes what the connection holds or runs as a
  // job, the specialization in owner_server_requests.cc.
  template <class Message>
  std::string RunOp(const Message& message, Connection& connection);
  // Starts the job `ticket` running `work` (given where it reports its progress) if it is new,
  // then answers when it is done or after `wait` (at most kMaxJobWait), whichever comes first,
  // with a PurgeProgress. kBusy when kMaxJobs are running or waiting to be collected.
  std::string HandleJob(uint64_t ticket, std::chrono::milliseconds wait,
                        std::function<Result<uint64_t>(JobProgress& progress)> work);

  // Constant after construction.
  engine::Backend& backend_;
  const OwnerServerOptions options_;
  std::size_t max_connections_ = 0;
  Listener listener_;
  FileDescriptor epoll_fd_;
  FileDescriptor stop_fd_;   // an eventfd: readable once the server stops
  FileDescriptor timer_fd_;  // ticks while there are connections, for the timeouts
  LogLimiter log_;

  std::atomic<int> waiting_threads_{0};  // threads in epoll_wait
  std::atomic<int> serving_{0};          // connections a thread has (Serve)

  util::Mutex mu_;
  std::map<uint64_t, std::shared_ptr<Connection>> connections_ IDEM_GUARDED_BY(mu_);
  uint64_t next_id_ IDEM_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ IDEM_GUARDED_BY(mu_);
  bool stopping_ IDEM_GUARDED_BY(mu_) = false;
  bool timer_armed_ IDEM_GUARDED_BY(mu_) = false;
  // Closed for an instant to refuse a peer when out of descriptors.
  FileDescriptor spare_fd_ IDEM_GUARDED_BY(mu_);

  util::Mutex job_mu_;
  util::CondVar job_changed_;
  std::map<uint64_t, std::shared_ptr<Job>> jobs_ IDEM_GUARDED_BY(job_mu_);
};

}  // namespace idem::sharing

#endif  // IDEM_SHARING_OWNER_SERVER_H_
