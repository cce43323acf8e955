// Reading a request from a connection, running it on the backend, and sending its answer; purge
// runs as a job that the client polls. The threads are in owner_server.cc, taking connections in
// owner_server_admission.cc.

#include <errno.h>
#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "sharing/owner_server.h"
#include "sharing/owner_server_internal.h"

namespace idem::sharing {
namespace {

using std::chrono::milliseconds;

// A purge or backup poll is answered within this time, whatever the client asked: each request
// stays short, and the client learns its progress at least this often.
constexpr milliseconds kMaxJobWait{1000};
// Purge and backup jobs at once, running or finished and not yet collected by their client.
constexpr std::size_t kMaxJobs = 16;

// How many bytes of requests a connection's thread reads before it runs them: dozens of the
// small requests a client pipelines, and any one request whole however large.
constexpr std::size_t kReadAhead = 64 << 10;

// The answers of one connection's requests run in a write group, kept until the group is
// written: the answer of a call the group took holds only if its write succeeded, and is
// replaced by the write's error otherwise. Appended to `out` in order when the group ends.
class GroupedAnswers {
 public:
  GroupedAnswers(engine::Backend& backend, std::string& out) : backend_(backend), out_(out) {}
  GroupedAnswers(const GroupedAnswers&) = delete;
  GroupedAnswers& operator=(const GroupedAnswers&) = delete;
  ~GroupedAnswers() { End(); }

  bool started() const { return started_; }
  // Runs `handle` (which returns a request's response payload) in the group, started if needed.
  template <typename Handle>
  void Run(Handle handle) {
    if (!started_) {
      backend_.StartWriteGroup();
      started_ = true;
    }
    const std::size_t before = backend_.GroupedWrites();
    std::string answer = handle();
    answers_.push_back({std::move(answer), backend_.GroupedWrites() > before});
  }
  // Writes what the group holds and appends its answers to `out`.
  void End() {
    if (!started_) return;
    started_ = false;
    const std::vector<Status> outcomes = backend_.FinishWriteGroup();
    std::size_t next = 0;
    for (Answer& answer : answers_) {
      if (answer.grouped && next < outcomes.size()) {
        const Status& written = outcomes[next++];
        if (!written.ok()) answer.payload = EncodeResponse(written);
      }
      out_ += EncodeFrame(answer.payload);
    }
    answers_.clear();
  }

