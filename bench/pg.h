// What the benchmark does in PostgreSQL itself, through libpq: the hand-written SQL anchors'
// statements, the tables' setup and removal, the purge workload's load and scan, and the count
// of statements the server ran for a measurement (pg_stat_statements).

#ifndef IDEM_BENCH_PG_H_
#define IDEM_BENCH_PG_H_

#include <libpq-fe.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "harness.h"
#include "idem/status.h"

namespace idem::bench {

using PgResultPtr = std::unique_ptr<PGresult, decltype(&PQclear)>;

// One connection; not thread-safe (one per thread, as a hand-written client holds it).
class PgConnection {
 public:
  static Result<std::unique_ptr<PgConnection>> Connect(const std::string& uri);
  ~PgConnection();

  // Runs one statement on its own (autocommit), unnamed, as libpq's PQexecParams sends it
  // (parse, bind, execute: one round trip, as idem's statements). Parameters are sent as binary
  // (for text and bytea columns: the bytes themselves). Results in text, or in binary with
  // `binary_results`.
  Result<PgResultPtr> Exec(std::string_view sql, const std::vector<std::string_view>& params = {},
                           bool binary_results = false);
  // The same as a named prepared statement, prepared on this connection the first time (PQprepare,
  // then PQexecPrepared: the server parses and plans it once), as idem's pool sends its own.
  Result<PgResultPtr> ExecPrepared(std::string_view sql,
                                   const std::vector<std::string_view>& params = {},
                                   bool binary_results = false);
  // The first column of the first row of a text result, as a number.
  Result<double> Number(std::string_view sql, const std::vector<std::string_view>& params = {});
  // `COPY table FROM STDIN` in the text format: `produce` calls its argument with the rows, in
  // chunks of whole lines; an error it returns abandons the COPY (nothing is loaded).
  using SendRows = std::function<Status(std::string_view rows)>;
  Status CopyIn(std::string_view table, const std::function<Status(const SendRows&)>& produce);

 private:
  explicit PgConnection(PGconn* connection) : connection_(connection) {}
  // The result `result` of `sql`, or an error naming it when the statement failed.
  // `expected` is a status accepted besides PGRES_COMMAND_OK and PGRES_TUPLES_OK.
  Result<PgResultPtr> Checked(PgResultPtr result, const std::string& sql,
                              ExecStatusType expected = PGRES_COMMAND_OK);
  PGconn* connection_;
  std::map<std::string, std::string, std::less<>> prepared_;  // SQL -> statement name
};

// The benchmark's table names for one measurement: "idem_bench_" and `name`, made a valid
// identifier (letters, digits and underscores).
std::string PgTableName(std::string_view name);

// Drops `table` and what idem keeps beside it (its meta table and token sequence), if there.
Status DropPgTables(PgConnection& connection, const std::string& table);

// Counts the statements the server runs between Start and AddTo, with pg_stat_statements when
// the server loaded it (scripts/bench.sh starts it so); otherwise counts nothing. Counts only
// plannable statements (SELECT, INSERT, UPDATE, DELETE): with pg_stat_statements.track_utility
// off, BEGIN, SET LOCAL and COMMIT, which idem sends in the same pipeline as its statement, are
// not counted.
class PgStatementCounter {
 public:
  // Resets the server's statistics.
  static Result<PgStatementCounter> Start(PgConnection& connection);
  // Adds `statements` (how many ran) and `server_exec_us` (their execution time in the server,
  // which leaves out the network, commits' WAL flushes and waiting for a connection) to m.counts.
  Status AddTo(Measurement& m) const;

 private:
  PgStatementCounter(PgConnection* connection, bool available)
      : connection_(connection), available_(available) {}
  PgConnection* connection_;
  bool available_;
};

}  // namespace idem::bench

#endif  // IDEM_BENCH_PG_H_
