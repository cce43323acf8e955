#include "core/directory_store_core.h"

#include <fmt/format.h>

#include <iostream>
#include <thread>

#include "core/store_directory.h"
#include "sharing/owner_client.h"
#include "sharing/protocol.h"
#include "storage/rocksdb/rocksdb_storage.h"
#include "util/backoff.h"
#include "util/escape.h"

namespace idem {
namespace {

using std::chrono::milliseconds;

// How long the owner lock must stay refused before an exclusive open reports kBusy.
constexpr milliseconds kBusyAfter{50};
// Waiting for an owner that is starting (or has just died) polls fast at first: most owners
// answer within milliseconds.
constexpr milliseconds kFirstPause{1};
constexpr milliseconds kLongestPause{50};
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
    new std::shared_ptr<Backend>(std::move(backend_));
    static_cast<void>(ownership_.release());
    return;
  }
  std::lock_guard registry_lock(RegistryMutex());
  std::lock_guard lock(mu_);
  permanent_.store(nullptr, std::memory_order_release);
  backend_.reset();
  ownership_.reset();
}

Status DirectoryStoreCore::Start() {
  std::lock_guard lock(mu_);
  IDEM_ASSIGN_OR_RETURN(
      auto backend, AcquireBackend(std::chrono::steady_clock::now() + options_.failover_timeout));
  SetBackendLocked(std::move(backend));
  return Status::OK();
}

void DirectoryStoreCore::SetBackendLocked(std::shared_ptr<Backend> backend) {
  backend_ = std::move(backend);
  if (backend_->permanent()) permanent_.store(backend_.get(), std::memory_order_release);
}

std::shared_ptr<Backend> DirectoryStoreCore::Current() {
  std::lock_guard lock(mu_);
  return backend_;
}

Result<std::shared_ptr<Backend>> DirectoryStoreCore::Failover(const std::shared_ptr<Backend>& lost,
                                                              SteadyTime give_up_at) {
  std::lock_guard lock(mu_);
  if (backend_ == lost) {
    log_.Log("failover",
             fmt::format("lost the owner of store {}; failing over", directory_.string()));
    IDEM_ASSIGN_OR_RETURN(auto backend, AcquireBackend(give_up_at));
    SetBackendLocked(std::move(backend));
  }
  return backend_;
}

Result<std::shared_ptr<Backend>> DirectoryStoreCore::AcquireBackend(SteadyTime give_up_at) {
  return options_.read_only ? AcquireReader(give_up_at) : AcquireWriter(give_up_at);
}

bool DirectoryStoreCore::Unreachable(const Status& status) {
  return status.code() == Status::Code::kUnavailable || status.code() == Status::Code::kTimedOut;
}

Result<std::shared_ptr<Backend>> DirectoryStoreCore::ConnectToOwner(SteadyTime give_up_at) {
  const auto left =
      std::max(milliseconds(1),
               std::chrono::ceil<milliseconds>(give_up_at - std::chrono::steady_clock::now()));
  IDEM_ASSIGN_OR_RETURN(auto remote,
                        sharing::OwnerClient::Connect(address_, options_.request_timeout,
                                                      std::min(left, options_.request_timeout)));
  return std::shared_ptr<Backend>(std::move(remote));
}

Result<std::shared_ptr<Backend>> DirectoryStoreCore::AcquireReader(SteadyTime give_up_at) {
  util::Backoff backoff(kFirstPause, kLongestPause);
  Status last_error;
  for (;;) {
    Result<std::shared_ptr<Backend>> remote = ConnectToOwner(give_up_at);
    if (remote.ok() || !Unreachable(remote.status())) return remote;
    last_error = remote.status();

    const std::optional<sharing::OwnerInfo> owner =
        sharing::OwnerLock::ReadOwner(directory_.string());
    const bool exclusive_owner = owner && owner->exclusive;
    // The files are read when no owner could answer: none holds the lock, or it serves nobody
    // (exclusive), or its lock file cannot be looked at (another user's), which is no worse
    // than an exclusive owner. Whoever asks for the owner's counters is told that it cannot
    // tell (CheckNoOwnerUnasked).
    const auto read_files = [&] {
      const Result<bool> held = sharing::OwnerLock::IsHeld(directory_.string());
      return exclusive_owner || !held.ok() || !*held;
    };
    if (read_files()) {
      Result<std::unique_ptr<storage::Storage>> storage = OpenStorage();
      // An owner that appeared while the files were opened may have changed them meanwhile:
      // ask it instead.
      if (read_files()) {
        if (!storage.ok()) return storage.status();
        return std::shared_ptr<Backend>(NewBackend(std::move(storage).value()));
      }
    }
    if (std::chrono::steady_clock::now() >= give_up_at) {
      return Status::Unavailable(
          fmt::format("the owner of store {}{} holds it but did not answer within {} ms: {}",
                      directory_.string(), owner ? fmt::format(" (pid {})", owner->pid) : "",
                      options_.failover_timeout.count(), last_error.message()));
    }
    std::this_thread::sleep_for(backoff.Next());
  }
}

