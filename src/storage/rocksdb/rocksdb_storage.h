// Storage on RocksDB. Its column families are in docs/format.md, "Column families": the records
// (key -> record_codec.h's encoding), the expiry index the purge walks, the meta values (format
// version, token ceiling and lead, filter horizon, ...) and one family per application table.
// Only this process writes the database (RocksDB's LOCK file guarantees it), so per-key
// atomicity comes from striped in-process mutexes around Get + WriteBatch rather than a
// TransactionDB (docs/design/speed.md, "Settings measured", N1).

#ifndef IDEM_STORAGE_ROCKSDB_ROCKSDB_STORAGE_H_
#define IDEM_STORAGE_ROCKSDB_ROCKSDB_STORAGE_H_

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "storage/rocksdb/fs/log_tail.h"
#include "storage/rocksdb/rocksdb_config.h"
#include "storage/rocksdb/write_stops.h"
#include "storage/storage.h"
#include "util/mutex.h"

namespace rocksdb {
class ColumnFamilyHandle;
class DB;
class Env;
class FileSystem;
class Iterator;
class Status;
class WriteBatch;
struct ColumnFamilyDescriptor;
struct ColumnFamilyOptions;
struct DBOptions;
struct WriteOptions;
}  // namespace rocksdb

namespace idem::storage {

struct DiskErrorFlags;    // log_failure_watch.h
class InfoLog;            // info_log.h
class PeriodicSync;       // periodic_sync.h
class TableFileVerifier;  // table_file_verifier.h

class RocksDbStorage final : public Storage {
 public:
  static Result<std::unique_ptr<RocksDbStorage>> Open(const RocksDbConfig& config);
  ~RocksDbStorage() override;

  // What the directory `path` holds, found without writing anything and without opening a
  // RocksDB instance (which would write its info log, LOCK and OPTIONS files).
  struct Contents {
    enum class Kind {
      kNothing,  // no such directory, or an empty one
      kIdem,     // a RocksDB database with idem's column families
      kOther,    // anything else (a symbolic link, a file, other files, another database)
    };
    Kind kind = Kind::kNothing;
    std::string detail;  // for kOther: what it holds, for a message ("a RocksDB database ...")
  };
  // A database is idem's when its newest OPTIONS file (RocksDB rewrites it at every open, and
  // renames it into place whole) names the column families by_expiry and meta. The MANIFEST is
  // not read: a damaged one is reported by Open, naming it. Errors: kIOError when the directory
  // cannot be read.
  static Result<Contents> Inspect(const std::string& path);

  // Deletes what a failed open leaves in the database `path`: temporary files (*.dbtmp, a
  // CURRENT or OPTIONS file being written) and MANIFEST files that CURRENT does not name (one
  // written before CURRENT could be switched to it). On a full disk each attempt leaves a few
  // pages of them, which would take the space an operator frees before the next attempt could.
  // Only while no process has the database open (the caller holds the store's owner lock).
  static void DeleteLeftoversOfAFailedOpen(const std::string& path);

  // Puts a database built at `staging` (and closed) in place at `destination`, renaming it and
  // syncing their parent directory, through the file system `config` names, so that a power cut
  // leaves either no database at `destination` or the whole one.
  static Status Install(const RocksDbConfig& config, const std::string& staging,
                        const std::string& destination);

