// PgStorage: the Storage of a store kept in a PostgreSQL table (docs/design/postgresql.md), for
// processes on any number of hosts at once. The engine still makes every decision, in the
// calling process; the server keeps the rows, the clock and the token sequence.
//
// Each call is one or two transactions through the store's PgPool (one round trip each, no
// session state: it works behind PgBouncer in transaction pooling):
//   - Read: the row and the server's time in one statement.
//   - Update: optimistic, with no lock held between round trips. It reads the row (with its
//     version) and the server's time, lets `decide` choose, and writes only if the row still has
//     that version and token (an INSERT when there was none): UPDATE ... SET ...,
//     version = version + 1 WHERE key = $1 AND version = $v AND token = $t (the token tells a row
//     deleted and created again, whose version starts again at 1). When another writer got there
//     first, it reads again and `decide` chooses again. So a stale holder, on any host, never
//     overwrites its successor. DecideOnRead is the same without the first read: Begin decides
//     on the row its ReadOrCreate read.
//   - The usual calls as hand-written SQL would make them (docs/design/postgresql.md, sec. 3):
//     Begin's ReadOrCreate reads the row and inserts the engine's fresh claim when there is none,
//     in one round trip or two as its shape says (PgBeginShape);
//     TransitionIfCurrent is one UPDATE guarded by the engine's condition (pending, the token,
//     retention not over). These and the reads are sent alone, without BEGIN, SET LOCAL and
//     COMMIT.
//   - Forget (one DELETE that returns the row), Remove, Scan (pages in key order), Purge
//     (bounded batches; no table lock).
// Time: every `now` is the server's clock_timestamp(), so hosts with skewed clocks agree.
// Tokens: blocks of kTokenBlock reserved from the store's sequence in a synchronously committed
// transaction (sec. 5), so a token is never handed out twice, even after a server crash; and
// none is handed out above the server's time plus the store's lead (the meta table's
// token_lead row), so tables restored from a backup start above every token handed out after it
// (pg_storage_tokens.cc; docs/postgresql.md, "What holds", "Tokens after a restore").
// Durability: kSync commits with synchronous_commit = on, kBuffered with off (the server can
// lose its last ~0.6 s of commits in a crash, never leaving a partial one).
//
// Thread-safe.

#ifndef IDEM_STORAGE_POSTGRES_PG_STORAGE_H_
#define IDEM_STORAGE_POSTGRES_PG_STORAGE_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "idem/options.h"
#include "storage/postgres/pg_begin_shape.h"
#include "storage/postgres/pg_conninfo.h"
#include "storage/postgres/pg_pool.h"
#include "storage/postgres/pg_schema.h"
#include "storage/storage.h"
#include "util/mutex.h"

namespace idem::storage {

struct PgStorageConfig {
  std::string table = "idem_records";  // in the connection's current schema
  bool create_if_missing = true;
  bool read_only = false;  // reads only, in READ ONLY transactions
  PgPoolOptions pool;
  // Test hook: every decision takes its time from this clock instead of the server's, so tests
  // move the store's time with a ManualClock and compare times exactly. Null: the server's.
  std::shared_ptr<const Clock> clock;
  // How every Begin starts (tests). Null: chosen by what the store's recent Begins found
  // (PgBeginShapeChooser).
  std::optional<PgBeginShape> begin_shape;
};

class PgStorage final : public Storage {
 public:
  // Connects, and creates the store's tables (create_if_missing) or checks them (pg_schema.h).
  static Result<std::unique_ptr<PgStorage>> Open(const PgConninfo& conninfo,
                                                 PgStorageConfig config);

