// The owner's socket server and its client, over a backend the test controls: refusals at the
// connection cap, slow requests, idle connections, purges longer than a request deadline, and
// the rate-limited log.

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>

#include "sharing/log_limiter.h"
#include "sharing/owner_client.h"
#include "sharing/owner_server.h"
#include "support/response_frames.h"
#include "support/test_util.h"

namespace {

using idem::Result;
using idem::Status;
using idem::sharing::OwnerClient;
using idem::sharing::OwnerServer;
using idem::sharing::OwnerServerOptions;
using idem_test::CapturedLog;
using idem_test::TempDir;
using namespace std::chrono_literals;

// A backend whose Get of "slow" blocks until released, whose Get of a key starting with "nap"
// takes 2 ms, and whose Purge takes a while.
class ControlledBackend final : public idem::engine::Backend {
 public:
  Result<idem::Claim> Begin(const idem::engine::BeginCall&, const idem::Holder&) override {
    return Status::InvalidArgument("not used");
  }
  Status Transition(const idem::engine::TransitionCall&) override {
    return Status::InvalidArgument("not used");
  }
  Result<std::optional<idem::Record>> Get(std::string_view key) override {
    if (key == "slow") {
      std::unique_lock lock(mu_);
      ++blocked_;
      changed_.notify_all();
      changed_.wait(lock, [&] { return released_; });
      --blocked_;
    }
    if (key.substr(0, 3) == "nap") std::this_thread::sleep_for(2ms);  // work, not a wait
    idem::Record record;
    record.key = std::string(key);
    record.state = idem::State::kDone;
    record.result = "result of " + record.key;
    return std::optional<idem::Record>(record);
  }
  Status Forget(std::string_view, idem::Durability, const idem::engine::AsRead*) override {
    return Status::OK();
  }
  Result<idem::engine::ScanPage> Scan(const idem::ScanOptions&, std::size_t, uint64_t) override {
    return idem::engine::ScanPage{};
  }
  Result<idem::TableValue> GetValue(std::string_view, std::string_view) override {
    return Status::InvalidArgument("not used");
  }
  Result<idem::engine::TablePage> ScanTable(std::string_view, const idem::ScanOptions&, std::size_t,
                                            uint64_t) override {
    return Status::InvalidArgument("not used");
  }
  Result<std::vector<std::string>> ListTables() override {
    return Status::InvalidArgument("not used");
  }
  // Purges 15 records, one every 100 ms: longer than the tests' request deadline. Asked for the
  // total, first counts them for 300 ms: longer than a poll of the tests' clients.
  Result<uint64_t> Purge(const idem::PurgeOptions& options) override {
    if (options.progress_total) {
      ++totals_counted_;
      std::this_thread::sleep_for(300ms);  // the walk of a count, not a synchronisation
      options.progress_total(15);
    }
    for (uint64_t purged = 1; purged <= 15; ++purged) {
      std::this_thread::sleep_for(100ms);  // the work of a purge, not a synchronisation
      if (options.progress) options.progress(purged);
    }
    return uint64_t{15};
  }
  Result<idem::Counters> GetCounters() override { return idem::Counters{}; }

  // How many purges were asked for their total.
  int totals_counted() const { return totals_counted_.load(); }

  // Waits until `count` Gets of "slow" are blocked.
  void AwaitBlocked(int count) {
    std::unique_lock lock(mu_);
    changed_.wait(lock, [&] { return blocked_ >= count; });
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  int blocked_ = 0;
  bool released_ = false;
  std::atomic<int> totals_counted_{0};
};

// A server on a socket in a temporary directory, over a ControlledBackend.
class ServerTest : public ::testing::Test {
 protected:
  void StartServer(OwnerServerOptions options) {
    options.log = log_.Sink();
    struct stat info {};
    ASSERT_EQ(stat(dir_.path().c_str(), &info), 0);
    address_ = idem::sharing::SocketAddressFor(dir_.path(), info.st_dev, info.st_ino);
    auto server = OwnerServer::Start(address_, backend_, std::move(options));
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }

