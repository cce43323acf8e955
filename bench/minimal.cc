// The smallest program using idem, whose size scripts/bench.sh reports: idem linked in from its
// static library, the rest (RocksDB, the C++ runtime) as the shared libraries a device has.
// `idem_minimal DIR` claims a key, stores its result and replays it.

#include <cstdio>

#include "idem/store.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: idem_minimal DIR\n");
    return 2;
  }
  auto store = idem::Store::Open(argv[1]);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  auto claim = (*store)->Begin("payment-1");
  if (!claim.ok()) return 1;
  if (claim->outcome == idem::Outcome::kAcquired &&
      !(*store)->Complete("payment-1", claim->token, "charged").ok()) {
    return 1;
  }
  auto replay = (*store)->Begin("payment-1");
  if (!replay.ok() || replay->outcome != idem::Outcome::kReplay) return 1;
  std::printf("%s\n", replay->record.result.c_str());
  return 0;
}
