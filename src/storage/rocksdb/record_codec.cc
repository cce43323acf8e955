#include "storage/rocksdb/record_codec.h"

#include <fmt/format.h>

#include <cstring>
#include <tuple>
#include <utility>

#include "util/escape.h"
#include "util/hex.h"
#include "util/utf8.h"

namespace idem::storage {
namespace {

constexpr uint8_t kRetryableFlag = 1;
constexpr uint8_t kTookOverFlag = 2;
// The flags of versions 1 to 3.
constexpr uint8_t kStateFlags = kRetryableFlag | kTookOverFlag;
// Version 4 only: which of the optional parts follow the times.
constexpr uint8_t kHolderFlag = 4;
constexpr uint8_t kTypeFlag = 8;
constexpr uint8_t kFingerprintFlag = 16;
constexpr uint8_t kResultFlag = 32;
constexpr uint8_t kCheckpointFlag = 64;
constexpr uint8_t kVersion4Flags =
    kStateFlags | kHolderFlag | kTypeFlag | kFingerprintFlag | kResultFlag | kCheckpointFlag;
// The longest a header can be: version 3's fixed part (version 4's plus the holder's two fixed
// fields), then attempts and pid (varint32, up to 5 bytes) and four varint64 (up to 10).
constexpr std::size_t kLongestHeader = kFixedHeaderSizeV3 + 2 * 5 + 4 * 10;

std::size_t VarintLength(std::size_t value) {
  std::size_t length = 1;
  for (; value >= 0x80; value >>= 7) ++length;
  return length;
}

// Writes `value` at `out` as a LEB128 varint; returns the end of what it wrote.
char* StoreVarint(char* out, uint64_t value) {
  while (value >= 0x80) {
    *out++ = static_cast<char>(value | 0x80);
    value >>= 7;
  }
  *out++ = static_cast<char>(value);
  return out;
}

// Reads a varint of at most `bits` bits from the front of `in`, advancing it; false when `in`
// ends inside it or it holds more bits (an encoder never writes those, so they are damage).
bool GetVarint(std::string_view& in, uint64_t& value, int bits) {
  value = 0;
  for (int shift = 0; shift < bits && !in.empty(); shift += 7) {
    const auto byte = static_cast<uint8_t>(in.front());
    in.remove_prefix(1);
    const uint64_t payload = byte & 0x7F;
    if (shift > bits - 7 && (payload >> (bits - shift)) != 0) return false;
    value |= payload << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

bool GetVarint32(std::string_view& in, uint32_t& value) {
  uint64_t wide = 0;
  if (!GetVarint(in, wide, 32)) return false;
  value = static_cast<uint32_t>(wide);
  return true;
}

// A time as its signed difference from another, zigzag-coded (small either way round) and
// computed modulo 2^64, so that any two times round-trip, however far apart.
uint64_t TimeDelta(Record::TimePoint time, Record::TimePoint base) {
  const auto delta = static_cast<int64_t>(static_cast<uint64_t>(ToMicros(time)) -
                                          static_cast<uint64_t>(ToMicros(base)));
  return (static_cast<uint64_t>(delta) << 1) ^ static_cast<uint64_t>(delta >> 63);
}
int64_t FromTimeDelta(uint64_t zigzag, int64_t base_micros) {
  const uint64_t delta = (zigzag >> 1) ^ (~(zigzag & 1) + 1);
  return static_cast<int64_t>(static_cast<uint64_t>(base_micros) + delta);
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

uint8_t StateFlags(const Record& record) {
  return static_cast<uint8_t>((record.retryable ? kRetryableFlag : 0) |
                              (record.holder.took_over ? kTookOverFlag : 0));
}

bool HasHolder(const Holder& holder) {
  return holder.pid != 0 || holder.process_start != 0 || holder.pid_scope != 0 ||
         holder.request_id != 0;
}

// The text fields in their stored order, each with its version 4 flag.
struct TextField {
  uint8_t flag;
  std::string Record::*field;
};
constexpr TextField kTextFields[] = {{kTypeFlag, &Record::type},
                                     {kFingerprintFlag, &Record::fingerprint},
                                     {kResultFlag, &Record::result},
                                     {kCheckpointFlag, &Record::checkpoint}};

// Writes the text fields at `p`, which has room for FieldsSize(record, all) bytes: with `all`
// every field (versions 1 to 3), else only those that are not empty (version 4).
void StoreFields(const Record& record, bool all, char* p) {
  for (const TextField& text : kTextFields) {
    const std::string& field = record.*text.field;
    if (!all && field.empty()) continue;
    p = StoreVarint(p, field.size());
    if (!field.empty()) std::memcpy(p, field.data(), field.size());
    p += field.size();
  }
}

std::size_t FieldsSize(const Record& record, bool all) {
  std::size_t size = 0;
  for (const TextField& text : kTextFields) {
    const std::size_t length = (record.*text.field).size();
    if (all || length != 0) size += VarintLength(length) + length;
  }
  return size;
}

// The value after its header: the text fields, every one (versions 1 to 3) or those whose flag
// is set (version 4), the others emptied. Nothing may follow them.
Status DecodeFields(std::string_view key, std::string_view rest, bool all, uint8_t flags,
                    Record& record) {
  for (const TextField& text : kTextFields) {
    std::string& field = record.*text.field;
    if (!all && (flags & text.flag) == 0) {
      field.clear();
    } else if (!GetLengthPrefixed(rest, field)) {
      return Corrupt(key, "a length-prefixed field runs past the end of the value");
    }
  }
  if (!rest.empty()) {
    return Corrupt(key, fmt::format("{} unexpected bytes after the last field", rest.size()));
  }
  return Status::OK();
}

// The state and flags bytes, at the same offsets in every version, checked and decoded;
// `known_flags` are the flag bits of the value's version.
Status DecodeState(std::string_view key, uint8_t state, uint8_t flags, uint8_t known_flags,
                   Record& record) {
  if (state > static_cast<uint8_t>(State::kFailed)) {
    return Corrupt(key, fmt::format("unknown state {}", state));
  }
  record.state = static_cast<State>(state);
  if ((flags & ~known_flags) != 0) return Corrupt(key, fmt::format("unknown flags {}", flags));
  record.retryable = (flags & kRetryableFlag) != 0;
  record.holder.took_over = (flags & kTookOverFlag) != 0;
  return Status::OK();
}

// Kept out of line, so that DecodeTime, called four times a decode, inlines to a range check.
[[gnu::noinline, gnu::cold]] Status TimeOutOfRange(std::string_view key, const char* name,
                                                   int64_t micros) {
  return Corrupt(key,
                 fmt::format("{} time {} us is outside the range of a time point", name, micros));
}

Status DecodeTime(std::string_view key, const char* name, int64_t micros, Record::TimePoint& time) {
  if (!util::MicrosFitTimePoint(micros)) [[unlikely]] {
    return TimeOutOfRange(key, name, micros);
  }
  time = FromMicros(micros);
  return Status::OK();
}

constexpr const char* kNumberDamage =
    "a number of the header runs past the end of the value or is too long";

// The times of versions 3 and 4, each a difference from another, from `rest`, advancing it.
Status DecodeTimes(std::string_view key, int64_t expires, std::string_view& rest, Record& record) {
  uint64_t created = 0, updated = 0, lease_deadline = 0;
  if (!GetVarint(rest, created, 64) || !GetVarint(rest, updated, 64) ||
      !GetVarint(rest, lease_deadline, 64)) {
    return Corrupt(key, kNumberDamage);
  }
  const int64_t created_micros = FromTimeDelta(created, expires);
  const int64_t updated_micros = FromTimeDelta(updated, created_micros);
  IDEM_RETURN_IF_ERROR(DecodeTime(key, "expires", expires, record.expires));
  IDEM_RETURN_IF_ERROR(DecodeTime(key, "created", created_micros, record.created));
  IDEM_RETURN_IF_ERROR(DecodeTime(key, "updated", updated_micros, record.updated));
  return DecodeTime(key, "lease_deadline", FromTimeDelta(lease_deadline, updated_micros),
                    record.lease_deadline);
}

// The holder's pid and start time, varints in versions 3 and 4, from `rest`, advancing it.
Status DecodeHolderProcess(std::string_view key, std::string_view& rest, Holder& holder) {
  if (!GetVarint32(rest, holder.pid) || !GetVarint(rest, holder.process_start, 64)) {
    return Corrupt(key, kNumberDamage);
  }
  return Status::OK();
}

// Version 4's header, from `rest` (the value after its fixed part), advancing it.
Status DecodeHeaderV4(std::string_view key, std::string_view value, std::string_view& rest,
                      Record& record) {
  const char* p = value.data();
  const auto flags = static_cast<uint8_t>(p[10]);
  IDEM_RETURN_IF_ERROR(DecodeState(key, static_cast<uint8_t>(p[9]), flags, kVersion4Flags, record));
  record.token = GetFixed64(p + 11);
  if (!GetVarint32(rest, record.attempts)) return Corrupt(key, kNumberDamage);
  IDEM_RETURN_IF_ERROR(
      DecodeTimes(key, static_cast<int64_t>(GetFixed64(p + kExpiresOffset)), rest, record));
  Holder& holder = record.holder;
  if ((flags & kHolderFlag) == 0) {
    holder = Holder{.took_over = holder.took_over};
    return Status::OK();
  }
  if (rest.size() < 16) return Corrupt(key, "the holder runs past the end of the value");
  holder.request_id = GetFixed64(rest.data());
  holder.pid_scope = GetFixed64(rest.data() + 8);
  rest.remove_prefix(16);
  return DecodeHolderProcess(key, rest, holder);
}

// Version 3's header, from `rest` (the value after its fixed part), advancing it.
Status DecodeHeaderV3(std::string_view key, std::string_view value, std::string_view& rest,
                      Record& record) {
  const char* p = value.data();
  IDEM_RETURN_IF_ERROR(DecodeState(key, static_cast<uint8_t>(p[9]), static_cast<uint8_t>(p[10]),
                                   kStateFlags, record));
  record.token = GetFixed64(p + 11);
  record.holder.request_id = GetFixed64(p + 19);
  record.holder.pid_scope = GetFixed64(p + 27);
  if (!GetVarint32(rest, record.attempts)) return Corrupt(key, kNumberDamage);
  IDEM_RETURN_IF_ERROR(
      DecodeTimes(key, static_cast<int64_t>(GetFixed64(p + kExpiresOffset)), rest, record));
  return DecodeHolderProcess(key, rest, record.holder);
}

// The fixed header of versions 1 and 2.
Status DecodeHeaderV2(std::string_view key, std::string_view value, uint8_t version,
                      Record& record) {
  const char* p = value.data();
  for (const auto& [offset, name, time] :
       {std::tuple<std::size_t, const char*, Record::TimePoint*>{1, "expires", &record.expires},
        {23, "created", &record.created},
        {31, "updated", &record.updated},
        {39, "lease_deadline", &record.lease_deadline}}) {
    IDEM_RETURN_IF_ERROR(
        DecodeTime(key, name, static_cast<int64_t>(GetFixed64(p + offset)), *time));
  }
  IDEM_RETURN_IF_ERROR(DecodeState(key, static_cast<uint8_t>(p[9]), static_cast<uint8_t>(p[10]),
                                   kStateFlags, record));
  record.token = GetFixed64(p + 11);
  record.attempts = GetFixed32(p + 19);
  record.holder.pid = GetFixed32(p + 47);
  record.holder.process_start = GetFixed64(p + 51);
  record.holder.request_id = GetFixed64(p + 59);
  // Version 1 did not say in which boot and namespaces the pid was read: an unknown scope,
  // whose holder is never judged dead before its lease ends.
  record.holder.pid_scope = version == kRecordFormatVersion1 ? 0 : GetFixed64(p + 67);
  return Status::OK();
}

// The size of the part of a `version` value that comes before anything variable (0 for an
// unknown version).
std::size_t FixedPartSize(uint8_t version) {
  switch (version) {
    case kRecordFormatVersion:
      return kFixedHeaderSize;
    case kRecordFormatVersion3:
      return kFixedHeaderSizeV3;
    case kRecordFormatVersion2:
      return kFixedHeaderSizeV2;
    case kRecordFormatVersion1:
      return kFixedHeaderSizeV1;
    default:
      return 0;
  }
}

// The part every version starts with, at `p`: the version, the expiry (kExpiresOffset), the
// state, the flags and the token.
void StoreCommonPrefix(const Record& record, uint8_t version, uint8_t flags, char* p) {
  p[0] = static_cast<char>(version);
  StoreFixed64(p + kExpiresOffset, static_cast<uint64_t>(ToMicros(record.expires)));
  p[9] = static_cast<char>(record.state);
  p[10] = static_cast<char>(flags);
  StoreFixed64(p + 11, record.token);
}

// The varints that follow the fixed part in versions 3 and 4, written at `p`; returns their end.
char* StoreAttemptsAndTimes(const Record& record, char* p) {
  p = StoreVarint(p, record.attempts);
  // Each time from the one it is usually closest to: a record is created its retention before
  // it expires, updated soon after it was created, and leased for a while after its update.
  p = StoreVarint(p, TimeDelta(record.created, record.expires));
  p = StoreVarint(p, TimeDelta(record.updated, record.created));
  return StoreVarint(p, TimeDelta(record.lease_deadline, record.updated));
}

}  // namespace

std::string EncodeRecord(const Record& record) {
  std::string out;
  EncodeRecordInto(record, out);
  return out;
}

void EncodeRecordInto(const Record& record, std::string& out) {
  // The header is built on the stack, then the value written in place into a buffer of the
  // exact size: records are encoded on every write. (resize() keeps `out`'s capacity: a reused
  // buffer allocates nothing.)
  char header[kLongestHeader];
  const bool has_holder = HasHolder(record.holder);
  uint8_t flags = StateFlags(record) | (has_holder ? kHolderFlag : 0);
  for (const TextField& text : kTextFields) {
    if (!(record.*text.field).empty()) flags |= text.flag;
  }
  StoreCommonPrefix(record, kRecordFormatVersion, flags, header);
  char* p = StoreAttemptsAndTimes(record, header + kFixedHeaderSize);
  if (has_holder) {
    StoreFixed64(p, record.holder.request_id);
    StoreFixed64(p + 8, record.holder.pid_scope);
    p = StoreVarint(p + 16, record.holder.pid);
    p = StoreVarint(p, record.holder.process_start);
  }
  const auto header_size = static_cast<std::size_t>(p - header);
  out.resize(header_size + FieldsSize(record, /*all=*/false));
  std::memcpy(out.data(), header, header_size);
  StoreFields(record, /*all=*/false, out.data() + header_size);
}

std::string EncodeRecordAtOlderVersion(const Record& record, uint8_t requested) {
  if (requested != kRecordFormatVersion1 && requested != kRecordFormatVersion2) {
    char header[kLongestHeader];
    StoreCommonPrefix(record, kRecordFormatVersion3, StateFlags(record), header);
    StoreFixed64(header + 19, record.holder.request_id);
    StoreFixed64(header + 27, record.holder.pid_scope);
    char* p = StoreAttemptsAndTimes(record, header + kFixedHeaderSizeV3);
    p = StoreVarint(p, record.holder.pid);
    p = StoreVarint(p, record.holder.process_start);
    std::string out(header, p);
    out.resize(out.size() + FieldsSize(record, /*all=*/true));
    StoreFields(record, /*all=*/true, out.data() + (p - header));
    return out;
  }
  const std::size_t header_size = FixedPartSize(requested);
  std::string out(header_size + FieldsSize(record, /*all=*/true), '\0');
  char* p = out.data();
  StoreCommonPrefix(record, requested, StateFlags(record), p);
  StoreFixed32(p + 19, record.attempts);
  StoreFixed64(p + 23, static_cast<uint64_t>(ToMicros(record.created)));
  StoreFixed64(p + 31, static_cast<uint64_t>(ToMicros(record.updated)));
  StoreFixed64(p + 39, static_cast<uint64_t>(ToMicros(record.lease_deadline)));
  StoreFixed32(p + 47, record.holder.pid);
  StoreFixed64(p + 51, record.holder.process_start);
  StoreFixed64(p + 59, record.holder.request_id);
  if (requested == kRecordFormatVersion2) StoreFixed64(p + 67, record.holder.pid_scope);
  StoreFields(record, /*all=*/true, p + header_size);
  return out;
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
  const std::size_t fixed_size = FixedPartSize(version);
  if (fixed_size == 0) {
    return Corrupt(
        key, fmt::format("unknown record format version {} (this library reads versions 1 to {})",
                         version, kRecordFormatVersion));
  }
  if (value.size() < fixed_size) {
    return Corrupt(key, fmt::format("value is {} bytes, shorter than the header of {}",
                                    value.size(), fixed_size));
  }
  record.key.assign(key);
  record.timed_out = false;  // derived on read, never stored
  std::string_view rest = value.substr(fixed_size);
  switch (version) {
    case kRecordFormatVersion:
      IDEM_RETURN_IF_ERROR(DecodeHeaderV4(key, value, rest, record));
      break;
    case kRecordFormatVersion3:
      IDEM_RETURN_IF_ERROR(DecodeHeaderV3(key, value, rest, record));
      break;
    default:
      IDEM_RETURN_IF_ERROR(DecodeHeaderV2(key, value, version, record));
  }
  return DecodeFields(key, rest, /*all=*/version != kRecordFormatVersion,
                      static_cast<uint8_t>(value[10]), record);
}

std::optional<int64_t> PeekExpiresMicros(std::string_view value) {
  if (value.empty()) return std::nullopt;
  const std::size_t fixed_size = FixedPartSize(static_cast<uint8_t>(value[0]));
  if (fixed_size == 0 || value.size() < fixed_size) return std::nullopt;
  return static_cast<int64_t>(GetFixed64(value.data() + kExpiresOffset));
}

}  // namespace idem::storage
