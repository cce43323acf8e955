// The limits of a store kept in PostgreSQL, against a real server: what cannot be sent as it is
// given is refused with a status that names it, never cut short or retried as an outage.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "idem/idem.h"
#include "idem/sql.h"
#include "storage/postgres/pg_schema.h"
#include "support/pg_server.h"
#include "support/test_util.h"

namespace {

using namespace std::chrono_literals;
using idem::Attempt;
using idem::Result;
using idem::SqlRows;
using idem::SqlTransaction;
using idem::Status;
using idem_test::OpenStore;
using idem_test::TestOptions;

bool Contains(const Status& status, std::string_view text) {
  return status.message().find(text) != std::string::npos;
}

// ---- SqlTransaction::Exec and NUL bytes --------------------------------------------------------

// libpq sends a text parameter up to its first NUL: "ab\0cd" reached the server as "ab".
TEST(PgLimits, ANulByteInATextParameterIsRefusedNamingIt) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = OpenStore(server->Uri());
  ASSERT_NE(store, nullptr);
  const std::string with_nul("ab\0cd", 5);
  Status refused;
  Status statement_refused;
  std::string length_after;
  std::string decoded_length;
  ASSERT_OK(store
                ->ExecuteInTransaction(
                    "nul",
                    [&](Attempt&, SqlTransaction& sql) -> Result<std::string> {
                      refused = sql.Exec("SELECT length($2), $1", {"fine", with_nul}).status();
                      statement_refused = sql.Exec(std::string("SELECT 1\0 + 1", 13)).status();
                      // Nothing was sent: the transaction goes on.
                      IDEM_ASSIGN_OR_RETURN(SqlRows rows,
                                            sql.Exec("SELECT length($1)", {std::string("abcd")}));
                      length_after = std::string(*rows.Get(0, 0));
                      // Bytes go as hex, decoded by the server.
                      IDEM_ASSIGN_OR_RETURN(SqlRows bytes,
                                            sql.Exec("SELECT length(decode($1, 'hex'))",
                                                     {std::string("6162006364")}));
                      decoded_length = std::string(*bytes.Get(0, 0));
                      return std::string("ok");
                    })
                .status());
  EXPECT_CODE(refused, kInvalidArgument);
  EXPECT_TRUE(Contains(refused, "parameter $2 holds a NUL byte at offset 2 of 5"))
      << refused.ToString();
  EXPECT_CODE(statement_refused, kInvalidArgument);
  EXPECT_TRUE(Contains(statement_refused, "statement holds a NUL byte at offset 8"))
      << statement_refused.ToString();
  EXPECT_EQ(length_after, "4");
  EXPECT_EQ(decoded_length, "5");
}

// ---- Invalid URI options ----------------------------------------------------------------------

// An option libpq cannot use is the caller's mistake, not an outage: kInvalidArgument at once,
// naming it, instead of kUnavailable after failover_timeout of retries.
TEST(PgLimits, AnInvalidUriOptionIsRefusedAtOnce) {
  IDEM_START_PG_OR_SKIP(server);
  const std::string uri = server->Uri();
  const std::string base = uri.substr(0, uri.find('?'));
  struct Case {
    std::string uri;
    std::string named;  // what the message names
  };
  const std::vector<Case> cases = {
      {base + "?port=notaport", "port"},
      {base + "?sslmode=bogus", "sslmode"},
      {base + "?bogus=1", "bogus"},
      {base + "?connect_timeout=soon", "connect_timeout"},
      {base + "?target_session_attrs=writable", "target_session_attrs"},
      {base + "?gssencmode=maybe", "gssencmode"},
      {base + "?hostaddr=not.an.address", "hostaddr"},
  };
  for (const Case& bad : cases) {
    SCOPED_TRACE(bad.uri);
    idem::Options options = TestOptions();
    options.failover_timeout = 5s;
    const auto started = std::chrono::steady_clock::now();
    auto store = idem::Store::Open(bad.uri, options);
    const auto took = std::chrono::steady_clock::now() - started;
    EXPECT_CODE(store.status(), kInvalidArgument);
    EXPECT_TRUE(Contains(store.status(), bad.named)) << store.status().ToString();
    EXPECT_FALSE(Contains(store.status(), server->password())) << store.status().ToString();
    EXPECT_LT(took, 1s);
  }
  // The valid spellings still open.
  idem::Options options = TestOptions();
  for (const std::string& good :
       {base + "?sslmode=disable", base + "?sslmode=prefer&connect_timeout=%205%20",
        base + "?target_session_attrs=any&gssencmode=disable"}) {
    SCOPED_TRACE(good);
    EXPECT_OK(idem::Store::Open(good, options).status());
  }
}

// ---- A schema in Options::table
// ------------------------------------------------------------------

