#include "storage/postgres/pg_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <optional>
#include <string>
#include <vector>

#include "util/escape.h"

namespace idem::storage {
namespace {

// An SQL identifier in double quotes, its quotes doubled (what PQescapeIdentifier makes).
std::string QuoteIdentifier(std::string_view name) {
  std::string quoted = "\"";
  for (char c : name) {
    quoted += c;
    if (c == '"') quoted += '"';
  }
  return quoted + '"';
}

// Runs one statement in a transaction of its own; every statement here only reads, or creates
// what a resend finds already there (and then checks), so each may be resent.
Result<PgRows> RunOne(PgPool& pool, std::string sql, std::vector<PgParam> params = {}) {
  PgTransaction transaction{.statements = {{std::move(sql), std::move(params)}},
                            .resendable = true};
  IDEM_ASSIGN_OR_RETURN(std::vector<PgRows> rows, pool.Run(transaction));
  return std::move(rows.front());
}

Result<bool> TableExists(PgPool& pool, const std::string& qualified_name) {
  IDEM_ASSIGN_OR_RETURN(PgRows rows, RunOne(pool, "SELECT to_regclass($1) IS NOT NULL",
                                            {PgParam::Text(qualified_name)}));
  return rows.Bool(0, 0);
}

// The statements that create the store, run as one transaction.
Status CreateTables(PgPool& pool, const PgTableNames& names) {
  std::string columns;
  for (const PgColumn& column : kPgRecordColumns) {
    if (!columns.empty()) columns += ", ";
    columns += fmt::format("{} {}", column.name, column.type);
  }
  PgTransaction transaction{.resendable = true};
  transaction.statements = {
      {fmt::format("CREATE TABLE {} ({})", names.records, columns), {}},
      {fmt::format("CREATE INDEX {} ON {} (expires)", names.expiry_index, names.records), {}},
      {fmt::format("CREATE SEQUENCE {} AS bigint CACHE 1", names.sequence), {}},
      {fmt::format("CREATE TABLE {} (name text PRIMARY KEY, value text NOT NULL)", names.meta), {}},
      {fmt::format("INSERT INTO {} VALUES ('format', $1), ('schema_version', $2), ($3, $4)",
                   names.meta),
       {PgParam::Text(kPgFormat), PgParam::Text(std::to_string(kPgSchemaVersion)),
        PgParam::Text(kPgTokenLeadRow), PgParam::Text("0")}},
  };
  Result<std::vector<PgRows>> created = pool.Run(transaction);
  if (created.ok()) return Status::OK();
  if (created.status().code() != Status::Code::kInvalidArgument) return created.status();
  return Status::InvalidArgument(
      fmt::format("creating the idem store {}: {}", names.display, created.status().message()));
}

// Checks the meta table: format and schema version.
Status CheckMeta(PgPool& pool, const PgTableNames& names) {
  IDEM_ASSIGN_OR_RETURN(bool has_meta, TableExists(pool, names.meta));
  if (!has_meta) {
    return Status::InvalidArgument(fmt::format(
        "table {} is not an idem store (it has no table {}_meta); idem neither uses nor alters it",
        names.display, EscapeControls(names.table)));
  }
  IDEM_ASSIGN_OR_RETURN(
      PgRows rows, RunOne(pool, fmt::format("SELECT name, value FROM {} WHERE name IN ('format', "
                                            "'schema_version')",
                                            names.meta)));
  std::optional<std::string> format, version;
  for (int row = 0; row < rows.size(); ++row) {
    (rows.Bytes(row, 0) == "format" ? format : version) = std::string(rows.Bytes(row, 1));
  }
  if (format != kPgFormat) {
    return Status::InvalidArgument(fmt::format(
        "table {} is not an idem store (its meta table's format is {}, not \"{}\"); idem neither "
        "uses nor alters it",
        names.display, format ? fmt::format("\"{}\"", EscapeControls(*format)) : "missing",
        kPgFormat));
  }
  uint32_t number = 0;
  const std::string text = version.value_or("");
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || number == 0) {
    return Status::Corruption(
        fmt::format("idem store {}: its schema_version \"{}\" is not a number", names.display,
                    EscapeControls(text)));
  }
  if (number > kPgSchemaVersion) {
    return Status::NewerVersion(fmt::format(
        "idem store {} has schema version {}, written by a newer idem; this one knows versions up "
        "to {}, and leaves the store alone",
        names.display, number, kPgSchemaVersion));
  }
  return Status::OK();
}

// The first difference between the records table's columns and an idem store's, if any.
std::optional<std::string> ColumnDifference(const PgRows& rows) {
  const int count = rows.size();
  for (std::size_t i = 0; i < kPgRecordColumns.size(); ++i) {
    const PgColumn& want = kPgRecordColumns[i];
    const int row = static_cast<int>(i);
    if (row >= count) return fmt::format("it has no column {}", want.name);
    const std::string_view name = rows.Bytes(row, 0);
    const std::string_view type = rows.Bytes(row, 1);
    const std::string_view nullable = rows.Bytes(row, 2);
    if (name != want.name || type != want.reported_type || nullable != "NO") {
      return fmt::format("column {} is {} {}{}, where an idem store has {} {} NOT NULL", i + 1,
                         EscapeControls(name), EscapeControls(type),
                         nullable == "NO" ? " NOT NULL" : "", want.name, want.reported_type);
    }
  }
  if (count > static_cast<int>(kPgRecordColumns.size())) {
    return fmt::format("it has a column {} that an idem store does not",
                       EscapeControls(rows.Bytes(static_cast<int>(kPgRecordColumns.size()), 0)));
  }
  return std::nullopt;
}

Status CheckPgRecordColumns(PgPool& pool, const PgTableNames& names) {
  IDEM_ASSIGN_OR_RETURN(
      PgRows rows,
      RunOne(pool,
             "SELECT column_name::text, data_type::text, is_nullable::text "
             "FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 "
             "ORDER BY ordinal_position",
             {PgParam::Text(names.schema), PgParam::Text(names.table)}));
  if (std::optional<std::string> difference = ColumnDifference(rows)) {
    return Status::InvalidArgument(
        fmt::format("table {} is not an idem store ({}); idem neither uses nor alters it",
                    names.display, *difference));
  }
  return Status::OK();
}

// Checks the token sequence: it exists and hands out numbers in order across sessions (CACHE 1:
// a session cache would hand later blocks lower numbers).
Status CheckSequence(PgPool& pool, const PgTableNames& names) {
  IDEM_ASSIGN_OR_RETURN(
      PgRows rows,
      RunOne(pool,
             "SELECT cache_size FROM pg_sequences WHERE schemaname = $1 AND sequencename = $2",
             {PgParam::Text(names.schema), PgParam::Text(names.table + "_token_seq")}));
  if (rows.size() != 1) {
    return Status::InvalidArgument(
        fmt::format("idem store {} has no token sequence {}_token_seq; idem does not alter it",
                    names.display, EscapeControls(names.table)));
  }
  IDEM_ASSIGN_OR_RETURN(int64_t cache, rows.Int(0, 0));
  if (cache != 1) {
    return Status::InvalidArgument(fmt::format(
        "idem store {}: its token sequence {}_token_seq has CACHE {}, which hands out tokens out "
        "of order across connections; it must be CACHE 1 (ALTER SEQUENCE ... CACHE 1)",
        names.display, EscapeControls(names.table), cache));
  }
  return Status::OK();
}

}  // namespace

