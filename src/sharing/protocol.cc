// Requests and the frames around every message; the answers' bodies are in protocol_answers.cc.

#include "sharing/protocol.h"

#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <optional>
#include <utility>
#include <variant>

namespace idem::sharing {
namespace {

Status Malformed(std::string_view what) {
  return Status::InvalidArgument(fmt::format("malformed {}", what));
}

// The reader of op I + 1 at index I.
template <std::size_t... I>
constexpr auto MakeReaders(std::index_sequence<I...> /*indexes*/) {
  return std::array<Request (*)(Reader&, bool&), sizeof...(I)>{[](Reader& r, bool& bad) {
    return Request(std::in_place_index<I>, std::variant_alternative_t<I, Request>::Read(r, bad));
  }...};
}
constexpr auto kReaders = MakeReaders(std::make_index_sequence<kOpCount>());

}  // namespace

void WriteWriteSet(Writer& w, const WriteSet& writes) {
  w.U32(static_cast<uint32_t>(writes.writes().size()));
  for (const WriteSet::Write& write : writes.writes()) {
    w.Bytes(write.table);
    w.Bytes(write.key);
    w.Bool(write.value.has_value());
    if (write.value) w.Bytes(*write.value);
    w.Bool(write.if_version.has_value());
    if (write.if_version) w.U64(*write.if_version);
  }
  w.U32(static_cast<uint32_t>(writes.requirements().size()));
  for (const WriteSet::Requirement& required : writes.requirements()) {
    w.Bytes(required.table);
    w.Bytes(required.key);
    w.U64(required.version);
  }
}

void ReadWriteSet(Reader& r, bool& bad, WriteSet& writes) {
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
      writes.Put(table, key, value, if_version);
    } else {
      writes.Delete(table, key, if_version);
    }
  }
  const uint32_t required = r.U32();
  for (uint32_t i = 0; i < required && !r.failed(); ++i) {
    const std::string_view table = r.Bytes();
    const std::string_view key = r.Bytes();
    writes.Require(table, key, r.U64());
  }
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
  if (op < 1 || op > kOpCount) return Malformed(fmt::format("request: unknown op {}", op));
  bool out_of_range = false;
  Request request = kReaders[op - 1](r, out_of_range);
  if (!r.done()) {
    return Malformed(fmt::format("request: fields truncated or trailing bytes (op {})", op));
  }
  if (out_of_range) return Malformed(fmt::format("request: a field is out of range (op {})", op));
  return request;
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
