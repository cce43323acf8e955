// PgPool: the connections of one PostgreSQL store in a process, and the one way idem talks to
// the server: a transaction of statements, sent as one pipeline (one round trip).
//
//   PgPool pool(conninfo, {.size = 8});
//   Result<std::vector<PgRows>> rows = pool.Run({
//       .statements = {{"SET LOCAL synchronous_commit = on", {}},
//                      {"SELECT result FROM t WHERE key = $1", {PgParam::Bytea(key)}}},
//       .resendable = true});
//   // rows->at(1).Bytes(0, 0): the first column of the first row of the second statement
//
// Run sends BEGIN, SET LOCAL statement_timeout, the statements and COMMIT in libpq's pipeline
// mode with one sync, unnamed statements only and every parameter and result in binary format,
// so it works behind PgBouncer in transaction pooling (no session state, no named statements).
// What fails is mapped to a Status (docs/design/postgresql.md, sec. 7):
//   - connection lost (it broke, SQLSTATE class 08, 57P01-57P03, or 25006: a standby that was
//     the primary): the connection is closed, a new one made (trying the URI's hosts in order)
//     with pauses that double, and a resendable transaction sent again, for at most
//     failover_timeout; then kUnavailable. A transaction that is not resendable returns
//     kUnavailable at once if it may have reached the server (its outcome is unknown).
//   - 40001/40P01 (serialization failure, deadlock): rolled back and run again, within the same
//     failover_timeout.
//   - 57014 (the server's statement_timeout) and no answer within the timeout: kTimedOut; in the
//     second case the query is cancelled and the connection closed, never reused.
//   - no connection made by the deadline (a server frozen, or cut off without a reset), or a
//     connection lost only after the whole timeout: kUnavailable at once, not tried again. Each
//     attempt has one deadline, the timeout plus a second (the timeout alone for
//     PgTransaction::alone), for connecting and for the answer together; every wait on the server
//     is a poll against it.
//   - authentication refused (class 28) or no such database (3D000): kInvalidArgument at once;
//     the message is libpq's, naming host, port and user, never the password.
//   - any other error: the server's message, its SQLSTATE and the statement: kIOError for
//     classes 53 and 58 (resources, system), kCorruption for XX, kInvalidArgument otherwise.
// Every message names the store by PgConninfo::display_name() and passes libpq's and the
// server's text through PgConninfo::Redact().
//
// Thread-safe: any number of threads may call Run at once; each call checks out one connection
// exclusively (a PGconn serves one thread at a time). Connections are made when first needed
// and go back to the pool only when the server says the session is idle outside a transaction;
// otherwise they are closed. In a child of fork() Run returns kUnavailable and the parent's
// connections are neither used nor closed (closing would end the parent's sessions).

#ifndef IDEM_STORAGE_POSTGRES_PG_POOL_H_
#define IDEM_STORAGE_POSTGRES_PG_POOL_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "idem/status.h"
#include "storage/postgres/pg_conninfo.h"
#include "util/mutex.h"

struct pg_conn;    // libpq's PGconn
struct pg_result;  // libpq's PGresult

namespace idem::storage {

enum class PgFailure;                                     // pg_session.h
struct PgPipelineOutcome;                                 // pg_session.h
using PgPreparedNames = std::unordered_set<std::string>;  // pg_session.h

// The OIDs of the types idem uses (pg_type.dat; fixed since PostgreSQL 7).
inline constexpr uint32_t kPgBoolOid = 16;
inline constexpr uint32_t kPgByteaOid = 17;
inline constexpr uint32_t kPgInt8Oid = 20;
inline constexpr uint32_t kPgInt2Oid = 21;
inline constexpr uint32_t kPgInt4Oid = 23;
inline constexpr uint32_t kPgTextOid = 25;
inline constexpr uint32_t kPgTimestamptzOid = 1184;

// A statement parameter in PostgreSQL's binary format, with its type.
struct PgParam {
  uint32_t type = 0;                 // the type's OID; 0: inferred by the server (Untyped)
  std::optional<std::string> value;  // the binary value (text when `text`); nullopt: NULL
  bool text = false;                 // `value` is in the type's text form

