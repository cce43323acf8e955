#include "sharing/owner_client.h"

#include <fmt/format.h>
#include <poll.h>

#include <algorithm>
#include <type_traits>

#include "util/deadline.h"
#include "util/process.h"

namespace idem::sharing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// The longest a purge or backup poll asks the owner to wait for the job to end, and its share of
// the request deadline: the answer must come back well within it.
constexpr milliseconds kJobPollWait{1000};

// A call is pipelined on a shared connection only while at least this many other calls of the
// process are in flight: alone, a call is answered sooner on a connection of its own (both
// sides spin for each other instead of sleeping), and the hand-off between a shared
// connection's reader and its callers costs a wake-up that a connection of its own does not.
// The threshold and the number of connections were measured against others
// (docs/design/speed.md, increment 9).
constexpr int kOthersInFlightToPipeline = 2;
// Requests larger than this always go on a connection of their own: the owner refuses a frame
// over its limit (never below this) by closing the connection, which would end the shared one
// for every request on it.
constexpr std::size_t kMaxPipelinedFrame = 4096;

// Shared connections per client process: the owner serves each with one thread at a time, so
// there are as many as the cores that can run them (at least 2, as measured; at most 8).
std::size_t PipelinedConnectionCount() {
  return std::clamp<std::size_t>(util::UsableCores(), 2, 8);
}

// Counts a call in flight for as long as it lives.
class InFlight {
 public:
  explicit InFlight(std::atomic<int>& count)
      : count_(count), others_(count.fetch_add(1, std::memory_order_relaxed)) {}
  ~InFlight() { count_.fetch_sub(1, std::memory_order_relaxed); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  // Calls of the process in flight when this one began.
  int others() const { return others_; }

 private:
  std::atomic<int>& count_;
  const int others_;
};

}  // namespace

OwnerClient::OwnerClient(SocketAddress address, milliseconds request_timeout)
    : address_(std::move(address)),
      request_timeout_(request_timeout),
      pipelined_count_(PipelinedConnectionCount()),
      pipelined_(pipelined_count_) {}

Result<std::unique_ptr<OwnerClient>> OwnerClient::Connect(const SocketAddress& address,
                                                          milliseconds request_timeout,
                                                          milliseconds connect_timeout) {
  std::unique_ptr<OwnerClient> backend(new OwnerClient(address, request_timeout));
  IDEM_ASSIGN_OR_RETURN(FileDescriptor connection, backend->NewConnection(connect_timeout));
  backend->PutBack(std::move(connection));
  return backend;
}

Result<FileDescriptor> OwnerClient::NewConnection(milliseconds timeout) {
  IDEM_ASSIGN_OR_RETURN(OwnerConnection connection, sharing::Connect(address_, timeout));
  owner_pid_ = connection.owner_pid;
  return std::move(connection.fd);
}

std::string OwnerClient::OwnerName() const { return sharing::OwnerName(owner_pid_.load()); }

Status OwnerClient::NoAnswerInTime() const {
  return Status::TimedOut(
      fmt::format("{} did not answer within {} ms (is it stopped or overloaded?); the request may "
                  "or may not have been carried out",
                  OwnerName(), request_timeout_.count()));
}

Result<FileDescriptor> OwnerClient::TakeConnection(Clock::time_point deadline) {
  {
    util::MutexLock lock(mu_);
    if (!idle_.empty()) {
      FileDescriptor pooled = std::move(idle_.back());
      idle_.pop_back();
      return pooled;
    }
  }
  if (util::TimeLeft(deadline).count() == 0) return NoAnswerInTime();
  Result<FileDescriptor> fresh = NewConnection(util::TimeLeft(deadline));
  if (fresh.ok()) return fresh;
  if (fresh.status().code() == Status::Code::kTimedOut) return NoAnswerInTime();
  // Nobody listens: the owner is gone.
  if (fresh.status().code() == Status::Code::kUnavailable) lost_ = true;
  // Otherwise a refusal by this side's own checks of the owner, or a local failure.
  return fresh.status();
}

void OwnerClient::PutBack(FileDescriptor connection) {
  util::MutexLock lock(mu_);
  idle_.push_back(std::move(connection));
}

