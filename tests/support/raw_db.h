// Reading and writing a store's RocksDB behind idem's back: damaged, foreign or older bytes for
// the tests that check how they are refused or read.

#ifndef IDEM_TESTS_RAW_DB_H_
#define IDEM_TESTS_RAW_DB_H_

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <string>
#include <vector>

namespace idem_test {

// Runs `use(db, family)` on the store at `store_path`, opened bypassing idem (read-only: while
// an owner may have it open, and changing nothing), with the handle of column family `family`
// ("default", "by_expiry", "meta", or an application table's "app.NAME").
template <class Use>
void WithRawDbOpened(const std::string& store_path, const std::string& family, bool read_only,
                     Use use) {
  rocksdb::DBOptions options;
  std::vector<std::string> names;
  ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(options, store_path + "/db", &names).ok());
  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  for (const std::string& name : names) families.emplace_back(name, rocksdb::ColumnFamilyOptions());
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  const rocksdb::Status opened =
      read_only ? rocksdb::DB::OpenForReadOnly(options, store_path + "/db", families, &handles, &db)
                : rocksdb::DB::Open(options, store_path + "/db", families, &handles, &db);
  ASSERT_TRUE(opened.ok()) << opened.ToString();
  rocksdb::ColumnFamilyHandle* chosen = nullptr;
  for (rocksdb::ColumnFamilyHandle* handle : handles) {
    if (handle->GetName() == family) chosen = handle;
  }
  EXPECT_NE(chosen, nullptr) << "no column family " << family;
  if (chosen != nullptr) use(*db, chosen);
  for (auto* h : handles) EXPECT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
  delete db;
}

// WithRawDb on the closed store at `store_path`, opened for writing.
template <class Use>
void WithRawDb(const std::string& store_path, const std::string& family, Use use) {
  WithRawDbOpened(store_path, family, /*read_only=*/false, use);
}

// Writes `value` under `key` in column family `family` of the closed store at `store_path`.
inline void PutRaw(const std::string& store_path, const std::string& family, const std::string& key,
                   const std::string& value) {
  WithRawDb(store_path, family, [&](rocksdb::DB& db, rocksdb::ColumnFamilyHandle* handle) {
    EXPECT_TRUE(db.Put(rocksdb::WriteOptions(), handle, key, value).ok());
  });
}

// The value under `key` in column family `family` of the closed store at `store_path` ("" when
// there is none).
inline std::string GetRaw(const std::string& store_path, const std::string& family,
                          const std::string& key) {
  std::string value;
  WithRawDb(store_path, family, [&](rocksdb::DB& db, rocksdb::ColumnFamilyHandle* handle) {
    const rocksdb::Status s = db.Get(rocksdb::ReadOptions(), handle, key, &value);
    EXPECT_TRUE(s.ok() || s.IsNotFound()) << s.ToString();
  });
  return value;
}

}  // namespace idem_test

#endif  // IDEM_TESTS_RAW_DB_H_
