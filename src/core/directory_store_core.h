// DirectoryStoreCore: one per open store directory in a process, shared by every handle on it. It
// holds the process's role for the directory: owner (an EngineBackend on RocksDB, serving the other
// processes over the store's socket), client (an OwnerClient talking to the owner), or reader
// (the owner's socket, or a RocksDB read-only instance of the files). When the owner dies, a
// client's call fails over: it takes the owner lock and becomes the owner, or reconnects to
// whoever did, and resends the call.

#ifndef IDEM_CORE_DIRECTORY_STORE_CORE_H_
#define IDEM_CORE_DIRECTORY_STORE_CORE_H_

#include <fmt/format.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>

#include "backend/engine_backend.h"
#include "core/error_memory.h"
#include "engine/backend.h"
#include "idem/options.h"
#include "sharing/log_limiter.h"
#include "sharing/owner_lock.h"
#include "sharing/owner_server.h"
#include "sharing/socket_address.h"
#include "storage/storage.h"
#include "util/deadline.h"
#include "util/mutex.h"
#include "util/process.h"

namespace idem::core {

// Identity of a store directory, whatever the spelling of its path.
struct DirectoryId {
  dev_t device;
  ino_t inode;
  auto operator<=>(const DirectoryId&) const = default;
};

// Process-wide registry of open stores. The mutex is held across a whole open and a whole
// close, so a directory is never opened by RocksDB while the previous instance is still
// closing. Recursive because a failed open may destroy a half-built core under it.
std::recursive_mutex& RegistryMutex();

// Being the owner: the lock, the storage, and (when sharing) the server. Members are destroyed
// in reverse order: the server stops calling the backend before it closes, and the lock is
// released only after RocksDB has closed.
struct Ownership {
  std::unique_ptr<sharing::OwnerLock> lock;
  std::shared_ptr<backend::EngineBackend> backend;
  std::unique_ptr<sharing::OwnerServer> server;
};

// One per open store directory in this process, shared by every handle on it.
class DirectoryStoreCore {
 public:
  DirectoryStoreCore(std::filesystem::path directory, DirectoryId id, const Options& options)
      : directory_(std::move(directory)),
        address_(sharing::SocketAddressFor(directory_.string(), id.device, id.inode)),
        options_(options) {}

  ~DirectoryStoreCore();

  // Takes up the process's role for the store.
  Status Start();

  bool read_only() const { return options_.read_only; }
  const std::filesystem::path& directory() const { return directory_; }
  // For a handle that read no live owner's counters: OK when no process owns the store (nobody
  // counts), kUnavailable naming it when one does but cannot be asked (an exclusive owner, or
  // one that started since this process opened the files), or when it cannot tell (the lock
  // file cannot be opened): zeros would be a lie.
  Status CheckNoOwnerUnasked() const;
  // The first opener's options: those of them that are the store's in this process
  // (DifferencesFromTheFirstOpen in store.cc) apply to every handle.
  const Options& options() const { return options_; }

  // Gives `line` to `options.log`, or writes it to standard error as "idem: <severity>:
  // <message> [<event>]" when that is null. One line each: control characters in the message
  // (from a path, or from RocksDB quoting one) are escaped, so a message can neither forge a line
  // nor send a terminal escape.
  static void LogTo(const Options& options, const LogLine& line);
  // The last failure a call on the store met in this process (StoreHealth::last_error).
  ErrorMemory& errors() { return errors_; }
  // True in a child of fork(): this core belongs to the parent.
  bool forked() const { return util::ForkGeneration() != creator_generation_; }

