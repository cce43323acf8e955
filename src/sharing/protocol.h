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
#include <variant>

#include "engine/backend.h"
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
inline constexpr uint8_t kProtocolVersion = 11;
// The largest response frame a client reads. Answers are bounded by the owner's own limits; this
// only guards against a broken peer.
inline constexpr std::size_t kMaxResponseFrame = std::size_t{1} << 30;
enum class Op : uint8_t {
  kBegin = 1,
  kTransition = 2,
  kGet = 3,
  kForget = 4,
  kScan = 5,
  kPurge = 6,
  kCounters = 7,
  kBackup = 8,
  kGetValue = 9,
  kScanTable = 10,
  kListTables = 11,
  kOpenView = 12,
  kCloseView = 13,
  kReserve = 14,
  kUnreserve = 15,
};

// The longest an owner waits on one Reserve request before it answers "not yet": a waiting
// client holds a server thread no longer than this, then asks again (keeping its place).
inline constexpr std::chrono::milliseconds kMaxReserveWait{20};

// What a response is. Never change these values: they are on the wire.
enum class ResponseKind : uint8_t {
  kAnswer = 0,   // the answer to the request; the connection stays open
  kRefusal = 1,  // the owner does not serve this connection (why: the status) and closes it
  kGoodbye = 2,  // the owner closes this idle connection; send the request on a new one
};

// The body of each request, as the server sees it once decoded. Views point into the frame.
struct BeginMessage {
  BeginCall call;
};
// call.writes is null in a decoded message: the writes (and requirements) are `writes` (the server
// points the call at them; a pointer would not survive the message being moved).
struct TransitionMessage {
  TransitionCall call;
  WriteSet writes;
};
struct GetMessage {
  std::string_view key;
};
struct ForgetMessage {
  std::string_view key;
  Durability durability;
};
struct ScanMessage {
  ScanOptions options;
  uint32_t limit;
  uint64_t view = Backend::kLatest;
};
// Starts the purge job `ticket` (chosen at random by the client, one per Store::Purge call) or
// asks how the one already started is going. The owner answers when the job is done or after
// `wait`, whichever comes first, with a PurgeProgress: every request is bounded however long the
// purge takes. The callbacks of options do not travel: the answers carry what they report.
struct PurgeMessage {
  PurgeOptions options;
  uint64_t ticket = 0;
  std::chrono::milliseconds wait{0};
  // The client wants the total (it has a progress_total): the job counts it before purging.
  // Read when the job starts; counting costs a walk over the due index entries, so a client that
  // does not show the total does not ask.
  bool count_total = false;
};
struct PurgeProgress {
  uint64_t count = 0;  // records purged (or counted, in a dry run) so far
  bool done = false;   // true: count is the result
  // How many records the purge expects to visit, once counted (only when the client asked).
  std::optional<uint64_t> total;
};
struct CountersMessage {};
struct GetValueMessage {
  std::string_view table;
  std::string_view key;
};
struct ListTablesMessage {};
struct ScanTableMessage {
  std::string_view table;
  ScanOptions options;
  uint32_t limit;
  uint64_t view = Backend::kLatest;
};
// Opens a read view (Backend::OpenView), answered with its id (EncodeViewId). The owner ends it
// with the connection it was opened on, if CloseView does not first.
struct OpenViewMessage {};
struct CloseViewMessage {
  uint64_t view = 0;
};
// Reserves table keys for a claim (Backend::Reserve), answered with EncodeGranted once granted
// or after min(call.wait, kMaxReserveWait). The owner also ends the reservation with the
// connection it was asked on: a client that dies holds no key after that.
struct ReserveMessage {
  ReserveCall call;
};
struct UnreserveMessage {
  std::string_view claim_key;
  uint64_t token = 0;
};
// Starts the backup job `ticket` (one per Store::Backup call) into `destination` (an absolute
// path, on the owner's file systems) or asks how it is going; answered as a purge poll is, with
// a PurgeProgress whose count is 0, without a total.
struct BackupMessage {
  uint64_t ticket = 0;
  std::chrono::milliseconds wait{0};
  std::string_view destination;
};

using Request = std::variant<BeginMessage, TransitionMessage, GetMessage, ForgetMessage,
                             ScanMessage, PurgeMessage, CountersMessage, BackupMessage,
                             GetValueMessage, ScanTableMessage, ListTablesMessage, OpenViewMessage,
                             CloseViewMessage, ReserveMessage, UnreserveMessage>;

std::string EncodeRequest(const Request& request);
// kInvalidArgument naming the problem for a frame that is not a valid request of this version.
Result<Request> DecodeRequest(std::string_view frame);

// Responses: the status, then for an OK status the op's result.
std::string EncodeResponse(const Status& status, std::string_view body = {});
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

std::string EncodeClaim(const Claim& claim);
Result<Claim> DecodeClaim(std::string_view body);
std::string EncodeOptionalRecord(const std::optional<Record>& record);
Result<std::optional<Record>> DecodeOptionalRecord(std::string_view body);
std::string EncodeScanPage(const ScanPage& page);
Result<ScanPage> DecodeScanPage(std::string_view body);
std::string EncodeTableValue(const TableValue& value);
Result<TableValue> DecodeTableValue(std::string_view body);
std::string EncodeTablePage(const TablePage& page);
Result<TablePage> DecodeTablePage(std::string_view body);
std::string EncodeGranted(bool granted);
Result<bool> DecodeGranted(std::string_view body);
std::string EncodeViewId(uint64_t view);
Result<uint64_t> DecodeViewId(std::string_view body);
std::string EncodeTableNames(const std::vector<std::string>& names);
Result<std::vector<std::string>> DecodeTableNames(std::string_view body);
// The owner's counters and since when it has owned the store (OwnerCounters::since; live and
// pid are the client's to fill in).
std::string EncodeCounters(const OwnerCounters& counters);
Result<OwnerCounters> DecodeCounters(std::string_view body);
std::string EncodePurgeProgress(const PurgeProgress& progress);
Result<PurgeProgress> DecodePurgeProgress(std::string_view body);

}  // namespace idem::sharing

#endif  // IDEM_SHARING_PROTOCOL_H_
