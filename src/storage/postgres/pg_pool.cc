#include "storage/postgres/pg_pool.h"

#include <fmt/format.h>
#include <libpq-fe.h>

#include <algorithm>

#include "storage/postgres/pg_session.h"
#include "util/deadline.h"
#include "util/process.h"

namespace idem::storage {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// How much longer than the server's statement_timeout an answer is awaited: the server's
// timeout keeps the connection, the client's does not.
constexpr milliseconds kAnswerGrace{1000};
// Calls tried again after a failover pause up to kLongestPause between attempts; the last
// attempt, made at the failover deadline, still gets that long to connect.
constexpr milliseconds kLongestPause{500};
constexpr milliseconds kShortestConnect = kLongestPause;

// The connection the calling thread last gave back to a pool (any pool: Checkout only looks for
// it among its own idle connections, so a stale or foreign one is never matched).
thread_local pg_conn* last_returned_by_this_thread = nullptr;

}  // namespace

// What one attempt of Run came to: a result to return, or a reason to try again.
struct PgPool::Step {
  enum class Next { kReturn, kReconnect, kResend, kRetry };
  Next next = Next::kReturn;
  Result<std::vector<PgRows>> result = Status::Unavailable("not run");
  pg_conn* kept = nullptr;  // a transaction's connection left open (keep_open), checked out
  std::string sqlstate;     // the server's error, if that is what failed
  // A connection that failed only after the whole timeout: how long it was silent (else 0).
  std::chrono::milliseconds silent_for{0};
};

// A checked-out connection (or a place for one), returned to the pool when it goes.
class PgPool::Lease {
 public:
  Lease(PgPool* pool, pg_conn* conn) : pool_(pool), conn_(conn) {}
  ~Lease() {
    if (pool_ != nullptr) pool_->Return(conn_);
  }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

  pg_conn*& conn() { return conn_; }
  // Hands the connection over, still checked out: the new holder returns it (PgPool::Return).
  pg_conn* Release() {
    pool_ = nullptr;
    return conn_;
  }

 private:
  PgPool* pool_;
  pg_conn* conn_;
};

PgPool::PgPool(PgConninfo conninfo, PgPoolOptions options)
    : conninfo_(std::move(conninfo)),
      options_([&options] {
        options.size = std::max(options.size, 1);
        return options;
      }()),
      fork_generation_(util::ForkGeneration()) {}

PgPool::~PgPool() {
  // A child of fork() shares the parent's sockets: PQfinish would send the server the end of
  // the parent's sessions. The child leaves them (a little memory).
  if (util::ForkGeneration() != fork_generation_) return;
  for (pg_conn* conn : idle_) CloseSession(conn);
}

PgPoolStats PgPool::stats() const {
  return {.connections_made = connections_made_.load(),
          .sent = sent_.load(),
          .resends = resends_.load(),
          .retries = retries_.load(),
          .cancels = cancels_.load(),
          .prepares = prepares_.load(),
          .waiting = [this] {
            util::MutexLock lock(mu_);
            return waiters_.size();
          }()};
}

Result<std::vector<PgRows>> PgPool::Run(const PgTransaction& transaction, bool* resent) {
  return std::move(Drive(transaction, resent).result);
}

std::unique_ptr<PgOpenTransaction> PgPool::Begin(milliseconds timeout) {
  return std::unique_ptr<PgOpenTransaction>(
      new PgOpenTransaction(this, timeout > milliseconds(0) ? timeout : options_.request_timeout));
}

PgPool::Step PgPool::Drive(const PgTransaction& transaction, bool* resent) {
  if (resent != nullptr) *resent = false;
  if (util::ForkGeneration() != fork_generation_) {
    return {.result = Status::Unavailable(fmt::format(
                "{}: the connection pool was made before fork(); open the store again in this "
                "process",
                conninfo_.display_name()))};
  }
  const milliseconds timeout =
      transaction.timeout > milliseconds(0) ? transaction.timeout : options_.request_timeout;
  const util::Deadline deadline(options_.failover_timeout);
  Step::Next previous = Step::Next::kReturn;  // how the last attempt ended, when one did
  Status why;
  const auto attempt = [&]() -> std::optional<Step> {
    if (previous == Step::Next::kResend) {
      ++resends_;
      if (resent != nullptr) *resent = true;
    }
    if (previous == Step::Next::kRetry) ++retries_;
    Step step = Attempt(transaction, timeout, deadline.at());
    if (step.next == Step::Next::kReturn) return step;
    why = step.result.status();
    if (step.next == Step::Next::kResend && !transaction.resendable) {
      return Step{.result = Status::Unavailable(fmt::format(
                      "{}; the transaction may or may not have been committed, and was not sent "
                      "again",
                      why.message()))};
    }
    // Trying again would wait as long again, past the call's deadline. Failures that come back
    // at once (a restart, a failover) are tried until the deadline.
    if (step.silent_for > milliseconds(0)) {
      return Step{.result =
                      Status::Unavailable(fmt::format("{}; no answer for {} ms, not tried again",
                                                      why.message(), step.silent_for.count()))};
    }
    previous = step.next;
    return std::nullopt;
  };
  return util::RetryUntil(
      deadline, util::Backoff(milliseconds(10), kLongestPause), attempt, [&](int attempts) {
        return Step{.result = Status(
                        why.code(),
                        fmt::format("{}; gave up after {} attempts in {} ms (failover timeout: {} "
                                    "ms)",
                                    why.message(), attempts, deadline.Elapsed().count(),
                                    deadline.budget().count()))};
      });
}

