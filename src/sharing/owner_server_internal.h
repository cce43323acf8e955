// What the parts of the owner's server share (owner_server.cc: threads and timeouts;
// owner_server_admission.cc: taking connections; owner_server_requests.cc: reading a request,
// running it, sending its answer). Included only by them.

#ifndef IDEM_SHARING_OWNER_SERVER_INTERNAL_H_
#define IDEM_SHARING_OWNER_SERVER_INTERNAL_H_

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sharing/owner_server.h"

namespace idem::sharing {

// epoll keys: the three fixed descriptors, then connection ids.
inline constexpr uint64_t kListenKey = 1;
inline constexpr uint64_t kStopKey = 2;
inline constexpr uint64_t kTimerKey = 3;
inline constexpr uint64_t kFirstConnectionId = 16;

// Adds `fd` to the epoll set (or changes it, by `op`), to report `events` under `key`.
Status EpollControl(int epoll_fd, int op, int fd, uint32_t events, uint64_t key);

// The read views a connection opened (Backend::OpenView), ended with it: a client that dies, or
// leaves its connection idle past idle_timeout, pins no snapshot after that.
class ConnectionViews {
 public:
  explicit ConnectionViews(engine::Backend& backend) : backend_(backend) {}
  ConnectionViews(const ConnectionViews&) = delete;
  ConnectionViews& operator=(const ConnectionViews&) = delete;
  ~ConnectionViews() {
    for (const uint64_t view : views_) static_cast<void>(backend_.CloseView(view));
  }
  void Add(uint64_t view) { views_.push_back(view); }
  void Remove(uint64_t view) { std::erase(views_, view); }

 private:
  engine::Backend& backend_;
  std::vector<uint64_t> views_;
};

// The claims whose key reservations a connection asked for (Backend::Reserve), ended with it: a
// client killed while it holds keys keeps nobody waiting after that.
class ConnectionReservations {
 public:
  explicit ConnectionReservations(engine::Backend& backend) : backend_(backend) {}
  ConnectionReservations(const ConnectionReservations&) = delete;
  ConnectionReservations& operator=(const ConnectionReservations&) = delete;
  ~ConnectionReservations() {
    for (const auto& [key, token] : claims_) static_cast<void>(backend_.Unreserve(key, token));
  }
  void Add(std::string_view key, uint64_t token) {
    if (Has(key, token)) return;
    // A claim whose Complete went on another of the client's connections (a pipelined one) is
    // never removed here: only the latest are kept, which is enough, since a reservation lapses
    // with its hold anyway; this only ends it sooner.
    if (claims_.size() >= kTracked) claims_.erase(claims_.begin());
    claims_.emplace_back(std::string(key), token);
  }
  // After the claim's Unreserve, or a Complete or Fail that ended its reservation.
  void Remove(std::string_view key, uint64_t token) {
    std::erase_if(claims_,
                  [&](const auto& claim) { return claim.second == token && claim.first == key; });
  }

 private:
  bool Has(std::string_view key, uint64_t token) const {
    return std::any_of(claims_.begin(), claims_.end(), [&](const auto& claim) {
      return claim.second == token && claim.first == key;
    });
  }

  static constexpr std::size_t kTracked = 64;

  engine::Backend& backend_;
  std::vector<std::pair<std::string, uint64_t>> claims_;
};

struct OwnerServer::Connection {
  Connection(uint64_t id, int fd, pid_t pid, Holder holder, engine::Backend& backend)
      : id(id),
        fd(fd),
        pid(pid),
        holder(std::move(holder)),
        views(backend),
        reservations(backend) {}

  // Constant after construction.
  const uint64_t id;
  const FileDescriptor fd;  // closed with the last reference
  const pid_t pid;
  const Holder holder;  // the peer as a holder of claims, named by the kernel

  // Guarded by OwnerServer::mu_. While busy, one thread has the connection (it is not armed in the
  // epoll set); the others, and Sweep, leave it alone.
  bool busy = false;
  Phase phase = Phase::kIdle;
  OwnerServer::Clock::time_point since;  // when the phase began

  // Used only by the thread that has the connection; handed over through OwnerServer::mu_.
  // Whether the client's requests came soon after the answers before them (a Complete right
  // after its Begin): the thread that answered then waits for the next one spinning (Serve).
  bool follows_quickly = true;
  std::string in;
  std::string out;
  std::size_t out_done = 0;
  ConnectionViews views;
  ConnectionReservations reservations;
};

// What a running job has reported, written by its thread and read by the polls.
class OwnerServer::JobProgress {
 public:
  std::atomic<uint64_t> count{0};  // records purged so far; 0 for a backup
  // The total a purge expects to visit, counted when its client asked for it.
  void SetTotal(uint64_t total) {
    total_.store(total);
    has_total_.store(true);  // after total_: a poll that sees it reads the total
  }
  // What a poll answers while the job runs, and once it has ended with `result`.
  PurgeProgress Running() const { return {.count = count.load(), .done = false, .total = Total()}; }
  PurgeProgress Finished(uint64_t result) const {
    return {.count = result, .done = true, .total = Total()};
  }

 private:
  std::optional<uint64_t> Total() const {
    return has_total_.load() ? std::optional<uint64_t>(total_.load()) : std::nullopt;
  }

  std::atomic<uint64_t> total_{0};
  std::atomic<bool> has_total_{false};
};

// A request that may outlast a request deadline (a purge, a backup), run on a thread of its own
// and polled by its client with the same ticket.
struct OwnerServer::Job {
  JobProgress progress;
  std::thread thread;
  // Guarded by OwnerServer::job_mu_.
  std::optional<Result<uint64_t>> result;  // set when the job is over
  OwnerServer::Clock::time_point finished;
};

// Empties a connection's buffer, giving back its memory when a large request or answer grew
// it: a thousand idle connections must not each keep megabytes.
inline void ReleaseLarge(std::string& buffer) {
  constexpr std::size_t kKeptCapacity = 64 << 10;
  if (buffer.capacity() > kKeptCapacity) {
    std::string().swap(buffer);
  } else {
    buffer.clear();
  }
}

}  // namespace idem::sharing

#endif  // IDEM_SHARING_OWNER_SERVER_INTERNAL_H_
