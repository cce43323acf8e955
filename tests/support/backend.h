// The backends the store's behaviour tests run on, from the same test bodies: RocksDB (a store
// directory) and, in a build with PostgreSQL (IDEM_TEST_POSTGRES, which the library
// idem_test_backend of tests/CMakeLists.txt passes on), PostgreSQL: a table of its own for each
// store, on one throwaway server per test process (tests/support/pg_server.h), started at the first
// use and stopped at exit. The PostgreSQL stores decide by the test's ManualClock, not the server's
// clock (PostgresStoreCore::FollowOptionsClockForTests), so a test moves time the same way on both.
//
//   class Store : public idem_test::OnEachBackend {};
//   TEST_P(Store, ReplaysADoneRecord) {
//     idem_test::ClockedStore s(GetParam());
//     ...
//   }
//   IDEM_ON_EACH_BACKEND(Store);
//
// Each PostgreSQL case runs twice: on the server, and through PgBouncer in transaction pooling
// mode (Debian's pgbouncer), where no session state may outlive a transaction.
//
// CTest runs the RocksDB cases one by one and the PostgreSQL cases of a binary together, in one
// test named <binary>_on_postgres (one server start per binary, not per case).

#ifndef IDEM_TESTS_BACKEND_H_
#define IDEM_TESTS_BACKEND_H_

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "idem/idem.h"

namespace idem_test {

enum class Backend {
  kRocksDb,
  kPostgres,
  kPgBouncer,  // the same server through PgBouncer in transaction pooling mode
};

// Why no PostgreSQL store can be opened in this process (no server package, a server that did
// not start, a build without PostgreSQL), or nullopt. Starts the shared server at the first call.
std::optional<std::string> PostgresUnavailable();
// The same for a store through PgBouncer; starts it at the first call.
std::optional<std::string> PgBouncerUnavailable();

// Where a new, empty store of `backend` lives: `directory` for RocksDB; for PostgreSQL the shared
// server's URI (or PgBouncer's), with options->table set to a table no other store of the
// process uses.
std::string NewStoreLocation(Backend backend, const std::string& directory, idem::Options* options);

// A fixture for tests of every backend: a PostgreSQL case skips, saying why, where none can run.
class OnEachBackend : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam() == Backend::kPostgres) {
      if (auto why = PostgresUnavailable()) GTEST_SKIP() << *why;
    }
    if (GetParam() == Backend::kPgBouncer) {
      if (auto why = PgBouncerUnavailable()) GTEST_SKIP() << *why;
    }
  }
};

inline std::string BackendName(const ::testing::TestParamInfo<Backend>& info) {
  switch (info.param) {
    case Backend::kRocksDb:
      return "RocksDb";
    case Backend::kPostgres:
      return "Postgres";
    case Backend::kPgBouncer:
      return "PgBouncer";
  }
  return "?";
}

}  // namespace idem_test

#if defined(IDEM_TEST_POSTGRES)
#define IDEM_ON_EACH_BACKEND(suite)                                                      \
  INSTANTIATE_TEST_SUITE_P(                                                              \
      Backend, suite,                                                                    \
      ::testing::Values(::idem_test::Backend::kRocksDb, ::idem_test::Backend::kPostgres, \
                        ::idem_test::Backend::kPgBouncer),                               \
      ::idem_test::BackendName)
#else
#define IDEM_ON_EACH_BACKEND(suite)                                                           \
  INSTANTIATE_TEST_SUITE_P(Backend, suite, ::testing::Values(::idem_test::Backend::kRocksDb), \
                           ::idem_test::BackendName)
#endif

#endif  // IDEM_TESTS_BACKEND_H_
