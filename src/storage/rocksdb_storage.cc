// The reads and writes of records, and purge. Opening and the meta values are in
// rocksdb_storage_open.cc; every write and what a failed one leaves to do, in
// rocksdb_storage_write.cc.

#include "storage/rocksdb_storage.h"

#include <fmt/format.h>
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "storage/engine_options.h"
#include "storage/layout.h"
#include "storage/log_failure_watch.h"
#include "storage/record_codec.h"
#include "storage/rocksdb_status.h"
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

Status RocksDbStorage::Flush() {
  rocksdb::FlushOptions options;
  options.wait = true;
  return FromRocksDb(db_->Flush(options, handles_), fmt::format("flushing store {}", path_));
}

Status RocksDbStorage::CompactRecords() {
  return FromRocksDb(db_->CompactRange(rocksdb::CompactRangeOptions(), records_, nullptr, nullptr),
                     fmt::format("compacting store {}", path_));
}

std::size_t RocksDbStorage::StripeIndex(std::string_view key) const {
  return std::hash<std::string_view>{}(key) % kStripes;
}

uint64_t RocksDbStorage::WriteVersion() const { return db_->GetLatestSequenceNumber(); }

Status RocksDbStorage::Update(std::string_view key, Decide decide, Durability durability,
                              std::optional<uint64_t> absent_since) {
  return Commit(key, decide, nullptr, durability, absent_since);
}

Status RocksDbStorage::UpdateWithWrites(std::string_view key, Decide decide, const WriteSet& writes,
                                        Durability durability) {
  return Commit(key, decide, writes.empty() ? nullptr : &writes, durability, std::nullopt);
}

Status RocksDbStorage::Commit(std::string_view key, Decide decide, const WriteSet* writes,
                              Durability durability, std::optional<uint64_t> absent_since) {
  const ScopedPerfCountersOff counters_off;
  const std::size_t stripe = StripeIndex(key);
  WriteGroup* group = ThreadWriteGroup();
  const bool grouped =
      group != nullptr && !engine::SyncedBeforeReturning(durability) && writes == nullptr;
  if (group != nullptr &&
      (!grouped || group->Holds(stripe) || group->held.size() >= kMostGroupedWrites)) {
    WriteGroupHeld(*group);
  }
  std::unique_lock lock(stripes_[stripe], std::defer_lock);
  if (!grouped) {
    lock.lock();
  } else if (!lock.try_lock()) {
    // Never wait for a stripe while holding others.
    WriteGroupHeld(*group);
    lock.lock();
  }
  // The table keys' locks come after the record's (the one lock order: see TableLocks).
  std::optional<TableLocks> table_locks;
  if (writes != nullptr) table_locks.emplace(*this, *writes);
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
    IDEM_RETURN_IF_ERROR(ReadRecordInto(key, stored));
  }
  // Taken before `decide`, which may move from `stored`.
  const std::optional<int64_t> stored_expires =
      stored ? std::optional<int64_t>(ToMicros(stored->expires)) : std::nullopt;
  // The counter is above every token stored, so `above` needs no check.
  const TimePoint now = Now();
  const Record* next =
      decide(stored, now, [this, now](uint64_t /*above*/) { return NextToken(now); });
  if (next == nullptr) return Status::OK();
  const int64_t expires = ToMicros(next->expires);
  if (grouped) {
    // Written with the group's others; the stripe stays locked until then.
    WriteGroup::Held held{stripe, std::string(key), {}, expires};
    EncodeRecordInto(*next, held.encoded);
    group->batch->SetSavePoint();
    const rocksdb::Status s =
        AddRecordWrite(*group->batch, key, held.encoded, {}, stored_expires, expires);
    if (!s.ok()) {
      // Nothing of this record stays in the group's batch.
      static_cast<void>(group->batch->RollbackToSavePoint());
      return FromRocksDb(s, fmt::format("writing record {}", EscapeKey(key)));
    }
    static_cast<void>(group->batch->PopSavePoint());
    group->held.push_back(std::move(held));
    if (durability == Durability::kPeriodic) group->durability = durability;
    lock.release();
    return Status::OK();
  }
  // The writes' versions are checked, and their tables made, once the record is to be written.
  std::vector<TableWrite> table_writes;
  if (writes != nullptr) {
    IDEM_ASSIGN_OR_RETURN(table_writes, PrepareTableWrites(*writes));
  }

  // The record is encoded straight into the stripe's copy of the last write (reusing its
  // buffer), which stops naming a key until the write succeeds. The batch and the index key
  // are per-thread buffers: a write allocates nothing once they have grown.
  last.key.clear();
  EncodeRecordInto(*next, last.value);
  thread_local rocksdb::WriteBatch batch;
  batch.Clear();
  const rocksdb::Status s =
      AddRecordWrite(batch, key, last.value, table_writes, stored_expires, expires);
  Status written = s.ok() ? Write(durability, &batch, "writing record", key)
                          : FromRocksDb(s, fmt::format("writing record {}", EscapeKey(key)));
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

