// RemoteBackend: a process that does not own a store sends each call to the owner over the
// store's socket. Connections are pooled (one per concurrent caller); once the owner cannot be
// reached, lost() turns true and the Store fails over (becomes the owner or reconnects) and
// resends the call.

#ifndef IDEM_SHARING_REMOTE_BACKEND_H_
#define IDEM_SHARING_REMOTE_BACKEND_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "backend.h"
#include "sharing/protocol.h"
#include "sharing/socket.h"

namespace idem::sharing {

class RemoteBackend final : public Backend {
 public:
  // Connects once, to make sure an owner is serving at `address`.
  static Result<std::unique_ptr<RemoteBackend>> Connect(const SocketAddress& address);

  Result<Claim> Begin(const BeginCall& call, const Holder& holder) override;
  Status Transition(const TransitionCall& call) override;
  Result<std::optional<Record>> Get(std::string_view key) override;
  Status Forget(std::string_view key, Durability durability) override;
  Result<ScanPage> Scan(const ScanOptions& options, std::size_t limit) override;
  Result<uint64_t> Purge(const PurgeOptions& options) override;
  Result<Counters> GetCounters() override;
  bool lost() const override { return lost_.load(); }

 private:
  explicit RemoteBackend(SocketAddress address) : address_(std::move(address)) {}
  // Sends one request and returns the body of an OK response, or the owner's non-OK status.
  // kUnavailable (and lost()) when the owner cannot be reached.
  Result<std::string> RoundTrip(const Request& request);

  // Constant after construction.
  const SocketAddress address_;

  std::atomic<bool> lost_{false};
  std::mutex mu_;
  std::vector<FileDescriptor> idle_;  // guarded by mu_
};

}  // namespace idem::sharing

#endif  // IDEM_SHARING_REMOTE_BACKEND_H_
