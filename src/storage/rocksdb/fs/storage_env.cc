#include "storage/rocksdb/fs/storage_env.h"

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/threadpool.h>

#include <array>

namespace idem::storage {
namespace {

class StorageEnv final : public rocksdb::EnvWrapper {
 public:
  explicit StorageEnv(std::shared_ptr<rocksdb::FileSystem> file_system)
      : EnvWrapper(rocksdb::NewCompositeEnv(std::move(file_system))) {
    // RocksDB reaches files and the clock through these, not through the Env's own methods.
    // Env's constructor points them back at this Env (through adapters that build a debug
    // context for every call: docs/design/speed.md, "Settings measured", N2);
    // point them straight at the composite Env's file system and clock instead.
    file_system_ = target()->GetFileSystem();
    system_clock_ = target()->GetSystemClock();
    // DB::Open raises LOW (compactions) and HIGH (flushes) to what max_background_jobs allows;
    // BOTTOM stays empty, as in the default Env.
    for (std::size_t pri = 0; pri < pools_.size(); ++pri) {
      pools_[pri].reset(rocksdb::NewThreadPool(pri == BOTTOM ? 0 : 1));
    }
  }

  ~StorageEnv() override {
    // A pool's threads must be joined before it is destroyed. The database is closed by now,
    // so whatever is still queued only finds it shut down.
    for (auto& pool : pools_) pool->JoinAllThreads();
  }

  static const char* kClassName() { return "idem.StorageEnv"; }
  const char* Name() const override { return kClassName(); }

  void Schedule(void (*function)(void* arg), void* arg, Priority pri, void* /*tag*/,
                void (* /*unschedule*/)(void* arg)) override {
    Pool(pri).SubmitJob([function, arg] { function(arg); });
  }
  // Queued jobs are never taken back: RocksDB then waits for them at close, and each one finds
  // the database shutting down and returns at once.
  int UnSchedule(void* /*arg*/, Priority /*pri*/) override { return 0; }

  unsigned int GetThreadPoolQueueLen(Priority pri) const override {
    return pools_[Index(pri)]->GetQueueLen();
  }
  int GetBackgroundThreads(Priority pri) override { return Pool(pri).GetBackgroundThreads(); }
  void SetBackgroundThreads(int number, Priority pri) override {
    Pool(pri).SetBackgroundThreads(number);
  }
  void IncBackgroundThreadsIfNeeded(int number, Priority pri) override {
    if (number > Pool(pri).GetBackgroundThreads()) Pool(pri).SetBackgroundThreads(number);
  }
  int ReserveThreads(int number, Priority pri) override { return Pool(pri).ReserveThreads(number); }
  int ReleaseThreads(int number, Priority pri) override { return Pool(pri).ReleaseThreads(number); }

 private:
  // RocksDB schedules only BOTTOM, LOW and HIGH work; anything else runs with LOW.
  static std::size_t Index(Priority pri) { return pri == BOTTOM || pri == HIGH ? pri : LOW; }
  rocksdb::ThreadPool& Pool(Priority pri) { return *pools_[Index(pri)]; }

  std::array<std::unique_ptr<rocksdb::ThreadPool>, 3> pools_;  // BOTTOM, LOW, HIGH
};

}  // namespace

std::shared_ptr<rocksdb::Env> NewStorageEnv(std::shared_ptr<rocksdb::FileSystem> file_system) {
  return std::make_shared<StorageEnv>(std::move(file_system));
}

}  // namespace idem::storage
