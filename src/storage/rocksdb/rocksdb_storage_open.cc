// Opening and creating a store's RocksDB, and the meta values read at open (format version, filter
// horizon; the token ceiling in rocksdb_storage_tokens.cc). What a database directory holds, and
// putting one in place, are in rocksdb_storage_files.cc; the reads and writes of records in
// rocksdb_storage.cc.

#include <fmt/format.h>
#include <malloc.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/listener.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "storage/rocksdb/expired_record_filter.h"
#include "storage/rocksdb/format_file.h"
#include "storage/rocksdb/fs/info_log.h"
#include "storage/rocksdb/fs/log_failure_watch.h"
#include "storage/rocksdb/fs/log_tail.h"
#include "storage/rocksdb/fs/log_zero_fill.h"
#include "storage/rocksdb/fs/manifest_mark.h"
#include "storage/rocksdb/fs/private_files.h"
#include "storage/rocksdb/fs/rocksdb_status.h"
#include "storage/rocksdb/fs/storage_env.h"
#include "storage/rocksdb/layout.h"
#include "storage/rocksdb/periodic_sync.h"
#include "storage/rocksdb/record_codec.h"
#include "storage/rocksdb/rocksdb_options.h"
#include "storage/rocksdb/rocksdb_storage.h"
#include "storage/rocksdb/table_file_verifier.h"
#include "storage/rocksdb/write_stops.h"
#include "util/check.h"
#include "util/escape.h"

