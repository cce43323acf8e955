// The wire protocol carried over a real socket: frames (sharing/socket.h) between the two ends of
// a socketpair(AF_UNIX, SOCK_STREAM), with the codec of sharing/protocol.h. Whole round trips,
// frames that arrive in pieces or leave in partial writes, frames over the size limit, and peers
// that stall or close in the middle of a frame: each ends in a clear status, never a hang.

#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sharing/protocol.h"
#include "sharing/socket.h"
#include "support/test_util.h"
#include "util/process.h"
#include "util/time.h"

namespace idem::sharing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// How long any one step may take before the test calls it a hang; the tests end far sooner.
constexpr auto kHang = 30s;

struct SocketPair {
  FileDescriptor client;
  FileDescriptor owner;
};

SocketPair MakeSocketPair() {
  int fds[2] = {-1, -1};
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0) << std::strerror(errno);
  return SocketPair{FileDescriptor(fds[0]), FileDescriptor(fds[1])};
}

// Writes `bytes` with one write(2), whole (the pieces in these tests fit the socket's buffer).
void WritePiece(int fd, std::string_view bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

// Waits until the reader of `fd` has taken every byte sent to it: the next piece then arrives
// at a reader that is in the middle of the frame.
bool AwaitDrained(int fd) {
  return idem_test::WaitFor(
      [fd] {
        int unread = -1;
        return ::ioctl(fd, FIONREAD, &unread) == 0 && unread == 0;
      },
      kHang);
}

Result<Request> Decoded(const Result<std::string>& frame) {
  if (!frame.ok()) return frame.status();
  return DecodeRequest(*frame);
}

engine::BeginCall SampleBegin() {
  engine::BeginCall call;
  call.key = std::string_view("key\0\xff", 5);
  call.type = "charge";
  call.fingerprint = "f00d";
  call.lease = 1500ms;
  call.retention = 24h;
  call.request_id = 0x0123456789abcdefULL;
  call.durability = Durability::kBuffered;
  return call;
}

// One request of every op, each sent as a frame and read back whole on the other end: the
// decoded request encodes to the very bytes that were sent.
TEST(ProtocolOverSocket, EveryRequestRoundTripsWhole) {
  const std::string result(70000, 'r');  // more than one read's worth
  engine::TransitionCall complete;
  complete.key = "k";
  complete.request.kind = engine::TransitionKind::kComplete;
  complete.request.token = 42;
  complete.request.payload = result;
  PurgeMessage purge;
  purge.options.dry_run = true;
  purge.ticket = 9;
  purge.wait = 250ms;
  const std::vector<Request> requests = {
      BeginMessage{SampleBegin()},
      TransitionMessage{complete, {}},
      GetMessage{"k"},
      ForgetMessage{"k", Durability::kSync},
      ScanMessage{ScanOptions{.prefix = "p", .start_after = "p1"}, 100},
      purge,
      CountersMessage{}};
  SocketPair pair = MakeSocketPair();
  for (const Request& request : requests) {
    const std::string payload = EncodeRequest(request);
    ASSERT_OK(SendFrame(pair.client.get(), EncodeFrame(payload), Clock::now() + kHang));
    Result<std::string> frame = ReadFrame(pair.owner.get(), 1 << 20, Clock::now() + kHang);
    ASSERT_OK_AND_ASSIGN(const Request decoded, Decoded(frame));
    EXPECT_EQ(decoded.index(), request.index());
    EXPECT_EQ(EncodeRequest(decoded), payload) << "op " << request.index() + 1;
  }
}

// A Begin and the owner's answer to it, as OwnerClient and the server exchange them.
TEST(ProtocolOverSocket, ABeginAndItsClaimRoundTripWhole) {
  SocketPair pair = MakeSocketPair();
  const engine::BeginCall call = SampleBegin();
  ASSERT_OK(SendFrame(pair.client.get(), EncodeFrame(EncodeRequest(BeginMessage{call})),
                      Clock::now() + kHang));
  Result<std::string> request_frame = ReadFrame(pair.owner.get(), 1 << 20, Clock::now() + kHang);
  ASSERT_OK_AND_ASSIGN(const Request request, Decoded(request_frame));
  ASSERT_TRUE(std::holds_alternative<BeginMessage>(request));
  const engine::BeginCall& got = std::get<BeginMessage>(request).call;
  EXPECT_EQ(got.key, call.key);
  EXPECT_EQ(got.type, call.type);
  EXPECT_EQ(got.fingerprint, call.fingerprint);
  EXPECT_EQ(got.lease, call.lease);
  EXPECT_EQ(got.retention, call.retention);
  EXPECT_EQ(got.request_id, call.request_id);
  EXPECT_EQ(got.durability, call.durability);

  Claim claim;
  claim.outcome = Outcome::kAcquired;
  claim.token = 7;
  claim.record.key = std::string(call.key);
  claim.record.state = State::kPending;
  claim.record.attempts = 1;
  claim.record.created = util::FromMicros(1'700'000'000'000'000);
  ASSERT_OK(SendFrame(pair.owner.get(),
                      EncodeFrame(EncodeResponse(Status::OK(), EncodeClaim(claim))),
                      Clock::now() + kHang));
  ASSERT_OK_AND_ASSIGN(const std::string response,
                       ReadFrame(pair.client.get(), 1 << 20, Clock::now() + kHang));
  Status status;
  ResponseKind kind = ResponseKind::kRefusal;
  ASSERT_OK_AND_ASSIGN(const std::string_view body, DecodeResponse(response, status, kind));
  EXPECT_OK(status);
  EXPECT_EQ(kind, ResponseKind::kAnswer);
  ASSERT_OK_AND_ASSIGN(const Claim answer, DecodeClaim(body));
  EXPECT_EQ(answer.outcome, claim.outcome);
  EXPECT_EQ(answer.token, claim.token);
  EXPECT_EQ(answer.record, claim.record);
}

// The frame arrives in pieces, each taken by the reader before the next is sent: the header
// split in two, then the body in several parts. ReadFrame puts them back together.
TEST(ProtocolOverSocket, AFrameWrittenInPiecesIsReassembled) {
  SocketPair pair = MakeSocketPair();
  const std::string payload = EncodeRequest(GetMessage{std::string(10000, 'k')});
  const std::string frame = EncodeFrame(payload);
  std::future<Result<std::string>> read = std::async(std::launch::async, [&] {
    return ReadFrame(pair.owner.get(), 1 << 20, Clock::now() + kHang);
  });
  const std::vector<std::size_t> cuts = {1, 3, kFrameHeaderSize + 1, 4096, 4100, 9000};
  std::size_t sent = 0;
  for (const std::size_t cut : cuts) {
    WritePiece(pair.client.get(), std::string_view(frame).substr(sent, cut - sent));
    sent = cut;
    ASSERT_TRUE(AwaitDrained(pair.owner.get())) << "the reader did not take bytes up to " << cut;
  }
  WritePiece(pair.client.get(), std::string_view(frame).substr(sent));
  ASSERT_EQ(read.wait_for(kHang), std::future_status::ready);
  ASSERT_OK_AND_ASSIGN(const std::string got, read.get());
  EXPECT_EQ(got, payload);
}

// A frame larger than what the socket holds: SendFrame's writes are partial (it waits for room)
// and ReadFrame's reads too, and the frame arrives whole.
TEST(ProtocolOverSocket, AFrameLargerThanTheSocketBufferGoesThroughInPartialWrites) {
  SocketPair pair = MakeSocketPair();
  int buffer = 0;
  socklen_t size = sizeof buffer;
  ASSERT_EQ(::getsockopt(pair.client.get(), SOL_SOCKET, SO_SNDBUF, &buffer, &size), 0);
  std::string payload(8 << 20, '\0');
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 131 % 251);
  ASSERT_GT(payload.size(), 4 * static_cast<std::size_t>(buffer));
  std::future<Status> send = std::async(std::launch::async, [&] {
    return SendFrame(pair.client.get(), EncodeFrame(payload), Clock::now() + kHang);
  });
  Result<std::string> got = ReadFrame(pair.owner.get(), 16 << 20, Clock::now() + kHang);
  ASSERT_EQ(send.wait_for(kHang), std::future_status::ready);
  EXPECT_OK(send.get());
  ASSERT_OK(got.status());
  EXPECT_TRUE(*got == payload) << "the frame read back differs from the one sent";
}

// A header announcing more than the reader's limit is refused at once, naming the size and the
// limit: the reader does not wait for (or buffer) a body it will not take.
TEST(ProtocolOverSocket, AFrameOverTheLimitIsRefusedAtItsHeader) {
  SocketPair pair = MakeSocketPair();
  const std::string header = EncodeFrame(std::string(1025, 'x')).substr(0, kFrameHeaderSize);
  WritePiece(pair.client.get(), header);
  const auto start = Clock::now();
  Result<std::string> got = ReadFrame(pair.owner.get(), 1024, start + kHang);
  EXPECT_LT(Clock::now() - start, kHang / 2);
  ASSERT_CODE(got.status(), kInvalidArgument);
  EXPECT_EQ(got.status().message(), "frame of 1025 bytes is over the limit of 1024");
}

// The writer of an oversized frame is not left hanging: once the reader has refused the frame it
// closes the connection (a refused frame leaves the stream mid-frame, so the connection is never
// read again), and the writer, blocked for room, learns it at once.
TEST(ProtocolOverSocket, TheWriterOfARefusedFrameLearnsOfTheCloseAtOnce) {
  SocketPair pair = MakeSocketPair();
  const std::string frame = EncodeFrame(std::string(8 << 20, 'x'));
  const auto start = Clock::now();
  std::future<Status> send = std::async(std::launch::async, [&] {
    return SendFrame(pair.client.get(), frame, Clock::now() + kHang);
  });
  Result<std::string> got = ReadFrame(pair.owner.get(), 1 << 20, Clock::now() + kHang);
  ASSERT_CODE(got.status(), kInvalidArgument);
  pair.owner = FileDescriptor();
  ASSERT_EQ(send.wait_for(kHang), std::future_status::ready);
  EXPECT_CODE(send.get(), kUnavailable);
  EXPECT_LT(Clock::now() - start, kHang / 2);
}

// Each side sends one frame and waits for the answer: bytes past the frame are a peer that does
// not follow the protocol.
TEST(ProtocolOverSocket, BytesPastTheFrameAreRefused) {
  SocketPair pair = MakeSocketPair();
  const std::string frame = EncodeFrame(EncodeRequest(GetMessage{"k"}));
  WritePiece(pair.client.get(), frame + frame);
  Result<std::string> got = ReadFrame(pair.owner.get(), 1 << 20, Clock::now() + kHang);
  EXPECT_CODE(got.status(), kInvalidArgument);
}

// A peer that closes in the middle of a frame, in its header or in its body, whether the reader
// is waiting already or comes later: kUnavailable at once, not a wait for the deadline.
TEST(ProtocolOverSocket, APeerClosingInTheMiddleOfAFrameIsAClearErrorNotAHang) {
  const std::string frame = EncodeFrame(EncodeRequest(GetMessage{std::string(5000, 'k')}));
  for (const std::size_t cut : {std::size_t{2}, kFrameHeaderSize, std::size_t{3000}}) {
    for (const bool reader_waits : {false, true}) {
      SCOPED_TRACE("closed after " + std::to_string(cut) + " bytes, reader waiting " +
                   std::to_string(reader_waits));
      SocketPair pair = MakeSocketPair();
      const auto start = Clock::now();
      std::future<Result<std::string>> read;
      if (reader_waits) {
        read = std::async(std::launch::async, [&] {
          return ReadFrame(pair.owner.get(), 1 << 20, Clock::now() + kHang);
        });
      }
      WritePiece(pair.client.get(), std::string_view(frame).substr(0, cut));
      if (reader_waits) {
        ASSERT_TRUE(AwaitDrained(pair.owner.get()));
      }
      pair.client = FileDescriptor();
      if (!reader_waits) {
        read = std::async(std::launch::deferred, [&] {
          return ReadFrame(pair.owner.get(), 1 << 20, Clock::now() + kHang);
        });
      }
      const Result<std::string> got = read.get();
      EXPECT_CODE(got.status(), kUnavailable);
      EXPECT_EQ(got.status().message(), "connection closed by the peer");
      EXPECT_LT(Clock::now() - start, kHang / 2);
    }
  }
}

// A peer that stops in the middle of a frame without closing: kTimedOut at the deadline.
TEST(ProtocolOverSocket, APeerStallingInTheMiddleOfAFrameTimesOutAtTheDeadline) {
  SocketPair pair = MakeSocketPair();
  const std::string frame = EncodeFrame(EncodeRequest(GetMessage{"key"}));
  WritePiece(pair.client.get(), std::string_view(frame).substr(0, kFrameHeaderSize + 2));
  const auto start = Clock::now();
  Result<std::string> got = ReadFrame(pair.owner.get(), 1 << 20, start + 200ms);
  EXPECT_GE(Clock::now() - start, 200ms);
  EXPECT_LT(Clock::now() - start, kHang / 2);
  ASSERT_CODE(got.status(), kTimedOut);
  EXPECT_EQ(got.status().message(), "the peer stalled in the middle of a frame");
}

// OwnerClient reads what the owner said before closing even after its own send failed, with a
// deadline already past: a frame that has arrived is read, a missing one is kTimedOut at once.
TEST(ProtocolOverSocket, AFrameThatHasArrivedIsReadEvenPastTheDeadline) {
  SocketPair pair = MakeSocketPair();
  const std::string closing = EncodeClosing(ResponseKind::kRefusal, Status::Busy("full"));
  WritePiece(pair.owner.get(), EncodeFrame(closing));
  ASSERT_OK_AND_ASSIGN(const std::string got,
                       ReadFrame(pair.client.get(), 1 << 20, Clock::now() - 1s));
  EXPECT_EQ(got, closing);
  EXPECT_CODE(ReadFrame(pair.client.get(), 1 << 20, Clock::now() - 1s).status(), kTimedOut);
}

// SpinUntilReady: the wait without sleeping that a client does for its answer and the owner for
// the next request on a connection.
// CutFrame is the only reader of frame headers: the server, both clients and these tests split
// their buffers with it.
TEST(CutFrame, WaitsForAHeaderThenForTheWholePayload) {
  const std::string frame = EncodeFrame("hello");
  for (std::size_t available = 0; available < frame.size(); ++available) {
    const FrameCut cut = CutFrame(std::string_view(frame).substr(0, available), 100);
    EXPECT_EQ(cut.state, FrameCut::State::kPartial) << available << " bytes";
    EXPECT_EQ(cut.length, available >= kFrameHeaderSize ? 5u : 0u) << available << " bytes";
  }
  const FrameCut cut = CutFrame(frame, 100);
  ASSERT_EQ(cut.state, FrameCut::State::kWhole);
  EXPECT_EQ(cut.payload, "hello");
  EXPECT_EQ(cut.size, frame.size());
  EXPECT_EQ(cut.payload.data(), frame.data() + kFrameHeaderSize) << "the payload is not copied";
}

TEST(CutFrame, TakesOnlyTheFirstOfSeveralFrames) {
  const std::string frames = EncodeFrame("one") + EncodeFrame("") + EncodeFrame("three");
  std::string_view rest = frames;
  std::vector<std::string> payloads;
  for (FrameCut cut = CutFrame(rest, 100); cut.state == FrameCut::State::kWhole;
       cut = CutFrame(rest, 100)) {
    payloads.emplace_back(cut.payload);
    rest.remove_prefix(cut.size);
  }
  EXPECT_EQ(payloads, (std::vector<std::string>{"one", "", "three"}));
  EXPECT_TRUE(rest.empty());
  // The first frame whole and the next one's header only.
  const std::string one_and_a_header = EncodeFrame("one") + EncodeFrame("next").substr(0, 4);
  const FrameCut first = CutFrame(one_and_a_header, 100);
  ASSERT_EQ(first.state, FrameCut::State::kWhole);
  EXPECT_EQ(first.payload, "one");
  EXPECT_EQ(CutFrame(std::string_view(one_and_a_header).substr(first.size), 100).state,
            FrameCut::State::kPartial);
}

TEST(CutFrame, AnOversizedFrameIsKnownFromItsHeaderAlone) {
  const std::string header = EncodeFrame(std::string(101, 'x')).substr(0, kFrameHeaderSize);
  const FrameCut cut = CutFrame(header, 100);
  EXPECT_EQ(cut.state, FrameCut::State::kOversized);
  EXPECT_EQ(cut.length, 101u);
  EXPECT_EQ(CutFrame(EncodeFrame(std::string(100, 'x')), 100).state, FrameCut::State::kWhole)
      << "the limit itself is allowed";
  // A length near 2^32 in a short buffer: partial when allowed, never a wrapped sum (a 32-bit
  // size_t holds neither the header plus it nor the buffer it would need).
  const std::string huge = {'\xfd', '\xff', '\xff', '\xff', 'x', 'y'};
  EXPECT_EQ(CutFrame(huge, 100).state, FrameCut::State::kOversized);
  const FrameCut allowed = CutFrame(huge, std::numeric_limits<uint32_t>::max());
  EXPECT_EQ(allowed.state, FrameCut::State::kPartial);
  EXPECT_EQ(allowed.length, 0xfffffffdu);
}

TEST(SpinUntilReady, ReturnsOnceBytesArriveWhileItSpins) {
  SocketPair pair = MakeSocketPair();
  auto writer = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(20ms);
    WritePiece(pair.client.get(), "x");
  });
  const short ready = SpinUntilReady(pair.owner.get(), POLLIN, kHang, [] { return true; });
  writer.get();
  EXPECT_NE(ready & POLLIN, 0);
}

