#include "storage/rocksdb_storage.h"

#include <malloc.h>
#include <rocksdb/cache.h>
#include <rocksdb/compaction_filter.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/listener.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <rocksdb/write_buffer_manager.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "storage/engine_options.h"
#include "storage/info_log.h"
#include "storage/log_tail.h"
#include "storage/manifest_mark.h"
#include "storage/private_files.h"
#include "storage/record_codec.h"
#include "storage/rocksdb_status.h"
#include "storage/storage_env.h"
#include "util/escape.h"

namespace idem::storage {

struct DiskErrorFlags {
  // A write failed: RocksDB refuses writes until it resumes (by itself after a full disk), and
  // the next write asks it first (ResumeAfterDiskError).
  std::atomic<bool> stopped{false};
  // The number of the last write-ahead log file whose append or sync failed (0: none since the
  // last check). RocksDB's writer of that file remembers the error and asserts when it is
  // written again (see LogFailureWatch).
  std::atomic<uint64_t> failed_log{0};
  // A resume flushes every memtable; the next write first makes one non-empty again (see
  // WriteResumeGuard).
  std::atomic<bool> guard_needed{false};
};

namespace {

constexpr char kByExpiryFamily[] = "by_expiry";
constexpr char kMetaFamily[] = "meta";
constexpr char kFormatVersionKey[] = "format_version";
constexpr char kTokenCeilingKey[] = "token_ceiling";
constexpr char kFilterHorizonKey[] = "filter_horizon";
// Never written: only deleted, unlogged, to keep a memtable non-empty after a resume.
constexpr char kResumeGuardKey[] = "resume_guard";
// How far the filter horizon trails the clock (see filter_horizon_ in the header). Purges run
// every few minutes (the auto-purge) or hours (cron), so the entries they find due are newer
// than a day and deleted without a read; compaction filters remove what expired over a day ago.
constexpr int64_t kFilterHorizonLagMicros = int64_t{24} * 60 * 60 * 1'000'000;
// The info log starts a new file at this size; RocksDB keeps keep_log_file_num files.
constexpr std::size_t kInfoLogFileBytes = 1 << 20;
// Purge deletes records in batches of this many keys, holding their stripe locks meanwhile.
// Small enough that a purge never holds many locks at once (ThreadSanitizer tracks at most 64
// per thread), large enough that one write carries many deletes.
constexpr std::size_t kPurgeBatch = 32;

rocksdb::Slice AsSlice(std::string_view bytes) { return {bytes.data(), bytes.size()}; }

// Expiry index key: the expiry as big-endian microseconds with the sign bit flipped (so that
// byte order is time order, pre-1970 included), then the record key.
void ExpiryIndexKeyInto(int64_t expires_micros, std::string_view key, std::string& out) {
  const uint64_t biased = static_cast<uint64_t>(expires_micros) ^ (uint64_t{1} << 63);
  out.resize(8 + key.size());
  // Big-endian, so that byte order is time order.
  StoreFixed64(out.data(), ByteSwap(biased));
  if (!key.empty()) std::memcpy(out.data() + 8, key.data(), key.size());  // data() may be null
}

std::string ExpiryIndexKey(int64_t expires_micros, std::string_view key) {
  std::string out;
  ExpiryIndexKeyInto(expires_micros, key, out);
  return out;
}

int64_t ExpiryOfIndexKey(std::string_view index_key) {
  const uint64_t biased = ByteSwap(GetFixed64(index_key.data()));
  return static_cast<int64_t>(biased ^ (uint64_t{1} << 63));
}

rocksdb::WriteOptions WriteOptionsFor(Durability durability) {
  rocksdb::WriteOptions options;
  options.sync = durability == Durability::kSync;
  return options;
}

// Drops records whose retention expired while RocksDB compacts. Reads only the fixed-offset
// expiry, never decodes. Runs on RocksDB's compaction threads: one instance per compaction, so
// no shared state; noexcept because RocksDB cannot handle exceptions from callbacks.
class ExpiredRecordFilter final : public rocksdb::CompactionFilter {
 public:
  explicit ExpiredRecordFilter(int64_t now_micros) : now_micros_(now_micros) {}

  bool Filter(int /*level*/, const rocksdb::Slice& /*key*/, const rocksdb::Slice& value,
              std::string* /*new_value*/, bool* /*value_changed*/) const noexcept override {
    // An unreadable header is kept: the reader reports it as corruption, never silently lost.
    const auto expires = PeekExpiresMicros(std::string_view(value.data(), value.size()));
    return expires.has_value() && *expires <= now_micros_;
  }
  const char* Name() const noexcept override { return "idem.ExpiredRecordFilter"; }

 private:
  const int64_t now_micros_;
};

class ExpiredRecordFilterFactory final : public rocksdb::CompactionFilterFactory {
 public:
  // Filters drop records that expired at or before min(now, *horizon): never one that expires
  // after the persisted filter horizon.
  ExpiredRecordFilterFactory(std::shared_ptr<const Clock> clock,
                             std::shared_ptr<const std::atomic<int64_t>> horizon)
      : clock_(std::move(clock)), horizon_(std::move(horizon)) {}

  std::unique_ptr<rocksdb::CompactionFilter> CreateCompactionFilter(
      const rocksdb::CompactionFilter::Context& /*context*/) noexcept override {
    return std::make_unique<ExpiredRecordFilter>(
        std::min(ToMicros(clock_->Now()), horizon_->load()));
  }
  const char* Name() const noexcept override { return "idem.ExpiredRecordFilterFactory"; }

