// Store: an embedded idempotency store. "Run this request at most once per key, and answer every
// retry with the first answer", with records persisted in RocksDB.
//
//   IDEM_ASSIGN_OR_RETURN(auto store, idem::Store::Open("/var/lib/app/idem"));
//   auto execution = store->Execute(request_id, {.type = "pay"}, [&](idem::Attempt& attempt)
//       -> idem::Result<std::string> { return bank.Charge(card, amount); });
//
// The state machine behind Begin is documented in docs/semantics.md.
//
// A Store is safe for concurrent use by multiple threads without external synchronization.
// Opening one store directory twice in a process (however the path is spelled) gives two
// handles on one underlying store.

#ifndef IDEM_STORE_H_
#define IDEM_STORE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/counters.h"
#include "idem/export.h"
#include "idem/function_ref.h"
#include "idem/options.h"
#include "idem/record.h"
#include "idem/sql.h"
#include "idem/status.h"
#include "idem/tables.h"

namespace idem {

// What Begin found.
enum class Outcome {
  kAcquired,    // the caller owns the key now: run the request, then Complete or Fail
  kReplay,      // the request completed before: record.result is its result
  kInProgress,  // another owner holds a live lease: retry after retry_after
  kFailed,      // the request failed terminally before: record.result holds the error
  kMismatch,    // the key was used with a different fingerprint: a client bug, do not retry
};

enum class Failure {
  kRetryable,  // the next Begin acquires the key again
  kTerminal,   // every later Begin returns Outcome::kFailed
};

struct Claim {
  Outcome outcome = Outcome::kInProgress;
  uint64_t token = 0;                        // kAcquired: the fencing token to pass back
  bool took_over = false;                    // kAcquired after an expired or abandoned attempt
  std::chrono::milliseconds retry_after{0};  // kInProgress: time left on the live lease
  Record record;  // the record as stored after this call (for kMismatch: as stored)
};

// "acquired", "replay", "in_progress", "failed", "mismatch".
IDEM_EXPORT std::string_view OutcomeName(Outcome outcome);

// How idem names the store at `path` (what Store::Open was given) in messages, logs and the
// `idem` command. A directory path is returned as it is. A PostgreSQL connection URI
// ("postgresql://..." or "postgres://...") never shows its password or any other secret: it is
// rebuilt from its parsed options without them ("postgresql://app@db1:5432/orders"), or, when it
// cannot be parsed (or this idem was built without PostgreSQL), cut to its hosts and database.
IDEM_EXPORT std::string DisplayStoreName(std::string_view path);

class Store;
class LeaseStatus;   // internal: what Execute's lease renewal knows of an attempt's lease
class StagedWrites;  // internal: an attempt's table reads and writes

// Handed to the function that Execute runs: who this attempt is, and a way to save progress.
struct IDEM_EXPORT Attempt {
  uint64_t token = 0;
  bool took_over = false;
  // The checkpoint saved by an earlier attempt (empty if none). Valid during the call.
  std::string_view checkpoint;
  uint32_t attempts = 0;  // 1 on the first attempt

  // Saves a recovery point for the next owner should this attempt die (Store::SaveCheckpoint).
  Status SaveCheckpoint(std::string_view data);

  // True while this attempt is known to hold its lease: the last renewal that succeeded was
  // sent less than one lease ago (on this process's monotonic clock, so a stall of this
  // process counts) and no renewal found the lease lost. Check it right before a side effect
  // that must not run twice: false means another attempt may have taken the key over (or will
  // be allowed to soon); stop, or make the effect safe with the fencing token. It cannot see
  // the owner's wall clock stepping forward, which ends leases early (docs/semantics.md).
  bool LeaseHeld() const;

  // Application tables (idem/tables.h): fn's local state, committed with this attempt's Complete
  // or not at all (docs/semantics.md, "Exactly-once effects"). Read returns a key's committed
  // value and version (or what this attempt put there already) and remembers the version: the
  // Complete applies only if every key read is still at the version read, whether fn then Put or
  // Deleted it or not (a key read absent: still never written), so requests are serializable
  // (docs/semantics.md, "Isolation"; Store::GetValue called from fn is not checked). If another
  // commit changed one meanwhile, Execute runs fn again in the same claim, on fresh reads, up to
  // Options::conflict_retries times; so fn must not count on running once for anything but its
  // staged writes. A key put without being read is written blind. A Fail, an error or an
  // exception from fn applies none of them. kInvalidArgument outside Execute.
  Result<TableValue> Read(std::string_view table, std::string_view key);
  Status Put(std::string_view table, std::string_view key, std::string_view value);
  Status Delete(std::string_view table, std::string_view key);

