// Backend: what a Store handle calls once it has validated its arguments. The owner of a store
// runs an EngineBackend (the engine over RocksDB); the other processes sharing the store run a
// OwnerClient that sends each call to the owner over the store's socket. Every call can be
// repeated after a lost reply without changing its outcome (see docs/semantics.md), which is
// what lets a client resend it to a new owner after a failover.

#ifndef IDEM_ENGINE_BACKEND_H_
#define IDEM_ENGINE_BACKEND_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/reserving_store.h"
#include "engine/durability.h"
#include "engine/state_machine.h"
#include "idem/function_ref.h"
#include "idem/options.h"
#include "idem/record.h"
#include "idem/status.h"
#include "idem/store.h"
#include "idem/tables.h"

namespace idem::engine {

// A Begin with its defaults applied.
struct BeginCall {
  std::string_view key;
  std::string_view type;
  std::string_view fingerprint;
  std::chrono::milliseconds lease;      // > 0
  std::chrono::milliseconds retention;  // > 0
  uint64_t request_id = 0;              // random, the same when the call is resent
  Durability durability = Durability::kSync;
};

// A Complete, Fail, Extend or SaveCheckpoint with its defaults applied.
struct TransitionCall {
  std::string_view key;
  engine::TransitionRequest request;
  Durability durability = Durability::kSync;
  // A Complete's application-table writes and required keys (idem/tables.h), applied with it or
  // not at all. Null: none.
  const WriteSet* writes = nullptr;
};

// Execute's reservation of the table keys its claim's run of fn will touch, asked after a run
// conflicted (backend/key_reservations.h).
struct ReserveCall {
  std::string_view claim_key;  // the claim reserving: its record's key and token
  uint64_t token = 0;
  std::vector<TableKey> keys;
  // The reservation lapses this long after its grant (a holder that hung), or after this call
  // while it waits.
  std::chrono::milliseconds hold{0};
  // How long this call waits for the grant. Over the socket, the owner waits at most
  // kMaxReserveWait of it (sharing/protocol.h), and the client asks again.
  std::chrono::milliseconds wait{0};
};

// Whether a transition, with the status it returned, ends the claim's reservation: a Complete
// that committed ends the claim, and so does any Fail, whatever it returned: the run is over.
// The backend that keeps reservations and the owner's record of a connection's both follow it.
inline bool EndsReservation(engine::TransitionKind kind, const Status& status) {
  return (kind == engine::TransitionKind::kComplete && status.ok()) ||
         kind == engine::TransitionKind::kFail;
}

// One page of an application table's scan: its keys with their values, in key order.
struct TablePage {
  std::vector<std::pair<std::string, TableValue>> values;
  bool more = false;  // true: continue after the last key
};

// One page of a scan.
struct ScanPage {
  std::vector<Record> records;
  bool more = false;  // true: continue after the last record's key
};

class Backend {
 public:
  // Scan and ScanTable without a read view: what is stored when each page is read.
  static constexpr uint64_t kLatest = 0;

  virtual ~Backend() = default;

  // `holder`: the process making the call (for a remote call, named by the kernel's peer
  // credentials), so that the claim is taken over at once if that process dies. Its request_id
  // is ignored: call.request_id is used.
  virtual Result<Claim> Begin(const BeginCall& call, const Holder& holder) = 0;
  virtual Status Transition(const TransitionCall& call) = 0;
  virtual Result<std::optional<Record>> Get(std::string_view key) = 0;
  // `as_read` null: whatever the record holds; otherwise only that record (engine::AsRead).
  virtual Status Forget(std::string_view key, Durability durability, const AsRead* as_read) = 0;
  // Up to `limit` live records (fewer when they are large) after `options.start_after`; as of
  // the read view `view` when not kLatest.
  virtual Result<ScanPage> Scan(const ScanOptions& options, std::size_t limit,
                                uint64_t view = kLatest) = 0;
  virtual Result<uint64_t> Purge(const PurgeOptions& options) = 0;
  virtual Result<Counters> GetCounters() = 0;

