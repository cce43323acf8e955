#include "sharing/owner_server.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "sharing/owner_server_internal.h"

namespace idem::sharing {
namespace {

using std::chrono::milliseconds;

// How long a finished job (a purge, a backup) waits for its client to ask for the result.
constexpr std::chrono::seconds kJobResultKept{60};
// How many threads serve requests before any is found busy.
constexpr std::size_t kInitialThreads = 2;
// How many times in a row a thread serves requests that were already there when it finished
// with a connection's last ones, before it hands the connection back to the epoll set (the
// other connections are served by the other threads meanwhile).
constexpr int kServedInARow = 8;

}  // namespace

Status EpollControl(int epoll_fd, int op, int fd, uint32_t events, uint64_t key) {
  epoll_event event{};
  event.events = events;
  event.data.u64 = key;
  if (::epoll_ctl(epoll_fd, op, fd, &event) != 0) {
    return Status::IOError(fmt::format("epoll_ctl: {}", std::strerror(errno)));
  }
  return Status::OK();
}

OwnerServer::OwnerServer(engine::Backend& backend, OwnerServerOptions options)
    : backend_(backend),
      options_(std::move(options)),
      log_(options_.log),
      next_id_(kFirstConnectionId) {}

Result<std::unique_ptr<OwnerServer>> OwnerServer::Start(const SocketAddress& address,
                                                        engine::Backend& backend,
                                                        OwnerServerOptions options) {
  std::unique_ptr<OwnerServer> server(new OwnerServer(backend, std::move(options)));
  rlimit files{};
  const std::size_t descriptor_share =
      ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY
          ? static_cast<std::size_t>(files.rlim_cur / 2)
          : server->options_.max_connections;
  server->max_connections_ =
      std::max<std::size_t>(1, std::min(server->options_.max_connections, descriptor_share));

  server->epoll_fd_ = FileDescriptor(::epoll_create1(EPOLL_CLOEXEC));
  server->stop_fd_ = FileDescriptor(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  server->timer_fd_ = FileDescriptor(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  if (server->epoll_fd_.get() < 0 || server->stop_fd_.get() < 0 || server->timer_fd_.get() < 0) {
    return Status::IOError(
        fmt::format("cannot set up the store's socket server: {}", std::strerror(errno)));
  }
  IDEM_ASSIGN_OR_RETURN(server->listener_, Listen(address));
  const int listen_fd = server->listener_.fd.get();
  if (!server->listener_.not_in_store.empty()) {
    const std::string message =
        fmt::format("the store's socket cannot be in its directory ({}): serving at {}",
                    server->listener_.not_in_store, server->listener_.place.shown);
    server->options_.log({LogSeverity::kInfo, "socket_elsewhere", message});
  }
  const int flags = ::fcntl(listen_fd, F_GETFL);
  if (flags < 0 || ::fcntl(listen_fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return Status::IOError(
        fmt::format("cannot make the store socket non-blocking: {}", std::strerror(errno)));
  }
  const int epoll_fd = server->epoll_fd_.get();
  IDEM_RETURN_IF_ERROR(
      EpollControl(epoll_fd, EPOLL_CTL_ADD, listen_fd, EPOLLIN | EPOLLONESHOT, kListenKey));
  // Not one-shot: every thread must see it.
  IDEM_RETURN_IF_ERROR(
      EpollControl(epoll_fd, EPOLL_CTL_ADD, server->stop_fd_.get(), EPOLLIN, kStopKey));
  IDEM_RETURN_IF_ERROR(EpollControl(epoll_fd, EPOLL_CTL_ADD, server->timer_fd_.get(),
                                    EPOLLIN | EPOLLONESHOT, kTimerKey));
  util::MutexLock lock(server->mu_);
  server->spare_fd_ = FileDescriptor(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  for (std::size_t i = 0; i < std::min(kInitialThreads, server->options_.max_threads); ++i) {
    server->threads_.emplace_back([s = server.get()] { s->RunThread(); });
  }
  return server;
}

OwnerServer::~OwnerServer() {
  std::vector<std::thread> threads;
  {
    util::MutexLock lock(mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  const uint64_t one = 1;
  // Wakes every thread's epoll_wait (the eventfd stays readable). It cannot fail: the counter
  // is far from its limit, and a destructor could do nothing about it anyway.
  [[maybe_unused]] const ssize_t woken = ::write(stop_fd_.get(), &one, sizeof one);
  // A thread running a request finishes it (its client gets the answer) before it stops.
  for (std::thread& thread : threads) thread.join();
  std::map<uint64_t, std::shared_ptr<Job>> jobs;
  {
    util::MutexLock lock(job_mu_);
    jobs.swap(jobs_);
  }
  for (auto& [ticket, job] : jobs) {
    if (job->thread.joinable()) job->thread.join();
  }
  // Closing the connections tells their clients that this owner is gone.
  util::MutexLock lock(mu_);
  connections_.clear();
  RemoveRuntimeSocket(listener_);
}

void OwnerServer::RunThread() {
  for (;;) {
    epoll_event event{};
    waiting_threads_.fetch_add(1);
    // One event at a time: the others stay for the threads still waiting.
    const int ready = ::epoll_wait(epoll_fd_.get(), &event, 1, -1);
    waiting_threads_.fetch_sub(1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      log_.Log(LogSeverity::kError, "socket_thread_stopped",
               fmt::format("the store's socket server stopped a thread: epoll_wait: {}",
                           std::strerror(errno)));
      return;
    }
    if (ready == 0) continue;
    switch (event.data.u64) {
      case kStopKey:
        return;
      case kListenKey:
        AcceptAll();
        break;
      case kTimerKey:
        Sweep();
        break;
      default:
        Serve(event.data.u64, event.events);
    }
  }
}

void OwnerServer::AddThreadIfAllBusy() {
  if (waiting_threads_.load() > 0) return;
  util::MutexLock lock(mu_);
  if (stopping_ || threads_.size() >= options_.max_threads) return;
  threads_.emplace_back([this] { RunThread(); });
}

void OwnerServer::Say(int fd, ResponseKind kind, const Status& why) {
  // Best effort, without waiting: a peer that does not read it learns from the close alone.
  const std::string frame = EncodeFrame(EncodeClosing(kind, why));
  static_cast<void>(::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT));
}

void OwnerServer::ArmTimer(bool on) {
  if (on == timer_armed_) return;
  const milliseconds period =
      std::clamp(std::min(options_.idle_timeout, options_.frame_timeout) / 4, milliseconds(10),
                 milliseconds(1000));
  itimerspec spec{};
  if (on) {
    spec.it_value.tv_sec = period.count() / 1000;
    spec.it_value.tv_nsec = (period.count() % 1000) * 1'000'000;
    spec.it_interval = spec.it_value;
  }
  if (::timerfd_settime(timer_fd_.get(), 0, &spec, nullptr) == 0) timer_armed_ = on;
}

void OwnerServer::Sweep() {
  uint64_t expirations = 0;
  // Resets the timer's count. EAGAIN (another thread's sweep read it first) changes nothing.
  [[maybe_unused]] const ssize_t reset = ::read(timer_fd_.get(), &expirations, sizeof expirations);
  const auto now = Clock::now();
  std::vector<std::shared_ptr<Connection>> idle, stalled;
  {
    util::MutexLock lock(mu_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      const Connection& connection = *it->second;
      const auto age = now - connection.since;
      if (!connection.busy && connection.phase == Phase::kIdle && age >= options_.idle_timeout) {
        idle.push_back(it->second);
      } else if (!connection.busy && connection.phase != Phase::kIdle &&
                 age >= options_.frame_timeout) {
        stalled.push_back(it->second);
      } else {
        ++it;
        continue;
      }
      it = connections_.erase(it);
    }
    if (connections_.empty()) ArmTimer(false);
    static_cast<void>(EpollControl(epoll_fd_.get(), EPOLL_CTL_MOD, timer_fd_.get(),
                                   EPOLLIN | EPOLLONESHOT, kTimerKey));
  }
  for (const auto& connection : idle) {
    Say(connection->fd.get(), ResponseKind::kGoodbye,
        Status::Unavailable(fmt::format("the store's owner closed this connection after {} ms idle",
                                        options_.idle_timeout.count())));
  }
  for (const auto& connection : stalled) {
    log_.Log(
        LogSeverity::kWarning, "client_stalled",
        fmt::format("dropped the connection of pid {}: {} for {} ms", connection->pid,
                    connection->phase == Phase::kReading ? "it stalled in the middle of a request"
                                                         : "it did not read its answer",
                    options_.frame_timeout.count()));
  }

  // Results of jobs that their clients never came back for.
  std::vector<std::shared_ptr<Job>> finished;
  {
    util::MutexLock lock(job_mu_);
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (it->second->result && now - it->second->finished >= kJobResultKept) {
        finished.push_back(std::move(it->second));
        it = jobs_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const auto& job : finished) job->thread.join();
}

void OwnerServer::Serve(uint64_t id, uint32_t events) {
  std::shared_ptr<Connection> connection;
  {
    util::MutexLock lock(mu_);
    auto it = connections_.find(id);
    // Gone: closed by Sweep or displaced after the event was queued.
    if (it == connections_.end() || it->second->busy) return;
    connection = it->second;
    connection->busy = true;
    serving_.fetch_add(1, std::memory_order_relaxed);
    // The time since the last answer includes this thread's wake-up, tens of microseconds.
    if (connection->phase == Phase::kIdle) {
      connection->follows_quickly = Clock::now() - connection->since < 4 * kSpinBudget;
    }
  }
  std::optional<Phase> next = connection->phase == Phase::kWriting
                                  ? SendAnswer(*connection)
                                  : ServeRequest(*connection, events);
  // A client whose next request comes right after its answer gets it served by this thread,
  // which polls for it a moment instead of arming the connection and sleeping: the request
  // then costs no thread a wake-up on either side (the client spins for its answer too). Only
  // while no other connection is being served: then the cores have work and wake-ups are cheap.
  // Otherwise requests that are there already (a client pipelining its threads' calls, which
  // sent more while this thread ran the last ones) are served by this thread at once, up to
  // kServedInARow times: arming the connection would wake another thread for them
  // (docs/design/speed.md, increment 9).
  const auto alone = [this] { return serving_.load(std::memory_order_relaxed) == 1; };
  for (int served = 0; next == Phase::kIdle; ++served) {
    short ready = 0;
    if (connection->follows_quickly && alone()) {
      ready = SpinUntilReady(connection->fd.get(), POLLIN | POLLRDHUP, kSpinBudget, alone);
      connection->follows_quickly = ready != 0;
    } else if (served < kServedInARow) {
      pollfd there{connection->fd.get(), POLLIN | POLLRDHUP, 0};
      if (::poll(&there, 1, 0) > 0) ready = there.revents;
    }
    if (ready == 0) break;
    uint32_t arrived = EPOLLIN;
    if ((ready & POLLRDHUP) != 0) arrived |= EPOLLRDHUP;
    if ((ready & POLLHUP) != 0) arrived |= EPOLLHUP;
    next = ServeRequest(*connection, arrived);
  }
  Release(connection, next);
}

void OwnerServer::Release(const std::shared_ptr<Connection>& connection,
                          std::optional<Phase> phase) {
  serving_.fetch_sub(1, std::memory_order_relaxed);
  {
    util::MutexLock lock(mu_);
    connection->busy = false;
    if (!phase) {
      connections_.erase(connection->id);  // the descriptor closes with the last reference
      return;
    }
    if (*phase != connection->phase || *phase == Phase::kIdle) {
      connection->since = Clock::now();
      connection->phase = *phase;
    }
    if (stopping_) return;  // the destructor closes it
  }
  // Armed after the lock is released: the next request may be there already, and the thread
  // it wakes takes the lock at once. Sweep may close the connection meanwhile; its descriptor
  // stays open (and its number unused) while `connection` holds it, and an event for an id no
  // longer served is ignored.
  const uint32_t wanted = *phase == Phase::kWriting ? EPOLLOUT : EPOLLIN | EPOLLRDHUP;
  if (!EpollControl(epoll_fd_.get(), EPOLL_CTL_MOD, connection->fd.get(), wanted | EPOLLONESHOT,
                    connection->id)
           .ok()) {
    util::MutexLock lock(mu_);
    connections_.erase(connection->id);
  }
}

}  // namespace idem::sharing