  Store* store = nullptr;
  std::string_view key;
  const LeaseStatus* lease = nullptr;  // set by Execute
  StagedWrites* staged = nullptr;      // set by Execute
};

struct Execution {
  std::string result;
  bool replayed = false;  // true: fn did not run in this call; result is the stored one
  uint32_t attempts = 0;  // Record::attempts after this call
};

struct ScanOptions {
  std::string_view prefix;       // only keys that start with it
  std::string_view start_after;  // resume after this key (exclusive); empty: from the start
};

struct PurgeOptions {
  bool dry_run = false;  // count what would be purged, delete nothing
  // Also give the disk space back now: flush the memory tables (so no log file keeps the
  // deletes) and compact the purged ranges. Without it the space comes back as RocksDB compacts.
  bool compact = false;
  // Called now and then with the number of records purged (or, in a dry run, counted) so far,
  // on the calling thread, and last with the total. When another process owns the store and
  // purges on this one's behalf, about once a second.
  std::function<void(uint64_t)> progress;
  // Called once, before the first call of `progress`, with how many records the purge expects
  // to visit: the expiry index entries due when it starts. An estimate: a record rewritten or
  // forgotten since its entry was written is counted but not purged, so the count may end below
  // it (and, in PostgreSQL, rows expiring while the purge runs are purged too: above it). Costs
  // one walk over those index entries (keys only), made only when this is set. When another
  // process owns the store and purges on this one's behalf, it counts them when asked and sends
  // the total back: called on the calling thread, with its first answer.
  std::function<void(uint64_t)> progress_total;
};

// What Store::Health found: whether the store answers now, whether it would take a claim, who
// serves it, and the last error this process's calls on it met. For an orchestrator's readiness
// probe or a watchdog (the equivalent of pg_isready or redis-cli ping, in the process).
struct StoreHealth {
  // A read was answered within Options::request_timeout: by this process when it owns the store,
  // by the owner over its socket, by the files when nobody owns it (a read-only handle), or by
  // the PostgreSQL server.
  bool can_read = false;
  // A claim would be taken now: the store answers, the handle is not read-only, and whoever
  // writes (this process, the owner, the server) takes writes: not over Options::max_disk_bytes,
  // not stopped by a failed write (a full disk) it has not resumed from, not a read-only
  // PostgreSQL (a standby, or default_transaction_read_only).
  bool can_write = false;
  // Why can_read or can_write is false: the error a read, or a claim, would get now. Otherwise
  // kCorruption when the owner found a damaged table file (EngineHealth::damage): the store
  // answers, but refuses purges and must be restored from a backup. OK when all is well.
  Status problem;
  // The process that owns the store directory: its pid as this process sees it (0 in a PID
  // namespace this one cannot see) and since when it has owned the store. owner_live is false
  // when nobody owns it, when it could not be asked, and for a store in PostgreSQL (which has no
  // owner process).
  bool owner_live = false;
  int64_t owner_pid = 0;
  std::chrono::system_clock::time_point owner_since{};
  // The last error a call on this store returned in this process, through any handle: a store's
  // failure (kIOError, kCorruption, kUnavailable, kTimedOut, kBusy, kNewerVersion), not the
  // answers that are a call's outcome (kNotFound, kInProgress, kLeaseLost, kConflict, ...) or
  // the caller's mistake (kInvalidArgument). OK, at the epoch, when there has been none. Health's
  // own probes are not counted: their errors are `problem`.
  Status last_error;
  std::chrono::system_clock::time_point last_error_at{};
  // How long the probes took.
  std::chrono::milliseconds took{0};
};

// The health of a store directory's storage engine, RocksDB (StoreStats::engine).
struct EngineHealth {
  // Writes are stopped: a failed write (a full disk) not yet resumed from, or too many table
  // files waiting for compaction.
  bool writes_stopped = false;
  // Bytes that compaction estimates it has yet to rewrite.
  uint64_t pending_compaction_bytes = 0;
  // Bytes of the table files the current version uses, and of all table files still on disk
  // (those an open snapshot, backup or iterator pins too).
  uint64_t live_table_bytes = 0;
  uint64_t total_table_bytes = 0;
  // Table files the owner found damaged: their block checksums do not match their bytes. The
  // owner verifies each table file once as it appears (every file at start-up) and again every
  // Options::reverify_interval. While there is one, Purge, Forget and Import are refused with
  // kCorruption (restore the store from a backup; Store::Check lists what is damaged), and
  // StoreHealth::problem names it. `damage`: the first one found, in words; empty when none.
  uint64_t damaged_table_files = 0;
  std::string damage;
};

// A store's live records counted by state and type, and its engine's health (Store::GetStats).
struct StoreStats {
  // Live records: retention not passed at `at`.
  uint64_t records = 0;
  // By state: "pending" (lease live), "timeout" (pending, lease passed), "done", "failed"; a
  // state with no record is left out. By type label likewise.
  std::map<std::string, uint64_t, std::less<>> by_state;
  std::map<std::string, uint64_t, std::less<>> by_type;
  // The pending record created first (its key and `created` only); none when nothing is pending.
  std::optional<Record> oldest_pending;
  // When the records were counted, by the store's clock.
  std::chrono::system_clock::time_point at{};
  // How exact the counts are. Zero: counted by reading every record (a store in PostgreSQL, a
  // read-only handle reading the files, an owner still counting at start-up), exact at `at`.
  // Otherwise the counts the owner of a store directory keeps as it writes, answered without
  // reading records: pending and timeout exact, a done or failed record counted for up to this
  // long after its retention passed.
  std::chrono::milliseconds precision{0};
  // A store directory's engine (RocksDB's properties), read when asked; none for PostgreSQL.
  std::optional<EngineHealth> engine;
};

// One problem Store::Check found.
struct CheckFinding {
  // Which part of the store: "file" (a table file whose checksums do not match its bytes),
  // "record" (a record that does not decode), "index" (the expiry index against the records: a
  // record without its entry, an entry naming a record of another expiry or none), "table" (an
  // application table's value that does not decode), "tokens" (a stored token not below the
  // store's token ceiling), "meta" (a value of the store's own: format version, token ceiling),
  // "read" (a read that failed part way: what it had yet to read was not checked).
  std::string part;
  // What it is about: a file's name, a record's key or a table's key (raw bytes); empty when it
  // is about the part as a whole.
  std::string subject;
  // What is wrong, in words.
  std::string problem;
};

// What Store::Check read and found.
struct CheckReport {
  // What was read: table files whose block checksums were verified, records (those expired and
  // not yet purged included), expiry index entries, application table values (deleted keys'
  // included).
  uint64_t files = 0;
  uint64_t records = 0;
  uint64_t index_entries = 0;
  uint64_t table_values = 0;
  // Every problem found, up to kMostFindings; the number beyond them in `findings_left_out`.
  std::vector<CheckFinding> findings;
  uint64_t findings_left_out = 0;
  static constexpr std::size_t kMostFindings = 1000;
  // How long the check took.
  std::chrono::milliseconds took{0};
  // Adds a finding (counts it when kMostFindings are listed already).
  void Add(std::string part, std::string subject, std::string problem) {
    if (findings.size() == kMostFindings) {
      ++findings_left_out;
      return;
    }
    findings.push_back({std::move(part), std::move(subject), std::move(problem)});
  }
  bool clean() const { return findings.empty(); }
};

// The key Store::Health reads: any key would do (a read that finds no record answers too); this
// one names the asker in a server's log. A record under it is left alone.
inline constexpr std::string_view kHealthProbeKey = "idem-health";

// What Store::Import did with one record.
enum class ImportOutcome : uint8_t {
  kImported,  // written as given
  kPresent,   // the store holds a live record under its key: nothing written
  kExpired,   // its retention had passed, by the store's clock: nothing written
};

class IDEM_EXPORT Store {
 public:
  // Opens (or creates, see Options::create_if_missing) the store in directory `path`.
  // Errors: kNotFound (missing and not created), kBusy (held by another process that excludes
  // this one, or marked by an import that is not finished: Options::open_unfinished_import),
  // kNewerVersion (written by a newer release of idem; nothing in it is changed),
  // kCorruption (unreadable, or of a format no release wrote), kInvalidArgument (not a
  // directory, or not an idem store: nothing in it is changed), kIOError (the directory
  // belongs to another user or others can write it, a symbolic link inside it, a path through a
  // symbolic link of a user other than this process's and root, a file in the socket's place
  // that is not this user's socket, the process serving its socket runs as another user, or the
  // file system failed).
  static Result<std::unique_ptr<Store>> Open(std::string_view path, const Options& options = {});

  Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  virtual ~Store();