namespace idem::storage {
namespace {

// How far the filter horizon trails the clock (see filter_horizon_ in the header). Purges run
// every few minutes (the auto-purge) or hours (cron), so the entries they find due are newer
// than a day and deleted without a read; compaction filters remove what expired over a day ago.
constexpr int64_t kFilterHorizonLagMicros = int64_t{24} * 60 * 60 * 1'000'000;
// The info log starts a new file at this size; RocksDB keeps keep_log_file_num files.
constexpr std::size_t kInfoLogFileBytes = 1 << 20;

// Returns freed heap memory to the system after each flush and compaction. Those allocate and
// free many megabytes of blocks on their own threads, and glibc keeps what they free in
// per-thread arenas, which this hands back (docs/design/speed.md, "Settings measured", N3).
class TrimmingListener final : public rocksdb::EventListener {
 public:
  void OnFlushCompleted(rocksdb::DB*, const rocksdb::FlushJobInfo&) override { malloc_trim(0); }
  void OnCompactionCompleted(rocksdb::DB*, const rocksdb::CompactionJobInfo&) override {
    malloc_trim(0);
  }
};

// `verifier`: the owner's (table_file_verifier.h), which verifies each table file; null in a
// read-only instance.
rocksdb::DBOptions MakeDbOptions(const RocksDbOptions& engine, const RocksDbConfig& config,
                                 rocksdb::Env* env,
                                 std::shared_ptr<rocksdb::EventListener> verifier) {
  rocksdb::DBOptions options = engine.db;
  options.env = env;
  if (verifier) options.listeners.push_back(std::move(verifier));
  options.create_if_missing = config.create_if_missing;
  options.create_missing_column_families = true;
  options.keep_log_file_num = kKeptInfoLogFiles;
  options.max_manifest_file_size = 64 << 20;
  options.listeners.push_back(std::make_shared<TrimmingListener>());
  // Every write but the resume guard is logged: a flush at close would save nothing that
  // reopening does not replay, and would write to a disk that may be full.
  options.avoid_flush_during_shutdown = true;
  // Nor at open: the logs recovered stay in the memtables (and their files stay until a flush),
  // instead of being written to table files before the open returns. On a full 16 MiB disk, a
  // store with 624 KiB of logs opened once 12-20 KiB were freed; with the flush it still failed
  // after 8 MiB (DiskFull.WithoutAReserveAStoreOpensOnceKilobytesAreFreed).
  options.avoid_flush_during_recovery = true;
  // A read-only instance opens every table file at once: a live owner that compacts and deletes
  // files meanwhile cannot pull them from under its reads.
  if (config.read_only) options.max_open_files = -1;
  // A damaged write-ahead log must not silently lose acknowledged records. RocksDB's default,
  // kPointInTimeRecovery, stops replaying at the first damaged record and opens the store
  // without everything after it, fsynced claims included. kTolerateCorruptedTailRecords
  // accepts only what a crash leaves (an incomplete last record, zeroed preallocated bytes) and
  // refuses to open on damage anywhere else: kCorruption, and the operator decides.
  options.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  return options;
}

// The options of the tables' column families. Their values are read by key, as records are: the
// records' table options (Bloom filters, the shared block cache), and a smaller memtable each.
rocksdb::ColumnFamilyOptions MakeTableOptions(const RocksDbOptions& engine) {
  rocksdb::ColumnFamilyOptions options = engine.records;
  options.memtable_insert_with_hint_prefix_extractor.reset();
  options.write_buffer_size = std::max<std::size_t>(engine.records.write_buffer_size / 4, 1 << 20);
  return options;
}

// Writes what the open's preparation cut off the logs (PrepareFilesForOpen) of the store at
// `path` into the info log: a power cut's as warnings, which `log` hears too.
void LogCutLogs(const LogTailCuts& cut_logs, InfoLog& info_log, const std::string& path,
                const LogSink& log) {
  for (const std::string& line : cut_logs.power_cut) {
    rocksdb::Log(rocksdb::InfoLogLevel::WARN_LEVEL, &info_log, "idem: %s", line.c_str());
    const std::string message = fmt::format("store {}: {}", EscapeControls(path), line);
    if (log) log({LogSeverity::kWarning, "power_cut_repaired", message});
  }
  for (const std::string& line : cut_logs.tails) {
    rocksdb::Log(rocksdb::InfoLogLevel::INFO_LEVEL, &info_log, "idem: %s", line.c_str());
  }
}

// The records, their expiry index and meta (layout.h), in that order.
std::vector<rocksdb::ColumnFamilyDescriptor> MakeColumnFamilies(
    const RocksDbOptions& engine,
    std::shared_ptr<rocksdb::CompactionFilterFactory> expired_record_filter) {
  rocksdb::ColumnFamilyOptions records_options = engine.records;
  records_options.compaction_filter_factory = std::move(expired_record_filter);
  // Rewrites old files now and then so the compaction filter sees long-lived expired records.
  records_options.periodic_compaction_seconds = 24 * 60 * 60;

  rocksdb::ColumnFamilyOptions small_options;
  // The index's and meta's tables read through the records' block cache, inside the memory
  // budget. Left to RocksDB's defaults they would get an 8 MiB cache of their own and keep their
  // index blocks outside any cache. They need no Bloom filter: the index is walked in order,
  // and meta holds two keys.
  rocksdb::BlockBasedTableOptions small_tables;
  small_tables.block_cache = engine.cache;
  small_tables.cache_index_and_filter_blocks = true;
  small_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(small_tables));
  small_options.write_buffer_size =
      std::max<std::size_t>(records_options.write_buffer_size / 4, 1 << 20);
  small_options.level_compaction_dynamic_level_bytes = true;

  // Index entries are written in (nearly) time order: RocksDB inserts each one next to the last,
  // instead of searching the memtable from its top.
  rocksdb::ColumnFamilyOptions index_options = small_options;
  index_options.memtable_insert_with_hint_prefix_extractor.reset(
      rocksdb::NewFixedPrefixTransform(1));
  return {
      {rocksdb::kDefaultColumnFamilyName, records_options},
      {kByExpiryFamily, index_options},
      {kMetaFamily, small_options},
  };
}

}  // namespace

Result<std::unique_ptr<RocksDbStorage>> RocksDbStorage::Open(const RocksDbConfig& config) {
  std::unique_ptr<RocksDbStorage> storage(new RocksDbStorage());
  IDEM_RETURN_IF_ERROR(storage->Initialize(config));
  return storage;
}

