// ReservingStore: what Execute (extras/execute.cc) asks of a Store that reserves table keys for
// a claim whose run of fn conflicted (backend/key_reservations.h). Implemented by the library's own
// Store handles; a Store that is not one (an application's wrapper) reserves nothing, and its
// Executes rerun fn optimistically only. Internal: not part of include/idem.

#ifndef IDEM_API_RESERVING_STORE_H_
#define IDEM_API_RESERVING_STORE_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/status.h"

namespace idem {

// An application table's key: its table, then the key.
using TableKey = std::pair<std::string, std::string>;

class ReservingStore {
 public:
  // Reserves `keys` for the claim (claim_key, token), waiting up to `wait` for the grant: true
  // once granted, false when `wait` ended first (asking again keeps the claim's place). The
  // reservation lapses `hold` after its grant.
  virtual Result<bool> ReserveKeys(std::string_view claim_key, uint64_t token,
                                   std::vector<TableKey> keys, std::chrono::milliseconds hold,
                                   std::chrono::milliseconds wait) = 0;
  // Ends the claim's reservation; a Complete that commits, and a Fail, end it too.
  virtual Status UnreserveKeys(std::string_view claim_key, uint64_t token) = 0;

 protected:
  ~ReservingStore() = default;
};

}  // namespace idem

#endif  // IDEM_API_RESERVING_STORE_H_
