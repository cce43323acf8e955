// The storage boundary: what the engine needs from a key-value backend. Records go in and out
// whole; the backend makes each read-modify-write atomic per key and keeps an expiry index so
// that purging costs in proportion to what expired. RocksDbStorage (storage/rocksdb/) and
// PgStorage (storage/postgres/) implement it, and the engine runs over either unchanged.

#ifndef IDEM_STORAGE_STORAGE_H_
#define IDEM_STORAGE_STORAGE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/durability.h"
#include "engine/state_machine.h"
#include "idem/function_ref.h"
#include "idem/options.h"
#include "idem/record.h"
#include "idem/status.h"
#include "idem/store.h"
#include "idem/tables.h"
#include "storage/tokens.h"
#include "storage/write_watcher.h"

namespace idem::storage {

// What a store's owners keep for the next one (Storage::SaveCounters): their counts go on across
// owners.
struct KeptCounters {
  Counters counters;
  Latencies latencies;

  friend bool operator==(const KeptCounters&, const KeptCounters&) = default;
};

// A view of a storage as of one moment (Storage::OpenView): the Scan and ScanValues calls given it
// all read that moment, whatever was written since. What it pins (RocksDB's snapshot, which keeps
// compaction from dropping what was overwritten since; PostgreSQL's transaction, with its
// connection) is released when it is destroyed. Used by one thread at a time.
class ReadView {
 public:
  virtual ~ReadView();
};

class Storage {
 public:
  using TimePoint = std::chrono::system_clock::time_point;

  // Given the stored record (nullopt when there is none, retention-expired ones included; the
  // callee may move from it), the storage's time and where to draw a fresh token from (for
  // engine::DecideBegin, which draws one only when it writes a claim), returns the record to
  // store, or null to change nothing. The record pointed to must stay valid until Update
  // returns. `decide` may be called more than once (a backend that retries a transaction calls
  // it again with what it read again), so it must only assign what it computes.
  using Decide = FunctionRef<const Record*(std::optional<Record>& stored, TimePoint now,
                                           engine::NextToken next_token)>;

  // Which row a read saw, for a storage that writes by compare-and-set (PostgreSQL): the version
  // alone does not tell, as a key deleted (Forget, a purge) and claimed afresh starts again at
  // version 1; its token does, as tokens never repeat. {0, 0}: there was none, or the storage
  // locks keys instead (RocksDB).
  struct RowSeen {
    int64_t version = 0;
    uint64_t token = 0;
  };

  // A record read, and the time to judge it by.
  struct ReadResult {
    std::optional<Record> record;  // retention-expired ones included
    TimePoint now;
    // For Update's `absent_since` when no record was found: a number that changes whenever
    // anything is written to the storage (by this process, which is its only writer), taken
    // before the read. A storage that other processes write gives 0 and ignores it.
    uint64_t write_version = 0;
    RowSeen row;  // DecideOnRead's compare-and-set base
    // Set only by ReadOrCreate, when it created a claim instead of reading one: the claim it
    // wrote, engine::FreshClaim(request, now, token), and `record` is empty.
    std::optional<Claim> created;
  };

  virtual ~Storage();

  // Atomically with respect to every other Update, Remove and Purge of the same key: reads the
  // record and the time, calls `decide`, and writes its answer together with its expiry-index
  // entry in one batch, durable as `durability` says before returning. kCorruption without
  // calling `decide` when the stored value cannot be decoded.
  // `absent_since`: the write_version of a Read that found no record under `key`. When nothing
  // at all has been written since, Update knows the key is still absent and does not read it
  // again.
  //
  // Time: every `now` a storage gives (here, to Read's and Scan's callers) is its own clock's, at
  // the microsecond precision records keep, read after the key is locked. Every decision is made
  // by it, so that all processes using one storage agree on when leases and retention end.
  virtual Status Update(std::string_view key, Decide decide, Durability durability,
                        std::optional<uint64_t> absent_since) = 0;

  virtual Result<ReadResult> Read(std::string_view key) = 0;