  // Other processes write the table too, so a key read absent may have been written since by
  // one of them: Update ignores `absent_since` and always reads the row again.
  Status Update(std::string_view key, Decide decide, Durability durability,
                std::optional<uint64_t> absent_since) override;
  Result<ReadResult> Read(std::string_view key) override;
  // `decide` on `read`, written if the row is still read.row; else as Update.
  Status DecideOnRead(std::string_view key, ReadResult& read, Decide decide, Durability durability,
                      std::optional<uint64_t> absent_since) override;
  // The row, by one plain SELECT; when there is none, the fresh claim inserted (no second read),
  // its times the server's now plus engine::FreshClaim's offsets; in the order and round trips
  // of next_begin_shape(). A key another process inserted in between is read again and
  // returned, and the token drawn for it given back.
  Result<ReadResult> ReadOrCreate(std::string_view key, const engine::BeginRequest& request,
                                  Durability durability) override;
  // One UPDATE whose WHERE is engine::TransitionApplies and whose SET is engine::ApplyTransition.
  Result<bool> TransitionIfCurrent(std::string_view key, const engine::TransitionRequest& request,
                                   Durability durability) override;
  // A transaction for the application's own statements (Store::ExecuteInTransaction), open on
  // a connection of the pool until it commits or goes.
  Result<std::unique_ptr<PgOpenTransaction>> OpenTransaction();
  // In `transaction`, after the application's statements: TransitionIfCurrent's UPDATE
  // completing `key`'s claim `token` with `result`, then COMMIT, in one round trip, so that the
  // record and the application's writes commit together. False, with the transaction rolled back,
  // when the UPDATE applied to nothing: the claim is no longer this token's (its lease was taken
  // over, or the record forgotten or expired). A connection lost at COMMIT: kUnavailable, the
  // outcome unknown (the record tells: done with this token, or still pending).
  Result<bool> CompleteIn(PgOpenTransaction& transaction, std::string_view key, uint64_t token,
                          std::string_view result, Durability durability);
  Result<bool> Remove(std::string_view key, Durability durability,
                      const engine::AsRead* as_read) override;
  // One DELETE, sent alone, that returns the row it deleted for the engine's rule to judge.
  Result<bool> Forget(std::string_view key, Durability durability,
                      const engine::AsRead* as_read) override;
  Status Scan(const ScanOptions& options, FunctionRef<bool(Record&& record, TimePoint now)> visit,
              ReadView* view = nullptr) override;
  // A REPEATABLE READ, READ ONLY transaction on a connection of the pool, held until the view
  // goes: every Scan given it reads one snapshot of the table (and judges at one time).
  Result<std::unique_ptr<ReadView>> OpenView() override;
  // Deletes in batches of kPurgeBatch, each its own transaction. `compact` does nothing more:
  // autovacuum gives the space back to the table (VACUUM needs the table's owner).
  Result<uint64_t> Purge(const PurgeOptions& options) override;

  // After a restart or a failover of the server, claims written before it took writes again keep
  // their holders for `grace` from then. One statement, on the rare path only: it notes the
  // server's incarnation in the meta table the first time any process sees it
  // (NoteServerIncarnation).
  Result<engine::RenewalGrace> OutageGrace(std::chrono::milliseconds grace) override;

  // Raises the store's sequence so that every block reserved after it, by any process, is above
  // `token`; never lowers it (an advisory lock orders it against every reservation). Tokens that
  // other processes draw from blocks they reserved before may still equal imported ones of other
  // keys: fencing, per key, holds (a key's next token is drawn above its record's).
  Status ReserveTokensAbove(uint64_t token) override;
  // One synchronously committed write: the server's log is flushed past every commit before it.
  Status Sync() override;
  // Asks the server: not a standby, not read-only for this role, and the role may write the
  // records table.
  Status Writable() override;

  const PgTableNames& names() const { return names_; }
  PgPoolStats pool_stats() const { return pool_.stats(); }
  // How the next Begin starts.
  PgBeginShape next_begin_shape() const {
    return config_.begin_shape.value_or(begin_shapes_.Shape());
  }