Status RocksDbStorage::Initialize(const RocksDbConfig& config) {
  path_ = config.path;
  clock_ = config.clock;
  if (config.token_block != 0) token_block_ = config.token_block;
  log_ = config.log;
  disk_errors_ = std::make_shared<DiskErrorFlags>();
  auto engine = std::make_shared<RocksDbOptions>(MakeRocksDbOptions(config.memory_budget));
  keep_alive_ = engine;
  {  // After a full disk RocksDB resumes once the largest memtable fits (write_stops.h).
    util::MutexLock lock(resume_mu_);  // uncontended: nothing else runs before the open
    write_stops_.emplace(path_, log_,
                         std::max(engine->records.write_buffer_size, std::size_t{1} << 20));
  }

  // Every file and directory RocksDB creates is the owner's only (private_files.h).
  const std::shared_ptr<rocksdb::FileSystem> file_system =
      config.env ? config.env->GetFileSystem()
                 : NewPrivateFileSystem(rocksdb::FileSystem::Default());
  // A newer release's store is refused before anything below writes to it (format_file.h).
  IDEM_ASSIGN_OR_RETURN(const bool has_format_file,
                        CheckFormatFile(*file_system, path_, kStoreFormatVersion));
  IDEM_ASSIGN_OR_RETURN(const LogTailCuts cut_logs,
                        PrepareFilesForOpen(*file_system, config.read_only));
  // A read-only instance deletes nothing: it needs no mark, and writes no log file; it reads the
  // logs up to their last whole records (log_tail.h).
  env_ = NewStorageEnv(
      config.read_only
          ? NewLogPrefixView(file_system)
          : NewLogFailureWatch(NewManifestMarkingFileSystem(NewZeroFilledLogs(file_system), path_),
                               disk_errors_));
  if (!config.read_only) verifier_ = std::make_shared<TableFileVerifier>(env_.get(), path_, log_);
  rocksdb::DBOptions db_options = MakeDbOptions(*engine, config, env_.get(), verifier_);
  const std::shared_ptr<InfoLog> info_log = StartInfoLog(*file_system, config);
  db_options.info_log = info_log;
  LogCutLogs(cut_logs, *info_log, path_, log_);
  std::vector<rocksdb::ColumnFamilyDescriptor> families =
      MakeColumnFamilies(*engine, NewExpiredRecordFilterFactory(config.clock, filter_horizon_));
  table_options_ = std::make_unique<rocksdb::ColumnFamilyOptions>(MakeTableOptions(*engine));
  for (std::string& table : ListTableFamilies(db_options)) {
    families.emplace_back(std::move(table), *table_options_);
  }
  IDEM_RETURN_IF_ERROR(OpenDatabase(db_options, families, config.read_only, *info_log));
  IDEM_RETURN_IF_ERROR(CheckFormatVersion(config.read_only));
  if (config.read_only) return Status::OK();
  // A new store, or one older than the format file: its version is meta's, now checked.
  if (!has_format_file) {
    IDEM_RETURN_IF_ERROR(WriteFormatFile(*file_system, path_, format_version_.load()));
  }
  const TimePoint now = config.clock->Now();
  IDEM_RETURN_IF_ERROR(ReserveTokens(now));
  IDEM_RETURN_IF_ERROR(LoadFilterHorizon(now));
  periodic_sync_ = std::make_unique<PeriodicSync>(
      config.sync_interval, [this] { return Sync(); },
      [this](const LogLine& line) {
        const std::string message = fmt::format("store {}: {}", path_, line.message);
        Report({line.severity, line.event, message});
      });
  return Status::OK();
}

