// LeaseKeeper renews the leases of attempts that Store::Execute is running, so that a slow
// request is not taken over while its process is alive. One thread per process serves every
// store and every attempt: renewals are rare (every lease/3) and cheap.

#ifndef IDEM_EXTRAS_LEASE_KEEPER_H_
#define IDEM_EXTRAS_LEASE_KEEPER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "idem/store.h"

namespace idem {

// What the lease keeper knows of one attempt's lease: until when it is surely held, and whether
// a renewal found it lost. Written by the keeper's thread, read by the attempt's (Attempt::
// LeaseHeld).
class LeaseStatus {
 public:
  using Steady = std::chrono::steady_clock;

  // `held_until`: when the claim was sent plus its lease.
  explicit LeaseStatus(Steady::time_point held_until) { Renewed(held_until); }

  bool Held() const {
    return !lost_.load(std::memory_order_acquire) &&
           Steady::now().time_since_epoch().count() < held_until_.load(std::memory_order_acquire);
  }
  // A renewal sent at t succeeded: the lease is held until t + lease at least.
  void Renewed(Steady::time_point held_until) {
    const Steady::rep until = held_until.time_since_epoch().count();
    Steady::rep seen = held_until_.load(std::memory_order_relaxed);
    while (seen < until && !held_until_.compare_exchange_weak(seen, until)) {
    }
  }
  void Lost() { lost_.store(true, std::memory_order_release); }

 private:
  std::atomic<Steady::rep> held_until_{0};
  std::atomic<bool> lost_{false};
};

class LeaseKeeper {
 public:
  // The process-wide keeper; its thread starts on first use.
  static LeaseKeeper& Instance();

  // Renews (store, key, token) to `lease` every lease/3 while the returned guard lives, and
  // reports each outcome to `status` (which must outlive the guard). A renewal that fails
  // without losing the lease (the owner stalled, failing over, or out of disk) is retried
  // within kRetryFailedRenewal; one that finds the lease lost stops the renewals. The guard's
  // destructor waits for a renewal in flight, so `store` may be closed right after.
  class Guard {
   public:
    Guard(LeaseKeeper* keeper, uint64_t id) : keeper_(keeper), id_(id) {}
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
    ~Guard() { keeper_->Remove(id_); }

   private:
    LeaseKeeper* keeper_;
    uint64_t id_;
  };
  Guard Keep(Store* store, std::string_view key, uint64_t token, std::chrono::milliseconds lease,
             LeaseStatus* status);

  static constexpr std::chrono::milliseconds kRetryFailedRenewal{100};

  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

 private:
  struct Lease {
    Store* store;
    std::string key;
    uint64_t token;
    std::chrono::milliseconds lease;
    std::chrono::steady_clock::time_point next_renewal;
    LeaseStatus* status;
  };

  LeaseKeeper() = default;
  void Remove(uint64_t id);
  void Run();
  void ResetInChild();  // in a child of fork(), with mu_ held since the fork

  std::mutex mu_;
  std::condition_variable changed_;
  // Guarded by mu_.
  std::map<uint64_t, Lease> leases_;
  uint64_t next_id_ = 1;
  uint64_t renewing_ = 0;  // id of the lease being renewed outside the lock, 0 if none
  std::thread thread_;
};

}  // namespace idem

#endif  // IDEM_EXTRAS_LEASE_KEEPER_H_
