#include "sharing/remote_backend.h"

#include <fmt/format.h>
#include <poll.h>

#include <algorithm>

#include "util/process.h"

namespace idem::sharing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Responses are bounded by the owner's own limits; this only guards against a broken peer.
constexpr std::size_t kMaxResponse = std::size_t{1} << 30;
// The longest a purge or backup poll asks the owner to wait for the job to end, and its share of
// the request deadline: the answer must come back well within it.
constexpr milliseconds kJobPollWait{1000};

milliseconds Left(Clock::time_point deadline) {
  return std::max(milliseconds(0), std::chrono::ceil<milliseconds>(deadline - Clock::now()));
}

}  // namespace

Result<std::unique_ptr<RemoteBackend>> RemoteBackend::Connect(const SocketAddress& address,
                                                              milliseconds request_timeout,
                                                              milliseconds connect_timeout) {
  std::unique_ptr<RemoteBackend> backend(new RemoteBackend(address, request_timeout));
  IDEM_ASSIGN_OR_RETURN(FileDescriptor connection, backend->NewConnection(connect_timeout));
  backend->idle_.push_back(std::move(connection));
  return backend;
}

Result<FileDescriptor> RemoteBackend::NewConnection(milliseconds timeout) {
  IDEM_ASSIGN_OR_RETURN(OwnerConnection connection, sharing::Connect(address_, timeout));
  owner_pid_ = connection.owner_pid;
  return std::move(connection.fd);
}

std::string RemoteBackend::OwnerName() const { return sharing::OwnerName(owner_pid_.load()); }

Status RemoteBackend::NoAnswerInTime() const {
  return Status::TimedOut(
      fmt::format("{} did not answer within {} ms (is it stopped or overloaded?); the request may "
                  "or may not have been carried out",
                  OwnerName(), request_timeout_.count()));
}

Result<FileDescriptor> RemoteBackend::TakeConnection(Clock::time_point deadline) {
  {
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      FileDescriptor pooled = std::move(idle_.back());
      idle_.pop_back();
      return pooled;
    }
  }
  if (Left(deadline).count() == 0) return NoAnswerInTime();
  Result<FileDescriptor> fresh = NewConnection(Left(deadline));
  if (fresh.ok()) return fresh;
  if (fresh.status().code() == Status::Code::kTimedOut) return NoAnswerInTime();
  // Nobody listens: the owner is gone.
  if (fresh.status().code() == Status::Code::kUnavailable) lost_ = true;
  // Otherwise a refusal by this side's own checks of the owner, or a local failure.
  return fresh.status();
}

void RemoteBackend::PutBack(FileDescriptor connection) {
  std::lock_guard lock(mu_);
  idle_.push_back(std::move(connection));
}

Result<std::string> RemoteBackend::Exchange(int connection, std::string_view frame,
                                            Clock::time_point deadline) {
  struct InFlight {
    explicit InFlight(std::atomic<int>& count)
        : count(count), alone(count.fetch_add(1, std::memory_order_relaxed) == 0) {}
    ~InFlight() { count.fetch_sub(1, std::memory_order_relaxed); }
    std::atomic<int>& count;
    const bool alone;
  } in_flight(in_flight_);
  const Status sent = SendFrame(connection, frame, deadline);
  if (sent.code() == Status::Code::kTimedOut) return NoAnswerInTime();
  // Alone, this request's answer comes sooner than this thread could be woken up for it. With
  // others in flight the cores have work, wake-ups are cheap, and a spinning thread would only
  // take a core from them.
  if (sent.ok() && in_flight.alone) {
    SpinUntilReady(connection, POLLIN, kSpinBudget,
                   [&] { return in_flight_.load(std::memory_order_relaxed) == 1; });
  }
  // Even when sending failed, the owner may have said why it closed the connection: read
  // what arrived, without waiting.
  Result<std::string> reply =
      ReadFrame(connection, kMaxResponse, sent.ok() ? deadline : Clock::now());
  if (reply.ok()) return reply;
  if (sent.ok() && reply.status().code() == Status::Code::kTimedOut) return NoAnswerInTime();
  // Closed without a word: the owner is gone. Every pooled connection is as dead.
  lost_ = true;
  return Status::Unavailable(fmt::format("lost the connection to {}: {}", OwnerName(),
                                         (sent.ok() ? reply.status() : sent).message()));
}

