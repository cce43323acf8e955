// RocksDbStorage::Check (Store::Check, `idem check`): every table file's block checksums, then,
// in one snapshot, every record decoded and matched with its expiry index entry, every index
// entry after the filter horizon matched with its record, every application table value decoded,
// and the stored tokens against the persisted token ceiling. What is wrong is a finding; only a
// check that cannot run at all is an error.

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/snapshot.h>

#include <algorithm>
#include <ctime>
#include <optional>
#include <string>

#include "storage/rocksdb/fs/rocksdb_status.h"
#include "storage/rocksdb/layout.h"
#include "storage/rocksdb/record_codec.h"
#include "storage/rocksdb/rocksdb_storage.h"
#include "storage/rocksdb/table_file_verifier.h"
#include "util/escape.h"

namespace idem::storage {
namespace {

// A time in microseconds since the epoch, for a finding: in UTC to the second, or the number
// when it is no date (a damaged entry's).
std::string Micros(int64_t micros) {
  const auto seconds = static_cast<std::time_t>(micros / 1'000'000);
  std::tm utc{};
  if (gmtime_r(&seconds, &utc) == nullptr || utc.tm_year > 9999 - 1900 || utc.tm_year < -1900) {
    return fmt::format("{} us since 1970", micros);
  }
  return fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", utc);
}

// Reads `family` in `read`'s snapshot, calling `visit` with each key and value. False when the
// read failed part way, a finding (what it had yet to read is not checked).
template <class Visit>
bool ReadFamily(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* family,
                const rocksdb::ReadOptions& read, std::string_view what, CheckReport& report,
                Visit visit) {
  std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(read, family));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    visit(it->key().ToStringView(), it->value().ToStringView());
  }
  if (it->status().ok()) return true;
  report.Add("read", "",
             fmt::format("reading {} stopped: {}; what follows was not checked", what,
                         it->status().ToString()));
  return false;
}

// The expiry of the record under `key` in `read`'s snapshot: nullopt when there is none, an
// error when it cannot be read or its header decoded.
Result<std::optional<int64_t>> StoredExpiry(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* records,
                                            const rocksdb::ReadOptions& read,
                                            std::string_view key) {
  std::string value;
  const rocksdb::Status got = db.Get(read, records, AsSlice(key), &value);
  if (got.IsNotFound()) return std::optional<int64_t>();
  if (!got.ok()) return FromRocksDb(got, "reading a record");
  const std::optional<int64_t> expires = PeekExpiresMicros(value);
  if (!expires) return Status::Corruption("the record's header does not decode");
  return expires;
}

// A set of expiry index keys as a count and a sum of their 64-bit hashes: the keys the records
// call for and the keys the index holds have equal sums when they are the same, so the index is
// matched with the records in two sequential reads. Only when the sums differ is each key looked
// up, to name what differs (NameIndexMismatches).
struct IndexKeySum {
  uint64_t count = 0;
  uint64_t sum = 0;
  void Add(std::string_view index_key) {
    uint64_t hash = 0xcbf29ce484222325;  // FNV-1a, then splitmix64's finalizer
    for (const char byte : index_key) hash = (hash ^ static_cast<uint8_t>(byte)) * 0x100000001b3;
    hash = (hash ^ (hash >> 30)) * 0xbf58476d1ce4e5b9;
    hash = (hash ^ (hash >> 27)) * 0x94d049bb133111eb;
    ++count;
    sum += hash ^ (hash >> 31);
  }
  bool operator==(const IndexKeySum&) const = default;
};

// The records' part of a check: the largest stored token with its record's key, and the index
// keys that the records expiring after the filter horizon call for.
struct RecordsRead {
  uint64_t largest_token = 0;
  std::string largest_token_key;
  IndexKeySum index_keys;
  bool whole = false;  // read to the end
};

// A record expiring at `expires` without its index entry `index_key` in `read`'s snapshot.
void CheckEntryOf(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* by_expiry,
                  const rocksdb::ReadOptions& read, std::string_view key, int64_t expires,
                  const std::string& index_key, CheckReport& report) {
  std::string ignored;
  const rocksdb::Status entry = db.Get(read, by_expiry, AsSlice(index_key), &ignored);
  if (entry.IsNotFound()) {
    report.Add("index", std::string(key),
               fmt::format("the record (retention until {}) has no expiry index entry: no purge "
                           "would remove it",
                           Micros(expires)));
  } else if (!entry.ok()) {
    report.Add("read", std::string(key), FromRocksDb(entry, "reading an index entry").message());
  }
}

// An entry of `index_key`, expiring after the filter horizon, naming no record or a record of
// another expiry in `read`'s snapshot: a purge deletes such a record unread.
void CheckRecordOf(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* records,
                   const rocksdb::ReadOptions& read, std::string_view index_key,
                   CheckReport& report) {
  const int64_t expires = ExpiryOfIndexKey(index_key);
  const std::string_view key = index_key.substr(8);
  const Result<std::optional<int64_t>> stored = StoredExpiry(db, records, read, key);
  if (!stored.ok()) return;  // a record that does not decode is a finding of its own
  if (!stored->has_value()) {
    report.Add("index", std::string(key),
               fmt::format("the entry for {} names no record", Micros(expires)));
  } else if (**stored != expires) {
    report.Add("index", std::string(key),
               fmt::format("the entry for {} names a record whose retention ends {}: a purge "
                           "then would delete it early",
                           Micros(expires), Micros(**stored)));
  }
}