  // Claims `key` or reports what an earlier attempt left, per the table in docs/semantics.md.
  // kInvalidArgument for an empty or oversized key or label, or a negative lease or retention.
  virtual Result<Claim> Begin(std::string_view key, const BeginOptions& options = {}) = 0;

  // The four calls below succeed only when `token` is the record's current token and the
  // record is pending; otherwise they return kLeaseLost and change nothing. On a key with no
  // record they return kNotFound.

  // Stores `result` and marks the record done. Repeating it with the same token and result
  // is OK (a retried call after a lost reply). kInvalidArgument if result is oversized.
  virtual Status Complete(std::string_view key, uint64_t token, std::string_view result) = 0;
  // Complete, and `writes` to application tables (idem/tables.h) in the same atomic write, with
  // the same durability, applied only if the Complete applies (so never by a holder whose lease
  // was taken over: kLeaseLost, nothing written). kConflict when a conditional write's key is no
  // longer at the version given: nothing is written, the record stays pending with this token,
  // and the caller may read again and Complete again. Repeated after a lost reply, it is OK and
  // applies the writes no second time. kInvalidArgument for a bad table name (1 to 64 letters,
  // digits, '_', '-', '.'), an empty or oversized key, or a value above max_result_size; and on a
  // store in PostgreSQL, and in a process that does not own the store directory (this release).
  // An empty `writes` is the plain Complete.
  virtual Status Complete(std::string_view key, uint64_t token, std::string_view result,
                          const WriteSet& writes);
  // Records a failure: kRetryable lets the next Begin acquire again, kTerminal is final.
  // Repeating it with the same token, error and kind is OK.
  virtual Status Fail(std::string_view key, uint64_t token, std::string_view error,
                      Failure kind = Failure::kRetryable) = 0;
  // Sets the lease deadline to now + lease (0: Options::default_lease).
  virtual Status Extend(std::string_view key, uint64_t token, std::chrono::milliseconds lease) = 0;
  // Stores a recovery point that survives a takeover (Record::checkpoint).
  virtual Status SaveCheckpoint(std::string_view key, uint64_t token, std::string_view data) = 0;

