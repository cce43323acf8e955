// The fencing tokens of a store in PostgreSQL: blocks of kTokenBlock reserved from the store's
// sequence, each in a synchronously committed transaction, so that no token is handed out twice;
// and a lead over the server's clock (the meta table's token_lead row) that bounds every token
// handed out, so that tables restored from a backup (pg_restore, a point-in-time recovery)
// start above every token handed out after the backup, at any rate of opens (docs/postgresql.md,
// "What holds", "Tokens after a restore"; the same design as a store directory's,
// rocksdb_storage_tokens.cc).
//
// The bound: every token is handed out no earlier than the server's time plus the lead reaches
// it. The server's clock, not the process's: it is one clock for every host using the store.
// So tokens handed out before time t lie at or below t plus the lead, and an open at t starts
// the sequence above that. A block reserved ahead of that bound waits for it (its first token
// waits up to a millisecond after an open; more when processes reserve at once), up to
// kTokenLeadSlack; a block further ahead (more than 128 processes reserving at once, an import of
// higher tokens) raises the lead instead, in the reservation's own transaction, committed before
// any token of the block is handed out. Opens at any rate leave the lead as it is. A raise is
// the one case a restore does not cover at once: tables restored from a backup taken before it
// hold the lower lead, and start above every token only once the clock has moved past the
// raise (docs/postgresql.md).

#include <fmt/format.h>

#include <bit>
#include <thread>

#include "storage/postgres/pg_storage.h"

