// PostgresStoreCore: a store kept in PostgreSQL, as the handles of one process share it: the engine
// (EngineBackend) over a PgStorage, one per (connection, table) in the process. There is no owner,
// socket or failover role here: every process, on any host, runs its own engine against the
// server, which arbitrates (docs/design/postgresql.md). Built with IDEM_WITH_POSTGRESQL only.

#ifndef IDEM_CORE_POSTGRES_STORE_CORE_H_
#define IDEM_CORE_POSTGRES_STORE_CORE_H_

#include <memory>
#include <string>
#include <type_traits>

#include "backend/engine_backend.h"
#include "core/error_memory.h"
#include "idem/options.h"
#include "util/process.h"

namespace idem::storage {
class PgStorage;
}  // namespace idem::storage

namespace idem::core {

class PostgresStoreCore {
 public:
  // Connects to the store at `uri` (a postgresql:// URI) with the first Open's `options`; creates
  // its tables when options.create_if_missing (and not read_only).
  static Result<std::shared_ptr<PostgresStoreCore>> Open(std::string_view uri,
                                                         const Options& options);

  // Test hook: the stores opened after FollowOptionsClockForTests(true) decide by
  // Options::clock (when set) instead of the server's clock, so that the store's behaviour tests
  // move time with a ManualClock on both backends alike. Never called outside tests.
  static void FollowOptionsClockForTests(bool follow);

  // The registry key of the store at `uri` with `options.table`: the same for every spelling of
  // one connection. Errors: the URI's (kInvalidArgument, naming it without secrets).
  static Result<std::string> Key(std::string_view uri, const Options& options);

  bool read_only() const { return options_.read_only; }
  const Options& options() const { return options_; }
  // True in a child of fork(): the connections are the parent's, and a call fails with
  // kUnavailable (the pool's); open the store again in the child.
  bool forked() const { return util::ForkGeneration() != creator_generation_; }
  const std::string& display_name() const { return display_name_; }
  // The last failure a call on the store met in this process (StoreHealth::last_error).
  ErrorMemory& errors() { return errors_; }
  // No process owns a store in PostgreSQL: the counts a handle reads are its own process's.
  Status CheckNoOwnerUnasked() const { return Status::OK(); }

  // Store::ExecuteInTransaction's transaction: the application's statements, then the fenced
  // Complete of `key`'s claim `token` and COMMIT (PgStorage::CompleteIn).
  Result<std::unique_ptr<ClaimTransaction>> BeginClaimTransaction(std::string_view key,
                                                                  uint64_t token,
                                                                  Durability durability);

  // Runs `call(backend, resent)`: the pool resends what a lost connection interrupted itself, so
  // `resent` is always false here.
  template <class Call>
  auto Run(Call&& call) -> std::invoke_result_t<Call&, engine::Backend&, bool> {
    return call(*backend_, false);
  }

 private:
  PostgresStoreCore(const Options& options, std::string display_name)
      : options_(options), display_name_(std::move(display_name)) {}

  const Options options_;
  const std::string display_name_;
  const uint64_t creator_generation_ = util::ForkGeneration();
  ErrorMemory errors_;
  std::unique_ptr<backend::EngineBackend> backend_;
  storage::PgStorage* storage_ = nullptr;  // backend_'s
};

}  // namespace idem::core

#endif  // IDEM_CORE_POSTGRES_STORE_CORE_H_
