// RocksDbStorage's purge: the expiry index read up to now, the records it names deleted in
// batches under their stripe locks, the index trimmed, and the purged range compacted.

#include <fmt/format.h>
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "storage/rocksdb/fs/rocksdb_status.h"
#include "storage/rocksdb/layout.h"
#include "storage/rocksdb/record_codec.h"
#include "storage/rocksdb/rocksdb_options.h"
#include "storage/rocksdb/rocksdb_storage.h"
#include "util/check.h"
#include "util/deadline.h"
#include "util/escape.h"
#include "util/time.h"

namespace idem::storage {
namespace {

// Purge deletes records in batches of this many keys, holding their stripe locks meanwhile.
// Small enough that a purge never holds many locks at once (ThreadSanitizer tracks at most 64
// per thread), large enough that one write carries many deletes.
constexpr std::size_t kPurgeBatch = 32;

// The expiry index entries due at `now_micros` (those at or before it), read from an explicit
// snapshot: DeleteDue compares its sequence number with the stripes' writes. A purge reads each
// index block once: it does not evict the records' working set for them.
class DueIndexEntries {
 public:
  DueIndexEntries(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* by_expiry, int64_t now_micros)
      : db_(db), end_(ExpiryIndexKey(now_micros + 1, {})), snapshot_(db.GetSnapshot()) {
    rocksdb::ReadOptions read_options;
    read_options.iterate_upper_bound = &upper_;
    read_options.fill_cache = false;
    read_options.snapshot = snapshot_;
    it_.reset(db.NewIterator(read_options, by_expiry));
  }
  ~DueIndexEntries() {
    it_.reset();  // before the snapshot it reads
    db_.ReleaseSnapshot(snapshot_);
  }
  DueIndexEntries(const DueIndexEntries&) = delete;
  DueIndexEntries& operator=(const DueIndexEntries&) = delete;

  rocksdb::Iterator& iterator() { return *it_; }
  uint64_t seen_at() const { return snapshot_->GetSequenceNumber(); }

