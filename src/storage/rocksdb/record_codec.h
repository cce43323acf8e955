// The on-disk encoding of a record's value (the key is the RocksDB key itself).
// Documented in docs/format.md: change it only together with that page and a new version.

#ifndef IDEM_STORAGE_ROCKSDB_RECORD_CODEC_H_
#define IDEM_STORAGE_ROCKSDB_RECORD_CODEC_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "idem/record.h"
#include "idem/status.h"
#include "util/coding.h"
#include "util/time.h"

namespace idem::storage {

// The integer and time coding of the format (times: signed microseconds since the Unix epoch),
// shared with the wire protocol (util/).
using util::ByteSwap;
using util::FromMicros;
using util::GetFixed32;
using util::GetFixed64;
using util::PutFixed32;
using util::PutFixed64;
using util::StoreFixed32;
using util::StoreFixed64;
using util::ToMicros;
using util::TruncateToMicros;

// Never change these values: they are persisted. Version 4 (the one written) stores only what a
// record has: the holder while it is set (a pending claim's; a done or failed record keeps none)
// and the text fields that are not empty, each marked by a flag. Version 3 stored every field,
// the fixed ones first and the times as differences between them; version 2 wrote a fixed
// header of 75 bytes, version 1 (idem 0.1) the same without the holder's pid scope. All are
// still read.
inline constexpr uint8_t kRecordFormatVersion = 4;
inline constexpr uint8_t kRecordFormatVersion3 = 3;
inline constexpr uint8_t kRecordFormatVersion2 = 2;
inline constexpr uint8_t kRecordFormatVersion1 = 1;
// The retention expiry sits at a fixed offset, the same in every version, so the compaction
// filter reads it without decoding the whole record.
inline constexpr std::size_t kExpiresOffset = 1;
// The fixed part of a version 4 value (its varints follow), of a version 3 value, and the
// headers of versions 2 and 1.
inline constexpr std::size_t kFixedHeaderSize = 19;
inline constexpr std::size_t kFixedHeaderSizeV3 = 35;
inline constexpr std::size_t kFixedHeaderSizeV2 = 75;
inline constexpr std::size_t kFixedHeaderSizeV1 = 67;

std::string EncodeRecord(const Record& record);
// The same into `out`, replacing what it held and reusing its buffer.
void EncodeRecordInto(const Record& record, std::string& out);
// `record` in the layout of an older version (1, 2 or 3; any other value: 3), as older releases
// wrote it: for the tests and fuzz seeds of the reader. The store never writes it.
std::string EncodeRecordAtOlderVersion(const Record& record, uint8_t version);

// Decodes a value stored under `key`. kCorruption naming the problem on a damaged value or an
// unknown format version; never reads past `value`.
Result<Record> DecodeRecord(std::string_view key, std::string_view value);
// The same into `record`, reusing its strings' buffers; on an error `record` is left partly
// assigned.
Status DecodeRecordInto(std::string_view key, std::string_view value, Record& record);

// The retention expiry of an encoded value; nullopt when the header is unreadable.
std::optional<int64_t> PeekExpiresMicros(std::string_view value);

}  // namespace idem::storage

#endif  // IDEM_STORAGE_ROCKSDB_RECORD_CODEC_H_
