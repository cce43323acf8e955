// The requests of the owner's wire protocol (sharing/protocol.h, docs/format.md), one struct per
// op (protocol_record_ops.h: 1 to 8, protocol_table_ops.h: 9 to 17), with all that is particular
// to it side by side: its number (kOp), its fields, how they are written and read (Write, Read),
// its answer (Answer), what the owner runs for it (CallOn), and how it travels (the traits below).
// `Request` lists them in the order of their numbers: it is the protocol's table of ops, checked
// below. The encoder and decoder (protocol.cc), the owner's dispatch (OwnerServer::RunOp) and the
// client's calls (OwnerClient::Ask) are generic over it.
//
// A field read from a frame is a view into that frame. Read sets `bad` for a field out of its
// range; whether every field was there, and nothing after them, DecodeRequest checks.
// Never change an op's number or the order of its fields: they are on the wire.
//
// The traits, false where an op says nothing:
//   Pipelinable()      it may wait on a client's shared connection behind other requests: it
//                      does not wait on the owner's disk (a synced write there would not share
//                      its fsync with the writes behind it), and is answered at once (not a job
//                      poll, a scan page or a listing);
//   JoinsWriteGroup()  the owner may run it in a write group (engine/backend.h): it writes one
//                      record and returns before a sync;
//   kKeptWhenAbandoned the owner still carries it out after its client closed the connection:
//                      it may record the result of work already done, which a retry then finds.

#ifndef IDEM_SHARING_PROTOCOL_OPS_H_
#define IDEM_SHARING_PROTOCOL_OPS_H_

#include <cstddef>
#include <utility>
#include <variant>

#include "sharing/protocol_record_ops.h"
#include "sharing/protocol_table_ops.h"

namespace idem::sharing {

// The ops, in the order of their numbers: alternative i is op i + 1. Never reorder; add at the
// end (with a new kProtocolVersion).
using Request =
    std::variant<BeginMessage, TransitionMessage, GetMessage, ForgetMessage, ScanMessage,
                 PurgeMessage, CountersMessage, BackupMessage, GetValueMessage, ScanTableMessage,
                 ListTablesMessage, OpenViewMessage, CloseViewMessage, ReserveMessage,
                 UnreserveMessage, WritableMessage, StatsMessage>;
inline constexpr std::size_t kOpCount = std::variant_size_v<Request>;

template <std::size_t... I>
constexpr bool NumberedInOrder(std::index_sequence<I...> /*indexes*/) {
  return ((std::variant_alternative_t<I, Request>::kOp == I + 1) && ...);
}
static_assert(NumberedInOrder(std::make_index_sequence<kOpCount>()),
              "Request lists the ops in the order of their numbers, from 1, without gaps");

// The traits (above) of a message, and of a decoded request.
template <class Message>
bool IsPipelinable(const Message& message) {
  if constexpr (requires { message.Pipelinable(); }) {
    return message.Pipelinable();
  } else {
    return false;
  }
}
template <class Message>
bool JoinsWriteGroup(const Message& message) {
  if constexpr (requires { message.JoinsWriteGroup(); }) {
    return message.JoinsWriteGroup();
  } else {
    return false;
  }
}
template <class Message>
constexpr bool KeptWhenAbandoned(const Message& /*message*/) {
  if constexpr (requires { Message::kKeptWhenAbandoned; }) {
    return Message::kKeptWhenAbandoned;
  } else {
    return false;
  }
}
inline bool JoinsWriteGroup(const Request& request) {
  return std::visit([](const auto& message) { return JoinsWriteGroup(message); }, request);
}
inline bool KeptWhenAbandoned(const Request& request) {
  return std::visit([](const auto& message) { return KeptWhenAbandoned(message); }, request);
}

}  // namespace idem::sharing

#endif  // IDEM_SHARING_PROTOCOL_OPS_H_
