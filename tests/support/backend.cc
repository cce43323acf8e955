#include "backend.h"

#if defined(IDEM_TEST_POSTGRES)
#include <memory>
#include <mutex>

#include "core/postgres_store_core.h"
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
  bool tried_bouncer = false;
  std::unique_ptr<PgBouncer> bouncer;  // declared after the server: stopped before it
  std::optional<std::string> bouncer_why_not;
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
        idem::core::PostgresStoreCore::FollowOptionsClockForTests(true);
      } else {
        shared.why_not =
            "the tests' PostgreSQL server did not start: " + started.status().ToString();
      }
    }
  }
  return shared.why_not;
}

std::optional<std::string> PgBouncerUnavailable() {
  if (auto why = PostgresUnavailable()) return why;
  SharedServer& shared = Shared();
  std::lock_guard lock(shared.mu);
  if (!shared.tried_bouncer) {
    shared.tried_bouncer = true;
    shared.bouncer_why_not = PgBouncer::Unavailable();
    if (!shared.bouncer_why_not) {
      auto started = PgBouncer::Start(*shared.server);
      if (started.ok()) {
        shared.bouncer = std::move(started).value();
      } else {
        shared.bouncer_why_not =
            "the tests' PgBouncer did not start: " + started.status().ToString();
      }
    }
  }
  return shared.bouncer_why_not;
}

std::string NewStoreLocation(Backend backend, const std::string& directory,
                             idem::Options* options) {
  if (backend == Backend::kRocksDb) return directory;
  // The fixture skipped already when either is missing.
  if (backend == Backend::kPostgres ? PostgresUnavailable().has_value()
                                    : PgBouncerUnavailable().has_value()) {
    return "postgresql://unavailable";
  }
  SharedServer& shared = Shared();
  std::lock_guard lock(shared.mu);
  options->table = "t" + std::to_string(++shared.tables);
  return backend == Backend::kPostgres ? shared.server->Uri() : shared.bouncer->Uri();
}
#else
std::optional<std::string> PostgresUnavailable() {
  return "this build has no PostgreSQL store (IDEM_WITH_POSTGRESQL=OFF, or no libpq-dev)";
}

std::optional<std::string> PgBouncerUnavailable() { return PostgresUnavailable(); }

std::string NewStoreLocation(Backend, const std::string& directory, idem::Options*) {
  return directory;
}
#endif

}  // namespace idem_test