  // Update, decided on `read`, Read's or ReadOrCreate's answer for `key` (the caller may have made
  // its record visible, and it is moved from). A storage that writes by compare-and-set does not
  // read the key again: it calls `decide` on read.record at read.now and writes the answer only
  // if the row is still read.row; if it changed meanwhile, it does as Update does, deciding again
  // on what it reads. So a Begin's decision is made once on the record its first round trip read.
  // This default is Update: a storage that locks the key reads it again under the lock, which
  // costs a local read (or nothing, `absent_since`).
  virtual Status DecideOnRead(std::string_view key, ReadResult& read, Decide decide,
                              Durability durability, std::optional<uint64_t> absent_since) {
    static_cast<void>(read);
    return Update(key, decide, durability, absent_since);
  }

  // Update, and with the record `decide` writes, `writes` to application tables (idem/tables.h)
  // in the same atomic batch, provided every conditional write's key, and every required key
  // (WriteSet::Require), is still at its version, checked in the same atomic step: otherwise
  // nothing is written and kConflict names the first key that changed. When `decide` writes
  // nothing, neither are `writes` applied. A key written twice in `writes` gets the last value; its
  // version rises by one. The default: a storage that keeps no tables.
  virtual Status UpdateWithWrites(std::string_view key, Decide decide, const WriteSet& writes,
                                  Durability durability) {
    static_cast<void>(key);
    static_cast<void>(decide);
    static_cast<void>(writes);
    static_cast<void>(durability);
    return NoTables();
  }
  // The value of `key` in application table `table`; absent, version 0, when the table or the
  // key was never written.
  virtual Result<TableValue> ReadValue(std::string_view table, std::string_view key) {
    static_cast<void>(table);
    static_cast<void>(key);
    return NoTables();
  }
  // The tables' names, in order; none for a storage that keeps no tables.
  virtual Result<std::vector<std::string>> ListTables() { return std::vector<std::string>(); }
  // Writes each of `values` (present, with its version) into `table` unless the key was ever
  // written there (kPresent), buffered: Sync makes them durable. For Store::ImportValues.
  virtual Result<std::vector<ImportOutcome>> ImportValues(
      std::string_view table, std::span<const std::pair<std::string, TableValue>> values) {
    static_cast<void>(table);
    static_cast<void>(values);
    return NoTables();
  }
  // Visits the present values of `table` in key order (deleted keys left out) until `visit`
  // returns false; as of `view` when given (one of this storage's), otherwise the latest.
  virtual Status ScanValues(std::string_view table, const ScanOptions& options,
                            FunctionRef<bool(std::string_view key, TableValue&& value)> visit,
                            ReadView* view = nullptr) {
    static_cast<void>(table);
    static_cast<void>(options);
    static_cast<void>(visit);
    static_cast<void>(view);
    return NoTables();
  }

  // Begin's first step, Read's answer. A storage whose every call is a round trip to a server
  // also writes, at once, a claim on a key that has no record at all (a retention-expired one is
  // left to `decide`): engine::FreshClaim(request, now, token) with a token it draws and its own
  // time, `durability` as Update's, and says so; Begin is then done, without Update reading the
  // key again. This default only reads: RocksDB's Update knows an absent key is still absent
  // without reading it (absent_since), and locking the key and drawing a token here would cost
  // every replay.
  virtual Result<ReadResult> ReadOrCreate(std::string_view key, const engine::BeginRequest& request,
                                          Durability durability) {
    static_cast<void>(request);
    static_cast<void>(durability);
    return Read(key);
  }

  // A transition in one step, where a storage can: applies `request` to the record under `key`
  // (engine::ApplyTransition at the storage's time) if engine::TransitionApplies holds for it,
  // `durability` as Update's, and returns true. False when it did not: the caller then decides
  // with Update, which says why (and answers a repeated final call). This default does nothing
  // and returns false: Update costs a local storage no more.
  virtual Result<bool> TransitionIfCurrent(std::string_view key,
                                           const engine::TransitionRequest& request,
                                           Durability durability) {
    static_cast<void>(key);
    static_cast<void>(request);
    static_cast<void>(durability);
    return false;
  }

