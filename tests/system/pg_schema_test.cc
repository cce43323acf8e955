// The tables of a PostgreSQL store (storage/postgres/pg_schema.h) against a real server: created
// once, found again, and every table that is not an idem store's (or is a newer idem's) refused
// with a message that says so, and left exactly as it was.

#include "storage/postgres/pg_schema.h"

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "storage/postgres/pg_rows.h"
#include "support/pg_server.h"
#include "support/test_util.h"

namespace {

using idem::Status;
using idem::storage::PgConninfo;
using idem::storage::PgPool;
using idem::storage::PgTableNames;
using idem::storage::PreparePgTables;
using idem::storage::ResolvePgTableNames;

struct ConnCloser {
  void operator()(PGconn* conn) const { PQfinish(conn); }
};
using Conn = std::unique_ptr<PGconn, ConnCloser>;

Conn Connect(const std::string& uri) {
  Conn conn(PQconnectdb(uri.c_str()));
  EXPECT_EQ(PQstatus(conn.get()), CONNECTION_OK) << PQerrorMessage(conn.get());
  return conn;
}

// The single value `sql` returns as text ("<null>" for NULL), or the error.
std::string Value(PGconn* conn, const std::string& sql) {
  PGresult* result = PQexec(conn, sql.c_str());
  std::string value;
  if (PQresultStatus(result) != PGRES_TUPLES_OK || PQntuples(result) != 1) {
    value = std::string("error: ") + PQerrorMessage(conn);
  } else {
    value = PQgetisnull(result, 0, 0) ? "<null>" : PQgetvalue(result, 0, 0);
  }
  PQclear(result);
  return value;
}

void Exec(PGconn* conn, const std::string& sql) {
  PGresult* result = PQexec(conn, sql.c_str());
  EXPECT_EQ(PQresultStatus(result), PGRES_COMMAND_OK) << sql << ": " << PQerrorMessage(conn);
  PQclear(result);
}

// A pool of one connection to `uri`.
std::unique_ptr<PgPool> Pool(const std::string& uri) {
  auto conninfo = PgConninfo::Parse(uri);
  EXPECT_TRUE(conninfo.ok()) << conninfo.status().ToString();
  return std::make_unique<PgPool>(*conninfo, idem::storage::PgPoolOptions{.size = 1});
}

Status Prepare(PgPool& pool, std::string_view table, bool create) {
  auto names = ResolvePgTableNames(pool, table);
  if (!names.ok()) return names.status();
  return PreparePgTables(pool, *names, create);
}

bool Contains(const Status& status, std::string_view text) {
  return status.message().find(text) != std::string::npos;
}

// The statements' lists of a row's values and assignments are generated from the columns and the
// table of record fields; they are the text written by hand before, byte for byte (a prepared
// statement's name follows its text).
TEST(PgRowStatements, TheGeneratedListsAreTheHandWrittenOnes) {
  EXPECT_EQ(idem::storage::PgRowValues(1),
            "$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18");
  EXPECT_EQ(idem::storage::PgRowValues(
                3, [](std::string_view parameter) { return "t(" + std::string(parameter) + ")"; }),
            "$3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, t($17), t($18), "
            "t($19), t($20)");
  EXPECT_EQ(idem::storage::PgRowAssignments(1),
            "type = $2, fingerprint = $3, result = $4, checkpoint = $5, state = $6, "
            "retryable = $7, token = $8, attempts = $9, holder_pid = $10, holder_start = $11, "
            "holder_scope = $12, holder_request = $13, holder_took_over = $14, created = $15, "
            "updated = $16, lease_deadline = $17, expires = $18");
  EXPECT_EQ(idem::storage::PgRowParams("k", idem::Record{}).size(), 18u);
}

TEST(PgSchema, CreatesTheStoreOnceAndFindsItAgain) {
  IDEM_START_PG_OR_SKIP(server);
  Conn conn = Connect(server->Uri());
  auto pool = Pool(server->Uri());
  ASSERT_OK_AND_ASSIGN(PgTableNames names, ResolvePgTableNames(*pool, "idem_records"));
  EXPECT_EQ(names.schema, "idem");
  EXPECT_EQ(names.records, "\"idem\".\"idem_records\"");
  EXPECT_EQ(names.display, "idem.idem_records");

  ASSERT_OK(PreparePgTables(*pool, names, /*create=*/true));
  EXPECT_EQ(Value(conn.get(), "SELECT value FROM idem.idem_records_meta WHERE name = 'format'"),
            "idem records");
  EXPECT_EQ(Value(conn.get(),
                  "SELECT cache_size FROM pg_sequences WHERE sequencename = "
                  "'idem_records_token_seq'"),
            "1");
  EXPECT_EQ(Value(conn.get(), "SELECT count(*) FROM pg_indexes WHERE tablename = 'idem_records'"),
            "2");  // the primary key and the expiry index
  // Found again, with and without create; nothing is created twice.
  EXPECT_OK(PreparePgTables(*pool, names, /*create=*/true));
  EXPECT_OK(PreparePgTables(*pool, names, /*create=*/false));
  EXPECT_EQ(Value(conn.get(), "SELECT count(*) FROM idem.idem_records_meta"), "3");
  // The token lead of a new store (storage/postgres/pg_storage_tokens.cc).
  EXPECT_EQ(Value(conn.get(), "SELECT value FROM idem.idem_records_meta WHERE name = 'token_lead'"),
            "0");
}

TEST(PgSchema, AMissingStoreIsNotFoundWithoutCreate) {
  IDEM_START_PG_OR_SKIP(server);
  Conn conn = Connect(server->Uri());
  auto pool = Pool(server->Uri());
  const Status status = Prepare(*pool, "idem_records", /*create=*/false);
  EXPECT_CODE(status, kNotFound);
  EXPECT_TRUE(Contains(status, "no idem store idem.idem_records")) << status.ToString();
  EXPECT_EQ(Value(conn.get(), "SELECT to_regclass('idem.idem_records_meta')"), "<null>");
}

TEST(PgSchema, AForeignTableOfTheSameNameIsRefusedAndLeftAlone) {
  IDEM_START_PG_OR_SKIP(server);
  Conn conn = Connect(server->Uri());
  auto pool = Pool(server->Uri());
  Exec(conn.get(), "CREATE TABLE orders (id int PRIMARY KEY, name text)");
  Exec(conn.get(), "INSERT INTO orders VALUES (1, 'kept')");
  const Status status = Prepare(*pool, "orders", /*create=*/true);
  EXPECT_CODE(status, kInvalidArgument);
  EXPECT_TRUE(Contains(status, "table idem.orders is not an idem store")) << status.ToString();
  EXPECT_TRUE(Contains(status, "idem neither uses nor alters it")) << status.ToString();
  EXPECT_EQ(Value(conn.get(), "SELECT name FROM orders WHERE id = 1"), "kept");
  EXPECT_EQ(Value(conn.get(), "SELECT to_regclass('idem.orders_meta')"), "<null>");
  EXPECT_EQ(Value(conn.get(), "SELECT to_regclass('idem.orders_token_seq')"), "<null>");
}

TEST(PgSchema, AStoreWhoseColumnsWereChangedIsRefusedNamingTheColumn) {
  IDEM_START_PG_OR_SKIP(server);
  Conn conn = Connect(server->Uri());
  auto pool = Pool(server->Uri());
  ASSERT_OK(Prepare(*pool, "changed", /*create=*/true));
  Exec(conn.get(), "ALTER TABLE changed ADD COLUMN extra int");
  Status status = Prepare(*pool, "changed", /*create=*/true);
  EXPECT_CODE(status, kInvalidArgument);
  EXPECT_TRUE(Contains(status, "has a column extra")) << status.ToString();

  ASSERT_OK(Prepare(*pool, "retyped", /*create=*/true));
  Exec(conn.get(), "ALTER TABLE retyped ALTER COLUMN attempts TYPE integer");
  status = Prepare(*pool, "retyped", /*create=*/false);
  EXPECT_CODE(status, kInvalidArgument);
  EXPECT_TRUE(Contains(status, "column 9 is attempts integer NOT NULL")) << status.ToString();
}

TEST(PgSchema, ANewerSchemaVersionIsRefusedAndLeftAlone) {
  IDEM_START_PG_OR_SKIP(server);
  Conn conn = Connect(server->Uri());
  auto pool = Pool(server->Uri());
  ASSERT_OK(Prepare(*pool, "idem_records", /*create=*/true));
  Exec(conn.get(), "UPDATE idem_records_meta SET value = '2' WHERE name = 'schema_version'");
  const Status status = Prepare(*pool, "idem_records", /*create=*/true);
  EXPECT_CODE(status, kNewerVersion);
  EXPECT_TRUE(Contains(status, "schema version 2, written by a newer idem")) << status.ToString();
  EXPECT_EQ(Value(conn.get(), "SELECT value FROM idem_records_meta WHERE name = 'schema_version'"),
            "2");

  Exec(conn.get(), "UPDATE idem_records_meta SET value = 'two' WHERE name = 'schema_version'");
  EXPECT_CODE(Prepare(*pool, "idem_records", /*create=*/false), kCorruption);
}

TEST(PgSchema, ASequenceThatCachesIsRefused) {
  IDEM_START_PG_OR_SKIP(server);
  Conn conn = Connect(server->Uri());
  auto pool = Pool(server->Uri());
  ASSERT_OK(Prepare(*pool, "idem_records", /*create=*/true));
  Exec(conn.get(), "ALTER SEQUENCE idem_records_token_seq CACHE 20");
  const Status status = Prepare(*pool, "idem_records", /*create=*/false);
  EXPECT_CODE(status, kInvalidArgument);
  EXPECT_TRUE(Contains(status, "CACHE 20")) << status.ToString();
}

// Four processes opening a new store at once: one creates it, the others find it.
TEST(PgSchema, CreatorsRacingAllSucceedOnOneStore) {
  IDEM_START_PG_OR_SKIP(server);
  std::vector<std::unique_ptr<PgPool>> pools;
  for (int i = 0; i < 4; ++i) pools.push_back(Pool(server->Uri()));
  std::vector<Status> results(pools.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < pools.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = Prepare(*pools[i], "raced", /*create=*/true); });
  }
  for (auto& thread : threads) thread.join();
  for (const Status& result : results) EXPECT_OK(result);
  Conn conn = Connect(server->Uri());
  EXPECT_EQ(Value(conn.get(), "SELECT count(*) FROM raced_meta"), "3");
}