std::shared_ptr<PipelinedConnection> OwnerClient::PipelinedConnectionFor(
    Clock::time_point deadline) {
  // Each thread keeps to one shared connection, the threads spread evenly over them.
  static std::atomic<std::size_t> threads_seen{0};
  thread_local const std::size_t thread_number = threads_seen.fetch_add(1);
  const std::size_t slot = thread_number % pipelined_count_;
  const auto usable = [&]() -> std::shared_ptr<PipelinedConnection> {
    util::MutexLock lock(mu_);
    if (pipelined_[slot] && !pipelined_[slot]->ended()) return pipelined_[slot];
    return nullptr;
  };
  if (auto shared = usable()) return shared;
  // One connect at a time: the threads that find the slot empty together (at the start of a
  // burst) wait for one connection instead of each making its own, which could take the owner
  // past its connection cap.
  util::MutexLock connecting(connect_mu_);
  if (auto shared = usable()) return shared;
  if (util::TimeLeft(deadline).count() == 0) return nullptr;
  Result<FileDescriptor> fresh = NewConnection(util::TimeLeft(deadline));
  if (!fresh.ok()) return nullptr;
  auto made = std::make_shared<PipelinedConnection>(std::move(fresh).value());
  util::MutexLock lock(mu_);
  pipelined_[slot] = made;
  return made;
}

Result<std::string> OwnerClient::Exchange(int connection, std::string_view frame,
                                          Clock::time_point deadline, bool alone) {
  const Status sent = SendFrame(connection, frame, deadline);
  if (sent.code() == Status::Code::kTimedOut) return NoAnswerInTime();
  // Alone, this request's answer comes sooner than this thread could be woken up for it. With
  // others in flight the cores have work, wake-ups are cheap, and a spinning thread would only
  // take a core from them.
  if (sent.ok() && alone) {
    SpinUntilReady(connection, POLLIN, kSpinBudget,
                   [&] { return in_flight_.load(std::memory_order_relaxed) == 1; });
  }
  // Even when sending failed, the owner may have said why it closed the connection: read
  // what arrived, without waiting.
  Result<std::string> reply =
      ReadFrame(connection, kMaxResponseFrame, sent.ok() ? deadline : Clock::now());
  if (reply.ok()) return reply;
  if (sent.ok() && reply.status().code() == Status::Code::kTimedOut) return NoAnswerInTime();
  // Closed without a word: the owner is gone. Every pooled connection is as dead.
  lost_ = true;
  return Status::Unavailable(fmt::format("lost the connection to {}: {}", OwnerName(),
                                         (sent.ok() ? reply.status() : sent).message()));
}

Result<std::string> OwnerClient::RoundTrip(std::string_view frame, bool pipelinable) {
  const auto deadline = Clock::now() + request_timeout_;
  const InFlight in_flight(in_flight_);
  if (in_flight.others() >= kOthersInFlightToPipeline && frame.size() <= kMaxPipelinedFrame &&
      pipelinable) {
    if (const auto shared = PipelinedConnectionFor(deadline)) {
      std::string reply;
      switch (shared->Exchange(frame, deadline, reply)) {
        case PipelinedConnection::Exchanged::kAnswered: {
          // Only answers are handed out: a refusal or a goodbye ends the shared connection.
          Status status;
          ResponseKind kind = ResponseKind::kAnswer;
          IDEM_ASSIGN_OR_RETURN(std::string_view body, DecodeResponse(reply, status, kind));
          if (!status.ok()) return status;
          return std::string(body);
        }
        case PipelinedConnection::Exchanged::kTimedOut:
          return NoAnswerInTime();
        case PipelinedConnection::Exchanged::kEnded:
        case PipelinedConnection::Exchanged::kFull:
          break;  // sent (again) on a connection of its own: every request can be resent
      }
    }
  }
  // Once round per goodbye: the owner closed a pooled connection, and the request goes again on
  // a new one.
  for (;;) {
    IDEM_ASSIGN_OR_RETURN(FileDescriptor connection, TakeConnection(deadline));
    IDEM_ASSIGN_OR_RETURN(const std::string reply,
                          Exchange(connection.get(), frame, deadline, in_flight.others() == 0));
    Status status;
    ResponseKind kind = ResponseKind::kAnswer;
    IDEM_ASSIGN_OR_RETURN(std::string_view body, DecodeResponse(reply, status, kind));
    switch (kind) {
      case ResponseKind::kAnswer:
        PutBack(std::move(connection));
        if (!status.ok()) return status;
        return std::string(body);
      case ResponseKind::kRefusal:
        return status;
      case ResponseKind::kGoodbye:
        continue;
    }
  }
}

template <class Message>
auto OwnerClient::Ask(const Message& message) {
  Result<std::string> body = RoundTrip(EncodeFrame(EncodeRequest(message)), IsPipelinable(message));
  using Answer = typename Message::Answer;
  if constexpr (std::is_same_v<Answer, NoAnswer>) {
    return body.status();
  } else {
    if (!body.ok()) return Result<typename Answer::Value>(body.status());
    return Answer::Decode(*body);
  }
}

