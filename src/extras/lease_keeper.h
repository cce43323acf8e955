// LeaseKeeper renews the leases of attempts that Store::Execute is running, so that a slow
// request is not taken over while its process is alive. One process-wide keeper serves every
// store and every attempt: renewals are rare (every lease/3) and usually cheap. Each renewal runs
// on a thread of a small pool, so that one that hangs (a frozen server, a cut network: it lasts
// until the store's request_timeout) holds up neither other attempts' renewals nor the end of
// its own attempt.

#ifndef IDEM_EXTRAS_LEASE_KEEPER_H_
#define IDEM_EXTRAS_LEASE_KEEPER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "idem/store.h"
#include "util/mutex.h"

namespace idem {

// What the lease keeper knows of one attempt's lease: until when it is surely held, and whether
// a renewal found it lost. Written by the keeper's workers, read by the attempt's (Attempt::
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
  // The process-wide keeper; its first worker starts on first use.
  static LeaseKeeper& Instance();

  // Renews (store, key, token) to `lease` every lease/3 while the returned guard lives, and
  // reports each outcome to `status` (which must outlive the guard). A renewal that fails
  // without losing the lease (the owner stalled, failing over, or out of disk) is retried
  // within kRetryFailedRenewal; one that finds the lease lost stops the renewals. At most one
  // renewal of a lease is in flight at a time; the renewals of other leases go on meanwhile.
  class Guard {
   public:
    Guard(LeaseKeeper* keeper, uint64_t id) : keeper_(keeper), id_(id) {}
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
    // Stops the renewals and waits for one still in flight, so `store` may be closed right
    // after. Execute calls Stop first, so that its Complete or Fail does not wait too.
    ~Guard() { keeper_->Remove(id_); }
    // Stops the renewals at once: none starts after this returns, and `status` hears no more.
    // Does not wait for a renewal in flight (which ends by the store's own deadline), so that
    // the attempt's Complete or Fail goes out without waiting for a slow renewal.
    void Stop() { keeper_->Stop(id_); }

   private:
    LeaseKeeper* keeper_;
    uint64_t id_;
  };
  Guard Keep(Store* store, std::string_view key, uint64_t token, std::chrono::milliseconds lease,
             LeaseStatus* status);

  static constexpr std::chrono::milliseconds kRetryFailedRenewal{100};
  // How long a worker beyond the one watching for due leases stays without work before it ends.
  static constexpr std::chrono::seconds kSpareWorkerLife{10};
  // The most workers at once, that is renewals in flight at once.
  static constexpr int kMaxWorkers = 64;

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
    bool renewing = false;  // a renewal is in flight, outside the lock
    bool stopped = false;   // its guard stopped it: erased once its renewal in flight ends
  };

  LeaseKeeper() = default;
  void Stop(uint64_t id);
  void Remove(uint64_t id);
  // A worker's loop: waits for the next lease due that no other worker renews, renews it
  // outside the lock, reports. Returns when the worker is no longer needed.
  void Work();
  // What one renewal of a lease, sent without mu_ held, came to.
  struct Renewal {
    std::chrono::steady_clock::time_point sent;
    Status status;
    bool lost;  // taken over, ended or forgotten: nothing left to renew
    std::chrono::steady_clock::time_point next;  // when the next renewal is due (max: never)
  };
  static Renewal Renew(const Lease& lease);
  void StartWorker() IDEM_REQUIRES(mu_);
  // In a child of fork(), with mu_ held since the fork: releases it.
  void ResetInChild() IDEM_RELEASE(mu_);

  util::Mutex mu_;
  util::CondVar changed_;
  std::map<uint64_t, Lease> leases_ IDEM_GUARDED_BY(mu_);
  uint64_t next_id_ IDEM_GUARDED_BY(mu_) = 1;
  int workers_ IDEM_GUARDED_BY(mu_) = 0;  // threads running Work
  // Of them, those not renewing: one of them watches for the next lease due.
  int waiting_ IDEM_GUARDED_BY(mu_) = 0;
};

}  // namespace idem

#endif  // IDEM_EXTRAS_LEASE_KEEPER_H_