  // How many tokens one reservation from the sequence covers.
  static constexpr uint64_t kTokenBlock = 1024;
  // How long (microseconds) a process waits at most, after reserving a block that starts above
  // the server's time plus the lead, before handing out its first token (WaitUntilWithinLead):
  // the blocks of 128 processes reserving at once (a fleet starting), right after an open put
  // the sequence at the time plus the lead. A block that starts further above raises the lead
  // instead, by as much again, so that the processes reserving with it wait no longer either.
  static constexpr uint64_t kTokenLeadSlack = 128 * kTokenBlock;
  // The key of the advisory lock that orders token reservations against raising the sequence
  // (ReserveTokensAbove): every reservation holds it shared for its transaction, a raise holds it
  // exclusively, so no nextval runs between the raise's read of the sequence and its setval,
  // which would otherwise put the sequence back below a block already handed out. The sequence's
  // oid, with "idem" in ASCII in the high half to stay clear of applications' own small keys.
  // SQL; parameter $1 is the sequence's name.
  static constexpr std::string_view kTokenLockKey =
      "(1768187245::bigint << 32) | $1::regclass::oid::bigint";
  // How long the meta table keeps the row of a server incarnation (NoteServerIncarnation).
  static constexpr std::chrono::hours kIncarnationsKept{24 * 30};
  // How many records one purge transaction deletes at most.
  static constexpr int kPurgeBatch = 1000;
  // How many rows a scan reads per statement.
  static constexpr int kScanPage = 256;

 private:
  // Forget of the record `as_read` names only.
  Result<bool> ForgetAsRead(std::string_view key, Durability durability,
                            const engine::AsRead& as_read);
  PgStorage(const PgConninfo& conninfo, PgStorageConfig config);

  // kInvalidArgument for a write through a store opened read-only.
  Status CheckWritable() const;

