#include "extras/lease_keeper.h"

#include <pthread.h>

#include <algorithm>
#include <new>
#include <system_error>
#include <thread>

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
    // leases it copied belong to the parent's stores). The analysis cannot follow a lock
    // taken in one handler and released in another.
    pthread_atfork([]() IDEM_NO_THREAD_SAFETY_ANALYSIS { Instance().mu_.Lock(); },
                   []() IDEM_NO_THREAD_SAFETY_ANALYSIS { Instance().mu_.Unlock(); },
                   []() IDEM_NO_THREAD_SAFETY_ANALYSIS { Instance().ResetInChild(); });
    return created;
  }();
  return *keeper;
}

void LeaseKeeper::ResetInChild() {
  // The workers are threads of the parent only (detached: nothing to join). The condition
  // variable may still count them among its waiters: a notify in the child would wait for them
  // forever. No thread of the child waits on it, so a fresh one takes its place.
  new (&changed_) util::CondVar();
  leases_.clear();
  workers_ = 0;
  waiting_ = 0;
  mu_.Unlock();
}

void LeaseKeeper::StartWorker() {
  // Past this many renewals hanging at once, the next ones wait for a worker: a thread per
  // attempt would not renew them any sooner from a store that does not answer.
  if (workers_ >= kMaxWorkers) return;
  try {
    std::thread([this] { Work(); }).detach();
  } catch (const std::system_error&) {
    // No thread to spare: the workers there are serve every lease, one renewal at a time.
    if (workers_ == 0) throw;
    return;
  }
  ++workers_;
  ++waiting_;
}

LeaseKeeper::Guard LeaseKeeper::Keep(Store* store, std::string_view key, uint64_t token,
                                     std::chrono::milliseconds lease, LeaseStatus* status) {
  util::MutexLock lock(mu_);
  if (waiting_ == 0) StartWorker();
  const uint64_t id = next_id_++;
  leases_.emplace(id, Lease{store, std::string(key), token, lease,
                            std::chrono::steady_clock::now() + RenewalPeriod(lease), status});
  changed_.NotifyAll();
  return Guard(this, id);
}

void LeaseKeeper::Stop(uint64_t id) {
  util::MutexLock lock(mu_);
  auto it = leases_.find(id);
  if (it == leases_.end()) return;
  if (it->second.renewing) {
    it->second.stopped = true;  // its worker erases it
  } else {
    leases_.erase(it);
  }
}

void LeaseKeeper::Remove(uint64_t id) {
  Stop(id);
  util::MutexLock lock(mu_);
  changed_.Wait(lock, [&]() IDEM_REQUIRES(mu_) { return !leases_.contains(id); });
}

LeaseKeeper::Renewal LeaseKeeper::Renew(const Lease& lease) {
  using Clock = std::chrono::steady_clock;
  // Sent now: if it succeeds, the lease runs at least until now + lease.
  const auto sent = Clock::now();
  const Status renewed = lease.store->Extend(lease.key, lease.token, lease.lease);
  // Counted from when this renewal was sent, not from its answer: a renewal that waited long
  // (a synced write behind a busy disk, an owner slow to answer) must not push the next one
  // later by as much. The owner set the new deadline when it ran the renewal, before the wait
  // for its write: counted from the answer, one slow renewal and one late start after it
  // could outlast the lease. One slower than a period is followed by the next at once.
  auto next = sent + RenewalPeriod(lease.lease);
  const bool lost =
      renewed.code() == Status::Code::kLeaseLost || renewed.code() == Status::Code::kNotFound;
  if (lost) {
    // Taken over, ended or forgotten: nothing left to renew. The attempt's own Complete or
    // Fail reports it.
    next = Clock::time_point::max();
  } else if (!renewed.ok()) {
    // The owner did not answer in time, is failing over, or could not write: the lease may
    // still be held, and the grace after a stall lasts only so long.
    next = std::min(next, Clock::now() + kRetryFailedRenewal);
  }
  return Renewal{.sent = sent, .status = renewed, .lost = lost, .next = next};
}

void LeaseKeeper::Work() {
  using Clock = std::chrono::steady_clock;
  util::MutexLock lock(mu_);
  auto idle_since = Clock::now();
  for (;;) {
    auto due = leases_.end();
    for (auto it = leases_.begin(); it != leases_.end(); ++it) {
      if (it->second.renewing || it->second.stopped) continue;
      if (due == leases_.end() || it->second.next_renewal < due->second.next_renewal) due = it;
    }
    const auto now = Clock::now();
    if (due == leases_.end() || due->second.next_renewal > now) {
      // One waiting worker is enough; a spare one stays a while, for the next renewal that
      // hangs, then ends.
      const bool spare = waiting_ > 1;
      if (spare && now - idle_since >= kSpareWorkerLife) {
        --waiting_;
        --workers_;
        return;
      }
      // Only lost leases left (next_renewal max) wait for their attempts to end.
      auto wake_at = due == leases_.end() ? Clock::time_point::max() : due->second.next_renewal;
      if (spare) wake_at = std::min(wake_at, idle_since + kSpareWorkerLife);
      if (wake_at == Clock::time_point::max()) {
        changed_.Wait(lock);
      } else {
        changed_.WaitUntil(lock, wake_at);
      }
      continue;
    }
    const uint64_t id = due->first;
    due->second.renewing = true;
    const Lease lease = due->second;  // a copy: the map changes while the lock is released
    // Someone must watch the other leases while this renewal runs, however long it takes.
    if (--waiting_ == 0) StartWorker();
    lock.Unlock();
    const Renewal renewal = Renew(lease);
    lock.Lock();
    ++waiting_;
    idle_since = Clock::now();
    auto it = leases_.find(id);  // still there: a lease being renewed is only marked stopped
    it->second.renewing = false;
    if (it->second.stopped) {
      leases_.erase(it);  // its attempt is over: its status may be gone
    } else {
      if (renewal.status.ok()) it->second.status->Renewed(renewal.sent + lease.lease);
      if (renewal.lost) it->second.status->Lost();
      it->second.next_renewal = renewal.next;
    }
    changed_.NotifyAll();
  }
}

}  // namespace idem
