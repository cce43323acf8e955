#include "pg.h"

#include <cctype>
#include <cstdlib>
#include <utility>

namespace idem::bench {

Result<std::unique_ptr<PgConnection>> PgConnection::Connect(const std::string& uri) {
  PGconn* connection = PQconnectdb(uri.c_str());
  if (connection == nullptr || PQstatus(connection) != CONNECTION_OK) {
    // libpq's message names the host and the failure, never the password.
    const std::string error = connection ? PQerrorMessage(connection) : "out of memory";
    PQfinish(connection);
    return Status::Unavailable("connecting to PostgreSQL: " + error);
  }
  // The server's notices (a DROP ... IF EXISTS of nothing) are not the benchmark's output.
  PQsetNoticeProcessor(
      connection, [](void*, const char*) {}, nullptr);
  return std::unique_ptr<PgConnection>(new PgConnection(connection));
}

PgConnection::~PgConnection() { PQfinish(connection_); }

Result<PgResultPtr> PgConnection::Exec(std::string_view sql,
                                       const std::vector<std::string_view>& params,
                                       bool binary_results) {
  std::vector<const char*> values;
  std::vector<int> lengths;
  std::vector<int> formats;
  for (std::string_view param : params) {
    values.push_back(param.data());
    lengths.push_back(static_cast<int>(param.size()));
    // Binary: the bytes as they are, with their length (text and bytea columns take them so).
    formats.push_back(1);
  }
  const std::string text(sql);
  return Checked(PgResultPtr(PQexecParams(connection_, text.c_str(),
                                          static_cast<int>(params.size()), nullptr, values.data(),
                                          lengths.data(), formats.data(), binary_results ? 1 : 0),
                             &PQclear),
                 text);
}

Result<PgResultPtr> PgConnection::ExecPrepared(std::string_view sql,
                                               const std::vector<std::string_view>& params,
                                               bool binary_results) {
  auto found = prepared_.find(sql);
  if (found == prepared_.end()) {
    const std::string name = "s" + std::to_string(prepared_.size());
    const std::string text(sql);
    IDEM_RETURN_IF_ERROR(Checked(PgResultPtr(PQprepare(connection_, name.c_str(), text.c_str(),
                                                       static_cast<int>(params.size()), nullptr),
                                             &PQclear),
                                 text)
                             .status());
    found = prepared_.emplace(text, name).first;
  }
  std::vector<const char*> values;
  std::vector<int> lengths;
  std::vector<int> formats(params.size(), 1);
  for (std::string_view param : params) {
    values.push_back(param.data());
    lengths.push_back(static_cast<int>(param.size()));
  }
  return Checked(PgResultPtr(PQexecPrepared(connection_, found->second.c_str(),
                                            static_cast<int>(params.size()), values.data(),
                                            lengths.data(), formats.data(), binary_results ? 1 : 0),
                             &PQclear),
                 found->first);
}

Result<PgResultPtr> PgConnection::Checked(PgResultPtr result, const std::string& sql,
                                          ExecStatusType expected) {
  const ExecStatusType status = result ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
  if (status != expected && status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    return Status::IOError("PostgreSQL: " + sql.substr(0, 80) + ": " + PQerrorMessage(connection_));
  }
  return result;
}

Result<double> PgConnection::Number(std::string_view sql,
                                    const std::vector<std::string_view>& params) {
  IDEM_ASSIGN_OR_RETURN(PgResultPtr result, Exec(sql, params));
  if (PQntuples(result.get()) < 1 || PQgetisnull(result.get(), 0, 0)) return 0.0;
  return std::strtod(PQgetvalue(result.get(), 0, 0), nullptr);
}

Status PgConnection::CopyIn(std::string_view table,
                            const std::function<Status(const SendRows&)>& produce) {
  const std::string sql = "COPY " + std::string(table) + " FROM STDIN";
  IDEM_RETURN_IF_ERROR(
      Checked(PgResultPtr(PQexec(connection_, sql.c_str()), &PQclear), sql, PGRES_COPY_IN)
          .status());
  const Status produced = produce([&](std::string_view rows) -> Status {
    if (PQputCopyData(connection_, rows.data(), static_cast<int>(rows.size())) != 1) {
      return Status::IOError("PostgreSQL: " + sql + ": " + PQerrorMessage(connection_));
    }
    return Status::OK();
  });
  // With an error message, the server abandons the COPY.
  if (PQputCopyEnd(connection_, produced.ok() ? nullptr : "abandoned by the benchmark") != 1) {
    return Status::IOError("PostgreSQL: " + sql + ": " + PQerrorMessage(connection_));
  }
  PgResultPtr result(PQgetResult(connection_), &PQclear);
  while (PGresult* after = PQgetResult(connection_)) PQclear(after);  // the connection is idle
  IDEM_RETURN_IF_ERROR(produced);
  return Checked(std::move(result), sql).status();
}

std::string PgTableName(std::string_view name) {
  std::string table = "idem_bench_";
  for (char c : name) {
    table += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  }
  return table;
}

Status DropPgTables(PgConnection& connection, const std::string& table) {
  // idem's own names beside its table (src/storage/postgres/pg_schema.cc): <table>_meta,
  // <table>_token_seq; and the effects workload's <table>_accounts.
  IDEM_RETURN_IF_ERROR(
      connection
          .Exec("DROP TABLE IF EXISTS " + table + ", " + table + "_meta, " + table + "_accounts")
          .status());
  return connection.Exec("DROP SEQUENCE IF EXISTS " + table + "_token_seq").status();
}

Result<PgStatementCounter> PgStatementCounter::Start(PgConnection& connection) {
  constexpr std::string_view kReset = "SELECT pg_stat_statements_reset()";
  if (connection.Exec(kReset).ok()) return PgStatementCounter(&connection, true);
  // Not yet created in this database; creating it fails when the server did not load it.
  if (connection.Exec("CREATE EXTENSION IF NOT EXISTS pg_stat_statements").ok() &&
      connection.Exec(kReset).ok()) {
    return PgStatementCounter(&connection, true);
  }
  return PgStatementCounter(&connection, false);
}

Status PgStatementCounter::AddTo(Measurement& m) const {
  if (!available_) return Status::OK();
  IDEM_ASSIGN_OR_RETURN(
      PgResultPtr result,
      connection_->Exec("SELECT coalesce(sum(calls), 0)::bigint, "
                        "coalesce(sum(total_exec_time) * 1000, 0)::bigint FROM pg_stat_statements "
                        "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = "
                        "current_database()) AND query NOT LIKE '%pg_stat_statements%'"));
  m.counts["statements"] += std::strtoull(PQgetvalue(result.get(), 0, 0), nullptr, 10);
  m.counts["server_exec_us"] += std::strtoull(PQgetvalue(result.get(), 0, 1), nullptr, 10);
  return Status::OK();
}

}  // namespace idem::bench