// The records in `read`'s snapshot: each decoded; those expiring at or before the filter horizon
// `horizon` (expired over a day ago, few where purges run) each looked up in the index.
RecordsRead CheckRecords(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* records,
                         rocksdb::ColumnFamilyHandle* by_expiry, const rocksdb::ReadOptions& read,
                         int64_t horizon, CheckReport& report) {
  RecordsRead found;
  std::string index_key;
  found.whole = ReadFamily(db, records, read, "the records", report, [&](auto key, auto value) {
    ++report.records;
    const Result<Record> record = DecodeRecord(key, value);
    if (!record.ok()) {
      report.Add("record", std::string(key), record.status().message());
    } else if (record->token >= found.largest_token) {
      found.largest_token = record->token;
      found.largest_token_key = key;
    }
    const std::optional<int64_t> expires = PeekExpiresMicros(value);
    if (!expires) return;
    ExpiryIndexKeyInto(*expires, key, index_key);
    if (*expires > horizon) return found.index_keys.Add(index_key);
    CheckEntryOf(db, by_expiry, read, key, *expires, index_key, report);
  });
  return found;
}

// Names what differs between the records expiring after `horizon` and the index entries after
// it, one lookup a key: called only when their sums differ.
void NameIndexMismatches(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* records,
                         rocksdb::ColumnFamilyHandle* by_expiry, const rocksdb::ReadOptions& read,
                         int64_t horizon, CheckReport& report) {
  std::string index_key;
  ReadFamily(db, records, read, "the records", report, [&](auto key, auto value) {
    const std::optional<int64_t> expires = PeekExpiresMicros(value);
    if (!expires || *expires <= horizon) return;
    ExpiryIndexKeyInto(*expires, key, index_key);
    CheckEntryOf(db, by_expiry, read, key, *expires, index_key, report);
  });
  ReadFamily(db, by_expiry, read, "the expiry index", report, [&](auto entry, auto) {
    if (entry.size() > 8 && ExpiryOfIndexKey(entry) > horizon) {
      CheckRecordOf(db, records, read, entry, report);
    }
  });
}

}  // namespace

Result<CheckReport> RocksDbStorage::Check() {
  CheckReport report;
  CheckTableFiles(report);
  rocksdb::ManagedSnapshot snapshot(db_.get());
  rocksdb::ReadOptions read;
  read.snapshot = snapshot.snapshot();
  read.fill_cache = false;  // read once: keeps the requests' blocks cached

  // The index after the filter horizon names exactly the records of its expiry (a purge deletes
  // them unread); at or before it, an entry may have outlived its record (docs/format.md, "The
  // expiry index").
  const int64_t horizon = filter_horizon_->load();
  const RecordsRead records = CheckRecords(*db_, records_, by_expiry_, read, horizon, report);
  IndexKeySum entries;
  const bool index_whole =
      ReadFamily(*db_, by_expiry_, read, "the expiry index", report, [&](auto entry, auto) {
        ++report.index_entries;
        if (entry.size() <= 8) {
          report.Add("index", std::string(entry),
                     fmt::format("an entry of {} bytes names no record", entry.size()));
        } else if (ExpiryOfIndexKey(entry) > horizon) {
          entries.Add(entry);
        }
      });
  if (records.whole && index_whole && !(records.index_keys == entries)) {
    NameIndexMismatches(*db_, records_, by_expiry_, read, horizon, report);
  }

  IDEM_ASSIGN_OR_RETURN(const std::vector<std::string> tables, ListTables());
  for (const std::string& table : tables) {
    IDEM_ASSIGN_OR_RETURN(rocksdb::ColumnFamilyHandle* const family, TableFamily(table, false));
    const std::string what = fmt::format("table {}", EscapeControls(table));
    ReadFamily(*db_, family, read, what, report, [&](auto key, auto value) {
      ++report.table_values;
      const Result<TableValue> decoded = DecodeTableValue(value, table, key);
      if (!decoded.ok()) report.Add("table", std::string(key), decoded.status().message());
    });
  }

  // Every token handed out is below the persisted ceiling, so that one handed out after a
  // restart is new.
  const Result<std::optional<uint64_t>> ceiling = ReadMeta(kTokenCeilingKey, 8, "token ceiling");
  if (!ceiling.ok()) {
    report.Add("meta", kTokenCeilingKey, ceiling.status().message());
  } else if (!ceiling->has_value()) {
    if (report.records > 0) report.Add("meta", kTokenCeilingKey, "the token ceiling is missing");
  } else if (records.largest_token >= **ceiling) {
    report.Add("tokens", records.largest_token_key,
               fmt::format("token {} is not below the token ceiling {}: a token handed out after "
                           "a restart could repeat it",
                           records.largest_token, **ceiling));
  }
  return report;
}

void RocksDbStorage::CheckTableFiles(CheckReport& report) {
  // Compaction deletes the files it replaced: none goes while they are read (a read-only
  // instance deletes nothing and does not support the call).
  const bool deletions_held = db_->DisableFileDeletions().ok();
  std::vector<rocksdb::LiveFileMetaData> files;
  db_->GetLiveFilesMetaData(&files);
  std::sort(files.begin(), files.end(),
            [](const auto& a, const auto& b) { return a.file_number < b.file_number; });
  for (const rocksdb::LiveFileMetaData& file : files) {
    ++report.files;
    const Status verified = VerifyTableFile(env_.get(), file);
    if (!verified.ok()) report.Add("file", TableFileName(file), verified.message());
  }
  if (deletions_held) static_cast<void>(db_->EnableFileDeletions(/*force=*/false));
}

Status RocksDbStorage::VerifyNewFiles(FunctionRef<bool()> go_on) {
  return verifier_ ? verifier_->VerifyNew(*db_, go_on) : Status::OK();
}

bool RocksDbStorage::ReverifyOneFile(std::chrono::steady_clock::time_point due) {
  return verifier_ && verifier_->ReverifyOldest(*db_, due);
}

}  // namespace idem::storage