PgPool::Step PgPool::Attempt(const PgTransaction& transaction, milliseconds timeout,
                             TimePoint give_up) {
  // Alone, a statement has no server-side timeout to come first.
  const milliseconds answer_wait = transaction.alone ? timeout : timeout + kAnswerGrace;
  Result<pg_conn*> checked_out = Checkout(timeout);
  if (!checked_out.ok()) return {.result = checked_out.status()};
  // Deadlines from one moment for connecting and for the answer: a server that accepts
  // connections but does not answer (stopped, frozen, or cut off by the network without a
  // reset) holds the caller no longer than one that stops answering on a connection already
  // made. Connecting runs no statement, so no statement_timeout comes first: no grace there.
  const TimePoint base = Clock::now();
  const TimePoint deadline = base + answer_wait;
  const TimePoint connect_deadline = base + timeout;
  // A connection that failed only after the whole timeout failed for want of an answer (a
  // connect that timed out, tcp_user_timeout on a network that drops packets), not because the
  // server refused.
  const auto silence = [&] {
    const auto waited = std::chrono::duration_cast<milliseconds>(Clock::now() - base);
    return waited >= timeout ? waited : milliseconds(0);
  };
  Lease lease(this, *checked_out);
  if (lease.conn() == nullptr) {
    Result<pg_conn*> connected =
        Connect(std::min(connect_deadline, std::max(give_up, Clock::now() + kShortestConnect)));
    if (!connected.ok()) {
      const bool final = connected.status().code() != Status::Code::kUnavailable;
      return {.next = final ? Step::Next::kReturn : Step::Next::kReconnect,
              .result = connected.status(),
              .silent_for = silence()};
    }
    lease.conn() = *connected;
  }
  sent_.fetch_add(1, std::memory_order_relaxed);
  PgPipelineOutcome outcome =
      RunPipeline(lease.conn(), PreparedOn(lease.conn()), transaction, timeout, deadline);
  Step step = Judge(std::move(outcome), transaction, answer_wait, lease.conn());
  if (transaction.keep_open && step.result.ok()) step.kept = lease.Release();
  if (step.next == Step::Next::kResend) step.silent_for = silence();
  return step;
}

PgPreparedNames* PgPool::PreparedOn(pg_conn* conn) {
  if (!prepares_.load(std::memory_order_relaxed)) return nullptr;
  util::MutexLock lock(mu_);
  return &prepared_[conn];
}

PgPool::Step PgPool::Judge(PgPipelineOutcome&& outcome, const PgTransaction& transaction,
                           milliseconds answer_wait, pg_conn*& conn) {
  if (transaction.read_only && outcome.sqlstate == "25006") {
    outcome.failure = PgFailure::kOther;  // a write in a read-only transaction: the caller's
  }
  Step judged = JudgeFailure(outcome, transaction, answer_wait, conn);
  judged.sqlstate = std::move(outcome.sqlstate);
  return judged;
}

