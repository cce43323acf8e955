// The wire protocol between a store's owner and the other processes sharing it: small,
// versioned, length-prefixed binary frames over a UNIX stream socket (docs/format.md).
//
//   frame    := u32 length (little-endian, bytes that follow) | payload
//   request  := u8 version | u8 op | body of the op
//   response := u8 version | u8 status code | bytes message | u8 kind | body (kAnswer, code OK)
//
// A connection's requests are run one at a time, in the order sent, and answered in that order;
// a client may send several before the first answer (version 9). Every request can be sent
// again after a lost reply without changing its outcome, so a client resends it to the next
// owner after a failover, or on another connection when the one it was sent on ended first. Besides
// answers, the owner sends a refusal (instead of serving a connection) and a goodbye (before
// closing an idle one); after either it closes the connection without carrying out any request sent
// on it.
//
// The first three fields of a response keep their layout in every version: a client reads a
// response of another version as a refusal from an owner that speaks another protocol.

#ifndef IDEM_SHARING_PROTOCOL_H_
#define IDEM_SHARING_PROTOCOL_H_

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "engine/backend.h"
#include "sharing/protocol_answers.h"
#include "sharing/protocol_ops.h"
#include "sharing/wire_codec.h"

namespace idem::sharing {

// Never change these values: they are on the wire.
// Version 2: responses carry their kind; Purge runs as a job polled by bounded requests.
// Version 3: records and counters have the wire's own encoding (sharing/wire_codec.h), no longer
// the store's on-disk record format.
// Version 4: status code 12, NewerVersion.
// Version 5: the counters answer says since when the owner has owned the store (its pid comes
// from the connection's peer credentials).
// Version 6: op 8, Backup, a job polled as Purge is.
// Version 7: a Purge request says whether its client wants the total (PurgeOptions::
// progress_total), and the job's answers carry it once the owner has counted it.
// Version 8: application tables: a Transition carries its table writes; ops 9, GetValue, 10,
// ScanTable, and 11, ListTables; status code 13, Conflict.
// Version 9: a client may send requests on a connection before the answers to its earlier ones
// (pipelining); the owner runs them one at a time in the order sent and answers in that order.
// Version 10: a Transition's table writes are followed by its required keys (WriteSet::Require):
// keys read and not written, each with the version it must still be at. A peer of version 9
// would apply the writes without that check; the exact version match refuses it instead. And
// read views (Store::ScanSnapshot): ops 12, OpenView, and 13, CloseView; a Scan and a ScanTable
// name the view they read (0: none, the latest).
// Version 11: Execute's key reservations after a conflict (backend/key_reservations.h): ops 14,
// Reserve, and 15, Unreserve. An owner of version 10 would let the client's reruns lose every
// race again; the exact version match makes the client fail over to an owner that speaks 11.
// Version 12: op 16, Writable (Store::Health); a Forget carries its condition (ForgetIfUnchanged).
// Version 13: op 17, Stats (Store::GetStats): the counts the owner keeps of the records as it
// writes them, and its engine's health.
// Version 14: the engine's health in a Stats answer ends with the damaged table files the owner
// found (a count and the first one in words), which Store::Health reports.
// Version 15: the counters answer ends with the owner's latency histograms (OwnerCounters::
// latencies).
inline constexpr uint8_t kProtocolVersion = 15;
// The largest response frame a client reads. Answers are bounded by the owner's own limits; this
// only guards against a broken peer.
inline constexpr std::size_t kMaxResponseFrame = std::size_t{1} << 30;

// What a response is. Never change these values: they are on the wire.
enum class ResponseKind : uint8_t {
  kAnswer = 0,   // the answer to the request; the connection stays open
  kRefusal = 1,  // the owner does not serve this connection (why: the status) and closes it
  kGoodbye = 2,  // the owner closes this idle connection; send the request on a new one
};

// A request of one op (sharing/protocol_ops.h), without its frame header.
template <class Message>
requires requires { Message::kOp; }
std::string EncodeRequest(const Message& message) {
  Writer w;
  w.U8(kProtocolVersion);
  w.U8(Message::kOp);
  message.Write(w);
  return std::move(w.buffer());
}
// A request of any op.
inline std::string EncodeRequest(const Request& request) {
  return std::visit([](const auto& message) { return EncodeRequest(message); }, request);
}
// kInvalidArgument naming the problem for a frame that is not a valid request of this version.
Result<Request> DecodeRequest(std::string_view frame);

// Responses: the status, then for an OK status the op's result.
std::string EncodeResponse(const Status& status, std::string_view body = {});
// The response to a request of `Message` (sharing/protocol_ops.h) that `answered`, what its
// CallOn returns: the status alone for an op without an answer body, else the OK response with
// the answer's body.
template <class Message, class Answered>
std::string EncodeAnswer(const Answered& answered) {
  if constexpr (std::is_same_v<typename Message::Answer, NoAnswer>) {
    static_assert(std::is_same_v<Answered, Status>,
                  "an op without an answer body returns a Status");
    return EncodeResponse(answered);
  } else {
    if (!answered.ok()) return EncodeResponse(answered.status());
    return EncodeResponse(Status::OK(), Message::Answer::Encode(*answered));
  }
}
// A refusal or a goodbye (not OK: the status says why).
std::string EncodeClosing(ResponseKind kind, const Status& status);
// Splits a response into its status, kind and body; a malformed response is kUnavailable. A
// response of another protocol version is returned as a refusal (kBusy when its own code is
// not an error), whatever follows its message.
Result<std::string_view> DecodeResponse(std::string_view frame, Status& status, ResponseKind& kind);
// The version byte of a request frame, or 0 when there is none.
uint8_t RequestVersion(std::string_view frame);

// The owner as messages name it: "the store's owner (pid N)", or "the store's owner" when its pid
// is not known (0: it runs in a PID namespace the reader cannot see).
std::string OwnerName(pid_t pid);

}  // namespace idem::sharing

#endif  // IDEM_SHARING_PROTOCOL_H_