namespace idem::storage {

using Micros = std::chrono::microseconds;

Status PgStorage::StartTokens() {
  // A store made by a release before the lead has no lead row: it gets one, with a margin for
  // the tokens its processes reserved ahead of the clock.
  PgStatement note_lead{
      fmt::format("INSERT INTO {} (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
                  names_.meta),
      {PgParam::Text(kPgTokenLeadRow), PgParam::Text(std::to_string(kUnknownLeadMargin))}};
  // Above the server's time plus the lead: above every token handed out before now, even by a
  // process of a store whose tables were since restored from a backup. At most kMaxToken (a lead
  // raised by an import of tokens near the top): the reservations then refuse to pass it.
  const std::string above_the_lead = fmt::format(
      "LEAST((extract(epoch FROM COALESCE($2::timestamptz, clock_timestamp())) * 1000000)::bigint"
      "::numeric + (SELECT value::bigint FROM {} WHERE name = '{}'), {})::bigint",
      names_.meta, kPgTokenLeadRow, kMaxToken);
  std::vector<PgStatement> first;
  first.push_back(std::move(note_lead));
  return RaiseTokenSequence(above_the_lead, NowParam(), std::move(first));
}

Result<uint64_t> PgStorage::NextToken(uint64_t above) {
  util::MutexLock lock(token_mu_);
  // A new block is above every block reserved before it (CACHE 1: the sequence hands out
  // numbers in order), so above every stored token.
  if (next_token_ == block_end_ || next_token_ <= above) IDEM_RETURN_IF_ERROR(ReserveBlock());
  WaitUntilWithinLead(next_token_);
  return next_token_++;
}

Status PgStorage::ReserveBlock() {
  // One round trip: the block, the server's time and the lead, raised in the same transaction
  // when the block starts more than kTokenLeadSlack above the time plus the lead (so that no
  // token of it waits longer than that in WaitUntilWithinLead). A raise applies only over a
  // lower lead, as the row is when the UPDATE locks it: a reservation that waited for another's
  // raise finds the lead high enough, and the lead in force is then at least what its block
  // needs (NULL when the row is missing).
  constexpr uint64_t kLastBlock = (kMaxToken - (kTokenBlock - 1)) / kTokenBlock;
  const std::string reserve = fmt::format(
      "WITH b AS MATERIALIZED (SELECT nextval($2::regclass) AS block, "
      "(extract(epoch FROM {now}) * 1000000)::bigint AS now, "
      "(SELECT value::bigint FROM {meta} WHERE name = '{row}') AS lead), "
      "n AS MATERIALIZED (SELECT block, now, lead, CASE WHEN block <= {last_block} "
      "THEN block::numeric * {block_size} - now - {slack} END AS needed FROM b), "
      "raised AS (UPDATE {meta} m SET value = LEAST(n.needed + {slack}, {max_token})::bigint::text "
      "FROM n WHERE m.name = '{row}' AND m.value::bigint < n.needed "
      "RETURNING m.value::bigint AS lead) "
      "SELECT n.block, n.now, CASE WHEN n.lead IS NOT NULL THEN COALESCE("
      "(SELECT lead FROM raised), LEAST(GREATEST(n.lead, n.needed), {max_token})::bigint) END "
      "FROM n",
      fmt::arg("now", kNow), fmt::arg("meta", names_.meta), fmt::arg("row", kPgTokenLeadRow),
      fmt::arg("last_block", kLastBlock), fmt::arg("block_size", kTokenBlock),
      fmt::arg("slack", kTokenLeadSlack), fmt::arg("max_token", kMaxToken));
  PgTransaction transaction{.resendable = true};
  transaction.statements = {{"SET LOCAL synchronous_commit = on", {}},
                            {fmt::format("SELECT pg_advisory_xact_lock_shared({})", kTokenLockKey),
                             {PgParam::Text(names_.sequence)}},
                            {reserve, {NowParam(), PgParam::Text(names_.sequence)}}};
  IDEM_ASSIGN_OR_RETURN(std::vector<PgRows> rows, pool_.Run(transaction));
  const PgRows& reserved = rows[2];
  IDEM_ASSIGN_OR_RETURN(int64_t block, reserved.Int(0, 0));
  // Every token of the block must fit the int8 column (kMaxToken).
  if (block < 0 || static_cast<uint64_t>(block) > kLastBlock) {
    return Status::IOError(
        fmt::format("the token sequence of {} is at block {}: its tokens would pass {} (2^63-1)",
                    names_.display, block, kMaxToken));
  }
  if (reserved.IsNull(0, 2)) {
    return Status::Corruption(fmt::format(
        "idem store {}: its meta table has no {} row, which bounds its tokens; the next open of "
        "the store puts one back",
        names_.display, kPgTokenLeadRow));
  }
  IDEM_ASSIGN_OR_RETURN(int64_t now, reserved.Int(0, 1));
  IDEM_ASSIGN_OR_RETURN(int64_t lead, reserved.Int(0, 2));
  next_token_ = static_cast<uint64_t>(block) * kTokenBlock;
  block_end_ = next_token_ + kTokenBlock;
  block_bound_ = static_cast<uint64_t>(std::max<int64_t>(now, 0)) + static_cast<uint64_t>(lead);
  block_reserved_at_ = std::chrono::steady_clock::now();
  return Status::OK();
}

void PgStorage::WaitUntilWithinLead(uint64_t token) const {
  // The server's clock has moved at least as far as this process's steady clock since the
  // reservation's answer (which came after the server read its time), give or take their
  // rates' difference: parts per million, which matter only to tokens handed out at over one a
  // microsecond, and those come at once, within microseconds of each other.
  for (;;) {
    const auto passed =
        std::chrono::duration_cast<Micros>(std::chrono::steady_clock::now() - block_reserved_at_);
    const uint64_t bound = block_bound_ + static_cast<uint64_t>(passed.count());
    if (token <= bound) return;
    std::this_thread::sleep_for(Micros(token - bound));
  }
}

void PgStorage::GiveBackToken(uint64_t token) {
  util::MutexLock lock(token_mu_);
  // Only the last token drawn, from the block still in use: no other call has one above it.
  if (next_token_ == token + 1 && block_end_ - kTokenBlock <= token) next_token_ = token;
}

Status PgStorage::ReserveTokensAbove(uint64_t token) {
  IDEM_RETURN_IF_ERROR(CheckWritable());
  // The lead is left to the next reservation, which raises it before handing out a token of the
  // raised sequence.
  IDEM_RETURN_IF_ERROR(RaiseTokenSequence("$2", PgParam::Int8(std::bit_cast<int64_t>(token))));
  // This process's own block may hold tokens at or below `token`: draw a new one next time.
  util::MutexLock lock(token_mu_);
  if (next_token_ <= token) next_token_ = block_end_;
  return Status::OK();
}

Status PgStorage::RaiseTokenSequence(std::string_view token, PgParam param,
                                     std::vector<PgStatement> first) {
  PgTransaction transaction{.resendable = true};  // raising to the same floor twice is harmless
  // Not a synchronous commit, so that an open does not wait for a synchronous standby that is
  // down (the floor moves with the clock, so almost every open raises it). No token is drawn
  // from the raised sequence but by a reservation, a synchronous commit that comes later in the
  // server's log: the log is flushed past the raise before any such token is handed out.
  transaction.statements = {{"SET LOCAL synchronous_commit = off", {}},
                            {fmt::format("SELECT pg_advisory_xact_lock({})", kTokenLockKey),
                             {PgParam::Text(names_.sequence)}}};
  for (PgStatement& statement : first) transaction.statements.push_back(std::move(statement));
  // Every later block b hands out tokens from b * kTokenBlock: above the token once b is above
  // its floor. Only ever up: a sequence whose next value is above the floor already is left as
  // it is (a sequence never called hands out last_value next; one called, last_value + 1).
  transaction.statements.push_back(
      {fmt::format(
           "SELECT setval($1::regclass, raise_to) FROM {}, (SELECT ({}) / {} AS raise_to) r "
           "WHERE last_value < raise_to + CASE WHEN is_called THEN 0 ELSE 1 END",
           names_.sequence, token, kTokenBlock),
       {PgParam::Text(names_.sequence), std::move(param)}});
  return pool_.Run(transaction).status();
}

}  // namespace idem::storage
