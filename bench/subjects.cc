#include "subjects.h"

#include <hiredis/hiredis.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/write_batch.h>
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "pg.h"
#include "storage/rocksdb/fs/log_zero_fill.h"
#include "storage/rocksdb/fs/storage_env.h"
#include "storage/rocksdb/rocksdb_options.h"

namespace idem::bench {
namespace {

// ---- idem -----------------------------------------------------------------------------------

// The application's table of the effects workload on PostgreSQL, beside the store's `table`,
// and the statement that adds 1 to an account ($1) in it.
std::string AccountsTable(const std::string& table) { return table + "_accounts"; }
std::string AccountsUpsert(const std::string& table) {
  return "INSERT INTO " + AccountsTable(table) +
         " AS a VALUES ($1, 1) ON CONFLICT (id) DO UPDATE SET balance = a.balance + 1";
}
Status MakeAccountsTable(PgConnection& admin, const std::string& table) {
  return admin
      .Exec("CREATE TABLE " + AccountsTable(table) +
            " (id text PRIMARY KEY, balance bigint NOT NULL)")
      .status();
}

class StoreSession final : public Session {
 public:
  // `pg_table`: the store's table when it is kept in PostgreSQL.
  explicit StoreSession(Store& store, const std::string& pg_table = "")
      : store_(store),
        in_postgres_(!pg_table.empty()),
        accounts_upsert_(in_postgres_ ? AccountsUpsert(pg_table) : "") {}

  Result<BeginAnswer> Begin(std::string_view key) override {
    IDEM_ASSIGN_OR_RETURN(Claim claim, store_.Begin(key));
    switch (claim.outcome) {
      case Outcome::kAcquired:
        return BeginAnswer{Answer::kAcquired, claim.token};
      case Outcome::kReplay:
        return BeginAnswer{Answer::kReplay, 0};
      case Outcome::kInProgress:
        return BeginAnswer{Answer::kInProgress, 0};
      case Outcome::kFailed:
      case Outcome::kMismatch:
        break;
    }
    return Status(Status::Code::kFailed,
                  "unexpected outcome " + std::string(OutcomeName(claim.outcome)));
  }
  Status Complete(std::string_view key, uint64_t token, std::string_view result) override {
    return store_.Complete(key, token, result);
  }
  Status RunAdding(std::string_view key, std::string_view result,
                   std::string_view account) override {
    if (!in_postgres_) return Session::RunAdding(key, result, account);
    return store_
        .ExecuteInTransaction(
            key,
            [&](Attempt&, SqlTransaction& sql) -> Result<std::string> {
              IDEM_RETURN_IF_ERROR(sql.Exec(accounts_upsert_, {std::string(account)}).status());
              return std::string(result);
            })
        .status();
  }

  Status CompleteAdding(std::string_view key, uint64_t token, std::string_view result,
                        std::string_view account) override {
    IDEM_ASSIGN_OR_RETURN(TableValue balance, store_.GetValue("balances", account));
    writes_.Clear();
    writes_.Put("balances", account, std::to_string(Balance(balance.value) + 1), balance.version);
    return store_.Complete(key, token, result, writes_);
  }

 private:
  static long long Balance(const std::optional<std::string>& value) {
    return value ? std::stoll(*value) : 0;
  }

  Store& store_;
  const bool in_postgres_;
  const std::string accounts_upsert_;
  WriteSet writes_;
};

class BorrowedStoreSubject final : public Subject {
 public:
  explicit BorrowedStoreSubject(Store& store) : store_(store) {}
  Result<std::unique_ptr<Session>> Connect() override {
    return std::unique_ptr<Session>(std::make_unique<StoreSession>(store_));
  }

 private:
  Store& store_;
};

class OwnedStoreSubject final : public Subject {
 public:
  explicit OwnedStoreSubject(std::unique_ptr<Store> store, std::string pg_table = "")
      : store_(std::move(store)), pg_table_(std::move(pg_table)) {}
  Result<std::unique_ptr<Session>> Connect() override {
    return std::unique_ptr<Session>(std::make_unique<StoreSession>(*store_, pg_table_));
  }

