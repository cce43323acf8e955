// The limits of a store kept in PostgreSQL, against a real server: what cannot be sent as it is
// given is refused with a status that names it, never cut short or retried as an outage.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "idem/idem.h"
#include "idem/sql.h"
#include "pg_server.h"
#include "test_util.h"

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

}  // namespace
