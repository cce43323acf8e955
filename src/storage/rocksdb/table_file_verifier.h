// TableFileVerifier: the owner of a store directory verifies the block checksums of each table
// file once as it appears, and again every Options::reverify_interval, so that commands that write
// refuse a damaged store without reading all of it first (docs/design/integrity-plan.md). Table
// files never change once written: a file verified once stays good unless the disk decays it.
//
// It is also the instance's EventListener: each flush, compaction and ingestion tells it, so that
// a call finds "nothing new to verify" without listing the live files. Thread-safe; one
// verification at a time.

#ifndef IDEM_STORAGE_ROCKSDB_TABLE_FILE_VERIFIER_H_
#define IDEM_STORAGE_ROCKSDB_TABLE_FILE_VERIFIER_H_

#include <rocksdb/listener.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "idem/function_ref.h"
#include "idem/log.h"
#include "idem/status.h"
#include "util/mutex.h"

namespace rocksdb {
class DB;
class Env;
struct LiveFileMetaData;
}  // namespace rocksdb

namespace idem::storage {

// The name of a live table file in its directory ("000109.sst").
std::string TableFileName(const rocksdb::LiveFileMetaData& file);

// Verifies the block checksums of the table file `file` (of `env`'s file system) by reading it
// whole, without filling the block cache. OK, or kCorruption saying which file is damaged and how;
// kIOError when it could not be read (which says nothing of its bytes); kNotFound when it is gone
// (a compaction deleted it after it was listed).
Status VerifyTableFile(rocksdb::Env* env, const rocksdb::LiveFileMetaData& file);

class TableFileVerifier final : public rocksdb::EventListener {
 public:
  using Steady = std::chrono::steady_clock;

  // `report` (may be empty) logs the first damaged file found.
  TableFileVerifier(rocksdb::Env* env, std::string store_path, LogSink report)
      : env_(env), store_path_(std::move(store_path)), report_(std::move(report)) {}

  // Verifies every live table file of `db` not verified yet (all of them at the first call; the
  // outputs of flushes and compactions since then), as long as `go_on` (called before each file)
  // says so. Returns Damage().
  Status VerifyNew(rocksdb::DB& db, FunctionRef<bool()> go_on);
  // Verifies again the live file verified longest ago, if that was before `due`: whether one was.
  bool ReverifyOldest(rocksdb::DB& db, Steady::time_point due);
  // kCorruption naming the first damaged file found (and how many are), OK while none is. A
  // damaged file stays counted after a compaction removes it: what it held may be lost.
  Status Damage() const;
  uint64_t damaged_files() const;

  void OnFlushCompleted(rocksdb::DB* db, const rocksdb::FlushJobInfo& info) override;
  void OnCompactionCompleted(rocksdb::DB* db, const rocksdb::CompactionJobInfo& info) override;
  void OnExternalFileIngested(rocksdb::DB* db,
                              const rocksdb::ExternalFileIngestionInfo& info) override;

 private:
  // Verifies `file` and notes what it found, under pass_mu_. False when it could not be read
  // (kIOError: verified again at the next pass).
  bool VerifyOne(const rocksdb::LiveFileMetaData& file) IDEM_REQUIRES(pass_mu_);

  rocksdb::Env* const env_;
  const std::string store_path_;
  const LogSink report_;

  util::Mutex pass_mu_;  // one verification at a time
  // The jobs that added table files since the instance opened, and how many of them the last
  // whole VerifyNew had seen: equal, nothing is new.
  std::atomic<uint64_t> jobs_done_{0};
  uint64_t jobs_done_at_last_pass_ IDEM_GUARDED_BY(pass_mu_) = 0;
  bool passed_once_ IDEM_GUARDED_BY(pass_mu_) = false;
  mutable util::Mutex mu_ IDEM_ACQUIRED_AFTER(pass_mu_);
  // The live files verified good, by file number, with when.
  std::map<uint64_t, Steady::time_point> verified_ IDEM_GUARDED_BY(mu_);
  // The files found damaged, by file number, and what the first one found is.
  std::set<uint64_t> damaged_ IDEM_GUARDED_BY(mu_);
  std::string first_damage_ IDEM_GUARDED_BY(mu_);
};

}  // namespace idem::storage

#endif  // IDEM_STORAGE_ROCKSDB_TABLE_FILE_VERIFIER_H_