 private:
  std::unique_ptr<Store> store_;
  const std::string pg_table_;  // the store's table in PostgreSQL; empty for a directory
};

Result<std::unique_ptr<Subject>> OpenIdem(const SubjectConfig& config, Durability durability) {
  Options options;
  options.durability = durability;
  options.memory_budget = config.memory_budget;
  options.auto_purge_interval = std::chrono::milliseconds(0);
  IDEM_ASSIGN_OR_RETURN(auto store, Store::Open(config.directory, options));
  return std::unique_ptr<Subject>(std::make_unique<OwnedStoreSubject>(std::move(store)));
}

Result<std::unique_ptr<Subject>> OpenIdemOnPostgres(const SubjectConfig& config) {
  {
    IDEM_ASSIGN_OR_RETURN(auto admin, PgConnection::Connect(config.postgres));
    IDEM_RETURN_IF_ERROR(DropPgTables(*admin, config.table));
    IDEM_RETURN_IF_ERROR(MakeAccountsTable(*admin, config.table));
  }
  Options options;
  options.durability = Durability::kSync;
  options.table = config.table;
  options.pool_size = config.pg_pool_size;
  options.auto_purge_interval = std::chrono::milliseconds(0);
  IDEM_ASSIGN_OR_RETURN(auto store, Store::Open(config.postgres, options));
  return std::unique_ptr<Subject>(
      std::make_unique<OwnedStoreSubject>(std::move(store), config.table));
}

// ---- raw RocksDB ----------------------------------------------------------------------------

// The value written: one state byte, then (done) the result or (pending) a lease deadline, the
// smallest stand-in for what a lock needs.
constexpr char kPendingState = 'P';
constexpr char kDoneState = 'D';

Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  return Status(Status::Code::kIOError, std::string(what) + ": " + s.ToString());
}

class RocksDbSubject final : public Subject {
 public:
  static Result<std::unique_ptr<Subject>> Open(const SubjectConfig& config, bool sync) {
    std::unique_ptr<RocksDbSubject> subject(new RocksDbSubject());
    subject->write_options_.sync = sync;
    // The same engine settings as idem's storage (one definition:
    // storage/rocksdb/rocksdb_options.h), and the same Env and log files (zero-filled ahead:
    // storage/rocksdb/fs/log_zero_fill.h), so the ratio measures idem's own work.
    const storage::RocksDbOptions engine = storage::MakeRocksDbOptions(config.memory_budget);
    subject->cache_ = engine.cache;
    subject->env_ =
        storage::NewStorageEnv(storage::NewZeroFilledLogs(rocksdb::FileSystem::Default()));
    rocksdb::Options options(engine.db, engine.records);
    options.env = subject->env_.get();
    options.create_if_missing = true;
    rocksdb::DB* db = nullptr;
    rocksdb::Status s = rocksdb::DB::Open(options, config.directory, &db);
    if (!s.ok()) return FromRocks(s, "opening RocksDB in " + config.directory);
    subject->db_.reset(db);
    return std::unique_ptr<Subject>(std::move(subject));
  }

  Result<std::unique_ptr<Session>> Connect() override;

  rocksdb::DB& db() { return *db_; }
  const rocksdb::WriteOptions& write_options() const { return write_options_; }

 private:
  RocksDbSubject() = default;
  std::shared_ptr<rocksdb::Env> env_;  // outlives the database
  std::shared_ptr<rocksdb::Cache> cache_;
  std::unique_ptr<rocksdb::DB> db_;
  rocksdb::WriteOptions write_options_;
};

class RocksDbSession final : public Session {
 public:
  explicit RocksDbSession(RocksDbSubject& subject) : subject_(subject) {}