 private:
  struct Answer {
    std::string payload;
    bool grouped;  // the call's write went into the group
  };
  engine::Backend& backend_;
  std::string& out_;
  bool started_ = false;
  std::vector<Answer> answers_;
};

// Whether `in` starts with a whole frame (its header, then as many bytes as the header announces)
// of at most `max_frame` bytes.
bool StartsWithWholeFrame(std::string_view in, std::size_t max_frame) {
  return CutFrame(in, max_frame).state == FrameCut::State::kWhole;
}

}  // namespace

bool OwnerServer::ReceiveRequest(Connection& connection, bool& closed) {
  std::string& in = connection.in;
  for (;;) {
    // A client may send requests before the answers to its earlier ones: read ahead of the
    // one to run, so that a batch costs one wake-up, but not without bound.
    if (in.size() >= kReadAhead && StartsWithWholeFrame(in, options_.max_frame)) return true;
    char chunk[16384];
    const ssize_t n = ::recv(connection.fd.get(), chunk, sizeof chunk, MSG_DONTWAIT);
    if (n > 0) {
      in.append(chunk, static_cast<std::size_t>(n));
      // Refused at its header, before its body arrives; a later frame is checked when it is
      // the next to run (ServeRequest).
      if (const FrameCut cut = CutFrame(in, options_.max_frame);
          cut.state == FrameCut::State::kOversized) {
        RefuseOversized(connection, cut.length);
        return false;
      }
      // Less than asked for: the socket is drained for now (a read that would find nothing
      // costs a system call per request).
      if (static_cast<std::size_t>(n) < sizeof chunk) return true;
    } else if (n == 0) {
      closed = true;
      return true;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return true;
    } else if (errno != EINTR) {
      return false;  // the connection failed: nobody is there to answer
    }
  }
}

void OwnerServer::RefuseOversized(Connection& connection, uint32_t size) {
  log_.Log(
      LogSeverity::kWarning, "frame_too_large",
      fmt::format("dropped the connection of pid {}: frame of {} bytes is over the limit of {}",
                  connection.pid, size, options_.max_frame));
  // Said, not only dropped: a client whose limits are larger than this owner's would take a
  // silent close for a lost owner, and fail over and resend until it gave up. The answers to
  // the requests before it go first.
  SendBeforeClosing(connection);
  Say(connection.fd.get(), ResponseKind::kRefusal,
      Status::InvalidArgument(fmt::format("{} refuses a request of {} bytes: the limit is {} bytes",
                                          OwnerName(::getpid()), size, options_.max_frame)));
}

void OwnerServer::SendBeforeClosing(Connection& connection) {
  // Best effort, without waiting, as Say.
  const std::string& out = connection.out;
  if (connection.out_done < out.size()) {
    static_cast<void>(::send(connection.fd.get(), out.data() + connection.out_done,
                             out.size() - connection.out_done, MSG_NOSIGNAL | MSG_DONTWAIT));
  }
}

void OwnerServer::TurnAway(const Connection& connection, std::string_view frame,
                           const Status& why) {
  const uint8_t version = RequestVersion(frame);
  if (version == 0 || version == kProtocolVersion) {
    log_.Log(LogSeverity::kWarning, "malformed_request",
             fmt::format("dropped the connection of pid {}: {}", connection.pid, why.ToString()));
    return;
  }
  log_.Log(LogSeverity::kWarning, "protocol_version",
           fmt::format("refused the connection of pid {}: it speaks protocol version "
                       "{}, this owner {}",
                       connection.pid, version, kProtocolVersion));
  Say(connection.fd.get(), ResponseKind::kRefusal,
      Status::Busy(fmt::format("{} speaks protocol version {}, this process {}: every process "
                               "sharing a store must run the same idem release",
                               OwnerName(::getpid()), kProtocolVersion, version)));
}

std::optional<OwnerServer::Phase> OwnerServer::ServeRequest(Connection& connection,
                                                            uint32_t events) {
  std::string& in = connection.in;
  bool closed = false;
  if (!ReceiveRequest(connection, closed)) return std::nullopt;
  if (CutFrame(in, options_.max_frame).state == FrameCut::State::kPartial) {
    if (closed) return std::nullopt;  // the normal end of a connection, or a peer gone mid-frame
    return in.empty() ? Phase::kIdle : Phase::kReading;
  }
  // A client that closed its connection after sending gave up waiting (its call returned
  // kTimedOut, typically while this owner was stopped): nobody will read the answer.
  const bool abandoned = closed || (events & (EPOLLRDHUP | EPOLLHUP)) != 0;
  // This thread is busy for as long as the requests run: make sure another one waits.
  if (!abandoned) AddThreadIfAllBusy();

  const std::optional<std::size_t> used = RunWholeRequests(connection, abandoned);
  if (!used || abandoned) return std::nullopt;
  if (*used == in.size()) {
    ReleaseLarge(in);
  } else {
    in.erase(0, *used);  // the start of the next request
  }
  return SendAnswer(connection);
}

std::optional<std::size_t> OwnerServer::RunWholeRequests(Connection& connection, bool abandoned) {
  // Every request that has arrived whole, one at a time in the order sent, each answer after
  // the one before (a client that pipelines its requests matches answers by their order).
  // Consecutive unsynced Begins and Transitions (kBuffered, kPeriodic) are written as one batch (a
  // write group): the owner's largest cost per request was its own RocksDB write
  // (docs/design/speed.md).
  std::string& in = connection.in;
  connection.out.clear();
  connection.out_done = 0;
  GroupedAnswers grouped(backend_, connection.out);
  std::size_t used = 0;
  for (;;) {
    const FrameCut cut = CutFrame(std::string_view(in).substr(used), options_.max_frame);
    if (cut.state == FrameCut::State::kOversized) {
      grouped.End();  // the answers before go first
      RefuseOversized(connection, cut.length);
      return std::nullopt;
    }
    if (cut.state == FrameCut::State::kPartial) break;
    const std::string_view frame = cut.payload;
    used += cut.size;
    Result<Request> request = DecodeRequest(frame);
    if (!request.ok()) {
      grouped.End();
      SendBeforeClosing(connection);
      TurnAway(connection, frame, request.status());
      return std::nullopt;
    }
    if (abandoned) {
      // A Begin would leave a claim that holds the key for a lease, and a read is of no use:
      // they are dropped. A Complete, Fail, Extend, SaveCheckpoint or Forget is carried out
      // (KeptWhenAbandoned).
      if (KeptWhenAbandoned(*request)) Handle(*request, connection);
      continue;
    }
    // A group costs a lone request more than it saves: one starts only with a second request.
    if (JoinsWriteGroup(*request) &&
        (grouped.started() ||
         StartsWithWholeFrame(std::string_view(in).substr(used), options_.max_frame))) {
      grouped.Run([&] { return Handle(*request, connection); });
    } else {
      // Anything else sees what the requests before it wrote.
      grouped.End();
      connection.out += EncodeFrame(Handle(*request, connection));
    }
  }
  grouped.End();
  return used;
}

std::optional<OwnerServer::Phase> OwnerServer::SendAnswer(Connection& connection) {
  std::string& out = connection.out;
  while (connection.out_done < out.size()) {
    const ssize_t n = ::send(connection.fd.get(), out.data() + connection.out_done,
                             out.size() - connection.out_done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      connection.out_done += static_cast<std::size_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return Phase::kWriting;  // the rest when the client has read some
    } else if (errno != EINTR) {
      return std::nullopt;
    }
  }
  ReleaseLarge(out);
  connection.out_done = 0;
  // Part of the next request may have come with the last one.
  return connection.in.empty() ? Phase::kIdle : Phase::kReading;
}

template <class Message>
std::string OwnerServer::RunOp(const Message& message, Connection& connection) {
  return EncodeAnswer<Message>(message.CallOn(backend_, connection.holder));
}

// The ops that change what the connection holds: the owner ends its views and reservations with
// it.
template <>
std::string OwnerServer::RunOp(const TransitionMessage& message, Connection& connection) {
  const Status status = message.CallOn(backend_, connection.holder);
  // EngineBackend::Transition ended the claim's reservation, if it had one.
  if (EndsReservation(message.call.request.kind, status)) {
    connection.reservations.Remove(message.call.key, message.call.request.token);
  }
  return EncodeAnswer<TransitionMessage>(status);
}

template <>
std::string OwnerServer::RunOp(const ReserveMessage& message, Connection& connection) {
  connection.reservations.Add(message.call.claim_key, message.call.token);
  return EncodeAnswer<ReserveMessage>(message.CallOn(backend_, connection.holder));
}

template <>
std::string OwnerServer::RunOp(const UnreserveMessage& message, Connection& connection) {
  connection.reservations.Remove(message.claim_key, message.token);
  return EncodeAnswer<UnreserveMessage>(message.CallOn(backend_, connection.holder));
}

template <>
std::string OwnerServer::RunOp(const OpenViewMessage& message, Connection& connection) {
  Result<uint64_t> view = message.CallOn(backend_, connection.holder);
  if (view.ok()) connection.views.Add(*view);
  return EncodeAnswer<OpenViewMessage>(view);
}

template <>
std::string OwnerServer::RunOp(const CloseViewMessage& message, Connection& connection) {
  connection.views.Remove(message.view);
  return EncodeAnswer<CloseViewMessage>(message.CallOn(backend_, connection.holder));
}

// The jobs: each request starts the job or asks how it is going (HandleJob).
template <>
std::string OwnerServer::RunOp(const PurgeMessage& message, Connection& /*connection*/) {
  PurgeOptions options;
  options.dry_run = message.options.dry_run;
  options.compact = message.options.compact;
  return HandleJob(
      message.ticket, message.wait,
      [this, options, count_total = message.count_total](JobProgress& progress) mutable {
        options.progress = [&progress](uint64_t so_far) { progress.count.store(so_far); };
        // Only for a client that asked: counting walks the due index entries.
        if (count_total) {
          options.progress_total = [&progress](uint64_t total) { progress.SetTotal(total); };
        }
        return backend_.Purge(options);
      });
}

template <>
std::string OwnerServer::RunOp(const BackupMessage& message, Connection& /*connection*/) {
  return HandleJob(
      message.ticket, message.wait,
      [this, destination = std::string(message.destination)](JobProgress&) -> Result<uint64_t> {
        IDEM_RETURN_IF_ERROR(backend_.Backup(destination));
        return uint64_t{0};
      });
}

std::string OwnerServer::Handle(const Request& request, Connection& connection) {
  return std::visit([&](const auto& message) { return RunOp(message, connection); }, request);
}

std::string OwnerServer::HandleJob(uint64_t ticket, milliseconds wait,
                                   std::function<Result<uint64_t>(JobProgress& progress)> work) {
  util::MutexLock lock(job_mu_);
  std::shared_ptr<Job>& slot = jobs_[ticket];
  if (!slot) {
    if (jobs_.size() > kMaxJobs) {
      jobs_.erase(ticket);
      return EncodeResponse(Status::Busy(
          fmt::format("the store's owner is running {} purges and backups already", kMaxJobs)));
    }
    slot = std::make_shared<Job>();
    slot->thread = std::thread([this, job = slot.get(), work = std::move(work)] {
      Result<uint64_t> result = work(job->progress);
      {
        util::MutexLock done_lock(job_mu_);
        job->result = std::move(result);
        job->finished = Clock::now();
      }
      job_changed_.NotifyAll();
    });
  }
  const std::shared_ptr<Job> job = slot;
  job_changed_.WaitFor(lock, std::clamp(wait, milliseconds(0), kMaxJobWait),
                       [&] { return job->result.has_value(); });
  if (!job->result) {
    return EncodeResponse(Status::OK(), EncodePurgeProgress(job->progress.Running()));
  }
  // The client has its answer: the job is over (a lost answer means a new job, as after a
  // failover).
  const Result<uint64_t> result = *job->result;
  // Whoever takes the job out of the map joins its thread.
  if (jobs_.erase(ticket) == 1) {
    lock.Unlock();
    job->thread.join();
  }
  return result.ok()
             ? EncodeResponse(Status::OK(), EncodePurgeProgress(job->progress.Finished(*result)))
             : EncodeResponse(result.status());
}

}  // namespace idem::sharing