 private:
  const std::shared_ptr<const Clock> clock_;
  const std::shared_ptr<const std::atomic<int64_t>> horizon_;
};

// Notes which write-ahead log file last failed an append or a sync (DiskErrorFlags::failed_log):
// RocksDB 7.8's writer of that file remembers the error, and appending to it again asserts
// (SIGABRT with Debian's build). RocksDB replaces the file when it resumes after the error, but
// only if some memtable holds data then (DBImpl::FlushMemTable switches only a non-empty one;
// fixed in RocksDB 9.5, pull request 12873): with every memtable empty it resumes on the failed
// file. Passes every call through; wraps only the log files.
class LogFailureWatch final : public rocksdb::FileSystemWrapper {
 public:
  LogFailureWatch(std::shared_ptr<rocksdb::FileSystem> base, std::shared_ptr<DiskErrorFlags> flags)
      : FileSystemWrapper(std::move(base)), flags_(std::move(flags)) {}

  static const char* kClassName() { return "idem.LogFailureWatch"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* file,
                                    rocksdb::IODebugContext* debug) override {
    return Watch(name, target()->NewWritableFile(name, options, file, debug), file);
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                       std::unique_ptr<rocksdb::FSWritableFile>* file,
                                       rocksdb::IODebugContext* debug) override {
    return Watch(name, target()->ReopenWritableFile(name, options, file, debug), file);
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& name, const std::string& old_name,
                                      const rocksdb::FileOptions& options,
                                      std::unique_ptr<rocksdb::FSWritableFile>* file,
                                      rocksdb::IODebugContext* debug) override {
    return Watch(name, target()->ReuseWritableFile(name, old_name, options, file, debug), file);
  }

 private:
  // A log file: every call that makes RocksDB's writer remember an error is checked.
  class LogFile final : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    LogFile(std::unique_ptr<rocksdb::FSWritableFile>&& file, DiskErrorFlags* flags, uint64_t number)
        : FSWritableFileOwnerWrapper(std::move(file)), flags_(flags), number_(number) {}

    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* debug) override {
      return Checked(target()->Append(data, options, debug));
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* debug) override {
      return Checked(target()->Append(data, options, info, debug));
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                       const rocksdb::IOOptions& options,
                                       rocksdb::IODebugContext* debug) override {
      return Checked(target()->PositionedAppend(data, offset, options, debug));
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                       const rocksdb::IOOptions& options,
                                       const rocksdb::DataVerificationInfo& info,
                                       rocksdb::IODebugContext* debug) override {
      return Checked(target()->PositionedAppend(data, offset, options, info, debug));
    }
    rocksdb::IOStatus Flush(const rocksdb::IOOptions& options,
                            rocksdb::IODebugContext* debug) override {
      return Checked(target()->Flush(options, debug));
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* debug) override {
      return Checked(target()->Sync(options, debug));
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                            rocksdb::IODebugContext* debug) override {
      return Checked(target()->Fsync(options, debug));
    }
    rocksdb::IOStatus RangeSync(uint64_t offset, uint64_t nbytes, const rocksdb::IOOptions& options,
                                rocksdb::IODebugContext* debug) override {
      return Checked(target()->RangeSync(offset, nbytes, options, debug));
    }

   private:
    rocksdb::IOStatus Checked(rocksdb::IOStatus status) {
      if (!status.ok()) flags_->failed_log.store(number_, std::memory_order_release);
      return status;
    }

    DiskErrorFlags* const flags_;  // outlives the file: the file system holds it
    const uint64_t number_;
  };

  // "/path/000075.log" -> 75.
  static std::optional<uint64_t> LogNumber(std::string_view name) {
    constexpr std::string_view kSuffix = ".log";
    const auto slash = name.rfind('/');
    if (slash != std::string_view::npos) name.remove_prefix(slash + 1);
    if (name.size() <= kSuffix.size() || name.substr(name.size() - kSuffix.size()) != kSuffix) {
      return std::nullopt;
    }
    name.remove_suffix(kSuffix.size());
    uint64_t number = 0;
    for (const char c : name) {
      if (c < '0' || c > '9') return std::nullopt;
      number = number * 10 + static_cast<uint64_t>(c - '0');
    }
    return number;
  }

  rocksdb::IOStatus Watch(const std::string& name, rocksdb::IOStatus status,
                          std::unique_ptr<rocksdb::FSWritableFile>* file) {
    if (status.ok()) {
      if (const auto number = LogNumber(name)) {
        *file = std::make_unique<LogFile>(std::move(*file), flags_.get(), *number);
      }
    }
    return status;
  }

  const std::shared_ptr<DiskErrorFlags> flags_;
};

// Returns freed heap memory to the system after each flush and compaction. Those allocate and
// free many megabytes of blocks on their own threads, and glibc keeps what they free in
// per-thread arenas: measured at 1M records, the peak RSS fell from 57 to 49 MiB with this.
class TrimmingListener final : public rocksdb::EventListener {
 public:
  void OnFlushCompleted(rocksdb::DB*, const rocksdb::FlushJobInfo&) override { malloc_trim(0); }
  void OnCompactionCompleted(rocksdb::DB*, const rocksdb::CompactionJobInfo&) override {
    malloc_trim(0);
  }
};

}  // namespace

Result<std::unique_ptr<RocksDbStorage>> RocksDbStorage::Open(const RocksDbConfig& config) {
  std::unique_ptr<RocksDbStorage> storage(new RocksDbStorage());
  IDEM_RETURN_IF_ERROR(storage->Initialize(config));
  return storage;
}

