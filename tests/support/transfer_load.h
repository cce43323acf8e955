// Transfers between accounts kept in application tables, for the tests of an export taken while a
// store is written (export_snapshot_test.cc), in the test's process or in a sharing_worker that
// owns the store. Each transfer is a record whose Complete moves 1 from one balance to another and
// notes the transfer under the record's key, all in one atomic write (idem/tables.h). So, in any
// one moment of the store: every done transfer record has its note and every note its done
// record, and the balances add up to kAccounts * kOpeningBalance.

#ifndef IDEM_TESTS_TRANSFER_LOAD_H_
#define IDEM_TESTS_TRANSFER_LOAD_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "idem/idem.h"

namespace idem_test {

inline constexpr int kAccounts = 8;
inline constexpr int64_t kOpeningBalance = 1000000;
inline constexpr char kBalances[] = "balances";
inline constexpr char kTransfers[] = "transfers";
inline constexpr char kTransferPrefix[] = "transfer-";

inline std::string AccountKey(int account) { return "account-" + std::to_string(account); }

// Opens every account at kOpeningBalance, in the Complete of one record ("open-accounts").
inline idem::Status OpenAccounts(idem::Store& store) {
  return store
      .Execute("open-accounts",
               [](idem::Attempt& attempt) -> idem::Result<std::string> {
                 for (int account = 0; account < kAccounts; ++account) {
                   IDEM_RETURN_IF_ERROR(attempt.Put(kBalances, AccountKey(account),
                                                    std::to_string(kOpeningBalance)));
                 }
                 return std::string("opened");
               })
      .status();
}

// Moves 1 from account `from` to account `to` in the Complete of record `key`, noting it in
// kTransfers under `key`.
inline idem::Status Transfer(idem::Store& store, const std::string& key, int from, int to) {
  return store
      .Execute(key,
               [&](idem::Attempt& attempt) -> idem::Result<std::string> {
                 IDEM_ASSIGN_OR_RETURN(idem::TableValue source,
                                       attempt.Read(kBalances, AccountKey(from)));
                 IDEM_ASSIGN_OR_RETURN(idem::TableValue target,
                                       attempt.Read(kBalances, AccountKey(to)));
                 IDEM_RETURN_IF_ERROR(attempt.Put(kBalances, AccountKey(from),
                                                  std::to_string(std::stoll(*source.value) - 1)));
                 IDEM_RETURN_IF_ERROR(attempt.Put(kBalances, AccountKey(to),
                                                  std::to_string(std::stoll(*target.value) + 1)));
                 IDEM_RETURN_IF_ERROR(attempt.Put(kTransfers, key, AccountKey(from)));
                 return std::string("moved");
               })
      .status();
}

// How fast a TransferLoad writes: at full speed for its first `full_speed` transfers, then each
// thread pauses `pause` between two, and all stop after `most`. An export's length grows with
// the store, and writers as fast as the export would make each export longer than the one
// before (under TSan, 83 thousand records by the third of three, and minutes when the machine
// is busy): the export tests slow them once the store holds what the exports need to show.
struct Pace {
  uint64_t full_speed;
  std::chrono::milliseconds pause;
  uint64_t most;
};

// Runs transfers on `threads` threads of its own, keys "transfer-<name>-<thread>-<n>", between
// random accounts, until destroyed or `pace.most` are done. Counts those done; remembers the
// first error.
class TransferLoad {
 public:
  TransferLoad(idem::Store& store, const std::string& name, int threads, Pace pace) {
    for (int t = 0; t < threads; ++t) {
      threads_.emplace_back([this, &store, name, t, pace] {
        std::mt19937 random(static_cast<unsigned>(t + 1));
        for (uint64_t n = 0; !stop_.load(); ++n) {
          const uint64_t done = done_.load();
          if (done >= pace.most) return;
          if (done >= pace.full_speed) std::this_thread::sleep_for(pace.pause);
          const int from = static_cast<int>(random() % kAccounts);
          const int to = (from + 1 + static_cast<int>(random() % (kAccounts - 1))) % kAccounts;
          const std::string key =
              kTransferPrefix + name + "-" + std::to_string(t) + "-" + std::to_string(n);
          idem::Status moved = Transfer(store, key, from, to);
          // Transfers on the same accounts conflict (their reads changed): the record failed
          // retryably, and the transfer runs again under its key.
          while (moved.code() == idem::Status::Code::kConflict && !stop_.load()) {
            moved = Transfer(store, key, from, to);
          }
          if (moved.code() == idem::Status::Code::kConflict) return;  // stopped meanwhile
          if (!moved.ok()) {
            error_ = moved.ToString();
            failed_.store(true);
            return;
          }
          done_.fetch_add(1);
        }
      });
    }
  }
  ~TransferLoad() {
    stop_.store(true);
    for (std::thread& thread : threads_) thread.join();
  }
  TransferLoad(const TransferLoad&) = delete;
  TransferLoad& operator=(const TransferLoad&) = delete;

  uint64_t done() const { return done_.load(); }
  bool failed() const { return failed_.load(); }
  // The error that stopped a thread; read after failed() is true.
  const std::string& error() const { return error_; }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};
  std::atomic<uint64_t> done_{0};
  std::string error_;  // written before failed_ is set
  std::vector<std::thread> threads_;
};

}  // namespace idem_test

#endif  // IDEM_TESTS_TRANSFER_LOAD_H_