Result<Claim> OwnerClient::Begin(const engine::BeginCall& call, const Holder& /*holder*/) {
  // The owner names the holder from the connection's peer credentials, not from the client.
  return Ask(BeginMessage{call});
}

Status OwnerClient::Transition(const engine::TransitionCall& call) {
  return Ask(TransitionMessage{call, {}});
}

Result<TableValue> OwnerClient::GetValue(std::string_view table, std::string_view key) {
  return Ask(GetValueMessage{table, key});
}

Result<std::vector<std::string>> OwnerClient::ListTables() { return Ask(ListTablesMessage{}); }

Result<engine::TablePage> OwnerClient::ScanTable(std::string_view table, const ScanOptions& options,
                                                 std::size_t limit, uint64_t view) {
  return Ask(ScanTableMessage{table, options, static_cast<uint32_t>(limit), view});
}

Result<uint64_t> OwnerClient::OpenView() { return Ask(OpenViewMessage{}); }

Status OwnerClient::CloseView(uint64_t view) { return Ask(CloseViewMessage{view}); }

Result<bool> OwnerClient::Reserve(const engine::ReserveCall& call) {
  const util::Deadline deadline(call.wait);
  ReserveMessage message{call};
  for (;;) {
    const std::chrono::milliseconds left = deadline.Left();
    message.call.wait = std::min(left, kMaxReserveWait);
    IDEM_ASSIGN_OR_RETURN(const bool granted, Ask(message));
    if (granted || left <= message.call.wait) return granted;
  }
}

Status OwnerClient::Unreserve(std::string_view claim_key, uint64_t token) {
  return Ask(UnreserveMessage{claim_key, token});
}

Result<std::optional<Record>> OwnerClient::Get(std::string_view key) {
  return Ask(GetMessage{key});
}

Status OwnerClient::Forget(std::string_view key, Durability durability,
                           const engine::AsRead* as_read) {
  ForgetMessage message{.key = key, .durability = durability};
  if (as_read) message.as_read = *as_read;
  return Ask(message);
}

Result<engine::ScanPage> OwnerClient::Scan(const ScanOptions& options, std::size_t limit,
                                           uint64_t view) {
  return Ask(ScanMessage{options, static_cast<uint32_t>(limit), view});
}

template <class Message>
Result<uint64_t> OwnerClient::RunJob(Message message, const std::function<void(uint64_t)>& progress,
                                     const std::function<void(uint64_t)>& progress_total) {
  message.ticket = util::RandomRequestId();
  // Half the deadline at most: the answer must arrive before the round trip gives up.
  message.wait = std::min(kJobPollWait, request_timeout_ / 2);
  bool total_reported = false;
  for (;;) {
    IDEM_ASSIGN_OR_RETURN(const PurgeProgress answer, Ask(message));
    if (progress_total && answer.total && !total_reported) {
      progress_total(*answer.total);
      total_reported = true;
    }
    // The total comes before the first count, as when this process purges: until the owner has
    // counted it, the purge has not begun and the count is 0 anyway.
    const bool total_pending = progress_total && !total_reported && !answer.done;
    if (progress && !total_pending) progress(answer.count);
    if (answer.done) return answer.count;
  }
}

Result<uint64_t> OwnerClient::Purge(const PurgeOptions& options) {
  PurgeMessage message;
  message.options.dry_run = options.dry_run;
  message.options.compact = options.compact;
  message.count_total = static_cast<bool>(options.progress_total);
  return RunJob(message, options.progress, options.progress_total);
}

Status OwnerClient::Backup(const std::string& destination) {
  BackupMessage message;
  message.destination = destination;
  return RunJob(message, nullptr, nullptr).status();
}

Result<Counters> OwnerClient::GetCounters() {
  IDEM_ASSIGN_OR_RETURN(OwnerCounters answer, GetOwnerCounters());
  return answer.counters;
}

Status OwnerClient::Writable() { return Ask(WritableMessage{}); }

Result<engine::Backend::Stats> OwnerClient::GetStats() { return Ask(StatsMessage{}); }

Result<OwnerCounters> OwnerClient::GetOwnerCounters() {
  IDEM_ASSIGN_OR_RETURN(OwnerCounters answer, Ask(CountersMessage{}));
  answer.live = true;
  // The kernel's word for who answered, in this process's PID namespace (0: not visible).
  answer.pid = owner_pid_.load();
  return answer;
}

}  // namespace idem::sharing
