// The defaults of Store's virtual calls that idem's own handles override: what another
// implementation of Store (a test double, a wrapper) answers when it does not.

#include "core/count_by_scan.h"
#include "idem/store.h"
#include "idem/tables.h"

namespace idem {

Status core::CountByScan(Store& store, std::chrono::system_clock::time_point now,
                         StoreStats& stats) {
  std::optional<EngineHealth> engine = std::move(stats.engine);
  stats = StoreStats{};
  stats.engine = std::move(engine);
  stats.at = now;
  return store.Scan(ScanOptions{}, [&stats](const Record& record) {
    const std::string_view state = record.state == State::kPending
                                       ? (record.timed_out ? "timeout" : "pending")
                                       : idem::StateName(record.state);
    ++stats.records;
    ++stats.by_state[std::string(state)];
    ++stats.by_type[record.type];
    if (record.state == State::kPending &&
        (!stats.oldest_pending || record.created < stats.oldest_pending->created)) {
      Record& oldest = stats.oldest_pending.emplace();
      oldest.key = record.key;
      oldest.created = record.created;
    }
    return true;
  });
}

Result<StoreStats> Store::GetStats() {
  StoreStats stats;
  IDEM_RETURN_IF_ERROR(core::CountByScan(*this, std::chrono::system_clock::now(), stats));
  return stats;
}

Result<CheckReport> Store::Check() {
  const auto start = std::chrono::steady_clock::now();
  CheckReport report;
  const Status read = Scan(ScanOptions{}, [&report](const Record&) {
    ++report.records;
    return true;
  });
  if (read.code() == Status::Code::kCorruption) {
    report.Add("read", "", read.message());
  } else {
    IDEM_RETURN_IF_ERROR(read);
  }
  report.took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  return report;
}

Result<OwnerCounters> Store::GetOwnerCounters() const {
  return Status::Unavailable("this Store implementation does not say whose counters it has");
}

StoreHealth Store::Health() {
  const auto start = std::chrono::steady_clock::now();
  StoreHealth health;
  const Result<std::optional<Record>> read = Get(kHealthProbeKey);
  health.can_read = read.ok();
  health.problem = read.ok() ? Status::InvalidArgument(
                                   "this Store implementation does not say whether it takes writes")
                             : read.status();
  health.took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  return health;
}

Status Store::ForgetIfUnchanged(const Record& /*as_read*/) {
  return Status::InvalidArgument("this Store implementation cannot forget a record conditionally");
}

Status Store::ScanSnapshot(
    FunctionRef<bool(const Record&)> /*record*/,
    FunctionRef<bool(std::string_view, std::string_view, const TableValue&)> /*value*/) {
  return Status::InvalidArgument("this Store implementation cannot be read as of one moment");
}

Status Store::Backup(std::string_view /*destination*/) {
  return Status::InvalidArgument("this Store implementation cannot be backed up by idem");
}

Result<std::vector<ImportOutcome>> Store::Import(std::span<const Record> /*records*/) {
  return Status::InvalidArgument("this Store implementation cannot import records");
}

Status Store::Complete(std::string_view key, uint64_t token, std::string_view result,
                       const WriteSet& writes) {
  if (writes.empty()) return Complete(key, token, result);
  return Status::InvalidArgument("this Store implementation keeps no application tables");
}

Result<TableValue> Store::GetValue(std::string_view /*table*/, std::string_view /*key*/) {
  return Status::InvalidArgument("this Store implementation keeps no application tables");
}

Status Store::ScanTable(std::string_view /*table*/, const ScanOptions& /*options*/,
                        FunctionRef<bool(std::string_view, const TableValue&)> /*visit*/) {
  return Status::InvalidArgument("this Store implementation keeps no application tables");
}

Result<std::vector<std::string>> Store::ListTables() {
  return Status::InvalidArgument("this Store implementation keeps no application tables");
}

Result<std::vector<ImportOutcome>> Store::ImportValues(
    std::string_view /*table*/, std::span<const std::pair<std::string, TableValue>> /*values*/) {
  return Status::InvalidArgument("this Store implementation keeps no application tables");
}

Result<std::unique_ptr<ClaimTransaction>> Store::BeginClaimTransaction(std::string_view /*key*/,
                                                                       uint64_t /*token*/) {
  return Status::InvalidArgument(
      "ExecuteInTransaction runs the application's SQL in the database that keeps the store, "
      "and this store is not kept in PostgreSQL (a store directory keeps local state in "
      "application tables: Execute with Attempt::Read and Put)");
}

}  // namespace idem
