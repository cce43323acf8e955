// Store::Execute: the whole lifecycle of one request in one call.

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "extras/lease_keeper.h"
#include "idem/store.h"
#include "util/backoff.h"
#include "util/random.h"

namespace idem {

// An attempt's table reads and writes (Attempt::Read, Put, Delete): what it read, at which
// version, and what it will write, as the WriteSet its Complete carries.
class StagedWrites {
 public:
  explicit StagedWrites(Store& store) : store_(store) {}

  static Status OutsideExecute() {
    return Status::InvalidArgument(
        "Attempt::Read, Put and Delete stage table writes for Execute's Complete: call them "
        "inside Execute's fn (outside it, pass a WriteSet to Store::Complete)");
  }

  // A key read twice gives what the first read gave (or what this attempt put there since):
  // fn decides on one version of each key, the one its writes are conditional on.
  Result<TableValue> Read(std::string_view table, std::string_view key) {
    auto it = keys_.find(Name(table, key));
    if (it == keys_.end()) {
      IDEM_ASSIGN_OR_RETURN(TableValue value, store_.GetValue(table, key));
      it = keys_.emplace(Name(table, key), Key{}).first;
      it->second.read = true;
      it->second.value = std::move(value);
    } else if (!it->second.read) {
      // Put blind before this read: what it put, at the version nobody read (0).
      return TableValue{.value = it->second.value.value, .version = 0};
    }
    return it->second.value;
  }

  void Stage(std::string_view table, std::string_view key, std::optional<std::string> value) {
    const auto it = keys_.try_emplace(Name(table, key)).first;
    it->second.written = true;
    it->second.value.value = std::move(value);
  }

  // The writes staged, each conditional on the version read when the key was read first.
  WriteSet writes() const {
    WriteSet writes;
    for (const auto& [name, entry] : keys_) {
      if (!entry.written) continue;
      const std::optional<uint64_t> if_version =
          entry.read ? std::optional(entry.value.version) : std::nullopt;
      if (entry.value.value) {
        writes.Put(name.first, name.second, *entry.value.value, if_version);
      } else {
        writes.Delete(name.first, name.second, if_version);
      }
    }
    return writes;
  }

  void Clear() { keys_.clear(); }

 private:
  struct Key {
    bool read = false;     // read from the store: `value.version` is the version read
    bool written = false;  // staged: `value.value` is what to write (nullopt: delete)
    TableValue value;
  };

  using KeyName = std::pair<std::string, std::string>;  // table, key
  static KeyName Name(std::string_view table, std::string_view key) {
    return {std::string(table), std::string(key)};
  }

  Store& store_;
  std::map<KeyName, Key> keys_;
};

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

// Runs fn for an acquired claim, whose Begin was sent at `sent`, and records its outcome: its
// result with its staged table writes, run again on fresh reads while they conflict.
Result<Execution> RunAttempt(Store& store, std::string_view key, const BeginOptions& options,
                             const Claim& claim, std::chrono::steady_clock::time_point sent,
                             FunctionRef<Result<std::string>(Attempt&)> fn) {
  const milliseconds lease = store.options().LeaseOrDefault(options.lease);
  LeaseStatus lease_status(sent + lease);
  StagedWrites staged(store);
  Attempt attempt{.token = claim.token,
                  .took_over = claim.took_over,
                  .checkpoint = claim.record.checkpoint,
                  .attempts = claim.record.attempts,
                  .store = &store,
                  .key = key,
                  .lease = &lease_status,
                  .staged = &staged};
  util::Backoff conflict_pause(kFirstConflictPause, kLongestConflictPause);
  for (int reruns = 0;; ++reruns) {
    staged.Clear();
    std::optional<Result<std::string>> outcome;
    std::exception_ptr error;
    {
      LeaseKeeper::Guard renewal =
          LeaseKeeper::Instance().Keep(&store, key, claim.token, lease, &lease_status);
      try {
        outcome.emplace(fn(attempt));
      } catch (...) {
        error = std::current_exception();
      }
    }
    if (error) {
      // Recorded so that the next caller retries at once instead of waiting for the lease; the
      // caller's exception matters more than a failure to record it.
      static_cast<void>(store.Fail(key, claim.token, ExceptionText(error), Failure::kRetryable));
      std::rethrow_exception(error);
    }
    if (!outcome->ok()) {
      const Status& status = outcome->status();
      const Failure kind =
          status.code() == Status::Code::kFailed ? Failure::kTerminal : Failure::kRetryable;
      IDEM_RETURN_IF_ERROR(store.Fail(key, claim.token, status.message(), kind));
      return status;
    }
    const Status completed = store.Complete(key, claim.token, outcome->value(), staged.writes());
    if (completed.code() == Status::Code::kConflict) {
      if (reruns < store.options().conflict_retries) {
        std::this_thread::sleep_for(Jittered(conflict_pause.Next()));
        continue;
      }
      // Recorded, so that the next caller runs it again at once.
      IDEM_RETURN_IF_ERROR(store.Fail(key, claim.token, completed.message(), Failure::kRetryable));
      return Status::Conflict(fmt::format("{} (fn ran {} times)", completed.message(), reruns + 1));
    }
    IDEM_RETURN_IF_ERROR(completed);
    return Execution{.result = std::move(outcome->value()),
                     .replayed = false,
                     .attempts = claim.record.attempts};
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
  const auto give_up_at = std::chrono::steady_clock::now() + this->options().execute_wait;
  util::Backoff poll(kFirstPoll, kLongestPoll);
  for (;;) {
    // An acquired lease runs from the owner's answer, which comes after this.
    const auto sent = std::chrono::steady_clock::now();
    IDEM_ASSIGN_OR_RETURN(Claim claim, Begin(key, options));
    switch (claim.outcome) {
      case Outcome::kAcquired:
        return RunAttempt(*this, key, options, claim, sent, fn);
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
    const auto now = std::chrono::steady_clock::now();
    if (now >= give_up_at) {
      return Status::InProgress(
          fmt::format("another attempt still holds the key after waiting {} ms",
                      this->options().execute_wait.count()));
    }
    const auto left = std::chrono::ceil<milliseconds>(give_up_at - now);
    std::this_thread::sleep_for(std::min({poll.Next(), claim.retry_after, left}));
  }
}

}  // namespace idem
