#include "core/postgres_store_core.h"

#include <fmt/format.h>

#include <atomic>
#include <optional>
#include <vector>

#include "storage/postgres/pg_conninfo.h"
#include "storage/postgres/pg_storage.h"

namespace idem::core {
namespace {

storage::PgConnDefaults ConnDefaults(const Options& options) {
  return {.connect_timeout = options.failover_timeout,
          .dead_peer_timeout = options.request_timeout};
}

std::atomic<bool> follow_options_clock{false};

}  // namespace

void PostgresStoreCore::FollowOptionsClockForTests(bool follow) { follow_options_clock = follow; }

Result<std::string> PostgresStoreCore::Key(std::string_view uri, const Options& options) {
  IDEM_ASSIGN_OR_RETURN(storage::PgConninfo conninfo,
                        storage::PgConninfo::Parse(uri, ConnDefaults(options)));
  return conninfo.display_name() + '\n' + options.table;
}

Result<std::shared_ptr<PostgresStoreCore>> PostgresStoreCore::Open(std::string_view uri,
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
  std::shared_ptr<PostgresStoreCore> core(new PostgresStoreCore(options, conninfo.display_name()));
  // No StallWatch: it measures this process's stalls against record times, which are the
  // server's, and no process owns the store. The grace that holders are owed here is after the
  // server's own outages (a restart, a failover): PgStorage::OutageGrace.
  core->storage_ = storage.get();
  core->backend_ = std::make_unique<backend::EngineBackend>(std::move(storage), options, nullptr);
  return core;
}

namespace {

// libpq takes the statement as a C string and PostgreSQL's text values hold no NUL byte: the
// server would see only what comes before it. Refused before anything is sent, so the
// transaction goes on.
Status CheckNoNul(std::string_view sql, const std::vector<std::optional<std::string>>& params) {
  if (const std::size_t at = sql.find('\0'); at != std::string_view::npos) {
    return Status::InvalidArgument(fmt::format(
        "the statement holds a NUL byte at offset {} of {}; PostgreSQL's text ends there", at,
        sql.size()));
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!params[i]) continue;
    if (const std::size_t at = params[i]->find('\0'); at != std::string::npos) {
      return Status::InvalidArgument(fmt::format(
          "parameter ${} holds a NUL byte at offset {} of {}; parameters are sent as text, which "
          "cannot hold one: send bytes as hex and decode them in the statement "
          "(decode(${}, 'hex'))",
          i + 1, at, params[i]->size(), i + 1));
    }
  }
  return Status::OK();
}

// ExecuteInTransaction's transaction: the application's statements in their text form, then the
// record's fenced Complete and COMMIT.
class PgClaimTransaction final : public ClaimTransaction {
 public:
  PgClaimTransaction(storage::PgStorage& storage, backend::EngineBackend& backend,
                     std::unique_ptr<storage::PgOpenTransaction> open, std::string_view key,
                     uint64_t token, Durability durability, std::size_t max_result_size)
      : storage_(storage),
        backend_(backend),
        open_(std::move(open)),
        key_(key),
        token_(token),
        durability_(durability),
        max_result_size_(max_result_size) {}

  Result<SqlRows> Exec(std::string_view sql,
                       const std::vector<std::optional<std::string>>& params) override {
    IDEM_RETURN_IF_ERROR(CheckNoNul(sql, params));
    storage::PgStatement statement{.sql = std::string(sql), .text_results = true, .prepare = false};
    for (const std::optional<std::string>& param : params) {
      statement.params.push_back(storage::PgParam::Untyped(
          param ? std::optional<std::string_view>(*param) : std::nullopt));
    }
    IDEM_ASSIGN_OR_RETURN(std::vector<storage::PgRows> answered,
                          open_->Run({std::move(statement)}));
    const storage::PgRows& rows = answered[0];
    std::vector<std::string> names;
    for (int column = 0; column < rows.columns(); ++column) {
      names.emplace_back(rows.ColumnName(column));
    }
    std::vector<std::optional<std::string>> values;
    values.reserve(static_cast<std::size_t>(rows.size()) * names.size());
    for (int row = 0; row < rows.size(); ++row) {
      for (int column = 0; column < rows.columns(); ++column) {
        values.push_back(rows.IsNull(row, column)
                             ? std::nullopt
                             : std::optional<std::string>(rows.Bytes(row, column)));
      }
    }
    return SqlRows(std::move(names), std::move(values), rows.affected());
  }

  Status CompleteAndCommit(std::string_view result) override {
    const auto started = backend::LatencyRecorder::Clock::now();
    if (result.size() > max_result_size_) {
      open_->RollBack();
      return Status::InvalidArgument(
          fmt::format("result is {} bytes; the limit is {}", result.size(), max_result_size_));
    }
    IDEM_ASSIGN_OR_RETURN(const bool applied,
                          storage_.CompleteIn(*open_, key_, token_, result, durability_));
    if (applied) {
      backend_.CountCommittedComplete(started);
      return Status::OK();
    }
    backend_.CountLeaseLost();
    return Status::LeaseLost(fmt::format(
        "the claim of token {} is no longer this attempt's (taken over, forgotten or expired); "
        "its transaction was rolled back",
        token_));
  }

  void RollBack() override { open_->RollBack(); }

 private:
  storage::PgStorage& storage_;
  backend::EngineBackend& backend_;  // counts the commit, or a stale one
  const std::unique_ptr<storage::PgOpenTransaction> open_;
  const std::string key_;
  const uint64_t token_;
  const Durability durability_;
  const std::size_t max_result_size_;
};

}  // namespace

Result<std::unique_ptr<ClaimTransaction>> PostgresStoreCore::BeginClaimTransaction(
    std::string_view key, uint64_t token, Durability durability) {
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<storage::PgOpenTransaction> open,
                        storage_->OpenTransaction());
  return std::unique_ptr<ClaimTransaction>(new PgClaimTransaction(
      *storage_, *backend_, std::move(open), key, token, durability, options_.max_result_size));
}

}  // namespace idem::core