Status RocksDbStorage::Initialize(const RocksDbConfig& config) {
  path_ = config.path;
  if (config.token_block != 0) token_block_ = config.token_block;
  auto engine = std::make_shared<EngineOptions>(MakeEngineOptions(config.memory_budget));
  keep_alive_ = engine;

  rocksdb::DBOptions db_options = engine->db;
  db_options.create_if_missing = config.create_if_missing;
  db_options.create_missing_column_families = true;
  db_options.keep_log_file_num = 4;
  db_options.max_manifest_file_size = 64 << 20;
  db_options.listeners.push_back(std::make_shared<TrimmingListener>());
  disk_errors_ = std::make_shared<DiskErrorFlags>();
  log_ = config.log;
  // RocksDB resumes by itself after a full disk: its SstFileManager checks the free space at
  // once and then every 5 seconds, and resumes once there is room for the largest memtable.
  // Resuming from idem's next write instead would be sooner, but breaks RocksDB 7.8: a flush
  // queued before the error that runs before the resume loses its scheduling slot, and the
  // resume then waits forever for a flush never scheduled (seen on a full tmpfs). RocksDB's own
  // recovery counts as in progress from the error on, so no flush runs in that window.
  resume_free_bytes_ = std::max(engine->records.write_buffer_size, std::size_t{1} << 20);
  // Every write but the resume guard is logged: a flush at close would save nothing that
  // reopening does not replay, and would write to a disk that may be full.
  db_options.avoid_flush_during_shutdown = true;
  // A read-only instance opens every table file at once: a live owner that compacts and deletes
  // files meanwhile cannot pull them from under its reads.
  if (config.read_only) db_options.max_open_files = -1;
  // Every file and directory RocksDB creates is the owner's only (private_files.h).
  const std::shared_ptr<rocksdb::FileSystem> file_system =
      config.env ? config.env->GetFileSystem()
                 : NewPrivateFileSystem(rocksdb::FileSystem::Default());
  // A MANIFEST that lost committed edits is refused before RocksDB can act on it; the owner
  // writes the mark that makes this check possible (manifest_mark.h).
  IDEM_RETURN_IF_ERROR(CheckManifestMark(*file_system, path_));
  // Pages a power cut never wrote end the logs where they are, before RocksDB reads them
  // (log_tail.h). Only an owner may change the files; a read-only open of such a store reports
  // the log damaged until an owner has opened it.
  std::vector<std::string> cut_logs;
  if (!config.read_only) {
    IDEM_ASSIGN_OR_RETURN(cut_logs, CutUnwrittenLogTails(*file_system, path_));
  }
  // A read-only instance deletes nothing: it needs no mark, and writes no log file.
  env_ = NewStorageEnv(config.read_only
                           ? file_system
                           : std::make_shared<LogFailureWatch>(
                                 NewManifestMarkingFileSystem(file_system, path_), disk_errors_));
  db_options.env = env_.get();
  // A damaged write-ahead log must not silently lose acknowledged records. RocksDB's default,
  // kPointInTimeRecovery, stops replaying at the first damaged record and opens the store
  // without everything after it, fsynced claims included. kTolerateCorruptedTailRecords
  // accepts only what a crash leaves (an incomplete last record, zeroed preallocated bytes) and
  // refuses to open on damage anywhere else: kCorruption, and the operator decides.
  db_options.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;

  rocksdb::ColumnFamilyOptions records_options = engine->records;
  records_options.compaction_filter_factory =
      std::make_shared<ExpiredRecordFilterFactory>(config.clock, filter_horizon_);
  // Rewrites old files now and then so the compaction filter sees long-lived expired records.
  records_options.periodic_compaction_seconds = 24 * 60 * 60;

  rocksdb::ColumnFamilyOptions small_options;
  // The index's and meta's tables read through the records' block cache, inside the memory
  // budget. Left to RocksDB's defaults they would get an 8 MiB cache of their own and keep their
  // index blocks outside any cache. They need no Bloom filter: the index is walked in order,
  // and meta holds two keys.
  rocksdb::BlockBasedTableOptions small_tables;
  small_tables.block_cache = engine->cache;
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
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, records_options},
      {kByExpiryFamily, index_options},
      {kMetaFamily, small_options},
  };
  // The info log: the LOG file in the database directory (none for a read-only open, which
  // never writes), written by idem's logger, which a full or read-only disk cannot make abort
  // (info_log.h). RocksDB's would create the directory first: so does this.
  if (!config.read_only && config.create_if_missing) {
    file_system->CreateDirIfMissing(path_, rocksdb::IOOptions(), nullptr).PermitUncheckedError();
  }
  auto info_log =
      std::make_shared<InfoLog>(config.read_only ? std::string() : path_, kInfoLogFileBytes);
  db_options.info_log = info_log;
  for (const std::string& line : cut_logs) {
    rocksdb::Log(rocksdb::InfoLogLevel::WARN_LEVEL, info_log, "idem: %s", line.c_str());
    Report("store " + EscapeControls(path_) + ": " + line);
  }

  rocksdb::DB* db = nullptr;
  rocksdb::Status opened;
  if (config.read_only) {
    // A read-only instance (no LOCK, no writes) reads the files as they are when it opens,
    // replaying the log in memory. Unlike a secondary instance, it refuses a table file it
    // cannot open (truncated, missing) instead of leaving it out of its view and answering
    // "no record" for what that file holds.
    opened = rocksdb::DB::OpenForReadOnly(db_options, path_, families, &handles_, &db);
  } else {
    opened = rocksdb::DB::Open(db_options, path_, families, &handles_, &db);
  }
  if (!opened.ok()) {
    const std::string damaged = info_log->damaged_file();
    if (opened.IsCorruption() && !damaged.empty() &&
        opened.ToString().find(damaged) == std::string::npos) {
      return FromRocksDbOpen(rocksdb::Status::Corruption(opened.ToString(), "in file " + damaged),
                             path_);
    }
    return FromRocksDbOpen(opened, path_);
  }
  db_.reset(db);
  records_ = handles_[0];
  by_expiry_ = handles_[1];
  meta_ = handles_[2];

  std::string value;
  rocksdb::Status read = db_->Get(rocksdb::ReadOptions(), meta_, kFormatVersionKey, &value);
  if (read.ok()) {
    const uint32_t version = value.size() == 4 ? GetFixed32(value.data()) : 0;
    if (version != kStoreFormatVersion) {
      return Status::Corruption("store " + path_ + " has format version " +
                                std::to_string(version) + "; this library reads version " +
                                std::to_string(kStoreFormatVersion));
    }
  } else if (!read.IsNotFound()) {
    return FromRocksDb(read, "reading the format version of " + path_);
  } else if (!config.read_only) {
    std::string encoded;
    PutFixed32(encoded, kStoreFormatVersion);
    IDEM_RETURN_IF_ERROR(
        FromRocksDb(db_->Put(WriteOptionsFor(Durability::kSync), meta_, kFormatVersionKey, encoded),
                    "writing the format version of " + path_));
  }
  if (config.read_only) return Status::OK();

  read = db_->Get(rocksdb::ReadOptions(), meta_, kTokenCeilingKey, &value);
  uint64_t start = 1;
  if (read.ok() && value.size() == 8) {
    start = GetFixed64(value.data());
  } else if (read.ok()) {
    return Status::Corruption("store " + path_ + ": token ceiling is " +
                              std::to_string(value.size()) + " bytes, expected 8");
  } else if (!read.IsNotFound()) {
    return FromRocksDb(read, "reading the token ceiling of " + path_);
  }
  // Tokens below the stored ceiling may have been handed out before a crash: skip them all.
  next_token_ = start;
  IDEM_RETURN_IF_ERROR(PersistTokenCeiling(start + token_block_));

  const TimePoint now = config.clock->Now();
  read = db_->Get(rocksdb::ReadOptions(), meta_, kFilterHorizonKey, &value);
  if (read.ok() && value.size() == 8) {
    filter_horizon_->store(static_cast<int64_t>(GetFixed64(value.data())));
  } else if (read.ok()) {
    return Status::Corruption("store " + path_ + ": filter horizon is " +
                              std::to_string(value.size()) + " bytes, expected 8");
  } else if (read.IsNotFound()) {
    // Written by an idem whose filter dropped whatever had expired: up to now.
    IDEM_RETURN_IF_ERROR(PersistFilterHorizon(ToMicros(now)));
  } else {
    return FromRocksDb(read, "reading the filter horizon of " + path_);
  }
  return AdvanceFilterHorizon(now);
}