  // Store::GetValue and a page of Store::ScanTable (up to `limit` values, fewer when they are
  // large).
  virtual Result<TableValue> GetValue(std::string_view table, std::string_view key) = 0;
  virtual Result<TablePage> ScanTable(std::string_view table, const ScanOptions& options,
                                      std::size_t limit, uint64_t view = kLatest) = 0;
  virtual Result<std::vector<std::string>> ListTables() = 0;
  // Store::ImportValues. The default: a backend that does not hold the store itself.
  virtual Result<std::vector<ImportOutcome>> ImportValues(
      std::string_view table, std::span<const std::pair<std::string, TableValue>> values) {
    static_cast<void>(table);
    static_cast<void>(values);
    return Status::Busy("values are imported only by the process that owns the store");
  }
  // The counters and whose they are (idem/counters.h). The default is a backend that owns
  // nothing (a reader of the files): GetCounters' zeros, not live.
  virtual Result<OwnerCounters> GetOwnerCounters() {
    IDEM_ASSIGN_OR_RETURN(Counters counters, GetCounters());
    OwnerCounters answer;
    answer.counters = counters;
    return answer;
  }

  // Store::GetStats as this backend knows it: `stats` with the engine's health (when it has an
  // engine of its own) and, when `counted`, the records' figures, kept as written (a store
  // directory's owner once its start-up count is done). When not `counted` the caller counts the
  // records by Scan. The default: a backend that keeps no counts and has no engine.
  struct Stats {
    bool counted = false;
    StoreStats stats;
  };
  virtual Result<Stats> GetStats() { return Stats{}; }

  // Whether a claim written now would be taken (Store::Health): OK, or the error it would get
  // (the quota's refusal, a write stop after a full disk, a read-only server). Writes nothing.
  // The default: a backend that writes nothing (kInvalidArgument).
  virtual Status Writable() { return Status::InvalidArgument("this backend writes nothing"); }

  // A read view for Store::ScanSnapshot: Scan and ScanTable pages given its id (never kLatest)
  // read the store as of this call, until CloseView. Kept by the process that owns the store; a
  // view opened over the socket also ends with the connection it was opened on (the exporter
  // died, or left it idle past the owner's idle_timeout). A page asked of a view that is gone is
  // kUnavailable, "read view ... is gone": the caller starts again. The default: a backend that
  // keeps none (kInvalidArgument).
  virtual Result<uint64_t> OpenView() {
    return Status::InvalidArgument("this store cannot be read as of one moment");
  }
  // Ends the view (OK when it is gone already).
  virtual Status CloseView(uint64_t view) {
    static_cast<void>(view);
    return Status::OK();
  }

  // Store::Check. The default: a backend that does not hold the store's files (a client of
  // another process's owner).
  virtual Result<CheckReport> Check() {
    return Status::Busy(
        "a store is checked by the process that holds its files, and another process owns this "
        "one: check a backup of it (idem check does so itself), or check it while no process "
        "uses it");
  }

  // Store::Backup, `destination` absolute. The default: a store that idem cannot copy.
  virtual Status Backup(const std::string& destination) {
    static_cast<void>(destination);
    return Status::InvalidArgument("this store cannot be backed up by idem");
  }
  // Store::Import. The default: a backend that does not hold the store itself.
  virtual Result<std::vector<ImportOutcome>> Import(std::span<const Record> records) {
    static_cast<void>(records);
    return Status::Busy("records are imported only by the process that owns the store");
  }

  // Reserves call.keys for the claim, in arrival order (backend/key_reservations.h): true once
  // granted, false when call.wait ended first (the call may be repeated: it keeps its place).
  // The default: a backend that keeps no reservations, where every request is granted at once.
  virtual Result<bool> Reserve(const ReserveCall& call) {
    static_cast<void>(call);
    return true;
  }
  // Ends the claim's reservation (OK when it has none). A Complete that commits, and a Fail, of
  // the claim end it too.
  virtual Status Unreserve(std::string_view claim_key, uint64_t token) {
    static_cast<void>(claim_key);
    static_cast<void>(token);
    return Status::OK();
  }

  // A write group (storage/storage.h): the calling thread's buffered Begins and Transitions
  // without table writes, between StartWriteGroup and FinishWriteGroup, are written together,
  // each keeping its key locked until then. A caller answers none of them before
  // FinishWriteGroup, which says, for each call the group took (GroupedWrites counts them), in
  // order, whether its write failed. The default: a backend that writes each call at once.
  virtual void StartWriteGroup() {}
  virtual std::size_t GroupedWrites() const { return 0; }
  virtual std::vector<Status> FinishWriteGroup() { return {}; }

  // True once this backend can no longer reach the store (the owner it talked to is gone):
  // the caller must fail over to a new backend and resend.
  virtual bool lost() const { return false; }
  // False for a backend that may become lost(); true for one that holds the store itself and
  // serves every call until it is destroyed.
  virtual bool permanent() const { return true; }
};

}  // namespace idem::engine

#endif  // IDEM_ENGINE_BACKEND_H_