  // The record, or nullopt when there is none or its retention has expired.
  virtual Result<std::optional<Record>> Get(std::string_view key) = 0;

  // Removes a record whatever its state (an operator's tool). kNotFound if there is none, or its
  // retention has expired (a store in PostgreSQL then deletes it at once, as a purge would).
  virtual Status Forget(std::string_view key) = 0;
  // Forget, only if the record under `as_read.key` is still the one `as_read` shows (as Get or
  // Scan returned it): the same token and updated time, which every write of a record changes.
  // kConflict when it changed since (taken over, completed, extended, ...): nothing is forgotten;
  // kNotFound when there is none. For bulk repairs (`idem forget --state ...`), so that a record
  // that moves on between its listing and its removal is kept. The default (for implementations
  // outside the library) is kInvalidArgument.
  virtual Status ForgetIfUnchanged(const Record& as_read);

  // The value of `key` in application table `table` and its version (absent, version 0, when
  // never written). Read without a lock: a commit that depends on it names the version in its
  // WriteSet (Put's if_version, or Require for a key it does not write). Not tied to an attempt,
  // even when called from Execute's fn: only Attempt::Read is checked at fn's Complete. Errors as
  // Complete's with writes.
  virtual Result<TableValue> GetValue(std::string_view table, std::string_view key);
  // Calls `visit` with each present key of `table` (deleted ones left out) and its value, in key
  // order, until it returns false; read in pages, like Scan (ScanSnapshot reads one moment).
  virtual Status ScanTable(std::string_view table, const ScanOptions& options,
                           FunctionRef<bool(std::string_view key, const TableValue& value)> visit);
  // The names of the store's application tables, in order (each made by a first write).
  virtual Result<std::vector<std::string>> ListTables();
  // Writes `values` into `table` as they are given, versions included (from `idem export`): a
  // key of the table that holds a value or was ever written (a deleted key keeps its version)
  // is left as it is (kPresent); an absent value (nullopt) is refused. Durable when this
  // returns OK. As Import: only the process that owns the store directory (kBusy otherwise);
  // kInvalidArgument for a bad table name, key or value, checked before anything is written.
  virtual Result<std::vector<ImportOutcome>> ImportValues(
      std::string_view table, std::span<const std::pair<std::string, TableValue>> values);