Result<PgTableName> ParsePgTableName(std::string_view name) {
  const auto refuse = [&](std::string_view why) {
    return Status::InvalidArgument(fmt::format(
        "the store's table name {} is ambiguous: {}; write table or schema.table, quoting a part "
        "that holds a '.' or a '\"' as SQL does (\"my.table\", with '\"' doubled inside)",
        EscapeControls(name), why));
  };
  if (name.find('.') == std::string_view::npos && !name.starts_with('"')) {
    return PgTableName{.schema = "", .table = std::string(name)};
  }
  std::vector<std::string> parts;
  std::size_t at = 0;
  for (;;) {
    std::string part;
    if (at < name.size() && name[at] == '"') {
      for (++at;; ++at) {
        if (at == name.size()) return refuse("a quote is not closed");
        if (name[at] != '"') {
          part += name[at];
        } else if (at + 1 < name.size() && name[at + 1] == '"') {
          part += '"';
          ++at;
        } else {
          ++at;
          break;
        }
      }
      if (part.empty()) return refuse("a quoted part is empty");
    } else {
      const std::size_t end = std::min(name.find('.', at), name.size());
      part = std::string(name.substr(at, end - at));
      at = end;
      if (part.empty()) return refuse("a part is empty");
      if (part.find('"') != std::string::npos) return refuse("a '\"' inside an unquoted part");
      if (std::isspace(static_cast<unsigned char>(part.front())) ||
          std::isspace(static_cast<unsigned char>(part.back()))) {
        return refuse("an unquoted part starts or ends with a blank");
      }
    }
    parts.push_back(std::move(part));
    if (at == name.size()) break;
    if (name[at] != '.') return refuse("a quoted part is followed by something other than '.'");
    ++at;
    if (at == name.size()) return refuse("a part is empty");
  }
  if (parts.size() > 2) {
    return refuse(fmt::format("it has {} parts (a database cannot be named here)", parts.size()));
  }
  if (parts.size() == 1) return PgTableName{.schema = "", .table = std::move(parts[0])};
  return PgTableName{.schema = std::move(parts[0]), .table = std::move(parts[1])};
}