Status RocksDbStorage::PersistFilterHorizon(int64_t horizon) {
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
  std::lock_guard lock(horizon_mu_);
  const int64_t target = ToMicros(now) - kFilterHorizonLagMicros;
  if (target <= filter_horizon_->load()) return Status::OK();
  return PersistFilterHorizon(target);
}

RocksDbStorage::~RocksDbStorage() {
  if (db_) {
    for (auto* handle : handles_) db_->DestroyColumnFamilyHandle(handle);
    db_->Close().PermitUncheckedError();
    db_.reset();
  }
}

Status RocksDbStorage::PersistTokenCeiling(uint64_t ceiling) {
  std::string encoded;
  PutFixed64(encoded, ceiling);
  rocksdb::WriteBatch batch;
  IDEM_RETURN_IF_ERROR(
      FromRocksDb(batch.Put(meta_, kTokenCeilingKey, encoded), "saving the token ceiling"));
  IDEM_RETURN_IF_ERROR(Write(Durability::kSync, &batch, "saving the token ceiling"));
  token_ceiling_.store(ceiling);
  return Status::OK();
}

Result<uint64_t> RocksDbStorage::NextToken() {
  const uint64_t token = next_token_.fetch_add(1);
  if (token >= token_ceiling_.load()) {
    std::lock_guard lock(token_mu_);
    while (token >= token_ceiling_.load()) {
      IDEM_RETURN_IF_ERROR(PersistTokenCeiling(token_ceiling_.load() + token_block_));
    }
  }
  return token;
}

Status RocksDbStorage::Write(Durability durability, rocksdb::WriteBatch* batch,
                             std::string_view what, std::string_view key) {
  // failed_log is set during a failing log write, before RocksDB stops: a write that starts
  // meanwhile checks too.
  if (disk_errors_->stopped.load(std::memory_order_acquire) ||
      disk_errors_->failed_log.load(std::memory_order_acquire) != 0) {
    IDEM_RETURN_IF_ERROR(ResumeAfterDiskError());
  }
  if (disk_errors_->guard_needed.load(std::memory_order_acquire)) WriteResumeGuard();
  const rocksdb::Status s = db_->Write(WriteOptionsFor(durability), batch);
  if (s.ok()) return Status::OK();
  // The batch is one write-ahead log record: either all of it (the record and its expiry-index
  // entry) or none of it is ever visible. It is not visible now; a log record that reached the
  // disk before a failed sync may reappear when the store is reopened, whole.
  // The message is built only on failure: a successful write formats nothing.
  std::string context(what);
  if (!key.empty()) context += " " + EscapeKey(key);
  Status failed = FromRocksDb(s, context + " in store " + path_);
  if (s.IsIOError() || s.IsCorruption() || s.severity() >= rocksdb::Status::Severity::kSoftError) {
    disk_errors_->stopped.store(true, std::memory_order_release);
    disk_errors_->guard_needed.store(true, std::memory_order_release);
    std::lock_guard lock(resume_mu_);
    NoteStoppedLocked(s);
  }
  return failed;
}

void RocksDbStorage::WriteResumeGuard() {
  // A resume flushes every memtable and starts a new log file. If the next log write failed with
  // every memtable still empty, the resume after it would keep that file (see LogFailureWatch)
  // and the store could only be reopened. An unlogged deletion of a key never written makes the
  // meta memtable non-empty at no I/O: that resume flushes it and replaces the file. It is
  // never in a log file, and flushed, it is a tombstone of nothing. Fails while RocksDB is
  // stopped, and is then tried again by the next write.
  rocksdb::WriteOptions unlogged;
  unlogged.disableWAL = true;
  if (db_->Delete(unlogged, meta_, kResumeGuardKey).ok()) {
    disk_errors_->guard_needed.store(false, std::memory_order_release);
  }
}