rocksdb::Status RocksDbStorage::AddRecordWrite(rocksdb::WriteBatch& batch, std::string_view key,
                                               const std::string& encoded,
                                               const std::vector<TableWrite>& table_writes,
                                               std::optional<int64_t> stored_expires,
                                               int64_t expires) {
  thread_local std::string index_key;
  rocksdb::Status s = batch.Put(records_, AsSlice(key), encoded);
  for (const TableWrite& write : table_writes) {
    if (s.ok()) s = batch.Put(write.family, AsSlice(write.key), write.encoded);
  }
  if (stored_expires != expires) {
    if (stored_expires && s.ok()) {
      ExpiryIndexKeyInto(*stored_expires, key, index_key);
      s = batch.Delete(by_expiry_, index_key);
    }
    if (s.ok()) {
      ExpiryIndexKeyInto(expires, key, index_key);
      s = batch.Put(by_expiry_, index_key, rocksdb::Slice());
    }
  }
  return s;
}

RocksDbStorage::WriteGroup& RocksDbStorage::ThreadGroupSlot() {
  thread_local WriteGroup group;
  return group;
}

bool RocksDbStorage::WriteGroup::Holds(std::size_t stripe) const {
  return std::ranges::any_of(held, [stripe](const Held& write) { return write.stripe == stripe; });
}

RocksDbStorage::WriteGroup* RocksDbStorage::ThreadWriteGroup() const {
  WriteGroup& group = ThreadGroupSlot();
  return group.storage == this ? &group : nullptr;
}

void RocksDbStorage::StartWriteGroup() {
  WriteGroup& group = ThreadGroupSlot();
  // One group at a time: an unfinished one is written first.
  if (group.storage != nullptr) {
    static_cast<void>(group.storage->FinishWriteGroup());
  }
  group.storage = this;
  if (!group.batch) group.batch = std::make_unique<rocksdb::WriteBatch>();
}

std::size_t RocksDbStorage::GroupedWrites() const {
  const WriteGroup* group = ThreadWriteGroup();
  return group == nullptr ? 0 : group->outcomes.size() + group->held.size();
}

std::vector<Status> RocksDbStorage::FinishWriteGroup() {
  WriteGroup* group = ThreadWriteGroup();
  if (group == nullptr) return {};
  WriteGroupHeld(*group);
  group->storage = nullptr;
  // A batch grown large is not kept for the thread's next group (Clear keeps its buffer).
  if (group->batch->Data().capacity() > kGroupBatchKeepBytes) group->batch.reset();
  return std::exchange(group->outcomes, {});
}

void RocksDbStorage::WriteGroupHeld(WriteGroup& group) {
  if (group.held.empty()) return;
  const Status written = Write(group.durability, group.batch.get(), "writing records", {});
  group.durability = Durability::kBuffered;
  const uint64_t version = WriteVersion();
  for (WriteGroup::Held& held : group.held) {
    written_at_[held.stripe] = version;
    LastWrite& last = last_writes_[held.stripe];
    if (written.ok() && held.encoded.size() <= kLastWriteMaxBytes) {
      last.key = std::move(held.key);
      last.value = std::move(held.encoded);
      last.expires = held.expires;
    } else {
      last.key.clear();
    }
    stripes_[held.stripe].unlock();
    group.outcomes.push_back(written);
  }
  group.held.clear();
  group.batch->Clear();
}

RocksDbStorage::TimePoint RocksDbStorage::Now() const {
  return util::TruncateToMicros(clock_->Now());
}

Result<Storage::ReadResult> RocksDbStorage::Read(std::string_view key) {
  // Decoded where the caller gets it, one return of one object: a replay is little more than
  // this read, and each move of a record on its way out cost as much as a tenth of it.
  Result<ReadResult> result = ReadResult{.write_version = WriteVersion()};
  if (Status read = ReadRecordInto(key, result->record); read.ok()) {
    result->now = Now();
  } else {
    result = std::move(read);
  }
  return result;
}