  std::unique_ptr<OwnerClient> Client(std::chrono::milliseconds request_timeout = 5s) {
    auto client = OwnerClient::Connect(address_, request_timeout, 5s);
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return client.ok() ? std::move(client).value() : nullptr;
  }

  int RawConnect() {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, address_.in_store.path.data(), address_.in_store.path.size());
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  }

  void TearDown() override {
    backend_.Release();
    server_.reset();
  }

  TempDir dir_;
  ControlledBackend backend_;
  CapturedLog log_;
  idem::sharing::SocketAddress address_;
  std::unique_ptr<OwnerServer> server_;
};

TEST_F(ServerTest, AConnectionOverTheCapIsRefusedWithAStatusNotTakenForALostOwner) {
  StartServer({.max_connections = 2});
  auto first = Client();
  auto second = Client();
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  // Both connections have a request running: neither can make room.
  auto slow1 = std::async(std::launch::async, [&] { return first->Get("slow"); });
  auto slow2 = std::async(std::launch::async, [&] { return second->Get("slow"); });
  backend_.AwaitBlocked(2);

  auto third = Client();
  ASSERT_NE(third, nullptr);
  const auto start = std::chrono::steady_clock::now();
  const Status refused = third->Get("k").status();
  EXPECT_EQ(refused.code(), Status::Code::kBusy) << refused.ToString();
  EXPECT_NE(refused.message().find("limit of 2 connections"), std::string::npos)
      << refused.message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);  // at once, not at the deadline
  EXPECT_FALSE(third->lost());                              // the owner is there: no failover
  EXPECT_EQ(log_.Count("connections have a request running"), 1);
  EXPECT_EQ(log_.CountEvent("connections_busy", idem::LogSeverity::kWarning), 1) << log_.All();

  backend_.Release();
  EXPECT_TRUE(slow1.get().ok());
  EXPECT_TRUE(slow2.get().ok());
  // Once a connection is idle again, a newcomer takes its place. The server marks a connection
  // idle right after writing its reply, which the client may have read already: for that
  // moment a newcomer is still refused, and asks again.
  auto answer = third->Get("k");
  for (const auto until = std::chrono::steady_clock::now() + 2s;
       !answer.ok() && answer.status().code() == Status::Code::kBusy &&
       std::chrono::steady_clock::now() < until;
       answer = third->Get("k")) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_OK_AND_ASSIGN(auto record, std::move(answer));
  EXPECT_TRUE(record.has_value());
  // The client whose idle connection made room reconnects by itself, unaware.
  for (OwnerClient* client : {first.get(), second.get()}) {
    ASSERT_OK_AND_ASSIGN(auto again, client->Get("k"));
    EXPECT_TRUE(again.has_value());
    EXPECT_FALSE(client->lost());
  }
}

// Reads `count` answers to Gets from `fd` (however they arrive together) and returns the key of
// the record each carries.
std::vector<std::string> ReadGetAnswers(int fd, std::size_t count) {
  std::vector<std::string> keys;
  for (const auto& [status, body] : idem_test::ReadAnswers(fd, count)) {
    auto record = status.ok() ? idem::sharing::DecodeOptionalRecord(body)
                              : Result<std::optional<idem::Record>>(status);
    keys.push_back(record.ok() && record->has_value() ? (*record)->key : "(not a record)");
  }
  return keys;
}

