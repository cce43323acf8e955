#include "storage/pg_schema.h"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <memory>
#include <optional>
#include <vector>

#include "util/escape.h"

namespace idem::storage::pg {
namespace {

struct ResultDeleter {
  void operator()(PGresult* result) const { PQclear(result); }
};
using PgResult = std::unique_ptr<PGresult, ResultDeleter>;

// The records table's columns, in order, with the type information_schema reports for each.
struct Column {
  std::string_view name;
  std::string_view type;           // as CREATE TABLE spells it
  std::string_view reported_type;  // information_schema.columns.data_type
};
constexpr std::string_view kBytea = "bytea";
constexpr std::string_view kTimestamp = "timestamp with time zone";
constexpr std::array<Column, 18> kColumns = {{
    {"key", "bytea PRIMARY KEY", kBytea},  // keys are bytes; bytea orders like memcmp
    {"type", "bytea NOT NULL", kBytea},
    {"fingerprint", "bytea NOT NULL", kBytea},
    {"result", "bytea NOT NULL", kBytea},
    {"checkpoint", "bytea NOT NULL", kBytea},
    {"state", "smallint NOT NULL", "smallint"},  // State's values 0, 1, 2
    {"retryable", "boolean NOT NULL", "boolean"},
    {"token", "bigint NOT NULL", "bigint"},     // below 2^63: the sequence's range
    {"attempts", "bigint NOT NULL", "bigint"},  // a uint32_t does not fit integer
    {"holder_pid", "bigint NOT NULL", "bigint"},
    {"holder_start", "bigint NOT NULL", "bigint"},
    {"holder_scope", "bigint NOT NULL", "bigint"},  // uint64_t digests, stored bit-cast
    {"holder_request", "bigint NOT NULL", "bigint"},
    {"holder_took_over", "boolean NOT NULL", "boolean"},
    {"created", "timestamptz NOT NULL", kTimestamp},  // microseconds, as records keep them
    {"updated", "timestamptz NOT NULL", kTimestamp},
    {"lease_deadline", "timestamptz NOT NULL", kTimestamp},
    {"expires", "timestamptz NOT NULL", kTimestamp},
}};

// SQLSTATEs this file tells apart.
constexpr std::string_view kDuplicateTable = "42P07";
constexpr std::string_view kUniqueViolation = "23505";
constexpr std::string_view kInsufficientPrivilege = "42501";

std::string_view SqlState(const PGresult* result) {
  const char* state = result ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  return state ? state : "";
}

// The server's message for a failed statement, on one line.
std::string ErrorText(PGconn* conn, const PGresult* result) {
  const char* primary = result ? PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY) : nullptr;
  std::string text = primary ? primary : PQerrorMessage(conn);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return EscapeControls(text);
}

// Runs `sql` with text parameters. A failure is kUnavailable when the connection is gone and
// kInvalidArgument otherwise (a statement of this file that the server refuses says something
// about the database: a privilege, a name), naming `what`.
Result<PgResult> Run(PGconn* conn, std::string_view what, const std::string& sql,
                     const std::vector<std::string>& params = {}) {
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const std::string& param : params) values.push_back(param.c_str());
  PgResult result(PQexecParams(conn, sql.c_str(), static_cast<int>(values.size()), nullptr,
                               values.data(), nullptr, nullptr, 0));
  const ExecStatusType status = PQresultStatus(result.get());
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return result;
  const std::string message = fmt::format("{}: {}", what, ErrorText(conn, result.get()));
  if (PQstatus(conn) != CONNECTION_OK) return Status::Unavailable(message);
  return Status::InvalidArgument(message);
}

// A failed statement's status with its SQLSTATE, for the callers that tell some apart.
struct Failure {
  Status status;
  std::string sql_state;
};

std::optional<std::string> Quote(PGconn* conn, std::string_view name) {
  char* quoted = PQescapeIdentifier(conn, name.data(), name.size());
  if (quoted == nullptr) return std::nullopt;
  std::string text(quoted);
  PQfreemem(quoted);
  return text;
}

bool Exists(const PgResult& result) { return !PQgetisnull(result.get(), 0, 0); }