  // The renewal grace an outage of the storage itself owes holders: while a database server
  // restarts or fails over, nobody can renew a lease, and leases run out meanwhile. So pending
  // claims written before the storage became writable again keep their holders for `grace`
  // after that moment (engine::RenewalGrace; `left` 0 when it is over). Asked only when a Begin
  // finds a claim whose lease ran out, the path that takes claims over. This default owes none:
  // a store directory has no server, and its owner's stalls are core's StallWatch's business.
  virtual Result<engine::RenewalGrace> OutageGrace(std::chrono::milliseconds grace) {
    static_cast<void>(grace);
    return engine::RenewalGrace{};
  }

  // Deletes the record under `key` whatever it holds (even undecodable bytes), or, when
  // `as_read` is given, only if it is still that record (kConflict, engine::ChangedSinceRead,
  // otherwise: undecodable bytes are not it either). Returns whether there was one.
  virtual Result<bool> Remove(std::string_view key, Durability durability,
                              const engine::AsRead* as_read) = 0;

  // Forget's removal: deletes the record under `key` if it is visible at the storage's time
  // (engine::MakeVisible) or cannot be decoded (damaged, or of a newer format: that is how an
  // operator clears it), `durability` as Update's. True when it removed one, false when none was
  // visible. This default reads, then removes. A storage on a server deletes in one statement and
  // judges what it deleted: a record whose retention was over is then deleted too, as a purge
  // would, and still answered false.
  // With `as_read`, only that record: kConflict when the visible record is another.
  virtual Result<bool> Forget(std::string_view key, Durability durability,
                              const engine::AsRead* as_read);

  // Visits stored records in key order, with the time to judge each by, until `visit` returns
  // false; as of `view` when given (one of this storage's, and the time its moment's),
  // otherwise the latest.
  virtual Status Scan(const ScanOptions& options,
                      FunctionRef<bool(Record&& record, TimePoint now)> visit,
                      ReadView* view = nullptr) = 0;
  // A view of the storage as it is now, for reads spread over many calls that must see one
  // moment (Store::ScanSnapshot). The default: a storage that cannot keep one.
  virtual Result<std::unique_ptr<ReadView>> OpenView() {
    return Status::InvalidArgument("this storage cannot read as of one moment");
  }

  // Deletes records whose retention expiry is at or before the storage's now; returns how many.
  virtual Result<uint64_t> Purge(const PurgeOptions& options) = 0;

  // Writes a consistent copy of the storage, as of one moment, into the directory `destination`,
  // which must not exist; it is made whole or not at all, and durable before this returns.
  // Storages that cannot copy themselves (a database server has its own tools) say so with
  // kInvalidArgument.
  virtual Status Checkpoint(const std::string& destination) {
    static_cast<void>(destination);
    return Status::InvalidArgument("this storage cannot be copied by idem");
  }

  // After it returns, every token that `decide` is given to draw from is above `token`, also
  // after a restart: records written with tokens up to `token` (an import) keep fencing true.
  virtual Status ReserveTokensAbove(uint64_t token) {
    static_cast<void>(token);
    return Status::InvalidArgument("this storage cannot take records with their own tokens");
  }

  // Whether a write made now would be taken: OK, or the error it would get (writes stopped by a
  // failed write that RocksDB has not resumed from, a read-only PostgreSQL). Writes nothing.
  virtual Status Writable() { return Status::OK(); }

  // From the moment this returns, tells `watcher` of every record this storage writes (a storage
  // that one process alone writes: a store directory's owner), until this storage is destroyed:
  // the watcher must outlive it or be told nothing more (WatchWrites(nullptr)). Returns a view as
  // of that same moment (no write falls between the two), for counting the records it starts
  // from. The default: a storage that other processes write too (kInvalidArgument).
  virtual Result<std::unique_ptr<ReadView>> WatchWrites(WriteWatcher* watcher) {
    static_cast<void>(watcher);
    return Status::InvalidArgument("this storage is written by other processes too");
  }