PgPool::Step PgPool::JudgeFailure(PgPipelineOutcome& outcome, const PgTransaction& transaction,
                                  milliseconds answer_wait, pg_conn*& conn) {
  const std::string_view name = conninfo_.display_name();
  switch (outcome.failure) {
    case PgFailure::kNone:
      return {.result = std::move(outcome.rows)};
    case PgFailure::kNoAnswer:
      ++cancels_;
      Discard(std::exchange(conn, nullptr), /*cancel=*/true);
      return {.result = Status::TimedOut(fmt::format(
                  "{}: no answer within {} ms; the query was cancelled and its connection closed",
                  name, answer_wait.count()))};
    case PgFailure::kConnectionLost:
      Discard(std::exchange(conn, nullptr), /*cancel=*/false);
      return {.next = Step::Next::kResend,
              .result = Failed(outcome.failure, "lost the connection", outcome.message,
                               outcome.sqlstate)};
    case PgFailure::kNotPrepared:
      // Nothing ran: the transaction stopped at the statement the session lacked.
      prepares_.store(false, std::memory_order_relaxed);
      return {.next = Step::Next::kRetry,
              .result = Failed(outcome.failure, "a prepared statement was not in the session",
                               outcome.message, outcome.sqlstate)};
    case PgFailure::kRetry:
      return {.next = Step::Next::kRetry,
              .result = Failed(outcome.failure, "the transaction was rolled back", outcome.message,
                               outcome.sqlstate)};
    default: {
      const PgStatement* failed =
          outcome.statement >= 0 ? &transaction.statements[outcome.statement] : nullptr;
      const std::string what =
          failed == nullptr
              ? "the transaction failed"
              : fmt::format("statement {} of {} failed ({:.100})", outcome.statement + 1,
                            transaction.statements.size(), failed->sql);
      return {.result = Failed(outcome.failure, what, outcome.message, outcome.sqlstate)};
    }
  }
}

Status PgPool::Failed(PgFailure failure, std::string_view what, std::string_view message,
                      std::string_view sqlstate) const {
  std::string text =
      fmt::format("{}: {}: {}", conninfo_.display_name(), what, conninfo_.Redact(OneLine(message)));
  if (!sqlstate.empty()) text += fmt::format(" (SQLSTATE {})", sqlstate);
  switch (failure) {
    case PgFailure::kConnectionLost:
    case PgFailure::kRetry:
    case PgFailure::kNotPrepared:
      return Status::Unavailable(std::move(text));
    case PgFailure::kStatementTimeout:
      return Status::TimedOut(std::move(text));
    default:
      break;
  }
  if (sqlstate.empty()) return Status::Unavailable(std::move(text));
  if (sqlstate.starts_with("53") || sqlstate.starts_with("58")) {
    return Status::IOError(std::move(text));
  }
  if (sqlstate.starts_with("XX")) return Status::Corruption(std::move(text));
  return Status::InvalidArgument(std::move(text));
}

Result<pg_conn*> PgPool::Checkout(milliseconds timeout) {
  pg_conn* conn = nullptr;
  {
    util::MutexLock lock(mu_);
    // While anyone waits, no connection is idle and no slot free: Return hands them over.
    if (waiters_.empty() &&
        (!idle_.empty() || checked_out_ + static_cast<int>(idle_.size()) < options_.size)) {
      ++checked_out_;
      if (!idle_.empty()) {
        // The connection this thread last gave back, when it is idle: its server process is
        // then woken by the same thread as before, likely on the same core, with warm caches
        // on both sides. Otherwise the one given back last.
        auto mine = std::find(idle_.begin(), idle_.end(), last_returned_by_this_thread);
        if (mine == idle_.end()) mine = idle_.end() - 1;
        conn = *mine;
        *mine = idle_.back();
        idle_.pop_back();
      }
    } else {
      Waiter me;
      waiters_.push_back(&me);
      if (!me.ready.WaitFor(lock, timeout, [&me] { return me.granted; })) {
        waiters_.erase(std::find(waiters_.begin(), waiters_.end(), &me));
        return Status::TimedOut(
            fmt::format("{}: all {} connections of the pool are busy; waited {} ms for one",
                        conninfo_.display_name(), options_.size, timeout.count()));
      }
      conn = me.conn;  // the slot came counted in checked_out_
    }
  }
  // A server that restarted or a pooler that dropped the session while it sat idle.
  if (conn != nullptr && !SessionReusable(conn)) Discard(std::exchange(conn, nullptr), false);
  return conn;
}

void PgPool::Return(pg_conn* conn) {
  last_returned_by_this_thread = conn;
  // What the server may have sent meanwhile is looked for at the next checkout (SessionReusable).
  if (conn != nullptr && !SessionIdle(conn)) Discard(std::exchange(conn, nullptr), false);
  util::MutexLock lock(mu_);
  if (!waiters_.empty()) {
    // The slot passes to the oldest waiter as it is, still counted in checked_out_. Notified
    // under the lock: the waiter's record lives on its stack only until it sees `granted`.
    Waiter& next = *waiters_.front();
    waiters_.pop_front();
    next.conn = conn;
    next.granted = true;
    next.ready.NotifyOne();
    return;
  }
  --checked_out_;
  if (conn != nullptr) idle_.push_back(conn);
}