  static PgParam Bytea(std::string_view bytes);
  static PgParam Text(std::string_view text);
  static PgParam Int2(int16_t value);
  static PgParam Int8(int64_t value);
  static PgParam Bool(bool value);
  // A timestamptz, given in microseconds since the Unix epoch (util/time.h); PostgreSQL counts
  // from 2000-01-01.
  static PgParam Timestamp(int64_t unix_micros);
  static PgParam Null(uint32_t type);
  // A value in its text form, of the type the server infers from where it is used (or a cast:
  // $1::bigint), as psql would send it: for applications' own statements.
  static PgParam Untyped(std::optional<std::string_view> text);
};

// One SQL statement: its text names parameters $1, $2, ...; values never go into the text.
struct PgStatement {
  std::string sql;
  std::vector<PgParam> params;
  // The rows in their text form (what psql shows) instead of binary: for applications' own
  // statements, whose types idem does not know.
  bool text_results = false;
  // False: always sent unnamed, never prepared on the connection (applications' own statements,
  // whose texts are theirs and may be without number; and transaction control).
  bool prepare = true;
};

struct PgTransaction {
  std::vector<PgStatement> statements;
  // BEGIN READ ONLY: the server refuses every write (kInvalidArgument).
  bool read_only = false;
  // True when running the transaction twice does no harm (idem's are written so), which lets
  // Run send it again on a new connection when the old one was lost after sending it.
  bool resendable = false;
  // Bounds the wait for a free connection, each statement on the server (statement_timeout) and
  // the wait for the answer (this plus a second, so the server's timeout, which keeps the
  // connection, usually comes first). 0: PgPoolOptions::request_timeout.
  std::chrono::milliseconds timeout{0};
  // Sends the statements alone, without BEGIN, SET LOCAL statement_timeout and COMMIT: the
  // server runs them as one implicit transaction, committed at the pipeline's sync (the extended
  // protocol's rule), with fewer messages to parse and run (what a replay costs is mostly
  // those). Then neither `read_only` nor a statement_timeout is set on the server: the answer is
  // awaited for `timeout` only, then the query is cancelled and its connection closed. A setting
  // the commit needs, a statement makes itself: set_config('synchronous_commit', 'off', true)
  // lasts until the transaction ends.
  bool alone = false;
  // Sends BEGIN, SET LOCAL statement_timeout and the statements, but no COMMIT: the transaction
  // stays open on its connection (PgOpenTransaction's first round trip).
  bool keep_open = false;
};

// What one statement returned: its rows (binary format) and how many rows it changed. Values
// are read in place; a PgRows owns them. Move-only.
class PgRows {
 public:
  explicit PgRows(pg_result* result) : result_(result) {}

  int size() const;  // rows
  int columns() const;
  // Rows inserted, updated or deleted (or returned by a SELECT); 0 for other statements.
  uint64_t affected() const;

  std::string_view ColumnName(int column) const;  // empty when out of range
  bool IsNull(int row, int column) const;
  // The bytes of a bytea or text value (empty for NULL or out of range).
  std::string_view Bytes(int row, int column) const;
  // These return kCorruption naming the column when the value is NULL or of another type.
  Result<int64_t> Int(int row, int column) const;  // int2, int4 or int8
  Result<bool> Bool(int row, int column) const;
  // A timestamptz, as microseconds since the Unix epoch; kCorruption for +-infinity.
  Result<int64_t> Timestamp(int row, int column) const;

 private:
  struct Clear {
    void operator()(pg_result* result) const;
  };
  Result<std::string_view> Fixed(int row, int column, uint32_t type, std::size_t size) const;

