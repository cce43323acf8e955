// The reads and writes of records. Opening and the meta values are in rocksdb_storage_open.cc;
// every write and what a failed one leaves to do, in rocksdb_storage_write.cc; purge, in
// rocksdb_storage_purge.cc.

#include "storage/rocksdb/rocksdb_storage.h"

#include <fmt/format.h>
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "engine/state_machine.h"
#include "storage/rocksdb/fs/log_failure_watch.h"
#include "storage/rocksdb/fs/rocksdb_status.h"
#include "storage/rocksdb/layout.h"
#include "storage/rocksdb/record_codec.h"
#include "storage/rocksdb/rocksdb_options.h"
#include "util/check.h"
#include "util/escape.h"
#include "util/time.h"

namespace idem::storage {

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
  std::optional<Record> stored;
  IDEM_RETURN_IF_ERROR(ReadStoredLocked(key, stripe, absent_since, stored));
  // Taken before `decide`, which may move from `stored`.
  const std::optional<int64_t> stored_expires =
      stored ? std::optional<int64_t>(ToMicros(stored->expires)) : std::nullopt;
  std::optional<RecordSummary> before;
  if (watcher_ != nullptr && stored) before = RecordSummary::Of(*stored);
  // The counter is above every token stored, so `above` needs no check.
  const TimePoint now = Now();
  const Record* next =
      decide(stored, now, [this, now](uint64_t /*above*/) { return NextToken(now); });
  if (next == nullptr) return Status::OK();
  IDEM_DCHECK(engine::KeepsNoHolder(*next));
  if (grouped) {
    // Written with the group's others; the stripe stays locked until then.
    IDEM_RETURN_IF_ERROR(
        AddToWriteGroup(*group, stripe, key, *next, stored_expires, durability, std::move(before)));
    lock.release();
    return Status::OK();
  }
  IDEM_RETURN_IF_ERROR(WriteLocked(stripe, key, *next, writes, stored_expires, durability));
  if (watcher_ != nullptr) {
    const RecordSummary after = RecordSummary::Of(*next);
    watcher_->Written(key, before ? &*before : nullptr, &after, now);
  }
  return Status::OK();
}

Status RocksDbStorage::ReadStoredLocked(std::string_view key, std::size_t stripe,
                                        std::optional<uint64_t> absent_since,
                                        std::optional<Record>& stored) {
  const LastWrite& last = last_writes_[stripe];
  // Every write takes a new sequence number, and a write of `key` holds this stripe's lock
  // until it is visible: an unchanged sequence number means `key` is still absent (compaction
  // only ever removes records).
  if (absent_since && *absent_since == WriteVersion()) return Status::OK();
  if (!last.key.empty() && last.key == key && last.expires > filter_horizon_->load()) {
    // Only a write of `key` under this stripe's lock changes its record, and it updates the
    // copy; a filter removes only records at or before the horizon.
    IDEM_DCHECK(StoredValueIs(key, last.value));
    return DecodeRecordInto(key, last.value, stored.emplace());
  }
  return ReadRecordInto(key, stored);
}

bool RocksDbStorage::StoredValueIs(std::string_view key, std::string_view encoded) const {
  std::string value;
  return db_->Get(rocksdb::ReadOptions(), records_, AsSlice(key), &value).ok() && value == encoded;
}

bool RocksDbStorage::RecordExpiresAt(std::string_view key, int64_t expires) const {
  std::string value;
  if (!db_->Get(rocksdb::ReadOptions(), records_, AsSlice(key), &value).ok()) return false;
  const std::optional<int64_t> stored_expires = PeekExpiresMicros(value);
  return !stored_expires || *stored_expires == expires;
}

Status RocksDbStorage::AddToWriteGroup(WriteGroup& group, std::size_t stripe, std::string_view key,
                                       const Record& next, std::optional<int64_t> stored_expires,
                                       Durability durability,
                                       std::optional<RecordSummary>&& before) {
  const int64_t expires = ToMicros(next.expires);
  WriteGroup::Held held{stripe, std::string(key), {}, expires, std::move(before), std::nullopt};
  if (watcher_ != nullptr) held.after = RecordSummary::Of(next);
  EncodeRecordInto(next, held.encoded);
  group.batch->SetSavePoint();
  const rocksdb::Status s =
      AddRecordWrite(*group.batch, key, held.encoded, {}, stored_expires, expires);
  if (!s.ok()) {
    // Nothing of this record stays in the group's batch.
    static_cast<void>(group.batch->RollbackToSavePoint());
    return FromRocksDb(s, fmt::format("writing record {}", EscapeKey(key)));
  }
  static_cast<void>(group.batch->PopSavePoint());
  group.held.push_back(std::move(held));
  if (durability == Durability::kPeriodic) group.durability = durability;
  return Status::OK();
}

Status RocksDbStorage::WriteLocked(std::size_t stripe, std::string_view key, const Record& next,
                                   const WriteSet* writes, std::optional<int64_t> stored_expires,
                                   Durability durability) {
  const int64_t expires = ToMicros(next.expires);
  // The writes' versions are checked, and their tables made, once the record is to be written.
  std::vector<TableWrite> table_writes;
  if (writes != nullptr) {
    IDEM_ASSIGN_OR_RETURN(table_writes, PrepareTableWrites(*writes));
  }

  // The record is encoded straight into the stripe's copy of the last write (reusing its
  // buffer), which stops naming a key until the write succeeds. The batch and the index key
  // are per-thread buffers: a write allocates nothing once they have grown.
  LastWrite& last = last_writes_[stripe];
  last.key.clear();
  EncodeRecordInto(next, last.value);
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
  const TimePoint now = watcher_ != nullptr ? Now() : TimePoint();
  for (WriteGroup::Held& held : group.held) {
    written_at_[held.stripe] = version;
    if (written.ok() && held.after) {
      watcher_->Written(held.key, held.before ? &*held.before : nullptr, &*held.after, now);
    }
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
  // this read, and the moves of a record on its way out were a large part of it
  // (docs/design/speed.md, increment 1).
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

Result<bool> RocksDbStorage::Remove(std::string_view key, Durability durability,
                                    const engine::AsRead* as_read) {
  const ScopedPerfCountersOff counters_off;
  if (WriteGroup* group = ThreadWriteGroup()) WriteGroupHeld(*group);
  const std::size_t stripe = StripeIndex(key);
  std::lock_guard lock(stripes_[stripe]);
  last_writes_[stripe].Forget(key);
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), records_, AsSlice(key), &value);
  if (s.IsNotFound()) return false;
  if (!s.ok()) return FromRocksDb(s, fmt::format("reading record {}", EscapeKey(key)));
  std::optional<RecordSummary> before;
  if (as_read || watcher_ != nullptr) {
    // Under the stripe's lock, which every write of the key holds: what is read is what goes.
    Result<Record> stored = DecodeRecord(key, value);
    if (as_read && (!stored.ok() || !engine::StillAsRead(*stored, *as_read))) {
      return engine::ChangedSinceRead(key);
    }
    if (stored.ok()) before = RecordSummary::Of(*stored);
  }
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
  if (watcher_ != nullptr && before) watcher_->Written(key, &*before, nullptr, Now());
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

Result<std::unique_ptr<ReadView>> RocksDbStorage::WatchWrites(WriteWatcher* watcher) {
  // No write runs yet: the view and the watch start at the same moment.
  watcher_ = watcher;
  return OpenView();
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

}  // namespace idem::storage
