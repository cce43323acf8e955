// EngineBackend: the engine applied to a storage this process reaches itself: the RocksDB files
// of a store directory (run by its owner, and by read-only handles, which never write) or a
// PostgreSQL server (run by every process). It checks every argument against its own Options
// (the owner's limits apply to every process sharing a store directory). Thread-safe.

#ifndef IDEM_BACKEND_ENGINE_BACKEND_H_
#define IDEM_BACKEND_ENGINE_BACKEND_H_

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <thread>

#include "backend/disk_quota.h"
#include "backend/key_reservations.h"
#include "backend/latency_recorder.h"
#include "backend/live_record_counts.h"
#include "backend/read_views.h"
#include "backend/stall_watch.h"
#include "engine/backend.h"
#include "storage/storage.h"
#include "util/mutex.h"

namespace idem::backend {

class EngineBackend final : public engine::Backend {
 public:
  // Uses options.read_only, take_over_dead_holders, auto_purge_interval and the size limits;
  // the time is the storage's. `stall_watch` (null: none) gives the renewal graces: a writable
  // backend on the owner's RocksDB storage is the store's new owner and passes one, which opens
  // a grace for the claims written before it (see StallWatch). `disk_quota` (null: none) refuses
  // new claims while the database is over Options::max_disk_bytes. `write_backup` (null: the
  // storage's own Checkpoint into `destination`) writes Backup's copy as a store of its kind
  // lays one out (core/store_directory.h, WriteBackup).
  using BackupWriter =
      std::function<Status(storage::Storage& storage, const std::string& destination)>;
  EngineBackend(std::unique_ptr<storage::Storage> storage, const Options& options,
                std::unique_ptr<StallWatch> stall_watch,
                std::unique_ptr<DiskQuota> disk_quota = nullptr,
                BackupWriter write_backup = nullptr);
  ~EngineBackend() override;

  Result<Claim> Begin(const engine::BeginCall& call, const Holder& holder) override;
  // Refuses a commit that writes a key reserved for another claim (kConflict); a Complete that
  // commits, and a Fail, end the claim's reservation.
  Status Transition(const engine::TransitionCall& call) override;
  Result<bool> Reserve(const engine::ReserveCall& call) override;
  Status Unreserve(std::string_view claim_key, uint64_t token) override {
    reservations_.Release(claim_key, token);
    return Status::OK();
  }
  Result<std::optional<Record>> Get(std::string_view key) override;
  Status Forget(std::string_view key, Durability durability,
                const engine::AsRead* as_read) override;
  Result<engine::ScanPage> Scan(const ScanOptions& options, std::size_t limit,
                                uint64_t view = kLatest) override;
  Result<TableValue> GetValue(std::string_view table, std::string_view key) override;
  Result<engine::TablePage> ScanTable(std::string_view table, const ScanOptions& options,
                                      std::size_t limit, uint64_t view = kLatest) override;
  // The storage's views (storage::Storage::OpenView), kept here by id until closed.
  Result<uint64_t> OpenView() override { return views_.Open(); }
  Status CloseView(uint64_t view) override {
    views_.Close(view);
    return Status::OK();
  }
  Result<std::vector<std::string>> ListTables() override;
  // Checks every value first, writes those whose key was never written, buffered, and syncs once.
  Result<std::vector<ImportOutcome>> ImportValues(
      std::string_view table, std::span<const std::pair<std::string, TableValue>> values) override;
  Result<uint64_t> Purge(const PurgeOptions& options) override;
  Result<Counters> GetCounters() override;
  // A consistent copy into `destination`, by the backup writer given at construction.
  Status Backup(const std::string& destination) override;
  // Checks every record against this backend's limits, reserves tokens above theirs, then writes
  // each whose key is free, buffered, and syncs once.
  Result<std::vector<ImportOutcome>> Import(std::span<const Record> records) override;
  // Not read-only, under the quota, and the storage's Writable.
  Status Writable() override;
  // Live when writable: this process owns the store, since this backend was made.
  Result<OwnerCounters> GetOwnerCounters() override;
  // Counted when this backend keeps the counts (LiveRecordCounts: it writes a store directory).
  Result<Stats> GetStats() override;
  Result<CheckReport> Check() override { return storage_->Check(); }
  // The storage's (storage.h). A call is counted when it is decided: one whose grouped write
  // then fails is counted as if written. Its latency is measured when the group is written, and
  // only if its write succeeded.
  void StartWriteGroup() override {
    latencies_.StartGroup();
    storage_->StartWriteGroup();
  }
  std::size_t GroupedWrites() const override { return storage_->GroupedWrites(); }
  std::vector<Status> FinishWriteGroup() override {
    std::vector<Status> outcomes = storage_->FinishWriteGroup();
    for (const Status& outcome : outcomes) CountedError(outcome);
    latencies_.Settle(outcomes);
    return outcomes;
  }
  // Counts a call whose token was stale (lease_lost), and a Complete committed, taken at
  // `started` (completes, and its time). Transition counts its own; these are for a commit
  // decided beside the backend: ExecuteInTransaction's on PostgreSQL.
  void CountLeaseLost() { counters_.Add<&Counters::lease_lost>(1); }
  void CountCommittedComplete(LatencyRecorder::Clock::time_point started) {
    counters_.Add<&Counters::completes>(1);
    latencies_.Observe(LatencyRow(&Latencies::complete), started);
  }