  // TransitionIfCurrent's statement: one UPDATE, which changes one row when it applies; with
  // `fail_unless_applied`, a statement that fails (SQLSTATE 22012) when it did not apply, which
  // ends its transaction.
  PgStatement TransitionStatement(std::string_view key, const engine::TransitionRequest& request,
                                  Durability durability, bool fail_unless_applied) const;
  // The server's time in SQL, or parameter $1's (a test clock's) when it is not null (NowParam).
  static constexpr std::string_view kNow = "COALESCE($1::timestamptz, clock_timestamp())";
  // The parameter that replaces the server's time in tests (the test clock's time; NULL outside
  // them: kNow then reads clock_timestamp()).
  PgParam NowParam() const;
  // The rows expired now (through the index on expires).
  Result<uint64_t> CountExpired();
  // The row under `key`, the row seen (its version and token) and the server's time (read-only
  // when asked). `answered` kSync: returns only once the row is on the server's synchronous
  // standby, if it has one, so that an answer read from it is as durable as a kSync write.
  Result<ReadResult> ReadVersioned(std::string_view key, Durability answered);
  // ReadOrCreate in `shape`.
  Result<ReadResult> ReadOrCreateIn(PgBeginShape shape, std::string_view key,
                                    const engine::BeginRequest& request, Durability durability);
  // ReadOrCreate's statements. The row of `key` (no row when there is none), the server's time,
  // and whether it has a synchronous standby: `waits` (ReadWaitsForTheStandby), by making the
  // read's commit wait for it.
  PgStatement ReadStatement(std::string_view key, Durability durability, bool waits) const;
  // Whether a read that may answer under `durability` waits for the synchronous standby itself:
  // under kSync, where the last read saw one.
  bool ReadWaitsForTheStandby(Durability durability) const;
  // The answer of ReadStatement's row (one there): under kSync, once the row is on the server's
  // synchronous standby (a round trip more when the read did not wait and the server has one).
  Result<ReadResult> AnswerRead(const PgRows& rows, Durability durability, bool waited);
  // `fresh` inserted under `key`, its times offsets the server adds to its now; `unless_present`:
  // only when no row has the key (so that on a key that exists, read in the same round trip, it
  // stops before any speculative insertion). RETURNING created: a row when it inserted.
  PgStatement InsertStatement(std::string_view key, const Record& fresh, Durability durability,
                              bool unless_present) const;
  // Writes `next` if the row under `key` is still the one `seen` (or still absent). False when
  // another writer changed, deleted or re-created it first.
  Result<bool> WriteIfUnchanged(std::string_view key, const Record& next, RowSeen seen,
                                Durability durability);
  // Calls `decide` on `read` and writes its answer if the row is still read.row: true when done
  // (written, or nothing to write), false when the row changed first.
  Result<bool> DecideAndWrite(std::string_view key, ReadResult& read, Decide decide,
                              Durability durability);
  // The server's time, and when idem first saw the server's current incarnation (its
  // postmaster's start and its last recovery) take writes, noting it in the meta table (a row
  // 'server started <its start> recovered <its statistics' reset>', in microseconds) if no
  // process had. `prune`: also deletes the rows of incarnations
  // first seen more than kIncarnationsKept ago (Open).
  struct ServerWritable {
    TimePoint now;
    TimePoint since;
  };
  Result<ServerWritable> NoteServerIncarnation(bool prune);
  // At open: gives a store of a release before the lead its lead row (kUnknownLeadMargin: its
  // tokens ran ahead of the clock by what its processes reserved at once, without a bound kept),
  // and raises the sequence above the server's time plus the lead, above every token handed out so
  // far even when the tables went back in time (a backup restored).
  Status StartTokens();
  // Raises the sequence (never lowers it) so that every block reserved after is above the token
  // that the SQL expression `token` gives, with parameters $1 = the test clock's time (NowParam)
  // and $2 = `param`; under the advisory lock, after the statements `first`.
  Status RaiseTokenSequence(std::string_view token, PgParam param,
                            std::vector<PgStatement> first = {});
  // A token above `above` that no process ever had, from this process's block, handed out no
  // earlier than the server's time plus the lead reaches it (WaitUntilWithinLead).
  Result<uint64_t> NextToken(uint64_t above);
  // Reserves the next block from the sequence, raising the lead first when the block starts
  // more than kTokenLeadSlack above the server's time plus the lead.
  Status ReserveBlock() IDEM_REQUIRES(token_mu_);
  // Waits (kTokenLeadSlack at most, after ReserveBlock) until the server's time
  // plus the lead, as the reservation read them and the steady clock moved since, reaches
  // `token`.
  void WaitUntilWithinLead(uint64_t token) const IDEM_REQUIRES(token_mu_);
  // Returns `token`, drawn by NextToken and written nowhere, to the block when no token was
  // drawn after it; otherwise it stays unused.
  void GiveBackToken(uint64_t token);

  // Constant after construction.
  PgStorageConfig config_;
  PgPool pool_;
  PgTableNames names_;

  PgBeginShapeChooser begin_shapes_;
  // Whether the last read of a row saw the server with a synchronous standby (AnswerRead). True
  // at first: the first read under kSync waits, and learns.
  std::atomic<bool> synchronous_standby_seen_{true};

  util::Mutex token_mu_;
  uint64_t next_token_ IDEM_GUARDED_BY(token_mu_) = 0;  // == block_end_: none left
  uint64_t block_end_ IDEM_GUARDED_BY(token_mu_) = 0;
  // The server's time at the block's reservation plus the lead then, in microseconds, and when
  // the reservation's answer came: no token of the block is handed out above that time plus the
  // time passed since.
  uint64_t block_bound_ IDEM_GUARDED_BY(token_mu_) = 0;
  std::chrono::steady_clock::time_point block_reserved_at_ IDEM_GUARDED_BY(token_mu_);
};

}  // namespace idem::storage

#endif  // IDEM_STORAGE_POSTGRES_PG_STORAGE_H_