Status RocksDbStorage::ReadRecordInto(std::string_view key, std::optional<Record>& record) {
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
  if (s.IsNotFound()) {
    record.reset();
    return Status::OK();
  }
  if (!s.ok()) return FromRocksDb(s, fmt::format("reading record {}", EscapeKey(key)));
  if (!record) record.emplace();
  return DecodeRecordInto(key, value.ToStringView(), *record);
}

Result<bool> RocksDbStorage::Remove(std::string_view key, Durability durability) {
  const ScopedPerfCountersOff counters_off;
  if (WriteGroup* group = ThreadWriteGroup()) WriteGroupHeld(*group);
  const std::size_t stripe = StripeIndex(key);
  std::lock_guard lock(stripes_[stripe]);
  last_writes_[stripe].Forget(key);
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), records_, AsSlice(key), &value);
  if (s.IsNotFound()) return false;
  if (!s.ok()) return FromRocksDb(s, fmt::format("reading record {}", EscapeKey(key)));
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
  if (!s.ok()) return FromRocksDb(s, fmt::format("removing record {}", EscapeKey(key)));
  const Status written = Write(durability, &batch, "removing record", key);
  written_at_[stripe] = WriteVersion();
  IDEM_RETURN_IF_ERROR(written);
  return true;
}

namespace {

// A snapshot of the database and the storage's time when it was taken: the records a scan in it
// shows are those live then.
class RocksDbView final : public ReadView {
 public:
  RocksDbView(rocksdb::DB& db, Storage::TimePoint now)
      : db_(db), snapshot_(db.GetSnapshot()), now_(now) {}
  ~RocksDbView() override { db_.ReleaseSnapshot(snapshot_); }

  const rocksdb::Snapshot* snapshot() const { return snapshot_; }
  Storage::TimePoint now() const { return now_; }

 private:
  rocksdb::DB& db_;
  const rocksdb::Snapshot* const snapshot_;
  const Storage::TimePoint now_;
};

}  // namespace

Result<std::unique_ptr<ReadView>> RocksDbStorage::OpenView() {
  return std::unique_ptr<ReadView>(std::make_unique<RocksDbView>(*db_, Now()));
}

Status RocksDbStorage::Scan(const ScanOptions& options,
                            FunctionRef<bool(Record&& record, TimePoint now)> visit,
                            ReadView* view) {
  const ScopedPerfCountersOff counters_off;
  // One time for the whole scan: it reads one snapshot (a view's: its own time).
  const TimePoint now = view != nullptr ? static_cast<const RocksDbView*>(view)->now() : Now();
  return ScanFamily(
      records_, options, "scanning records",
      [&](std::string_view key, std::string_view value) -> Result<bool> {
        IDEM_ASSIGN_OR_RETURN(Record record, DecodeRecord(key, value));
        return visit(std::move(record), now);
      },
      view);
}

Status RocksDbStorage::ScanFamily(
    rocksdb::ColumnFamilyHandle* family, const ScanOptions& options, std::string_view what,
    FunctionRef<Result<bool>(std::string_view key, std::string_view value)> visit, ReadView* view) {
  rocksdb::ReadOptions read_options;
  // A scan (idem dump, Scan) reads every block once: keeping them would evict what the
  // requests use, and would grow the memory a scan needs.
  read_options.fill_cache = false;
  // Only this storage's views are given to it.
  if (view != nullptr) read_options.snapshot = static_cast<const RocksDbView*>(view)->snapshot();
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read_options, family));
  const std::string_view start = options.start_after.empty() || options.start_after < options.prefix
                                     ? options.prefix
                                     : options.start_after;
  for (it->Seek(AsSlice(start)); it->Valid(); it->Next()) {
    const std::string_view key = it->key().ToStringView();
    if (key.substr(0, options.prefix.size()) != options.prefix) break;
    if (!options.start_after.empty() && key == options.start_after) continue;
    IDEM_ASSIGN_OR_RETURN(const bool go_on, visit(key, it->value().ToStringView()));
    if (!go_on) return Status::OK();
  }
  return FromRocksDb(it->status(), std::string(what));
}

Result<uint64_t> RocksDbStorage::Purge(const PurgeOptions& options) {
  const ScopedPerfCountersOff counters_off;
  std::lock_guard purge_lock(purge_mu_);
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
  Result<PurgePass> deleted = [&]() -> Result<PurgePass> {
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
  return FromRocksDb(
      db_->CompactRange(rocksdb::CompactRangeOptions(), by_expiry_, nullptr, &index_end),
      "compacting the purged expiry index");
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
  auto flush = [&]() -> Status {
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