 private:
  // The counters, kept in shards so that calls on different cores do not write one cache line:
  // a replay is about a microsecond, and one shared line bounced between the cores at every
  // call cost it measurably from 4 threads (docs/design/speed.md, increment 12). A thread adds
  // to its own shard (threads are spread over them in the order they first count); a snapshot
  // adds the shards up. Relaxed: each counter is exact, the counters are not read as a set.
  class AtomicCounters {
   public:
    // Adds to the counter `field` (a member of Counters), whose row is found at compile time.
    template <uint64_t Counters::*field>
    void Add(uint64_t count) {
      constexpr std::size_t row = [] {
        std::size_t i = 0;
        while (kCounters[i].field != field) ++i;
        return i;
      }();
      ThreadShard().values[row].fetch_add(count, std::memory_order_relaxed);
    }
    void Count(const Claim& claim);
    // A transition written: completes, fails, terminal_fails.
    void Count(const engine::TransitionRequest& request);
    Counters Snapshot() const;

   private:
    static constexpr std::size_t kShards = 16;
    struct alignas(64) Shard {
      std::array<std::atomic<uint64_t>, kCounterCount> values{};
    };
    Shard& ThreadShard();

    std::array<Shard, kShards> shards_{};
  };

  using TimePoint = std::chrono::system_clock::time_point;

  // The counters: the earlier owners' and this one's, with the quota's crossings and the stalls;
  // and the latency histograms, the earlier owners' and this one's.
  storage::KeptCounters CountersNow() const;
  // Times a call of histogram `row` taken at `started`, answered now or, when its write went into
  // the thread's write group (the group had taken `grouped_before` writes before it), once the
  // group is written.
  void TimeCall(std::size_t row, LatencyRecorder::Clock::time_point started,
                std::size_t grouped_before);
  // Begin's work, which Begin times.
  Result<Claim> DecideBegin(const engine::BeginCall& call, const Holder& holder);
  // Counts a storage's error by its cause (io_errors, corruption_errors, timeout_errors,
  // busy_errors, unavailable_errors); returns it.
  const Status& CountedError(const Status& status);

  // kInvalidArgument naming `what` when size is over limit.
  static Status CheckSize(std::string_view what, std::size_t size, std::size_t limit);
  // kInvalidArgument unless `table` is an application table's name.
  static Status CheckTableName(std::string_view table);
  Status CheckWritable() const;
  // Before a call that writes what an operator asks (Purge, Forget, Import): every table file the
  // store holds verified, kCorruption naming a damaged one (docs/design/integrity-plan.md).
  Status CheckFilesUndamaged();
  // The transition, without ending the claim's reservation.
  Status ApplyTransition(const engine::TransitionCall& call);
  Status CheckKey(std::string_view key) const;
  // kInvalidArgument naming the first bad write of a transition's table writes.
  Status CheckWrites(const engine::TransitionCall& call) const;
  // kInvalidArgument for a bad table name, an empty or oversized key or an oversized value
  // (nullopt: a deletion), for a Complete's writes and an import alike.
  Status CheckTableWrite(std::string_view table, std::string_view key,
                         const std::optional<std::string>& value) const;
  // kInvalidArgument naming the record when Import may not write it as it is.
  Status CheckImported(const Record& record) const;
  // Import's write of one record, checked (CheckImported), into the storage; what was done.
  Result<ImportOutcome> ImportOne(const Record& record);
  // What Begin's decision needs to know about the record `read` (visible, read at `now`; null:
  // none) besides the record: for a pending claim, the renewal graces when its lease ran out,
  // and, while it is kept for its holder, whether that holder is dead. Costs I/O (/proc, the
  // database server): called before the key is locked.
  Result<engine::ClaimFacts> GatherFacts(const Record* read, TimePoint now);
  // Begin's call checked (a writable store, the key's and labels' sizes), as the engine's
  // request.
  Result<engine::BeginRequest> CheckedBeginRequest(const engine::BeginCall& call,
                                                   const Holder& holder) const;
  // The background thread of a writable backend: first counts the records the store holds
  // (LiveRecordCounts::CountStored) and verifies its files, then purges every
  // Options::auto_purge_interval (none when 0) and verifies new and due files every
  // kVerifyInterval; saves the counters every kCountersSaveInterval when they changed, all along.
  void Housekeeping();
  // Keeps the counters in the storage for the next owner (Storage::SaveCounters), when they
  // changed since last kept. Called by the housekeeping thread, then by the destructor.
  void SaveCounters();
  // At most this much of the counts is lost when the owner is killed (docs/operations.md).
  static constexpr std::chrono::seconds kCountersSaveInterval{5};
  static constexpr std::chrono::seconds kVerifyInterval{2};

  // Constant after construction.
  const std::unique_ptr<storage::Storage> storage_;
  const Options options_;
  // When this process became the owner (a writable backend is made once the lock is taken).
  const TimePoint created_;

  // Null when read-only, or when the storage has no owner whose stalls would matter.
  const std::unique_ptr<StallWatch> stall_watch_;
  // Null without a quota.
  const std::unique_ptr<DiskQuota> disk_quota_;
  const BackupWriter write_backup_;

  AtomicCounters counters_;
  LatencyRecorder latencies_;
  KeyReservations reservations_;
  // After storage_: closed before it.
  ReadViews views_{*storage_};
  // Null unless this backend writes a store directory (LiveRecordCounts::Start). After storage_.
  const std::unique_ptr<LiveRecordCounts> live_counts_;
  // The counts of the store's earlier owners (Storage::LoadCounters), added to this one's.
  const storage::KeptCounters saved_;
  storage::KeptCounters last_saved_;  // what SaveCounters last kept; its caller's alone

  util::Mutex mu_;
  util::CondVar stop_;
  bool stopping_ IDEM_GUARDED_BY(mu_) = false;
  std::thread housekeeping_;
};

}  // namespace idem::backend

#endif  // IDEM_BACKEND_ENGINE_BACKEND_H_
