// The tables of a PostgreSQL store (docs/design/postgresql.md, section 4): their names, their
// creation and the check that what a connection finds is an idem store of a version this library
// knows. Run once per store, at open, through the store's pool; nothing else in idem creates or
// alters a table, and no table that is not an idem store's is ever changed.
//
// A store named `T` (Options::table) in schema `S` (named as "S.T", or the connection's current
// schema) is:
//   "S"."T"            the records, one row per key (bytea primary key), an index on expiry,
//                      and a version raised by every write
//   "S"."T_meta"       name -> value: format = "idem records", schema_version = kPgSchemaVersion,
//                      token_lead = how far (microseconds) tokens may run ahead of the server's
//                      clock (PgStorage's tokens), and "server started <microseconds>" = when
//                      idem first saw that server incarnation (PgStorage::OutageGrace). Rows
//                      added without a new version, since versions that do not know them read
//                      only the first two, and read the store as it is
//   "S"."T_token_seq"  the sequence fencing tokens are reserved from, in blocks (CACHE 1)

#ifndef IDEM_STORAGE_POSTGRES_PG_SCHEMA_H_
#define IDEM_STORAGE_POSTGRES_PG_SCHEMA_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "idem/status.h"
#include "storage/postgres/pg_pool.h"

namespace idem::storage {

// The version of the tables' layout this library writes and reads. A store whose meta table
// names a higher one was written by a newer idem: kNewerVersion, never altered.
inline constexpr uint32_t kPgSchemaVersion = 1;

// What the meta table's "format" row holds in every idem store.
inline constexpr std::string_view kPgFormat = "idem records";

// The meta table's row of the token lead (0 in a new store).
inline constexpr std::string_view kPgTokenLeadRow = "token_lead";

// The longest suffix a derived name gets ("_token_seq", "_meta_pkey"): a table name may be at
// most PostgreSQL's 63 bytes minus this.
inline constexpr std::size_t kPgLongestSuffix = 10;
inline constexpr std::size_t kPgMaxIdentifierBytes = 63;

// The records table's columns, in order: the one list that creating the table, checking an
// existing one, and every statement that reads a whole row (PgRecordColumnList) follow.
struct PgColumn {
  std::string_view name;
  std::string_view type;           // as CREATE TABLE spells it
  std::string_view reported_type;  // information_schema.columns.data_type
};
inline constexpr std::string_view kPgBytea = "bytea";
inline constexpr std::string_view kPgTimestamp = "timestamp with time zone";
inline constexpr std::array<PgColumn, 19> kPgRecordColumns = {{
    {"key", "bytea PRIMARY KEY", kPgBytea},  // keys are bytes; bytea orders like memcmp
    {"type", "bytea NOT NULL", kPgBytea},
    {"fingerprint", "bytea NOT NULL", kPgBytea},
    {"result", "bytea NOT NULL", kPgBytea},
    {"checkpoint", "bytea NOT NULL", kPgBytea},
    {"state", "smallint NOT NULL", "smallint"},  // State's values 0, 1, 2
    {"retryable", "boolean NOT NULL", "boolean"},
    {"token", "bigint NOT NULL", "bigint"},     // below 2^63: the sequence's range
    {"attempts", "bigint NOT NULL", "bigint"},  // a uint32_t does not fit integer
    {"holder_pid", "bigint NOT NULL", "bigint"},
    {"holder_start", "bigint NOT NULL", "bigint"},
    {"holder_scope", "bigint NOT NULL", "bigint"},  // uint64_t digests, stored bit-cast
    {"holder_request", "bigint NOT NULL", "bigint"},
    {"holder_took_over", "boolean NOT NULL", "boolean"},
    {"created", "timestamptz NOT NULL", kPgTimestamp},  // microseconds, as records keep them
    {"updated", "timestamptz NOT NULL", kPgTimestamp},
    {"lease_deadline", "timestamptz NOT NULL", kPgTimestamp},
    {"expires", "timestamptz NOT NULL", kPgTimestamp},
    // Raised by every write: a write names the version it decided on, and finds the row unchanged
    // or retries (pg_storage.h).
    {"version", "bigint NOT NULL", "bigint"},
}};

// The position of column `name` in kPgRecordColumns (its size when there is none), for the
// code that reads a row's columns by position to check its positions against the table.
constexpr int PgColumnIndex(std::string_view name) {
  int i = 0;
  while (i < static_cast<int>(kPgRecordColumns.size()) && kPgRecordColumns[i].name != name) ++i;
  return i;
}

// "key, type, ..., version": the columns of kPgRecordColumns, for a SELECT of whole rows.
const std::string& PgRecordColumnList();

struct PgTableNames {
  std::string schema;  // the schema named, or the connection's current_schema()
  std::string table;   // the table's own name (Options::table without its schema or quotes)
  // Schema-qualified and quoted, ready for SQL text (identifiers cannot be parameters).
  std::string records;
  std::string meta;
  std::string sequence;
  std::string expiry_index;  // unqualified and quoted: CREATE INDEX names it in the table's schema
  // "schema.table" for messages.
  std::string display;
};

// Options::table split into its schema (empty: the connection's current schema) and table.
// A name with no '.' that does not start with '"' is the table's name as it is (quotes and all,
// as before schemas could be named). Otherwise it is `table` or `schema.table`, each part either
// unquoted (no '.' or '"', no blank at either end, kept as written: not folded to lower case) or
// quoted as SQL quotes an identifier ("my.table", a '"' inside doubled), so a dot inside quotes
// belongs to the name. Anything else is ambiguous and kInvalidArgument says why: more than two
// parts, an empty part, a quote inside an unquoted part, an unclosed quote, a blank around a dot.
struct PgTableName {
  std::string schema;
  std::string table;
};
Result<PgTableName> ParsePgTableName(std::string_view name);

// The names of the store `table` in the schema it names, or the connection's current schema.
// kInvalidArgument when `table` is empty, holds a NUL byte, is ambiguous (ParsePgTableName) or is
// too long for its derived names, when it names a schema that does not exist, or when it names none
// and the connection has no current schema (an empty search_path, or one naming no existing
// schema); otherwise the pool's errors.
Result<PgTableNames> ResolvePgTableNames(PgPool& pool, std::string_view table);

// Makes sure the store's tables are there and are an idem store's: creates them in one
// transaction when missing and `create` (a concurrent creator wins: its tables are checked
// instead), then checks the meta table's format and schema version, the records table's
// columns and the sequence. Errors:
//   kNotFound         the records table does not exist and `create` is false
//   kInvalidArgument  a table of that name is not an idem store's (says why, and that idem
//                     leaves it alone); the server refused to create the tables (the role may
//                     not create tables in the schema, say: the server's message says)
//   kNewerVersion     the store was written by a newer idem
//   kCorruption       the meta table's values cannot be read
//   and the pool's errors (kUnavailable, kTimedOut, ...).
Status PreparePgTables(PgPool& pool, const PgTableNames& names, bool create);

}  // namespace idem::storage

#endif  // IDEM_STORAGE_POSTGRES_PG_SCHEMA_H_