void RocksDbStorage::NoteStoppedLocked(const rocksdb::Status& cause) {
  last_cause_ = cause.ToString();
  last_cause_no_space_ = cause.IsNoSpace();
  if (stop_noted_) return;
  stop_noted_ = true;
  const auto now = std::chrono::steady_clock::now();
  stopped_since_ = now;
  // A disk that stays nearly full may stop and resume the store many times a minute: one line
  // a minute says so.
  if (stop_reported_ever_ && now - last_stop_report_ < kStopReportInterval) {
    ++unreported_stops_;
    stop_reported_ = false;
    return;
  }
  std::string line = "store " + path_ + " stopped writing (" + last_cause_ +
                     "); calls that write fail with kIOError until " +
                     (last_cause_no_space_ ? "space is freed on its disk: " + FreeSpaceAdvice()
                                           : "the disk is fixed and the store reopened");
  if (unreported_stops_ > 0) {
    line += " (it stopped " + std::to_string(unreported_stops_) +
            " more times since the last such message)";
  }
  Report(line);
  stop_reported_ever_ = true;
  stop_reported_ = true;
  last_stop_report_ = now;
  unreported_stops_ = 0;
}

std::string RocksDbStorage::FreeSpaceAdvice() const {
  return "it writes again by itself within 5 seconds of " +
         std::to_string(resume_free_bytes_ >> 20) + " MiB being free";
}

void RocksDbStorage::Report(const std::string& message) const {
  if (log_) log_(message);
}

std::optional<uint64_t> RocksDbStorage::CurrentLogNumber() {
  std::unique_ptr<rocksdb::LogFile> log;
  if (!db_->GetCurrentWalFile(&log).ok() || !log) return std::nullopt;
  return log->LogNumber();
}

Status RocksDbStorage::ResumeAfterDiskError() {
  std::lock_guard lock(resume_mu_);
  if (!disk_errors_->stopped.load(std::memory_order_acquire)) {
    uint64_t failed = disk_errors_->failed_log.load(std::memory_order_acquire);
    if (failed == 0) return Status::OK();
    // A log write failed, in a call that has not returned yet (it stops the store) or before a
    // resume that replaced the file.
    const std::optional<uint64_t> current = CurrentLogNumber();
    if (current && *current != failed) {
      disk_errors_->failed_log.compare_exchange_strong(failed, 0);
      return Status::OK();
    }
    return Status::IOError("store " + path_ +
                           ": a write to its log file failed just now; retry the call");
  }
  const auto now = std::chrono::steady_clock::now();
  // A failed attempt is not repeated at once: callers retrying in a loop would otherwise make
  // RocksDB try to flush for each call.
  if (now < next_resume_) return last_resume_error_;
  next_resume_ = now + kResumeInterval;
  // OK at once when RocksDB is not stopped (it resumed by itself), Busy while it is recovering
  // by itself from a full disk; otherwise flushes the memtables to new table files and starts a
  // new log file, which fails again while the disk still does.
  const rocksdb::Status s = db_->Resume();
  if (!s.ok()) {
    if (s.IsNoSpace() || (s.IsBusy() && last_cause_no_space_)) {
      last_resume_error_ =
          Status::IOError("store " + path_ + " cannot write: its disk is full (" + last_cause_ +
                          "); " + FreeSpaceAdvice() + ", and keeps every acknowledged record");
    } else if (s.IsBusy()) {
      last_resume_error_ = Status::IOError("store " + path_ + " is recovering from a disk error (" +
                                           last_cause_ + "); retry the call");
    } else {
      last_resume_error_ = Status::IOError(
          "store " + path_ + " stopped writing after a disk error and cannot resume (" +
          s.ToString() +
          "); fix the disk, then close and reopen the store: every acknowledged record is kept");
    }
    return last_resume_error_;
  }
  // Resumed. On a new log file, unless the one whose write failed is still current (or the
  // current one cannot be told, which is taken for the same).
  if (uint64_t failed = disk_errors_->failed_log.load(std::memory_order_acquire); failed != 0) {
    const std::optional<uint64_t> current = CurrentLogNumber();
    if (!current || *current == failed) {
      last_resume_error_ = Status::IOError(
          "store " + path_ + " stopped writing after a write to its log file failed (" +
          last_cause_ +
          "), and cannot resume in place: RocksDB would write to that file again. Close and "
          "reopen the store once its disk has space and works: every acknowledged record is kept");
      next_resume_ = std::chrono::steady_clock::time_point::max();  // for good
      Report(last_resume_error_.message());
      return last_resume_error_;
    }
    // Unless another log write failed meanwhile.
    disk_errors_->failed_log.compare_exchange_strong(failed, 0);
  }
  disk_errors_->stopped.store(false, std::memory_order_release);
  next_resume_ = {};
  last_resume_error_ = Status::OK();
  if (stop_noted_ && stop_reported_) {
    const auto stopped_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - stopped_since_).count();
    Report("store " + path_ + " writes again, after " + std::to_string(stopped_ms) +
           " ms stopped by a disk error");
  }
  stop_noted_ = false;
  return Status::OK();
}

Status RocksDbStorage::Flush() {
  rocksdb::FlushOptions options;
  options.wait = true;
  return FromRocksDb(db_->Flush(options, handles_), "flushing store " + path_);
}

Status RocksDbStorage::CompactRecords() {
  return FromRocksDb(db_->CompactRange(rocksdb::CompactRangeOptions(), records_, nullptr, nullptr),
                     "compacting store " + path_);
}

std::size_t RocksDbStorage::StripeIndex(std::string_view key) const {
  return std::hash<std::string_view>{}(key) % kStripes;
}

uint64_t RocksDbStorage::WriteVersion() const { return db_->GetLatestSequenceNumber(); }

