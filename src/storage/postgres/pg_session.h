// One PostgreSQL connection, as PgPool (pg_pool.h) uses it: connecting to one host within a
// deadline, running a transaction on it as one pipeline, and what its errors mean. Internal to
// the pool; no libpq header here either.

#ifndef IDEM_STORAGE_POSTGRES_PG_SESSION_H_
#define IDEM_STORAGE_POSTGRES_PG_SESSION_H_

#include <chrono>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "storage/postgres/pg_conninfo.h"
#include "storage/postgres/pg_pool.h"

namespace idem::storage {

using PgDeadline = std::chrono::steady_clock::time_point;

// What the pool does about an error (docs/design/postgresql.md, sec. 7).
enum class PgFailure {
  kNone,
  kConnectionLost,    // it broke, or class 08, 57P01-57P03, 25006: reconnect, maybe resend
  kStatementTimeout,  // 57014: the server ended a statement (statement_timeout)
  kNoAnswer,          // no answer by the deadline: cancel and close the connection
  kRetry,             // 40001, 40P01: run the transaction again
  kRefused,           // class 28 (authentication), 3D000 (no such database): final
  kNotPrepared,       // 26000, 42P05 for a named statement: the session is not the one it was
                      // prepared on (a pooler in transaction mode): send unnamed, run again
  kOther,             // any other error: final
};

// The failure a SQLSTATE stands for; kOther for an empty or unknown one.
PgFailure ClassifySqlState(std::string_view sqlstate);

// The SQLSTATE of the last server error in a verbose libpq message ("... failed: FATAL:  28P01:
// password authentication failed ..."), or empty.
std::string SqlStateInMessage(std::string_view message);

// libpq's message as one line, without the LOCATION lines of verbose errors, control
// characters escaped. Not redacted.
std::string OneLine(std::string_view message);

struct PgConnectResult {
  pg_conn* conn = nullptr;  // connected, nonblocking, in pipeline mode; null on failure
  std::string message;      // libpq's, verbose (with the SQLSTATE); not redacted
};

// Connects with `params` (PgConninfo::ForHost) by PQconnectStartParams, waiting at most until
// `deadline`: unlike libpq's blocking connect, no host can hold the caller past it.
PgConnectResult ConnectSession(const PgConnectParams& params, PgDeadline deadline);

// Closes `conn` (PQfinish: tells the server the session ends).
void CloseSession(pg_conn* conn);
// Asks the server to cancel what `conn` runs, from a thread of its own (PQcancel connects anew
// and blocks, for as long as the server does not answer), and closes `conn` at once. While 4
// cancels still wait for their servers, it only closes.
void CancelAndCloseSession(pg_conn* conn);
// True when `conn` is connected and idle outside a transaction: it may go back to the pool.
bool SessionIdle(pg_conn* conn);
// True when `conn` can be used for the next transaction: idle (SessionIdle), and nothing unread
// from the server (a server that shut down, or a pooler that dropped the session, sent its
// farewell). A system call: checked when a connection is taken from the pool, not when it goes
// back.
bool SessionReusable(pg_conn* conn);

struct PgPipelineOutcome {
  std::vector<PgRows> rows;  // one per statement, when failure is kNone
  PgFailure failure = PgFailure::kNone;
  std::string sqlstate;
  std::string message;  // the server's or libpq's; not redacted
  int statement = -1;   // the failed statement (an index into transaction.statements), or -1
  int query = -1;       // the failed query, counting every one sent (BEGIN, preparations), or -1
};

// The names of the statements prepared on one connection.
using PgPreparedNames = std::unordered_set<std::string>;

// Sends `transaction` on `conn` as BEGIN, SET LOCAL statement_timeout, its statements, COMMIT
// (not when keep_open) and one sync (or its statements alone), and reads the answers until
// `deadline`. After an
// error the transaction is rolled back (a second round trip). On kConnectionLost and kNoAnswer,
// close the connection.
// `prepared` (null: none) makes each statement a named prepared one, prepared in the same
// pipeline the first time the connection sends it: the server then parses and plans it once per
// session instead of at every call (for idem's statements, two thirds of their cost in the
// server). Names are digests of the statement's text and parameter types, so that a session
// that holds a name holds the same statement. Names prepared are added to it.
PgPipelineOutcome RunPipeline(pg_conn* conn, PgPreparedNames* prepared,
                              const PgTransaction& transaction,
                              std::chrono::milliseconds statement_timeout, PgDeadline deadline);

}  // namespace idem::storage

#endif  // IDEM_STORAGE_POSTGRES_PG_SESSION_H_
