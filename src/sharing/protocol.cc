// Requests and the frames around every message; the answers' bodies are in protocol_answers.cc.

#include "sharing/protocol.h"

#include <fmt/format.h>

#include <optional>

namespace idem::sharing {
namespace {

Status Malformed(std::string_view what) {
  return Status::InvalidArgument(fmt::format("malformed {}", what));
}

// The body of each op, read from `r`: `bad` is set when a field is out of its range. Whether the
// fields were all there, and nothing after them, the caller checks with r.done().
BeginMessage ReadBegin(Reader& r, bool& bad) {
  BeginCall c;
  c.key = r.Bytes();
  c.type = r.Bytes();
  c.fingerprint = r.Bytes();
  c.lease = r.Millis();
  c.retention = r.Millis();
  c.request_id = r.U64();
  c.durability = EnumField(r, Durability::kPeriodic, bad);
  if (c.lease.count() <= 0 || c.retention.count() <= 0) bad = true;
  return BeginMessage{c};
}

TransitionMessage ReadTransition(Reader& r, bool& bad) {
  TransitionCall c;
  c.request.kind = EnumField(r, engine::TransitionKind::kSaveCheckpoint, bad);
  c.key = r.Bytes();
  c.request.token = r.U64();
  c.request.payload = r.Bytes();
  c.request.failure = EnumField(r, Failure::kTerminal, bad);
  c.request.lease = r.Millis();
  c.durability = EnumField(r, Durability::kPeriodic, bad);
  if (c.request.kind == engine::TransitionKind::kExtend && c.request.lease.count() <= 0) {
    bad = true;
  }
  TransitionMessage message{c, {}};
  const uint32_t count = r.U32();
  for (uint32_t i = 0; i < count && !r.failed(); ++i) {
    const std::string_view table = r.Bytes();
    const std::string_view key = r.Bytes();
    const uint8_t has_value = r.U8();
    const std::string_view value = has_value == 1 ? r.Bytes() : std::string_view();
    const uint8_t has_if_version = r.U8();
    const std::optional<uint64_t> if_version =
        has_if_version == 1 ? std::optional(r.U64()) : std::nullopt;
    if (has_value > 1 || has_if_version > 1) bad = true;
    if (has_value == 1) {
      message.writes.Put(table, key, value, if_version);
    } else {
      message.writes.Delete(table, key, if_version);
    }
  }
  const uint32_t required = r.U32();
  for (uint32_t i = 0; i < required && !r.failed(); ++i) {
    const std::string_view table = r.Bytes();
    const std::string_view key = r.Bytes();
    message.writes.Require(table, key, r.U64());
  }
  return message;
}

ReserveMessage ReadReserve(Reader& r, bool& bad) {
  ReserveMessage m;
  m.call.claim_key = r.Bytes();
  m.call.token = r.U64();
  m.call.hold = r.Millis();
  m.call.wait = r.Millis();
  const uint32_t count = r.U32();
  for (uint32_t i = 0; i < count && !r.failed(); ++i) {
    const std::string_view table = r.Bytes();
    m.call.keys.emplace_back(table, r.Bytes());
  }
  if (m.call.hold.count() <= 0 || m.call.wait.count() < 0) bad = true;
  return m;
}

ScanTableMessage ReadScanTable(Reader& r) {
  ScanTableMessage m;
  m.table = r.Bytes();
  m.options.prefix = r.Bytes();
  m.options.start_after = r.Bytes();
  m.limit = r.U32();
  m.view = r.U64();
  return m;
}

ForgetMessage ReadForget(Reader& r, bool& bad) {
  ForgetMessage m;
  m.key = r.Bytes();
  m.durability = EnumField(r, Durability::kPeriodic, bad);
  return m;
}

ScanMessage ReadScan(Reader& r) {
  ScanMessage m;
  m.options.prefix = r.Bytes();
  m.options.start_after = r.Bytes();
  m.limit = r.U32();
  m.view = r.U64();
  return m;
}

PurgeMessage ReadPurge(Reader& r, bool& bad) {
  PurgeMessage m;
  m.ticket = r.U64();
  const uint8_t dry_run = r.U8();
  const uint8_t compact = r.U8();
  m.wait = r.Millis();
  const uint8_t count_total = r.U8();
  if (dry_run > 1 || compact > 1 || m.wait.count() < 0 || count_total > 1) bad = true;
  m.options.dry_run = dry_run == 1;
  m.options.compact = compact == 1;
  m.count_total = count_total == 1;
  return m;
}

BackupMessage ReadBackup(Reader& r, bool& bad) {
  BackupMessage m;
  m.ticket = r.U64();
  m.wait = r.Millis();
  m.destination = r.Bytes();
  if (m.wait.count() < 0 || m.destination.empty() || m.destination[0] != '/') bad = true;
  return m;
}

// The body of `op`; nullopt for an op this version does not have.
std::optional<Request> ReadBody(Op op, Reader& r, bool& bad) {
  switch (op) {
    case Op::kBegin:
      return ReadBegin(r, bad);
    case Op::kTransition:
      return ReadTransition(r, bad);
    case Op::kGet:
      return GetMessage{r.Bytes()};
    case Op::kForget:
      return ReadForget(r, bad);
    case Op::kScan:
      return ReadScan(r);
    case Op::kPurge:
      return ReadPurge(r, bad);
    case Op::kCounters:
      return CountersMessage{};
    case Op::kBackup:
      return ReadBackup(r, bad);
    case Op::kGetValue: {
      const std::string_view table = r.Bytes();
      return GetValueMessage{table, r.Bytes()};
    }
    case Op::kScanTable:
      return ReadScanTable(r);
    case Op::kListTables:
      return ListTablesMessage{};
    case Op::kOpenView:
      return OpenViewMessage{};
    case Op::kCloseView:
      return CloseViewMessage{r.U64()};
    case Op::kReserve:
      return ReadReserve(r, bad);
    case Op::kUnreserve: {
      const std::string_view claim_key = r.Bytes();
      return UnreserveMessage{claim_key, r.U64()};
    }
  }
  return std::nullopt;
}

}  // namespace

std::string EncodeRequest(const Request& request) {
  Writer w;
  w.U8(kProtocolVersion);
  std::visit(
      [&w](const auto& message) {
        using T = std::decay_t<decltype(message)>;
        if constexpr (std::is_same_v<T, BeginMessage>) {
          const BeginCall& c = message.call;
          w.U8(static_cast<uint8_t>(Op::kBegin));
          w.Bytes(c.key);
          w.Bytes(c.type);
          w.Bytes(c.fingerprint);
          w.Millis(c.lease);
          w.Millis(c.retention);
          w.U64(c.request_id);
          w.U8(static_cast<uint8_t>(c.durability));
        } else if constexpr (std::is_same_v<T, TransitionMessage>) {
          const TransitionCall& c = message.call;
          w.U8(static_cast<uint8_t>(Op::kTransition));
          w.U8(static_cast<uint8_t>(c.request.kind));
          w.Bytes(c.key);
          w.U64(c.request.token);
          w.Bytes(c.request.payload);
          w.U8(static_cast<uint8_t>(c.request.failure));
          w.Millis(c.request.lease);
          w.U8(static_cast<uint8_t>(c.durability));
          // The call's writes, or a decoded message's own.
          const WriteSet& writes = c.writes != nullptr ? *c.writes : message.writes;
          w.U32(static_cast<uint32_t>(writes.writes().size()));
          for (const WriteSet::Write& write : writes.writes()) {
            w.Bytes(write.table);
            w.Bytes(write.key);
            w.U8(write.value ? 1 : 0);
            if (write.value) w.Bytes(*write.value);
            w.U8(write.if_version ? 1 : 0);
            if (write.if_version) w.U64(*write.if_version);
          }
          w.U32(static_cast<uint32_t>(writes.requirements().size()));
          for (const WriteSet::Requirement& required : writes.requirements()) {
            w.Bytes(required.table);
            w.Bytes(required.key);
            w.U64(required.version);
          }
        } else if constexpr (std::is_same_v<T, GetValueMessage>) {
          w.U8(static_cast<uint8_t>(Op::kGetValue));
          w.Bytes(message.table);
          w.Bytes(message.key);
        } else if constexpr (std::is_same_v<T, ScanTableMessage>) {
          w.U8(static_cast<uint8_t>(Op::kScanTable));
          w.Bytes(message.table);
          w.Bytes(message.options.prefix);
          w.Bytes(message.options.start_after);
          w.U32(message.limit);
          w.U64(message.view);
        } else if constexpr (std::is_same_v<T, ListTablesMessage>) {
          w.U8(static_cast<uint8_t>(Op::kListTables));
        } else if constexpr (std::is_same_v<T, OpenViewMessage>) {
          w.U8(static_cast<uint8_t>(Op::kOpenView));
        } else if constexpr (std::is_same_v<T, CloseViewMessage>) {
          w.U8(static_cast<uint8_t>(Op::kCloseView));
          w.U64(message.view);
        } else if constexpr (std::is_same_v<T, ReserveMessage>) {
          const ReserveCall& c = message.call;
          w.U8(static_cast<uint8_t>(Op::kReserve));
          w.Bytes(c.claim_key);
          w.U64(c.token);
          w.Millis(c.hold);
          w.Millis(c.wait);
          w.U32(static_cast<uint32_t>(c.keys.size()));
          for (const auto& [table, key] : c.keys) {
            w.Bytes(table);
            w.Bytes(key);
          }
        } else if constexpr (std::is_same_v<T, UnreserveMessage>) {
          w.U8(static_cast<uint8_t>(Op::kUnreserve));
          w.Bytes(message.claim_key);
          w.U64(message.token);
        } else if constexpr (std::is_same_v<T, GetMessage>) {
          w.U8(static_cast<uint8_t>(Op::kGet));
          w.Bytes(message.key);
        } else if constexpr (std::is_same_v<T, ForgetMessage>) {
          w.U8(static_cast<uint8_t>(Op::kForget));
          w.Bytes(message.key);
          w.U8(static_cast<uint8_t>(message.durability));
        } else if constexpr (std::is_same_v<T, ScanMessage>) {
          w.U8(static_cast<uint8_t>(Op::kScan));
          w.Bytes(message.options.prefix);
          w.Bytes(message.options.start_after);
          w.U32(message.limit);
          w.U64(message.view);
        } else if constexpr (std::is_same_v<T, PurgeMessage>) {
          w.U8(static_cast<uint8_t>(Op::kPurge));
          w.U64(message.ticket);
          w.U8(message.options.dry_run ? 1 : 0);
          w.U8(message.options.compact ? 1 : 0);
          w.Millis(message.wait);
          w.U8(message.count_total ? 1 : 0);
        } else if constexpr (std::is_same_v<T, BackupMessage>) {
          w.U8(static_cast<uint8_t>(Op::kBackup));
          w.U64(message.ticket);
          w.Millis(message.wait);
          w.Bytes(message.destination);
        } else {
          static_assert(std::is_same_v<T, CountersMessage>);
          w.U8(static_cast<uint8_t>(Op::kCounters));
        }
      },
      request);
  return std::move(w.buffer());
}

Result<Request> DecodeRequest(std::string_view frame) {
  Reader r(frame);
  const uint8_t version = r.U8();
  if (r.failed()) return Malformed("request: empty frame");
  if (version != kProtocolVersion) {
    return Status::InvalidArgument(fmt::format(
        "unsupported protocol version {} (this owner speaks {})", version, kProtocolVersion));
  }
  const uint8_t op = r.U8();
  bool out_of_range = false;
  std::optional<Request> request = ReadBody(static_cast<Op>(op), r, out_of_range);
  if (!request) return Malformed(fmt::format("request: unknown op {}", op));
  if (!r.done()) {
    return Malformed(fmt::format("request: fields truncated or trailing bytes (op {})", op));
  }
  if (out_of_range) return Malformed(fmt::format("request: a field is out of range (op {})", op));
  return std::move(*request);
}

std::string EncodeResponse(const Status& status, std::string_view body) {
  Writer w;
  w.U8(kProtocolVersion);
  w.U8(static_cast<uint8_t>(status.code()));
  w.Bytes(status.message());
  w.U8(static_cast<uint8_t>(ResponseKind::kAnswer));
  if (status.ok()) w.buffer().append(body);
  return std::move(w.buffer());
}

std::string EncodeClosing(ResponseKind kind, const Status& status) {
  Writer w;
  w.U8(kProtocolVersion);
  w.U8(static_cast<uint8_t>(status.code()));
  w.Bytes(status.message());
  w.U8(static_cast<uint8_t>(kind));
  return std::move(w.buffer());
}

Result<std::string_view> DecodeResponse(std::string_view frame, Status& status,
                                        ResponseKind& kind) {
  Reader r(frame);
  const uint8_t version = r.U8();
  const uint8_t code = r.U8();
  const std::string_view message = r.Bytes();
  if (r.failed()) return Status::Unavailable("the store's owner sent a malformed response");
  if (version != kProtocolVersion) {
    // An owner of another version: only the first three fields are known to mean the same.
    const bool error = code != 0 && code <= static_cast<uint8_t>(Status::Code::kNewerVersion);
    status = error ? Status(static_cast<Status::Code>(code), std::string(message))
                   : Status::Busy(fmt::format(
                         "the store's owner speaks protocol version {}, this process {}", version,
                         kProtocolVersion));
    kind = ResponseKind::kRefusal;
    return std::string_view();
  }
  const uint8_t kind_byte = r.U8();
  if (r.failed() || code > static_cast<uint8_t>(Status::Code::kConflict) ||
      kind_byte > static_cast<uint8_t>(ResponseKind::kGoodbye) || (kind_byte != 0 && code == 0) ||
      (code != 0 && !r.done())) {
    return Status::Unavailable("the store's owner sent a malformed response");
  }
  status = Status(static_cast<Status::Code>(code), std::string(message));
  kind = static_cast<ResponseKind>(kind_byte);
  return frame.substr(frame.size() - r.remaining());
}

uint8_t RequestVersion(std::string_view frame) {
  return frame.empty() ? 0 : static_cast<uint8_t>(frame[0]);
}

std::string OwnerName(pid_t pid) {
  return pid > 0 ? fmt::format("the store's owner (pid {})", pid) : "the store's owner";
}

}  // namespace idem::sharing