Result<LogTailCuts> RocksDbStorage::PrepareFilesForOpen(rocksdb::FileSystem& file_system,
                                                        bool read_only) {
  // A MANIFEST that lost committed edits is refused before RocksDB can act on it; the owner
  // writes the mark that makes this check possible (manifest_mark.h).
  IDEM_RETURN_IF_ERROR(CheckManifestMark(file_system, path_));
  // The logs end after their last whole records, and pages a power cut never wrote end them
  // where they are, before RocksDB reads them (log_tail.h). Only an owner may change the files:
  // a read-only open of a store a power cut left so says what the first read-write open will do.
  IDEM_ASSIGN_OR_RETURN(LogTailCuts cut_logs, CutLogTails(file_system, path_, read_only));
  if (read_only && !cut_logs.power_cut.empty()) {
    return Status::Corruption(
        fmt::format("store {} was not opened since a power cut: {}. The first read-write open (an "
                    "application, or idem purge) does it; until then it cannot be read as it is",
                    EscapeControls(path_), cut_logs.power_cut.front()));
  }
  return cut_logs;
}

std::shared_ptr<InfoLog> RocksDbStorage::StartInfoLog(rocksdb::FileSystem& file_system,
                                                      const RocksDbConfig& config) const {
  // The info log: the LOG file in the database directory (none for a read-only open, which
  // never writes), written by idem's logger, which a full or read-only disk cannot make abort
  // (info_log.h). RocksDB's would create the directory first: so does this.
  if (!config.read_only && config.create_if_missing) {
    file_system.CreateDirIfMissing(path_, rocksdb::IOOptions(), nullptr).PermitUncheckedError();
  }
  return std::make_shared<InfoLog>(config.read_only ? std::string() : path_, kInfoLogFileBytes);
}

Status RocksDbStorage::OpenDatabase(const rocksdb::DBOptions& options,
                                    const std::vector<rocksdb::ColumnFamilyDescriptor>& families,
                                    bool read_only, const InfoLog& info_log) {
  rocksdb::DB* db = nullptr;
  rocksdb::Status opened;
  if (read_only) {
    // A read-only instance (no LOCK, no writes) reads the files as they are when it opens,
    // replaying the log in memory. Unlike a secondary instance, it refuses a table file it
    // cannot open (truncated, missing) instead of leaving it out of its view and answering
    // "no record" for what that file holds.
    opened = rocksdb::DB::OpenForReadOnly(options, path_, families, &handles_, &db);
  } else {
    opened = rocksdb::DB::Open(options, path_, families, &handles_, &db);
  }
  if (!opened.ok()) {
    // RocksDB names a damaged log only in its info log.
    const std::string damaged = info_log.damaged_file();
    if (opened.IsCorruption() && !damaged.empty() &&
        opened.ToString().find(damaged) == std::string::npos) {
      return FromRocksDbOpen(
          rocksdb::Status::Corruption(opened.ToString(), fmt::format("in file {}", damaged)),
          path_);
    }
    return FromRocksDbOpen(opened, path_);
  }
  db_.reset(db);
  opened_at_sequence_ = db_->GetLatestSequenceNumber();
  records_ = handles_[0];
  by_expiry_ = handles_[1];
  meta_ = handles_[2];
  // The rest are the tables' (ListTableFamilies), kept by table name. No other thread has the
  // store yet: the lock is uncontended, taken because the analysis checks every function.
  util::WriterMutexLock lock(tables_mu_);
  for (std::size_t i = 3; i < handles_.size(); ++i) {
    tables_.emplace(handles_[i]->GetName().substr(std::strlen(kTableFamilyPrefix)), handles_[i]);
  }
  handles_.resize(3);
  return Status::OK();
}

Result<std::optional<uint64_t>> RocksDbStorage::ReadMeta(const char* key, std::size_t bytes,
                                                         std::string_view what) {
  std::string value;
  const rocksdb::Status read = db_->Get(rocksdb::ReadOptions(), meta_, key, &value);
  if (read.IsNotFound()) return std::optional<uint64_t>();
  if (!read.ok()) return FromRocksDb(read, fmt::format("reading the {} of {}", what, path_));
  if (value.size() != bytes) {
    return Status::Corruption(
        fmt::format("store {}: {} is {} bytes, expected {}", path_, what, value.size(), bytes));
  }
  return std::optional<uint64_t>(bytes == 4 ? util::GetFixed32(value.data())
                                            : util::GetFixed64(value.data()));
}