  Status Update(std::string_view key, Decide decide, Durability durability,
                std::optional<uint64_t> absent_since) override;
  Result<ReadResult> Read(std::string_view key) override;
  // Application tables: a column family each, "app.<name>" (docs/format.md), made by the first
  // commit that writes to it. Values are read without locks; a commit locks its keys (after
  // the record's) and checks their versions under the locks.
  Status UpdateWithWrites(std::string_view key, Decide decide, const WriteSet& writes,
                          Durability durability) override;
  Result<TableValue> ReadValue(std::string_view table, std::string_view key) override;
  Result<std::vector<std::string>> ListTables() override;
  // Excludes every commit with table writes meanwhile (wide_commit_mu_): imports are rare.
  Result<std::vector<ImportOutcome>> ImportValues(
      std::string_view table, std::span<const std::pair<std::string, TableValue>> values) override;
  Status ScanValues(std::string_view table, const ScanOptions& options,
                    FunctionRef<bool(std::string_view key, TableValue&& value)> visit,
                    ReadView* view = nullptr) override;
  Result<bool> Remove(std::string_view key, Durability durability,
                      const engine::AsRead* as_read) override;
  Status Scan(const ScanOptions& options, FunctionRef<bool(Record&& record, TimePoint now)> visit,
              ReadView* view = nullptr) override;
  // A RocksDB snapshot and the time then: free to take; compaction keeps what it sees meanwhile.
  Result<std::unique_ptr<ReadView>> OpenView() override;
  Result<uint64_t> Purge(const PurgeOptions& options) override;
  // RocksDB's Checkpoint: the memtables flushed first (so that the copy needs no log replay, but
  // for what was written meanwhile), table files hard-linked when `destination` is on the same
  // file system and copied otherwise (each 0600, through this storage's file system), then the
  // copy and its directory synced.
  Status Checkpoint(const std::string& destination) override;
  Status ReserveTokensAbove(uint64_t token) override;
  Status Sync() override;
  Status Writable() override;  // what ResumeAfterDiskError says while writes are stopped
  // Before any write, as the owner's backend is made: records are written only after it returns.
  Result<std::unique_ptr<ReadView>> WatchWrites(WriteWatcher* watcher) override;
  Result<CheckReport> Check() override;                       // rocksdb_storage_check.cc
  Status VerifyNewFiles(FunctionRef<bool()> go_on) override;  // TableFileVerifier's
  bool ReverifyOneFile(std::chrono::steady_clock::time_point due) override;
  std::optional<EngineHealth> ReadEngineHealth() override;  // RocksDB's properties
  Result<KeptCounters> LoadCounters() override;  // meta owner_counters, owner_latency (layout.h)
  Status SaveCounters(const KeptCounters& counters) override;
  Status KeepRecordCounts(std::string_view counts) override;  // meta record_counts (layout.h)
  std::optional<std::string> TakeKeptRecordCounts() override;
  // Write groups hold their keys' stripes; a group takes a stripe only by try_lock and writes
  // what it holds before waiting for one, so it never waits while holding a stripe (no cycle
  // with Update, Remove or a purge's DeleteDue).
  void StartWriteGroup() override;
  std::size_t GroupedWrites() const override;
  std::vector<Status> FinishWriteGroup() override;

  Status Flush();           // writes the memtables to table files and waits (tests)
  Status CompactRecords();  // compacts the records' files, filtering expired ones (tests)
  // Compacts every column family, so that no compaction starts on its own until a few more
  // flushes (tests that copy the files).
  Status CompactAll();
  // Moves the filter horizon (filter_horizon_) to a day before `now` if older (open, each purge).
  Status AdvanceFilterHorizon(TimePoint now);

  // Persisted in the meta column family and the format file; never change these values. A store
  // is at version 1 until its first application table raises it to 2, which a release before
  // tables refuses with kNewerVersion (docs/format.md, "Compatibility rules").
  static constexpr uint32_t kFirstFormatVersion = 1;
  static constexpr uint32_t kTablesFormatVersion = 2;
  // The newest version this release reads and writes.
  static constexpr uint32_t kStoreFormatVersion = kTablesFormatVersion;
  // Tokens are reserved in blocks, the ceiling persisted (fsynced) once per block, so that a
  // token is never handed out twice (rocksdb_storage_tokens.cc, docs/format.md).
  static constexpr uint64_t kTokenBlock = 1 << 16;
  // The block an open reserves: small, so that a reopened store starts near the clock.
  static constexpr uint64_t kFirstTokenBlock = 1 << 10;

