// The owner's server taking connections: accepting them, admitting a peer (its uid, the cap on
// connections, the longest idle one displaced at the cap), and shedding a connection when the
// process runs out of file descriptors. Serving them is in owner_server.cc and
// owner_server_requests.cc.

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "sharing/owner_server_internal.h"
#include "util/process.h"

namespace idem::sharing {

void OwnerServer::AcceptAll() {
  for (;;) {
    const int fd = ::accept4(listener_.fd.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      if (!Admit(fd)) return;  // stopping: the listening socket is not armed again
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    if (errno != EMFILE && errno != ENFILE) {
      log_.Log(
          LogSeverity::kError, "socket_accept_failed",
          fmt::format("cannot accept connections to the store's socket: {}", std::strerror(errno)));
      break;
    }
    if (!ShedForDescriptors()) break;
  }
  static_cast<void>(EpollControl(epoll_fd_.get(), EPOLL_CTL_MOD, listener_.fd.get(),
                                 EPOLLIN | EPOLLONESHOT, kListenKey));
}

bool OwnerServer::ShedForDescriptors() {
  // An idle connection can go (its client reconnects when it needs to); otherwise the spare
  // descriptor is freed for an instant to tell the peer why it is refused, so that the listening
  // socket does not stay readable for ever.
  std::shared_ptr<Connection> idle;
  {
    util::MutexLock lock(mu_);
    idle = TakeLongestIdle();
  }
  if (idle) {
    log_.Log(LogSeverity::kWarning, "out_of_descriptors",
             fmt::format("the process is out of file descriptors: closed its longest idle "
                         "connection to the store's socket, of pid {}",
                         idle->pid));
    Say(idle->fd.get(), ResponseKind::kGoodbye,
        Status::Unavailable(fmt::format("{} is out of file descriptors", OwnerName(::getpid()))));
    return true;  // `idle` closes here
  }
  int refused = -1;
  {
    util::MutexLock lock(mu_);
    spare_fd_ = FileDescriptor();
    refused = ::accept4(listener_.fd.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (refused >= 0) {
      Say(refused, ResponseKind::kRefusal,
          Status::Busy(
              fmt::format("{} is out of file descriptors and busy", OwnerName(::getpid()))));
      ::close(refused);
    }
    spare_fd_ = FileDescriptor(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  }
  log_.Log(LogSeverity::kWarning, "out_of_descriptors",
           "the process is out of file descriptors: refused a connection to the store's socket");
  return refused >= 0;
}

bool OwnerServer::Admit(int fd) {
  ucred peer{};
  socklen_t size = sizeof(peer);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0) {
    log_.Log(LogSeverity::kWarning, "no_peer_credentials",
             fmt::format("dropped a connection: no peer credentials: {}", std::strerror(errno)));
    ::close(fd);
    return true;
  }
  if (peer.uid != ::geteuid()) {
    log_.Log(LogSeverity::kWarning, "foreign_uid",
             fmt::format("refused a connection from pid {} of uid {}: only uid {} may use "
                         "this store",
                         peer.pid, peer.uid, ::geteuid()));
    Say(fd, ResponseKind::kRefusal,
        Status::Busy(fmt::format("{} refuses uid {}: only uid {} may use this store",
                                 OwnerName(::getpid()), peer.uid, ::geteuid())));
    ::close(fd);
    return true;
  }
  Holder holder = util::HolderFor(peer.pid);
  std::shared_ptr<Connection> displaced;
  {
    util::MutexLock lock(mu_);
    if (stopping_) {
      ::close(fd);
      return false;
    }
    if (connections_.size() >= max_connections_) displaced = TakeLongestIdle();
    if (connections_.size() < max_connections_) {
      AddConnection(fd, peer.pid, std::move(holder));
    } else {
      RefuseAtCap(fd, peer.pid);
    }
  }
  if (displaced) {
    log_.Log(LogSeverity::kWarning, "idle_connection_closed",
             fmt::format("at the limit of {} connections: closed the longest idle one, of pid {}, "
                         "to serve pid {}",
                         max_connections_, displaced->pid, peer.pid));
    Say(displaced->fd.get(), ResponseKind::kGoodbye,
        Status::Unavailable(
            fmt::format("{} closed this idle connection to make room", OwnerName(::getpid()))));
  }
  return true;
}

void OwnerServer::AddConnection(int fd, pid_t pid, Holder holder) {
  auto connection = std::make_shared<Connection>(next_id_++, fd, pid, std::move(holder), backend_);
  connection->since = Clock::now();
  if (EpollControl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLRDHUP | EPOLLONESHOT,
                   connection->id)
          .ok()) {
    connections_.emplace(connection->id, connection);
    ArmTimer(true);
  }
  // On failure the connection's descriptor closes with it: the client reconnects.
}

void OwnerServer::RefuseAtCap(int fd, pid_t pid) {
  log_.Log(LogSeverity::kWarning, "connections_busy",
           fmt::format("refused a connection from pid {}: all {} connections have a "
                       "request running",
                       pid, max_connections_));
  Say(fd, ResponseKind::kRefusal,
      Status::Busy(fmt::format("{} is serving its limit of {} connections, each with a request "
                               "running",
                               OwnerName(::getpid()), max_connections_)));
  ::close(fd);
}

std::shared_ptr<OwnerServer::Connection> OwnerServer::TakeLongestIdle() {
  std::shared_ptr<Connection> oldest;
  for (const auto& [id, connection] : connections_) {
    if (connection->busy || connection->phase != Phase::kIdle) continue;
    if (!oldest || connection->since < oldest->since) oldest = connection;
  }
  if (oldest) connections_.erase(oldest->id);
  return oldest;
}

}  // namespace idem::sharing
