// CheckIndexMatchesRecords: opens a store's RocksDB on its own, read-only, after idem closed it,
// and checks that every record has exactly one expiry-index entry naming its expiry, and every
// entry a record: that no write was ever half-applied (a record and its entry are one batch).

#ifndef IDEM_TESTS_INDEX_CHECK_H_
#define IDEM_TESTS_INDEX_CHECK_H_

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace idem_test {

// Returns the records' keys. The compaction filter drops expired records and leaves their
// entries for purge to remove: entries without a record are accepted when their expiry
// (microseconds since the epoch) is at or before `orphans_up_to`.
inline std::vector<std::string> CheckIndexMatchesRecords(
    const std::string& db_path, int64_t orphans_up_to = std::numeric_limits<int64_t>::min()) {
  rocksdb::DBOptions options;
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, {}}, {"by_expiry", {}}, {"meta", {}}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status opened =
      rocksdb::DB::OpenForReadOnly(options, db_path, families, &handles, &raw);
  EXPECT_TRUE(opened.ok()) << opened.ToString();
  if (!opened.ok()) return {};
  std::unique_ptr<rocksdb::DB> db(raw);
  std::map<std::string, std::string> records;  // key -> the expiry bytes of its value
  {
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator({}, handles[0]));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      EXPECT_GE(it->value().size(), 9u);
      records[it->key().ToString()] = it->value().ToString().substr(1, 8);
    }
    EXPECT_TRUE(it->status().ok()) << it->status().ToString();
  }
  std::map<std::string, int> entries;
  {
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator({}, handles[1]));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      const std::string index_key = it->key().ToString();
      const std::string key = index_key.substr(8);
      // The entry's expiry: big-endian with the sign bit flipped, so that it sorts by time.
      uint64_t from_entry = 0;
      for (int i = 0; i < 8; ++i) from_entry = (from_entry << 8) | uint8_t(index_key[i]);
      const auto expiry = static_cast<int64_t>(from_entry ^ (uint64_t{1} << 63));
      auto record = records.find(key);
      if (record == records.end()) {
        EXPECT_LE(expiry, orphans_up_to) << "an index entry without a record: " << key;
        continue;
      }
      uint64_t from_record = 0;  // little-endian in the record
      for (int i = 0; i < 8; ++i) from_record |= uint64_t{uint8_t(record->second[i])} << (8 * i);
      if (static_cast<int64_t>(from_record) != expiry) {
        // A stale entry of a record dropped by compaction, the key since written again.
        EXPECT_LE(expiry, orphans_up_to) << "stale index entry for " << key;
        continue;
      }
      ++entries[key];
    }
    EXPECT_TRUE(it->status().ok()) << it->status().ToString();
  }
  std::vector<std::string> keys;
  for (const auto& [key, expiry] : records) {
    EXPECT_EQ(entries[key], 1) << "record " << key << " has " << entries[key] << " index entries";
    keys.push_back(key);
  }
  for (auto* handle : handles) EXPECT_TRUE(db->DestroyColumnFamilyHandle(handle).ok());
  return keys;
}

}  // namespace idem_test

#endif  // IDEM_TESTS_INDEX_CHECK_H_
