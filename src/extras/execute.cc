// Store::Execute: the whole lifecycle of one request in one call.

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "api/reserving_store.h"
#include "extras/lease_keeper.h"
#include "extras/staged_writes.h"
#include "idem/store.h"
#include "util/deadline.h"
#include "util/escape.h"
#include "util/random.h"

namespace idem {

namespace {

using std::chrono::milliseconds;

// Polling an in-progress owner starts fast (most requests finish in milliseconds) and backs
// off to this, so a long wait costs a few Begin calls a second.
constexpr milliseconds kFirstPoll{1};
constexpr milliseconds kLongestPoll{100};

// Between runs of fn after a conflict: a pause drawn up to this, doubling from the first, so
// that requests that collided on one key do not collide again in step.
constexpr milliseconds kFirstConflictPause{1};
constexpr milliseconds kLongestConflictPause{50};

milliseconds Jittered(milliseconds most) {
  thread_local std::mt19937_64 generator{util::RandomSeed()};
  return milliseconds(std::uniform_int_distribution<milliseconds::rep>(0, most.count())(generator));
}

std::string ExceptionText(std::exception_ptr error) {
  try {
    std::rethrow_exception(std::move(error));
  } catch (const std::exception& e) {
    return fmt::format("exception: {}", e.what());
  } catch (...) {
    return "exception of a type not derived from std::exception";
  }
}

// How Execute and ExecuteInTransaction run fn and commit what it returned.
class AttemptRunner {
 public:
  virtual ~AttemptRunner() = default;
  // Before each run of fn. An error ends the attempt (recorded as a retryable failure).
  virtual Status Start() = 0;
  // After a run conflicted, before the next Start. True when that Start waits its turn for the
  // keys (a reservation), so that no pause is needed to keep the reruns out of step.
  virtual bool Conflicted() = 0;
  virtual Result<std::string> Run(Attempt& attempt) = 0;
  // After fn returned an error or threw: nothing of this run may apply.
  virtual void Abandon() = 0;
  // Records `result` with this run's effects. kConflict: nothing applied, run fn again.
  virtual Status Commit(std::string_view result) = 0;
  // How a result over Options::max_result_size fails the claim (after Abandon).
  virtual Failure OversizedResult() const = 0;
};

// Execute's: fn stages table writes (Attempt::Read, Put, Delete); Complete applies them.
//
// After a run conflicted, the next run first reserves the keys the runs so far touched, waiting
// its turn (backend/key_reservations.h): no other commit may change them between its reads and its
// commit, so it commits, however long its reads take and however many short Executes write the
// same keys. Without that, the Execute with the longer read-to-commit window (a client's round
// trips, a transaction over many keys) loses nearly every race.
class StagedRunner final : public AttemptRunner {
 public:
  StagedRunner(Store& store, std::string_view key, uint64_t token, milliseconds lease,
               FunctionRef<Result<std::string>(Attempt&)> fn)
      : store_(store),
        reserving_(dynamic_cast<ReservingStore*>(&store)),
        key_(key),
        token_(token),
        lease_(lease),
        staged_(store),
        fn_(fn) {}
  ~StagedRunner() override {
    // Its commit ended it otherwise; whether this reaches the owner or not, the reservation
    // lapses with the lease.
    if (reserved_) static_cast<void>(reserving_->UnreserveKeys(key_, token_));
  }

  Status Start() override {
    staged_.Clear();
    if (reserving_ == nullptr || wanted_.empty() || reserved_ == wanted_.size()) {
      return Status::OK();
    }
    return Reserve();
  }
  bool Conflicted() override {
    staged_.AddKeysTo(wanted_);
    return reserving_ != nullptr && !wanted_.empty();
  }
  Result<std::string> Run(Attempt& attempt) override {
    attempt.staged = &staged_;
    return fn_(attempt);
  }
  void Abandon() override {}
  Status Commit(std::string_view result) override {
    const Status committed = store_.Complete(key_, token_, result, staged_.writes());
    if (committed.ok()) reserved_ = 0;  // the commit ended the reservation
    return committed;
  }
  // fn's effects outside the store may be done: running it again could repeat them.
  Failure OversizedResult() const override { return Failure::kTerminal; }

