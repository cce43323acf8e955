// A fixture for the tests that drive an owner's backend below the Store API on a disk that can be
// made to fail or slow down: an EngineBackend (OwnerBackend) over a RocksDB storage on a FaultFs,
// with a manual clock, and Begin and Complete as a client calls them.

#ifndef IDEM_TESTS_FAULT_BACKEND_H_
#define IDEM_TESTS_FAULT_BACKEND_H_

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string_view>

#include "backend/engine_backend.h"
#include "storage/rocksdb/rocksdb_storage.h"
#include "support/fault_fs.h"
#include "support/owner_backend.h"
#include "support/test_util.h"

namespace idem_test {

class FaultBackendTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }

  // Opens the store in dir_/db, closing the backend open before (the next owner).
  void Open() {
    backend_.reset();
    idem::storage::RocksDbConfig config;
    config.path = dir_.Sub("db");
    config.clock = clock_;
    config.env = fs_->env();
    config.log = log_.Sink();
    auto storage = idem::storage::RocksDbStorage::Open(config);
    ASSERT_TRUE(storage.ok()) << storage.status().ToString();
    storage_ = storage->get();
    backend_ = OwnerBackend(std::move(storage).value(), TestOptions(clock_));
  }

  idem::Result<idem::Claim> Begin(std::string_view key,
                                  idem::Durability durability = idem::Durability::kBuffered) {
    using namespace std::chrono_literals;
    return backend_->Begin({.key = key,
                            .lease = 30s,
                            .retention = 24h,
                            .request_id = ++request_id_,
                            .durability = durability},
                           idem::Holder{});
  }

  idem::Status Complete(std::string_view key, uint64_t token,
                        idem::Durability durability = idem::Durability::kBuffered) {
    return backend_->Transition({.key = key,
                                 .request = {.kind = idem::engine::TransitionKind::kComplete,
                                             .token = token,
                                             .payload = "result"},
                                 .durability = durability});
  }

  TempDir dir_;
  CapturedLog log_;  // the storage's lines
  std::shared_ptr<FaultFs> fs_ = std::make_shared<FaultFs>();
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  idem::storage::RocksDbStorage* storage_ = nullptr;  // backend_'s
  std::unique_ptr<idem::backend::EngineBackend> backend_;
  std::atomic<uint64_t> request_id_ = 0;
};

}  // namespace idem_test

#endif  // IDEM_TESTS_FAULT_BACKEND_H_