TEST_F(ServerTest, RequestsSentTogetherOnOneConnectionAreAnsweredInTheirOrder) {
  StartServer({});
  const int raw = RawConnect();
  ASSERT_GE(raw, 0);
  const auto get = [](std::string_view key) {
    return idem::sharing::EncodeFrame(idem::sharing::EncodeRequest(idem::sharing::GetMessage{key}));
  };
  // Three whole requests and the first half of a fourth, in one write; the rest of it later.
  const std::string fourth = get("d");
  const std::string together = get("a") + get("b") + get("c") + fourth.substr(0, 5);
  ASSERT_EQ(send(raw, together.data(), together.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(together.size()));
  EXPECT_EQ(ReadGetAnswers(raw, 3), (std::vector<std::string>{"a", "b", "c"}));
  ASSERT_EQ(send(raw, fourth.data() + 5, fourth.size() - 5, MSG_NOSIGNAL),
            static_cast<ssize_t>(fourth.size() - 5));
  EXPECT_EQ(ReadGetAnswers(raw, 1), (std::vector<std::string>{"d"}));
  close(raw);
}

TEST_F(ServerTest, TheManyThreadsOfOneProcessShareAFewConnections) {
  // Fewer connections than the client's threads: with a connection per call in flight, some of
  // the 24 calls at once would find all 12 busy and be refused. Pipelined on the process's few
  // shared connections (at most 8) besides the two a call alone may use, none is.
  StartServer({.max_connections = 12});
  auto client = Client();
  ASSERT_NE(client, nullptr);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 24; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const std::string key = "nap-" + std::to_string(t) + "-" + std::to_string(i);
        auto record = client->Get(key);
        if (!record.ok() || !record->has_value() || (*record)->key != key) {
          if (!record.ok()) ADD_FAILURE() << record.status().ToString();
          ++wrong;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_FALSE(client->lost());
  EXPECT_EQ(log_.Count("connections have a request running"), 0);
}

TEST_F(ServerTest, SlowRequestsDoNotHoldUpTheOthers) {
  StartServer({});
  std::vector<std::unique_ptr<OwnerClient>> slow_clients;
  std::vector<std::future<Result<std::optional<idem::Record>>>> slow_calls;
  // More slow requests than the threads the server starts with.
  for (int i = 0; i < 4; ++i) {
    slow_clients.push_back(Client());
    ASSERT_NE(slow_clients.back(), nullptr);
    slow_calls.push_back(
        std::async(std::launch::async, [c = slow_clients.back().get()] { return c->Get("slow"); }));
  }
  backend_.AwaitBlocked(4);
  auto quick = Client(1s);
  ASSERT_NE(quick, nullptr);
  ASSERT_OK_AND_ASSIGN(auto record, quick->Get("k"));
  EXPECT_TRUE(record.has_value());
  backend_.Release();
  for (auto& call : slow_calls) EXPECT_TRUE(call.get().ok());
}

TEST_F(ServerTest, IdleConnectionsAreClosedWithAGoodbyeAndClientsReconnectUnaware) {
  StartServer({.idle_timeout = 200ms});
  auto client = Client();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Get("k").ok());  // its pooled connection is idle from now on
  const int raw = RawConnect();
  ASSERT_GE(raw, 0);
  const auto start = std::chrono::steady_clock::now();
  Result<std::string> frame = idem::sharing::ReadFrame(raw, 1 << 20, start + 10s);
  ASSERT_TRUE(frame.ok()) << frame.status().ToString();
  EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);
  Status status;
  idem::sharing::ResponseKind kind{};
  ASSERT_TRUE(idem::sharing::DecodeResponse(*frame, status, kind).ok());
  EXPECT_EQ(kind, idem::sharing::ResponseKind::kGoodbye);
  close(raw);
  // The client's connection, idle for longer, was closed too; its next call goes through.
  ASSERT_OK_AND_ASSIGN(auto record, client->Get("k"));
  EXPECT_TRUE(record.has_value());
  EXPECT_FALSE(client->lost());
}

TEST_F(ServerTest, APurgeLongerThanTheRequestDeadlineReportsProgressAndFinishes) {
  StartServer({});
  // Each request must end within 500 ms; the purge takes 1.5 s.
  auto client = Client(500ms);
  ASSERT_NE(client, nullptr);
  std::vector<uint64_t> progress;
  idem::PurgeOptions options;
  options.progress = [&](uint64_t so_far) { progress.push_back(so_far); };
  ASSERT_OK_AND_ASSIGN(uint64_t purged, client->Purge(options));
  EXPECT_EQ(purged, 15u);
  ASSERT_GE(progress.size(), 2u);
  EXPECT_EQ(progress.back(), 15u);
  EXPECT_TRUE(std::is_sorted(progress.begin(), progress.end()));
}

