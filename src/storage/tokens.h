// The limits and margins of fencing tokens, shared by every storage. Each storage hands tokens
// out and makes them durable its own way (RocksDbStorage: a persisted ceiling and a lock-free
// counter; PgStorage: blocks drawn from a sequence), with the same guarantees: never the same
// token twice, and above every token handed out before, after a restore too (docs/semantics.md
// "Fencing tokens").

#ifndef IDEM_STORAGE_TOKENS_H_
#define IDEM_STORAGE_TOKENS_H_

#include <cstdint>

#include "util/record_fields.h"

namespace idem::storage {

// The largest fencing token a store hands out (docs/format.md): PostgreSQL keeps tokens as int8,
// and the export format reads them as such. A storage whose counter would pass it refuses to
// hand out tokens (kIOError) rather than one that its own export could not import.
inline constexpr uint64_t kMaxToken = (uint64_t{1} << 63) - 1;
static_assert(kMaxToken == util::kLargestToken, "the export and PostgreSQL hold every token");
// Import takes every token up to kMaxToken, so that every store's export imports back (a store
// that took one near the top hands out the rest, then refuses to claim). The start a store
// derives from the clock and its lead stops 2^48 below the top (nine years at a million claims a
// second; the clock alone reaches it in the year 292,000): above it only the persisted ceiling
// counts, so a store's own tokens never make its start pass kMaxToken.
inline constexpr uint64_t kHighestClockStart = kMaxToken - (uint64_t{1} << 48);

// How far ahead of the clock (in microseconds: 71 minutes) tokens start when nothing says how far
// ahead of it they ran before: a copy of a store directory (room for the clock of the host it was
// copied from, and for a lead the original grew after the copy was made), and a PostgreSQL store
// made by a release that kept no lead.
inline constexpr uint64_t kUnknownLeadMargin = uint64_t{1} << 32;

}  // namespace idem::storage

#endif  // IDEM_STORAGE_TOKENS_H_
