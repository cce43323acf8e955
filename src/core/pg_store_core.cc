#include "core/pg_store_core.h"

#include <atomic>

#include "storage/pg_conninfo.h"
#include "storage/pg_storage.h"

namespace idem {
namespace {

storage::PgConnDefaults ConnDefaults(const Options& options) {
  return {.connect_timeout = options.failover_timeout,
          .dead_peer_timeout = options.request_timeout};
}

std::atomic<bool> follow_options_clock{false};

}  // namespace

void PgStoreCore::FollowOptionsClockForTests(bool follow) { follow_options_clock = follow; }

Result<std::string> PgStoreCore::Key(std::string_view uri, const Options& options) {
  IDEM_ASSIGN_OR_RETURN(storage::PgConninfo conninfo,
                        storage::PgConninfo::Parse(uri, ConnDefaults(options)));
  return conninfo.display_name() + '\n' + options.table;
}

Result<std::shared_ptr<PgStoreCore>> PgStoreCore::Open(std::string_view uri,
                                                       const Options& options) {
  IDEM_ASSIGN_OR_RETURN(storage::PgConninfo conninfo,
                        storage::PgConninfo::Parse(uri, ConnDefaults(options)));
  storage::PgStorageConfig config;
  config.table = options.table;
  config.create_if_missing = options.create_if_missing;
  config.read_only = options.read_only;
  if (follow_options_clock) config.clock = options.clock;
  config.pool = {.size = options.pool_size,
                 .request_timeout = options.request_timeout,
                 .failover_timeout = options.failover_timeout};
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<storage::PgStorage> storage,
                        storage::PgStorage::Open(conninfo, std::move(config)));
  std::shared_ptr<PgStoreCore> core(new PgStoreCore(options, conninfo.display_name()));
  // No StallWatch: it measures this process's stalls against record times, which are the
  // server's, and no process owns the store. The grace that holders are owed here is after the
  // server's own outages (a restart, a failover): PgStorage::OutageGrace.
  core->backend_ = std::make_unique<LocalBackend>(std::move(storage), options, nullptr);
  return core;
}

}  // namespace idem
