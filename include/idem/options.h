// Options for opening a store and for each Begin call, and the small helpers that make request
// identities (Fingerprint, NewRequestId).

#ifndef IDEM_OPTIONS_H_
#define IDEM_OPTIONS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "idem/export.h"
#include "idem/log.h"

namespace idem {

// When a claim or a result is acknowledged, how much of a crash it survives.
enum class Durability {
  kSync,      // fsync before Begin/Complete/Fail/... return: survives power loss.
              // Concurrent callers share one fsync (group commit).
  kBuffered,  // written to the OS before returning: survives a process crash, not power loss.
              // A power cut loses what RocksDB has not yet flushed to a table file: no bound in
              // time (measured: 1.3-3 s of acknowledged calls, docs/reliability.md).
  kPeriodic,  // written to the OS before returning, and made durable by a background fsync
              // at most Options::sync_interval later: a power cut loses at most the calls of
              // the last interval (plus the sync in progress). Redis's `appendfsync everysec`.
};

// Who may open one store path at the same time.
enum class Sharing {
  kAuto,       // processes on one host share one store path (see docs/semantics.md).
  kExclusive,  // one process only: a second process's Open fails with kBusy.
};

// The source of wall-clock time for leases and retention. Tests inject a manual clock; the
// default is std::chrono::system_clock. Implementations must be thread-safe: Now() is called
// from every caller thread and from RocksDB's compaction threads.
class IDEM_EXPORT Clock {
 public:
  virtual ~Clock() = default;
  virtual std::chrono::system_clock::time_point Now() const = 0;
};

// The system clock.
IDEM_EXPORT std::shared_ptr<const Clock> SystemClock();

// Each Store::Open's handle has its own default_lease, default_retention, durability, read_only,
// execute_wait and conflict_retries. The rest are the store's in this process: a later Open of a
// store already open here gets the first Open's values, and its log is told which of its own were
// not applied (docs/semantics.md, "Options of a store opened twice"). When another process owns the
// store, the owner's size limits, clock, take_over_dead_holders, renewal_grace and sync_interval
// judge every request.
// The file in a store directory that marks an import into it as unfinished: written (synced)
// by `idem import` before it writes the first record into an existing store, removed once the
// import is whole (Options::open_unfinished_import).
inline constexpr char kUnfinishedImportFile[] = "IMPORT-UNFINISHED";

struct Options {
  // How long a Begin's claim stays live when BeginOptions::lease is 0. A pending record whose
  // lease has passed may be taken over by the next Begin. Execute renews the lease while its
  // function runs. Too short: a slow but live worker is taken over and its work runs twice; too
  // long: a crashed worker's key waits that long. Default: 10 s. See docs/semantics.md,
  // "Choosing the lease and the retention".
  std::chrono::milliseconds default_lease{std::chrono::seconds(10)};

  // How long a record is kept, counted from the Begin that acquired it, when
  // BeginOptions::retention is 0. Afterwards the record is absent for every read and is removed
  // by Purge or compaction; a retry after that runs the request again. Retention never ends
  // before the claim's lease does. Longer than any retry of the same key may come; longer
  // keeps more records on disk. Default: 30 days.
  std::chrono::milliseconds default_retention{std::chrono::hours(24 * 30)};

  // See Durability. Default: kSync.
  Durability durability = Durability::kSync;

  // Durability::kPeriodic: how long after a call returns its write is made durable (fsynced)
  // at the latest. A background thread of the process that owns the store syncs once the
  // oldest write not yet synced is this old, and sleeps while nothing was written; a failed
  // sync is logged, retried every interval, and its recovery logged. Shorter loses less at a
  // power cut and syncs more often (flash wear: each sync writes at least a page). Must be
  // positive. A store kept in PostgreSQL ignores it: there kPeriodic commits with
  // synchronous_commit = off, whose loss the server bounds (3 x wal_writer_delay, 600 ms by
  // default). Default: 1 s.
  std::chrono::milliseconds sync_interval{std::chrono::seconds(1)};

  // See Sharing. Default: kAuto.
  Sharing sharing = Sharing::kAuto;

  // Create the store when it does not exist: in a missing directory (made with mode 0700), or
  // an empty one. A directory holding anything else that is not an idem store is refused
  // either way (kInvalidArgument) and left unchanged. When false, opening a missing store
  // returns kNotFound. Default: true.
  bool create_if_missing = true;

  // Open a store directory that an interrupted `idem import` left marked unfinished (the file
  // kUnfinishedImportFile in it), which Open otherwise refuses with kBusy naming the way out:
  // such a store may hold some of the import's records without the table values that go with
  // them (docs/operations.md, "Export and import"). For `idem import --finish`, which writes the
  // rest and removes the mark. Default: false.
  bool open_unfinished_import = false;

