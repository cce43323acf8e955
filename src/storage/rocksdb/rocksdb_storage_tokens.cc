// The fencing tokens of a store directory: a counter whose ceiling is persisted a block ahead, so
// that no token is handed out twice across crashes and restarts, and a lead over the clock that
// bounds every token handed out, so that a copy of the files (a backup restored, a store copied
// elsewhere or rolled back) starts above every token the original handed out after the copy was
// made (docs/format.md, "Fencing tokens").

#include <fmt/format.h>
#include <rocksdb/db.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "storage/rocksdb/fs/rocksdb_status.h"
#include "storage/rocksdb/layout.h"
#include "storage/rocksdb/rocksdb_storage.h"
#include "util/check.h"
#include "util/coding.h"
#include "util/escape.h"
#include "util/time.h"

namespace idem::storage {
namespace {

using engine::TimePoint;
using util::PutFixed64;

// x + y, or `top` when that would pass it.
uint64_t AddUpTo(uint64_t x, uint64_t y, uint64_t top) {
  return x >= top || y > top - x ? top : x + y;
}

uint64_t MicrosOf(TimePoint now) {
  return static_cast<uint64_t>(std::max<int64_t>(util::ToMicros(now), 1));
}

}  // namespace

Status RocksDbStorage::ReserveTokens(TimePoint now) {
  IDEM_ASSIGN_OR_RETURN(const std::optional<uint64_t> ceiling,
                        ReadMeta(kTokenCeilingKey, 8, "token ceiling"));
  IDEM_ASSIGN_OR_RETURN(const std::optional<uint64_t> lead,
                        ReadMeta(kTokenLeadKey, 8, "token lead"));
  IDEM_ASSIGN_OR_RETURN(const std::optional<uint64_t> home_device,
                        ReadMeta(kHomeDeviceKey, 8, "home device"));
  IDEM_ASSIGN_OR_RETURN(const std::optional<uint64_t> home_inode,
                        ReadMeta(kHomeInodeKey, 8, "home inode"));
  struct stat directory {};
  if (::stat(path_.c_str(), &directory) != 0) {
    return Status::IOError(
        fmt::format("cannot stat store {}: {}", EscapeControls(path_), std::strerror(errno)));
  }
  const uint64_t device = static_cast<uint64_t>(directory.st_dev);
  const uint64_t inode = static_cast<uint64_t>(directory.st_ino);
  // Files first opened here, or opened where they were last opened: the same files, carried on.
  // Otherwise a copy (a restored backup, a copied or moved-across-disks directory; a store of a
  // release before the lead, whose tokens ran ahead of the clock without bound, counts as one).
  const bool new_store = !ceiling.has_value();
  const bool copy = !new_store && (home_device != device || home_inode != inode || !lead);
  token_lead_ = lead.value_or(0);
  // Every token handed out so far lies below the ceiling (persisted before it was handed out),
  // and at or below the clock at its time plus the lead (NextToken): so below now + lead, when
  // the clock never went back. The ceiling alone covers a clock that went back; the clock
  // covers files that went back (a backup restored in place, a file-system snapshot rolled
  // back), whose ceiling is below the tokens handed out after the copy was made. A copy takes a
  // margin more, for the clock of another host and for a lead the original grew after the copy.
  // Both sums stop at kHighestClockStart, which leaves 2^48 tokens: a store whose lead is that
  // large took imported tokens that high, and keeps the ceiling's promise only.
  const uint64_t micros = MicrosOf(now);
  const uint64_t above_clock =
      AddUpTo(micros, AddUpTo(token_lead_, copy ? kUnknownLeadMargin : 0, kHighestClockStart) + 1,
              kHighestClockStart);
  const uint64_t start = std::max(ceiling.value_or(1), above_clock);
  next_token_ = start;
  // The lead is left as it is: on a clock that moves, the first token is handed out at least a
  // microsecond after `now`, within the lead, and so are the next ones at fewer than one a
  // microsecond (so an open adds nothing to the lead, and a restore right after many opens still
  // starts above them). Tokens that come faster (or a clock that does not move: a test's) raise
  // it in NextToken, a block at a time.
  util::MutexLock lock(token_mu_);
  return PersistTokens(start + std::min(kFirstTokenBlock, token_block_), token_lead_.load(), device,
                       inode);
}

Status RocksDbStorage::PersistTokens(uint64_t ceiling, uint64_t lead,
                                     std::optional<uint64_t> device,
                                     std::optional<uint64_t> inode) {
  std::string encoded;
  rocksdb::WriteBatch batch;
  const auto put = [&](const char* key, uint64_t value) {
    encoded.clear();
    PutFixed64(encoded, value);
    return FromRocksDb(batch.Put(meta_, key, encoded), "saving the token ceiling");
  };
  IDEM_RETURN_IF_ERROR(put(kTokenCeilingKey, ceiling));
  IDEM_RETURN_IF_ERROR(put(kTokenLeadKey, lead));
  if (device) IDEM_RETURN_IF_ERROR(put(kHomeDeviceKey, *device));
  if (inode) IDEM_RETURN_IF_ERROR(put(kHomeInodeKey, *inode));
  IDEM_RETURN_IF_ERROR(Write(Durability::kSync, &batch, "saving the token ceiling"));
  token_ceiling_.store(ceiling);
  token_lead_.store(lead);
  return Status::OK();
}

Result<uint64_t> RocksDbStorage::NextToken(TimePoint now) {
  const uint64_t token = next_token_.fetch_add(1);
  if (token > kMaxToken) {
    return Status::IOError(
        fmt::format("store {} has no token left: every token up to {} (2^63-1), the largest, was "
                    "handed out or imported; it cannot claim again",
                    path_, kMaxToken));
  }
  // Persisted before the token is handed out: a restart starts above the ceiling, and a copy of
  // the files above the clock plus the lead. Tokens come faster than one a microsecond only in
  // bursts, after an import of higher tokens, or when the clock went back: the lead then grows,
  // a block at a time.
  const uint64_t micros = MicrosOf(now);
  const uint64_t lead_needed = token > micros ? token - micros : 0;
  if (token >= token_ceiling_.load() || lead_needed > token_lead_.load()) {
    util::MutexLock lock(token_mu_);
    uint64_t ceiling = token_ceiling_.load();
    uint64_t lead = token_lead_.load();
    if (token >= ceiling) ceiling = token + token_block_;
    if (lead_needed > lead) lead = lead_needed + token_block_;
    if (ceiling != token_ceiling_.load() || lead != token_lead_.load()) {
      IDEM_RETURN_IF_ERROR(PersistTokens(ceiling, lead, std::nullopt, std::nullopt));
    }
  }
  // What a restart and a copy of the files rely on: the token is below the persisted ceiling
  // and within the persisted lead of the clock (both only ever rise).
  IDEM_DCHECK(token < token_ceiling_.load() && token <= micros + token_lead_.load());
  return token;
}

Status RocksDbStorage::ReserveTokensAbove(uint64_t token) {
  // The counter and its ceiling reach at most kMaxToken + the block: they never wrap.
  if (token > kMaxToken) {
    return Status::InvalidArgument(fmt::format(
        "token {} is too large; a store takes tokens up to {} (2^63-1)", token, kMaxToken));
  }
  util::MutexLock lock(token_mu_);
  // The ceiling first: a restart starts at it, so once it is above `token`, no token up to
  // `token` is ever handed out again, even if this process dies before the records are written.
  if (token_ceiling_.load() <= token) {
    IDEM_RETURN_IF_ERROR(
        PersistTokens(token + 1 + token_block_, token_lead_.load(), std::nullopt, std::nullopt));
  }
  uint64_t next = next_token_.load();
  while (next <= token && !next_token_.compare_exchange_weak(next, token + 1)) {
  }
  IDEM_DCHECK(next_token_.load() > token && token_ceiling_.load() > token);
  return Status::OK();
}

}  // namespace idem::storage
