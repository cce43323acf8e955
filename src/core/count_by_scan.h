// Counting a store's live records by reading every one (Store::GetStats where nobody keeps their
// counts: a store in PostgreSQL, a reader of the files, an owner still counting at start-up).

#ifndef IDEM_CORE_COUNT_BY_SCAN_H_
#define IDEM_CORE_COUNT_BY_SCAN_H_

#include <chrono>

#include "idem/store.h"

namespace idem::core {

// Sets stats' records, by_state, by_type and oldest_pending from a Scan of `store`, and `at` to
// `now` (the scan judges each record as it reads it); precision 0 (exact).
Status CountByScan(Store& store, std::chrono::system_clock::time_point now, StoreStats& stats);

}  // namespace idem::core

#endif  // IDEM_CORE_COUNT_BY_SCAN_H_