  // Open without ever writing and without ever becoming the store's owner: Begin, Complete,
  // Fail, Extend, SaveCheckpoint, Forget and Purge (but a dry run) return kInvalidArgument.
  // When another process owns the store, reads go to it (live records, its counters);
  // otherwise they see the store as of Open (a RocksDB read-only instance). Used by
  // `idem dump`, `get` and `stats`. Default: false.
  bool read_only = false;

  // Longest key accepted, in bytes. Keys are arbitrary bytes (NUL and 0xFF included). Default: 512.
  std::size_t max_key_size = 512;

  // Longest result, error text or checkpoint accepted, in bytes. Default: 1 MiB.
  std::size_t max_result_size = 1 << 20;

  // Longest type label or fingerprint accepted, in bytes. Default: 256.
  std::size_t max_label_size = 256;

  // How long Execute waits for another owner's in-progress attempt before giving up with
  // kInProgress. Default: 30 s.
  std::chrono::milliseconds execute_wait{std::chrono::seconds(30)};

  // How many times Execute runs fn again, in the same claim, when its application-table writes
  // conflict with another commit (kConflict: a key it read changed before its Complete), on
  // fresh reads. Each rerun first reserves the keys the runs so far touched and runs in its turn
  // (docs/semantics.md, "Conflicts and fairness"); ExecuteInTransaction's reruns have a short
  // jittered pause instead. After that it records a retryable failure and returns kConflict.
  // 0: fn runs once. Default: 8.
  int conflict_retries = 8;

  // How often a background thread purges retention-expired records, so that an idle store is
  // cleaned too (RocksDB's periodic compaction does not fire on an idle store). Each run costs
  // in proportion to the records expired since the last one. 0 disables it. Default: 10 min.
  std::chrono::milliseconds auto_purge_interval{std::chrono::minutes(10)};

  // How often the owner of a store directory reads each table file again to verify its block
  // checksums, so that a file that decays on disk (bit rot) is found within this interval. Each
  // new file is verified once as it appears, and every file once when the owner starts, whatever
  // this is. The files due are read one at a time, at most one every few seconds, in the
  // background. A damaged file makes Purge, Forget and Import refuse (EngineHealth::damage).
  // 0 disables re-verification. A store kept in PostgreSQL ignores it (its server checks its own
  // pages). Default: 7 days.
  std::chrono::milliseconds reverify_interval{std::chrono::hours(24 * 7)};

  // The resident memory (RSS) a process holding the store should stay under, in bytes. idem
  // gives a quarter of it to RocksDB's block cache, which also accounts for the write buffers
  // (at most an eighth); the rest covers the code of idem and RocksDB (~15 MiB), compaction and
  // scan buffers. Measured with 10 million records in docs/benchmarks.md. Smaller saves memory
  // (below ~48 MiB the fixed part dominates); larger speeds up reads of big stores.
  // Default: 96 MiB.
  std::size_t memory_budget = 96 << 20;

  // The disk space the store's database (PATH/db) may take, in bytes; 0: no limit. Past it, a
  // Begin that would claim a key (a fresh claim or a takeover) returns kUnavailable naming the
  // quota, which is retryable; replays, Complete, Fail, Extend, SaveCheckpoint, Forget and purge
  // still work, so that pending work ends and space can be given back (a purge that compacts,
  // as `idem purge` does, returns it at once). Measured from the files'
  // sizes (not the space RocksDB preallocates beyond them) at most once a second (and at once after
  // a purge or Forget): a burst may pass it by about a second's writes, so leave room below the
  // disk's size. Crossing it and coming back under it are logged once each, and counted
  // (quota_exceeded, quota_refusals). The owner's quota judges every process's claims. A store kept
  // in PostgreSQL ignores it. Anchor: etcd's quota-backend-bytes. Default: 0.
  std::uint64_t max_disk_bytes = 0;

  // Take over a pending claim at once, without waiting for its lease, when the process that
  // acquired it is proven dead: the owner judging it runs on the same boot and in the same PID
  // and time namespaces as the owner that recorded it, and has seen the pid free (ESRCH) or
  // held by a process started at another time. Any doubt (other namespaces, as with containers
  // sharing a volume; no /proc; no descriptor left) means alive: the claim waits for its lease.
  // Default: true.
  bool take_over_dead_holders = true;

