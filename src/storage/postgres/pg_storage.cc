#include "storage/postgres/pg_storage.h"

#include <fmt/format.h>

#include <bit>
#include <vector>

#include "storage/postgres/pg_rows.h"
#include "util/deadline.h"
#include "util/escape.h"
#include "util/time.h"

namespace idem::storage {
namespace {

std::string_view SynchronousCommit(Durability durability) {
  return durability == Durability::kSync ? "SET LOCAL synchronous_commit = on"
                                         : "SET LOCAL synchronous_commit = off";
}

// The same, for a statement sent alone (PgTransaction::alone), as its parameter $2 (or $3) of
// this SQL:
constexpr std::string_view kSetSynchronousCommit = "set_config('synchronous_commit', $2, true)";
constexpr std::string_view kSetSynchronousCommitOf3 = "set_config('synchronous_commit', $3, true)";
PgParam SynchronousCommitParam(Durability durability) {
  return PgParam::Text(durability == Durability::kSync ? "on" : "off");
}

int64_t BitCast(uint64_t value) { return std::bit_cast<int64_t>(value); }

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

// What TransitionStatement's guard raises when its UPDATE applied to nothing.
constexpr std::string_view kDivisionByZero = "22012";

// SQL: the time `micros` microseconds after the time `now` names.
std::string After(std::string_view now, std::string_view micros) {
  return fmt::format("{} + {} * interval '1 microsecond'", now, micros);
}

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

namespace {

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
  // One round trip, for a replay and a fresh key alike: the plainest statement that reads the
  // row, then the engine's fresh claim inserted only when there is no row, both sent alone (one
  // implicit transaction). On a key that exists the insert stops at its NOT EXISTS, before any
  // speculative insertion, and costs the server about one more SELECT. (One statement that
  // reads and else inserts, with common table expressions, costs the server several times a
  // plain SELECT, more than the round trip it saves on loopback; docs/benchmarks.md.)
  // The claim made at the epoch has for times the offsets the server adds to its own now.
  IDEM_ASSIGN_OR_RETURN(const uint64_t token, NextToken(0));
  Claim fresh = engine::FreshClaim(request, TimePoint{}, token);
  const PgTransaction read_or_insert = ReadOrInsert(key, fresh.record, durability);
  bool resent = false;
  Result<std::vector<PgRows>> answered = pool_.Run(read_or_insert, &resent);
  const bool inserted = answered.ok() && answered->back().size() > 0;
  // A pair sent twice may have written the claim the first time: its token stays spent.
  if (!inserted && !resent) GiveBackToken(token);
  IDEM_ASSIGN_OR_RETURN(const std::vector<PgRows> rows, std::move(answered));
  if (inserted) {
    // Inserted, even when the read found a row: it was removed in between (Forget, purge), and
    // the claim now in the table is this one.
    ReadResult result;
    IDEM_ASSIGN_OR_RETURN(int64_t created, rows[1].Timestamp(0, 0));
    result.now = util::FromMicros(created);
    engine::ShiftTimes(fresh.record, result.now);
    result.created = std::move(fresh);
    return result;
  }
  if (rows[0].size() == 0) {
    // Another process inserted the key between the read and the insert (or this pair's first
    // send did, before its reply was lost: the engine then answers the claim as a resent
    // Begin's). Read what won, waiting for the standby as the pair's read does: the answer may
    // be decided on it without a write.
    return ReadVersioned(key, durability);
  }
  return DecodeRead(rows[0]);
}

PgTransaction PgStorage::ReadOrInsert(std::string_view key, const Record& fresh,
                                      Durability durability) const {
  std::vector<PgParam> params = {NowParam(), SynchronousCommitParam(durability)};
  // The row's values from $3 on, its times as microseconds after the server's time.
  static const std::string kValues =
      PgRowValues(3, [](std::string_view parameter) { return After("n.now", parameter); });
  for (PgParam& param : PgRowParams(key, fresh, PgTimes::kMicros)) {
    params.push_back(std::move(param));
  }
  PgTransaction read_or_insert{.resendable = true, .alone = true};
  // A replay is answered only once its row is on a synchronous standby (kWaitForTheStandby).
  read_or_insert.statements.push_back(
      {fmt::format("SELECT {}, {}, {}, {} FROM {} WHERE key = $2", PgRecordColumnList(), kNow,
                   kSetSynchronousCommitOf3, kWaitForTheStandby, names_.records),
       {NowParam(), PgParam::Bytea(key), SynchronousCommitParam(durability)}});
  read_or_insert.statements.push_back(
      {fmt::format("INSERT INTO {table} ({columns}) SELECT {values}, 1 "
                   "FROM (SELECT {now} AS now, {durability} AS durability) n "
                   "WHERE NOT EXISTS (SELECT 1 FROM {table} WHERE key = $3) "
                   "ON CONFLICT (key) DO NOTHING RETURNING created",
                   fmt::arg("table", names_.records), fmt::arg("columns", PgRecordColumnList()),
                   fmt::arg("values", kValues), fmt::arg("now", kNow),
                   fmt::arg("durability", kSetSynchronousCommit)),
       std::move(params)});
  return read_or_insert;
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
                          After("n.now", "$5"));
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

Result<bool> PgStorage::Remove(std::string_view key, Durability durability) {
  IDEM_RETURN_IF_ERROR(CheckWritable());
  PgTransaction transaction{.resendable = true};
  transaction.statements = {
      {std::string(SynchronousCommit(durability)), {}},
      {fmt::format("DELETE FROM {} WHERE key = $1", names_.records), {PgParam::Bytea(key)}}};
  bool resent = false;
  IDEM_ASSIGN_OR_RETURN(std::vector<PgRows> rows, pool_.Run(transaction, &resent));
  // The first send may have removed the row before its reply was lost: as for a Forget resent
  // to a store's owner (core/store.cc), a resent removal that finds none counts as done.
  return rows[1].affected() > 0 || resent;
}

Result<bool> PgStorage::Forget(std::string_view key, Durability durability) {
  IDEM_RETURN_IF_ERROR(CheckWritable());
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

}  // namespace idem::storage
