#include "backend/engine_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "util/escape.h"
#include "util/process.h"
#include "util/time.h"

namespace idem::backend {

Status EngineBackend::CheckSize(std::string_view what, std::size_t size, std::size_t limit) {
  if (size <= limit) return Status::OK();
  return Status::InvalidArgument(fmt::format("{} is {} bytes; the limit is {}", what, size, limit));
}

namespace {

// What a transition's payload is, for error messages.
std::string_view PayloadName(engine::TransitionKind kind) {
  switch (kind) {
    case engine::TransitionKind::kComplete:
      return "result";
    case engine::TransitionKind::kFail:
      return "error";
    case engine::TransitionKind::kExtend:
      return "extend payload";  // always empty
    case engine::TransitionKind::kSaveCheckpoint:
      return "checkpoint";
  }
  return "payload";
}

// An application table's name: what a column family's name and a command-line argument carry
// without quoting.
constexpr std::size_t kMaxTableNameSize = 64;

}  // namespace

Status EngineBackend::CheckTableName(std::string_view table) {
  const bool allowed = std::all_of(table.begin(), table.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
  if (!table.empty() && table.size() <= kMaxTableNameSize && allowed) return Status::OK();
  return Status::InvalidArgument(
      fmt::format("table name {} is not one: it must be 1 to {} letters, digits, '_', '-' or '.'",
                  EscapeKey(table), kMaxTableNameSize));
}

EngineBackend::EngineBackend(std::unique_ptr<storage::Storage> storage, const Options& options,
                             std::unique_ptr<StallWatch> stall_watch,
                             std::unique_ptr<DiskQuota> disk_quota, BackupWriter write_backup)
    : storage_(std::move(storage)),
      options_(options),
      created_(options_.clock ? options_.clock->Now() : std::chrono::system_clock::now()),
      stall_watch_(std::move(stall_watch)),
      disk_quota_(std::move(disk_quota)),
      write_backup_(std::move(write_backup)),
      live_counts_(options_.read_only ? nullptr : LiveRecordCounts::Start(*storage_)),
      saved_([this] {
        // Monitoring figures: when the saved ones cannot be read at all (an I/O error), this
        // owner starts from zeros rather than not at all.
        Result<storage::KeptCounters> saved =
            options_.read_only ? storage::KeptCounters{} : storage_->LoadCounters();
        return saved.ok() ? *saved : storage::KeptCounters{};
      }()),
      last_saved_(saved_) {
  if (!options_.read_only) housekeeping_ = std::thread([this] { Housekeeping(); });
}

EngineBackend::~EngineBackend() {
  {
    util::MutexLock lock(mu_);
    stopping_ = true;
  }
  stop_.NotifyAll();
  if (live_counts_) live_counts_->Stop();
  if (housekeeping_.joinable()) housekeeping_.join();
  // The last counts, for the next owner: the counters, then the record counts (last: valid while
  // nothing is written after them).
  if (!options_.read_only) SaveCounters();
  if (live_counts_) live_counts_->Keep();
}

void EngineBackend::Housekeeping() {
  using Steady = std::chrono::steady_clock;
  const std::chrono::milliseconds purge_interval = options_.auto_purge_interval;
  const bool purges = purge_interval > std::chrono::milliseconds(0);
  Steady::time_point next_purge = Steady::now() + purge_interval;
  Steady::time_point next_save = Steady::now() + kCountersSaveInterval;
  const auto save_when_due = [&] {
    if (Steady::now() < next_save) return;
    SaveCounters();
    next_save = Steady::now() + kCountersSaveInterval;
  };
  // First the records the store held when this owner took it, the counters kept meanwhile (the
  // first purge waits for it: at 10M records, 20 s of one core).
  if (live_counts_) live_counts_->CountStored(save_when_due);
  // Then every table file once (Storage::VerifyNewFiles; a Purge, Forget or Import meanwhile
  // waits for it or does it), the new ones each round, and the one verified longest ago again
  // when it is due. Errors are the damage, which those calls report.
  const auto verify = [&] {
    static_cast<void>(storage_->VerifyNewFiles([&] {
      save_when_due();
      util::MutexLock lock(mu_);
      return !stopping_;
    }));
    if (options_.reverify_interval > std::chrono::milliseconds(0)) {
      storage_->ReverifyOneFile(Steady::now() - options_.reverify_interval);
    }
  };
  verify();
  Steady::time_point next_verify = Steady::now() + kVerifyInterval;
  util::MutexLock lock(mu_);
  for (;;) {
    Steady::time_point next = std::min(next_save, next_verify);
    if (purges) next = std::min(next, next_purge);
    const auto wait = std::max(Steady::duration::zero(), next - Steady::now());
    if (stop_.WaitFor(lock, wait, [this]() IDEM_REQUIRES(mu_) { return stopping_; })) return;
    lock.Unlock();
    const Steady::time_point now = Steady::now();
    if (now >= next_save) {
      SaveCounters();
      next_save = now + kCountersSaveInterval;
    }
    if (now >= next_verify) {
      verify();
      next_verify = Steady::now() + kVerifyInterval;
    }
    if (purges && now >= next_purge) {
      // A failed background purge is retried at the next interval; a caller's own Purge
      // reports the error.
      static_cast<void>(Purge(PurgeOptions{}));
      next_purge = Steady::now() + purge_interval;
    }
    lock.Lock();
  }
}

Status EngineBackend::CheckWritable() const {
  if (options_.read_only) return Status::InvalidArgument("the store was opened read-only");
  return Status::OK();
}

Status EngineBackend::Writable() {
  IDEM_RETURN_IF_ERROR(CheckWritable());
  if (disk_quota_ && disk_quota_->Exceeded()) return disk_quota_->Refusal();
  return storage_->Writable();
}

Status EngineBackend::CheckFilesUndamaged() {
  return CountedError(storage_->VerifyNewFiles([] { return true; }));
}

Status EngineBackend::CheckKey(std::string_view key) const {
  if (key.empty()) return Status::InvalidArgument("key is empty");
  return CheckSize("key", key.size(), options_.max_key_size);
}

Result<engine::ClaimFacts> EngineBackend::GatherFacts(const Record* read, TimePoint now) {
  engine::ClaimFacts facts;
  // Graces matter only to a claim whose lease ran out, and are looked for only then (unless
  // none can be in force): a live lease that runs out before the key is locked asks for them.
  facts.graces_gathered = options_.renewal_grace.count() == 0;
  if (read == nullptr || read->state != State::kPending) return facts;
  // A lease that ran out is kept for its holder during a renewal grace (the owner stalled, or
  // has just taken over; the database server restarted or failed over).
  if (read->timed_out && !facts.graces_gathered) {
    if (stall_watch_) std::ranges::copy(stall_watch_->Graces(), std::back_inserter(facts.graces));
    IDEM_ASSIGN_OR_RETURN(const engine::RenewalGrace outage,
                          storage_->OutageGrace(options_.renewal_grace));
    facts.graces.push_back(outage);
    facts.graces_gathered = true;
  }
  // While the claim is kept for its holder, a holder proven dead gives it up at once.
  if (options_.take_over_dead_holders && engine::KeptFor(*read, facts.graces, now)) {
    facts.judged = read->holder;
    facts.holder_is_dead = util::HolderIsDead(read->holder);
  }
  return facts;
}

Result<engine::BeginRequest> EngineBackend::CheckedBeginRequest(const engine::BeginCall& call,
                                                                const Holder& holder) const {
  IDEM_RETURN_IF_ERROR(CheckWritable());
  IDEM_RETURN_IF_ERROR(CheckKey(call.key));
  IDEM_RETURN_IF_ERROR(CheckSize("type", call.type.size(), options_.max_label_size));
  IDEM_RETURN_IF_ERROR(CheckSize("fingerprint", call.fingerprint.size(), options_.max_label_size));
  engine::BeginRequest request{.key = call.key,
                               .type = call.type,
                               .fingerprint = call.fingerprint,
                               .lease = call.lease,
                               .retention = call.retention,
                               .holder = holder};
  request.holder.request_id = call.request_id;
  return request;
}

Result<Claim> EngineBackend::Begin(const engine::BeginCall& call, const Holder& holder) {
  const LatencyRecorder::Clock::time_point started = LatencyRecorder::Clock::now();
  const std::size_t grouped_before = storage_->GroupedWrites();
  Result<Claim> claim = DecideBegin(call, holder);
  if (claim.ok()) TimeCall(LatencyRow(&Latencies::begin), started, grouped_before);
  return claim;
}

Result<Claim> EngineBackend::DecideBegin(const engine::BeginCall& call, const Holder& holder) {
  IDEM_ASSIGN_OR_RETURN(const engine::BeginRequest request, CheckedBeginRequest(call, holder));
  // A replay, a terminal failure and a mismatch write nothing, and only Forget or expiry can
  // change them: answer them from a plain read, without the key's lock. (A storage on a server
  // claims a fresh key in that same step.) The read is used where it lies: a replay's record
  // is moved only into its answer.
  Result<storage::Storage::ReadResult> first =
      storage_->ReadOrCreate(call.key, request, call.durability);
  if (!first.ok()) return CountedError(first.status());
  storage::Storage::ReadResult& seen = *first;
  if (seen.created) {
    counters_.Count(*seen.created);
    return std::move(*seen.created);
  }
  const std::optional<uint64_t> absent_since =
      seen.record ? std::nullopt : std::optional<uint64_t>(seen.write_version);
  engine::MakeVisible(seen.record, seen.now);
  if (std::optional<Claim> settled = engine::SettledAnswer(seen.record, request)) {
    counters_.Count(*settled);
    return std::move(*settled);
  }
  // What the decision needs to know besides the record is found out now, before the key is
  // locked: no /proc read or server query waits under the lock.
  IDEM_ASSIGN_OR_RETURN(engine::ClaimFacts facts,
                        GatherFacts(seen.record ? &*seen.record : nullptr, seen.now));
  // Measured (now and then) before the key is locked: never a directory read under the lock.
  const bool over_quota = disk_quota_ && disk_quota_->Exceeded();
  engine::BeginDecision decision;
  TimePoint decided_at;
  const auto decide = [&](std::optional<Record>& stored, TimePoint now,
                          engine::NextToken next_token) -> const Record* {
    decided_at = now;
    decision = engine::DecideBegin(std::move(stored), request, now, next_token, facts);
    // A claim that would be written is refused; a resent Begin gets its own claim back.
    if (over_quota && decision.write && decision.claim.outcome == Outcome::kAcquired) {
      decision.status = disk_quota_->Refusal();
      counters_.Add<&Counters::quota_refusals>(1);
      return nullptr;
    }
    return decision.write ? &decision.claim.record : nullptr;
  };
  // Decided once, on the record read (a storage that writes by compare-and-set), or on the record
  // read again under the key's lock (the facts were gathered for the record read first).
  IDEM_RETURN_IF_ERROR(
      CountedError(storage_->DecideOnRead(call.key, seen, decide, call.durability, absent_since)));
  if (decision.needs_graces) {
    // The lease ran out between the read and the lock, or the row changed before the write (its
    // new holder's lease ran out): decide once more, with the graces. (Should it run out again
    // for another holder, that claim's kInProgress answer stands.)
    IDEM_ASSIGN_OR_RETURN(facts, GatherFacts(&decision.claim.record, decided_at));
    IDEM_RETURN_IF_ERROR(
        CountedError(storage_->Update(call.key, decide, call.durability, std::nullopt)));
  }
  IDEM_RETURN_IF_ERROR(decision.status);
  counters_.Count(decision.claim);
  return std::move(decision.claim);
}

Status EngineBackend::CheckWrites(const engine::TransitionCall& call) const {
  if (call.request.kind != engine::TransitionKind::kComplete) {
    return Status::InvalidArgument("table writes are applied only with a Complete");
  }
  for (const WriteSet::Write& write : call.writes->writes()) {
    IDEM_RETURN_IF_ERROR(CheckTableWrite(write.table, write.key, write.value));
  }
  for (const WriteSet::Requirement& required : call.writes->requirements()) {
    IDEM_RETURN_IF_ERROR(CheckTableWrite(required.table, required.key, std::nullopt));
  }
  return Status::OK();
}

Status EngineBackend::CheckTableWrite(std::string_view table, std::string_view key,
                                      const std::optional<std::string>& value) const {
  IDEM_RETURN_IF_ERROR(CheckTableName(table));
  if (key.empty()) {
    return Status::InvalidArgument(fmt::format("a write to table {} has an empty key", table));
  }
  IDEM_RETURN_IF_ERROR(CheckSize(fmt::format("key of a write to table {}", table), key.size(),
                                 options_.max_key_size));
  if (!value) return Status::OK();
  return CheckSize(fmt::format("value for table {}", table), value->size(),
                   options_.max_result_size);
}

Status EngineBackend::Transition(const engine::TransitionCall& call) {
  const LatencyRecorder::Clock::time_point started = LatencyRecorder::Clock::now();
  const std::size_t grouped_before = storage_->GroupedWrites();
  const Status status = ApplyTransition(call);
  if (status.ok() && call.request.kind == engine::TransitionKind::kComplete) {
    TimeCall(LatencyRow(&Latencies::complete), started, grouped_before);
  }
  if (EndsReservation(call.request.kind, status)) {
    reservations_.Release(call.key, call.request.token);
  }
  return status;
}

Result<bool> EngineBackend::Reserve(const engine::ReserveCall& call) {
  IDEM_RETURN_IF_ERROR(CheckWritable());
  IDEM_RETURN_IF_ERROR(CheckKey(call.claim_key));
  for (const auto& [table, key] : call.keys) {
    IDEM_RETURN_IF_ERROR(CheckTableName(table));
    IDEM_RETURN_IF_ERROR(CheckKey(key));
  }
  if (call.hold <= std::chrono::milliseconds::zero() ||
      call.wait < std::chrono::milliseconds::zero()) {
    return Status::InvalidArgument(
        fmt::format("a reservation's hold ({} ms) must be positive and its wait ({} ms) not "
                    "negative",
                    call.hold.count(), call.wait.count()));
  }
  return reservations_.Reserve(call);
}

Status EngineBackend::ApplyTransition(const engine::TransitionCall& call) {
  IDEM_RETURN_IF_ERROR(CheckWritable());
  IDEM_RETURN_IF_ERROR(CheckKey(call.key));
  IDEM_RETURN_IF_ERROR(CheckSize(PayloadName(call.request.kind), call.request.payload.size(),
                                 options_.max_result_size));
  const bool with_writes = call.writes != nullptr && !call.writes->empty();
  if (with_writes) {
    IDEM_RETURN_IF_ERROR(CheckWrites(call));
    IDEM_RETURN_IF_ERROR(reservations_.CheckCommit(call.key, call.request.token, *call.writes));
  } else {
    // The usual case, in one step where the storage can; otherwise, or when the transition does
    // not apply, the engine decides on the record read and says why.
    const Result<bool> applied =
        storage_->TransitionIfCurrent(call.key, call.request, call.durability);
    if (!applied.ok()) return CountedError(applied.status());
    if (*applied) {
      counters_.Count(call.request);
      return Status::OK();
    }
  }
  engine::TransitionDecision decision;
  const auto decide = [&](std::optional<Record>& stored, TimePoint now,
                          engine::NextToken) -> const Record* {
    decision = engine::DecideTransition(std::move(stored), call.request, now);
    return decision.write ? &*decision.write : nullptr;
  };
  // Table writes ride on the record's write: the engine decides, and they apply only with it.
  IDEM_RETURN_IF_ERROR(CountedError(
      with_writes ? storage_->UpdateWithWrites(call.key, decide, *call.writes, call.durability)
                  : storage_->Update(call.key, decide, call.durability,
                                     /*absent_since=*/std::nullopt)));
  if (decision.status.code() == Status::Code::kLeaseLost) CountLeaseLost();
  // A repeated final call is answered OK without a write: counted once, when written.
  if (decision.status.ok() && decision.write) counters_.Count(call.request);
  return decision.status;
}

Result<std::optional<Record>> EngineBackend::Get(std::string_view key) {
  IDEM_RETURN_IF_ERROR(CheckKey(key));
  Result<storage::Storage::ReadResult> stored = storage_->Read(key);
  if (!stored.ok()) return CountedError(stored.status());
  engine::MakeVisible(stored->record, stored->now);
  return std::move(stored->record);
}

Status EngineBackend::Forget(std::string_view key, Durability durability,
                             const engine::AsRead* as_read) {
  IDEM_RETURN_IF_ERROR(CheckWritable());
  IDEM_RETURN_IF_ERROR(CheckKey(key));
  IDEM_RETURN_IF_ERROR(CheckFilesUndamaged());
  // A record that cannot be decoded (damaged, or of a newer format) is forgotten too: that is how
  // an operator clears it.
  const Result<bool> removed = storage_->Forget(key, durability, as_read);
  if (!removed.ok()) return CountedError(removed.status());
  if (!*removed) {
    return Status::NotFound(fmt::format("no record for key {}", EscapeKey(key)));
  }
  if (disk_quota_) disk_quota_->MeasureSoon();
  return Status::OK();
}

Result<TableValue> EngineBackend::GetValue(std::string_view table, std::string_view key) {
  IDEM_RETURN_IF_ERROR(CheckTableName(table));
  IDEM_RETURN_IF_ERROR(CheckKey(key));
  return storage_->ReadValue(table, key);
}

Result<std::vector<std::string>> EngineBackend::ListTables() { return storage_->ListTables(); }

Result<uint64_t> EngineBackend::Purge(const PurgeOptions& options) {
  if (!options.dry_run) {
    IDEM_RETURN_IF_ERROR(CheckWritable());
    IDEM_RETURN_IF_ERROR(CheckFilesUndamaged());
  }
  const Result<uint64_t> purged = storage_->Purge(options);
  if (!purged.ok()) return CountedError(purged.status());
  const uint64_t count = *purged;
  if (!options.dry_run) counters_.Add<&Counters::purged>(count);
  if (disk_quota_ && count > 0) disk_quota_->MeasureSoon();
  return count;
}

}  // namespace idem::backend