Status RocksDbStorage::Update(std::string_view key, Decide decide, Durability durability,
                              std::optional<uint64_t> absent_since) {
  const ScopedPerfCountersOff counters_off;
  const std::size_t stripe = StripeIndex(key);
  std::lock_guard lock(stripes_[stripe]);
  LastWrite& last = last_writes_[stripe];
  std::optional<Record> stored;
  // Every write takes a new sequence number, and a write of `key` holds this stripe's lock
  // until it is visible: an unchanged sequence number means `key` is still absent (compaction
  // only ever removes records).
  if (absent_since && *absent_since == WriteVersion()) {
    // stored stays absent
  } else if (!last.key.empty() && last.key == key && last.expires > filter_horizon_->load()) {
    IDEM_RETURN_IF_ERROR(DecodeRecordInto(key, last.value, stored.emplace()));
  } else {
    IDEM_ASSIGN_OR_RETURN(stored, Read(key));
  }
  // Taken before `decide`, which may move from `stored`.
  const bool had_record = stored.has_value();
  const int64_t stored_expires = had_record ? ToMicros(stored->expires) : 0;
  const Record* next = decide(stored);
  if (next == nullptr) return Status::OK();

  // The record is encoded straight into the stripe's copy of the last write (reusing its
  // buffer), which stops naming a key until the write succeeds. The batch and the index key
  // are per-thread buffers: a write allocates nothing once they have grown.
  last.key.clear();
  EncodeRecordInto(*next, last.value);
  thread_local rocksdb::WriteBatch batch;
  thread_local std::string index_key;
  batch.Clear();
  rocksdb::Status s = batch.Put(records_, AsSlice(key), last.value);
  const int64_t expires = ToMicros(next->expires);
  if (!had_record || stored_expires != expires) {
    if (had_record && s.ok()) {
      ExpiryIndexKeyInto(stored_expires, key, index_key);
      s = batch.Delete(by_expiry_, index_key);
    }
    if (s.ok()) {
      ExpiryIndexKeyInto(expires, key, index_key);
      s = batch.Put(by_expiry_, index_key, rocksdb::Slice());
    }
  }
  Status written = s.ok() ? Write(durability, &batch, "writing record", key)
                          : FromRocksDb(s, "writing record " + EscapeKey(key));
  written_at_[stripe] = WriteVersion();
  if (written.ok() && last.value.size() <= kLastWriteMaxBytes) {
    last.key.assign(key);
    last.expires = expires;
  } else {
    // Nothing is kept for a failed write or a large record (a large buffer is let go).
    if (last.value.capacity() > kLastWriteMaxBytes) std::string().swap(last.value);
  }
  // A large batch is not kept for the thread's next write either.
  if (batch.GetDataSize() > kReadBufferKeepBytes) batch = rocksdb::WriteBatch();
  return written;
}

Result<std::optional<Record>> RocksDbStorage::Read(std::string_view key) {
  const ScopedPerfCountersOff counters_off;
  // A value found in a memtable is copied into the slice's own buffer: one buffer per thread,
  // kept between reads, spares a malloc and a free per read (a replay is little more than this).
  thread_local rocksdb::PinnableSlice value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), records_, AsSlice(key), &value);
  // Unpins a block-cache entry at once (it must not outlive the database); a buffer grown by a
  // large record is let go.
  struct Release {
    ~Release() {
      value.Reset();
      if (value.GetSelf()->capacity() > kReadBufferKeepBytes) std::string().swap(*value.GetSelf());
    }
  } release;
  if (s.IsNotFound()) return std::optional<Record>();
  if (!s.ok()) return FromRocksDb(s, "reading record " + EscapeKey(key));
  std::optional<Record> record(std::in_place);
  IDEM_RETURN_IF_ERROR(DecodeRecordInto(key, value.ToStringView(), *record));
  return record;
}

Result<bool> RocksDbStorage::Remove(std::string_view key, Durability durability) {
  const ScopedPerfCountersOff counters_off;
  const std::size_t stripe = StripeIndex(key);
  std::lock_guard lock(stripes_[stripe]);
  last_writes_[stripe].Forget(key);
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), records_, AsSlice(key), &value);
  if (s.IsNotFound()) return false;
  if (!s.ok()) return FromRocksDb(s, "reading record " + EscapeKey(key));
  rocksdb::WriteBatch batch;
  s = batch.Delete(records_, AsSlice(key));
  if (const auto expires = PeekExpiresMicros(value); s.ok() && expires) {
    s = batch.Delete(by_expiry_, ExpiryIndexKey(*expires, key));
  } else if (s.ok()) {
    // A damaged value names no expiry: find the key's entry in the whole index (a rare repair),
    // since an entry left behind could later purge a new record under the same key.
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), by_expiry_));
    for (it->SeekToFirst(); it->Valid() && s.ok(); it->Next()) {
      if (it->key().size() >= 8 && it->key().ToStringView().substr(8) == key) {
        s = batch.Delete(by_expiry_, it->key());
      }
    }
    if (s.ok()) s = it->status();
  }
  if (!s.ok()) return FromRocksDb(s, "removing record " + EscapeKey(key));
  const Status written = Write(durability, &batch, "removing record", key);
  written_at_[stripe] = WriteVersion();
  IDEM_RETURN_IF_ERROR(written);
  return true;
}

Status RocksDbStorage::Scan(const ScanOptions& options, FunctionRef<bool(Record&&)> visit) {
  const ScopedPerfCountersOff counters_off;
  rocksdb::ReadOptions read_options;
  // A scan (idem dump, Scan) reads every block once: keeping them would evict what the
  // requests use, and would grow the memory a scan needs.
  read_options.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read_options, records_));
  const std::string_view start = options.start_after.empty() || options.start_after < options.prefix
                                     ? options.prefix
                                     : options.start_after;
  for (it->Seek(AsSlice(start)); it->Valid(); it->Next()) {
    const std::string_view key = it->key().ToStringView();
    if (key.substr(0, options.prefix.size()) != options.prefix) break;
    if (!options.start_after.empty() && key == options.start_after) continue;
    IDEM_ASSIGN_OR_RETURN(Record record, DecodeRecord(key, it->value().ToStringView()));
    if (!visit(std::move(record))) return Status::OK();
  }
  return FromRocksDb(it->status(), "scanning records");
}

