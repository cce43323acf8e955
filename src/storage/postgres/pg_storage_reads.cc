// PgStorage's reads of one row: Read, the read before a write (ReadVersioned), and a Begin's
// first round trip (ReadOrCreate) in each of its shapes (PgBeginShape).
#include <fmt/format.h>

#include "storage/postgres/pg_rows.h"
#include "storage/postgres/pg_storage.h"
#include "storage/postgres/pg_storage_sql.h"
#include "util/time.h"

namespace idem::storage {
namespace {

// kSetSynchronousCommit, for a statement whose parameter $3 is SynchronousCommitParam.
constexpr std::string_view kSetSynchronousCommitOf3 = "set_config('synchronous_commit', $3, true)";

// SQL, in a statement whose parameter $3 is SynchronousCommitParam: under kSync, when the server
// has a synchronous standby, makes the transaction's commit wait until the standby has the
// server's log up to it. A commit is visible on the primary before the standby has it, and stays
// so when that wait is cancelled ("committed locally, but might not have been replicated"). A
// row read in such a transaction was committed before it, so once its commit returns, the
// standby has the row too: an answer read from it (a replay, a repeated Complete) survives a
// failover, as the write it reports would have. A commit waits only when its transaction wrote
// to the log (an id alone does not), hence the smallest record there is: a transactional logical
// message (prefix "idem", empty), which logical decoding shows and other readers never see.
// Without a synchronous standby it is NULL and costs nothing.
constexpr std::string_view kWaitForTheStandby =
    "CASE WHEN $3 = 'on' AND current_setting('synchronous_standby_names') <> '' "
    "THEN pg_logical_emit_message(true, 'idem', '') END";
// The same where a synchronous standby is known and the wait wanted: a statement of its own.
constexpr std::string_view kWaitForTheStandbyNow =
    "SELECT set_config('synchronous_commit', 'on', true), pg_logical_emit_message(true, 'idem', "
    "'')";

// A read's first row: the record's columns (null when there is none), then the server's time.
Result<Storage::ReadResult> DecodeRead(const PgRows& rows) {
  Storage::ReadResult result;
  IDEM_ASSIGN_OR_RETURN(result.record, DecodePgRow(rows, 0, &result.row.version));
  if (result.record) result.row.token = result.record->token;
  IDEM_ASSIGN_OR_RETURN(int64_t now, rows.Timestamp(0, kPgRecordColumnCount));
  result.now = util::FromMicros(now);
  return result;
}

}  // namespace

Result<Storage::ReadResult> PgStorage::ReadVersioned(std::string_view key, Durability answered) {
  PgTransaction transaction{.read_only = config_.read_only, .resendable = true, .alone = true};
  if (config_.read_only) answered = Durability::kBuffered;  // it writes nothing to wait for
  transaction.statements.push_back(
      {fmt::format("SELECT {}, n.now, n.waited FROM (SELECT {} AS now, {} AS durability, {} AS "
                   "waited) n LEFT JOIN {} ON key = $2",
                   PgRecordColumnList(), kNow, kSetSynchronousCommitOf3, kWaitForTheStandby,
                   names_.records),
       {NowParam(), PgParam::Bytea(key), SynchronousCommitParam(answered)}});
  IDEM_ASSIGN_OR_RETURN(std::vector<PgRows> rows, pool_.Run(transaction));
  return DecodeRead(rows[0]);
}

Result<Storage::ReadResult> PgStorage::Read(std::string_view key) {
  return ReadVersioned(key, Durability::kBuffered);
}

Result<Storage::ReadResult> PgStorage::ReadOrCreate(std::string_view key,
                                                    const engine::BeginRequest& request,
                                                    Durability durability) {
  IDEM_RETURN_IF_ERROR(CheckWritable());
  Result<ReadResult> read = ReadOrCreateIn(next_begin_shape(), key, request, durability);
  if (read.ok()) begin_shapes_.Saw(/*found=*/!read->created.has_value());
  return read;
}

Result<Storage::ReadResult> PgStorage::ReadOrCreateIn(PgBeginShape shape, std::string_view key,
                                                      const engine::BeginRequest& request,
                                                      Durability durability) {
  const bool waits = ReadWaitsForTheStandby(durability);
  if (shape == PgBeginShape::kReadFirst) {
    PgTransaction read{.resendable = true, .alone = true};
    read.statements.push_back(ReadStatement(key, durability, waits));
    IDEM_ASSIGN_OR_RETURN(const std::vector<PgRows> rows, pool_.Run(read));
    if (rows[0].size() > 0) return AnswerRead(rows[0], durability, waits);
    // No row: the claim inserted alone, as insert first does (a key another process inserted in
    // between is then read again).
  }
  // The claim made at the epoch has for times the offsets the server adds to its own now.
  IDEM_ASSIGN_OR_RETURN(const uint64_t token, NextToken(0));
  Claim fresh = engine::FreshClaim(request, TimePoint{}, token);
  // Sent alone (one implicit transaction). On a key that exists the pair's insert costs the
  // server about one more SELECT. (One statement that reads and else inserts, with common table
  // expressions, costs the server several times a plain SELECT, more than the round trip it saves
  // on loopback; docs/benchmarks.md. A plpgsql function that does the same costs what the pair
  // costs: docs/design/pg-prepared-pace-plan.md.)
  const bool read_too = shape == PgBeginShape::kReadOrInsert;
  PgTransaction transaction{.resendable = true, .alone = true};
  if (read_too) transaction.statements.push_back(ReadStatement(key, durability, waits));
  transaction.statements.push_back(
      InsertStatement(key, fresh.record, durability, /*unless_present=*/read_too));
  bool resent = false;
  Result<std::vector<PgRows>> answered = pool_.Run(transaction, &resent);
  const bool inserted = answered.ok() && answered->back().size() > 0;
  // A claim sent twice may have been written the first time: its token stays spent.
  if (!inserted && !resent) GiveBackToken(token);
  IDEM_ASSIGN_OR_RETURN(const std::vector<PgRows> rows, std::move(answered));
  if (inserted) {
    // Inserted, even when the pair's read found a row: it was removed in between (Forget,
    // purge), and the claim now in the table is this one.
    ReadResult result;
    IDEM_ASSIGN_OR_RETURN(int64_t created, rows.back().Timestamp(0, 0));
    result.now = util::FromMicros(created);
    engine::ShiftTimes(fresh.record, result.now);
    result.created = std::move(fresh);
    return result;
  }
  if (!read_too || rows[0].size() == 0) {
    // A row was there (insert first), or another process inserted the key after the pair's read
    // (or this claim's first send did, before its reply was lost: the engine then answers the
    // claim as a resent Begin's). Read it, waiting for the standby as the pair's read does: the
    // answer may be decided on it without a write.
    return ReadVersioned(key, durability);
  }
  return AnswerRead(rows[0], durability, waits);
}

bool PgStorage::ReadWaitsForTheStandby(Durability durability) const {
  return durability == Durability::kSync &&
         synchronous_standby_seen_.load(std::memory_order_relaxed);
}

PgStatement PgStorage::ReadStatement(std::string_view key, Durability durability,
                                     bool waits) const {
  // The column after the server's time: whether the server has a synchronous standby. Reading
  // it costs the server a lookup; the standby's wait and set_config cost it about a tenth of
  // the statement (docs/design/pg-prepared-pace-plan.md), so they are sent only where a standby
  // was last seen.
  static const std::string kLean =
      fmt::format("SELECT {}, {}, current_setting('synchronous_standby_names') <> '' FROM ",
                  PgRecordColumnList(), kNow);
  if (!waits) {
    return {fmt::format("{}{} WHERE key = $2", kLean, names_.records),
            {NowParam(), PgParam::Bytea(key)}};
  }
  // Answered only once its row is on the synchronous standby (kWaitForTheStandby), as the
  // write it reports would be; NULL there when the server has none.
  return {fmt::format("SELECT {}, {}, {}, {} FROM {} WHERE key = $2", PgRecordColumnList(), kNow,
                      kWaitForTheStandby, kSetSynchronousCommitOf3, names_.records),
          {NowParam(), PgParam::Bytea(key), SynchronousCommitParam(durability)}};
}

Result<Storage::ReadResult> PgStorage::AnswerRead(const PgRows& rows, Durability durability,
                                                  bool waited) {
  constexpr int kStandbyColumn = kPgRecordColumnCount + 1;
  bool standby = !rows.IsNull(0, kStandbyColumn);
  if (!waited) {
    IDEM_ASSIGN_OR_RETURN(standby, rows.Bool(0, kStandbyColumn));
  }
  synchronous_standby_seen_.store(standby, std::memory_order_relaxed);
  if (standby && !waited && durability == Durability::kSync) {
    // A synchronous standby the read did not wait for (one configured since this store last
    // read): the row may have been committed on the primary alone (a commit whose wait was
    // cancelled). A commit made now waits until the standby has the log up to it, so up to the
    // row's commit, which came before: then the answer survives a failover.
    PgTransaction wait{.resendable = true, .alone = true};
    wait.statements.push_back({std::string(kWaitForTheStandbyNow), {}});
    IDEM_RETURN_IF_ERROR(pool_.Run(wait).status());
  }
  return DecodeRead(rows);
}

PgStatement PgStorage::InsertStatement(std::string_view key, const Record& fresh,
                                       Durability durability, bool unless_present) const {
  std::vector<PgParam> params = {NowParam(), SynchronousCommitParam(durability)};
  // The row's values from $3 on, its times as microseconds after the server's time.
  static const std::string kValues =
      PgRowValues(3, [](std::string_view parameter) { return PgTimeAfter("n.now", parameter); });
  for (PgParam& param : PgRowParams(key, fresh, PgTimes::kMicros)) {
    params.push_back(std::move(param));
  }
  // With the pair's read, on a key that exists the insert stops at its NOT EXISTS, before any
  // speculative insertion.
  const std::string unless_present_sql =
      unless_present
          ? fmt::format("WHERE NOT EXISTS (SELECT 1 FROM {} WHERE key = $3)", names_.records)
          : std::string();
  return {fmt::format("INSERT INTO {table} ({columns}) SELECT {values}, 1 "
                      "FROM (SELECT {now} AS now, {durability} AS durability) n {unless} "
                      "ON CONFLICT (key) DO NOTHING RETURNING created",
                      fmt::arg("table", names_.records), fmt::arg("columns", PgRecordColumnList()),
                      fmt::arg("values", kValues), fmt::arg("now", kNow),
                      fmt::arg("durability", kSetSynchronousCommit),
                      fmt::arg("unless", unless_present_sql)),
          std::move(params)};
}

}  // namespace idem::storage
