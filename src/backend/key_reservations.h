// KeyReservations: Execute's fallback after a conflict, kept by the process that commits (the
// owner of a store directory; each process on PostgreSQL, for its own threads). An Execute whose
// run of fn conflicted reserves the table keys that run touched before it runs fn again, so that
// no other commit changes them between its reads and its commit; a commit that writes a key
// reserved for another claim is refused with kConflict at once (its Execute then queues too).
//
// Reservations are granted in arrival order, all of a request's keys at once: a request is
// granted when none of its keys is reserved and no earlier waiting request wants any of them. So
// a wide transaction is not starved by a stream of narrow ones, and nobody waits for a key while
// holding another (no deadlock). Without this, an Execute whose read-to-commit window is long (a
// client's round trips to the owner, a transaction over 40 keys) loses nearly every race to the
// short ones (docs/semantics.md, "Conflicts and fairness").
//
// A reservation ends with its claim's Complete or Fail, with Release, with the connection it was
// asked on (sharing/server), and at the latest `hold` after its grant: a holder that hung or died
// unseen keeps nobody waiting longer than that. Thread-safe.

#ifndef IDEM_BACKEND_KEY_RESERVATIONS_H_
#define IDEM_BACKEND_KEY_RESERVATIONS_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <set>
#include <string>
#include <string_view>

#include "engine/backend.h"
#include "util/mutex.h"

namespace idem::backend {

class KeyReservations {
 public:
  // Queues the reservation of call.keys for the claim (call.claim_key, call.token), or finds it
  // queued (a poll, or a resent call), and waits up to call.wait for its grant. True once
  // granted. A claim that asks again for keys it does not hold gives up its place and queues
  // anew for all of them (so that it never waits while holding some).
  bool Reserve(const engine::ReserveCall& call);
  // Ends the claim's reservation, granted or waiting; nothing when it has none.
  void Release(std::string_view claim_key, uint64_t token);
  // kConflict naming the first key `writes` writes that is reserved for a claim other than
  // (claim_key, token). Keys it only requires are not refused: a commit that does not change a
  // key cannot make the holder's run conflict.
  Status CheckCommit(std::string_view claim_key, uint64_t token, const WriteSet& writes);

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    std::string claim_key;
    uint64_t token = 0;
    std::set<TableKey> keys;
    std::chrono::milliseconds hold{0};
    bool granted = false;
    // A waiting entry lapses `hold` after its last poll, a granted one `hold` after its grant.
    Clock::time_point lapses;
  };

  // Drops lapsed entries, then grants in arrival order what can be granted.
  void GrantLocked(Clock::time_point now) IDEM_REQUIRES(mu_);
  std::list<Entry>::iterator FindLocked(std::string_view claim_key, uint64_t token)
      IDEM_REQUIRES(mu_);

  util::Mutex mu_;
  util::CondVar changed_;
  std::list<Entry> queue_ IDEM_GUARDED_BY(mu_);  // arrival order, granted and waiting
  // queue_.size(), read without mu_ so that the commits of a store where nothing is reserved
  // (the usual case) do not take it.
  std::atomic<std::size_t> entries_{0};
};

}  // namespace idem::backend

#endif  // IDEM_BACKEND_KEY_RESERVATIONS_H_
