#include "storage/postgres/pg_storage.h"

#include <fmt/format.h>

#include <bit>
#include <vector>

#include "storage/postgres/pg_rows.h"
#include "storage/postgres/pg_storage_sql.h"
#include "util/deadline.h"
#include "util/escape.h"
#include "util/time.h"

namespace idem::storage {
namespace {

std::string_view SynchronousCommit(Durability durability) {
  return durability == Durability::kSync ? "SET LOCAL synchronous_commit = on"
                                         : "SET LOCAL synchronous_commit = off";
}

int64_t BitCast(uint64_t value) { return std::bit_cast<int64_t>(value); }

// What TransitionStatement's guard raises when its UPDATE applied to nothing.
constexpr std::string_view kDivisionByZero = "22012";

}  // namespace

PgStorage::PgStorage(const PgConninfo& conninfo, PgStorageConfig config)
    : config_(std::move(config)), pool_(conninfo, config_.pool) {}

Result<std::unique_ptr<PgStorage>> PgStorage::Open(const PgConninfo& conninfo,
                                                   PgStorageConfig config) {
  std::unique_ptr<PgStorage> storage(new PgStorage(conninfo, std::move(config)));
  IDEM_ASSIGN_OR_RETURN(storage->names_,
                        ResolvePgTableNames(storage->pool_, storage->config_.table));
  IDEM_RETURN_IF_ERROR(
      PreparePgTables(storage->pool_, storage->names_,
                      storage->config_.create_if_missing && !storage->config_.read_only));
  if (!storage->config_.read_only) {
    IDEM_RETURN_IF_ERROR(storage->StartTokens());
    IDEM_RETURN_IF_ERROR(storage->NoteServerIncarnation(/*prune=*/true).status());
  }
  return storage;
}

PgParam PgStorage::NowParam() const {
  return config_.clock ? PgParam::Timestamp(util::ToMicros(config_.clock->Now()))
                       : PgParam::Null(kPgTimestamptzOid);
}

Result<bool> PgStorage::TransitionIfCurrent(std::string_view key,
                                            const engine::TransitionRequest& request,
                                            Durability durability) {
  IDEM_RETURN_IF_ERROR(CheckWritable());
  // Resent after its first send had applied it, it applies to nothing: the caller's Update then
  // finds the record as this call left it, and the engine answers a repeated Complete or Fail
  // with OK (an Extend or a checkpoint saved twice is no different).
  PgTransaction transaction{.resendable = true, .alone = true};
  transaction.statements.push_back(
      TransitionStatement(key, request, durability, /*fail_unless_applied=*/false));
  IDEM_ASSIGN_OR_RETURN(std::vector<PgRows> rows, pool_.Run(transaction));
  return rows[0].affected() == 1;
}

Result<std::unique_ptr<PgOpenTransaction>> PgStorage::OpenTransaction() {
  IDEM_RETURN_IF_ERROR(CheckWritable());
  return pool_.Begin(std::chrono::milliseconds(0));
}

Result<bool> PgStorage::CompleteIn(PgOpenTransaction& transaction, std::string_view key,
                                   uint64_t token, std::string_view result, Durability durability) {
  const engine::TransitionRequest complete{
      .kind = engine::TransitionKind::kComplete, .token = token, .payload = result};
  // The UPDATE and COMMIT in one round trip: an UPDATE that applies to nothing fails (division
  // by zero), which makes the server skip the COMMIT and roll the transaction back.
  const Result<std::vector<PgRows>> committed = transaction.RunAndCommit(
      {TransitionStatement(key, complete, durability, /*fail_unless_applied=*/true)});
  if (committed.ok()) return true;
  if (transaction.failed_sqlstate() == kDivisionByZero) return false;
  return committed.status();
}

// A record that leaves pending keeps no holder but whether it took over (engine::ApplyTransition).
constexpr char kForgetHolder[] =
    "holder_pid = 0, holder_start = 0, holder_scope = 0, holder_request = 0";

PgStatement PgStorage::TransitionStatement(std::string_view key,
                                           const engine::TransitionRequest& request,
                                           Durability durability, bool fail_unless_applied) const {
  std::vector<PgParam> params = {NowParam(), SynchronousCommitParam(durability),
                                 PgParam::Bytea(key), PgParam::Int8(BitCast(request.token))};
  // engine::ApplyTransition, as SET clauses with parameters from $5.
  std::string patch;
  switch (request.kind) {
    case engine::TransitionKind::kComplete:
      patch =
          fmt::format("state = {}, result = $5, {}", static_cast<int>(State::kDone), kForgetHolder);
      params.push_back(PgParam::Bytea(request.payload));
      break;
    case engine::TransitionKind::kFail:
      patch = fmt::format("state = {}, result = $5, retryable = $6, {}",
                          static_cast<int>(State::kFailed), kForgetHolder);
      params.push_back(PgParam::Bytea(request.payload));
      params.push_back(PgParam::Bool(request.failure == Failure::kRetryable));
      break;
    case engine::TransitionKind::kExtend:
      patch = fmt::format("lease_deadline = {0}, expires = GREATEST(expires, {0})",
                          PgTimeAfter("n.now", "$5"));
      params.push_back(PgParam::Int8(
          std::chrono::duration_cast<std::chrono::microseconds>(request.lease).count()));
      break;
    case engine::TransitionKind::kSaveCheckpoint:
      patch = "checkpoint = $5";
      params.push_back(PgParam::Bytea(request.payload));
      break;
  }
  // The WHERE clause is engine::TransitionApplies.
  const std::string update = fmt::format(
      "UPDATE {} SET {}, updated = n.now, version = version + 1 FROM n "
      "WHERE key = $3 AND token = $4 AND state = {} AND expires > n.now",
      names_.records, patch, static_cast<int>(State::kPending));
  const std::string with = fmt::format(
      "WITH n AS MATERIALIZED (SELECT {} AS now, {} AS durability)", kNow, kSetSynchronousCommit);
  const std::string sql =
      fail_unless_applied
          ? fmt::format(
                "{}, changed AS ({} RETURNING 1) SELECT 1 / (SELECT count(*)::int FROM "
                "changed)",
                with, update)
          : fmt::format("{} {}", with, update);
  return {sql, std::move(params)};
}

Result<bool> PgStorage::WriteIfUnchanged(std::string_view key, const Record& next, RowSeen seen,
                                         Durability durability) {
  PgTransaction transaction{.resendable = true};
  transaction.statements.push_back({std::string(SynchronousCommit(durability)), {}});
  // The row's parameters are $1 (the key) to $18; an UPDATE's guard follows them.
  static const std::string kValues = PgRowValues(1);
  static const std::string kAssignments = PgRowAssignments(1);
  constexpr int kVersionParameter = kPgRecordColumnCount;
  std::vector<PgParam> params = PgRowParams(key, next);
  if (seen.version == 0) {
    transaction.statements.push_back(
        {fmt::format("INSERT INTO {} ({}) VALUES ({}, 1) ON CONFLICT (key) DO NOTHING",
                     names_.records, PgRecordColumnList(), kValues),
         std::move(params)});
  } else {
    params.push_back(PgParam::Int8(seen.version));
    params.push_back(PgParam::Int8(BitCast(seen.token)));
    transaction.statements.push_back(
        {fmt::format("UPDATE {} SET {}, version = version + 1 "
                     "WHERE key = $1 AND version = ${} AND token = ${}",
                     names_.records, kAssignments, kVersionParameter, kVersionParameter + 1),
         std::move(params)});
  }
  IDEM_ASSIGN_OR_RETURN(std::vector<PgRows> rows, pool_.Run(transaction));
  return rows[1].affected() == 1;
}

Result<bool> PgStorage::DecideAndWrite(std::string_view key, ReadResult& read, Decide decide,
                                       Durability durability) {
  const Record* next =
      decide(read.record, read.now, [this](uint64_t above) { return NextToken(above); });
  if (next == nullptr) return true;
  return WriteIfUnchanged(key, *next, read.row, durability);
}

Status PgStorage::DecideOnRead(std::string_view key, ReadResult& read, Decide decide,
                               Durability durability, std::optional<uint64_t> absent_since) {
  IDEM_RETURN_IF_ERROR(CheckWritable());
  // What `decide` answers on `read` without writing was read waiting for the standby (the
  // caller's ReadOrCreate): as durable as what it writes.
  IDEM_ASSIGN_OR_RETURN(const bool done, DecideAndWrite(key, read, decide, durability));
  if (done) return Status::OK();
  return Update(key, decide, durability, absent_since);
}

Status PgStorage::Update(std::string_view key, Decide decide, Durability durability,
                         std::optional<uint64_t> /*absent_since*/) {
  IDEM_RETURN_IF_ERROR(CheckWritable());
  // A resent write that had committed finds its own row changed, reads it, and the engine
  // answers the same (a Begin's own claim, a repeated Complete) without writing it again.
  const util::Deadline deadline(config_.pool.request_timeout);
  for (int attempt = 1;; ++attempt) {
    // What `decide` answers without writing (a resent Begin's own claim, a repeated Complete)
    // is given only once it is on a synchronous standby, as what it writes would be.
    IDEM_ASSIGN_OR_RETURN(ReadResult read, ReadVersioned(key, durability));
    IDEM_ASSIGN_OR_RETURN(const bool done, DecideAndWrite(key, read, decide, durability));
    if (done) return Status::OK();
    if (deadline.Passed()) {
      return Status::TimedOut(fmt::format(
          "record {} of {} changed under each of {} attempts to write it in {} ms", EscapeKey(key),
          pool_.conninfo().display_name(), attempt, deadline.budget().count()));
    }
  }
}

Status PgStorage::CheckWritable() const {
  if (config_.read_only) return Status::InvalidArgument("the store was opened read-only");
  return Status::OK();
}

Status PgStorage::Writable() {
  IDEM_RETURN_IF_ERROR(CheckWritable());
  // transaction_read_only is on in a standby (in recovery) and where the database or the role
  // sets default_transaction_read_only; the privileges are the role's on the records table.
  PgTransaction transaction{.resendable = true, .alone = true};
  transaction.statements.push_back(
      {"SELECT current_setting('transaction_read_only') = 'on', pg_is_in_recovery(), "
       "has_table_privilege($1, 'INSERT, UPDATE, DELETE')",
       {PgParam::Text(names_.records)}});
  IDEM_ASSIGN_OR_RETURN(const std::vector<PgRows> rows, pool_.Run(transaction));
  IDEM_ASSIGN_OR_RETURN(const bool read_only, rows[0].Bool(0, 0));
  IDEM_ASSIGN_OR_RETURN(const bool in_recovery, rows[0].Bool(0, 1));
  IDEM_ASSIGN_OR_RETURN(const bool may_write, rows[0].Bool(0, 2));
  const std::string& server = pool_.conninfo().display_name();
  if (in_recovery) {
    return Status::Unavailable(fmt::format(
        "{} is a standby (in recovery): it takes no writes; connect to the primary", server));
  }
  if (read_only) {
    return Status::Unavailable(fmt::format(
        "{} runs this role's transactions read-only (default_transaction_read_only is on)",
        server));
  }
  if (!may_write) {
    return Status::IOError(fmt::format(
        "the role of {} may not insert, update and delete rows of {}", server, names_.records));
  }
  return Status::OK();
}

Status PgStorage::Sync() {
  if (config_.read_only) return Status::OK();
  // A transaction that commits synchronously flushes the server's log up to its own commit
  // record, and so every commit before it, this process's buffered ones included. It must write
  // for that (a transaction that wrote nothing commits without waiting), so it rewrites one row
  // of the meta table as it is.
  PgTransaction transaction{.resendable = true};
  transaction.statements = {
      {"SET LOCAL synchronous_commit = on", {}},
      {fmt::format("UPDATE {} SET value = value WHERE name = 'format'", names_.meta), {}}};
  return pool_.Run(transaction).status();
}

Result<PgStorage::ServerWritable> PgStorage::NoteServerIncarnation(bool prune) {
  // The server's incarnation is its postmaster's start time and the time its statistics were
  // last reset. A restart changes the first, and so does a failover, since the promoted standby
  // is another postmaster (promotion does not restart one, and when it happened is not shown to
  // ordinary roles: pg_control_checkpoint is not granted to them). A crash restart (a backend
  // killed: the postmaster ends every session and recovers without restarting) changes only the
  // second: every recovery at start resets the statistics (PostgreSQL's documentation,
  // "Statistics Collection Configuration"), and ordinary roles may read when. A reset that an
  // administrator asks for (pg_stat_reset_shared('bgwriter')) opens a grace too: harmless.
  // The meta table keeps, per incarnation, when idem first saw it, in the
  // server's time: never before the server took writes again, so waiting one grace from then is
  // never too short. A row per incarnation, not one row for the latest: servers that answer the
  // same store at once (the nodes of a distributed engine) would otherwise take turns resetting
  // it, and the grace would never end.
  constexpr std::string_view kIncarnationRow =
      "'server started ' || (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint || "
      "' recovered ' || COALESCE((extract(epoch FROM pg_stat_get_bgwriter_stat_reset_time()) * "
      "1000000)::bigint, 0)";
  const std::string note = fmt::format(
      "WITH n AS MATERIALIZED (SELECT {now} AS now, {row} AS name, {durability} AS durability), "
      "noted AS (INSERT INTO {meta} (name, value) "
      "SELECT name, (extract(epoch FROM now) * 1000000)::bigint FROM n "
      "ON CONFLICT (name) DO NOTHING RETURNING value) "
      "SELECT n.now, timestamptz 'epoch' + COALESCE((SELECT value FROM noted), "
      "(SELECT value FROM {meta} m WHERE m.name = n.name))::bigint * interval '1 microsecond' "
      "FROM n",
      fmt::arg("now", kNow), fmt::arg("row", kIncarnationRow), fmt::arg("meta", names_.meta),
      fmt::arg("durability", kSetSynchronousCommit));
  // Resent after its first send committed, it finds the incarnation noted and reads it. Not a
  // synchronous commit, so that an open does not wait for a synchronous standby that is down: a
  // note lost in a crash is made again later, and a grace that starts later is never too short.
  PgTransaction transaction{.resendable = true, .alone = !prune};
  transaction.statements.push_back(
      {note, {NowParam(), SynchronousCommitParam(Durability::kBuffered)}});
  if (prune) {
    // Other incarnations first seen over kIncarnationsKept ago: their servers restarted since,
    // or are seen again and noted anew (a grace that starts late, once).
    transaction.statements.push_back(
        {fmt::format("DELETE FROM {} WHERE CASE WHEN name LIKE 'server started %' AND name <> {} "
                     "THEN value::bigint < (extract(epoch FROM {}) * 1000000)::bigint - $2 "
                     "ELSE false END",
                     names_.meta, kIncarnationRow, kNow),
         {NowParam(),
          PgParam::Int8(
              std::chrono::duration_cast<std::chrono::microseconds>(kIncarnationsKept).count())}});
  }
  IDEM_ASSIGN_OR_RETURN(std::vector<PgRows> rows, pool_.Run(transaction));
  const PgRows& seen = rows.front();
  ServerWritable result;
  IDEM_ASSIGN_OR_RETURN(const int64_t now, seen.Timestamp(0, 0));
  result.now = util::FromMicros(now);
  // NULL: another process noted this incarnation after this statement's snapshot was taken, so
  // only just: now is a moment late enough.
  result.since = result.now;
  if (!seen.IsNull(0, 1)) {
    IDEM_ASSIGN_OR_RETURN(const int64_t since, seen.Timestamp(0, 1));
    result.since = util::FromMicros(since);
  }
  return result;
}

Result<engine::RenewalGrace> PgStorage::OutageGrace(std::chrono::milliseconds grace) {
  if (config_.read_only) return engine::RenewalGrace{};
  IDEM_ASSIGN_OR_RETURN(const ServerWritable writable, NoteServerIncarnation(/*prune=*/false));
  // Like the grace of a store directory's new owner (backend/stall_watch.h): every claim written
  // before the server took writes again may have lost renewals.
  engine::RenewalGrace outage;
  outage.written_before = writable.since;
  outage.left =
      std::max(std::chrono::ceil<std::chrono::milliseconds>(writable.since + grace - writable.now),
               std::chrono::milliseconds(0));
  return outage;
}

Result<bool> PgStorage::Remove(std::string_view key, Durability durability,
                               const engine::AsRead* as_read) {
  IDEM_RETURN_IF_ERROR(CheckWritable());
  PgTransaction transaction{.resendable = true};
  std::vector<PgParam> params = {PgParam::Bytea(key)};
  std::string condition;
  if (as_read) {
    condition = " AND token = $2 AND updated = $3";
    params.push_back(PgParam::Int8(static_cast<int64_t>(as_read->token)));
    params.push_back(PgParam::Timestamp(util::ToMicros(as_read->updated)));
  }
  transaction.statements = {
      {std::string(SynchronousCommit(durability)), {}},
      {fmt::format("DELETE FROM {} WHERE key = $1{}", names_.records, condition),
       std::move(params)}};
  bool resent = false;
  IDEM_ASSIGN_OR_RETURN(std::vector<PgRows> rows, pool_.Run(transaction, &resent));
  // The first send may have removed the row before its reply was lost: as for a Forget resent
  // to a store's owner (core/store.cc), a resent removal that finds none counts as done.
  if (rows[1].affected() > 0 || resent) return true;
  // The caller read the record just before (Storage::Forget): it is another one now.
  if (as_read) return engine::ChangedSinceRead(key);
  return false;
}

Result<bool> PgStorage::Forget(std::string_view key, Durability durability,
                               const engine::AsRead* as_read) {
  IDEM_RETURN_IF_ERROR(CheckWritable());
  if (as_read) return ForgetAsRead(key, durability, *as_read);
  PgTransaction transaction{.resendable = true, .alone = true};
  transaction.statements.push_back(
      {fmt::format("WITH n AS MATERIALIZED (SELECT {} AS now, {} AS durability) "
                   "DELETE FROM {} WHERE key = $3 RETURNING {}, (SELECT now FROM n)",
                   kNow, kSetSynchronousCommit, names_.records, PgRecordColumnList()),
       {NowParam(), SynchronousCommitParam(durability), PgParam::Bytea(key)}});
  bool resent = false;
  IDEM_ASSIGN_OR_RETURN(std::vector<PgRows> rows, pool_.Run(transaction, &resent));
  // The first send may have deleted the row before its reply was lost: as for a Forget resent
  // to a store's owner (core/store.cc), a resent removal that finds none counts as done.
  if (rows[0].size() == 0) return resent;
  int64_t version = 0;
  Result<std::optional<Record>> deleted = DecodePgRow(rows[0], 0, &version);
  if (!deleted.ok()) return true;  // a row no idem reads is forgotten, as the default does
  IDEM_ASSIGN_OR_RETURN(const int64_t now, rows[0].Timestamp(0, kPgRecordColumnCount));
  engine::MakeVisible(*deleted, util::FromMicros(now));
  return deleted->has_value();
}

Result<bool> PgStorage::ForgetAsRead(std::string_view key, Durability durability,
                                     const engine::AsRead& as_read) {
  // One statement: the row goes only if it is still the one read; whether another is there
  // is read from the same snapshot, so that a changed record is told from a missing one.
  PgTransaction transaction{.resendable = true, .alone = true};
  transaction.statements.push_back(
      {fmt::format("WITH n AS MATERIALIZED (SELECT {now} AS now, {durability} AS durability), "
                   "d AS (DELETE FROM {records} WHERE key = $3 AND token = $4 AND updated = $5 "
                   "RETURNING {columns}) "
                   "SELECT {columns}, x.now, x.present FROM (SELECT n.now, EXISTS (SELECT 1 "
                   "FROM {records} WHERE key = $3) AS present FROM n) x LEFT JOIN d ON true",
                   fmt::arg("now", kNow), fmt::arg("durability", kSetSynchronousCommit),
                   fmt::arg("records", names_.records), fmt::arg("columns", PgRecordColumnList())),
       {NowParam(), SynchronousCommitParam(durability), PgParam::Bytea(key),
        PgParam::Int8(static_cast<int64_t>(as_read.token)),
        PgParam::Timestamp(util::ToMicros(as_read.updated))}});
  bool resent = false;
  IDEM_ASSIGN_OR_RETURN(std::vector<PgRows> rows, pool_.Run(transaction, &resent));
  int64_t version = 0;
  Result<std::optional<Record>> deleted = DecodePgRow(rows[0], 0, &version);
  if (!deleted.ok()) return true;  // the row read was decoded: one that matched it is gone
  IDEM_ASSIGN_OR_RETURN(const int64_t now, rows[0].Timestamp(0, kPgRecordColumnCount));
  if (deleted->has_value()) {
    engine::MakeVisible(*deleted, util::FromMicros(now));
    return deleted->has_value();
  }
  IDEM_ASSIGN_OR_RETURN(const bool present, rows[0].Bool(0, kPgRecordColumnCount + 1));
  // Resent after its first send deleted the row: as for a plain Forget, done.
  if (!present) return resent;
  return engine::ChangedSinceRead(key);
}

}  // namespace idem::storage
