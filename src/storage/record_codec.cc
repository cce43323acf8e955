#include "storage/record_codec.h"

#include <fmt/format.h>

#include <cstring>
#include <utility>

#include "util/hex.h"

namespace idem::storage {
namespace {

constexpr uint8_t kRetryableFlag = 1;
constexpr uint8_t kTookOverFlag = 2;
constexpr uint8_t kKnownFlags = kRetryableFlag | kTookOverFlag;

std::size_t VarintLength(std::size_t value) {
  std::size_t length = 1;
  for (; value >= 0x80; value >>= 7) ++length;
  return length;
}

// Writes `value` at `out` as a LEB128 varint; returns the end of what it wrote.
char* StoreVarint32(char* out, uint32_t value) {
  while (value >= 0x80) {
    *out++ = static_cast<char>(value | 0x80);
    value >>= 7;
  }
  *out++ = static_cast<char>(value);
  return out;
}

// Reads from the front of `in`, advancing it; false when `in` is too short or malformed.
bool GetVarint32(std::string_view& in, uint32_t& value) {
  value = 0;
  for (int shift = 0; shift <= 28 && !in.empty(); shift += 7) {
    const auto byte = static_cast<uint8_t>(in.front());
    in.remove_prefix(1);
    value |= static_cast<uint32_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

bool GetLengthPrefixed(std::string_view& in, std::string& out) {
  uint32_t size = 0;
  if (!GetVarint32(in, size) || size > in.size()) return false;
  out.assign(in.data(), size);
  in.remove_prefix(size);
  return true;
}

Status Corrupt(std::string_view key, std::string_view what) {
  return Status::Corruption(fmt::format("record {}: {}", EscapeKey(key), what));
}

}  // namespace

std::string EncodeRecord(const Record& record) {
  std::string out;
  EncodeRecordInto(record, out);
  return out;
}

void EncodeRecordInto(const Record& record, std::string& out) {
  const std::string_view fields[] = {record.type, record.fingerprint, record.result,
                                     record.checkpoint};
  std::size_t size = kFixedHeaderSize;
  for (std::string_view field : fields) size += VarintLength(field.size()) + field.size();
  // Written in place into a buffer of the exact size: records are encoded on every write.
  // (resize() keeps `out`'s capacity: a reused buffer allocates nothing.)
  out.resize(size);
  char* p = out.data();
  p[0] = static_cast<char>(kRecordFormatVersion);
  StoreFixed64(p + 1, static_cast<uint64_t>(ToMicros(record.expires)));
  p[9] = static_cast<char>(record.state);
  p[10] = static_cast<char>((record.retryable ? kRetryableFlag : 0) |
                            (record.holder.took_over ? kTookOverFlag : 0));
  StoreFixed64(p + 11, record.token);
  StoreFixed32(p + 19, record.attempts);
  StoreFixed64(p + 23, static_cast<uint64_t>(ToMicros(record.created)));
  StoreFixed64(p + 31, static_cast<uint64_t>(ToMicros(record.updated)));
  StoreFixed64(p + 39, static_cast<uint64_t>(ToMicros(record.lease_deadline)));
  StoreFixed32(p + 47, record.holder.pid);
  StoreFixed64(p + 51, record.holder.process_start);
  StoreFixed64(p + 59, record.holder.request_id);
  StoreFixed64(p + 67, record.holder.pid_scope);
  p += kFixedHeaderSize;
  for (std::string_view field : fields) {
    p = StoreVarint32(p, static_cast<uint32_t>(field.size()));
    if (!field.empty()) std::memcpy(p, field.data(), field.size());
    p += field.size();
  }
}

Result<Record> DecodeRecord(std::string_view key, std::string_view value) {
  Record record;
  IDEM_RETURN_IF_ERROR(DecodeRecordInto(key, value, record));
  return record;
}

Status DecodeRecordInto(std::string_view key, std::string_view value, Record& record) {
  if (value.empty()) return Corrupt(key, "value is empty");
  const auto version = static_cast<uint8_t>(value[0]);
  if (version > kRecordFormatVersion) {
    return Status::NewerVersion(fmt::format(
        "record {} has format version {}, written by a newer release of idem; this one reads "
        "versions 1 to {}: upgrade idem to read it",
        EscapeKey(key), version, kRecordFormatVersion));
  }
  if (version != kRecordFormatVersion && version != kRecordFormatVersion1) {
    return Corrupt(
        key, fmt::format("unknown record format version {} (this library reads versions 1 to {})",
                         version, kRecordFormatVersion));
  }
  const std::size_t header_size =
      version == kRecordFormatVersion1 ? kFixedHeaderSizeV1 : kFixedHeaderSize;
  if (value.size() < header_size) {
    return Corrupt(key, fmt::format("value is {} bytes, shorter than the header of {}",
                                    value.size(), header_size));
  }
  const char* p = value.data();
  for (const auto& [offset, name] : {std::pair<std::size_t, const char*>{1, "expires"},
                                     {23, "created"},
                                     {31, "updated"},
                                     {39, "lease_deadline"}}) {
    const auto micros = static_cast<int64_t>(GetFixed64(p + offset));
    if (!util::MicrosFitTimePoint(micros)) {
      return Corrupt(
          key, fmt::format("{} time {} us is outside the range of a time point", name, micros));
    }
  }
  record.key.assign(key);
  record.timed_out = false;  // derived on read, never stored
  record.expires = FromMicros(static_cast<int64_t>(GetFixed64(p + 1)));
  const auto state = static_cast<uint8_t>(p[9]);
  if (state > static_cast<uint8_t>(State::kFailed)) {
    return Corrupt(key, fmt::format("unknown state {}", state));
  }
  record.state = static_cast<State>(state);
  const auto flags = static_cast<uint8_t>(p[10]);
  if ((flags & ~kKnownFlags) != 0) return Corrupt(key, fmt::format("unknown flags {}", flags));
  record.retryable = (flags & kRetryableFlag) != 0;
  record.holder.took_over = (flags & kTookOverFlag) != 0;
  record.token = GetFixed64(p + 11);
  record.attempts = GetFixed32(p + 19);
  record.created = FromMicros(static_cast<int64_t>(GetFixed64(p + 23)));
  record.updated = FromMicros(static_cast<int64_t>(GetFixed64(p + 31)));
  record.lease_deadline = FromMicros(static_cast<int64_t>(GetFixed64(p + 39)));
  record.holder.pid = GetFixed32(p + 47);
  record.holder.process_start = GetFixed64(p + 51);
  record.holder.request_id = GetFixed64(p + 59);
  // Version 1 did not say in which boot and namespaces the pid was read: an unknown scope,
  // whose holder is never judged dead before its lease ends.
  record.holder.pid_scope = version == kRecordFormatVersion1 ? 0 : GetFixed64(p + 67);

  std::string_view rest = value.substr(header_size);
  if (!GetLengthPrefixed(rest, record.type) || !GetLengthPrefixed(rest, record.fingerprint) ||
      !GetLengthPrefixed(rest, record.result) || !GetLengthPrefixed(rest, record.checkpoint)) {
    return Corrupt(key, "a length-prefixed field runs past the end of the value");
  }
  if (!rest.empty()) {
    return Corrupt(key, fmt::format("{} unexpected bytes after the last field", rest.size()));
  }
  return Status::OK();
}

std::optional<int64_t> PeekExpiresMicros(std::string_view value) {
  if (value.size() < kFixedHeaderSizeV1) return std::nullopt;
  const auto version = static_cast<uint8_t>(value[0]);
  if (version != kRecordFormatVersion && version != kRecordFormatVersion1) return std::nullopt;
  return static_cast<int64_t>(GetFixed64(value.data() + kExpiresOffset));
}

std::string EscapeKey(std::string_view key, std::size_t max_bytes) {
  std::string out;
  const std::size_t shown = std::min(key.size(), max_bytes);
  for (std::size_t i = 0; i < shown; ++i) {
    const auto byte = static_cast<uint8_t>(key[i]);
    if (byte >= 0x20 && byte < 0x7F && byte != '\\') {
      out += static_cast<char>(byte);
    } else {
      util::AppendEscapedByte(out, byte);
    }
  }
  if (shown < key.size()) out += "...";
  return fmt::format("\"{}\"", out);
}

}  // namespace idem::storage
