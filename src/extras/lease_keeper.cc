#include "extras/lease_keeper.h"

#include <pthread.h>

#include <algorithm>
#include <new>

namespace idem {
namespace {

std::chrono::milliseconds RenewalPeriod(std::chrono::milliseconds lease) {
  return std::max(lease / 3, std::chrono::milliseconds(1));
}

}  // namespace

LeaseKeeper& LeaseKeeper::Instance() {
  // Never destroyed: its thread may still be renewing while the process exits.
  static LeaseKeeper* const keeper = [] {
    auto* created = new LeaseKeeper();
    // A child of fork() gets a copy of the keeper without its thread, and possibly with mu_
    // held by it: hold mu_ across the fork, then give the child a fresh, empty keeper (the
    // leases it copied belong to the parent's stores).
    pthread_atfork([] { Instance().mu_.lock(); }, [] { Instance().mu_.unlock(); },
                   [] { Instance().ResetInChild(); });
    return created;
  }();
  return *keeper;
}

void LeaseKeeper::ResetInChild() {
  // The thread object names a thread that exists only in the parent: neither join it nor let
  // it be destroyed joinable.
  if (thread_.joinable()) new std::thread(std::move(thread_));
  // The condition variable may still count the parent's thread among its waiters (it waits
  // there between renewals): a notify in the child would wait for that thread forever. No
  // thread of the child waits on it, so a fresh one takes its place.
  new (&changed_) std::condition_variable();
  leases_.clear();
  renewing_ = 0;
  mu_.unlock();
}

LeaseKeeper::Guard LeaseKeeper::Keep(Store* store, std::string_view key, uint64_t token,
                                     std::chrono::milliseconds lease, LeaseStatus* status) {
  std::lock_guard lock(mu_);
  if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
  const uint64_t id = next_id_++;
  leases_.emplace(id, Lease{store, std::string(key), token, lease,
                            std::chrono::steady_clock::now() + RenewalPeriod(lease), status});
  changed_.notify_all();
  return Guard(this, id);
}

void LeaseKeeper::Remove(uint64_t id) {
  std::unique_lock lock(mu_);
  changed_.wait(lock, [&] { return renewing_ != id; });
  leases_.erase(id);
}

void LeaseKeeper::Run() {
  std::unique_lock lock(mu_);
  for (;;) {
    if (leases_.empty()) {
      changed_.wait(lock);
      continue;
    }
    auto due = std::min_element(leases_.begin(), leases_.end(), [](const auto& a, const auto& b) {
      return a.second.next_renewal < b.second.next_renewal;
    });
    const auto now = std::chrono::steady_clock::now();
    if (due->second.next_renewal > now) {
      // A copy: the lease may be removed while this thread waits.
      const auto wake_at = due->second.next_renewal;
      if (wake_at == std::chrono::steady_clock::time_point::max()) {
        changed_.wait(lock);  // only lost leases left: they wait for their attempts to end
      } else {
        changed_.wait_until(lock, wake_at);
      }
      continue;
    }
    const uint64_t id = due->first;
    Lease lease = due->second;
    renewing_ = id;
    lock.unlock();
    // Sent now: if it succeeds, the lease runs at least until now + lease.
    const auto sent = std::chrono::steady_clock::now();
    const Status renewed = lease.store->Extend(lease.key, lease.token, lease.lease);
    // Counted from when this renewal was sent, not from its answer: a renewal that waited long
    // (a synced write behind a busy disk, an owner slow to answer) must not push the next one
    // later by as much. The owner set the new deadline when it ran the renewal, before the wait
    // for its write: counted from the answer, one slow renewal and one late start after it
    // could outlast the lease. One slower than a period is followed by the next at once.
    auto next = sent + RenewalPeriod(lease.lease);
    if (renewed.ok()) {
      lease.status->Renewed(sent + lease.lease);
    } else if (renewed.code() == Status::Code::kLeaseLost ||
               renewed.code() == Status::Code::kNotFound) {
      // Taken over, ended or forgotten: nothing left to renew. The attempt's own Complete or
      // Fail reports it.
      lease.status->Lost();
      next = std::chrono::steady_clock::time_point::max();
    } else {
      // The owner did not answer in time, is failing over, or could not write: the lease may
      // still be held, and the grace after a stall lasts only so long.
      next = std::min(next, std::chrono::steady_clock::now() + kRetryFailedRenewal);
    }
    lock.lock();
    if (auto it = leases_.find(id); it != leases_.end()) it->second.next_renewal = next;
    renewing_ = 0;
    changed_.notify_all();
  }
}

}  // namespace idem