  // Calls `visit` with each live record in key order until it returns false. Safe while other
  // threads write; each record is read consistently, but the scan is not one snapshot: it reads
  // in pages, so a record written meanwhile may or may not be seen (ScanSnapshot reads one).
  // kCorruption (naming the key) on a record that cannot be decoded.
  virtual Status Scan(const ScanOptions& options, FunctionRef<bool(const Record&)> visit) = 0;

  // Everything the store holds, as of one moment (what `idem export` writes): `record` with each
  // record live at that moment, in key order, then `value` with each present value of every
  // application table, table by table in name order and in key order within a table, until a
  // visitor returns false. So a record's Complete and the table writes made with it are both
  // seen or neither, however long the walk takes while others write. Read in pages, like Scan,
  // all from one snapshot: in a store directory RocksDB's, kept by the process that owns the
  // store (this one, or the owner over its socket) and released when this returns, or when the
  // connection it was opened on closes: the calling process died or left it idle past the
  // owner's idle timeout (60 s), so a dead caller pins no old data. While it lives, compaction
  // keeps the values overwritten since (the disk they take is the price of a long export). In
  // PostgreSQL, one REPEATABLE READ, READ ONLY transaction, holding one connection of the pool
  // until this returns. Errors: those of Scan; kUnavailable when the snapshot is gone before the
  // end (the owner changed or closed the connection): nothing read is a moment, read again; kBusy
  // when 16 are open at once. The default (for implementations outside the library) is
  // kInvalidArgument.
  virtual Status ScanSnapshot(
      FunctionRef<bool(const Record&)> record,
      FunctionRef<bool(std::string_view table, std::string_view key, const TableValue& value)>
          value);

  // Removes records whose retention has expired; returns how many it removed (or would remove,
  // with dry_run). Costs in proportion to the records expired since the last purge, not to the
  // size of the store.
  virtual Result<uint64_t> Purge(const PurgeOptions& options = {}) = 0;

  // The counters of the process that owns the store (see Counters): this process's own when it
  // is the owner, otherwise the owner's, asked over its socket. Errors: those of reaching the
  // owner (kUnavailable, kTimedOut), never zeros in their place.
  virtual Result<Counters> GetCounters() const = 0;

  // GetCounters, and whose counts they are: the owner's pid and since when it has owned the
  // store (live), or nobody's (a read-only handle reading the files while no owner runs: zeros,
  // live false). Errors: those of GetCounters, and kUnavailable when an owner holds the store
  // but cannot be asked (one opened with Sharing::kExclusive serves no other process). The
  // default (for implementations outside the library) is kUnavailable.
  virtual Result<OwnerCounters> GetOwnerCounters() const;

  // The live records by state and type, the oldest pending one, and the engine's health
  // (StoreStats), without reading the records where the owner of a store directory keeps their
  // counts (this process when it owns the store, otherwise the owner over its socket): in
  // constant time, whatever the store's size. Otherwise by reading every record, as a Scan does:
  // a store in PostgreSQL, a read-only handle reading the files while nobody owns them, and an
  // owner that is still counting the records it found at start-up (a background scan). Errors:
  // those of Scan and of reaching the owner. The default (for implementations outside the
  // library) counts by Scan.
  virtual Result<StoreStats> GetStats();

  // Reads the whole store and says what is wrong with it (CheckReport), as `idem check` does: in
  // a store directory, every table file's checksums, every record and application table value
  // decoded, the expiry index against the records (every record has its entry, and every entry
  // after the filter horizon names a record of that expiry: docs/format.md), and every stored
  // token below the token ceiling; in PostgreSQL, every record decoded (the server checks its
  // own files: pg_amcheck). Reads one consistent snapshot while the store is in use, at the cost
  // of reading all of it. Runs in the process that holds the files: the owner, or a read-only
  // handle reading them while no process owns them; a handle served by another process's owner
  // gets kBusy (check a backup of it instead: `idem check` takes one itself). Errors say only
  // that the check could not run (kBusy, kIOError, and those of reaching a server); the
  // problems of the store are findings. The default (for implementations outside the library)
  // reads every record by Scan.
  virtual Result<CheckReport> Check();