  std::unique_ptr<pg_result, Clear> result_;
};

struct PgPoolOptions {
  // How many connections at most. Default: 8.
  int size = 8;
  // A transaction's timeout when it gives none (PgTransaction::timeout). Default: 10 s.
  std::chrono::milliseconds request_timeout{std::chrono::seconds(10)};
  // How long one Run keeps connecting (each host of the URI at most its connect_timeout),
  // reconnecting and resending after the connection was lost or refused (a server restart, a
  // failover), and retrying after serialization failures. A server that does not answer at
  // all ends the Run at its attempt's deadline instead. Default: 10 s.
  std::chrono::milliseconds failover_timeout{std::chrono::seconds(10)};
};

// What a pool has done since it was made, for tests and diagnostics.
struct PgPoolStats {
  uint64_t connections_made = 0;  // successful connects
  uint64_t sent = 0;     // transactions sent, one round trip each (resends and retries count again)
  uint64_t resends = 0;  // transactions sent again after a lost connection
  uint64_t retries = 0;  // transactions run again after 40001/40P01, or unprepared
  uint64_t cancels = 0;  // answers not awaited past the timeout (cancelled, closed)
  // Whether statements are still sent prepared: false once the server showed that the pool's
  // sessions are not its own (a pooler in transaction mode, such as PgBouncer).
  bool prepares = true;
  std::size_t waiting = 0;  // callers waiting for a connection now, every one busy
};

class PgPool;

// A transaction left open on one checked-out connection (PgPool::Begin), for statements that
// depend on what earlier ones returned: each Run is one round trip. The first Run checks a
// connection out and sends BEGIN and SET LOCAL statement_timeout in its pipeline (connecting,
// and sending it again after a lost connection or a serialization failure, as PgPool::Run does:
// nothing of the transaction has committed yet); RunAndCommit sends its statements and COMMIT
// together. After that, nothing is resent: a lost connection ends the transaction (rolled back
// by the server, unless COMMIT was sent), and so does the first error (the server rolled it
// back): every later call returns that error. A deadlock or a serialization failure (40P01,
// 40001) after the first Run is kConflict: run the whole transaction again. What is still open
// when it goes is rolled back, and its connection goes back to the pool. One thread at a time.
class PgOpenTransaction {
 public:
  ~PgOpenTransaction();
  PgOpenTransaction(const PgOpenTransaction&) = delete;
  PgOpenTransaction& operator=(const PgOpenTransaction&) = delete;

  // One PgRows per statement, in order; the errors of PgPool::Run.
  Result<std::vector<PgRows>> Run(std::vector<PgStatement> statements);
  // Run, then COMMIT, in one round trip. The rows of `statements`, when it committed. A
  // connection lost after COMMIT was sent: kUnavailable, "may or may not have been committed".
  Result<std::vector<PgRows>> RunAndCommit(std::vector<PgStatement> statements);
  // ROLLBACK, unless the transaction is over already (or never began on the server).
  void RollBack();
  // The SQLSTATE of the server's error that ended the transaction; empty for none.
  const std::string& failed_sqlstate() const { return failed_sqlstate_; }

 private:
  friend class PgPool;
  PgOpenTransaction(PgPool* pool, std::chrono::milliseconds timeout)
      : pool_(pool), timeout_(timeout) {}
  Result<std::vector<PgRows>> Step(std::vector<PgStatement> statements, bool commit);

  PgPool* const pool_;
  const std::chrono::milliseconds timeout_;
  bool checked_out_ = false;  // conn_ (or its place: null once closed) is this transaction's
  pg_conn* conn_ = nullptr;
  Status ended_ = Status::OK();  // OK while open; afterwards what the next call returns
  std::string failed_sqlstate_;
};

class PgPool {
 public:
  // Makes no connection: the first Run does.
  PgPool(PgConninfo conninfo, PgPoolOptions options);
  // Closes the idle connections (in a child of fork(), leaves them). No Run may be in progress.
  ~PgPool();
  PgPool(const PgPool&) = delete;
  PgPool& operator=(const PgPool&) = delete;

  // Runs `transaction` and returns one PgRows per statement, in order; see the top of this file
  // for the errors. kTimedOut "all N connections ... busy" when none is free within the timeout.
  // `resent`, when given, tells whether the transaction was sent more than once (a connection
  // lost after sending it: the first send may have committed).
  Result<std::vector<PgRows>> Run(const PgTransaction& transaction, bool* resent = nullptr);

  // A transaction to run statements in one round trip at a time (PgOpenTransaction), each of
  // them bounded by `timeout` (0: PgPoolOptions::request_timeout). Sends nothing yet.
  std::unique_ptr<PgOpenTransaction> Begin(std::chrono::milliseconds timeout);