 private:
  // Reserves wanted_, waiting at most the claim's lease (renewed meanwhile: RunAttempt).
  Status Reserve() {
    const util::Deadline deadline(lease_);
    for (;;) {
      const milliseconds left = deadline.Left();
      IDEM_ASSIGN_OR_RETURN(
          const bool granted,
          reserving_->ReserveKeys(key_, token_, {wanted_.begin(), wanted_.end()}, lease_, left));
      if (granted) {
        reserved_ = wanted_.size();
        return Status::OK();
      }
      if (left == milliseconds(0)) {
        const TableKey& first = *wanted_.begin();
        return Status::Conflict(fmt::format(
            "fn's run conflicted, and the {} key(s) it touched (key \"{}\" of table {} first) "
            "stayed reserved by other Executes for {} ms (the claim's lease) before it could run "
            "again",
            wanted_.size(), DisplayEscape(first.second), EscapeControls(first.first),
            lease_.count()));
      }
    }
  }

  Store& store_;
  ReservingStore* const reserving_;  // null: a Store that reserves nothing
  const std::string_view key_;
  const uint64_t token_;
  const milliseconds lease_;
  StagedWrites staged_;
  FunctionRef<Result<std::string>(Attempt&)> fn_;
  std::set<TableKey> wanted_;  // the keys of every run that conflicted
  std::size_t reserved_ = 0;   // how many of wanted_ the claim holds reserved (0: none)
};

// ExecuteInTransaction's: fn runs its SQL in a transaction that completes the record.
class TransactionRunner final : public AttemptRunner {
 public:
  TransactionRunner(Store& store, std::string_view key, uint64_t token,
                    FunctionRef<Result<std::unique_ptr<ClaimTransaction>>()> begin,
                    FunctionRef<Result<std::string>(Attempt&, SqlTransaction&)> fn)
      : store_(store), key_(key), token_(token), begin_(begin), fn_(fn) {}

  Status Start() override {
    IDEM_ASSIGN_OR_RETURN(transaction_, begin_());
    return Status::OK();
  }
  // The database's own locks order the transactions (docs/postgresql.md).
  bool Conflicted() override { return false; }
  Result<std::string> Run(Attempt& attempt) override { return fn_(attempt, *transaction_); }
  void Abandon() override { transaction_->RollBack(); }
  Status Commit(std::string_view result) override {
    const Status committed = transaction_->CompleteAndCommit(result);
    transaction_.reset();
    if (committed.code() != Status::Code::kUnavailable) return committed;
    // The connection was lost, perhaps after COMMIT was sent: the record says whether it was.
    IDEM_ASSIGN_OR_RETURN(const std::optional<Record> record, store_.Get(key_));
    if (record && record->token == token_) {
      if (record->state == State::kDone) return Status::OK();
      if (record->state == State::kPending) {
        return Status::Conflict(fmt::format("{}; it was not committed", committed.message()));
      }
    }
    return committed;
  }
  // fn's effects are its SQL, rolled back by Abandon: running it again repeats nothing.
  Failure OversizedResult() const override { return Failure::kRetryable; }

