#include "storage/rocksdb/table_file_verifier.h"

#include <fmt/format.h>
#include <rocksdb/db.h>
#include <rocksdb/metadata.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_reader.h>

#include <algorithm>
#include <vector>

#include "util/escape.h"

namespace idem::storage {
namespace {

// Orders table files, and file numbers, by number.
struct ByNumber {
  static uint64_t Number(const rocksdb::LiveFileMetaData& file) { return file.file_number; }
  static uint64_t Number(uint64_t number) { return number; }
  bool operator()(const auto& a, const auto& b) const { return Number(a) < Number(b); }
};

// The live table files of `db`, by file number.
std::vector<rocksdb::LiveFileMetaData> LiveFiles(rocksdb::DB& db) {
  std::vector<rocksdb::LiveFileMetaData> files;
  db.GetLiveFilesMetaData(&files);
  std::sort(files.begin(), files.end(), ByNumber{});
  return files;
}

}  // namespace

std::string TableFileName(const rocksdb::LiveFileMetaData& file) {
  return file.name.substr(std::min(file.name.find_first_not_of('/'), file.name.size()));
}

Status VerifyTableFile(rocksdb::Env* env, const rocksdb::LiveFileMetaData& file) {
  rocksdb::Options options;
  options.env = env;
  rocksdb::ReadOptions read;
  read.fill_cache = false;
  rocksdb::SstFileReader reader(options);
  const std::string path = file.db_path + file.name;
  rocksdb::Status verified = reader.Open(path);
  if (verified.ok()) verified = reader.VerifyChecksum(read);
  if (verified.ok()) return Status::OK();
  // A file deleted after it was listed is no damage: the reader holds a file it opened, so only a
  // failed open can mean that.
  if (env->FileExists(path).IsNotFound()) {
    return Status::NotFound(fmt::format("table file {} is gone", TableFileName(file)));
  }
  const std::string what = fmt::format("table file {} (of {}, {} bytes)", TableFileName(file),
                                       file.column_family_name, file.size);
  if (verified.IsCorruption()) {
    return Status::Corruption(fmt::format("{} is damaged: {}", what, verified.ToString()));
  }
  return Status::IOError(fmt::format("cannot read {}: {}", what, verified.ToString()));
}

Status TableFileVerifier::VerifyNew(rocksdb::DB& db, FunctionRef<bool()> go_on) {
  util::MutexLock pass(pass_mu_);
  const uint64_t jobs_done = jobs_done_.load(std::memory_order_acquire);
  if (passed_once_ && jobs_done == jobs_done_at_last_pass_) return Damage();
  const std::vector<rocksdb::LiveFileMetaData> files = LiveFiles(db);
  bool whole = true;  // every file settled: none left for a failed read to retry
  for (const rocksdb::LiveFileMetaData& file : files) {
    {
      util::MutexLock lock(mu_);
      if (verified_.contains(file.file_number) || damaged_.contains(file.file_number)) continue;
    }
    if (!go_on()) return Damage();
    whole = VerifyOne(file) && whole;
  }
  {  // Files compaction deleted are forgotten; damaged ones stay.
    util::MutexLock lock(mu_);
    std::erase_if(verified_, [&files](const auto& entry) {
      return !std::binary_search(files.begin(), files.end(), entry.first, ByNumber{});
    });
  }
  if (whole) {
    passed_once_ = true;
    jobs_done_at_last_pass_ = jobs_done;
  }
  return Damage();
}

bool TableFileVerifier::ReverifyOldest(rocksdb::DB& db, Steady::time_point due) {
  util::MutexLock pass(pass_mu_);
  uint64_t oldest = 0;
  {
    util::MutexLock lock(mu_);
    const auto found =
        std::min_element(verified_.begin(), verified_.end(),
                         [](const auto& a, const auto& b) { return a.second < b.second; });
    if (found == verified_.end() || found->second >= due) return false;
    oldest = found->first;
  }
  for (const rocksdb::LiveFileMetaData& file : LiveFiles(db)) {
    if (file.file_number != oldest) continue;
    VerifyOne(file);
    return true;
  }
  util::MutexLock lock(mu_);  // no longer live
  verified_.erase(oldest);
  return true;
}

bool TableFileVerifier::VerifyOne(const rocksdb::LiveFileMetaData& file) {
  const Status verified = VerifyTableFile(env_, file);
  util::MutexLock lock(mu_);
  if (verified.ok()) {
    verified_[file.file_number] = Steady::now();
    return true;
  }
  // A read that failed (no descriptor free, an I/O error) says nothing of the bytes: the file is
  // verified again at the next pass, or round of re-verification.
  if (verified.code() == Status::Code::kIOError) return false;
  verified_.erase(file.file_number);
  if (verified.code() == Status::Code::kNotFound) return true;
  if (!damaged_.insert(file.file_number).second || !first_damage_.empty()) return true;
  first_damage_ = verified.message();
  if (report_) {
    const std::string message = fmt::format(
        "store {}: {}; purges, forgets and imports are refused until the store is "
        "restored from a backup (`idem check` lists what is damaged)",
        EscapeControls(store_path_), verified.message());
    report_({LogSeverity::kError, "table_file_damaged", message});
  }
  return true;
}

Status TableFileVerifier::Damage() const {
  util::MutexLock lock(mu_);
  if (damaged_.empty()) return Status::OK();
  const std::string more =
      damaged_.size() == 1 ? "" : fmt::format(" (and {} more damaged files)", damaged_.size() - 1);
  return Status::Corruption(fmt::format(
      "store {}: {}{}: restore the store from a backup; `idem check` lists what is damaged",
      EscapeControls(store_path_), first_damage_, more));
}

uint64_t TableFileVerifier::damaged_files() const {
  util::MutexLock lock(mu_);
  return damaged_.size();
}

// Each is called once the job's files are in the instance's current version, so that a pass that
// saw the count also saw the files.
void TableFileVerifier::OnFlushCompleted(rocksdb::DB* /*db*/, const rocksdb::FlushJobInfo&) {
  jobs_done_.fetch_add(1, std::memory_order_release);
}
void TableFileVerifier::OnCompactionCompleted(rocksdb::DB* /*db*/,
                                              const rocksdb::CompactionJobInfo&) {
  jobs_done_.fetch_add(1, std::memory_order_release);
}
void TableFileVerifier::OnExternalFileIngested(rocksdb::DB* /*db*/,
                                               const rocksdb::ExternalFileIngestionInfo&) {
  jobs_done_.fetch_add(1, std::memory_order_release);
}

}  // namespace idem::storage