  Result<BeginAnswer> Begin(std::string_view key) override {
    const storage::ScopedPerfCountersOff counters_off;  // as idem's storage does
    rocksdb::Status s =
        subject_.db().Get(rocksdb::ReadOptions(), subject_.db().DefaultColumnFamily(),
                          rocksdb::Slice(key.data(), key.size()), &value_);
    if (s.ok()) {
      return BeginAnswer{
          value_.empty() || value_[0] == kPendingState ? Answer::kInProgress : Answer::kReplay, 0};
    }
    if (!s.IsNotFound()) return FromRocks(s, "RocksDB Get");
    const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(10);
    const int64_t micros =
        std::chrono::duration_cast<std::chrono::microseconds>(deadline.time_since_epoch()).count();
    scratch_.assign(1, kPendingState);
    scratch_.append(reinterpret_cast<const char*>(&micros), sizeof(micros));
    s = subject_.db().Put(subject_.write_options(), rocksdb::Slice(key.data(), key.size()),
                          scratch_);
    if (!s.ok()) return FromRocks(s, "RocksDB Put");
    return BeginAnswer{Answer::kAcquired, 0};
  }

  Status Complete(std::string_view key, uint64_t /*token*/, std::string_view result) override {
    const storage::ScopedPerfCountersOff counters_off;
    scratch_.assign(1, kDoneState);
    scratch_.append(result);
    rocksdb::Status s = subject_.db().Put(subject_.write_options(),
                                          rocksdb::Slice(key.data(), key.size()), scratch_);
    if (!s.ok()) return FromRocks(s, "RocksDB Put");
    return Status::OK();
  }

  Status CompleteAdding(std::string_view key, uint64_t /*token*/, std::string_view result,
                        std::string_view account) override {
    const storage::ScopedPerfCountersOff counters_off;
    const std::string balance_key = "balance/" + std::string(account);
    rocksdb::Status s = subject_.db().Get(
        rocksdb::ReadOptions(), subject_.db().DefaultColumnFamily(), balance_key, &value_);
    if (!s.ok() && !s.IsNotFound()) return FromRocks(s, "RocksDB Get");
    const long long balance = s.ok() ? std::stoll(value_.ToString()) : 0;
    scratch_.assign(1, kDoneState);
    scratch_.append(result);
    rocksdb::WriteBatch batch;
    s = batch.Put(rocksdb::Slice(key.data(), key.size()), scratch_);
    if (s.ok()) s = batch.Put(balance_key, std::to_string(balance + 1));
    if (s.ok()) s = subject_.db().Write(subject_.write_options(), &batch);
    if (!s.ok()) return FromRocks(s, "RocksDB Write");
    return Status::OK();
  }

