#include "core/directory_store_core.h"

#include <fmt/format.h>

#include <exception>
#include <iostream>

#include "core/store_directory.h"
#include "sharing/owner_client.h"
#include "sharing/protocol.h"
#include "storage/rocksdb/rocksdb_storage.h"
#include "util/escape.h"

namespace idem::core {
namespace {

using std::chrono::milliseconds;

// How long the owner lock must stay refused before an exclusive open reports kBusy.
constexpr milliseconds kBusyAfter{50};
// Waiting for an owner that is starting (or has just died) polls fast at first: most owners
// answer within milliseconds.
constexpr milliseconds kFirstPause{1};
constexpr milliseconds kLongestPause{50};
// The least time a connection to the owner is given, even when made at the deadline (the last
// attempt of RetryUntil): as long as the pause it ends.
constexpr milliseconds kShortestConnect = kLongestPause;
}  // namespace

std::recursive_mutex& RegistryMutex() {
  static std::recursive_mutex mu;
  return mu;
}

DirectoryStoreCore::~DirectoryStoreCore() {
  if (forked()) {
    // A child of fork() holds copies of objects whose threads stayed in the parent: joining
    // or closing them here would hang or corrupt. Leave them (the fork handler of OwnerLock
    // already let go of the owner lock).
    new std::shared_ptr<engine::Backend>(std::move(backend_));
    static_cast<void>(ownership_.release());
    return;
  }
  std::lock_guard registry_lock(RegistryMutex());
  util::MutexLock lock(mu_);
  permanent_.store(nullptr, std::memory_order_release);
  backend_.reset();
  ownership_.reset();
}

Status DirectoryStoreCore::Start() {
  util::MutexLock lock(mu_);
  IDEM_ASSIGN_OR_RETURN(auto backend, AcquireBackend(util::Deadline(options_.failover_timeout)));
  SetBackendLocked(std::move(backend));
  return Status::OK();
}

void DirectoryStoreCore::SetBackendLocked(std::shared_ptr<engine::Backend> backend) {
  backend_ = std::move(backend);
  if (backend_->permanent()) permanent_.store(backend_.get(), std::memory_order_release);
}

std::shared_ptr<engine::Backend> DirectoryStoreCore::Current() {
  util::MutexLock lock(mu_);
  return backend_;
}

Result<std::shared_ptr<engine::Backend>> DirectoryStoreCore::Failover(
    const std::shared_ptr<engine::Backend>& lost, const util::Deadline& deadline) {
  util::MutexLock lock(mu_);
  if (backend_ == lost) {
    log_.Log(LogSeverity::kInfo, "failover",
             fmt::format("lost the owner of store {}; failing over", directory_.string()));
    IDEM_ASSIGN_OR_RETURN(auto backend, AcquireBackend(deadline));
    SetBackendLocked(std::move(backend));
  }
  return backend_;
}

Result<std::shared_ptr<engine::Backend>> DirectoryStoreCore::AcquireBackend(
    const util::Deadline& deadline) {
  return options_.read_only ? AcquireReader(deadline) : AcquireWriter(deadline);
}

bool DirectoryStoreCore::Unreachable(const Status& status) {
  return status.code() == Status::Code::kUnavailable || status.code() == Status::Code::kTimedOut;
}

Result<std::shared_ptr<engine::Backend>> DirectoryStoreCore::ConnectToOwner(
    const util::Deadline& deadline) {
  const milliseconds left = std::max(kShortestConnect, deadline.Left());
  IDEM_ASSIGN_OR_RETURN(auto remote,
                        sharing::OwnerClient::Connect(address_, options_.request_timeout,
                                                      std::min(left, options_.request_timeout)));
  return std::shared_ptr<engine::Backend>(std::move(remote));
}

Result<std::shared_ptr<engine::Backend>> DirectoryStoreCore::AcquireReader(
    const util::Deadline& deadline) {
  using Acquired = std::optional<Result<std::shared_ptr<engine::Backend>>>;
  Status last_error;
  std::optional<sharing::OwnerInfo> owner;
  const auto attempt = [&]() -> Acquired {
    Result<std::shared_ptr<engine::Backend>> remote = ConnectToOwner(deadline);
    if (remote.ok() || !Unreachable(remote.status())) return remote;
    last_error = remote.status();

    owner = sharing::OwnerLock::ReadOwner(directory_.string());
    const bool exclusive_owner = owner && owner->exclusive;
    // The files are read when no owner could answer: none holds the lock, or it serves nobody
    // (exclusive), or its lock file cannot be looked at (another user's), which is no worse
    // than an exclusive owner. Whoever asks for the owner's counters is told that it cannot
    // tell (CheckNoOwnerUnasked).
    const auto read_files = [&] {
      const Result<bool> held = sharing::OwnerLock::IsHeld(directory_.string());
      return exclusive_owner || !held.ok() || !*held;
    };
    if (!read_files()) return std::nullopt;
    Result<std::unique_ptr<storage::Storage>> storage = OpenStorage();
    // An owner that appeared while the files were opened may have changed them meanwhile: ask
    // it instead.
    if (!read_files()) return std::nullopt;
    if (!storage.ok()) return storage.status();
    return std::shared_ptr<engine::Backend>(NewBackend(std::move(storage).value()));
  };
  return util::RetryUntil(
      deadline, util::Backoff(kFirstPause, kLongestPause), attempt,
      [&](int /*attempts*/) -> Result<std::shared_ptr<engine::Backend>> {
        return Status::Unavailable(
            fmt::format("the owner of store {}{} holds it but did not answer within {} "
                        "ms: {}",
                        directory_.string(), owner ? fmt::format(" (pid {})", owner->pid) : "",
                        deadline.budget().count(), last_error.message()));
      });
}

Result<std::shared_ptr<engine::Backend>> DirectoryStoreCore::AcquireWriter(
    const util::Deadline& deadline) {
  using Acquired = std::optional<Result<std::shared_ptr<engine::Backend>>>;
  const util::Deadline busy_after(kBusyAfter);
  Status last_error;
  std::string holder;
  const auto attempt = [&]() -> Acquired {
    mu_.AssertHeld();  // RetryUntil runs it on this thread, within this call
    IDEM_ASSIGN_OR_RETURN(auto owner_lock,
                          sharing::OwnerLock::TryAcquire(directory_.string(), options_.sharing));
    if (owner_lock) return BecomeOwner(std::move(owner_lock));

    const std::optional<sharing::OwnerInfo> owner =
        sharing::OwnerLock::ReadOwner(directory_.string());
    holder = owner ? fmt::format(" by pid {}", owner->pid) : "";
    if (options_.sharing == Sharing::kExclusive || (owner && owner->exclusive)) {
      last_error = Status::Busy(
          options_.sharing == Sharing::kExclusive
              ? fmt::format("store {} is held{}; Sharing::kExclusive needs it alone",
                            directory_.string(), holder)
              : fmt::format("store {} is held exclusively{}", directory_.string(), holder));
      // A reader checking the lock holds it for an instant (OwnerLock::IsHeld), and the lock
      // file may still name an exclusive owner that died: only a refusal that lasts is Busy.
      if (busy_after.Passed()) return last_error;
      return std::nullopt;
    }
    Result<std::shared_ptr<engine::Backend>> remote = ConnectToOwner(deadline);
    if (remote.ok() || !Unreachable(remote.status())) return remote;
    last_error = remote.status();
    // The owner holds the lock but is still opening RocksDB, or has just died.
    return std::nullopt;
  };
  return util::RetryUntil(
      deadline, util::Backoff(kFirstPause, kLongestPause), attempt,
      [&](int /*attempts*/) -> Result<std::shared_ptr<engine::Backend>> {
        // Refused exclusively up to the deadline: that refusal lasted.
        if (last_error.code() == Status::Code::kBusy) return last_error;
        return Status::Unavailable(fmt::format(
            "could not reach the owner of store {}{} within {} ms: {}", directory_.string(), holder,
            deadline.budget().count(), last_error.message()));
      });
}

Result<std::shared_ptr<engine::Backend>> DirectoryStoreCore::BecomeOwner(
    std::unique_ptr<sharing::OwnerLock> owner_lock) {
  auto ownership = std::make_unique<Ownership>();
  ownership->lock = std::move(owner_lock);
  IDEM_ASSIGN_OR_RETURN(auto storage, OpenStorage());
  ownership->backend = NewBackend(std::move(storage));
  if (options_.sharing == Sharing::kAuto) {
    sharing::OwnerServerOptions server_options;
    server_options.max_frame = sharing::MaxRequestFrame(
        options_.max_key_size, options_.max_label_size, options_.max_result_size);
    server_options.log = [this](const LogLine& line) { Log(line); };
    IDEM_ASSIGN_OR_RETURN(ownership->server, sharing::OwnerServer::Start(
                                                 address_, *ownership->backend, server_options));
  }
  std::shared_ptr<engine::Backend> backend = ownership->backend;
  ownership_ = std::move(ownership);
  return backend;
}

Status DirectoryStoreCore::CheckNoOwnerUnasked() const {
  const std::string directory = directory_.string();
  // A lock file that cannot be looked at: kUnavailable, "cannot tell", never "no owner".
  IDEM_ASSIGN_OR_RETURN(const bool held, sharing::OwnerLock::IsHeld(directory));
  if (!held) return Status::OK();
  const std::optional<sharing::OwnerInfo> owner = sharing::OwnerLock::ReadOwner(directory);
  return Status::Unavailable(
      fmt::format("{} holds store {}{} and cannot be asked for its counters",
                  sharing::OwnerName(owner ? owner->pid : 0), directory,
                  owner && owner->exclusive ? " exclusively (it serves no other process)" : ""));
}

std::shared_ptr<backend::EngineBackend> DirectoryStoreCore::NewBackend(
    std::unique_ptr<storage::Storage> storage) const {
  std::unique_ptr<backend::StallWatch> stall_watch;
  std::unique_ptr<backend::DiskQuota> disk_quota;
  if (!options_.read_only) {
    stall_watch = std::make_unique<backend::StallWatch>(options_.clock, options_.renewal_grace);
    if (options_.max_disk_bytes != 0) {
      disk_quota =
          std::make_unique<backend::DiskQuota>(options_.max_disk_bytes, directory_ / kDatabaseDir,
                                               [this](const LogLine& line) { Log(line); });
    }
  }
  return std::make_shared<backend::EngineBackend>(
      std::move(storage), options_, std::move(stall_watch), std::move(disk_quota), WriteBackup);
}

Result<std::unique_ptr<storage::Storage>> DirectoryStoreCore::OpenStorage() {
  storage::RocksDbConfig config;
  config.create_if_missing = options_.create_if_missing;
  config.read_only = options_.read_only;
  config.memory_budget = options_.memory_budget;
  config.sync_interval = options_.sync_interval;
  config.clock = options_.clock;
  config.log = [this](const LogLine& line) { Log(line); };
  IDEM_ASSIGN_OR_RETURN(auto storage, OpenStoreDatabase(directory_, std::move(config)));
  return std::unique_ptr<storage::Storage>(std::move(storage));
}

void DirectoryStoreCore::LogTo(const Options& options, const LogLine& line) {
  const std::string message = EscapeControls(line.message);
  const std::string shown =
      fmt::format("idem: {}: {} [{}]", LogSeverityName(line.severity), message, line.event);
  if (!options.log) {
    std::cerr << shown << '\n';
    return;
  }
  // The log is the application's. What it throws must neither fail the call that had something
  // to say nor end a background thread (and with it the process): the line goes to stderr.
  std::string thrown;
  try {
    options.log(LogLine{line.severity, line.event, message});
    return;
  } catch (const std::exception& error) {
    thrown = EscapeControls(error.what());
  } catch (...) {
    thrown = "an exception that is not a std::exception";
  }
  std::cerr << shown << " (the application's log threw: " << thrown << ")\n";
}

}  // namespace idem::core
