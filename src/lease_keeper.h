// LeaseKeeper renews the leases of attempts that Store::Execute is running, so that a slow
// request is not taken over while its process is alive. One thread per process serves every
// store and every attempt: renewals are rare (every lease/3) and cheap.

#ifndef IDEM_LEASE_KEEPER_H_
#define IDEM_LEASE_KEEPER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "idem/store.h"

namespace idem {

class LeaseKeeper {
 public:
  // The process-wide keeper; its thread starts on first use.
  static LeaseKeeper& Instance();

  // Renews (store, key, token) to `lease` every lease/3 while the returned guard lives. The
  // guard's destructor waits for a renewal in flight, so `store` may be closed right after.
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
  Guard Keep(Store* store, std::string_view key, uint64_t token, std::chrono::milliseconds lease);

  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

 private:
  struct Lease {
    Store* store;
    std::string key;
    uint64_t token;
    std::chrono::milliseconds lease;
    std::chrono::steady_clock::time_point next_renewal;
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

#endif  // IDEM_LEASE_KEEPER_H_
