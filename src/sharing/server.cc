#include "sharing/server.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "sharing/process.h"

namespace idem::sharing {
namespace {

// Scan pages asked for over the socket are capped: a client cannot make the owner build an
// arbitrarily large response.
constexpr uint32_t kMaxScanPage = 4096;

}  // namespace

Result<std::unique_ptr<Server>> Server::Start(const SocketAddress& address, Backend& backend,
                                              ServerOptions options) {
  std::unique_ptr<Server> server(new Server(backend, std::move(options)));
  IDEM_ASSIGN_OR_RETURN(int listen_fd, Listen(address));
  server->listen_fd_ = FileDescriptor(listen_fd);
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC) != 0) {
    return Status::IOError(std::string("pipe: ") + std::strerror(errno));
  }
  server->wake_read_ = FileDescriptor(wake[0]);
  server->wake_write_ = FileDescriptor(wake[1]);
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

Server::~Server() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    // Wakes every connection thread blocked in recv; each then exits.
    for (auto& [id, connection] : connections_) {
      if (connection.fd >= 0) ::shutdown(connection.fd, SHUT_RDWR);
    }
  }
  const char byte = 0;
  static_cast<void>(::write(wake_write_.get(), &byte, 1));
  if (acceptor_.joinable()) acceptor_.join();
  std::map<uint64_t, Connection> connections;
  {
    std::lock_guard lock(mu_);
    connections.swap(connections_);
  }
  for (auto& [id, connection] : connections) {
    if (connection.thread.joinable()) connection.thread.join();
  }
}

void Server::ReapFinished() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (it->second.finished) {
      it->second.thread.join();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void Server::AcceptLoop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0}, {wake_read_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      options_.log(std::string("socket poll failed: ") + std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    const int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;  // the peer gave up already, or a transient error: keep serving
    std::lock_guard lock(mu_);
    ReapFinished();
    if (stopping_) {
      ::close(fd);
      return;
    }
    if (connections_.size() >= options_.max_connections) {
      options_.log("refused a connection: already serving " + std::to_string(connections_.size()) +
                   " connections");
      ::close(fd);
      continue;
    }
    const uint64_t id = next_id_++;
    Connection& connection = connections_[id];
    connection.fd = fd;
    connection.thread = std::thread([this, id, fd] { Serve(id, fd); });
  }
}

void Server::Serve(uint64_t id, int fd) {
  ucred peer{};
  socklen_t size = sizeof(peer);
  bool keep = true;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0) {
    options_.log(std::string("dropped a connection: no peer credentials: ") + std::strerror(errno));
    keep = false;
  } else if (peer.uid != ::geteuid()) {
    options_.log("refused a connection from pid " + std::to_string(peer.pid) + " of uid " +
                 std::to_string(peer.uid) + ": only uid " + std::to_string(::geteuid()) +
                 " may use this store");
    keep = false;
  }
  // The peer as a holder of claims, named by the kernel, not by what the peer says.
  const Holder holder = HolderFor(peer.pid);
  while (keep) {
    Result<std::string> frame = ReadFrame(fd, options_.max_frame, options_.frame_timeout);
    if (!frame.ok()) {
      // A closed connection is the normal end; anything else is the peer's fault.
      if (frame.status().code() != Status::Code::kUnavailable) {
        options_.log("dropped the connection of pid " + std::to_string(peer.pid) + ": " +
                     frame.status().ToString());
      }
      break;
    }
    Result<Request> request = DecodeRequest(*frame);
    if (!request.ok()) {
      options_.log("dropped the connection of pid " + std::to_string(peer.pid) + ": " +
                   request.status().ToString());
      break;
    }
    if (!WriteFrame(fd, Handle(*request, holder)).ok()) break;
  }
  // Closed under mu_, so the destructor never shuts down a descriptor number already reused.
  std::lock_guard lock(mu_);
  ::close(fd);
  auto it = connections_.find(id);
  if (it != connections_.end()) {
    it->second.fd = -1;
    it->second.finished = true;
  }
}

std::string Server::Handle(const Request& request, const Holder& peer) {
  return std::visit(
      [&](const auto& message) -> std::string {
        using T = std::decay_t<decltype(message)>;
        if constexpr (std::is_same_v<T, BeginMessage>) {
          Result<Claim> claim = backend_.Begin(message.call, peer);
          return claim.ok() ? EncodeResponse(Status::OK(), EncodeClaim(*claim))
                            : EncodeResponse(claim.status());
        } else if constexpr (std::is_same_v<T, TransitionMessage>) {
          return EncodeResponse(backend_.Transition(message.call));
        } else if constexpr (std::is_same_v<T, GetMessage>) {
          Result<std::optional<Record>> record = backend_.Get(message.key);
          return record.ok() ? EncodeResponse(Status::OK(), EncodeOptionalRecord(*record))
                             : EncodeResponse(record.status());
        } else if constexpr (std::is_same_v<T, ForgetMessage>) {
          return EncodeResponse(backend_.Forget(message.key, message.durability));
        } else if constexpr (std::is_same_v<T, ScanMessage>) {
          Result<ScanPage> page =
              backend_.Scan(message.options, std::clamp<uint32_t>(message.limit, 1, kMaxScanPage));
          return page.ok() ? EncodeResponse(Status::OK(), EncodeScanPage(*page))
                           : EncodeResponse(page.status());
        } else if constexpr (std::is_same_v<T, PurgeMessage>) {
          Result<uint64_t> count = backend_.Purge(message.options);
          return count.ok() ? EncodeResponse(Status::OK(), EncodeCount(*count))
                            : EncodeResponse(count.status());
        } else {
          Result<Counters> counters = backend_.GetCounters();
          return counters.ok() ? EncodeResponse(Status::OK(), EncodeCounters(*counters))
                               : EncodeResponse(counters.status());
        }
      },
      request);
}

}  // namespace idem::sharing