 private:
  RocksDbStorage() = default;
  Status Initialize(const RocksDbConfig& config);
  // The steps of Initialize before RocksDB reads the files: the manifest mark is checked and the
  // logs' tails are cut (a power cut's refused by a read-only open). Says what was cut.
  Result<LogTailCuts> PrepareFilesForOpen(rocksdb::FileSystem& file_system, bool read_only);
  // The info log of the store (InfoLog), its directory made first when the store may be created.
  std::shared_ptr<InfoLog> StartInfoLog(rocksdb::FileSystem& file_system,
                                        const RocksDbConfig& config) const;
  // The steps of Initialize, after the options are made: open RocksDB (read-only or not), check
  // the store's format version (writing it into a new store), start tokens above the persisted
  // ceiling, and load the filter horizon.
  Status OpenDatabase(const rocksdb::DBOptions& options,
                      const std::vector<rocksdb::ColumnFamilyDescriptor>& families, bool read_only,
                      const InfoLog& info_log);
  Status CheckFormatVersion(bool read_only);
  void CheckTableFiles(CheckReport& report);  // Check's first part: their checksums
  // Visits the keys of `family` in `options`' range with their values, as of `view` (null: the
  // latest), in key order, until `visit` returns false or an error; `what` names the scan.
  Status ScanFamily(rocksdb::ColumnFamilyHandle* family, const ScanOptions& options,
                    std::string_view what,
                    FunctionRef<Result<bool>(std::string_view key, std::string_view value)> visit,
                    ReadView* view);
  // Update, with `writes` (null: none) applied in the record's batch (UpdateWithWrites).
  Status Commit(std::string_view key, Decide decide, const WriteSet* writes, Durability durability,
                std::optional<uint64_t> absent_since);
  // Commit's steps, under the stripe's lock. The record stored under `key` (nullopt: none), from
  // the stripe's last write when it is of `key`, not read at all when nothing was written since
  // `absent_since` (a version at which it was absent).
  Status ReadStoredLocked(std::string_view key, std::size_t stripe,
                          std::optional<uint64_t> absent_since, std::optional<Record>& stored);
  // For IDEM_DCHECK only (each costs a read): whether `records_` holds `encoded` under `key`, and
  // whether it holds a record of `key` that expires at `expires` (or one too damaged to say).
  bool StoredValueIs(std::string_view key, std::string_view encoded) const;
  bool RecordExpiresAt(std::string_view key, int64_t expires) const;
  // Writes `next` (replacing a record of expiry `stored_expires`) and `writes` (null: none) in
  // one batch, and keeps `next` as the stripe's last write.
  Status WriteLocked(std::size_t stripe, std::string_view key, const Record& next,
                     const WriteSet* writes, std::optional<int64_t> stored_expires,
                     Durability durability);
  // One table write as it goes into a commit's batch.
  struct TableWrite {
    rocksdb::ColumnFamilyHandle* family;
    std::string key;
    std::string encoded;  // the value with its new version (EncodeTableValue)
  };
  // The locks of one commit's table keys: wide_commit_mu_ shared and each key's stripe in
  // ascending order (exclusive for a written key, shared for a key only required, so that
  // commits that only read a key, a setting every request reads, do not wait for each other),
  // or, for a commit of more than kMostTableLocks keys, wide_commit_mu_ alone. Taken after the
  // record's stripe, and nothing takes a record's stripe while holding these: no cycle.
  class TableLocks {
   public:
    TableLocks(RocksDbStorage& storage, const WriteSet& writes);
    ~TableLocks();
    TableLocks(const TableLocks&) = delete;
    TableLocks& operator=(const TableLocks&) = delete;