Result<std::shared_ptr<Backend>> DirectoryStoreCore::AcquireWriter(SteadyTime give_up_at) {
  const auto start = std::chrono::steady_clock::now();
  util::Backoff backoff(kFirstPause, kLongestPause);
  Status last_error;
  for (;;) {
    IDEM_ASSIGN_OR_RETURN(auto owner_lock,
                          sharing::OwnerLock::TryAcquire(directory_.string(), options_.sharing));
    if (owner_lock) return BecomeOwner(std::move(owner_lock));

    const std::optional<sharing::OwnerInfo> owner =
        sharing::OwnerLock::ReadOwner(directory_.string());
    const std::string holder = owner ? fmt::format(" by pid {}", owner->pid) : "";
    // A reader checking the lock holds it for an instant (OwnerLock::IsHeld), and the lock
    // file may still name an exclusive owner that died: only a refusal that lasts is Busy.
    const bool lasting = std::chrono::steady_clock::now() - start >= kBusyAfter;
    if (options_.sharing == Sharing::kExclusive || (owner && owner->exclusive)) {
      if (lasting) {
        return Status::Busy(
            options_.sharing == Sharing::kExclusive
                ? fmt::format("store {} is held{}; Sharing::kExclusive needs it alone",
                              directory_.string(), holder)
                : fmt::format("store {} is held exclusively{}", directory_.string(), holder));
      }
    } else {
      Result<std::shared_ptr<Backend>> remote = ConnectToOwner(give_up_at);
      if (remote.ok() || !Unreachable(remote.status())) return remote;
      last_error = remote.status();
    }

    if (std::chrono::steady_clock::now() >= give_up_at) {
      return Status::Unavailable(fmt::format(
          "could not reach the owner of store {}{} within {} ms: {}", directory_.string(), holder,
          options_.failover_timeout.count(), last_error.message()));
    }
    // The owner holds the lock but is still opening RocksDB, or has just died.
    std::this_thread::sleep_for(backoff.Next());
  }
}

Result<std::shared_ptr<Backend>> DirectoryStoreCore::BecomeOwner(
    std::unique_ptr<sharing::OwnerLock> owner_lock) {
  auto ownership = std::make_unique<Ownership>();
  ownership->lock = std::move(owner_lock);
  IDEM_ASSIGN_OR_RETURN(auto storage, OpenStorage());
  ownership->backend = NewBackend(std::move(storage));
  if (options_.sharing == Sharing::kAuto) {
    sharing::OwnerServerOptions server_options;
    server_options.max_frame = sharing::MaxRequestFrame(
        options_.max_key_size, options_.max_label_size, options_.max_result_size);
    server_options.log = [this](std::string_view message) { Log(message); };
    IDEM_ASSIGN_OR_RETURN(ownership->server, sharing::OwnerServer::Start(
                                                 address_, *ownership->backend, server_options));
  }
  std::shared_ptr<Backend> backend = ownership->backend;
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

std::shared_ptr<EngineBackend> DirectoryStoreCore::NewBackend(
    std::unique_ptr<storage::Storage> storage) const {
  std::unique_ptr<StallWatch> stall_watch;
  std::unique_ptr<DiskQuota> disk_quota;
  if (!options_.read_only) {
    stall_watch = std::make_unique<StallWatch>(options_.clock, options_.renewal_grace);
    if (options_.max_disk_bytes != 0) {
      disk_quota = std::make_unique<DiskQuota>(options_.max_disk_bytes, directory_ / kDatabaseDir,
                                               [this](std::string_view message) { Log(message); });
    }
  }
  return std::make_shared<EngineBackend>(std::move(storage), options_, std::move(stall_watch),
                                         std::move(disk_quota), WriteBackup);
}

Result<std::unique_ptr<storage::Storage>> DirectoryStoreCore::OpenStorage() {
  storage::RocksDbConfig config;
  config.create_if_missing = options_.create_if_missing;
  config.read_only = options_.read_only;
  config.memory_budget = options_.memory_budget;
  config.sync_interval = options_.sync_interval;
  config.clock = options_.clock;
  config.log = [this](std::string_view message) { Log(message); };
  IDEM_ASSIGN_OR_RETURN(auto storage, OpenStoreDatabase(directory_, std::move(config)));
  return std::unique_ptr<storage::Storage>(std::move(storage));
}

void DirectoryStoreCore::LogTo(const Options& options, std::string_view message) {
  const std::string line = EscapeControls(message);
  if (options.log) {
    options.log(line);
  } else {
    std::cerr << "idem: " << line << '\n';
  }
}

}  // namespace idem