  // Whether the store answers now and would take a claim, who serves it, and the last error
  // (StoreHealth). Probes with a read of one key and, when it is answered and the handle is
  // writable, asks whoever writes whether it takes writes (nothing is written); each within
  // Options::request_timeout, so a stopped owner or a frozen server costs at most about two of
  // them. Never fails: what went wrong is in the answer. The default (for implementations outside
  // the library) probes with Get and says nothing of writes or owners.
  virtual StoreHealth Health();

  // Writes a copy of the store, consistent as of one moment, into the new directory
  // `destination`, while the store is in use: a store that Open opens as it is. Taken by the
  // process that owns the store (this one, or the owner over its socket), with RocksDB's
  // Checkpoint: table files hard-linked when `destination` is on the store's file system,
  // copied otherwise. `destination` is made with mode 0700 and must not exist (a backup never
  // overwrites), nor be inside the store; its parent must exist. The copy is durable (its files
  // and directories synced) when this returns OK; on an error nothing is left at `destination`.
  // Errors: kInvalidArgument (destination exists, has no parent, is inside the store; a handle
  // opened read-only; a store kept in PostgreSQL, which PostgreSQL's own tools back up),
  // kIOError, and those of reaching the owner. The default (for implementations outside the
  // library) is kInvalidArgument.
  virtual Status Backup(std::string_view destination);

  // Writes records as they are given (from `idem export`, or converted from another system):
  // state, token, attempts, times and the rest, except `timed_out` (derived). For each record,
  // in order, what was done: a key that holds a live record is left as it is (kPresent), a
  // record whose retention has passed is not written (kExpired). A record whose token is 0 gets
  // a fresh one. Before any record is written, the store's token counter is moved above every
  // token given, so that no token is ever handed out twice (in PostgreSQL, other processes may
  // still hand out tokens from blocks they reserved before, which can equal imported tokens of
  // other keys: a key's tokens still only increase). The records are durable when this returns
  // OK. In a store directory only the process that owns the store imports: a handle that talks
  // to another process's owner gets kBusy (`idem import` opens the store with
  // Sharing::kExclusive). In PostgreSQL any process imports, also while others use the store
  // (each record is written only if its key is still free, in one conditional write).
  // Every record is checked before any is written: kInvalidArgument naming the first bad one
  // (an empty or oversized key or field, retryable set on a record that is not kFailed,
  // attempts 0, a token above 2^63-1, the largest a store holds; one that takes a token near it
  // hands out the rest, then Begin fails with kIOError) writes nothing; so do a read-only handle
  // (kInvalidArgument) and kBusy. An I/O error (kIOError) part way may leave the records before
  // it written.
  virtual Result<std::vector<ImportOutcome>> Import(std::span<const Record> records);

  // High level: runs fn at most once per key across threads (and processes sharing the store):
  // Begin; on kAcquired run fn(Attempt&) and Complete with its value or Fail with its error; on
  // kReplay return the stored result without running fn; on kInProgress wait for the owner
  // (polling with backoff, at most Options::execute_wait) and return its outcome; on kFailed
  // return Status kFailed with the stored error; on kMismatch return Status kMismatch.
  // While fn runs, its lease is renewed in the background.
  //
  // fn: Result<std::string>(Attempt&) (or returning anything convertible to it). A non-OK
  // status is recorded as a retryable failure and returned, except kFailed (made by
  // idem::Terminal), which is recorded as terminal, and kConflict, which runs fn again as a
  // conflict of its staged writes does (Attempt::Read). An exception thrown by fn is recorded as a
  // retryable failure and rethrown. A result over Options::max_result_size is recorded as a
  // terminal failure (fn's effects may be done) and returned as kInvalidArgument naming both
  // sizes; staged writes the store refuses are recorded as a retryable failure and returned; an
  // error text over the limit is recorded cut to it (docs/semantics.md, "Execute").
  template <class Fn>
  Result<Execution> Execute(std::string_view key, const BeginOptions& options, Fn&& fn) {
    return ExecuteAttempts(key, options,
                           [&fn](Attempt& attempt) -> Result<std::string> { return fn(attempt); });
  }
  template <class Fn>
  Result<Execution> Execute(std::string_view key, Fn&& fn) {
    return Execute(key, BeginOptions{}, std::forward<Fn>(fn));
  }