Status RocksDbStorage::CheckFormatVersion(bool read_only) {
  Result<std::optional<uint64_t>> version = ReadMeta(kFormatVersionKey, 4, "format version");
  // A version of another size is another format too: say which version this library reads.
  if (!version.ok() && version.status().code() != Status::Code::kCorruption) {
    return version.status();
  }
  if (version.ok() && !version->has_value()) {
    if (read_only) return Status::OK();
    std::string encoded;
    PutFixed32(encoded, kFirstFormatVersion);
    return FromRocksDb(
        db_->Put(WriteOptionsFor(Durability::kSync), meta_, kFormatVersionKey, encoded),
        fmt::format("writing the format version of {}", path_));
  }
  const uint64_t found = version.ok() ? **version : 0;
  if (found > kStoreFormatVersion) {
    return Status::NewerVersion(
        fmt::format("store {} has format version {}, written by a newer release of idem; this one "
                    "reads version {}: upgrade idem to open it (nothing is damaged; see "
                    "docs/operations.md, \"Upgrades and downgrades\")",
                    path_, found, kStoreFormatVersion));
  }
  if (found < kFirstFormatVersion) {
    return Status::Corruption(
        fmt::format("store {} has format version {}; this library reads versions {} to {}", path_,
                    found, kFirstFormatVersion, kStoreFormatVersion));
  }
  format_version_ = static_cast<uint32_t>(found);
  return Status::OK();
}

Status RocksDbStorage::LoadFilterHorizon(TimePoint now) {
  {
    util::MutexLock lock(horizon_mu_);  // uncontended: the store is opening
    IDEM_ASSIGN_OR_RETURN(const std::optional<uint64_t> horizon,
                          ReadMeta(kFilterHorizonKey, 8, "filter horizon"));
    if (horizon) {
      filter_horizon_->store(static_cast<int64_t>(*horizon));
    } else {
      // Written by an idem whose filter dropped whatever had expired: up to now.
      IDEM_RETURN_IF_ERROR(PersistFilterHorizon(ToMicros(now)));
    }
  }
  return AdvanceFilterHorizon(now);
}

Status RocksDbStorage::PersistFilterHorizon(int64_t horizon) {
  // Never back: a filter may already have removed records up to the horizon in force.
  IDEM_DCHECK(horizon >= filter_horizon_->load());
  std::string encoded;
  PutFixed64(encoded, static_cast<uint64_t>(horizon));
  rocksdb::WriteBatch batch;
  IDEM_RETURN_IF_ERROR(
      FromRocksDb(batch.Put(meta_, kFilterHorizonKey, encoded), "saving the filter horizon"));
  // Durable before any compaction filter may use it.
  IDEM_RETURN_IF_ERROR(Write(Durability::kSync, &batch, "saving the filter horizon"));
  filter_horizon_->store(horizon);
  return Status::OK();
}

Status RocksDbStorage::AdvanceFilterHorizon(TimePoint now) {
  util::MutexLock lock(horizon_mu_);
  const int64_t target = ToMicros(now) - kFilterHorizonLagMicros;
  if (target <= filter_horizon_->load()) return Status::OK();
  return PersistFilterHorizon(target);
}

RocksDbStorage::~RocksDbStorage() {
  periodic_sync_.reset();  // syncs what is due while the database is open
  if (db_) {
    for (auto* handle : handles_) db_->DestroyColumnFamilyHandle(handle);
    for (auto& [name, handle] : tables_) db_->DestroyColumnFamilyHandle(handle);
    db_->Close().PermitUncheckedError();
    db_.reset();
  }
}

}  // namespace idem::storage
