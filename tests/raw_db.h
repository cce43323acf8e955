// Writing into a store's RocksDB behind idem's back: damaged or foreign bytes for the tests that
// check how they are refused.

#ifndef IDEM_TESTS_RAW_DB_H_
#define IDEM_TESTS_RAW_DB_H_

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <string>
#include <vector>

namespace idem_test {

// Writes `value` under `key` in column family `family` ("default" or "meta") of the closed
// store at `store_path`, bypassing idem.
inline void PutRaw(const std::string& store_path, const std::string& family, const std::string& key,
                   const std::string& value) {
  rocksdb::DBOptions options;
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, {}}, {"by_expiry", {}}, {"meta", {}}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(options, store_path + "/db", families, &handles, &db).ok());
  rocksdb::ColumnFamilyHandle* handle = family == "meta" ? handles[2] : handles[0];
  EXPECT_TRUE(db->Put(rocksdb::WriteOptions(), handle, key, value).ok());
  for (auto* h : handles) EXPECT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
  delete db;
}

}  // namespace idem_test

#endif  // IDEM_TESTS_RAW_DB_H_