TEST(SpinUntilReady, GivesUpAtTheEndOfItsBudget) {
  SocketPair pair = MakeSocketPair();
  const auto start = Clock::now();
  EXPECT_EQ(SpinUntilReady(pair.owner.get(), POLLIN, std::chrono::microseconds(30ms),
                           [] { return true; }),
            0);
  EXPECT_GE(Clock::now() - start, 30ms);
  EXPECT_LT(Clock::now() - start, kHang / 2);
}

TEST(SpinUntilReady, StopsWhenSpinningIsNoLongerWorthIt) {
  SocketPair pair = MakeSocketPair();
  int asked = 0;
  const auto start = Clock::now();
  EXPECT_EQ(SpinUntilReady(pair.owner.get(), POLLIN, kHang, [&] { return ++asked < 5; }), 0);
  EXPECT_EQ(asked, 5);
  EXPECT_LT(Clock::now() - start, kHang / 2);
}

TEST(SpinUntilReady, AtMostHalfTheCoresSpinAtOnceAndAnotherThreadBlocksInstead) {
  const int allowed = std::max(1, static_cast<int>(util::UsableCores() / 2));
  SocketPair idle = MakeSocketPair();
  std::atomic<int> inside{0};
  std::atomic<bool> release{false};
  std::vector<std::future<short>> spinners;
  for (int i = 0; i < allowed; ++i) {
    spinners.push_back(std::async(std::launch::async, [&] {
      bool counted = false;
      return SpinUntilReady(idle.owner.get(), POLLIN, kHang, [&] {
        if (!std::exchange(counted, true)) ++inside;
        return !release.load();
      });
    }));
  }
  ASSERT_TRUE(idem_test::WaitFor([&] { return inside.load() == allowed; }, kHang));
  // Bytes are there, but every spinning place is taken: no poll at all, 0 at once.
  SocketPair ready = MakeSocketPair();
  WritePiece(ready.client.get(), "x");
  EXPECT_EQ(SpinUntilReady(ready.owner.get(), POLLIN, kHang, [] { return true; }), 0);
  release = true;
  for (auto& spinner : spinners) EXPECT_EQ(spinner.get(), 0);
  // A place is free again.
  EXPECT_NE(SpinUntilReady(ready.owner.get(), POLLIN, kHang, [] { return true; }) & POLLIN, 0);
}

}  // namespace
}  // namespace idem::sharing