// A client that shows the total of a purge gets it from the owner, once, before any count (none
// comes while the owner is still counting); a client that does not is not made to wait for a
// count nobody shows.
TEST_F(ServerTest, APurgeThroughTheOwnerReportsItsTotalFirstAndOnlyWhenAskedFor) {
  StartServer({});
  // Polls of 250 ms: the first ends while the owner counts.
  auto client = Client(500ms);
  ASSERT_NE(client, nullptr);
  std::vector<std::string> reports;
  idem::PurgeOptions options;
  options.progress_total = [&](uint64_t total) {
    reports.push_back("total " + std::to_string(total));
  };
  options.progress = [&](uint64_t so_far) { reports.push_back(std::to_string(so_far)); };
  ASSERT_OK_AND_ASSIGN(uint64_t purged, client->Purge(options));
  EXPECT_EQ(purged, 15u);
  EXPECT_EQ(backend_.totals_counted(), 1);
  ASSERT_GE(reports.size(), 2u);
  EXPECT_EQ(reports.front(), "total 15");
  EXPECT_EQ(std::count(reports.begin(), reports.end(), "total 15"), 1)
      << ::testing::PrintToString(reports);
  EXPECT_EQ(reports.back(), "15");

  options.progress_total = nullptr;
  ASSERT_OK_AND_ASSIGN(purged, client->Purge(options));
  EXPECT_EQ(purged, 15u);
  EXPECT_EQ(backend_.totals_counted(), 1);
}

// A request over the owner's frame limit (from a client whose Options allow larger keys or
// results than the owner's) is refused with a status naming the sizes. Dropped without a word,
// it looked like a lost owner: the Store failed over, resent it, and so on until
// failover_timeout, then reported the owner unreachable.
TEST_F(ServerTest, ARequestOverTheFrameLimitIsRefusedNotTakenForALostOwner) {
  StartServer({.max_frame = 1024});
  auto client = Client();
  ASSERT_NE(client, nullptr);
  // Both a frame that fits the socket's buffer and one the client is still sending when the
  // owner refuses it.
  for (const std::size_t size : {std::size_t{4096}, std::size_t{8} << 20}) {
    const Status refused = client->Get(std::string(size, 'k')).status();
    EXPECT_EQ(refused.code(), Status::Code::kInvalidArgument) << refused.ToString();
    EXPECT_NE(refused.message().find("the limit is 1024 bytes"), std::string::npos)
        << refused.message();
    EXPECT_FALSE(client->lost());
  }
  EXPECT_GE(log_.Count("over the limit of 1024"), 1);
  EXPECT_GE(log_.CountEvent("frame_too_large", idem::LogSeverity::kWarning), 1) << log_.All();
  // The owner goes on serving, the client on a new connection.
  ASSERT_OK_AND_ASSIGN(auto record, client->Get("k"));
  EXPECT_TRUE(record.has_value());
}

TEST(LogLimiter, RepeatsOfAnEventAreCountedNotWritten) {
  std::vector<std::string> lines;
  std::vector<std::string> events;
  idem::sharing::LogLimiter limiter(
      [&](const idem::LogLine& line) {
        lines.emplace_back(line.message);
        events.emplace_back(line.event);
      },
      std::chrono::hours(1));
  const auto warning = idem::LogSeverity::kWarning;
  for (int i = 0; i < 1000; ++i) {
    limiter.Log(warning, "foreign_uid", "refused pid " + std::to_string(i));
  }
  limiter.Log(warning, "connections_busy", "another event");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "refused pid 0");
  EXPECT_EQ(lines[1], "another event");
  EXPECT_EQ(events, (std::vector<std::string>{"foreign_uid", "connections_busy"}));
  idem::sharing::LogLimiter quick([&](std::string_view line) { lines.emplace_back(line); },
                                  std::chrono::milliseconds(0));
  quick.Log(warning, "a", "one");
  quick.Log(warning, "a", "two");
  EXPECT_EQ(lines.back(), "two");
}

}  // namespace