 private:
  Store& store_;
  const std::string_view key_;
  const uint64_t token_;
  FunctionRef<Result<std::unique_ptr<ClaimTransaction>>()> begin_;
  FunctionRef<Result<std::string>(Attempt&, SqlTransaction&)> fn_;
  std::unique_ptr<ClaimTransaction> transaction_;
};

// Fail with `error` cut to what the store holds (Options::max_result_size, which limits error
// texts too): an error text too long to record must not leave the claim pending.
Status FailWithin(Store& store, std::string_view key, uint64_t token, std::string_view error,
                  Failure kind) {
  const std::size_t limit = store.options().max_result_size;
  if (error.size() <= limit) return store.Fail(key, token, error, kind);
  constexpr std::string_view kCut = "...";
  std::size_t kept = limit >= kCut.size() ? limit - kCut.size() : limit;
  // Not inside a UTF-8 sequence: back to the byte that starts it.
  while (kept > 0 && (static_cast<unsigned char>(error[kept]) & 0xC0) == 0x80) --kept;
  std::string cut(error.substr(0, kept));
  if (kept + kCut.size() <= limit) cut += kCut;
  return store.Fail(key, token, cut, kind);
}

// fn returned a result the store cannot hold. The claim is failed as `kind` says (the runner's
// OversizedResult), never left pending: the next caller would wait out the lease, then run fn
// again.
Status FailOversizedResult(Store& store, std::string_view key, uint64_t token,
                           std::size_t result_size, Failure kind) {
  const std::string why =
      fmt::format("result is {} bytes; the limit is {} (Options::max_result_size)", result_size,
                  store.options().max_result_size);
  const std::string_view what = kind == Failure::kTerminal
                                    ? "fn ran, but its result could not be stored"
                                    : "fn's transaction was rolled back";
  const Status recorded = FailWithin(store, key, token, fmt::format("{}: {}", why, what), kind);
  // The size is what the caller must fix, whether or not the failure could be recorded.
  if (!recorded.ok()) {
    return Status::InvalidArgument(
        fmt::format("{}; recording the failure failed too: {}", why, recorded.ToString()));
  }
  return Status::InvalidArgument(
      fmt::format("{}: {}; the claim is recorded as a {} failure", why, what,
                  kind == Failure::kTerminal ? "terminal" : "retryable"));
}

// One run of fn for `claim` (after runner.Start), its lease renewed meanwhile, into `outcome`.
// An error when Start failed (recorded as a retryable failure); an exception of fn is recorded
// the same way and thrown on.
Status RunOnce(Store& store, std::string_view key, const Claim& claim, milliseconds lease,
               LeaseStatus& lease_status, Attempt& attempt, AttemptRunner& runner,
               std::optional<Result<std::string>>& outcome) {
  // From before Start (which may wait for reserved keys) until fn returns, so that a renewal
  // still in flight (a store slow to answer) does not hold up the claim's release; its
  // destructor, after the release, waits for that renewal, so that the store may be closed
  // once Execute returns.
  LeaseKeeper::Guard renewal =
      LeaseKeeper::Instance().Keep(&store, key, claim.token, lease, &lease_status);
  if (const Status started = runner.Start(); !started.ok()) {
    renewal.Stop();
    // Recorded, so that the next caller runs it again at once.
    static_cast<void>(FailWithin(store, key, claim.token, started.message(), Failure::kRetryable));
    return started;
  }
  std::exception_ptr error;
  try {
    outcome.emplace(runner.Run(attempt));
  } catch (...) {
    error = std::current_exception();
  }
  renewal.Stop();
  if (error) {
    runner.Abandon();
    // Recorded so that the next caller retries at once instead of waiting for the lease; the
    // caller's exception matters more than a failure to record it.
    static_cast<void>(
        FailWithin(store, key, claim.token, ExceptionText(error), Failure::kRetryable));
    std::rethrow_exception(error);
  }
  return Status::OK();
}

// Records the `outcome` of one run of fn for `claim`, with its effects. What ends the attempt
// (the Execution, or an error), or nothing when the run conflicted (`conflict` says why): fn
// may run again.
std::optional<Result<Execution>> RecordOutcome(Store& store, std::string_view key,
                                               const Claim& claim, AttemptRunner& runner,
                                               Result<std::string>& outcome, Status& conflict) {
  if (!outcome.ok()) {
    runner.Abandon();
    const Status& status = outcome.status();
    if (status.code() == Status::Code::kConflict) {
      conflict = status;
      return std::nullopt;
    }
    const Failure kind =
        status.code() == Status::Code::kFailed ? Failure::kTerminal : Failure::kRetryable;
    IDEM_RETURN_IF_ERROR(FailWithin(store, key, claim.token, status.message(), kind));
    return status;
  }
  if (outcome->size() > store.options().max_result_size) {
    runner.Abandon();
    return FailOversizedResult(store, key, claim.token, outcome->size(), runner.OversizedResult());
  }
  const Status committed = runner.Commit(*outcome);
  if (committed.ok()) {
    return Execution{
        .result = std::move(*outcome), .replayed = false, .attempts = claim.record.attempts};
  }
  if (committed.code() == Status::Code::kInvalidArgument) {
    // Refused before anything applied (a staged write with a bad table name or an oversized
    // value): released, so that the next caller runs fn at once instead of waiting out the
    // lease. The refusal matters more to the caller than a failure to record it.
    static_cast<void>(
        FailWithin(store, key, claim.token, committed.message(), Failure::kRetryable));
    return committed;
  }
  if (committed.code() != Status::Code::kConflict) return committed;
  conflict = committed;
  return std::nullopt;
}

// Runs fn for an acquired claim, whose Begin was sent at `sent`, and records its outcome with
// its effects, run again while they conflict.
Result<Execution> RunAttempt(Store& store, std::string_view key, const BeginOptions& options,
                             const Claim& claim, std::chrono::steady_clock::time_point sent,
                             AttemptRunner& runner) {
  const milliseconds lease = store.options().LeaseOrDefault(options.lease);
  LeaseStatus lease_status(sent + lease);
  Attempt attempt{.token = claim.token,
                  .took_over = claim.took_over,
                  .checkpoint = claim.record.checkpoint,
                  .attempts = claim.record.attempts,
                  .store = &store,
                  .key = key,
                  .lease = &lease_status};
  util::Backoff conflict_pause(kFirstConflictPause, kLongestConflictPause);
  for (int reruns = 0;; ++reruns) {
    std::optional<Result<std::string>> outcome;
    IDEM_RETURN_IF_ERROR(RunOnce(store, key, claim, lease, lease_status, attempt, runner, outcome));
    Status conflict;  // why fn runs again
    if (std::optional<Result<Execution>> done =
            RecordOutcome(store, key, claim, runner, *outcome, conflict)) {
      return std::move(*done);
    }
    if (reruns < store.options().conflict_retries) {
      if (!runner.Conflicted()) std::this_thread::sleep_for(Jittered(conflict_pause.Next()));
      continue;
    }
    // Recorded, so that the next caller runs it again at once.
    IDEM_RETURN_IF_ERROR(
        FailWithin(store, key, claim.token, conflict.message(), Failure::kRetryable));
    return Status::Conflict(fmt::format("{} (fn ran {} times)", conflict.message(), reruns + 1));
  }
}

// Execute's loop: Begin, and on kAcquired `run_acquired(claim, sent)`; other outcomes as
// Store::Execute says.
Result<Execution> ExecuteClaimed(
    Store& store, std::string_view key, const BeginOptions& options,
    FunctionRef<Result<Execution>(const Claim&, std::chrono::steady_clock::time_point)>
        run_acquired) {
  const milliseconds wait = store.options().execute_wait;
  const util::Deadline deadline(wait);
  util::Backoff poll(kFirstPoll, kLongestPoll);
  for (;;) {
    // An acquired lease runs from the owner's answer, which comes after this.
    const auto sent = std::chrono::steady_clock::now();
    IDEM_ASSIGN_OR_RETURN(Claim claim, store.Begin(key, options));
    switch (claim.outcome) {
      case Outcome::kAcquired:
        return run_acquired(claim, sent);
      case Outcome::kReplay:
        return Execution{.result = std::move(claim.record.result),
                         .replayed = true,
                         .attempts = claim.record.attempts};
      case Outcome::kFailed:
        return Status::Failed(std::move(claim.record.result));
      case Outcome::kMismatch:
        return Status::Mismatch(
            "the key was used before for a request with a different fingerprint");
      case Outcome::kInProgress:
        break;
    }
    const milliseconds left = deadline.Left();
    if (left == milliseconds(0)) {
      return Status::InProgress(
          fmt::format("another attempt still holds the key after waiting {} ms", wait.count()));
    }
    std::this_thread::sleep_for(std::min({poll.Next(), claim.retry_after, left}));
  }
}

}  // namespace

bool Attempt::LeaseHeld() const { return lease != nullptr && lease->Held(); }

Result<TableValue> Attempt::Read(std::string_view table, std::string_view key) {
  if (staged == nullptr) return StagedWrites::OutsideExecute();
  return staged->Read(table, key);
}

Status Attempt::Put(std::string_view table, std::string_view key, std::string_view value) {
  if (staged == nullptr) return StagedWrites::OutsideExecute();
  staged->Stage(table, key, std::string(value));
  return Status::OK();
}

Status Attempt::Delete(std::string_view table, std::string_view key) {
  if (staged == nullptr) return StagedWrites::OutsideExecute();
  staged->Stage(table, key, std::nullopt);
  return Status::OK();
}

Result<Execution> Store::ExecuteAttempts(std::string_view key, const BeginOptions& options,
                                         FunctionRef<Result<std::string>(Attempt&)> fn) {
  return ExecuteClaimed(*this, key, options, [&](const Claim& claim, auto sent) {
    StagedRunner runner(*this, key, claim.token, this->options().LeaseOrDefault(options.lease), fn);
    return RunAttempt(*this, key, options, claim, sent, runner);
  });
}

Result<Execution> Store::ExecuteInTransactionAttempts(
    std::string_view key, const BeginOptions& options,
    FunctionRef<Result<std::string>(Attempt&, SqlTransaction&)> fn) {
  // Refused before a claim is taken, on a store that cannot run it.
  if (!KeptInDatabase()) return Store::BeginClaimTransaction(key, 0).status();
  return ExecuteClaimed(*this, key, options, [&](const Claim& claim, auto sent) {
    const auto begin = [&] { return BeginClaimTransaction(key, claim.token); };
    TransactionRunner runner(*this, key, claim.token, begin, fn);
    return RunAttempt(*this, key, options, claim, sent, runner);
  });
}

}  // namespace idem
