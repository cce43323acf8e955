// The on-disk encoding of a record's value (the key is the RocksDB key itself).
// Documented in docs/format.md: change it only together with that page and a new version.

#ifndef IDEM_STORAGE_RECORD_CODEC_H_
#define IDEM_STORAGE_RECORD_CODEC_H_

#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "idem/record.h"
#include "idem/status.h"

namespace idem::storage {

// Reverses the byte order: for the big-endian expiry index keys, and for the little-endian
// record format on a big-endian host.
template <class Unsigned>
constexpr Unsigned ByteSwap(Unsigned value) {
  Unsigned out = 0;
  for (std::size_t i = 0; i < sizeof(Unsigned); ++i) {
    out = static_cast<Unsigned>((out << 8) | ((value >> (8 * i)) & 0xFF));
  }
  return out;
}

// Never change these values: they are persisted. Version 2 added the holder's pid scope at the
// end of the fixed header; version 1 values (written by idem 0.1) are still read, with an
// unknown scope.
inline constexpr uint8_t kRecordFormatVersion = 2;
inline constexpr uint8_t kRecordFormatVersion1 = 1;
// The retention expiry sits at a fixed offset, the same in every version, so the compaction
// filter reads it without decoding the whole record.
inline constexpr std::size_t kExpiresOffset = 1;
inline constexpr std::size_t kFixedHeaderSize = 75;
inline constexpr std::size_t kFixedHeaderSizeV1 = 67;

// Times are stored as signed microseconds since the Unix epoch.
int64_t ToMicros(std::chrono::system_clock::time_point time);
std::chrono::system_clock::time_point FromMicros(int64_t micros);
// `time` truncated to what the format stores, so that a record reads back equal.
std::chrono::system_clock::time_point TruncateToMicros(std::chrono::system_clock::time_point time);

std::string EncodeRecord(const Record& record);
// The same into `out`, replacing what it held and reusing its buffer.
void EncodeRecordInto(const Record& record, std::string& out);

// Decodes a value stored under `key`. kCorruption naming the problem on a damaged value or an
// unknown format version; never reads past `value`.
Result<Record> DecodeRecord(std::string_view key, std::string_view value);
// The same into `record`, reusing its strings' buffers; on an error `record` is left partly
// assigned.
Status DecodeRecordInto(std::string_view key, std::string_view value, Record& record);

// The retention expiry of an encoded value; nullopt when the header is unreadable.
std::optional<int64_t> PeekExpiresMicros(std::string_view value);

// Key bytes made printable for messages and logs: printable ASCII as is, others as \xNN,
// cut after `max_bytes`.
std::string EscapeKey(std::string_view key, std::size_t max_bytes = 64);

// The fixed-width little-endian integers of the format.
inline void StoreFixed32(char* out, uint32_t value) {
  if constexpr (std::endian::native != std::endian::little) value = ByteSwap(value);
  std::memcpy(out, &value, sizeof(value));
}
inline void StoreFixed64(char* out, uint64_t value) {
  if constexpr (std::endian::native != std::endian::little) value = ByteSwap(value);
  std::memcpy(out, &value, sizeof(value));
}
inline uint32_t GetFixed32(const char* in) {
  uint32_t value;
  std::memcpy(&value, in, sizeof(value));
  if constexpr (std::endian::native != std::endian::little) value = ByteSwap(value);
  return value;
}
inline uint64_t GetFixed64(const char* in) {
  uint64_t value;
  std::memcpy(&value, in, sizeof(value));
  if constexpr (std::endian::native != std::endian::little) value = ByteSwap(value);
  return value;
}
void PutFixed32(std::string& out, uint32_t value);
void PutFixed64(std::string& out, uint64_t value);

}  // namespace idem::storage

#endif  // IDEM_STORAGE_RECORD_CODEC_H_
