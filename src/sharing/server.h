// The owner's side of sharing: serves the store's socket, one thread per connected process,
// passing each request to the owner's LocalBackend. A connection from another user, or one that
// sends a malformed, truncated or oversized frame, is dropped with a log line; it never blocks
// or crashes the owner (a stalled frame times out on its own thread).

#ifndef IDEM_SHARING_SERVER_H_
#define IDEM_SHARING_SERVER_H_

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>

#include "backend.h"
#include "sharing/protocol.h"
#include "sharing/socket.h"

namespace idem::sharing {

struct ServerOptions {
  std::size_t max_frame = 4 << 20;  // bytes; larger request frames are refused
  std::chrono::milliseconds frame_timeout{std::chrono::seconds(10)};
  std::size_t max_connections = 1024;
  std::function<void(std::string_view)> log;  // never null
};

class Server {
 public:
  // Listens at `address` (the caller holds the owner lock) and serves `backend`, which must
  // outlive the server.
  static Result<std::unique_ptr<Server>> Start(const SocketAddress& address, Backend& backend,
                                               ServerOptions options);
  // Stops accepting, closes every connection and waits for their threads.
  ~Server();

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

 private:
  struct Connection {
    int fd;
    std::thread thread;
    bool finished = false;
  };

  Server(Backend& backend, ServerOptions options)
      : backend_(backend), options_(std::move(options)) {}
  void AcceptLoop();
  void Serve(uint64_t id, int fd);
  // The response frame for one decoded request from the process `peer`.
  std::string Handle(const Request& request, const Holder& peer);
  void ReapFinished();  // joins the threads of closed connections; mu_ held

  // Constant after construction.
  Backend& backend_;
  const ServerOptions options_;
  FileDescriptor listen_fd_;
  FileDescriptor wake_read_, wake_write_;  // a byte on this pipe stops the accept loop
  std::thread acceptor_;

  std::mutex mu_;
  // Guarded by mu_.
  std::map<uint64_t, Connection> connections_;
  uint64_t next_id_ = 1;
  bool stopping_ = false;
};

}  // namespace idem::sharing

#endif  // IDEM_SHARING_SERVER_H_
