// The storage boundary: what the engine needs from a key-value backend. Records go in and out
// whole; the backend makes each read-modify-write atomic per key and keeps an expiry index so
// that purging costs in proportion to what expired. RocksDB implements it here
// (rocksdb_storage.h); a distributed backend can implement it later and reuse the engine.

#ifndef IDEM_STORAGE_STORAGE_H_
#define IDEM_STORAGE_STORAGE_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#include "idem/function_ref.h"
#include "idem/options.h"
#include "idem/record.h"
#include "idem/status.h"
#include "idem/store.h"

namespace idem::storage {

class Storage {
 public:
  using TimePoint = std::chrono::system_clock::time_point;
  // Given the stored record (nullopt when there is none, retention-expired ones included; the
  // callee may move from it), returns the record to store, or null to change nothing. The
  // record pointed to must stay valid until Update returns.
  using Decide = FunctionRef<const Record*(std::optional<Record>& stored)>;

  virtual ~Storage() = default;

  // Atomically with respect to every other Update, Remove and Purge of the same key: reads the
  // record, calls `decide` once, and writes its answer together with its expiry-index entry in
  // one batch, durable as `durability` says before returning. kCorruption without calling
  // `decide` when the stored value cannot be decoded.
  // `absent_since`: a WriteVersion() taken before a Read that found no record under `key`. When
  // nothing at all has been written since, Update knows the key is still absent and does not
  // read it again.
  virtual Status Update(std::string_view key, Decide decide, Durability durability,
                        std::optional<uint64_t> absent_since) = 0;

  // The stored record, retention-expired ones included.
  virtual Result<std::optional<Record>> Read(std::string_view key) = 0;
  // A number that changes whenever anything is written to the storage (by this process, which
  // is the only writer).
  virtual uint64_t WriteVersion() const = 0;

  // Deletes the record under `key` whatever it holds (even undecodable bytes). Returns whether
  // there was one.
  virtual Result<bool> Remove(std::string_view key, Durability durability) = 0;

  // Visits stored records in key order from a consistent snapshot, until `visit` returns false.
  virtual Status Scan(const ScanOptions& options, FunctionRef<bool(Record&&)> visit) = 0;

  // Deletes records whose retention expiry is at or before `now`; returns how many.
  virtual Result<uint64_t> Purge(TimePoint now, const PurgeOptions& options) = 0;

  // A fencing token this storage has never handed out before, even across restarts.
  virtual Result<uint64_t> NextToken() = 0;
};

}  // namespace idem::storage

#endif  // IDEM_STORAGE_STORAGE_H_