void PgPool::Discard(pg_conn* conn, bool cancel) {
  {
    util::MutexLock lock(mu_);
    prepared_.erase(conn);
  }
  if (cancel) {
    CancelAndCloseSession(conn);
  } else {
    CloseSession(conn);
  }
}

Result<pg_conn*> PgPool::Connect(TimePoint deadline) {
  std::string failures;
  const int hosts = conninfo_.host_count();
  for (int host = 0; host < hosts; ++host) {
    // Each host that does not answer gets its share of what is left, so that a dead first host
    // (a primary powered off) leaves time for the next one.
    TimePoint until = Clock::now() + (deadline - Clock::now()) / (hosts - host);
    if (const milliseconds limit = conninfo_.connect_timeout(); limit > milliseconds(0)) {
      until = std::min(until, Clock::now() + limit);
    }
    PgConnectResult attempt = ConnectSession(conninfo_.ForHost(host), until);
    if (attempt.conn != nullptr) {
      ++connections_made_;
      return attempt.conn;
    }
    const std::string message = conninfo_.Redact(OneLine(attempt.message));
    if (ClassifySqlState(SqlStateInMessage(attempt.message)) == PgFailure::kRefused) {
      return Status::InvalidArgument(fmt::format("{}: PostgreSQL refused the connection: {}",
                                                 conninfo_.display_name(), message));
    }
    failures += (failures.empty() ? "" : "; ") + message;
  }
  return Status::Unavailable(
      fmt::format("{}: cannot connect: {}", conninfo_.display_name(), failures));
}

PgOpenTransaction::~PgOpenTransaction() {
  RollBack();
  if (checked_out_) pool_->Return(conn_);
}

Result<std::vector<PgRows>> PgOpenTransaction::Run(std::vector<PgStatement> statements) {
  return Step(std::move(statements), /*commit=*/false);
}

Result<std::vector<PgRows>> PgOpenTransaction::RunAndCommit(std::vector<PgStatement> statements) {
  return Step(std::move(statements), /*commit=*/true);
}

void PgOpenTransaction::RollBack() {
  if (!ended_.ok()) return;  // over already; keep what ended it
  if (checked_out_) {
    static_cast<void>(Step({{.sql = "ROLLBACK", .prepare = false}}, /*commit=*/false));
  }
  if (ended_.ok()) ended_ = Status::InvalidArgument("the transaction was rolled back");
}

Result<std::vector<PgRows>> PgOpenTransaction::Step(std::vector<PgStatement> statements,
                                                    bool commit) {
  IDEM_RETURN_IF_ERROR(ended_);
  const std::size_t count = statements.size();
  PgTransaction transaction{.statements = std::move(statements), .timeout = timeout_};
  PgPool::Step step;
  if (!checked_out_) {
    // The first round trip: BEGIN and SET LOCAL statement_timeout go with it. Until COMMIT is
    // in it, nothing can have committed, so the pool may send it again.
    transaction.keep_open = !commit;
    transaction.resendable = !commit;
    step = pool_->Drive(transaction, nullptr);
    if (step.kept != nullptr) {
      checked_out_ = true;
      conn_ = step.kept;
    }
  } else {
    if (commit) transaction.statements.push_back({.sql = "COMMIT", .prepare = false});
    transaction.alone = true;
    // The server's statement_timeout (set at BEGIN) comes first; this bounds a silent server.
    const milliseconds answer_wait = timeout_ + kAnswerGrace;
    pool_->sent_.fetch_add(1, std::memory_order_relaxed);
    step = pool_->Judge(RunPipeline(conn_, pool_->PreparedOn(conn_), transaction, timeout_,
                                    Clock::now() + answer_wait),
                        transaction, answer_wait, conn_);
  }
  if (step.result.ok()) {
    if (commit) ended_ = Status::InvalidArgument("the transaction was committed");
    step.result->erase(step.result->begin() + static_cast<std::ptrdiff_t>(count),
                       step.result->end());  // without COMMIT's
    return std::move(step.result);
  }
  // The transaction is over: rolled back by RunPipeline, or by the server with the connection.
  Status why = step.result.status();
  if (step.next == PgPool::Step::Next::kRetry) {
    why = Status::Conflict(fmt::format("{}; run the transaction again", why.message()));
  } else if (step.next == PgPool::Step::Next::kResend) {
    why = Status::Unavailable(fmt::format("{}; {}", why.message(),
                                          commit
                                              ? "the transaction may or may not have been committed"
                                              : "the server rolled the transaction back"));
  }
  failed_sqlstate_ = std::move(step.sqlstate);
  ended_ = why;
  return why;
}

}  // namespace idem::storage
