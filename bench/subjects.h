// The systems measured, behind one interface: "claim this key" (Begin) and "store its result"
// (Complete), as idem does it and as the usual alternatives do it.
//
//   idem-sync, idem-buffered,  idem::Store, Durability::kSync / kBuffered / kPeriodic (synced
//   idem-periodic              within the default sync_interval, 1 s)
//   rocksdb-sync, rocksdb      raw RocksDB, Get then Put (pending) then Put (done): the same
//                              reads and writes without any atomicity (two threads may both
//                              claim a key), WriteOptions::sync on / off
//   sqlite-full, sqlite-off    a SQLite dedup table in WAL mode: INSERT OR IGNORE on the unique
//                              key (claimed when a row was inserted), then UPDATE with the result;
//                              an existing key is read back with SELECT; synchronous=FULL / OFF
//   redis                      Redis on loopback: SET key pending NX PX (claimed on OK), then
//                              SET key result; an existing key is read back with GET
//   idem-pg                    idem::Store on PostgreSQL (Store::Open of a URI), Durability::kSync
//                              (synchronous_commit on), the default pool (Options::pool_size)
//   pg-sql                     hand-written SQL through libpq, one connection per thread, each
//                              statement its own autocommit transaction, synchronous_commit on:
//                              INSERT ... ON CONFLICT (key) DO NOTHING (claimed when a row was
//                              inserted), then UPDATE with the result; an existing key is read
//                              back with SELECT by primary key
//   pg-sql-read-first          the same table and statements, but Begin SELECTs the key first and
//                              INSERTs only when it is absent: a replay is one SELECT by primary
//                              key (the replay anchor), a fresh key costs a SELECT more
//
// A Subject is one open store of one system in a fresh directory (Redis: flushed); a Session is
// one thread's connection to it.

#ifndef IDEM_BENCH_SUBJECTS_H_
#define IDEM_BENCH_SUBJECTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "idem/store.h"

namespace idem::bench {

enum class Answer { kAcquired, kReplay, kInProgress };

struct BeginAnswer {
  Answer answer = Answer::kInProgress;
  uint64_t token = 0;  // kAcquired: what Complete needs (idem's fencing token; 0 elsewhere)
};

class Session {
 public:
  virtual ~Session() = default;
  virtual Result<BeginAnswer> Begin(std::string_view key) = 0;
  virtual Status Complete(std::string_view key, uint64_t token, std::string_view result) = 0;
  // Complete, and in the same atomic write one more: `account`'s balance, read first and written
  // one higher, as an application adds to a balance (idem: an application table, the write
  // conditional on the version read; raw RocksDB: a key beside the records). The effects
  // workload; other systems do not have it.
  virtual Status CompleteAdding(std::string_view key, uint64_t token, std::string_view result,
                                std::string_view account) {
    static_cast<void>(key);
    static_cast<void>(token);
    static_cast<void>(result);
    static_cast<void>(account);
    return Status::InvalidArgument("this system has no table writes");
  }
  // The effects workload's request on a fresh key: Begin, then CompleteAdding. On PostgreSQL,
  // the whole request in one transaction that also adds 1 to `account`'s row of the
  // application's own table (idem: ExecuteInTransaction; hand-written SQL: BEGIN, INSERT ... ON
  // CONFLICT DO NOTHING, the account's upsert, UPDATE of the record, COMMIT).
  virtual Status RunAdding(std::string_view key, std::string_view result, std::string_view account);
};

class Subject {
 public:
  virtual ~Subject() = default;
  // A connection for one thread.
  virtual Result<std::unique_ptr<Session>> Connect() = 0;
};

struct SubjectConfig {
  std::string directory;  // fresh, created by the caller; unused by Redis and PostgreSQL
  int redis_port = 6379;
  std::string postgres;  // PostgreSQL systems: the server's libpq URI
  std::string table;     // PostgreSQL systems: the subject's own table, dropped first
  int pg_pool_size = Options{}.pool_size;  // idem on PostgreSQL: connections per process
  std::size_t memory_budget = Options{}.memory_budget;  // idem, and raw RocksDB alike
};

// Every system name OpenSubject knows, in report order.
const std::vector<std::string>& AllSystems();

// Whether `system` keeps its data in PostgreSQL (SubjectConfig::postgres).
bool IsPostgresSystem(std::string_view system);

Result<std::unique_ptr<Subject>> OpenSubject(std::string_view system, const SubjectConfig& config);

// A subject over a store opened by the caller (which keeps it open for the subject's life).
std::unique_ptr<Subject> StoreSubject(Store& store);

}  // namespace idem::bench

#endif  // IDEM_BENCH_SUBJECTS_H_