 private:
  RocksDbSubject& subject_;
  rocksdb::PinnableSlice value_;
  std::string scratch_;
};

Result<std::unique_ptr<Session>> RocksDbSubject::Connect() {
  return std::unique_ptr<Session>(std::make_unique<RocksDbSession>(*this));
}

// ---- SQLite ---------------------------------------------------------------------------------

constexpr char kSchema[] =
    "CREATE TABLE IF NOT EXISTS requests ("
    "  key TEXT PRIMARY KEY,"
    "  state INTEGER NOT NULL,"  // 0 pending, 1 done
    "  result BLOB,"
    "  lease_deadline INTEGER NOT NULL)";

Status SqliteError(sqlite3* db, std::string_view what) {
  return Status(Status::Code::kIOError,
                std::string(what) + ": " + (db ? sqlite3_errmsg(db) : "out of memory"));
}

Result<sqlite3*> OpenSqlite(const std::string& path, std::string_view synchronous) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Status status = SqliteError(db, "opening " + path);
    sqlite3_close(db);
    return status;
  }
  sqlite3_busy_timeout(db, 60'000);
  const std::string pragmas =
      "PRAGMA journal_mode=WAL; PRAGMA synchronous=" + std::string(synchronous) + "; " + kSchema;
  char* error = nullptr;
  if (sqlite3_exec(db, pragmas.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    Status status(Status::Code::kIOError,
                  "setting up " + path + ": " + (error ? error : "unknown error"));
    sqlite3_free(error);
    sqlite3_close(db);
    return status;
  }
  return db;
}

class SqliteSession final : public Session {
 public:
  static Result<std::unique_ptr<Session>> Open(const std::string& path,
                                               std::string_view synchronous) {
    IDEM_ASSIGN_OR_RETURN(sqlite3 * db, OpenSqlite(path, synchronous));
    std::unique_ptr<SqliteSession> session(new SqliteSession(db));
    const char* statements[] = {
        "INSERT OR IGNORE INTO requests (key, state, lease_deadline) VALUES (?1, 0, ?2)",
        "UPDATE requests SET state = 1, result = ?2 WHERE key = ?1",
        "SELECT state FROM requests WHERE key = ?1",
    };
    sqlite3_stmt** targets[] = {&session->insert_, &session->update_, &session->select_};
    for (int i = 0; i < 3; ++i) {
      if (sqlite3_prepare_v2(db, statements[i], -1, targets[i], nullptr) != SQLITE_OK) {
        return SqliteError(db, "preparing a statement");
      }
    }
    return std::unique_ptr<Session>(std::move(session));
  }

  ~SqliteSession() override {
    sqlite3_finalize(insert_);
    sqlite3_finalize(update_);
    sqlite3_finalize(select_);
    sqlite3_close(db_);
  }

  Result<BeginAnswer> Begin(std::string_view key) override {
    const int64_t deadline =
        std::chrono::duration_cast<std::chrono::microseconds>(
            (std::chrono::system_clock::now() + std::chrono::seconds(10)).time_since_epoch())
            .count();
    sqlite3_bind_text(insert_, 1, key.data(), static_cast<int>(key.size()), SQLITE_STATIC);
    sqlite3_bind_int64(insert_, 2, deadline);
    IDEM_RETURN_IF_ERROR(Step(insert_, "INSERT OR IGNORE"));
    if (sqlite3_changes(db_) == 1) return BeginAnswer{Answer::kAcquired, 0};
    sqlite3_bind_text(select_, 1, key.data(), static_cast<int>(key.size()), SQLITE_STATIC);
    int rc = StepRow(select_);
    if (rc != SQLITE_ROW) {
      sqlite3_reset(select_);
      return SqliteError(db_, "SELECT of an existing key");
    }
    const int64_t state = sqlite3_column_int64(select_, 0);
    sqlite3_reset(select_);
    return BeginAnswer{state == 1 ? Answer::kReplay : Answer::kInProgress, 0};
  }

  Status Complete(std::string_view key, uint64_t /*token*/, std::string_view result) override {
    sqlite3_bind_text(update_, 1, key.data(), static_cast<int>(key.size()), SQLITE_STATIC);
    sqlite3_bind_blob(update_, 2, result.data(), static_cast<int>(result.size()), SQLITE_STATIC);
    return Step(update_, "UPDATE");
  }

 private:
  explicit SqliteSession(sqlite3* db) : db_(db) {}

  // Steps a statement that returns no rows; retries while another connection holds the lock
  // (past the busy timeout, which WAL mode does not always honour).
  Status Step(sqlite3_stmt* statement, std::string_view what) {
    const int rc = StepRow(statement);
    sqlite3_reset(statement);
    if (rc != SQLITE_DONE) return SqliteError(db_, what);
    return Status::OK();
  }

  int StepRow(sqlite3_stmt* statement) {
    for (;;) {
      const int rc = sqlite3_step(statement);
      if (rc != SQLITE_BUSY && rc != SQLITE_LOCKED) return rc;
      sqlite3_reset(statement);
      std::this_thread::yield();
    }
  }

  sqlite3* db_;
  sqlite3_stmt* insert_ = nullptr;
  sqlite3_stmt* update_ = nullptr;
  sqlite3_stmt* select_ = nullptr;
};

class SqliteSubject final : public Subject {
 public:
  static Result<std::unique_ptr<Subject>> Open(const SubjectConfig& config,
                                               std::string synchronous) {
    const std::string path = config.directory + "/dedup.sqlite";
    // This connection creates the table and stays open, so the WAL is not checkpointed away
    // between the threads' connections.
    IDEM_ASSIGN_OR_RETURN(sqlite3 * db, OpenSqlite(path, synchronous));
    return std::unique_ptr<Subject>(new SqliteSubject(path, std::move(synchronous), db));
  }
  ~SqliteSubject() override { sqlite3_close(keeper_); }

  Result<std::unique_ptr<Session>> Connect() override {
    return SqliteSession::Open(path_, synchronous_);
  }

 private:
  SqliteSubject(std::string path, std::string synchronous, sqlite3* keeper)
      : path_(std::move(path)), synchronous_(std::move(synchronous)), keeper_(keeper) {}
  const std::string path_;
  const std::string synchronous_;
  sqlite3* keeper_;
};

// ---- PostgreSQL, hand-written SQL -------------------------------------------------------------

class PgSqlSession final : public Session {
 public:
  PgSqlSession(std::unique_ptr<PgConnection> connection, const std::string& table, bool read_first,
               bool prepared)
      : connection_(std::move(connection)),
        read_first_(read_first),
        prepared_(prepared),
        insert_("INSERT INTO " + table +
                " (key, state, lease_deadline) VALUES ($1, 0, now() + interval '10 seconds') "
                "ON CONFLICT (key) DO NOTHING"),
        update_("UPDATE " + table + " SET state = 1, result = $2 WHERE key = $1"),
        select_("SELECT state, result FROM " + table + " WHERE key = $1"),
        accounts_upsert_(AccountsUpsert(table)) {}

  Result<BeginAnswer> Begin(std::string_view key) override {
    if (read_first_) {
      IDEM_ASSIGN_OR_RETURN(std::optional<Answer> stored, Read(key));
      if (stored) return BeginAnswer{*stored, 0};
    }
    IDEM_ASSIGN_OR_RETURN(PgResultPtr inserted, Exec(insert_, {key}));
    if (std::string_view(PQcmdTuples(inserted.get())) == "1") {
      return BeginAnswer{Answer::kAcquired, 0};
    }
    IDEM_ASSIGN_OR_RETURN(std::optional<Answer> stored, Read(key));
    if (!stored) return Status::Failed("an existing key " + std::string(key) + " was not found");
    return BeginAnswer{*stored, 0};
  }

  Status Complete(std::string_view key, uint64_t /*token*/, std::string_view result) override {
    return Exec(update_, {key, result}).status();
  }

  // The atomic-phases transaction, a statement a round trip as a hand-written client sends it.
  Status RunAdding(std::string_view key, std::string_view result,
                   std::string_view account) override {
    IDEM_RETURN_IF_ERROR(Exec("BEGIN", {}).status());
    IDEM_ASSIGN_OR_RETURN(PgResultPtr inserted, Exec(insert_, {key}));
    if (std::string_view(PQcmdTuples(inserted.get())) != "1") {
      IDEM_RETURN_IF_ERROR(Exec("ROLLBACK", {}).status());
      return Status::Failed("a fresh key " + std::string(key) + " was not acquired");
    }
    IDEM_RETURN_IF_ERROR(Exec(accounts_upsert_, {account}).status());
    IDEM_RETURN_IF_ERROR(Exec(update_, {key, result}).status());
    return Exec("COMMIT", {}).status();
  }

 private:
  Result<PgResultPtr> Exec(const std::string& sql, const std::vector<std::string_view>& params,
                           bool binary_results = false) {
    return prepared_ ? connection_->ExecPrepared(sql, params, binary_results)
                     : connection_->Exec(sql, params, binary_results);
  }

  // The stored answer for `key` (its result read too, as a replay returns it), or nullopt.
  Result<std::optional<Answer>> Read(std::string_view key) {
    IDEM_ASSIGN_OR_RETURN(PgResultPtr row, Exec(select_, {key}, /*binary_results=*/true));
    if (PQntuples(row.get()) == 0) return std::optional<Answer>();
    // smallint in binary: two bytes, big-endian.
    const auto* state = reinterpret_cast<const unsigned char*>(PQgetvalue(row.get(), 0, 0));
    const bool done = ((state[0] << 8) | state[1]) == 1;
    return std::optional<Answer>(done ? Answer::kReplay : Answer::kInProgress);
  }

  std::unique_ptr<PgConnection> connection_;
  const bool read_first_;
  const bool prepared_;  // named prepared statements instead of unnamed ones
  const std::string insert_, update_, select_, accounts_upsert_;
};

class PgSqlSubject final : public Subject {
 public:
  static Result<std::unique_ptr<Subject>> Open(const SubjectConfig& config, bool read_first,
                                               bool prepared) {
    IDEM_ASSIGN_OR_RETURN(auto admin, PgConnection::Connect(config.postgres));
    IDEM_RETURN_IF_ERROR(DropPgTables(*admin, config.table));
    // The table of the SQLite anchor: the key, a state (0 pending, 1 done), the result, and a
    // lease for a claim whose holder died.
    IDEM_RETURN_IF_ERROR(admin
                             ->Exec("CREATE TABLE " + config.table +
                                    " (key text PRIMARY KEY, state smallint NOT NULL, result "
                                    "bytea, lease_deadline timestamptz NOT NULL)")
                             .status());
    IDEM_RETURN_IF_ERROR(MakeAccountsTable(*admin, config.table));
    return std::unique_ptr<Subject>(new PgSqlSubject(config, read_first, prepared));
  }

  Result<std::unique_ptr<Session>> Connect() override {
    IDEM_ASSIGN_OR_RETURN(auto connection, PgConnection::Connect(uri_));
    // What kSync means on the server: each commit waits for its WAL flush (the default, said
    // explicitly so that a server configured otherwise does not skew the comparison).
    IDEM_RETURN_IF_ERROR(connection->Exec("SET synchronous_commit = on").status());
    return std::unique_ptr<Session>(
        std::make_unique<PgSqlSession>(std::move(connection), table_, read_first_, prepared_));
  }

 private:
  PgSqlSubject(const SubjectConfig& config, bool read_first, bool prepared)
      : uri_(config.postgres), table_(config.table), read_first_(read_first), prepared_(prepared) {}
  const std::string uri_;
  const std::string table_;
  const bool read_first_;
  const bool prepared_;
};

// ---- Redis ----------------------------------------------------------------------------------

using ReplyPtr = std::unique_ptr<redisReply, decltype(&freeReplyObject)>;

class RedisSession final : public Session {
 public:
  static Result<std::unique_ptr<Session>> Open(int port) {
    redisContext* context = redisConnect("127.0.0.1", port);
    if (context == nullptr || context->err) {
      const std::string error = context ? context->errstr : "out of memory";
      if (context) redisFree(context);
      return Status(Status::Code::kUnavailable,
                    "connecting to Redis on 127.0.0.1:" + std::to_string(port) + ": " + error);
    }
    return std::unique_ptr<Session>(new RedisSession(context));
  }
  ~RedisSession() override { redisFree(context_); }

  Result<BeginAnswer> Begin(std::string_view key) override {
    IDEM_ASSIGN_OR_RETURN(ReplyPtr set, Command("SET %b pending NX PX 10000", key));
    if (set->type == REDIS_REPLY_STATUS) return BeginAnswer{Answer::kAcquired, 0};
    IDEM_ASSIGN_OR_RETURN(ReplyPtr get, Command("GET %b", key));
    if (get->type != REDIS_REPLY_STRING) {
      return Status(Status::Code::kFailed, "Redis GET of an existing key found nothing");
    }
    const bool pending = std::string_view(get->str, get->len) == "pending";
    return BeginAnswer{pending ? Answer::kInProgress : Answer::kReplay, 0};
  }

  Status Complete(std::string_view key, uint64_t /*token*/, std::string_view result) override {
    redisReply* reply = static_cast<redisReply*>(
        redisCommand(context_, "SET %b %b", key.data(), key.size(), result.data(), result.size()));
    return Check(reply).status();
  }

  Status FlushAll() {
    redisReply* reply = static_cast<redisReply*>(redisCommand(context_, "FLUSHALL"));
    return Check(reply).status();
  }

 private:
  explicit RedisSession(redisContext* context) : context_(context) {}

  Result<ReplyPtr> Command(const char* format, std::string_view key) {
    return Check(static_cast<redisReply*>(redisCommand(context_, format, key.data(), key.size())));
  }

  Result<ReplyPtr> Check(redisReply* raw) {
    if (raw == nullptr) {
      return Status(Status::Code::kUnavailable, std::string("Redis: ") + context_->errstr);
    }
    ReplyPtr reply(raw, &freeReplyObject);
    if (reply->type == REDIS_REPLY_ERROR) {
      return Status(Status::Code::kFailed, "Redis: " + std::string(reply->str, reply->len));
    }
    return reply;
  }

  redisContext* context_;
};

class RedisSubject final : public Subject {
 public:
  static Result<std::unique_ptr<Subject>> Open(int port) {
    IDEM_ASSIGN_OR_RETURN(auto session, RedisSession::Open(port));
    IDEM_RETURN_IF_ERROR(static_cast<RedisSession&>(*session).FlushAll());
    return std::unique_ptr<Subject>(new RedisSubject(port));
  }
  Result<std::unique_ptr<Session>> Connect() override { return RedisSession::Open(port_); }

 private:
  explicit RedisSubject(int port) : port_(port) {}
  const int port_;
};

}  // namespace