   private:
    struct Stripe {
      std::size_t index;
      bool exclusive;  // a key of it is written
    };
    RocksDbStorage& storage_;
    std::vector<Stripe> stripes_;  // ascending, each once
    bool wide_ = false;
  };
  // Under the keys' locks: kConflict when a conditional write's key, or a required one, is no
  // longer at its version; otherwise the writes to batch (one per key, the last value given, the
  // version one above the stored one), their tables made first where new.
  Result<std::vector<TableWrite>> PrepareTableWrites(const WriteSet& writes);
  // Adds to `batch` the record `encoded` under `key`, `table_writes`, and the expiry index's
  // change (the entry of `stored_expires` deleted when there was a record and its expiry
  // changes, and one for `expires` put).
  rocksdb::Status AddRecordWrite(rocksdb::WriteBatch& batch, std::string_view key,
                                 const std::string& encoded,
                                 const std::vector<TableWrite>& table_writes,
                                 std::optional<int64_t> stored_expires, int64_t expires);
  // A write group's state (StartWriteGroup): one per thread, naming the storage it belongs to.
  struct WriteGroup {
    struct Held {
      std::size_t stripe;
      std::string key;
      std::string encoded;
      int64_t expires;
      std::optional<RecordSummary> before, after;  // for watcher_, when there is one
    };
    RocksDbStorage* storage = nullptr;
    std::unique_ptr<rocksdb::WriteBatch> batch;
    std::vector<Held> held;        // not yet written, each holding its stripe
    std::vector<Status> outcomes;  // of the Updates written so far, in order
    // kPeriodic once a held write asks for it, so that the batch is synced in time.
    Durability durability = Durability::kBuffered;
    bool Holds(std::size_t stripe) const;
  };
  // The calling thread's group, on whichever storage (storage null: none).
  static WriteGroup& ThreadGroupSlot();
  // The calling thread's group on this storage; null when it has none.
  WriteGroup* ThreadWriteGroup() const;
  // Writes what `group` holds as one batch, notes each outcome, and lets their stripes go.
  void WriteGroupHeld(WriteGroup& group);
  // Commit's step for a grouped write: puts `next` into the thread's write `group`, to be written
  // with the others it holds (the caller keeps the stripe locked). `stored_expires`: the expiry
  // of the record it replaces, whose index entry goes (AddRecordWrite).
  Status AddToWriteGroup(WriteGroup& group, std::size_t stripe, std::string_view key,
                         const Record& next, std::optional<int64_t> stored_expires,
                         Durability durability, std::optional<RecordSummary>&& before);
  // A group writes what it holds at this many (ThreadSanitizer tracks 64 locks a thread).
  static constexpr std::size_t kMostGroupedWrites = 32;
  // A group's batch is kept for the thread's next group up to this size (32 pipelined records).
  static constexpr std::size_t kGroupBatchKeepBytes = 256 << 10;
  // The column family of `table`; null when it does not exist and `create` is false. Making one
  // raises the store's format version first (kTablesFormatVersion).
  Result<rocksdb::ColumnFamilyHandle*> TableFamily(std::string_view table, bool create);
  Result<TableValue> ReadTableValue(rocksdb::ColumnFamilyHandle* family, std::string_view table,
                                    std::string_view key);
  // Raises the format version to kTablesFormatVersion: the format file, then meta's, synced.
  Status RaiseFormatForTablesLocked() IDEM_REQUIRES(tables_mu_);
  // The column families Initialize opens beside the three of the records: those of the tables,
  // listed from the MANIFEST (none for a new store).
  std::vector<std::string> ListTableFamilies(const rocksdb::DBOptions& options) const;
  // The clock's time at the records' precision: what a call returns equals what it stored.
  TimePoint Now() const;
  // The latest sequence number: every write takes a new one (ReadResult's write_version).
  uint64_t WriteVersion() const;
  // The record under `key`, decoded into `record` (reusing its buffers); nullopt when there is
  // none. On an error `record` may be left partly assigned.
  Status ReadRecordInto(std::string_view key, std::optional<Record>& record);
  // A fencing token never handed out before, even across restarts and copies: from a counter
  // whose ceiling is persisted a block ahead (kTokenBlock), and at most the lead ahead of `now`
  // (the lead is raised first when it would be more). Already above every stored token.
  Result<uint64_t> NextToken(TimePoint now);
  // Starts the counter above the persisted ceiling and above the time `now` (in microseconds)
  // plus the lead (and a margin more when the files are a copy: their directory is not the one
  // they were last opened in), and persists the next ceiling, the lead and the directory.
  Status ReserveTokens(TimePoint now);
  Status LoadFilterHorizon(TimePoint now);
  // The fixed-width value `bytes` long (4 or 8) at `key` of the meta column family, if any;
  // kCorruption naming `what` when it has another size.
  Result<std::optional<uint64_t>> ReadMeta(const char* key, std::size_t bytes,
                                           std::string_view what);
  // Persists (fsyncs) the token ceiling and lead, and the directory the files are in when given.
  Status PersistTokens(uint64_t ceiling, uint64_t lead, std::optional<uint64_t> device,
                       std::optional<uint64_t> inode) IDEM_REQUIRES(token_mu_);
  // Every write goes through here. After a failed write (or a failed flush: the next write then
  // fails) RocksDB refuses further writes (its background error state): the next write first
  // checks that RocksDB has resumed (ResumeAfterDiskError), and fails with kIOError saying why
  // when it has not. `what` and `key` (may be empty) name the write in an error message.
  Status Write(Durability durability, rocksdb::WriteBatch* batch, std::string_view what,
               std::string_view key = {});
  // OK when RocksDB takes writes (again). Otherwise kIOError: the disk is full (writes resume
  // by themselves once space is freed), or the store must be reopened.
  Status ResumeAfterDiskError();
  // RocksDB not stopped. kIOError while the log file whose write failed is still current (the
  // call that failed has yet to stop the store), OK otherwise.
  Status CheckFailedLogLocked() IDEM_REQUIRES(resume_mu_);
  // See the .cc: keeps a memtable non-empty after a resume.
  void WriteResumeGuard();
  // The number of the write-ahead log file RocksDB writes now.
  std::optional<uint64_t> CurrentLogNumber();
  void Report(const LogLine& line) const;
  std::size_t StripeIndex(std::string_view key) const;
  // Deletes the due records among `entries` (each an index entry's expiry and key), reading first
  // those expiring at or before `verify_up_to`; `seen_at`: the entries' snapshot's sequence.
  Result<uint64_t> DeleteDue(const std::vector<std::pair<int64_t, std::string>>& entries,
                             int64_t now_micros, int64_t verify_up_to, uint64_t seen_at)
      IDEM_REQUIRES(purge_mu_);
  // Calls options.progress_total, when set, with the number of index entries `it` visits.
  Status ReportPurgeTotal(rocksdb::Iterator& it, const PurgeOptions& options);
  // A dry-run purge: how many of the due entries `it` walks still name their record.
  Result<uint64_t> CountDue(rocksdb::Iterator& it, const std::function<void(uint64_t)>& progress);
  // What a purge's pass over the due entries did, and the key range it covered.
  struct PurgePass {
    uint64_t purged = 0;
    std::string smallest_key;
    std::string largest_key;
    std::string last_index_key;  // empty: no entry was due
  };
  // Deletes the due records among the entries `it` walks, in batches of kPurgeBatch (DeleteDue).
  Result<PurgePass> DeleteDueEntries(rocksdb::Iterator& it, int64_t now_micros,
                                     int64_t verify_up_to, uint64_t seen_at,
                                     const std::function<void(uint64_t)>& progress)
      IDEM_REQUIRES(purge_mu_);
  // Deletes the expiry index up to and including `last_index_key`.
  Status TrimExpiryIndex(const std::string& last_index_key);
  // Gives back the disk space of what `pass` removed: flushes every column family, so that the
  // log files holding the deletes go, and compacts the purged ranges of the records and index.
  Status CompactPurged(const PurgePass& pass);
  // Waits, up to kBackgroundJobsWait, until no flush or compaction runs: until their input files
  // are deleted (rocksdb_storage_purge.cc says why).
  void WaitForBackgroundJobs();
  static constexpr std::chrono::seconds kBackgroundJobsWait{2};
  Status PersistFilterHorizon(int64_t horizon) IDEM_REQUIRES(horizon_mu_);

