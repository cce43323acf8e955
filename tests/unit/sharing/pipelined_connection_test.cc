// One connection shared by many threads of a client process (sharing/pipelined_connection.h),
// against an owner played by the test on the other end of a socketpair: every caller gets its
// own answer however the owner batches them; a goodbye, a close or one caller's deadline ends
// the connection and tells every caller still waiting to send its request again; a connection
// with too many callers waiting takes no more.

#include "sharing/pipelined_connection.h"

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <future>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "sharing/protocol.h"
#include "support/test_util.h"

namespace idem::sharing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Exchanged = PipelinedConnection::Exchanged;

// A request frame: any payload does for the connection, which never looks inside a request.
std::string RequestFrame(std::string_view payload) { return EncodeFrame(payload); }

// The owner's side of a socketpair: reads request frames and answers them.
class FakeOwner {
 public:
  explicit FakeOwner(FileDescriptor fd) : fd_(std::move(fd)) {}

  // Reads until `count` more whole requests have arrived (or 30 s), keeping them in order.
  bool ReadRequests(std::size_t count) {
    const auto give_up = Clock::now() + 30s;
    const std::size_t wanted = requests_.size() + count;
    while (requests_.size() < wanted && Clock::now() < give_up) {
      pollfd ready{fd_.get(), POLLIN, 0};
      if (::poll(&ready, 1, 100) <= 0) continue;
      char chunk[4096];
      const ssize_t n = ::recv(fd_.get(), chunk, sizeof chunk, MSG_DONTWAIT);
      if (n <= 0) continue;
      in_.append(chunk, static_cast<std::size_t>(n));
      for (;;) {
        const FrameCut cut = CutFrame(in_, std::numeric_limits<uint32_t>::max());
        if (cut.state != FrameCut::State::kWhole) break;
        requests_.emplace_back(cut.payload);
        in_.erase(0, cut.size);
      }
    }
    return requests_.size() >= wanted;
  }
  // Answers the requests read and not answered yet, in order, in one write; each answer's body
  // is its request's payload.
  void AnswerAll() {
    std::string out;
    for (; answered_ < requests_.size(); ++answered_) {
      out += EncodeFrame(EncodeResponse(Status::OK(), requests_[answered_]));
    }
    Write(out);
  }
  void Write(std::string_view bytes) {
    ASSERT_EQ(::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  // Whether the client side closed the connection (within 30 s), after any bytes still due.
  bool SeesClose() {
    const auto give_up = Clock::now() + 30s;
    while (Clock::now() < give_up) {
      pollfd ready{fd_.get(), POLLIN, 0};
      if (::poll(&ready, 1, 100) <= 0) continue;
      char chunk[4096];
      if (::recv(fd_.get(), chunk, sizeof chunk, MSG_DONTWAIT) == 0) return true;
    }
    return false;
  }
  void Close() { fd_ = FileDescriptor(); }
  const std::vector<std::string>& requests() const { return requests_; }

 private:
  FileDescriptor fd_;
  std::string in_;
  std::vector<std::string> requests_;
  std::size_t answered_ = 0;
};

struct Ends {
  std::shared_ptr<PipelinedConnection> client;
  std::unique_ptr<FakeOwner> owner;
};

Ends Connected() {
  int fds[2] = {-1, -1};
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  return {std::make_shared<PipelinedConnection>(FileDescriptor(fds[0])),
          std::make_unique<FakeOwner>(FileDescriptor(fds[1]))};
}

struct Call {
  Exchanged outcome = Exchanged::kEnded;
  std::string answer;
};

// Sends `payload` on `connection` from a thread of its own.
std::future<Call> Send(const std::shared_ptr<PipelinedConnection>& connection, std::string payload,
                       std::chrono::milliseconds timeout = 30s) {
  return std::async(std::launch::async, [connection, payload = std::move(payload), timeout] {
    Call call;
    call.outcome = connection->Exchange(RequestFrame(payload), Clock::now() + timeout, call.answer);
    return call;
  });
}

// The body of an OK answer frame's payload.
std::string Body(const std::string& answer) {
  Status status;
  ResponseKind kind = ResponseKind::kAnswer;
  Result<std::string_view> body = DecodeResponse(answer, status, kind);
  EXPECT_TRUE(body.ok() && status.ok() && kind == ResponseKind::kAnswer);
  return body.ok() ? std::string(*body) : std::string();
}

TEST(PipelinedConnection, EveryCallerGetsItsOwnAnswerHoweverTheOwnerBatchesThem) {
  Ends ends = Connected();
  constexpr int kThreads = 16;
  constexpr int kCallsEach = 200;
  // The owner answers whatever has arrived, in one write each time: batches of 1 to 16.
  std::thread owner([&] {
    while (ends.owner->requests().size() < std::size_t{kThreads * kCallsEach} &&
           ends.owner->ReadRequests(1)) {
      ends.owner->AnswerAll();
    }
  });
  std::vector<std::thread> callers;
  std::atomic<int> wrong{0};
  for (int t = 0; t < kThreads; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 0; i < kCallsEach; ++i) {
        const std::string payload = "caller " + std::to_string(t) + " call " + std::to_string(i);
        std::string answer;
        const Exchanged outcome =
            ends.client->Exchange(RequestFrame(payload), Clock::now() + 30s, answer);
        if (outcome != Exchanged::kAnswered || Body(answer) != payload) ++wrong;
      }
    });
  }
  for (auto& caller : callers) caller.join();
  owner.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(ends.owner->requests().size(), std::size_t{kThreads * kCallsEach});
  EXPECT_FALSE(ends.client->ended());
}