// Runs the statements that create the store, in one transaction. Returns the failure, if any,
// with its SQLSTATE, after rolling back.
std::optional<Failure> CreateTables(PGconn* conn, const TableNames& names) {
  std::string columns;
  for (const Column& column : kColumns) {
    if (!columns.empty()) columns += ", ";
    columns += fmt::format("{} {}", column.name, column.type);
  }
  const std::string sql = fmt::format(
      "BEGIN;"
      "CREATE TABLE {records} ({columns});"
      "CREATE INDEX {index} ON {records} (expires);"
      "CREATE SEQUENCE {sequence} AS bigint CACHE 1;"
      "CREATE TABLE {meta} (name text PRIMARY KEY, value text NOT NULL);"
      "INSERT INTO {meta} VALUES ('format', '{format}'), ('schema_version', '{version}');"
      "COMMIT",
      fmt::arg("records", names.records), fmt::arg("columns", columns),
      fmt::arg("index", names.expiry_index), fmt::arg("sequence", names.sequence),
      fmt::arg("meta", names.meta), fmt::arg("format", kFormat),
      fmt::arg("version", kSchemaVersion));
  PgResult result(PQexec(conn, sql.c_str()));
  if (PQresultStatus(result.get()) == PGRES_COMMAND_OK) return std::nullopt;
  Failure failure{Status::OK(), std::string(SqlState(result.get()))};
  const std::string message = ErrorText(conn, result.get());
  PgResult rolled_back(PQexec(conn, "ROLLBACK"));
  if (PQstatus(conn) != CONNECTION_OK) {
    failure.status =
        Status::Unavailable(fmt::format("creating the idem store {}: {}", names.display, message));
  } else if (failure.sql_state == kInsufficientPrivilege) {
    failure.status = Status::InvalidArgument(fmt::format(
        "creating the idem store {}: the role may not create tables in schema {} ({}); grant it "
        "CREATE on the schema, or create the store as a role that may",
        names.display, names.schema, message));
  } else {
    failure.status = Status::InvalidArgument(
        fmt::format("creating the idem store {}: {}", names.display, message));
  }
  return failure;
}

// Checks the meta table: format and schema version.
Status CheckMeta(PGconn* conn, const TableNames& names) {
  IDEM_ASSIGN_OR_RETURN(PgResult regclass, Run(conn, "looking for the meta table",
                                               "SELECT to_regclass($1)", {names.meta}));
  if (!Exists(regclass)) {
    return Status::InvalidArgument(fmt::format(
        "table {} is not an idem store (it has no table {}_meta); idem neither uses nor alters it",
        names.display, names.table));
  }
  IDEM_ASSIGN_OR_RETURN(
      PgResult rows,
      Run(conn, "reading the meta table",
          fmt::format("SELECT name, value FROM {} WHERE name IN ('format', 'schema_version')",
                      names.meta)));
  std::optional<std::string> format, version;
  for (int row = 0; row < PQntuples(rows.get()); ++row) {
    const std::string_view name = PQgetvalue(rows.get(), row, 0);
    (name == "format" ? format : version) = PQgetvalue(rows.get(), row, 1);
  }
  if (format != kFormat) {
    return Status::InvalidArgument(fmt::format(
        "table {} is not an idem store (its meta table's format is {}, not \"{}\"); idem neither "
        "uses nor alters it",
        names.display, format ? fmt::format("\"{}\"", EscapeControls(*format)) : "missing",
        kFormat));
  }
  uint32_t number = 0;
  const std::string text = version.value_or("");
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || number == 0) {
    return Status::Corruption(
        fmt::format("idem store {}: its schema_version \"{}\" is not a number", names.display,
                    EscapeControls(text)));
  }
  if (number > kSchemaVersion) {
    return Status::NewerVersion(fmt::format(
        "idem store {} has schema version {}, written by a newer idem; this one knows versions up "
        "to {}, and leaves the store alone",
        names.display, number, kSchemaVersion));
  }
  return Status::OK();
}

// Checks the records table's columns and types, in order.
Status CheckColumns(PGconn* conn, const TableNames& names) {
  IDEM_ASSIGN_OR_RETURN(
      PgResult rows,
      Run(conn, "reading the records table's columns",
          "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
          "WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position",
          {names.schema, names.table}));
  const int count = PQntuples(rows.get());
  for (std::size_t i = 0; i < kColumns.size(); ++i) {
    const Column& want = kColumns[i];
    if (static_cast<int>(i) >= count) {
      return Status::InvalidArgument(fmt::format(
          "table {} is not an idem store (it has no column {}); idem neither uses nor alters it",
          names.display, want.name));
    }
    const std::string_view name = PQgetvalue(rows.get(), static_cast<int>(i), 0);
    const std::string_view type = PQgetvalue(rows.get(), static_cast<int>(i), 1);
    const std::string_view nullable = PQgetvalue(rows.get(), static_cast<int>(i), 2);
    if (name != want.name || type != want.reported_type || nullable != "NO") {
      return Status::InvalidArgument(fmt::format(
          "table {} is not an idem store (column {} is {} {}{}, where an idem store has {} {} NOT "
          "NULL); idem neither uses nor alters it",
          names.display, i + 1, EscapeControls(name), EscapeControls(type),
          nullable == "NO" ? " NOT NULL" : "", want.name, want.reported_type));
    }
  }
  if (count > static_cast<int>(kColumns.size())) {
    return Status::InvalidArgument(fmt::format(
        "table {} is not an idem store (it has a column {} that an idem store does not); idem "
        "neither uses nor alters it",
        names.display,
        EscapeControls(PQgetvalue(rows.get(), static_cast<int>(kColumns.size()), 0))));
  }
  return Status::OK();
}

