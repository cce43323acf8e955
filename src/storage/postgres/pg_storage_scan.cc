// PgStorage's reads of many rows: snapshot views, scans in key order, and purge.
#include <fmt/format.h>

#include "storage/postgres/pg_rows.h"
#include "storage/postgres/pg_storage.h"
#include "util/time.h"

namespace idem::storage {
namespace {

// The smallest key above every key that starts with `prefix`, or nullopt when there is none
// (the prefix is empty or all 0xFF bytes).
std::optional<std::string> PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xFF) end.pop_back();
  if (end.empty()) return std::nullopt;
  end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
  return end;
}

// A REPEATABLE READ, READ ONLY transaction left open on a connection of the pool: every page read
// in it sees the snapshot its first query took, and the time of its first page. What it pins
// (the server keeps the row versions it sees from vacuum) ends with the transaction: when the
// view is destroyed, or the connection goes (the process died), or the server ends it
// (idle_in_transaction_session_timeout, when the database sets one).
class PgView final : public ReadView {
 public:
  explicit PgView(std::unique_ptr<PgOpenTransaction> transaction)
      : transaction_(std::move(transaction)) {}

  // Runs `page` in the transaction, begun with the first.
  Result<PgRows> Run(PgStatement page) {
    std::vector<PgStatement> statements;
    if (!begun_) {
      statements.push_back(
          {.sql = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", .prepare = false});
    }
    statements.push_back(std::move(page));
    IDEM_ASSIGN_OR_RETURN(std::vector<PgRows> rows, transaction_->Run(std::move(statements)));
    begun_ = true;
    return std::move(rows.back());
  }

  // The view's time (the server's, or the test clock's), read first; nullopt before.
  std::optional<int64_t> now;

 private:
  const std::unique_ptr<PgOpenTransaction> transaction_;
  bool begun_ = false;
};

}  // namespace

Result<std::unique_ptr<ReadView>> PgStorage::OpenView() {
  // Nothing is sent yet: the first page begins the transaction.
  return std::unique_ptr<ReadView>(
      std::make_unique<PgView>(pool_.Begin(std::chrono::milliseconds(0))));
}

Status PgStorage::Scan(const ScanOptions& options,
                       FunctionRef<bool(Record&& record, TimePoint now)> visit, ReadView* view) {
  // Only this storage's views are given to it.
  auto* const pg_view = static_cast<PgView*>(view);
  if (pg_view != nullptr && !pg_view->now) {
    // The view's time, read by its first statement, which also takes its snapshot: every page
    // judges retention at it.
    IDEM_ASSIGN_OR_RETURN(const PgRows rows,
                          pg_view->Run({fmt::format("SELECT {}", kNow), {NowParam()}}));
    IDEM_ASSIGN_OR_RETURN(pg_view->now, rows.Timestamp(0, 0));
  }
  const std::optional<std::string> end = PrefixEnd(options.prefix);
  std::string after(options.start_after);
  for (;;) {
    std::vector<PgParam> params = {
        pg_view != nullptr ? PgParam::Timestamp(*pg_view->now) : NowParam(), PgParam::Bytea(after),
        PgParam::Bytea(options.prefix)};
    if (end) params.push_back(PgParam::Bytea(*end));
    PgStatement statement{
        fmt::format("SELECT {}, {} FROM {} WHERE key > $2 AND key >= $3{} ORDER BY key LIMIT {}",
                    PgRecordColumnList(), kNow, names_.records, end ? " AND key < $4" : "",
                    kScanPage),
        std::move(params)};
    const auto run_page = [&]() -> Result<PgRows> {
      if (pg_view != nullptr) return pg_view->Run(std::move(statement));
      PgTransaction transaction{.read_only = config_.read_only, .resendable = true, .alone = true};
      transaction.statements.push_back(std::move(statement));
      IDEM_ASSIGN_OR_RETURN(std::vector<PgRows> rows, pool_.Run(transaction));
      return std::move(rows.front());
    };
    IDEM_ASSIGN_OR_RETURN(const PgRows page, run_page());
    for (int row = 0; row < page.size(); ++row) {
      int64_t version = 0;
      IDEM_ASSIGN_OR_RETURN(std::optional<Record> record, DecodePgRow(page, row, &version));
      IDEM_ASSIGN_OR_RETURN(int64_t now, page.Timestamp(row, kPgRecordColumnCount));
      after = record->key;
      if (!visit(std::move(*record), util::FromMicros(now))) return Status::OK();
    }
    if (page.size() < kScanPage) return Status::OK();
  }
}

Result<uint64_t> PgStorage::CountExpired() {
  PgTransaction transaction{.read_only = config_.read_only, .resendable = true, .alone = true};
  transaction.statements.push_back(
      {fmt::format("SELECT count(*) FROM {} WHERE expires <= {}", names_.records, kNow),
       {NowParam()}});
  IDEM_ASSIGN_OR_RETURN(std::vector<PgRows> rows, pool_.Run(transaction));
  IDEM_ASSIGN_OR_RETURN(int64_t due, rows[0].Int(0, 0));
  return static_cast<uint64_t>(due);
}

Result<uint64_t> PgStorage::Purge(const PurgeOptions& options) {
  if (options.dry_run) {
    IDEM_ASSIGN_OR_RETURN(const uint64_t due, CountExpired());
    if (options.progress_total) options.progress_total(due);
    if (options.progress) options.progress(due);
    return due;
  }
  IDEM_RETURN_IF_ERROR(CheckWritable());
  if (options.progress_total) {
    // Rows expiring meanwhile are purged too: the count may end above the total.
    IDEM_ASSIGN_OR_RETURN(const uint64_t due, CountExpired());
    options.progress_total(due);
  }
  // The batched DELETE of PostgreSQL's documentation: rows locked by a writer are left for the
  // next purge, and no lock is held past a batch.
  const std::string sql = fmt::format(
      "WITH n AS MATERIALIZED (SELECT {} AS now), doomed AS (SELECT key FROM {} WHERE expires <= "
      "(SELECT now FROM n) ORDER BY expires LIMIT {} FOR UPDATE SKIP LOCKED) "
      "DELETE FROM {} WHERE key IN (SELECT key FROM doomed)",
      kNow, names_.records, kPurgeBatch, names_.records);
  uint64_t purged = 0;
  for (;;) {
    PgTransaction transaction{.resendable = true};
    transaction.statements = {{"SET LOCAL synchronous_commit = off", {}}, {sql, {NowParam()}}};
    IDEM_ASSIGN_OR_RETURN(std::vector<PgRows> rows, pool_.Run(transaction));
    const uint64_t deleted = rows[1].affected();
    purged += deleted;
    if (options.progress) options.progress(purged);
    if (deleted < static_cast<uint64_t>(kPurgeBatch)) return purged;
  }
}
}  // namespace idem::storage