// Identifiers are quoted, never pasted: a name with quotes, spaces and SQL in it is just a name.
TEST(PgSchema, ATableNameIsAnIdentifierWhateverItHolds) {
  IDEM_START_PG_OR_SKIP(server);
  Conn conn = Connect(server->Uri());
  auto pool = Pool(server->Uri());
  const std::string name = "Odd \"name\"; DROP TABLE x";
  ASSERT_OK_AND_ASSIGN(PgTableNames names, ResolvePgTableNames(*pool, name));
  EXPECT_EQ(names.records, "\"idem\".\"Odd \"\"name\"\"; DROP TABLE x\"");
  ASSERT_OK(PreparePgTables(*pool, names, /*create=*/true));
  EXPECT_OK(PreparePgTables(*pool, names, /*create=*/false));
  EXPECT_EQ(Value(conn.get(), "SELECT count(*) FROM pg_tables WHERE schemaname = 'idem'"), "2");
}

TEST(PgSchema, ABadTableNameIsRefusedBeforeAnyStatement) {
  IDEM_START_PG_OR_SKIP(server);
  Conn conn = Connect(server->Uri());
  auto pool = Pool(server->Uri());
  EXPECT_CODE(ResolvePgTableNames(*pool, "").status(), kInvalidArgument);
  EXPECT_CODE(ResolvePgTableNames(*pool, std::string_view("a\0b", 3)).status(), kInvalidArgument);
  const Status too_long = ResolvePgTableNames(*pool, std::string(54, 't')).status();
  EXPECT_CODE(too_long, kInvalidArgument);
  EXPECT_TRUE(Contains(too_long, "at most 53 bytes")) << too_long.ToString();
  EXPECT_OK(ResolvePgTableNames(*pool, std::string(53, 't')).status());
}

