// What each Durability asks of a write, for the layers that carry it (storage, sharing).

#ifndef IDEM_ENGINE_DURABILITY_H_
#define IDEM_ENGINE_DURABILITY_H_

#include "idem/options.h"

namespace idem::engine {

// Whether a write made with `durability` returns only once it is on the disk (kSync). The others
// (kBuffered, kPeriodic) return once it reaches the OS: they may share a batch with other such
// writes and need not wait behind a sync.
constexpr bool SyncedBeforeReturning(Durability durability) {
  return durability == Durability::kSync;
}

}  // namespace idem::engine

#endif  // IDEM_ENGINE_DURABILITY_H_