Result<std::string> RemoteBackend::RoundTrip(const Request& request) {
  const auto deadline = Clock::now() + request_timeout_;
  const std::string frame = EncodeFrame(EncodeRequest(request));
  // Once round per goodbye: the owner closed a pooled connection, and the request goes again on
  // a new one.
  for (;;) {
    IDEM_ASSIGN_OR_RETURN(FileDescriptor connection, TakeConnection(deadline));
    IDEM_ASSIGN_OR_RETURN(const std::string reply, Exchange(connection.get(), frame, deadline));
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

Result<Claim> RemoteBackend::Begin(const BeginCall& call, const Holder& /*holder*/) {
  // The owner names the holder from the connection's peer credentials, not from the client.
  IDEM_ASSIGN_OR_RETURN(std::string body, RoundTrip(BeginMessage{call}));
  return DecodeClaim(body);
}

Status RemoteBackend::Transition(const TransitionCall& call) {
  return RoundTrip(TransitionMessage{call, {}}).status();
}

Result<TableValue> RemoteBackend::GetValue(std::string_view table, std::string_view key) {
  IDEM_ASSIGN_OR_RETURN(std::string body, RoundTrip(GetValueMessage{table, key}));
  return DecodeTableValue(body);
}

Result<std::vector<std::string>> RemoteBackend::ListTables() {
  IDEM_ASSIGN_OR_RETURN(std::string body, RoundTrip(ListTablesMessage{}));
  return DecodeTableNames(body);
}

Result<TablePage> RemoteBackend::ScanTable(std::string_view table, const ScanOptions& options,
                                           std::size_t limit) {
  IDEM_ASSIGN_OR_RETURN(std::string body,
                        RoundTrip(ScanTableMessage{table, options, static_cast<uint32_t>(limit)}));
  return DecodeTablePage(body);
}

Result<std::optional<Record>> RemoteBackend::Get(std::string_view key) {
  IDEM_ASSIGN_OR_RETURN(std::string body, RoundTrip(GetMessage{key}));
  return DecodeOptionalRecord(body);
}

Status RemoteBackend::Forget(std::string_view key, Durability durability) {
  return RoundTrip(ForgetMessage{key, durability}).status();
}

Result<ScanPage> RemoteBackend::Scan(const ScanOptions& options, std::size_t limit) {
  IDEM_ASSIGN_OR_RETURN(std::string body,
                        RoundTrip(ScanMessage{options, static_cast<uint32_t>(limit)}));
  return DecodeScanPage(body);
}

template <class Message>
Result<uint64_t> RemoteBackend::RunJob(Message message,
                                       const std::function<void(uint64_t)>& progress,
                                       const std::function<void(uint64_t)>& progress_total) {
  message.ticket = util::RandomRequestId();
  // Half the deadline at most: the answer must arrive before the round trip gives up.
  message.wait = std::min(kJobPollWait, request_timeout_ / 2);
  bool total_reported = false;
  for (;;) {
    IDEM_ASSIGN_OR_RETURN(std::string body, RoundTrip(message));
    IDEM_ASSIGN_OR_RETURN(PurgeProgress answer, DecodePurgeProgress(body));
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

Result<uint64_t> RemoteBackend::Purge(const PurgeOptions& options) {
  PurgeMessage message;
  message.options.dry_run = options.dry_run;
  message.options.compact = options.compact;
  message.count_total = static_cast<bool>(options.progress_total);
  return RunJob(message, options.progress, options.progress_total);
}

Status RemoteBackend::Backup(const std::string& destination) {
  BackupMessage message;
  message.destination = destination;
  return RunJob(message, nullptr, nullptr).status();
}

Result<Counters> RemoteBackend::GetCounters() {
  IDEM_ASSIGN_OR_RETURN(OwnerCounters answer, GetOwnerCounters());
  return answer.counters;
}

Result<OwnerCounters> RemoteBackend::GetOwnerCounters() {
  IDEM_ASSIGN_OR_RETURN(std::string body, RoundTrip(CountersMessage{}));
  IDEM_ASSIGN_OR_RETURN(OwnerCounters answer, DecodeCounters(body));
  answer.live = true;
  // The kernel's word for who answered, in this process's PID namespace (0: not visible).
  answer.pid = owner_pid_.load();
  return answer;
}

}  // namespace idem::sharing
