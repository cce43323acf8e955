// Application tables (idem/tables.h) in RocksDB: a column family per table, values with their
// versions, and the checks and locks of a commit that writes them with a record.

#include <fmt/format.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <functional>
#include <map>

#include "storage/rocksdb/format_file.h"
#include "storage/rocksdb/fs/rocksdb_status.h"
#include "storage/rocksdb/layout.h"
#include "storage/rocksdb/record_codec.h"
#include "storage/rocksdb/rocksdb_storage.h"
#include "util/escape.h"

namespace idem::storage {
namespace {

// A value's first byte: whether the key holds a value or was deleted. A delete keeps the key
// (a tombstone) so that its version goes on rising: a reader that saw the key absent at version
// v must not find it "unchanged" after a delete and a new write.
constexpr char kPresent = 1;
constexpr char kDeleted = 2;
constexpr std::size_t kTableValueHeader = 1 + 8;  // kind, version (fixed64)

}  // namespace

std::string EncodeTableValue(const std::optional<std::string>& value, uint64_t version) {
  std::string encoded;
  encoded.reserve(kTableValueHeader + (value ? value->size() : 0));
  encoded.push_back(value ? kPresent : kDeleted);
  util::PutFixed64(encoded, version);
  if (value) encoded += *value;
  return encoded;
}

Result<TableValue> DecodeTableValue(std::string_view encoded, std::string_view table,
                                    std::string_view key) {
  const bool kind_known = !encoded.empty() && (encoded[0] == kPresent || encoded[0] == kDeleted);
  if (encoded.size() < kTableValueHeader || !kind_known ||
      (encoded[0] == kDeleted && encoded.size() != kTableValueHeader)) {
    return Status::Corruption(
        fmt::format("the value of {} in table {} cannot be decoded ({} bytes)", EscapeKey(key),
                    EscapeControls(table), encoded.size()));
  }
  TableValue value;
  value.version = util::GetFixed64(encoded.data() + 1);
  if (encoded[0] == kPresent) value.value = std::string(encoded.substr(kTableValueHeader));
  return value;
}

namespace {

std::string FamilyName(std::string_view table) {
  return fmt::format("{}{}", kTableFamilyPrefix, table);
}

std::size_t TableStripe(std::string_view table, std::string_view key, std::size_t stripes) {
  const std::size_t hash =
      std::hash<std::string_view>{}(table)*31 + std::hash<std::string_view>{}(key);
  return hash % stripes;
}

}  // namespace

RocksDbStorage::TableLocks::TableLocks(RocksDbStorage& storage, const WriteSet& writes)
    : storage_(storage) {
  for (const WriteSet::Write& write : writes.writes()) {
    stripes_.push_back({TableStripe(write.table, write.key, kStripes), /*exclusive=*/true});
  }
  // A required key is locked shared: no commit may write it between its check and this commit's
  // write, but commits that only read it need not wait for each other.
  for (const WriteSet::Requirement& required : writes.requirements()) {
    stripes_.push_back({TableStripe(required.table, required.key, kStripes), /*exclusive=*/false});
  }
  // Exclusive first among a stripe's entries, so that the one kept is exclusive if any is.
  std::sort(stripes_.begin(), stripes_.end(), [](const Stripe& a, const Stripe& b) {
    return a.index != b.index ? a.index < b.index : a.exclusive > b.exclusive;
  });
  stripes_.erase(std::unique(stripes_.begin(), stripes_.end(),
                             [](const Stripe& a, const Stripe& b) { return a.index == b.index; }),
                 stripes_.end());
  if (stripes_.size() > kMostTableLocks) {
    stripes_.clear();
    storage_.wide_commit_mu_.lock();
    wide_ = true;
    return;
  }
  storage_.wide_commit_mu_.lock_shared();
  for (const Stripe& stripe : stripes_) {
    if (stripe.exclusive) {
      storage_.table_stripes_[stripe.index].lock();
    } else {
      storage_.table_stripes_[stripe.index].lock_shared();
    }
  }
}

RocksDbStorage::TableLocks::~TableLocks() {
  for (auto it = stripes_.rbegin(); it != stripes_.rend(); ++it) {
    if (it->exclusive) {
      storage_.table_stripes_[it->index].unlock();
    } else {
      storage_.table_stripes_[it->index].unlock_shared();
    }
  }
  if (wide_) {
    storage_.wide_commit_mu_.unlock();
  } else {
    storage_.wide_commit_mu_.unlock_shared();
  }
}

Result<std::vector<RocksDbStorage::TableWrite>> RocksDbStorage::PrepareTableWrites(
    const WriteSet& writes) {
  // Per key, the version every condition on it was checked against, and the last value given
  // (null: the key is only required, not written).
  struct Staged {
    rocksdb::ColumnFamilyHandle* family = nullptr;
    uint64_t stored_version = 0;
    const std::optional<std::string>* value = nullptr;
  };
  std::map<std::pair<std::string_view, std::string_view>, Staged> staged;
  // The key's entry, its stored version read the first time; kConflict unless it is at
  // `expected` (nullopt: no condition).
  const auto check = [&](std::string_view table, std::string_view key,
                         std::optional<uint64_t> expected) -> Result<Staged*> {
    auto [it, first] = staged.try_emplace({table, key});
    Staged& entry = it->second;
    if (first) {
      IDEM_ASSIGN_OR_RETURN(entry.family, TableFamily(table, /*create=*/false));
      if (entry.family != nullptr) {
        IDEM_ASSIGN_OR_RETURN(const TableValue stored, ReadTableValue(entry.family, table, key));
        entry.stored_version = stored.version;
      }
    }
    if (expected && *expected != entry.stored_version) {
      return Status::Conflict(fmt::format(
          "key {} of table {} is at version {}, not {} as read: another commit changed it; "
          "nothing was written, and the claim is still held: read again and complete again",
          EscapeKey(key), EscapeControls(table), entry.stored_version, *expected));
    }
    return &entry;
  };
  for (const WriteSet::Write& write : writes.writes()) {
    IDEM_ASSIGN_OR_RETURN(Staged* const entry, check(write.table, write.key, write.if_version));
    entry->value = &write.value;
  }
  for (const WriteSet::Requirement& required : writes.requirements()) {
    IDEM_RETURN_IF_ERROR(check(required.table, required.key, required.version).status());
  }
  for (const auto& [name, entry] : staged) {
    if (entry.value != nullptr && entry.stored_version >= TableValue::kLargestVersion) {
      return Status::InvalidArgument(fmt::format(
          "key {} of table {} is at version {}, the largest: it takes no more writes (a version "
          "never wraps back to 0, \"never written\"); nothing was written",
          EscapeKey(name.second), EscapeControls(name.first), entry.stored_version));
    }
  }
  std::vector<TableWrite> batch;
  batch.reserve(staged.size());
  for (auto& [name, entry] : staged) {
    if (entry.value == nullptr) continue;  // required only
    if (entry.family == nullptr) {
      IDEM_ASSIGN_OR_RETURN(entry.family, TableFamily(name.first, /*create=*/true));
    }
    batch.push_back({.family = entry.family,
                     .key = std::string(name.second),
                     .encoded = EncodeTableValue(*entry.value, entry.stored_version + 1)});
  }
  return batch;
}

Result<rocksdb::ColumnFamilyHandle*> RocksDbStorage::TableFamily(std::string_view table,
                                                                 bool create) {
  {
    util::ReaderMutexLock lock(tables_mu_);
    if (auto it = tables_.find(table); it != tables_.end()) return it->second;
  }
  if (!create) return static_cast<rocksdb::ColumnFamilyHandle*>(nullptr);
  util::WriterMutexLock lock(tables_mu_);
  if (auto it = tables_.find(table); it != tables_.end()) return it->second;
  IDEM_RETURN_IF_ERROR(RaiseFormatForTablesLocked());
  rocksdb::ColumnFamilyHandle* family = nullptr;
  IDEM_RETURN_IF_ERROR(
      FromRocksDb(db_->CreateColumnFamily(*table_options_, FamilyName(table), &family),
                  fmt::format("making table {} in store {}", EscapeControls(table), path_)));
  tables_.emplace(std::string(table), family);
  return family;
}

Status RocksDbStorage::RaiseFormatForTablesLocked() {
  if (format_version_.load() >= kTablesFormatVersion) return Status::OK();
  // The file first: a release that reads only version 1 checks it before it opens the database,
  // and must refuse the store before it meets a table's column family it does not know.
  IDEM_RETURN_IF_ERROR(WriteFormatFile(*db_->GetFileSystem(), path_, kTablesFormatVersion));
  std::string encoded;
  util::PutFixed32(encoded, kTablesFormatVersion);
  rocksdb::WriteBatch batch;
  IDEM_RETURN_IF_ERROR(
      FromRocksDb(batch.Put(meta_, kFormatVersionKey, encoded), "raising the format version"));
  IDEM_RETURN_IF_ERROR(Write(Durability::kSync, &batch, "raising the format version"));
  format_version_ = kTablesFormatVersion;
  return Status::OK();
}

Result<TableValue> RocksDbStorage::ReadTableValue(rocksdb::ColumnFamilyHandle* family,
                                                  std::string_view table, std::string_view key) {
  std::string encoded;
  const rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), family, AsSlice(key), &encoded);
  if (s.IsNotFound()) return TableValue{};
  if (!s.ok()) {
    return FromRocksDb(
        s, fmt::format("reading {} of table {}", EscapeKey(key), EscapeControls(table)));
  }
  return DecodeTableValue(encoded, table, key);
}