  // The counters and latency histograms the store's owners kept before this one (SaveCounters),
  // to go on from: zeros when none were saved, and for a part that cannot be read (logged). The
  // default: a storage that keeps none (every process counts its own).
  virtual Result<KeptCounters> LoadCounters() { return KeptCounters{}; }
  // Keeps `counters` for the next owner (a buffered write). The default keeps nothing.
  virtual Status SaveCounters(const KeptCounters& counters) {
    static_cast<void>(counters);
    return Status::OK();
  }

  // Store::Check of what this storage holds. The default (PostgreSQL, whose server checks its own
  // files and whose columns hold the records' fields): every record read and decoded.
  virtual Result<CheckReport> Check();

  // The owner's verification of the files it keeps, so that commands that write refuse a damaged
  // store (RocksDB's table files: table_file_verifier.h). VerifyNewFiles verifies each file not
  // verified yet, as long as `go_on` says so, and returns kCorruption naming the first damaged
  // file found (then or before), OK while none is. ReverifyOneFile verifies again the file
  // verified longest ago, if that was before `due`: whether one was. The defaults (PostgreSQL,
  // whose server checks its own pages; a read-only instance) have nothing to verify.
  virtual Status VerifyNewFiles(FunctionRef<bool()> go_on) {
    static_cast<void>(go_on);
    return Status::OK();
  }
  virtual bool ReverifyOneFile(std::chrono::steady_clock::time_point due) {
    static_cast<void>(due);
    return false;
  }

  // The record counts of the owner that closed the store last (LiveRecordCounts), kept at its
  // clean close so that the next owner need not count the records by a scan: KeepRecordCounts
  // keeps `counts`, and TakeKeptRecordCounts returns them, once, when nothing was written to
  // the storage between the two (otherwise nullopt). The default keeps nothing.
  virtual Status KeepRecordCounts(std::string_view counts) {
    static_cast<void>(counts);
    return Status::OK();
  }
  virtual std::optional<std::string> TakeKeptRecordCounts() { return std::nullopt; }

  // The engine's health (Store::GetStats); none for a storage that has no engine of its own.
  virtual std::optional<EngineHealth> ReadEngineHealth() { return std::nullopt; }

  // Makes every write made so far durable, as if it had been made with Durability::kSync (an
  // import writes its records buffered, then syncs once per batch).
  virtual Status Sync() {
    return Status::InvalidArgument("this storage cannot sync buffered writes on demand");
  }

  // A write group: the calling thread's buffered Updates, between StartWriteGroup and
  // FinishWriteGroup, written together as one batch instead of one write each (the owner runs a
  // client's requests that arrived together this way: sharing/owner_server_requests.cc). Each is
  // decided under its key's lock as alone, and keeps the lock until the group is written, so
  // nothing else sees or changes the key meanwhile; a caller answers none of them before
  // FinishWriteGroup. An Update with table writes or another durability, a second one of a key
  // (or of a key sharing its lock) and a key whose lock another thread holds first write what
  // the group holds, as does a group grown to its limit. Reads see only what was written.
  // The default: a storage that writes each Update at once (GroupedWrites stays 0).
  virtual void StartWriteGroup() {}
  // How many Updates the calling thread's group has taken so far (written or not).
  virtual std::size_t GroupedWrites() const { return 0; }
  // Writes what the group holds, ends it, and says, for each Update it took in order, whether
  // its write failed (that Update's error; OK when written).
  virtual std::vector<Status> FinishWriteGroup() { return {}; }

 private:
  static Status NoTables() {
    return Status::InvalidArgument(
        "application tables are kept in store directories only: a store in PostgreSQL leaves the "
        "application's state to the application's own tables");
  }
};

}  // namespace idem::storage

#endif  // IDEM_STORAGE_STORAGE_H_