  // Runs `call(backend, resent)` on the current backend; when that backend lost the owner, fails
  // over and runs it again with resent = true. The failovers of one call together take at most
  // options.failover_timeout: an owner that keeps dropping connections (one of another
  // version, say) ends the call with kUnavailable, not a loop.
  template <class Call>
  auto Run(Call&& call) -> std::invoke_result_t<Call&, engine::Backend&, bool> {
    if (forked()) {
      return Status::Unavailable("the store was opened before fork(); open it again in the child");
    }
    // The owner's (or a reader's) own backend serves until the core is destroyed, which no
    // call outlives: it is used without the lock and without a reference count. Both are
    // written by every call, and a cache line written by calls on two cores moves between
    // them at each call (docs/design/speed.md, increment 4).
    if (engine::Backend* permanent = permanent_.load(std::memory_order_acquire)) {
      return call(*permanent, false);
    }
    std::shared_ptr<engine::Backend> backend = Current();
    std::optional<util::Deadline> failovers_end;  // from the first loss
    for (bool resent = false;; resent = true) {
      auto result = call(*backend, resent);
      if (!backend->lost()) return result;
      if (!failovers_end) {
        failovers_end.emplace(options_.failover_timeout);
      } else if (failovers_end->Passed()) {
        return Status::Unavailable(
            fmt::format("lost the owner of store {} again and again for {} ms", directory_.string(),
                        options_.failover_timeout.count()));
      }
      Result<std::shared_ptr<engine::Backend>> next = Failover(backend, *failovers_end);
      if (!next.ok()) return next.status();
      backend = std::move(next).value();
    }
  }

 private:
  std::shared_ptr<engine::Backend> Current();

  Result<std::shared_ptr<engine::Backend>> Failover(const std::shared_ptr<engine::Backend>& lost,
                                                    const util::Deadline& deadline);

  // Gives up by `deadline`.
  Result<std::shared_ptr<engine::Backend>> AcquireBackend(const util::Deadline& deadline)
      IDEM_REQUIRES(mu_);

  // kUnavailable (nobody listens) and kTimedOut (the owner accepts nothing) may pass; any other
  // error from ConnectToOwner is a refusal (this process's own checks of the owner, or a
  // failure here) and is final.
  static bool Unreachable(const Status& status);

  // A client of the owner listening at address_; waits at most until `deadline` for the owner
  // to accept.
  Result<std::shared_ptr<engine::Backend>> ConnectToOwner(const util::Deadline& deadline);

  // A reader never takes the owner lock: it asks the running owner (live records, the owner's
  // counters) or, when none serves the store, reads the files as a RocksDB read-only instance.
  // It reads the files only when nobody holds the lock (or an exclusive owner does, which
  // serves nobody): a new owner holds the lock while it replays the log and starts serving,
  // and files read in that window may be rewritten or deleted under the reader (the soak
  // caught readers missing acknowledged results then). So it waits for that owner, up to
  // `deadline`. A refusal is returned at once.
  Result<std::shared_ptr<engine::Backend>> AcquireReader(const util::Deadline& deadline);

  // Becomes the owner, or a client of the owner; retries while the owner is starting or has
  // just died, up to `deadline`. A refusal is returned at once.
  Result<std::shared_ptr<engine::Backend>> AcquireWriter(const util::Deadline& deadline)
      IDEM_REQUIRES(mu_);

  // `owner_lock` taken.
  Result<std::shared_ptr<engine::Backend>> BecomeOwner(
      std::unique_ptr<sharing::OwnerLock> owner_lock) IDEM_REQUIRES(mu_);

  Result<std::unique_ptr<storage::Storage>> OpenStorage();
  // The backend that runs the engine over `storage`, this store directory's files: with the
  // renewal graces of a writable one (it has just become the only writer), the quota when
  // Options::max_disk_bytes sets one, and backups laid out as a store directory.
  std::shared_ptr<backend::EngineBackend> NewBackend(
      std::unique_ptr<storage::Storage> storage) const;

  // LogTo with the first opener's options.
  void Log(const LogLine& line) const { LogTo(options_, line); }

  // Constant after construction.
  const uint64_t creator_generation_ = util::ForkGeneration();
  const std::filesystem::path directory_;
  const sharing::SocketAddress address_;
  const Options options_;  // the first opener's
  ErrorMemory errors_;
  sharing::LogLimiter log_{[this](const LogLine& line) { Log(line); }};

  // Sets backend_, and permanent_ once it is a permanent backend.
  void SetBackendLocked(std::shared_ptr<engine::Backend> backend) IDEM_REQUIRES(mu_);

  util::Mutex mu_;  // taken after RegistryMutex() when both are
  std::shared_ptr<engine::Backend> backend_ IDEM_GUARDED_BY(mu_);
  // backend_.get() once backend_ is permanent (it is then never replaced), else null.
  std::atomic<engine::Backend*> permanent_{nullptr};
  std::unique_ptr<Ownership> ownership_ IDEM_GUARDED_BY(mu_);
};

}  // namespace idem::core

#endif  // IDEM_CORE_DIRECTORY_STORE_CORE_H_