Result<uint64_t> RocksDbStorage::Purge(TimePoint now, const PurgeOptions& options) {
  const ScopedPerfCountersOff counters_off;
  std::lock_guard purge_lock(purge_mu_);
  const int64_t now_micros = ToMicros(now);
  if (!options.dry_run) IDEM_RETURN_IF_ERROR(AdvanceFilterHorizon(now));
  // Entries after the horizon are exact (see filter_horizon_): their records are deleted
  // without reading them. Entries at or before it may have lost their record to a compaction
  // filter, and the key may hold a newer record since: those are checked first.
  const int64_t verify_up_to = filter_horizon_->load();
  // Index entries at or before `now` are due; iterate up to (now + 1 microsecond).
  const std::string end = ExpiryIndexKey(now_micros + 1, {});
  rocksdb::ReadOptions read_options;
  const rocksdb::Slice upper(end);
  read_options.iterate_upper_bound = &upper;
  // A purge reads each index block once: it does not evict the records' working set for them.
  read_options.fill_cache = false;
  // An explicit snapshot: DeleteDue compares its sequence number with the stripes' writes.
  struct Snapshot {
    rocksdb::DB* db;
    const rocksdb::Snapshot* snapshot;
    ~Snapshot() { db->ReleaseSnapshot(snapshot); }
  } snapshot{db_.get(), db_->GetSnapshot()};
  read_options.snapshot = snapshot.snapshot;
  const uint64_t seen_at = snapshot.snapshot->GetSequenceNumber();
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read_options, by_expiry_));

  uint64_t purged = 0;
  std::string smallest_key, largest_key, last_index_key;
  std::vector<std::pair<int64_t, std::string>> batch;
  auto flush = [&]() -> Status {
    IDEM_ASSIGN_OR_RETURN(uint64_t deleted, DeleteDue(batch, now_micros, verify_up_to, seen_at));
    purged += deleted;
    batch.clear();
    if (options.progress) options.progress(purged);
    return Status::OK();
  };
  uint64_t visited = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const std::string_view index_key = it->key().ToStringView();
    std::string key(index_key.substr(8));
    const int64_t expires = ExpiryOfIndexKey(index_key);
    last_index_key.assign(index_key);
    if (smallest_key.empty() || key < smallest_key) smallest_key = key;
    if (key > largest_key) largest_key = key;
    if (options.dry_run) {
      IDEM_ASSIGN_OR_RETURN(std::optional<Record> stored, Read(key));
      if (stored && ToMicros(stored->expires) == expires) ++purged;
      if (options.progress && ++visited % kPurgeBatch == 0) options.progress(purged);
      continue;
    }
    batch.emplace_back(expires, std::move(key));
    if (batch.size() == kPurgeBatch) IDEM_RETURN_IF_ERROR(flush());
  }
  IDEM_RETURN_IF_ERROR(FromRocksDb(it->status(), "scanning the expiry index"));
  if (options.dry_run || last_index_key.empty()) return purged;
  IDEM_RETURN_IF_ERROR(flush());

  // One range tombstone instead of a point delete per entry: the next purge's seek does not
  // walk over thousands of tombstones. The range ends just after the last entry visited, so an
  // entry written meanwhile beyond it is kept.
  last_index_key += '\0';
  rocksdb::WriteBatch trim;
  IDEM_RETURN_IF_ERROR(FromRocksDb(
      trim.DeleteRange(by_expiry_, ExpiryIndexKey(std::numeric_limits<int64_t>::min(), {}),
                       last_index_key),
      "trimming the expiry index"));
  IDEM_RETURN_IF_ERROR(Write(Durability::kBuffered, &trim, "trimming the expiry index"));
  if (options.compact && purged > 0) {
    const rocksdb::Slice begin(smallest_key), end_key(largest_key);
    IDEM_RETURN_IF_ERROR(
        FromRocksDb(db_->CompactRange(rocksdb::CompactRangeOptions(), records_, &begin, &end_key),
                    "compacting purged records"));
  }
  return purged;
}

Result<uint64_t> RocksDbStorage::DeleteDue(
    const std::vector<std::pair<int64_t, std::string>>& entries, int64_t now_micros,
    int64_t verify_up_to, uint64_t seen_at) {
  if (entries.empty()) return uint64_t{0};
  // Lock the stripes of the whole batch in index order: Update holds one stripe at a time, so
  // this cannot deadlock, and no Update can re-create a key between our read and our delete.
  std::vector<std::size_t> stripes;
  stripes.reserve(entries.size());
  for (const auto& entry : entries) stripes.push_back(StripeIndex(entry.second));
  std::sort(stripes.begin(), stripes.end());
  stripes.erase(std::unique(stripes.begin(), stripes.end()), stripes.end());
  for (std::size_t stripe : stripes) stripes_[stripe].lock();
  struct Unlock {
    RocksDbStorage* self;
    const std::vector<std::size_t>& stripes;
    ~Unlock() {
      for (std::size_t stripe : stripes) self->stripes_[stripe].unlock();
    }
  } unlock{this, stripes};

  rocksdb::WriteBatch batch;
  uint64_t due = 0;
  std::string unused;
  for (const auto& [expires, key] : entries) {
    if (expires > now_micros) continue;
    if (expires > verify_up_to) {
      // The index is exact here, but the entry comes from the purge's snapshot: if a key of
      // this stripe was written since, the entry must still be there (the writer may have
      // given the record a new expiry).
      if (written_at_[StripeIndex(key)] > seen_at) {
        rocksdb::Status read =
            db_->Get(rocksdb::ReadOptions(), by_expiry_, ExpiryIndexKey(expires, key), &unused);
        if (read.IsNotFound()) continue;
        if (!read.ok()) return FromRocksDb(read, "reading the expiry index");
      }
    } else {
      std::string value;
      rocksdb::Status read = db_->Get(rocksdb::ReadOptions(), records_, key, &value);
      if (read.IsNotFound()) continue;  // removed by a compaction filter
      if (!read.ok()) return FromRocksDb(read, "reading record " + EscapeKey(key));
      // The record must still carry the expiry this entry names: one created since the
      // filter removed the old one has a later expiry and its own index entry.
      const auto stored_expires = PeekExpiresMicros(value);
      if (!stored_expires || *stored_expires != expires) continue;
    }
    // The entry goes with the record, so that a purge cut short never counts it again.
    rocksdb::Status s = batch.Delete(records_, key);
    if (s.ok()) s = batch.Delete(by_expiry_, ExpiryIndexKey(expires, key));
    if (!s.ok()) return FromRocksDb(s, "purging record " + EscapeKey(key));
    last_writes_[StripeIndex(key)].Forget(key);
    ++due;
  }
  // Buffered: a purge lost in a crash is simply done again by the next one.
  IDEM_RETURN_IF_ERROR(Write(Durability::kBuffered, &batch, "purging records"));
  return due;
}

