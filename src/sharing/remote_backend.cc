#include "sharing/remote_backend.h"

namespace idem::sharing {
namespace {

// Responses are bounded by the owner's own limits; this only guards against a broken peer.
constexpr std::size_t kMaxResponse = std::size_t{1} << 30;
constexpr std::chrono::seconds kResponseBodyTimeout{30};

}  // namespace

Result<std::unique_ptr<RemoteBackend>> RemoteBackend::Connect(const SocketAddress& address) {
  IDEM_ASSIGN_OR_RETURN(int fd, sharing::Connect(address));
  std::unique_ptr<RemoteBackend> backend(new RemoteBackend(address));
  backend->idle_.emplace_back(fd);
  return backend;
}

Result<std::string> RemoteBackend::RoundTrip(const Request& request) {
  FileDescriptor connection;
  {
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      connection = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (connection.get() < 0) {
    Result<int> fd = sharing::Connect(address_);
    if (!fd.ok()) {
      lost_ = true;
      return fd.status();
    }
    connection = FileDescriptor(*fd);
  }
  Status sent = WriteFrame(connection.get(), EncodeRequest(request));
  Result<std::string> frame = sent.ok()
                                  ? ReadFrame(connection.get(), kMaxResponse, kResponseBodyTimeout)
                                  : Result<std::string>(sent);
  if (!frame.ok()) {
    // The owner closed the connection or died: every pooled connection is as dead.
    lost_ = true;
    return Status::Unavailable("lost the connection to the store's owner: " +
                               frame.status().message());
  }
  Status status;
  IDEM_ASSIGN_OR_RETURN(std::string_view body, DecodeResponse(*frame, status));
  std::string owned_body(body);
  {
    std::lock_guard lock(mu_);
    idle_.push_back(std::move(connection));
  }
  if (!status.ok()) return status;
  return owned_body;
}

Result<Claim> RemoteBackend::Begin(const BeginCall& call, const Holder& /*holder*/) {
  // The owner names the holder from the connection's peer credentials, not from the client.
  IDEM_ASSIGN_OR_RETURN(std::string body, RoundTrip(BeginMessage{call}));
  return DecodeClaim(body);
}

Status RemoteBackend::Transition(const TransitionCall& call) {
  return RoundTrip(TransitionMessage{call}).status();
}

Result<std::optional<Record>> RemoteBackend::Get(std::string_view key) {
  IDEM_ASSIGN_OR_RETURN(std::string body, RoundTrip(GetMessage{key}));
  return DecodeOptionalRecord(body);
}

Status RemoteBackend::Forget(std::string_view key, Durability durability) {
  return RoundTrip(ForgetMessage{key, durability}).status();
}

Result<ScanPage> RemoteBackend::Scan(const ScanOptions& options, std::size_t limit) {
  IDEM_ASSIGN_OR_RETURN(std::string body,
                        RoundTrip(ScanMessage{options, static_cast<uint32_t>(limit)}));
  return DecodeScanPage(body);
}

Result<uint64_t> RemoteBackend::Purge(const PurgeOptions& options) {
  IDEM_ASSIGN_OR_RETURN(std::string body, RoundTrip(PurgeMessage{options}));
  return DecodeCount(body);
}

Result<Counters> RemoteBackend::GetCounters() {
  IDEM_ASSIGN_OR_RETURN(std::string body, RoundTrip(CountersMessage{}));
  return DecodeCounters(body);
}

}  // namespace idem::sharing