Result<PgTableNames> ResolvePgTableNames(PgPool& pool, std::string_view given) {
  if (given.empty()) return Status::InvalidArgument("the store's table name is empty");
  if (given.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument(
        fmt::format("the store's table name {} holds a NUL byte", EscapeControls(given)));
  }
  IDEM_ASSIGN_OR_RETURN(PgTableName parsed, ParsePgTableName(given));
  const std::string& table = parsed.table;
  if (table.size() + kPgLongestSuffix > kPgMaxIdentifierBytes) {
    return Status::InvalidArgument(fmt::format(
        "the store's table name {} is {} bytes; the names idem derives from it (up to {} bytes "
        "longer) must fit PostgreSQL's {}-byte identifiers, so it may be at most {} bytes",
        EscapeControls(table), table.size(), kPgLongestSuffix, kPgMaxIdentifierBytes,
        kPgMaxIdentifierBytes - kPgLongestSuffix));
  }
  if (parsed.schema.size() > kPgMaxIdentifierBytes) {
    return Status::InvalidArgument(
        fmt::format("the schema name {} of the store's table is {} bytes; PostgreSQL's "
                    "identifiers are at most {}",
                    EscapeControls(parsed.schema), parsed.schema.size(), kPgMaxIdentifierBytes));
  }
  PgTableNames names;
  if (parsed.schema.empty()) {
    IDEM_ASSIGN_OR_RETURN(PgRows schema, RunOne(pool, "SELECT current_schema()::text"));
    if (schema.size() != 1 || schema.IsNull(0, 0)) {
      return Status::InvalidArgument(
          "the connection has no current schema (its search_path is empty or names no existing "
          "schema): set search_path for the role, or name a schema that exists "
          "(Options::table = \"schema.table\")");
    }
    names.schema = std::string(schema.Bytes(0, 0));
  } else {
    IDEM_ASSIGN_OR_RETURN(PgRows found,
                          RunOne(pool, "SELECT count(*) FROM pg_namespace WHERE nspname = $1",
                                 {PgParam::Text(parsed.schema)}));
    IDEM_ASSIGN_OR_RETURN(int64_t count, found.Int(0, 0));
    if (count == 0) {
      // A store made before schemas could be named may have a '.' in its table's name.
      const std::string quote_hint =
          given.find('"') == std::string_view::npos
              ? fmt::format(", or quote the whole name (\"{}\") for a table with a '.' in its name",
                            EscapeControls(given))
              : "";
      return Status::InvalidArgument(fmt::format(
          "the store's table name {} names schema {}, which does not exist: create it (CREATE "
          "SCHEMA){}",
          EscapeControls(given), EscapeControls(parsed.schema), quote_hint));
    }
    names.schema = parsed.schema;
  }
  names.table = table;
  const std::string quoted_schema = QuoteIdentifier(names.schema);
  names.records = quoted_schema + "." + QuoteIdentifier(names.table);
  names.meta = quoted_schema + "." + QuoteIdentifier(names.table + "_meta");
  names.sequence = quoted_schema + "." + QuoteIdentifier(names.table + "_token_seq");
  names.expiry_index = QuoteIdentifier(names.table + "_expires");
  names.display = EscapeControls(names.schema + "." + names.table);
  return names;
}

Status PreparePgTables(PgPool& pool, const PgTableNames& names, bool create) {
  IDEM_ASSIGN_OR_RETURN(bool exists, TableExists(pool, names.records));
  if (!exists) {
    if (!create) {
      return Status::NotFound(
          fmt::format("no idem store {}: table {} does not exist", names.display, names.display));
    }
    if (Status created = CreateTables(pool, names); !created.ok()) {
      // Another process created the store first: check its tables instead. Unless the records
      // table is still missing (what was there is a table named like the meta table, say).
      IDEM_ASSIGN_OR_RETURN(bool created_meanwhile, TableExists(pool, names.records));
      if (!created_meanwhile) return created;
    }
  }
  IDEM_RETURN_IF_ERROR(CheckMeta(pool, names));
  IDEM_RETURN_IF_ERROR(CheckPgRecordColumns(pool, names));
  return CheckSequence(pool, names);
}

const std::string& PgRecordColumnList() {
  static const std::string list = [] {
    std::string joined;
    for (const PgColumn& column : kPgRecordColumns) {
      if (!joined.empty()) joined += ", ";
      joined += column.name;
    }
    return joined;
  }();
  return list;
}

}  // namespace idem::storage