const std::vector<std::string>& AllSystems() {
  static const std::vector<std::string> systems = {
      "idem-buffered",
      "idem-sync",
      "idem-periodic",
      "rocksdb",
      "rocksdb-sync",
      "sqlite-off",
      "sqlite-full",
      "redis",
      "idem-pg",
      "pg-sql",
      "pg-sql-read-first",
      "pg-sql-prepared",
      "pg-sql-read-first-prepared",
  };
  return systems;
}

bool IsPostgresSystem(std::string_view system) {
  return system == "idem-pg" || system.starts_with("pg-");
}

Result<std::unique_ptr<Subject>> OpenSubject(std::string_view system, const SubjectConfig& config) {
  if (system == "idem-buffered") return OpenIdem(config, Durability::kBuffered);
  if (system == "idem-sync") return OpenIdem(config, Durability::kSync);
  if (system == "idem-periodic") return OpenIdem(config, Durability::kPeriodic);
  if (system == "rocksdb") return RocksDbSubject::Open(config, /*sync=*/false);
  if (system == "rocksdb-sync") return RocksDbSubject::Open(config, /*sync=*/true);
  if (system == "sqlite-off") return SqliteSubject::Open(config, "OFF");
  if (system == "sqlite-full") return SqliteSubject::Open(config, "FULL");
  if (system == "redis") return RedisSubject::Open(config.redis_port);
  if (IsPostgresSystem(system) && config.postgres.empty()) {
    return Status::InvalidArgument(std::string(system) + " needs a server: --postgres URI");
  }
  if (system == "idem-pg") return OpenIdemOnPostgres(config);
  for (const bool read_first : {false, true}) {
    for (const bool prepared : {false, true}) {
      const std::string name =
          std::string("pg-sql") + (read_first ? "-read-first" : "") + (prepared ? "-prepared" : "");
      if (system == name) return PgSqlSubject::Open(config, read_first, prepared);
    }
  }
  return Status::InvalidArgument("unknown system " + std::string(system));
}

Status Session::RunAdding(std::string_view key, std::string_view result, std::string_view account) {
  IDEM_ASSIGN_OR_RETURN(BeginAnswer answer, Begin(key));
  if (answer.answer != Answer::kAcquired) {
    return Status::Failed("a fresh key " + std::string(key) + " was not acquired");
  }
  return CompleteAdding(key, answer.token, result, account);
}

std::unique_ptr<Subject> StoreSubject(Store& store) {
  return std::make_unique<BorrowedStoreSubject>(store);
}

}  // namespace idem::bench
