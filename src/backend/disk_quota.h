// DiskQuota: Options::max_disk_bytes, the disk space a store's database may take. Past it, the
// owner refuses new claims (EngineBackend::Begin) with a retryable status that names the quota,
// while everything that finishes pending work or gives space back still works. Anchor: etcd's
// quota-backend-bytes and its NOSPACE alarm.

#ifndef IDEM_BACKEND_DISK_QUOTA_H_
#define IDEM_BACKEND_DISK_QUOTA_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>

#include "idem/log.h"
#include "idem/status.h"
#include "util/mutex.h"

namespace idem::backend {

class DiskQuota {
 public:
  // The quota of the database in `database` (a store's PATH/db): `limit` bytes, positive. `log`
  // hears the quota crossed and the store back under it, once each time.
  DiskQuota(uint64_t limit, std::filesystem::path database, LogSink log);

  // Whether the database takes `limit` bytes or more, as last measured. It is measured again by
  // the first call a second after the last measure (or after MeasureSoon), the others meanwhile
  // answering from that measure: so writes may pass the quota by about a second's worth.
  bool Exceeded();
  // What a refused claim returns: kUnavailable, naming the quota and what gives room.
  Status Refusal() const;
  // Space may have been given back (a purge, a Forget): the next claim measures again.
  void MeasureSoon() { measured_at_.store(kNever, std::memory_order_relaxed); }
  // How many times the database went from under the quota to over it.
  uint64_t crossings() const { return crossings_.load(std::memory_order_relaxed); }

  // The sizes of the regular files of `database`, the zeros of write-ahead logs zero-filled
  // ahead of their records included. Not their allocated blocks: RocksDB preallocates space
  // beyond the end of the files it appends to (4 MiB for the MANIFEST, about a memtable for a
  // log) and gives it back when it closes them; counted, it made the measure jump by megabytes
  // as files were started.
  static Result<uint64_t> MeasureBytes(const std::filesystem::path& database);

 private:
  static constexpr int64_t kNever = INT64_MIN;
  static constexpr std::chrono::seconds kMeasureInterval{1};
  // Measures; when the database went over the quota or back under it, returns which.
  std::optional<bool> Measure(int64_t now) IDEM_REQUIRES(measure_mu_);
  // Tells the log that the database went over the quota (`over`) or back under it.
  void LogCrossing(bool over) const;

  const uint64_t limit_;
  const std::filesystem::path database_;
  const LogSink log_;
  std::atomic<int64_t> measured_at_{kNever};  // steady clock, nanoseconds since its epoch
  std::atomic<uint64_t> used_{0};
  std::atomic<bool> exceeded_{false};
  std::atomic<uint64_t> crossings_{0};
  // One caller measures; the others answer from the last measure. The measure itself is in
  // atomics, read without it.
  util::Mutex measure_mu_;
};

}  // namespace idem::backend

#endif  // IDEM_BACKEND_DISK_QUOTA_H_
