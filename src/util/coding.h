// Fixed-width integers. Little-endian, as both of idem's encodings write them: the on-disk record
// format (storage/rocksdb/record_codec.h) and the wire protocol (sharing/wire_codec.h); each
// encoding decides its own layout, only the integer coding is shared. Big-endian where byte order
// must be numeric order or a standard says so: the expiry index's keys (storage/rocksdb/layout.h),
// PostgreSQL's binary values (storage/postgres/pg_pool.cc), a UUIDv7's time and counter
// (api/ids.cc).

#ifndef IDEM_UTIL_CODING_H_
#define IDEM_UTIL_CODING_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace idem::util {

// Reverses the byte order: for the big-endian expiry index keys, and for little-endian
// encodings on a big-endian host.
template <class Unsigned>
constexpr Unsigned ByteSwap(Unsigned value) {
  Unsigned out = 0;
  for (std::size_t i = 0; i < sizeof(Unsigned); ++i) {
    out = static_cast<Unsigned>((out << 8) | ((value >> (8 * i)) & 0xFF));
  }
  return out;
}

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
template <class Unsigned>
void StoreBigEndian(char* out, Unsigned value) {
  if constexpr (std::endian::native == std::endian::little) value = ByteSwap(value);
  std::memcpy(out, &value, sizeof(value));
}
template <class Unsigned>
Unsigned GetBigEndian(const char* in) {
  Unsigned value;
  std::memcpy(&value, in, sizeof(value));
  if constexpr (std::endian::native == std::endian::little) value = ByteSwap(value);
  return value;
}

inline void PutFixed32(std::string& out, uint32_t value) {
  char buffer[4];
  StoreFixed32(buffer, value);
  out.append(buffer, sizeof(buffer));
}
inline void PutFixed64(std::string& out, uint64_t value) {
  char buffer[8];
  StoreFixed64(buffer, value);
  out.append(buffer, sizeof(buffer));
}

}  // namespace idem::util

#endif  // IDEM_UTIL_CODING_H_
