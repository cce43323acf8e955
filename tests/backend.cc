#include "backend.h"

#if defined(IDEM_TEST_POSTGRES)
#include <memory>
#include <mutex>

#include "core/pg_store_core.h"
#include "pg_server.h"
#endif

namespace idem_test {

#if defined(IDEM_TEST_POSTGRES)
namespace {

struct SharedServer {
  std::mutex mu;
  bool tried = false;
  std::unique_ptr<PgServer> server;
  std::optional<std::string> why_not;
  int tables = 0;
};

SharedServer& Shared() {
  static SharedServer shared;  // destroyed at exit, which stops the server
  return shared;
}

}  // namespace

std::optional<std::string> PostgresUnavailable() {
  SharedServer& shared = Shared();
  std::lock_guard lock(shared.mu);
  if (!shared.tried) {
    shared.tried = true;
    shared.why_not = PgServer::Unavailable();
    if (!shared.why_not) {
      auto started = PgServer::Start();
      if (started.ok()) {
        shared.server = std::move(started).value();
        idem::PgStoreCore::FollowOptionsClockForTests(true);
      } else {
        shared.why_not =
            "the tests' PostgreSQL server did not start: " + started.status().ToString();
      }
    }
  }
  return shared.why_not;
}

std::string NewStoreLocation(Backend backend, const std::string& directory,
                             idem::Options* options) {
  if (backend == Backend::kRocksDb) return directory;
  if (PostgresUnavailable()) return "postgresql://unavailable";  // the fixture skipped already
  SharedServer& shared = Shared();
  std::lock_guard lock(shared.mu);
  options->table = "t" + std::to_string(++shared.tables);
  return shared.server->Uri();
}
#else
std::optional<std::string> PostgresUnavailable() {
  return "this build has no PostgreSQL store (IDEM_WITH_POSTGRESQL=OFF, or no libpq-dev)";
}

std::string NewStoreLocation(Backend, const std::string& directory, idem::Options*) {
  return directory;
}
#endif

}  // namespace idem_test
