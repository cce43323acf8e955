// OwnerClient: a process that does not own a store sends each call to the owner over the
// store's socket. Connections are pooled (one per concurrent caller). While several of the
// process's calls are in flight, a call that does not wait on the owner's disk (a kBuffered
// Begin or Transition, a Get, a GetValue) goes on one of a few connections the process's
// threads share instead, pipelined behind the others (sharing/pipelined_connection.h): one
// wake-up on each side then serves a batch of requests.
//
// Every round trip has a deadline (Options::request_timeout). What a call returns:
//   - the owner's answer;
//   - kTimedOut when the owner did not answer in time (stopped, or overloaded): the connection
//     is closed, never reused, so a late answer cannot answer a later request;
//   - kBusy when the owner refused the connection (another user's store, its connection cap,
//     another protocol version), kInvalidArgument when it refused a request over its frame
//     limit: the owner is there, so this is not a lost owner;
//   - kUnavailable with lost() true once the owner cannot be reached (it closed the connection
//     without a word, or nobody listens): the Store fails over (becomes the owner or reconnects)
//     and resends the call.
// A goodbye (the owner closing an idle connection) is not seen by callers: the request, which
// the owner did not carry out, is sent again on a new connection.

#ifndef IDEM_SHARING_OWNER_CLIENT_H_
#define IDEM_SHARING_OWNER_CLIENT_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "engine/backend.h"
#include "sharing/pipelined_connection.h"
#include "sharing/protocol.h"
#include "sharing/socket_address.h"
#include "util/mutex.h"

namespace idem::sharing {

class OwnerClient final : public engine::Backend {
 public:
  // Connects once (waiting at most `connect_timeout`), to make sure an owner is listening at
  // `address`. Each later round trip waits at most `request_timeout`.
  static Result<std::unique_ptr<OwnerClient>> Connect(const SocketAddress& address,
                                                      std::chrono::milliseconds request_timeout,
                                                      std::chrono::milliseconds connect_timeout);

  Result<Claim> Begin(const engine::BeginCall& call, const Holder& holder) override;
  Status Transition(const engine::TransitionCall& call) override;
  Result<std::optional<Record>> Get(std::string_view key) override;
  Status Forget(std::string_view key, Durability durability,
                const engine::AsRead* as_read) override;
  Result<engine::ScanPage> Scan(const ScanOptions& options, std::size_t limit,
                                uint64_t view = kLatest) override;
  Result<TableValue> GetValue(std::string_view table, std::string_view key) override;
  Result<engine::TablePage> ScanTable(std::string_view table, const ScanOptions& options,
                                      std::size_t limit, uint64_t view = kLatest) override;
  Result<std::vector<std::string>> ListTables() override;
  // Kept by the owner, which ends it with the connection it was opened on.
  Result<uint64_t> OpenView() override;
  Status CloseView(uint64_t view) override;
  // Waits at most kMaxReserveWait of call.wait per request, asking again until the grant or
  // call.wait.
  Result<bool> Reserve(const engine::ReserveCall& call) override;
  Status Unreserve(std::string_view claim_key, uint64_t token) override;
  // A purge job on the owner, polled by requests that each end within request_timeout;
  // options.progress is called after each, and options.progress_total, when set, once with the
  // total the owner counted, before the first progress.
  Result<uint64_t> Purge(const PurgeOptions& options) override;
  Result<Counters> GetCounters() override;
  Result<OwnerCounters> GetOwnerCounters() override;
  // The owner's answer: whether it would take a claim now.
  Status Writable() override;
  Result<Stats> GetStats() override;
  // A backup job on the owner, polled as a purge is.
  Status Backup(const std::string& destination) override;
  // Import keeps Backend's answer (kBusy): only the owner imports.
  bool lost() const override { return lost_.load(); }
  bool permanent() const override { return false; }

 private:
  OwnerClient(SocketAddress address, std::chrono::milliseconds request_timeout);
  using Clock = std::chrono::steady_clock;

  // Polls the job that `message` (a PurgeMessage or BackupMessage) starts until it is done; its
  // count, with `progress` called after each poll and `progress_total` once, with the total from
  // the first answer that carries one (progress waits for it).
  template <class Message>
  Result<uint64_t> RunJob(Message message, const std::function<void(uint64_t)>& progress,
                          const std::function<void(uint64_t)>& progress_total);
  // Sends a request of one op (sharing/protocol_ops.h) and returns its answer (an op without
  // an answer body: the status), or the owner's non-OK status.
  template <class Message>
  auto Ask(const Message& message);
  // Sends one request frame and returns the body of an OK answer, or the owner's non-OK status.
  // `pipelinable`: the request may wait behind others on a shared connection (IsPipelinable).
  Result<std::string> RoundTrip(std::string_view frame, bool pipelinable);
  // The shared connection this thread sends pipelined requests on, connected now if it has none
  // or its last one ended; null when no connection could be made by `deadline` (the call then
  // goes on a connection of its own, which reports why).
  std::shared_ptr<PipelinedConnection> PipelinedConnectionFor(Clock::time_point deadline);
  // A pooled connection, or a new one by `deadline`; a failure as RoundTrip returns it.
  Result<FileDescriptor> TakeConnection(Clock::time_point deadline);
  // Pools a connection whose answer was read whole.
  void PutBack(FileDescriptor connection);
  // Sends `frame` on `connection` and reads the response frame by `deadline`; a failure as
  // RoundTrip returns it (the connection is then of no further use). `alone`: no other call of
  // this process was in flight when this one began.
  Result<std::string> Exchange(int connection, std::string_view frame, Clock::time_point deadline,
                               bool alone);
  // kTimedOut: the owner did not answer within request_timeout_.
  Status NoAnswerInTime() const;
  // A new connection; remembers the owner's pid (from the kernel) for messages.
  Result<FileDescriptor> NewConnection(std::chrono::milliseconds timeout);
  // "the store's owner (pid N)".
  std::string OwnerName() const;

  // Constant after construction.
  const SocketAddress address_;
  const std::chrono::milliseconds request_timeout_;
  const std::size_t pipelined_count_;  // pipelined_.size()

  std::atomic<bool> lost_{false};
  std::atomic<pid_t> owner_pid_{0};
  std::atomic<int> in_flight_{0};  // calls begun and not yet answered
  util::Mutex connect_mu_;         // held while connecting a shared connection
  util::Mutex mu_ IDEM_ACQUIRED_AFTER(connect_mu_);
  std::vector<FileDescriptor> idle_ IDEM_GUARDED_BY(mu_);
  // The shared connections, pipelined_count_ of them; each thread uses one (null until first
  // needed).
  std::vector<std::shared_ptr<PipelinedConnection>> pipelined_ IDEM_GUARDED_BY(mu_);
};

}  // namespace idem::sharing

#endif  // IDEM_SHARING_OWNER_CLIENT_H_
