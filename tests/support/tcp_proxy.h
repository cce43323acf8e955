// TcpProxy: a loopback TCP proxy in front of a server's port, for tests that must see or stop
// the traffic of a client library they do not control (libpq). It counts the client's turns (a
// transfer from the client after the server last spoke on that connection: one per round trip,
// without timing anything) and can freeze (forward nothing, close nothing: a server that hangs),
// or freeze only the connections open now (half-open connections: their peer is gone without a
// reset, while new connections get through).

#ifndef IDEM_TESTS_TCP_PROXY_H_
#define IDEM_TESTS_TCP_PROXY_H_

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace idem_test {

class TcpProxy {
 public:
  // Listens on 127.0.0.1 (port() tells which) and forwards to 127.0.0.1:target_port.
  explicit TcpProxy(int target_port) : target_port_(target_port) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address = Loopback(0);
    if (listener_ < 0 || ::bind(listener_, Cast(&address), sizeof address) != 0 ||
        ::listen(listener_, 16) != 0) {
      ADD_FAILURE() << "TcpProxy: cannot listen on 127.0.0.1";
      return;
    }
    socklen_t length = sizeof address;
    ::getsockname(listener_, Cast(&address), &length);
    port_ = ntohs(address.sin_port);
    threads_.emplace_back([this] { AcceptLoop(); });
  }

  ~TcpProxy() {
    stop_ = true;
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu_);
      threads.swap(threads_);
    }
    for (std::thread& thread : threads) thread.join();
    // Pumps started after the swap: the accept loop has ended, so none is left.
    for (std::thread& thread : threads_) thread.join();
    if (listener_ >= 0) ::close(listener_);
  }
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  int port() const { return port_; }
  // Client turns on every connection since the last ResetTurns.
  uint64_t client_turns() const { return turns_.load(); }
  void ResetTurns() { turns_ = 0; }
  // While frozen, nothing is forwarded in either direction and nothing is closed.
  void Freeze(bool frozen) { frozen_ = frozen; }
  // From now on the connections open now forward nothing and are not closed (until the proxy
  // goes); later ones work.
  void FreezeOpenConnections() { frozen_below_ = accepted_.load(); }

 private:
  static sockaddr_in Loopback(int port) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return address;
  }
  static sockaddr* Cast(sockaddr_in* address) { return reinterpret_cast<sockaddr*>(address); }

  // The flags are checked every 20 ms: a stop or a thaw is seen that soon.
  void AcceptLoop() {
    while (!stop_) {
      pollfd listening{.fd = listener_, .events = POLLIN, .revents = 0};
      if (::poll(&listening, 1, 20) <= 0) continue;
      const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in target = Loopback(target_port_);
      if (server < 0 || ::connect(server, Cast(&target), sizeof target) != 0) {
        ::close(client);
        if (server >= 0) ::close(server);
        continue;
      }
      std::lock_guard lock(mu_);
      const uint64_t serial = accepted_++;
      threads_.emplace_back([this, client, server, serial] { Pump(client, server, serial); });
    }
  }

  void Pump(int client, int server, uint64_t serial) {
    bool server_spoke_last = true;
    char buffer[1 << 16];
    const auto frozen = [&] { return frozen_ || serial < frozen_below_; };
    while (!stop_) {
      if (frozen()) {
        ::poll(nullptr, 0, 20);
        continue;
      }
      pollfd ends[2] = {{.fd = client, .events = POLLIN, .revents = 0},
                        {.fd = server, .events = POLLIN, .revents = 0}};
      if (::poll(ends, 2, 20) <= 0) continue;
      if (frozen()) continue;  // frozen while polling: leave the data where it is
      bool closed = false;
      for (int from = 0; from < 2 && !closed; ++from) {
        if (ends[from].revents == 0) continue;
        const ssize_t got = ::read(ends[from].fd, buffer, sizeof buffer);
        if (got <= 0) {
          closed = true;
          break;
        }
        if (from == 0 && server_spoke_last) ++turns_;
        server_spoke_last = from == 1;
        const int to = ends[1 - from].fd;
        for (ssize_t sent = 0; sent < got && !closed;) {
          const ssize_t wrote =
              ::send(to, buffer + sent, static_cast<size_t>(got - sent), MSG_NOSIGNAL);
          closed = wrote <= 0;
          sent += wrote > 0 ? wrote : 0;
        }
      }
      if (closed) break;
    }
    ::close(client);
    ::close(server);
  }

  const int target_port_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> frozen_{false};
  std::atomic<uint64_t> accepted_{0};      // connections accepted
  std::atomic<uint64_t> frozen_below_{0};  // connections accepted before this one are frozen
  std::atomic<uint64_t> turns_{0};
  std::mutex mu_;
  std::vector<std::thread> threads_;  // guarded by mu_
};

}  // namespace idem_test

#endif  // IDEM_TESTS_TCP_PROXY_H_