  // Constant after construction.
  std::string path_;
  std::shared_ptr<const Clock> clock_;
  // The Env RocksDB uses: its own thread pools (storage_env.h), and over the test hook's or the
  // default file system, the manifest-marking one and the watch of failed log writes. Declared
  // before db_, so it outlives it.
  std::shared_ptr<rocksdb::Env> env_;
  std::unique_ptr<rocksdb::DB> db_;
  uint64_t opened_at_sequence_ = 0;  // the latest sequence number once DB::Open returned
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  rocksdb::ColumnFamilyHandle* records_ = nullptr;
  rocksdb::ColumnFamilyHandle* by_expiry_ = nullptr;
  rocksdb::ColumnFamilyHandle* meta_ = nullptr;
  std::shared_ptr<void> keep_alive_;  // block cache and write-buffer manager
  LogSink log_;                       // RocksDbConfig::log
  WriteWatcher* watcher_ = nullptr;   // WatchWrites: set before any write
  // Syncs the log after writes made with kPeriodic; null in a read-only instance. Stopped
  // (syncing what is due) before the database closes.
  std::unique_ptr<PeriodicSync> periodic_sync_;
  std::shared_ptr<TableFileVerifier> verifier_;  // db_'s listener; null in a read-only instance

  // What failed writes tell: the next write checks that RocksDB resumed first, under
  // resume_mu_. Shared with the file system that notes failed log writes.
  std::shared_ptr<DiskErrorFlags> disk_errors_;
  // Taken last: a token reservation, a move of the filter horizon and the making of a table
  // write under their own mutex, and a write may have to resume RocksDB first.
  util::Mutex resume_mu_ IDEM_ACQUIRED_AFTER(token_mu_, horizon_mu_, tables_mu_);
  // A failed resume is retried no sooner than this; meanwhile calls get its error.
  static constexpr std::chrono::milliseconds kResumeInterval{100};
  std::chrono::steady_clock::time_point next_resume_ IDEM_GUARDED_BY(resume_mu_);
  Status last_resume_error_ IDEM_GUARDED_BY(resume_mu_);
  std::optional<WriteStops> write_stops_ IDEM_GUARDED_BY(resume_mu_);  // made at open