Result<std::vector<std::string>> RocksDbStorage::ListTables() {
  util::ReaderMutexLock lock(tables_mu_);
  std::vector<std::string> names;
  names.reserve(tables_.size());
  for (const auto& [name, family] : tables_) names.push_back(name);
  return names;
}

Result<std::vector<ImportOutcome>> RocksDbStorage::ImportValues(
    std::string_view table, std::span<const std::pair<std::string, TableValue>> values) {
  std::unique_lock wide(wide_commit_mu_);
  IDEM_ASSIGN_OR_RETURN(rocksdb::ColumnFamilyHandle* const family,
                        TableFamily(table, /*create=*/true));
  std::vector<ImportOutcome> outcomes;
  outcomes.reserve(values.size());
  rocksdb::WriteBatch batch;
  for (const auto& [key, value] : values) {
    IDEM_ASSIGN_OR_RETURN(const TableValue stored, ReadTableValue(family, table, key));
    if (stored.version != 0) {
      outcomes.push_back(ImportOutcome::kPresent);
      continue;
    }
    IDEM_RETURN_IF_ERROR(
        FromRocksDb(batch.Put(family, AsSlice(key), EncodeTableValue(value.value, value.version)),
                    "importing a table value"));
    outcomes.push_back(ImportOutcome::kImported);
  }
  if (batch.Count() > 0) {
    IDEM_RETURN_IF_ERROR(Write(Durability::kBuffered, &batch, "importing table values"));
  }
  return outcomes;
}