 private:
  rocksdb::DB& db_;
  const std::string end_;  // iterate up to (now + 1 microsecond)
  const rocksdb::Slice upper_{end_};
  const rocksdb::Snapshot* const snapshot_;
  std::unique_ptr<rocksdb::Iterator> it_;
};

}  // namespace

Result<uint64_t> RocksDbStorage::Purge(const PurgeOptions& options) {
  const ScopedPerfCountersOff counters_off;
  util::MutexLock purge_lock(purge_mu_);
  const TimePoint now = Now();
  const int64_t now_micros = ToMicros(now);
  if (options.dry_run) {
    DueIndexEntries due(*db_, by_expiry_, now_micros);
    IDEM_RETURN_IF_ERROR(ReportPurgeTotal(due.iterator(), options));
    return CountDue(due.iterator(), options.progress);
  }
  IDEM_RETURN_IF_ERROR(AdvanceFilterHorizon(now));
  // Entries after the horizon are exact (see filter_horizon_): their records are deleted
  // without reading them. Entries at or before it may have lost their record to a compaction
  // filter, and the key may hold a newer record since: those are checked first.
  const int64_t verify_up_to = filter_horizon_->load();
  Result<PurgePass> deleted = [&]() IDEM_REQUIRES(purge_mu_) -> Result<PurgePass> {
    // The snapshot goes before the compaction below: as long as it lives, compaction must keep
    // every record it sees, deleted or not (measured: a purge of half the records gave back
    // nothing).
    DueIndexEntries due(*db_, by_expiry_, now_micros);
    IDEM_RETURN_IF_ERROR(ReportPurgeTotal(due.iterator(), options));
    return DeleteDueEntries(due.iterator(), now_micros, verify_up_to, due.seen_at(),
                            options.progress);
  }();
  IDEM_ASSIGN_OR_RETURN(PurgePass pass, std::move(deleted));
  if (pass.last_index_key.empty()) return pass.purged;
  IDEM_RETURN_IF_ERROR(TrimExpiryIndex(pass.last_index_key));
  if (options.compact && pass.purged > 0) IDEM_RETURN_IF_ERROR(CompactPurged(pass));
  return pass.purged;
}

Status RocksDbStorage::CompactPurged(const PurgePass& pass) {
  // The deletes are in the log and the memtables first: flushing every family lets RocksDB
  // delete the log files that hold them (and any older ones a family still held).
  IDEM_RETURN_IF_ERROR(Flush());
  // Then the records and the index entries the purge removed leave the table files.
  const rocksdb::Slice begin(pass.smallest_key), end(pass.largest_key);
  IDEM_RETURN_IF_ERROR(
      FromRocksDb(db_->CompactRange(rocksdb::CompactRangeOptions(), records_, &begin, &end),
                  "compacting purged records"));
  const rocksdb::Slice index_end(pass.last_index_key);
  IDEM_RETURN_IF_ERROR(FromRocksDb(
      db_->CompactRange(rocksdb::CompactRangeOptions(), by_expiry_, nullptr, &index_end),
      "compacting the purged expiry index"));
  WaitForBackgroundJobs();
  return Status::OK();
}

// CompactRange returns once its compaction is done, which can be before the background thread
// that ran it has deleted the compaction's input files: it deletes them after marking the
// compaction done, outside the database's mutex, and a waiter woken meanwhile returns (seen under
// load: a purged 5.5 MB table file still on disk when the next Begin measured the disk quota,
// which refused it). A job counts as running until its deletions are over.
void RocksDbStorage::WaitForBackgroundJobs() {
  const util::Deadline deadline(kBackgroundJobsWait);
  for (;;) {
    uint64_t compactions = 0;
    uint64_t flushes = 0;
    if (!db_->GetIntProperty(rocksdb::DB::Properties::kNumRunningCompactions, &compactions) ||
        !db_->GetIntProperty(rocksdb::DB::Properties::kNumRunningFlushes, &flushes)) {
      return;
    }
    if ((compactions == 0 && flushes == 0) || deadline.Passed()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Status RocksDbStorage::ReportPurgeTotal(rocksdb::Iterator& it, const PurgeOptions& options) {
  if (!options.progress_total) return Status::OK();
  // The same snapshot as the pass that follows: exactly the entries it will visit.
  uint64_t entries = 0;
  for (it.SeekToFirst(); it.Valid(); it.Next()) ++entries;
  IDEM_RETURN_IF_ERROR(FromRocksDb(it.status(), "counting the expiry index"));
  options.progress_total(entries);
  return Status::OK();
}

Result<uint64_t> RocksDbStorage::CountDue(rocksdb::Iterator& it,
                                          const std::function<void(uint64_t)>& progress) {
  uint64_t due = 0;
  uint64_t visited = 0;
  std::optional<Record> stored;  // its buffers reused from one record to the next
  for (it.SeekToFirst(); it.Valid(); it.Next()) {
    const std::string_view index_key = it.key().ToStringView();
    IDEM_RETURN_IF_ERROR(ReadRecordInto(index_key.substr(8), stored));
    if (stored && ToMicros(stored->expires) == ExpiryOfIndexKey(index_key)) ++due;
    if (progress && ++visited % kPurgeBatch == 0) progress(due);
  }
  IDEM_RETURN_IF_ERROR(FromRocksDb(it.status(), "scanning the expiry index"));
  if (progress) progress(due);  // the total, as a purge's last batch reports it
  return due;
}

Result<RocksDbStorage::PurgePass> RocksDbStorage::DeleteDueEntries(
    rocksdb::Iterator& it, int64_t now_micros, int64_t verify_up_to, uint64_t seen_at,
    const std::function<void(uint64_t)>& progress) {
  PurgePass pass;
  std::vector<std::pair<int64_t, std::string>> batch;
  auto flush = [&]() IDEM_REQUIRES(purge_mu_) -> Status {
    IDEM_ASSIGN_OR_RETURN(uint64_t deleted, DeleteDue(batch, now_micros, verify_up_to, seen_at));
    pass.purged += deleted;
    batch.clear();
    if (progress) progress(pass.purged);
    return Status::OK();
  };
  for (it.SeekToFirst(); it.Valid(); it.Next()) {
    const std::string_view index_key = it.key().ToStringView();
    std::string key(index_key.substr(8));
    pass.last_index_key.assign(index_key);
    if (pass.smallest_key.empty() || key < pass.smallest_key) pass.smallest_key = key;
    if (key > pass.largest_key) pass.largest_key = key;
    batch.emplace_back(ExpiryOfIndexKey(index_key), std::move(key));
    if (batch.size() == kPurgeBatch) IDEM_RETURN_IF_ERROR(flush());
  }
  IDEM_RETURN_IF_ERROR(FromRocksDb(it.status(), "scanning the expiry index"));
  // The last batch, partial or empty (progress hears the total either way).
  if (!pass.last_index_key.empty()) IDEM_RETURN_IF_ERROR(flush());
  return pass;
}

Status RocksDbStorage::TrimExpiryIndex(const std::string& last_index_key) {
  // One range tombstone instead of a point delete per entry: the next purge's seek does not
  // walk over thousands of tombstones. The range ends just after the last entry visited, so an
  // entry written meanwhile beyond it is kept.
  rocksdb::WriteBatch trim;
  IDEM_RETURN_IF_ERROR(FromRocksDb(
      trim.DeleteRange(by_expiry_, ExpiryIndexKey(std::numeric_limits<int64_t>::min(), {}),
                       last_index_key + '\0'),
      "trimming the expiry index"));
  return Write(Durability::kBuffered, &trim, "trimming the expiry index");
}

Result<uint64_t> RocksDbStorage::DeleteDue(
    const std::vector<std::pair<int64_t, std::string>>& entries, int64_t now_micros,
    int64_t verify_up_to, uint64_t seen_at) {
  if (entries.empty()) return uint64_t{0};
  if (WriteGroup* group = ThreadWriteGroup()) WriteGroupHeld(*group);
  // Lock the stripes of the whole batch in index order: Update waits for one stripe at a time
  // holding no other (a write group takes more only by try_lock), so this cannot deadlock, and
  // no Update can re-create a key between our read and our delete.
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
      IDEM_DCHECK(RecordExpiresAt(key, expires));
    } else {
      std::string value;
      rocksdb::Status read = db_->Get(rocksdb::ReadOptions(), records_, key, &value);
      if (read.IsNotFound()) continue;  // removed by a compaction filter
      if (!read.ok()) return FromRocksDb(read, fmt::format("reading record {}", EscapeKey(key)));
      // The record must still carry the expiry this entry names: one created since the
      // filter removed the old one has a later expiry and its own index entry.
      const auto stored_expires = PeekExpiresMicros(value);
      if (!stored_expires || *stored_expires != expires) continue;
    }
    // The entry goes with the record, so that a purge cut short never counts it again.
    rocksdb::Status s = batch.Delete(records_, key);
    if (s.ok()) s = batch.Delete(by_expiry_, ExpiryIndexKey(expires, key));
    if (!s.ok()) return FromRocksDb(s, fmt::format("purging record {}", EscapeKey(key)));
    last_writes_[StripeIndex(key)].Forget(key);
    ++due;
  }
  // Buffered: a purge lost in a crash is simply done again by the next one.
  IDEM_RETURN_IF_ERROR(Write(Durability::kBuffered, &batch, "purging records"));
  return due;
}

}  // namespace idem::storage