  // Per-key read-modify-write atomicity. 1024 stripes keep collisions rare at 64 threads.
  static constexpr std::size_t kStripes = 1024;
  std::array<std::mutex, kStripes> stripes_;

  // Per stripe, the record last written for one of its keys, so the next transition of that key
  // (Complete after Begin, each Extend) decodes it instead of reading it back from RocksDB: a
  // lifecycle then makes one RocksDB read, not two. Only this process writes the database, and
  // every write of a key holds its stripe's lock, so the copy is the stored record, with one
  // exception: compaction drops expired records without the lock. So a copy is used only while
  // it expires after the filter horizon. Guarded by the stripe's mutex.
  struct LastWrite {
    std::string key;
    std::string value;  // encoded record
    int64_t expires = 0;
    void Forget(std::string_view written) {
      if (key == written) key.clear(), value.clear();
    }
  };
  static constexpr std::size_t kLastWriteMaxBytes = 1024;  // bounds the copies to ~1 MiB
  // A thread keeps its read buffer and its write batch between calls up to this size.
  static constexpr std::size_t kReadBufferKeepBytes = 4096;
  std::array<LastWrite, kStripes> last_writes_;
  // Per stripe, the sequence number after the last Update or Remove of one of its keys: a purge
  // rechecks an index entry from its snapshot only when its stripe was written since. Guarded by
  // the stripe's mutex.
  std::array<uint64_t, kStripes> written_at_{};

  // The filter horizon (micros): compaction filters drop only records that expire at or before
  // it, and it is persisted (fsynced, meta "filter_horizon") before any filter uses it. It
  // trails the clock by a day and moves at open and at each purge. So the expiry index is
  // exact after it: an entry later than the horizon always names a record with that expiry
  // (every write of a record replaces its entry in the same batch), and purge deletes such
  // records without reading them. At or before it, a filter may have removed the record and
  // the key may hold a newer one: purge reads those first. Also bounds the last-write copies.
  const std::shared_ptr<std::atomic<int64_t>> filter_horizon_ =
      std::make_shared<std::atomic<int64_t>>(std::numeric_limits<int64_t>::min());
  util::Mutex horizon_mu_ IDEM_ACQUIRED_AFTER(purge_mu_);  // one writer of the horizon at a time

  util::Mutex purge_mu_;  // one purge at a time

  // The store's format version, read at open; raised when the first table is made.
  std::atomic<uint32_t> format_version_{kFirstFormatVersion};

  // Application tables, by name, and the options a new table's column family gets. The handles
  // live as long as the database (destroyed with it). Looked up under tables_mu_ shared.
  util::SharedMutex tables_mu_;
  std::map<std::string, rocksdb::ColumnFamilyHandle*, std::less<>> tables_
      IDEM_GUARDED_BY(tables_mu_);
  std::unique_ptr<rocksdb::ColumnFamilyOptions> table_options_;
  // A commit's table keys are locked by stripe, like records, in ascending order, after the
  // record's stripe and while holding wide_commit_mu_ shared. A commit of more keys than
  // kMostTableLocks takes wide_commit_mu_ alone instead (ThreadSanitizer tracks 64 locks).
  std::array<std::shared_mutex, kStripes> table_stripes_;
  std::shared_mutex wide_commit_mu_;
  static constexpr std::size_t kMostTableLocks = 32;

  uint64_t token_block_ = kTokenBlock;  // RocksDbConfig::token_block
  std::atomic<uint64_t> next_token_{1};
  util::Mutex token_mu_;
  std::atomic<uint64_t> token_ceiling_{0};  // written under token_mu_ once the store is open
  // How far ahead of the clock (microseconds) any token handed out may lie; written under
  // token_mu_ once the store is open.
  std::atomic<uint64_t> token_lead_{0};
};

}  // namespace idem::storage

#endif  // IDEM_STORAGE_ROCKSDB_ROCKSDB_STORAGE_H_
