// A PgStorage under the engine, for tests against a real PostgreSQL server (pg_storage_test,
// pg_equivalence_test): PgStore opens one on a table of its own with a ManualClock as the
// server's time, ReadBack reads a record whole, Exec runs raw SQL on a connection of its own.
#ifndef IDEM_TESTS_SUPPORT_PG_ENGINE_STORE_H_
#define IDEM_TESTS_SUPPORT_PG_ENGINE_STORE_H_

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "backend/engine_backend.h"
#include "storage/postgres/pg_storage.h"
#include "test_util.h"

namespace idem_test {

// An EngineBackend on a PgStorage whose time is `clock_`'s (each store has its own, all starting at
// ManualClock::DefaultStart()).
class PgStore {
 public:
  // `ahead`: how far its clock is past ManualClock::DefaultStart() when it opens; `shape`: how
  // its Begins start (PgStorageConfig::begin_shape; null: as a store chooses).
  static std::unique_ptr<PgStore> Open(const std::string& uri, std::string table = "idem_records",
                                       bool create = true, std::chrono::microseconds ahead = {},
                                       std::optional<idem::storage::PgBeginShape> shape =
                                           idem::storage::PgBeginShape::kReadOrInsert) {
    auto store = std::unique_ptr<PgStore>(new PgStore());
    store->clock_->Advance(ahead);
    auto conninfo = idem::storage::PgConninfo::Parse(uri);
    EXPECT_TRUE(conninfo.ok()) << conninfo.status().ToString();
    if (!conninfo.ok()) return nullptr;
    idem::storage::PgStorageConfig config;
    config.table = std::move(table);
    config.create_if_missing = create;
    config.clock = store->clock_;
    config.begin_shape = shape;
    auto storage = idem::storage::PgStorage::Open(*conninfo, std::move(config));
    EXPECT_TRUE(storage.ok()) << storage.status().ToString();
    if (!storage.ok()) return nullptr;
    store->storage_ = storage->get();
    store->backend_ = std::make_unique<idem::backend::EngineBackend>(
        std::move(storage).value(), TestOptions(), /*stall_watch=*/nullptr);
    return store;
  }

  void Advance(std::chrono::microseconds by) { clock_->Advance(by); }
  // The store's time now (the server's, as the test hook moves it).
  idem::Record::TimePoint Now() const { return clock_->Now(); }

  idem::Result<idem::Claim> Begin(std::string_view key, std::chrono::milliseconds lease = 10s,
                                  uint64_t request_id = 0) {
    static std::atomic<uint64_t> next_request{1};
    return backend_->Begin({.key = key,
                            .lease = lease,
                            .retention = 1h,
                            .request_id = request_id ? request_id : next_request++},
                           idem::Holder{.pid = 1, .process_start = 2, .pid_scope = 3});
  }
  idem::Status End(std::string_view key, uint64_t token, idem::engine::TransitionKind kind,
                   std::string_view payload = "result") {
    return backend_->Transition(
        {.key = key, .request = {.kind = kind, .token = token, .payload = payload, .lease = 10s}});
  }
  idem::backend::EngineBackend& backend() { return *backend_; }
  idem::storage::PgStorage& storage() { return *storage_; }

 private:
  PgStore() = default;
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  idem::storage::PgStorage* storage_ = nullptr;
  std::unique_ptr<idem::backend::EngineBackend> backend_;
};

// Every shape of a Begin's first round trip, for tests that run once per shape (TEST_P), named
// by BeginShapeName.
inline constexpr idem::storage::PgBeginShape kEveryBeginShape[] = {
    idem::storage::PgBeginShape::kReadOrInsert, idem::storage::PgBeginShape::kReadFirst,
    idem::storage::PgBeginShape::kInsertFirst};
inline std::string BeginShapeName(
    const testing::TestParamInfo<idem::storage::PgBeginShape>& shape) {
  std::string name;  // "read or insert": "ReadOrInsert"
  bool word_starts = true;
  for (const char c : idem::storage::PgBeginShapeName(shape.param)) {
    if (c == ' ') {
      word_starts = true;
      continue;
    }
    name += word_starts ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    word_starts = false;
  }
  return name;
}

// What a one-step write left under `key`, read back whole.
inline idem::Record ReadBack(PgStore& store, std::string_view key) {
  auto read = store.storage().Read(key);
  EXPECT_TRUE(read.ok()) << read.status().ToString();
  if (!read.ok() || !read->record) {
    ADD_FAILURE() << "no record under " << key;
    return idem::Record();
  }
  return *read->record;
}

// The first value of `sql` run with parameter $1 = `param` on `conn`; "" (and a test failure)
// when it fails. Commands (BEGIN, COMMIT) give "". Without a parameter `sql` may be several
// statements (the last one's value).
inline std::string Exec(PGconn* conn, const std::string& sql, const std::string& param = "") {
  const char* values[] = {param.c_str()};
  PGresult* result = param.empty()
                         ? PQexec(conn, sql.c_str())
                         : PQexecParams(conn, sql.c_str(), 1, nullptr, values, nullptr, nullptr, 0);
  std::string value;
  if (PQresultStatus(result) == PGRES_TUPLES_OK && PQntuples(result) > 0) {
    value = PQgetvalue(result, 0, 0);
  } else if (PQresultStatus(result) != PGRES_COMMAND_OK &&
             PQresultStatus(result) != PGRES_TUPLES_OK) {
    ADD_FAILURE() << sql << ": " << PQerrorMessage(conn);
  }
  PQclear(result);
  return value;
}

}  // namespace idem_test

#endif  // IDEM_TESTS_SUPPORT_PG_ENGINE_STORE_H_