TEST(PgSchema, NoCurrentSchemaIsToldApart) {
  IDEM_START_PG_OR_SKIP(server);
  // The pool keeps no session state: the role's own setting gives it no schema.
  ASSERT_OK(server->Admin("ALTER ROLE idem SET search_path = ''"));
  auto pool = Pool(server->Uri());
  const Status status = ResolvePgTableNames(*pool, "idem_records").status();
  EXPECT_CODE(status, kInvalidArgument);
  EXPECT_TRUE(Contains(status, "no current schema")) << status.ToString();
}

TEST(PgSchema, ARoleThatMayNotCreateIsToldWhatTheServerSaid) {
  IDEM_START_PG_OR_SKIP(server);
  ASSERT_OK(
      server->Admin("CREATE ROLE reader LOGIN PASSWORD 'reader-pw';"
                    "GRANT USAGE ON SCHEMA idem TO reader;"
                    "ALTER ROLE reader SET search_path = idem"));
  auto pool = Pool("postgresql://reader:reader-pw@127.0.0.1:" + std::to_string(server->port()) +
                   "/postgres");
  const Status status = Prepare(*pool, "idem_records", /*create=*/true);
  EXPECT_CODE(status, kInvalidArgument);
  EXPECT_TRUE(Contains(status, "creating the idem store idem.idem_records")) << status.ToString();
  EXPECT_TRUE(Contains(status, "permission denied for schema idem")) << status.ToString();
}

}  // namespace