TEST(PipelinedConnection, AGoodbyeEndsItAndTheCallersBehindItAreToldToSendAgain) {
  for (const ResponseKind kind : {ResponseKind::kGoodbye, ResponseKind::kRefusal}) {
    SCOPED_TRACE(static_cast<int>(kind));
    Ends ends = Connected();
    // Three callers, their requests in a known order on the wire.
    auto first = Send(ends.client, "first");
    ASSERT_TRUE(ends.owner->ReadRequests(1));
    auto second = Send(ends.client, "second");
    ASSERT_TRUE(ends.owner->ReadRequests(1));
    auto third = Send(ends.client, "third");
    ASSERT_TRUE(ends.owner->ReadRequests(1));
    // The first is answered; then the owner says goodbye (or refuses) and closes.
    ends.owner->Write(EncodeFrame(EncodeResponse(Status::OK(), "first")) +
                      EncodeFrame(EncodeClosing(kind, Status::Unavailable("closing"))));
    ends.owner->Close();
    const Call answered = first.get();
    ASSERT_EQ(answered.outcome, Exchanged::kAnswered);
    EXPECT_EQ(Body(answered.answer), "first");
    EXPECT_EQ(second.get().outcome, Exchanged::kEnded);
    EXPECT_EQ(third.get().outcome, Exchanged::kEnded);
    EXPECT_TRUE(ends.client->ended());
    // Nothing more goes on it.
    std::string answer;
    EXPECT_EQ(ends.client->Exchange(RequestFrame("later"), Clock::now() + 30s, answer),
              Exchanged::kEnded);
  }
}

TEST(PipelinedConnection, AnOwnerThatClosesEndsItForEveryCallerWaiting) {
  Ends ends = Connected();
  std::vector<std::future<Call>> calls;
  for (int i = 0; i < 8; ++i) calls.push_back(Send(ends.client, "call " + std::to_string(i)));
  ASSERT_TRUE(ends.owner->ReadRequests(8));
  ends.owner->Close();
  for (auto& call : calls) EXPECT_EQ(call.get().outcome, Exchanged::kEnded);
  EXPECT_TRUE(ends.client->ended());
}

TEST(PipelinedConnection, ACallerWhoseDeadlinePassesTimesOutAndEndsItForTheOthers) {
  Ends ends = Connected();
  // The owner reads and never answers (it is stopped, or overloaded).
  auto patient = Send(ends.client, "patient", 60s);
  ASSERT_TRUE(ends.owner->ReadRequests(1));
  const auto start = Clock::now();
  auto hurried = Send(ends.client, "hurried", 300ms);
  ASSERT_TRUE(ends.owner->ReadRequests(1));
  EXPECT_EQ(hurried.get().outcome, Exchanged::kTimedOut);
  // The patient caller is told at once to send again elsewhere, long before its own deadline:
  // its answer would have come after the one that did not.
  EXPECT_EQ(patient.get().outcome, Exchanged::kEnded);
  EXPECT_LT(Clock::now() - start, 30s);
  // The owner sees the connection closed, and so drops the Begins on it it has not run.
  EXPECT_TRUE(ends.owner->SeesClose());
}

TEST(PipelinedConnection, WithTooManyCallersWaitingItTakesNoMoreAndSendsNothing) {
  Ends ends = Connected();
  std::vector<std::future<Call>> calls;
  for (std::size_t i = 0; i < PipelinedConnection::kMaxWaiting; ++i) {
    calls.push_back(Send(ends.client, "call " + std::to_string(i)));
  }
  ASSERT_TRUE(ends.owner->ReadRequests(PipelinedConnection::kMaxWaiting));
  std::string answer;
  EXPECT_EQ(ends.client->Exchange(RequestFrame("one too many"), Clock::now() + 30s, answer),
            Exchanged::kFull);
  ends.owner->AnswerAll();
  for (auto& call : calls) EXPECT_EQ(call.get().outcome, Exchanged::kAnswered);
  // Room again: the next is carried.
  auto next = Send(ends.client, "next");
  ASSERT_TRUE(ends.owner->ReadRequests(1));
  ends.owner->AnswerAll();
  EXPECT_EQ(Body(next.get().answer), "next");
  EXPECT_EQ(ends.owner->requests().size(), PipelinedConnection::kMaxWaiting + 1);
}

}  // namespace
}  // namespace idem::sharing