// Checks the token sequence: it exists and hands out numbers in order across sessions (CACHE 1:
// a session cache would hand later blocks lower numbers).
Status CheckSequence(PGconn* conn, const TableNames& names) {
  IDEM_ASSIGN_OR_RETURN(
      PgResult rows,
      Run(conn, "reading the token sequence",
          "SELECT cache_size FROM pg_sequences WHERE schemaname = $1 AND sequencename = $2",
          {names.schema, names.table + "_token_seq"}));
  if (PQntuples(rows.get()) != 1) {
    return Status::InvalidArgument(
        fmt::format("idem store {} has no token sequence {}_token_seq; idem does not alter it",
                    names.display, names.table));
  }
  const std::string_view cache = PQgetvalue(rows.get(), 0, 0);
  if (cache != "1") {
    return Status::InvalidArgument(fmt::format(
        "idem store {}: its token sequence {}_token_seq has CACHE {}, which hands out tokens out "
        "of order across connections; it must be CACHE 1 (ALTER SEQUENCE ... CACHE 1)",
        names.display, names.table, EscapeControls(cache)));
  }
  return Status::OK();
}

}  // namespace

Result<TableNames> ResolveTableNames(PGconn* conn, std::string_view table) {
  if (table.empty()) return Status::InvalidArgument("the store's table name is empty");
  if (table.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument(
        fmt::format("the store's table name {} holds a NUL byte", EscapeControls(table)));
  }
  if (table.size() + kLongestSuffix > kMaxIdentifierBytes) {
    return Status::InvalidArgument(fmt::format(
        "the store's table name {} is {} bytes; the names idem derives from it (up to {} bytes "
        "longer) must fit PostgreSQL's {}-byte identifiers, so it may be at most {} bytes",
        EscapeControls(table), table.size(), kLongestSuffix, kMaxIdentifierBytes,
        kMaxIdentifierBytes - kLongestSuffix));
  }
  IDEM_ASSIGN_OR_RETURN(PgResult schema,
                        Run(conn, "reading the connection's schema", "SELECT current_schema()"));
  if (PQntuples(schema.get()) != 1 || PQgetisnull(schema.get(), 0, 0)) {
    return Status::InvalidArgument(
        "the connection has no current schema (its search_path is empty or names no existing "
        "schema): set search_path for the role, or name a schema that exists");
  }
  TableNames names;
  names.schema = PQgetvalue(schema.get(), 0, 0);
  names.table = std::string(table);
  const std::optional<std::string> quoted_schema = Quote(conn, names.schema);
  const std::optional<std::string> records = Quote(conn, names.table);
  const std::optional<std::string> meta = Quote(conn, names.table + "_meta");
  const std::optional<std::string> sequence = Quote(conn, names.table + "_token_seq");
  const std::optional<std::string> index = Quote(conn, names.table + "_expires");
  if (!quoted_schema || !records || !meta || !sequence || !index) {
    return Status::InvalidArgument(fmt::format("cannot quote the store's table name {}: {}",
                                               EscapeControls(table), ErrorText(conn, nullptr)));
  }
  names.records = *quoted_schema + "." + *records;
  names.meta = *quoted_schema + "." + *meta;
  names.sequence = *quoted_schema + "." + *sequence;
  names.expiry_index = *index;
  names.display = EscapeControls(names.schema + "." + names.table);
  return names;
}

Status PrepareTables(PGconn* conn, const TableNames& names, bool create) {
  IDEM_ASSIGN_OR_RETURN(PgResult regclass, Run(conn, "looking for the store's table",
                                               "SELECT to_regclass($1)", {names.records}));
  if (!Exists(regclass)) {
    if (!create) {
      return Status::NotFound(
          fmt::format("no idem store {}: table {} does not exist", names.display, names.display));
    }
    if (std::optional<Failure> failure = CreateTables(conn, names)) {
      if (failure->sql_state != kDuplicateTable && failure->sql_state != kUniqueViolation) {
        return failure->status;
      }
      // Another process created the store first: check its tables instead. Unless what was
      // there is not the records table (a table named like the meta table, say).
      IDEM_ASSIGN_OR_RETURN(PgResult again, Run(conn, "looking for the store's table",
                                                "SELECT to_regclass($1)", {names.records}));
      if (!Exists(again)) return failure->status;
    }
  }
  IDEM_RETURN_IF_ERROR(CheckMeta(conn, names));
  IDEM_RETURN_IF_ERROR(CheckColumns(conn, names));
  return CheckSequence(conn, names);
}

}  // namespace idem::storage::pg