Status RocksDbStorage::Install(const RocksDbConfig& config, const std::string& staging,
                               const std::string& destination) {
  const std::shared_ptr<rocksdb::FileSystem> file_system =
      config.env ? config.env->GetFileSystem() : rocksdb::FileSystem::Default();
  const std::string parent = std::filesystem::path(destination).parent_path().string();
  IDEM_RETURN_IF_ERROR(
      FromRocksDb(file_system->RenameFile(staging, destination, rocksdb::IOOptions(), nullptr),
                  "installing " + EscapeControls(staging) + " as " + EscapeControls(destination)));
  std::unique_ptr<rocksdb::FSDirectory> directory;
  rocksdb::IOStatus synced =
      file_system->NewDirectory(parent, rocksdb::IOOptions(), &directory, nullptr);
  if (synced.ok()) synced = directory->Fsync(rocksdb::IOOptions(), nullptr);
  return FromRocksDb(synced, "syncing " + EscapeControls(parent));
}

Result<RocksDbStorage::Contents> RocksDbStorage::Inspect(const std::string& path) {
  namespace fs = std::filesystem;
  using Kind = Contents::Kind;
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return Contents{Kind::kNothing, ""};
    return Status::IOError("cannot read " + EscapeControls(path) + ": " + std::strerror(errno));
  }
  if (S_ISLNK(info.st_mode)) return Contents{Kind::kOther, "a symbolic link"};
  if (!S_ISDIR(info.st_mode)) return Contents{Kind::kOther, "a file, not a directory"};
  // A live owner may write a newer OPTIONS file and delete the one just listed before it is
  // read: then list again.
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::error_code error;
    bool empty = true;
    bool has_current = false;
    uint64_t newest = 0;
    std::string newest_name;
    for (fs::directory_iterator it(path, error), end; !error && it != end; it.increment(error)) {
      empty = false;
      const std::string name = it->path().filename().string();
      if (name == "CURRENT") has_current = true;
      constexpr std::string_view kPrefix = "OPTIONS-";
      if (name.size() <= kPrefix.size() || name.compare(0, kPrefix.size(), kPrefix) != 0) continue;
      uint64_t number = 0;
      const char* first = name.data() + kPrefix.size();
      const char* last = name.data() + name.size();
      const auto [stop, parsed] = std::from_chars(first, last, number);
      if (parsed == std::errc() && stop == last && (newest_name.empty() || number > newest)) {
        newest = number;
        newest_name = name;
      }
    }
    if (error) {
      return Status::IOError("cannot list " + EscapeControls(path) + ": " + error.message());
    }
    if (empty) return Contents{Kind::kNothing, ""};
    if (!has_current) return Contents{Kind::kOther, "files, but no RocksDB database (no CURRENT)"};
    if (newest_name.empty()) {
      return Contents{Kind::kOther,
                      "a RocksDB database without an OPTIONS file, which tells whose it is"};
    }
    std::ifstream options(path + "/" + newest_name);
    if (!options) {
      if (::access((path + "/" + newest_name).c_str(), F_OK) != 0 && errno == ENOENT) continue;
      return Status::IOError("cannot read " + EscapeControls(path + "/" + newest_name));
    }
    // Sections such as `[CFOptions "by_expiry"]` name the column families.
    constexpr std::string_view kSection = "[CFOptions \"";
    std::vector<std::string> families;
    for (std::string line; std::getline(options, line);) {
      if (line.size() > kSection.size() + 2 && line.compare(0, kSection.size(), kSection) == 0 &&
          line.compare(line.size() - 2, 2, "\"]") == 0) {
        families.push_back(line.substr(kSection.size(), line.size() - kSection.size() - 2));
      }
    }
    const auto has = [&](std::string_view family) {
      return std::find(families.begin(), families.end(), family) != families.end();
    };
    if (has(kByExpiryFamily) && has(kMetaFamily)) return Contents{Kind::kIdem, ""};
    std::string names;
    for (const std::string& family : families) names += (names.empty() ? "" : ", ") + family;
    return Contents{Kind::kOther, "a RocksDB database whose column families (" +
                                      EscapeControls(names) + ") are not idem's (" +
                                      rocksdb::kDefaultColumnFamilyName + ", " + kByExpiryFamily +
                                      ", " + kMetaFamily + ")"};
  }
  return Status::IOError("the OPTIONS files of " + EscapeControls(path) +
                         " kept changing while they were read");
}

}  // namespace idem::storage