TEST(PgLimits, ATableNameSplitsIntoSchemaAndTableUnlessQuoted) {
  using idem::storage::ParsePgTableName;
  struct Case {
    std::string given, schema, table;
  };
  for (const Case& good : std::vector<Case>{
           {"idem_records", "", "idem_records"},
           {"billing.idem", "billing", "idem"},
           {"Billing.Idem", "Billing", "Idem"},  // kept as written, not folded
           {"\"billing.idem\"", "", "billing.idem"},
           {"billing.\"my.table\"", "billing", "my.table"},
           {"\"we\"\"ird\".t", "we\"ird", "t"},
           {"Odd \"name\"; DROP TABLE x", "", "Odd \"name\"; DROP TABLE x"},  // no dot: as is
       }) {
    SCOPED_TRACE(good.given);
    ASSERT_OK_AND_ASSIGN(const auto parsed, ParsePgTableName(good.given));
    EXPECT_EQ(parsed.schema, good.schema);
    EXPECT_EQ(parsed.table, good.table);
  }
  for (const std::string bad : {"a.b.c", ".t", "s.", "s..t", "\"unclosed.t", "s.\"\"", "a\"b.c",
                                "\"s\"x.t", "s. t", "s .t"}) {
    SCOPED_TRACE(bad);
    const Status status = ParsePgTableName(bad).status();
    EXPECT_CODE(status, kInvalidArgument);
    EXPECT_TRUE(Contains(status, "is ambiguous")) << status.ToString();
  }
}

// "billing.idem" used to create a table literally named so in the current schema.
TEST(PgLimits, ASchemaCanBeNamed) {
  IDEM_START_PG_OR_SKIP(server);
  ASSERT_OK(server->Admin("CREATE SCHEMA billing AUTHORIZATION idem"));
  const auto tables_in = [&](idem::Store& store, const std::string& schema) {
    std::string names;
    static_cast<void>(store.ExecuteInTransaction(
        "list-" + schema + std::to_string(std::rand()),
        [&](Attempt&, SqlTransaction& sql) -> Result<std::string> {
          IDEM_ASSIGN_OR_RETURN(
              SqlRows rows,
              sql.Exec("SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables "
                       "WHERE schemaname = $1",
                       {schema}));
          names = std::string(rows.Get(0, 0).value_or(""));
          return std::string();
        }));
    return names;
  };

  idem::Options options = TestOptions();
  options.table = "billing.idem";
  auto store = OpenStore(server->Uri(), options);
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("k"));
  ASSERT_OK(store->Complete("k", claim.token, "done"));
  EXPECT_EQ(tables_in(*store, "billing"), "idem,idem_meta");
  EXPECT_EQ(tables_in(*store, "idem"), "");
  store.reset();
  auto again = OpenStore(server->Uri(), options);
  ASSERT_NE(again, nullptr);
  ASSERT_OK_AND_ASSIGN(auto replay, again->Begin("k"));
  EXPECT_EQ(replay.outcome, idem::Outcome::kReplay);

  // Quoted whole, the dot is the table's: in the current schema, as before.
  options.table = "\"billing.idem\"";
  auto dotted = OpenStore(server->Uri(), options);
  ASSERT_NE(dotted, nullptr);
  EXPECT_EQ(tables_in(*dotted, "idem"), "billing.idem,billing.idem_meta");

  options.table = "nowhere.idem";
  const Status missing = idem::Store::Open(server->Uri(), options).status();
  EXPECT_CODE(missing, kInvalidArgument);
  EXPECT_TRUE(Contains(missing, "names schema nowhere, which does not exist"))
      << missing.ToString();
  EXPECT_TRUE(Contains(missing, "\"nowhere.idem\"")) << missing.ToString();

  options.table = "a.b.c";
  EXPECT_CODE(idem::Store::Open(server->Uri(), options).status(), kInvalidArgument);
}

// ---- Tokens at the top of their range --------------------------------------------------------

// A token sequence at the top of its range (raised by an import before imports were limited, or
// by hand): Begin refuses to hand out a token above 2^63-1 instead of storing one that reads back
// as Corruption.
TEST(PgLimits, TheTokenSequenceNeverHandsOutATokenAbove2To63Minus1) {
  IDEM_START_PG_OR_SKIP(server);
  idem::Options options = TestOptions();
  options.table = "top_tokens";
  auto store = OpenStore(server->Uri(), options);
  ASSERT_NE(store, nullptr);
  // Blocks of 1024 tokens: block 2^53 - 1 ends at 2^63 - 1, block 2^53 starts at 2^63.
  ASSERT_OK(server->Admin("SELECT setval('idem.top_tokens_token_seq', 9007199254740991)"));
  auto opened = OpenStore(server->Uri(), options);  // draws its first block afresh
  ASSERT_NE(opened, nullptr);
  const Status refused = opened->Begin("k").status();
  EXPECT_CODE(refused, kIOError);
  EXPECT_TRUE(Contains(refused, "(2^63-1)")) << refused.ToString();
  ASSERT_OK_AND_ASSIGN(auto nothing, store->Get("k"));
  EXPECT_FALSE(nothing.has_value());
}

}  // namespace