Result<TableValue> RocksDbStorage::ReadValue(std::string_view table, std::string_view key) {
  IDEM_ASSIGN_OR_RETURN(rocksdb::ColumnFamilyHandle* const family,
                        TableFamily(table, /*create=*/false));
  if (family == nullptr) return TableValue{};
  return ReadTableValue(family, table, key);
}

Status RocksDbStorage::ScanValues(std::string_view table, const ScanOptions& options,
                                  FunctionRef<bool(std::string_view key, TableValue&& value)> visit,
                                  ReadView* view) {
  IDEM_ASSIGN_OR_RETURN(rocksdb::ColumnFamilyHandle* const family,
                        TableFamily(table, /*create=*/false));
  // A table made after `view` was taken is empty in it: its family's snapshot reads see nothing.
  if (family == nullptr) return Status::OK();
  return ScanFamily(
      family, options, fmt::format("scanning table {}", EscapeControls(table)),
      [&](std::string_view key, std::string_view encoded) -> Result<bool> {
        IDEM_ASSIGN_OR_RETURN(TableValue value, DecodeTableValue(encoded, table, key));
        if (!value.value) return true;  // deleted
        return visit(key, std::move(value));
      },
      view);
}

std::vector<std::string> RocksDbStorage::ListTableFamilies(
    const rocksdb::DBOptions& options) const {
  std::vector<std::string> families;
  // A new store has no MANIFEST to list: no tables.
  if (!rocksdb::DB::ListColumnFamilies(options, path_, &families).ok()) return {};
  std::erase_if(families, [](const std::string& family) {
    return !std::string_view(family).starts_with(kTableFamilyPrefix);
  });
  return families;
}

}  // namespace idem::storage
