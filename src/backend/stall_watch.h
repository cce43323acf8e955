// StallWatch: the owner of a store notices its own stalls, and hands out the renewal graces that
// keep claims for holders that could not renew meanwhile.
//
// While the owner is stopped (SIGSTOP, a debugger, a frozen VM, a long pause), no holder can
// renew its lease through it, and leases run out on the wall clock. When it resumes, the
// requests queued on its socket are served in any order: a waiter's Begin could take over a
// claim whose holder's renewal sits right behind it, and the request would run twice. So, like
// Chubby's grace period after a master failover, a stall (a gap in the watch's ticks on the
// monotonic clock) and the start of an ownership (the previous owner died or stalled, and
// holders renew with the new one only now) each open a grace: claims whose lease ran out in
// the meantime stay in progress for `grace` longer, unless their holder is proven dead.
//
// Thread-safe. One thread per watch ticks every kTick.

#ifndef IDEM_BACKEND_STALL_WATCH_H_
#define IDEM_BACKEND_STALL_WATCH_H_

#include <array>
#include <chrono>
#include <memory>
#include <thread>

#include "engine/state_machine.h"
#include "idem/options.h"
#include "util/mutex.h"

namespace idem::backend {

class StallWatch {
 public:
  // A gap in the ticks longer than this is a stall. Shorter stalls cannot make a lease of 3 s or
  // more run out while its holder renews every third of it (as Execute does).
  static constexpr std::chrono::milliseconds kStallThreshold{1000};
  static constexpr std::chrono::milliseconds kTick{100};

  // `clock`: the store's wall clock, in which leases run. Opens the ownership grace at once: the
  // caller has just become the store's owner. `grace` 0: no grace, no thread.
  StallWatch(std::shared_ptr<const Clock> clock, std::chrono::milliseconds grace);
  ~StallWatch();

  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;

  // The graces in force now, for engine::DecideBegin. Notices a stall that has just ended and
  // that the thread has not ticked after yet, so no request served right after a stall misses
  // its grace.
  std::array<engine::RenewalGrace, 2> Graces();

  // How many stalls were noticed (Counters::stalls); none are watched for when the grace is 0.
  uint64_t stalls();

 private:
  using Steady = std::chrono::steady_clock;

  struct Window {
    engine::RenewalGrace scope;  // which claims; `left` unused
    Steady::time_point until;
  };

  void Run();
  void Tick(Steady::time_point now) IDEM_REQUIRES(mu_);

  // Constant after construction.
  const std::shared_ptr<const Clock> clock_;
  const std::chrono::milliseconds grace_;

  util::Mutex mu_;
  util::CondVar stop_;
  bool stopping_ IDEM_GUARDED_BY(mu_) = false;
  Steady::time_point last_tick_ IDEM_GUARDED_BY(mu_);
  std::chrono::system_clock::time_point last_tick_wall_ IDEM_GUARDED_BY(mu_);
  Window ownership_ IDEM_GUARDED_BY(mu_);
  Window stall_ IDEM_GUARDED_BY(mu_);
  uint64_t stalls_ IDEM_GUARDED_BY(mu_) = 0;

  std::thread thread_;
};

}  // namespace idem::backend

#endif  // IDEM_BACKEND_STALL_WATCH_H_
