// Helpers for the PgPool tests (pg_pool_test.cc, pg_pool_fault_test.cc): a pool's URI and
// transactions, and what the server is doing, asked as its superuser.

#ifndef IDEM_TESTS_PG_POOL_TEST_UTIL_H_
#define IDEM_TESTS_PG_POOL_TEST_UTIL_H_

#include <libpq-fe.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "pg_server.h"
#include "storage/postgres/pg_pool.h"
#include "test_util.h"

namespace idem::storage {

using idem_test::PgServer;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

inline PgConninfo Conninfo(const std::string& uri) {
  Result<PgConninfo> parsed = PgConninfo::Parse(uri);
  if (!parsed.ok()) {
    ADD_FAILURE() << parsed.status().ToString();
    std::abort();
  }
  return *parsed;
}

inline std::string UriAtPort(const PgServer& server, int port) {
  return "postgresql://idem:" + server.password() + "@127.0.0.1:" + std::to_string(port) +
         "/postgres";
}

inline PgTransaction Transaction(std::vector<PgStatement> statements, bool resendable = true) {
  return {.statements = std::move(statements), .resendable = resendable};
}

inline milliseconds Since(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
}

// Waits until the server runs `sql` in some session (pg_stat_activity).
inline bool WaitUntilRunning(const PgServer& server, const std::string& sql) {
  PGconn* admin = PQconnectdb(server.AdminConninfo().c_str());
  const char* values[] = {sql.c_str()};
  const bool running = idem_test::WaitFor([&] {
    PGresult* result = PQexecParams(
        admin, "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query = $1", 1,
        nullptr, values, nullptr, nullptr, 0);
    const bool found =
        PQresultStatus(result) == PGRES_TUPLES_OK && std::string(PQgetvalue(result, 0, 0)) != "0";
    PQclear(result);
    return found;
  });
  PQfinish(admin);
  return running;
}

inline int64_t BackendPid(PgPool& pool, bool resendable = true) {
  Result<std::vector<PgRows>> rows =
      pool.Run(Transaction({{"SELECT pg_backend_pid()", {}}}, resendable));
  if (!rows.ok()) {
    ADD_FAILURE() << rows.status().ToString();
    return -1;
  }
  return rows->at(0).Int(0, 0).value();
}

}  // namespace idem::storage

#endif  // IDEM_TESTS_PG_POOL_TEST_UTIL_H_