  // How long claims whose lease ran out while their holders could not renew stay reserved for
  // them: after the store's owner resumes from a stall of its own (stopped, frozen, paused for
  // more than 1 s, seen on the monotonic clock) and after a process becomes the owner (the
  // previous one died or closed). Meanwhile Begin answers kInProgress for such a claim (with
  // retry_after the grace left) unless its holder renews, ends it or is proven dead. It must
  // cover the time a holder takes to renew once the owner answers again: Execute's renewal
  // retries a failed renewal within 100 ms; a caller renewing by hand every third of its lease
  // needs a third of the lease. Longer delays takeovers after a stall or a restart; 0 turns the
  // grace off. See docs/semantics.md, "Stalls and the renewal grace". Default: 5 s.
  std::chrono::milliseconds renewal_grace{std::chrono::seconds(5)};

  // How long Open, or a call whose store owner has just died, keeps trying to reach the owner
  // or to become it (all the failovers of one call together), before failing with kUnavailable.
  // An owner that refuses this process (kBusy) ends it at once. Default: 10 s.
  std::chrono::milliseconds failover_timeout{std::chrono::seconds(10)};

  // How long a call waits for the answer of the process that owns the store, when another
  // process does (docs/semantics.md, "Several processes, one store"). When it passes, the call
  // returns kTimedOut, which is retryable: the owner is stopped (SIGSTOP, a debugger, a frozen
  // VM) or overloaded. The request may or may not have been carried out; resending it under
  // the same key is safe, and this process stays usable (the connection is dropped, never
  // reused). Scan and Purge are split into short requests (pages; polls of a purge job). Shorter:
  // callers learn sooner that the owner is stuck; too short: calls fail while the owner is merely
  // slow (a long fsync under load). It does not apply while this process owns the store. Must be
  // positive. Default: 10 s.
  std::chrono::milliseconds request_timeout{std::chrono::seconds(10)};

  // Receives what no call returns: a refused or malformed connection to the store's socket, a
  // failover, a disk quota crossed, a disk error and its recovery. Each line has a severity and
  // a stable event name (idem/log.h; docs/operations.md, "Log events"); a sink that takes a
  // std::string_view gets the message only. Socket and failover lines are rate-limited by event
  // (one line per event per 10 s, counting the ones left out). Called from background threads;
  // must be thread-safe. Null: written to stderr as "idem: <severity>: <message> [<event>]".
  // What it throws goes no further: the line is written to stderr instead, with what was
  // thrown, and the call or thread that had it to say goes on (docs/operations.md).
  LogSink log;

  // Wall-clock source; null means the system clock. See Clock. A store kept in PostgreSQL
  // (Store::Open with a postgresql:// URI) ignores it: the database server's clock judges leases
  // and retention for every host.
  std::shared_ptr<const Clock> clock;

  // A store kept in PostgreSQL only (Store::Open with a postgresql:// URI; docs/postgresql.md):
  // the table of its records, in the connection's current schema (its meta table and token
  // sequence are named after it), or "schema.table" in that schema; either part may be quoted as
  // SQL quotes identifiers ("\"my.table\"": a dot inside quotes is the name's), and ambiguous
  // names are kInvalidArgument (docs/postgresql.md, "Naming a schema"). The table's own name is
  // at most 53 bytes. Default: "idem_records".
  std::string table = "idem_records";
  // A store kept in PostgreSQL only: how many connections this process keeps to the server at
  // most (one per call in progress; ExecuteInTransaction holds one while its fn runs, and its
  // lease renewals need another). A call that finds them all busy waits up to request_timeout,
  // served before any call that comes after it. Default: 8.
  int pool_size = 8;

  // The lease a call asking for `lease` gets (BeginOptions::lease, Store::Extend): `lease`
  // when positive, default_lease when 0.
  std::chrono::milliseconds LeaseOrDefault(std::chrono::milliseconds lease) const {
    return lease.count() > 0 ? lease : default_lease;
  }
  // The retention a Begin asking for `retention` gets: `retention` when positive,
  // default_retention when 0.
  std::chrono::milliseconds RetentionOrDefault(std::chrono::milliseconds retention) const {
    return retention.count() > 0 ? retention : default_retention;
  }
};

struct BeginOptions {
  // A label such as "pay" or "refund", stored with the record for filtering and stats.
  std::string_view type;
  // A digest of the request payload (see Fingerprint). When both this and the stored
  // fingerprint are non-empty and differ, Begin returns Outcome::kMismatch. Empty: not checked.
  std::string_view fingerprint;
  // Lease of the claim; 0 means Options::default_lease.
  std::chrono::milliseconds lease{0};
  // Retention of the record; 0 means Options::default_retention. Never shorter than the lease.
  std::chrono::milliseconds retention{0};
};

// A stable digest of a request payload: the lowercase hex SHA-256 (64 characters).
IDEM_EXPORT std::string Fingerprint(std::string_view payload);

// A unique, time-ordered request id: a UUID version 7 in its 36-character text form.
IDEM_EXPORT std::string NewRequestId();

}  // namespace idem

#endif  // IDEM_OPTIONS_H_