  PgPoolStats stats() const;
  const PgConninfo& conninfo() const { return conninfo_; }

 private:
  struct Step;
  class Lease;
  // A Checkout waiting its turn, on its own stack; granted a slot by Return (with `conn`, or
  // null: connect anew), under mu_.
  struct Waiter {
    util::CondVar ready;
    bool granted = false;
    pg_conn* conn = nullptr;
  };
  using TimePoint = std::chrono::steady_clock::time_point;

  friend class PgOpenTransaction;

  // Run's and Begin's loop: tries `transaction` until it succeeds, fails for good, or
  // failover_timeout passes.
  Step Drive(const PgTransaction& transaction, bool* resent);
  Step Attempt(const PgTransaction& transaction, std::chrono::milliseconds timeout,
               TimePoint give_up);
  // What `outcome` of `transaction` on `conn` means: the result, or the error and what to do
  // next; closes `conn` (setting it null) when it cannot serve again.
  Step Judge(PgPipelineOutcome&& outcome, const PgTransaction& transaction,
             std::chrono::milliseconds answer_wait, pg_conn*& conn);
  // Judge without the SQLSTATE, which Judge adds to the step it returns.
  Step JudgeFailure(PgPipelineOutcome& outcome, const PgTransaction& transaction,
                    std::chrono::milliseconds answer_wait, pg_conn*& conn);
  // The statements prepared on `conn`, checked out by the caller; null once this pool stopped
  // preparing (a pooler in transaction mode).
  PgPreparedNames* PreparedOn(pg_conn* conn);
  // A connection (null: a free slot, to connect), or kTimedOut when none came within `timeout`.
  // Callers that have to wait are served in the order they came.
  Result<pg_conn*> Checkout(std::chrono::milliseconds timeout);
  // Gives back what Checkout gave (`conn` null: the connection was closed), to the oldest
  // waiter if there is one.
  void Return(pg_conn* conn);
  // Connects to the first host of the URI that accepts (each one within its connect_timeout
  // and its share of the time left), by `deadline` at the latest.
  Result<pg_conn*> Connect(TimePoint deadline);
  // Closes `conn` (asking the server to cancel what it runs first, when `cancel`) and forgets
  // what was prepared on it.
  void Discard(pg_conn* conn, bool cancel);
  Status Failed(PgFailure failure, std::string_view what, std::string_view message,
                std::string_view sqlstate) const;

  // Constant after construction.
  const PgConninfo conninfo_;
  const PgPoolOptions options_;
  const uint64_t fork_generation_;

  std::atomic<uint64_t> connections_made_{0};
  std::atomic<uint64_t> sent_{0};
  std::atomic<uint64_t> resends_{0};
  std::atomic<uint64_t> retries_{0};
  std::atomic<uint64_t> cancels_{0};
  // Statements are prepared on each connection the first time it sends them, so that the server
  // parses and plans each once per session (RunPipeline); until the server says a statement is
  // missing or exists already: a pooler in transaction mode (PgBouncer) runs each transaction on
  // any of its sessions. From then on this pool sends every statement unnamed.
  std::atomic<bool> prepares_{true};

  mutable util::Mutex mu_;
  std::vector<pg_conn*> idle_ IDEM_GUARDED_BY(mu_);  // connected, idle outside a transaction
  // Callers waiting for a connection, oldest first (Checkout). A connection given back goes to
  // the oldest, never to a caller that came later: otherwise a thread that gives its connection
  // back and asks again at once could take it first every time, until a waiter timed out with
  // "all connections busy" while others were served.
  std::deque<Waiter*> waiters_ IDEM_GUARDED_BY(mu_);
  // Per connection, the statements prepared on it. Its entry is only read and changed by the
  // thread that has the connection checked out (the map's nodes do not move).
  std::unordered_map<pg_conn*, PgPreparedNames> prepared_ IDEM_GUARDED_BY(mu_);
  // Connections (or places for one) in use by a Run.
  int checked_out_ IDEM_GUARDED_BY(mu_) = 0;
};

}  // namespace idem::storage

#endif  // IDEM_STORAGE_POSTGRES_PG_POOL_H_
