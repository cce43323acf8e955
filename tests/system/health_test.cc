// Store::Health: whether the store answers a read and would take a claim, who owns it, and the
// last failure a call met; for the owner itself, a read-only handle on the files, a client of an
// owner in another process (its quota, its pid), and an owner that is stopped (SIGSTOP) and then
// resumes. A store in PostgreSQL is probed in pg_store_test.cc.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "idem/idem.h"
#include "support/owner_process.h"
#include "support/test_util.h"

namespace {

using idem::Status;
using idem::StoreHealth;
using idem_test::OwnerProcess;
using idem_test::TempDir;
using idem_test::TestOptions;
using namespace std::chrono_literals;

bool Contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

TEST(Health, TheOwnerReadsWritesAndNamesItself) {
  TempDir dir;
  const auto before = std::chrono::system_clock::now();
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  const StoreHealth health = store->Health();
  EXPECT_TRUE(health.can_read);
  EXPECT_TRUE(health.can_write);
  EXPECT_TRUE(health.problem.ok()) << health.problem.ToString();
  EXPECT_TRUE(health.owner_live);
  EXPECT_EQ(health.owner_pid, getpid());
  EXPECT_GE(health.owner_since, before - 1s);
  EXPECT_LE(health.owner_since, std::chrono::system_clock::now());
  EXPECT_TRUE(health.last_error.ok()) << health.last_error.ToString();
  EXPECT_EQ(health.last_error_at, std::chrono::system_clock::time_point{});
  ASSERT_OK_AND_ASSIGN(auto probed, store->Get(idem::kHealthProbeKey));
  EXPECT_FALSE(probed.has_value()) << "the probe writes nothing";
}

// The outcomes of calls (a key with no record, a stale token, a key in progress) and the
// caller's mistakes are not failures of the store.
TEST(Health, ACallsOutcomeIsNoLastError) {
  TempDir dir;
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  EXPECT_EQ(store->Forget("nothing here").code(), Status::Code::kNotFound);
  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("order-1"));
  EXPECT_EQ(store->Complete("order-1", claim.token + 1, "late").code(), Status::Code::kLeaseLost);
  EXPECT_EQ(store->Begin("").status().code(), Status::Code::kInvalidArgument);
  const StoreHealth health = store->Health();
  EXPECT_TRUE(health.last_error.ok()) << health.last_error.ToString();
  EXPECT_TRUE(health.can_write);
}

TEST(Health, AReadOnlyHandleOnTheFilesReadsAndSaysWhyItDoesNotWrite) {
  TempDir dir;
  { IDEM_ASSERT_OPEN(created, dir.StorePath()); }
  idem::Options options = TestOptions();
  options.read_only = true;
  IDEM_ASSERT_OPEN(store, dir.StorePath(), options);
  const StoreHealth health = store->Health();
  EXPECT_TRUE(health.can_read);
  EXPECT_FALSE(health.can_write);
  EXPECT_EQ(health.problem.code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(Contains(health.problem.message(), "read-only")) << health.problem.ToString();
  EXPECT_FALSE(health.owner_live) << "nobody owns the store";
  EXPECT_EQ(health.owner_pid, 0);
}

TEST(Health, OverItsDiskQuotaTheStoreReadsAndRefusesClaimsNamingTheQuota) {
  TempDir dir;
  idem::Options options = TestOptions();
  options.max_disk_bytes = 1;  // any store is past it
  options.log = [](std::string_view) {};
  IDEM_ASSERT_OPEN(store, dir.StorePath(), options);
  const StoreHealth health = store->Health();
  EXPECT_TRUE(health.can_read);
  EXPECT_FALSE(health.can_write);
  EXPECT_EQ(health.problem.code(), Status::Code::kUnavailable);
  EXPECT_TRUE(Contains(health.problem.message(), "max_disk_bytes 1")) << health.problem.ToString();
  // The refusal of a real claim is a failure of the store: the next probe reports it.
  EXPECT_EQ(store->Begin("order-1").status().code(), Status::Code::kUnavailable);
  const StoreHealth after = store->Health();
  EXPECT_EQ(after.last_error.code(), Status::Code::kUnavailable);
  EXPECT_TRUE(Contains(after.last_error.message(), "max_disk_bytes"))
      << after.last_error.ToString();
  EXPECT_GT(after.last_error_at, std::chrono::system_clock::now() - 1min);
}

// A client process asks the owner: the owner's quota judges whether it writes, and the pid is
// the owner's.
TEST(Health, AClientProcessGetsTheOwnersAnswerAndPid) {
  TempDir dir;
  idem::Options options = TestOptions();
  options.max_disk_bytes = 1;
  options.log = [](std::string_view) {};
  const pid_t parent = getpid();
  idem_test::WaitingChild client([&] {
    auto opened = idem::Store::Open(dir.StorePath(), TestOptions());
    if (!opened.ok()) return 2;
    const StoreHealth health = (*opened)->Health();
    if (!health.can_read) return 3;
    if (health.can_write) return 4;
    if (!Contains(health.problem.message(), "max_disk_bytes 1")) return 5;
    if (!health.owner_live || health.owner_pid != parent) return 6;
    return 0;
  });
  ASSERT_TRUE(client.started());
  auto owner = idem_test::OpenStore(dir.StorePath(), options);
  ASSERT_NE(owner, nullptr);
  client.Start();
  const int failed_step = client.Wait();
  EXPECT_EQ(failed_step, 0) << "the client failed at step " << failed_step;
}

// A stopped owner answers nothing: the probe says so within about its request timeout, and a
// call that timed out meanwhile is the last error, still reported after the owner resumes.
TEST(Health, AStoppedOwnerCannotBeReadAndTheProbeEndsByItsTimeout) {
  TempDir dir;
  OwnerProcess owner(dir.StorePath());
  ASSERT_TRUE(owner.ready());
  idem::Options options = TestOptions();
  options.request_timeout = 700ms;
  options.failover_timeout = 700ms;
  IDEM_ASSERT_OPEN(store, dir.StorePath(), options);
  const StoreHealth live = store->Health();
  EXPECT_TRUE(live.can_read);
  EXPECT_TRUE(live.can_write) << live.problem.ToString();
  EXPECT_TRUE(live.owner_live);
  EXPECT_EQ(live.owner_pid, owner.pid());

  owner.Stop();
  const auto start = std::chrono::steady_clock::now();
  const StoreHealth stopped = store->Health();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(stopped.can_read);
  EXPECT_FALSE(stopped.can_write);
  EXPECT_FALSE(stopped.problem.ok());
  EXPECT_FALSE(stopped.owner_live) << "an owner that did not answer is not called live";
  EXPECT_LT(took, 5s) << "the probe waits about one request timeout, not the default 10 s";
  EXPECT_TRUE(stopped.last_error.ok()) << "the probe's own error is no call's";

  const Status failed = store->Get("order-1").status();
  EXPECT_FALSE(failed.ok());
  owner.Continue();
  const StoreHealth resumed = store->Health();
  EXPECT_TRUE(resumed.can_read) << resumed.problem.ToString();
  EXPECT_TRUE(resumed.can_write) << resumed.problem.ToString();
  EXPECT_EQ(resumed.last_error.code(), failed.code()) << resumed.last_error.ToString();
  EXPECT_EQ(resumed.last_error.message(), failed.message());
}

}  // namespace