  // Execute for a store kept in PostgreSQL whose effect is the application's own rows in the
  // same database: fn(Attempt&, SqlTransaction&) runs its SQL in a transaction (idem/sql.h) in
  // which idem then completes the record, fenced by the claim's token, and commits; so the
  // application's writes and the record commit together or not at all. A stale attempt (its
  // claim taken over) gets kLeaseLost and none of its writes apply; so does an error or an
  // exception from fn (recorded as Execute records them), and a result over
  // Options::max_result_size (kInvalidArgument, recorded as a retryable failure: nothing of fn's
  // SQL applied). kConflict from fn (a deadlock or a serialization failure, or fn's own) rolls
  // back and runs fn again in a new transaction, on fresh reads, up to Options::conflict_retries
  // times, then is recorded as a retryable failure.
  // A connection lost at COMMIT is resolved by reading the record: done with this claim's token
  // (committed: its result is returned), or still pending (fn runs again). The transaction holds
  // a connection of the pool while fn runs: Options::pool_size must leave one for the lease's
  // renewals. The transaction runs at the server's default isolation level (READ COMMITTED
  // unless the database sets another); fn's first statement may be SET TRANSACTION ISOLATION
  // LEVEL SERIALIZABLE, and fn must then finish within a third of its lease (docs/postgresql.md,
  // "Isolation"). On a store directory: kInvalidArgument (use Execute's Attempt::Read/Put there).
  template <class Fn>
  Result<Execution> ExecuteInTransaction(std::string_view key, const BeginOptions& options,
                                         Fn&& fn) {
    return ExecuteInTransactionAttempts(
        key, options, [&fn](Attempt& attempt, SqlTransaction& transaction) -> Result<std::string> {
          return fn(attempt, transaction);
        });
  }
  template <class Fn>
  Result<Execution> ExecuteInTransaction(std::string_view key, Fn&& fn) {
    return ExecuteInTransaction(key, BeginOptions{}, std::forward<Fn>(fn));
  }

  // One-time tokens against double submission (a form rendered once, submitted once). Each is
  // an ordinary record of type "idem.token" whose key is the token text, so tokens work across
  // the threads and processes that share the store, and `idem dump --type idem.token` lists
  // them. Whether a token lives is its record's to say (its retention ends with the ttl, by the
  // store's clock, which judges every process sharing the store). The text carries the expiry
  // too, so an expired token is told apart from an unknown one even after its record was purged.

  // Stores and returns a fresh token that ConsumeToken accepts once within `ttl`:
  // "tok_<32 random hex digits>_<expiry in Unix microseconds, hex>". The record is kept for
  // `ttl`. kInvalidArgument if ttl is not positive; otherwise the errors of Begin and Fail.
  Result<std::string> IssueToken(std::chrono::milliseconds ttl);

  // Consumes `token`: OK for exactly one caller, across threads and processes. Otherwise:
  //   kInvalidArgument  not a token's text ("malformed token ...")
  //   kNotFound         "token expired ..." (its ttl has passed), or "unknown token" (never
  //                     issued by this store, forgotten or purged)
  //   kFailed           "token already consumed", or "token is being consumed by another
  //                     caller" (a concurrent ConsumeToken won; it completes at once)
  //   others            the store's errors (kIOError, kUnavailable, ...)
  Status ConsumeToken(std::string_view token);

  // The options this handle was opened with.
  virtual const Options& options() const = 0;

 protected:
  // For ExecuteInTransaction: a transaction on the store's database whose commit completes
  // `key`'s claim `token`. The default: a store not kept in a database (kInvalidArgument).
  virtual Result<std::unique_ptr<ClaimTransaction>> BeginClaimTransaction(std::string_view key,
                                                                          uint64_t token);
  // True when BeginClaimTransaction can succeed.
  virtual bool KeptInDatabase() const { return false; }

 private:
  Result<Execution> ExecuteAttempts(std::string_view key, const BeginOptions& options,
                                    FunctionRef<Result<std::string>(Attempt&)> fn);
  Result<Execution> ExecuteInTransactionAttempts(
      std::string_view key, const BeginOptions& options,
      FunctionRef<Result<std::string>(Attempt&, SqlTransaction&)> fn);
};

}  // namespace idem

#endif  // IDEM_STORE_H_
